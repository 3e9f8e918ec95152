# Copyright 2026 The jax-patch Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Routes the running JAX's DLPack entry points through this patch.

``install`` replaces as one step ``from_dlpack`` in ``jax.dlpack``,
``jax.numpy`` and ``jax._src.dlpack``, every ``to_dlpack``, and the array's
``__dlpack__`` and ``__dlpack_device__``; ``uninstall`` puts them back.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from typing import Any

# (module or class, attribute name, value)
_Patch = tuple[Any, str, Any]

_lock = threading.RLock()
# What install() replaced, as (module, name, original); None if not.
_originals: list[_Patch] | None = None


def _patches() -> list[_Patch]:
  """Returns (module, name, replacement) for every patched entry point."""
  # Imported here: jax.numpy must be importable before install() is called.
  import jax
  import jax.dlpack
  import jax.numpy
  from jax._src import array
  from jax._src import dlpack as jax_src_dlpack
  from jax_patch._src import dlpack
  from jax_patch._src import dlpack_device
  from jax_patch._src.numpy import lax_numpy
  return [
      (jax.dlpack, "from_dlpack", dlpack.from_dlpack),
      (jax.numpy, "from_dlpack", lax_numpy.from_dlpack),
      (jax_src_dlpack, "from_dlpack", dlpack.from_dlpack),
      # jax.Array.__dlpack__ imports this per call; the method is replaced too.
      (jax_src_dlpack, "to_dlpack", dlpack.to_dlpack),
      (array.ArrayImpl, "__dlpack__", dlpack.array_dlpack),
      (array.ArrayImpl, "__dlpack_device__",
       dlpack_device.dlpack_device_of_array),
  ] + [patch for module in (jax.dlpack, vars(jax).get("util"))
       for patch in _public_to_dlpack(module, dlpack.to_dlpack)]


def _public_to_dlpack(module: Any, replacement: Any) -> list[_Patch]:
  """Patches ``module.to_dlpack`` where this JAX still has it.

  JAX 0.6 serves it (and ``jax.util``'s) as a deprecated alias through
  ``__getattr__``, which a set attribute shadows; 0.7 removed both.
  """
  if module is None:
    return []
  _, deprecated = vars(module).get("_deprecations", {}).get("to_dlpack",
                                                            (None, None))
  if "to_dlpack" in vars(module) or deprecated is not None:
    return [(module, "to_dlpack", replacement)]
  return []


# The original of an attribute added to shadow an alias: restoring deletes.
_ABSENT = object()


def _original(target: Any, name: str) -> Any:
  if name not in vars(target) and name in vars(target).get("_deprecations",
                                                           {}):
    return _ABSENT  # Not read through getattr: that would cache the alias.
  return getattr(target, name)


def _set(target: Any, name: str, value: Any) -> None:
  if value is _ABSENT:
    delattr(target, name)
  else:
    setattr(target, name, value)


def apply_patches(patches: list[_Patch]) -> list[_Patch]:
  """Sets every attribute in ``patches``, or none of them.

  Returns:
    The replaced attributes, as ``(module, name, original)``.

  Raises:
    AttributeError: a module lacks a name to replace; nothing was changed.
    Exception: setting an attribute failed; those already set are restored.
  """
  originals = [(module, name, _original(module, name))
               for module, name, _ in patches]
  applied: list[_Patch] = []
  try:
    for (module, name, replacement), original in zip(patches, originals):
      _set(module, name, replacement)
      applied.append(original)
  except BaseException:
    restore(applied)
    raise
  return originals


def restore(originals: list[_Patch]) -> None:
  """Puts back ``originals``, last replaced first."""
  for module, name, original in reversed(originals):
    _set(module, name, original)


class UntestedJaxWarning(UserWarning):
  """The running JAX is newer than every release the patch was tested on."""


def untested_jax_message() -> str | None:
  """Says that the running JAX is past the tested range; ``None`` if not."""
  import jax
  from jax._src import lib
  from jax_patch._src import dlpack_compat
  if not dlpack_compat.IS_UNTESTED_JAXLIB:
    return None
  return (f"JAX {jax.__version__} (jaxlib {lib.version_str}) is untested: "
          f"jax-patch was tested on {dlpack_compat.TESTED_RANGE}.")


def stepped_aside_message(why: str) -> str:
  """Says that the patch leaves JAX's own functions in place, and ``why``."""
  import jax
  from jax._src import lib
  return (f"jax-patch leaves JAX {jax.__version__} (jaxlib {lib.version_str}) "
          f"as it is, with JAX's own from_dlpack and __dlpack__: {why} "
          "`jax-patch check` compares JAX's own with the patch case by case.")


# Whether install() has warned about an untested JAX: once a process.
_warned_untested = False


def _warn_once(message: str | None) -> None:
  global _warned_untested
  if message is not None and not _warned_untested:
    _warned_untested = True
    warnings.warn(message, UntestedJaxWarning, stacklevel=3)


def _smoke_error() -> Exception | None:
  """What a NumPy/JAX round trip through the current entry points raises."""
  import jax.numpy as jnp
  import numpy as np
  try:
    imported: Any = jnp.from_dlpack(np.arange(4, dtype=np.float32))
    np.from_dlpack(imported)  # JAX's stubs lack __dlpack__'s keywords.
    jnp.from_dlpack(imported, copy=True)
  except Exception as err:  # pylint: disable=broad-except
    return err
  return None


def install() -> None:
  """Patches the running JAX. Calling it again does nothing.

  On a JAX newer than the tested range it warns (``UntestedJaxWarning``)
  once a process. Where jaxlib's DLPack functions take a shape the patch
  does not know, or there a round trip fails through the patch but not
  through JAX's own, it leaves JAX's own functions in place and warns so.
  """
  global _originals
  with _lock:
    if _originals is not None:
      return
    from jax_patch._src import dlpack_compat
    if dlpack_compat.BINDING_SHAPE_PROBLEM is not None:
      _warn_once(stepped_aside_message(dlpack_compat.BINDING_SHAPE_PROBLEM))
      return
    _originals = apply_patches(_patches())
    if not dlpack_compat.IS_UNTESTED_JAXLIB:
      return
    error = _smoke_error()
    if error is not None:
      restore(_originals)
      if _smoke_error() is None:  # JAX's own works: keep it.
        _originals = None
        _warn_once(stepped_aside_message(
            f"a round trip through the patch raised "
            f"{type(error).__name__}: {error}"))
        return
      _originals = apply_patches(_patches())  # JAX's own fails as well.
    _warn_once(untested_jax_message())


def uninstall() -> None:
  """Restores exactly what :func:`install` replaced. Idempotent."""
  global _originals
  with _lock:
    if _originals is not None:
      restore(_originals)
      _originals = None


def is_installed() -> bool:
  return _originals is not None


@contextlib.contextmanager
def patched() -> Iterator[None]:
  """Installs the patch for the ``with`` block.

  On exit it uninstalls the patch only if it was not installed on entry.
  """
  with _lock:
    was_installed = is_installed()
    install()
  try:
    yield
  finally:
    if not was_installed:
      uninstall()
