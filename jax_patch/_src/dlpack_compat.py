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

"""Everything that depends on the JAX or jaxlib version.

The only module that reads version numbers: each gate compares jaxlib's
extension version, never a version string, and never catches an error to
guess an API's shape. Supported and measured: jax and jaxlib 0.4.35 to
0.12.1; a newer JAX runs on the newest gates, reported as untested, unless
its DLPack functions take a shape no gate knows (``BINDING_SHAPE_PROBLEM``):
then the patch steps aside for JAX's own. JAX pins jaxlib between its minimum
(for each change gated here, the release that made it) and its own version,
so a jaxlib number also bounds the JAX.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable

from jax._src import core
from jax._src import dtypes
from jax._src import layout as jax_layout
from jax._src import lib
from jax._src import xla_bridge
from jax._src.interpreters import pxla
from jax._src.lib import xla_client

# xla_extension_version up to JAX 0.5, jaxlib_extension_version from 0.6.
EXTENSION_VERSION: int = (getattr(lib, "jaxlib_extension_version", None)
                          or getattr(lib, "xla_extension_version"))

# Measured extension versions of the jaxlib releases that changed our use.
JAXLIB_0_4_35 = 293  # The oldest supported.
JAXLIB_0_5_1 = 317  # jax 0.5.1 moved the jnp scalar types to scalar_types.
JAXLIB_0_5_3 = 320  # DLPack import and export know the float8 types.
JAXLIB_0_6_1 = 342  # Import ignores strides: x.T comes back permuted.
JAXLIB_0_7_2 = 373  # Import refuses strides that are not row-major.
JAXLIB_0_8_0 = 380  # Import reads strides again; device_put mishandles them.
JAXLIB_0_8_1 = 384  # dlpack_managed_tensor_to_buffer takes copy.
JAXLIB_0_10_2 = 467  # dlpack_managed_tensor_to_buffer takes dl_device_type.
JAXLIB_0_11_2 = 495  # A moved alias of any compact layout is right.
JAXLIB_0_12_0 = 505  # DLPack 1.x import and export; 0.12.0.1 shares it.
# Import takes a layout, left defaulted (on the CPU it applies only where the
# strides give it anyway); copy=True copies.
JAXLIB_0_12_1 = 525

OLDEST_TESTED_JAX = "0.4.35"
NEWEST_TESTED_JAX = "0.12.1"
TESTED_RANGE = f"JAX {OLDEST_TESTED_JAX} to {NEWEST_TESTED_JAX}"
# Past the newest measured jaxlib: the newest gates apply, untested.
IS_UNTESTED_JAXLIB = EXTENSION_VERSION > JAXLIB_0_12_1

_BINDING_TAKES_DL_DEVICE_TYPE = EXTENSION_VERSION >= JAXLIB_0_10_2
_BINDING_TAKES_COPY = EXTENSION_VERSION >= JAXLIB_0_8_1

# Whether jaxlib's import reads DLPack 1.x capsules itself (renaming them and
# calling their deleter per the spec). It ignores their flags, READ_ONLY (JAX
# never writes to an import) and IS_COPIED, so the caller reads them.
JAXLIB_READS_VERSIONED_CAPSULES = EXTENSION_VERSION >= JAXLIB_0_12_0

# Whether jaxlib exports a READ_ONLY DLPack 1.x capsule given max_version, of
# its own DLPack version (1.3 on 0.12) whatever 1.x was asked (allowed). It
# marks copies READ_ONLY too, so copies are not exported through it.
JAXLIB_EXPORTS_VERSIONED_CAPSULES = EXTENSION_VERSION >= JAXLIB_0_12_0


def non_row_major_problem(extension_version: int) -> str | None:
  """What goes wrong aliasing a non-row-major compact layout, or ``None``."""
  if extension_version < JAXLIB_0_5_1:
    return "JAX before 0.5.1 cannot compute with such an alias"
  if JAXLIB_0_6_1 <= extension_version < JAXLIB_0_7_2:
    return "jaxlib 0.6.1 to 0.7.1 would read it as row-major"
  if JAXLIB_0_7_2 <= extension_version < JAXLIB_0_8_0:
    return "jaxlib 0.7.2 cannot alias it"
  if JAXLIB_0_8_0 <= extension_version < JAXLIB_0_11_2:
    # 0.8-0.9 permute moved values; 0.10-0.11.1's read right but compute wrong.
    return ("jaxlib 0.8.0 to 0.11.1 would corrupt it when it moves to "
            "another device")
  return None


# Whether any compact layout may be aliased; if not, only row-major ones.
JAXLIB_ALIASES_ANY_COMPACT_LAYOUT = (
    non_row_major_problem(EXTENSION_VERSION) is None)

# Whether jaxlib orders an alias's dimensions by its size-1 ones' strides too
# ((3, 1), strides (1, 3) is then transposed): before 0.5.1, where JAX cannot
# compute with it, and 0.7.2, which refuses it. Others ignore those strides.
JAXLIB_ORDERS_SIZE_ONE_DIMENSIONS = (
    EXTENSION_VERSION < JAXLIB_0_5_1
    or JAXLIB_0_7_2 <= EXTENSION_VERSION < JAXLIB_0_8_0)

_JAXLIB_HAS_DLPACK_FLOAT8 = EXTENSION_VERSION >= JAXLIB_0_5_3
_FLOAT8_TYPE_CODES = frozenset(range(7, 15))


def jax_has_dtype(dtype: Any) -> bool:
  """Whether this JAX has arrays of ``dtype``.

  JAX added float8_e3m4 and float8_e4m3 in 0.4.36, float8_e8m0fnu in 0.5.0.
  """
  # The set check_valid_dtype reads, under this name on every version.
  return dtype in dtypes._jax_dtype_set  # pylint: disable=protected-access


def jaxlib_knows_type_code(code: int) -> bool:
  """Whether jaxlib's DLPack import and export know a DLPack type code."""
  return _JAXLIB_HAS_DLPACK_FLOAT8 or code not in _FLOAT8_TYPE_CODES


if TYPE_CHECKING:
  # mypy reads stubs/jaxlib/_jax.pyi; pyright and pyrefly see it untyped, as
  # stubs/ on their path would stand for all of jax and jaxlib.
  # pyrefly: ignore[missing-module-attribute,missing-import]
  from jaxlib import _jax as _binding  # pyright: ignore[reportAttributeAccessIssue,reportMissingImports]
else:
  # xla_extension to jaxlib 0.6.0, _jax after: xla_client._xla in both.
  _binding = xla_client._xla  # pylint: disable=protected-access

# Whether np.asarray views a CPU array's own buffer, read-only, as measured
# on every supported release; past them the export checks the address.
NUMPY_VIEW_ALIASES_CPU_BUFFERS = not IS_UNTESTED_JAXLIB

# The DLPack version jaxlib's own 1.x capsules carry ((1, 3) on 0.12).
JAXLIB_DLPACK_VERSION: tuple[int, int] | None = (
    (_binding.dlpack_version[0], _binding.dlpack_version[1])
    if JAXLIB_EXPORTS_VERSIONED_CAPSULES else None)

# jaxlib's runtime error (JaxRuntimeError from 0.8; xla_client keeps this).
RuntimeErrorType: type[Exception] = xla_client.XlaRuntimeError

# Where jnp.int8, jnp.bfloat16, ... (SUPPORTED_DTYPES' objects) are defined.
# Typed as a module: pyright and pyrefly would read it as the last import.
scalar_types: types.ModuleType
if EXTENSION_VERSION >= JAXLIB_0_5_1:
  from jax._src.numpy import scalar_types  # type: ignore[attr-defined,no-redef,unused-ignore]
else:
  from jax._src.numpy import lax_numpy as scalar_types  # type: ignore[no-redef,unused-ignore]


def export_legacy_capsule(buffer: Any, stream: int | Any | None) -> Any:
  """Returns a DLPack 0.x capsule aliasing a single-device ``ArrayImpl``."""
  return _binding.buffer_to_dlpack_managed_tensor(buffer, stream=stream)


def export_versioned_capsule(buffer: Any, stream: int | Any | None,
                             max_version: tuple[int, int]) -> Any:
  """Returns a READ_ONLY DLPack 1.x capsule aliasing ``buffer``.

  Only for ``JAXLIB_EXPORTS_VERSIONED_CAPSULES`` and ``max_version >= (1, 0)``.
  """
  return _binding.buffer_to_dlpack_managed_tensor(
      buffer, stream=stream, max_version=max_version)


def expected_binding_parameters() -> dict[str, tuple[str, ...]]:
  """The parameters the gates pass to each jaxlib DLPack function, in order."""
  import_parameters: tuple[str, ...] = ("dlpack", "device", "stream")
  if _BINDING_TAKES_COPY:
    import_parameters += ("copy",)
  if _BINDING_TAKES_DL_DEVICE_TYPE:
    import_parameters += ("dl_device_type",)
  export_parameters: tuple[str, ...] = ("buffer", "stream")
  if JAXLIB_EXPORTS_VERSIONED_CAPSULES:
    export_parameters += ("max_version", "copied")
  return {"dlpack_managed_tensor_to_buffer": import_parameters,
          "buffer_to_dlpack_managed_tensor": export_parameters}


# A documented parameter: its name, and whether it has a default.
Parameter = tuple[str, bool]


def documented_signatures(function: Any) -> list[tuple[Parameter, ...]]:
  """The parameters of each signature nanobind documents for ``function``."""
  name = getattr(function, "__name__", "")
  shapes = []
  for line in (getattr(function, "__doc__", None) or "").splitlines():
    line = re.sub(r"^\d+\.\s*", "", line.strip())  # Numbered overloads.
    if line.startswith(f"{name}(") and ")" in line:
      shapes.append(tuple(_parameters(line[len(name) + 1:line.rindex(")")])))
  return shapes


def _parameters(documented: str) -> Iterator[Parameter]:
  """Each ``name: type [= default]`` of a documented parameter list."""
  depth = 0
  piece = ""
  for char in documented + ",":
    if char == "," and not depth:
      name, colon, rest = piece.partition(":")
      name = name.strip()
      if name.isidentifier():  # Not a bare "*" or "/" marker.
        yield name, "=" in (rest if colon else name)
      piece = ""
      continue
    depth += char in "[("
    depth -= char in "])"
    piece += char


def takes(signature: tuple[Parameter, ...],
          expected: tuple[str, ...]) -> bool:
  """Whether a call passing ``expected`` fits ``signature``.

  It does where ``signature`` starts with them and all later parameters have
  defaults: a jaxlib that gained defaulted parameters is called as before.
  """
  names = tuple(name for name, _ in signature[:len(expected)])
  return names == expected and all(
      has_default for _, has_default in signature[len(expected):])


def binding_shape_problem(binding: Any = None) -> str | None:
  """Says how jaxlib's DLPack functions differ from the gates, if they do.

  Args:
    binding: the module holding them; jaxlib's own by default.
  """
  binding = _binding if binding is None else binding
  for name, expected in expected_binding_parameters().items():
    found = documented_signatures(getattr(binding, name, None))
    if not any(takes(signature, expected) for signature in found):
      shown = [tuple(parameter for parameter, _ in signature)
               for signature in found]
      return (f"jax-patch does not know the shape of jaxlib {lib.version_str}'s "
              f"{name}: it documents {shown or 'no signature'}, where "
              f"jax-patch passes {expected} (extension version "
              f"{EXTENSION_VERSION}; tested: {TESTED_RANGE}).")
  return None


# Why jaxlib's DLPack functions take a shape no gate knows, else None. The
# patch then steps aside (jax_patch._src.dlpack uses JAX's own, install()
# leaves JAX alone), so no call fails where JAX's own would have worked.
BINDING_SHAPE_PROBLEM = binding_shape_problem()


def _bind_import() -> Callable[[Any, Any, int | None, bool | None, int], Any]:
  """The binding, called as this jaxlib's shape of it needs."""
  # From jaxlib 0.10.2 on, jaxlib's own: no adapter's call on the fast paths.
  convert = _binding.dlpack_managed_tensor_to_buffer
  if _BINDING_TAKES_DL_DEVICE_TYPE:
    return convert
  if _BINDING_TAKES_COPY:
    return lambda capsule, device, stream, copy, dl_device_type: convert(
        capsule, device, stream, copy)
  return lambda capsule, device, stream, copy, dl_device_type: convert(
      capsule, device, stream)


# import_buffer(capsule, device, stream, copy, dl_device_type) imports a
# capsule (1.x only where JAXLIB_READS_VERSIONED_CAPSULES), the capsule then
# consumed, or raises RuntimeErrorType, the capsule unconsumed. copy=False:
# jaxlib aliases, never copies; None (only where JAXLIB_COPIES_UNALIGNED):
# it aliases a compact host capsule, or copies it if unaligned (cheapest for
# small arrays, slowest for large).
import_buffer = _bind_import()

# Whether jaxlib can be asked to copy an unaligned host buffer itself.
JAXLIB_COPIES_UNALIGNED = _BINDING_TAKES_COPY


def import_capsule(capsule: Any, device: Any, stream: int | None,
                   dl_device_type: int) -> Any:
  """``import_buffer`` with ``copy=False``: jaxlib aliases, never copies."""
  return import_buffer(capsule, device, stream, False, dl_device_type)



# Whether JAX keeps its trace in jax._src.core context variables (JAX 0.10 on;
# 0.4.36 to 0.9 use a thread-local TracingContext): then the eval trace at the
# top axis environment is the untransformed state, read in two lookups.
_TRACE_CONTEXT = tuple(getattr(core, name, None) for name in (
    "trace_state_strong_ref", "eval_trace", "axis_env_state", "top_axis_env"))
JAX_HAS_TRACE_CONTEXT = None not in _TRACE_CONTEXT


def _bind_trace_state_clean() -> Callable[[], bool]:
  """Whether no JAX transformation (jit, vmap, grad, ...) is being traced.

  ``core.trace_state_clean`` costs a twentieth of a small import. With the
  trace context, two direct reads can say "clean"; it judges anything else.
  """
  if not JAX_HAS_TRACE_CONTEXT:
    clean: Callable[[], bool] = core.trace_state_clean
    return clean
  trace, eval_trace, axis_env, top_axis_env = _TRACE_CONTEXT
  assert trace is not None and axis_env is not None  # For the type checkers.
  return lambda: ((trace.value is eval_trace
                   and axis_env.value is top_axis_env)
                  or core.trace_state_clean())


trace_state_clean = _bind_trace_state_clean()


# jaxlib aliases host memory only at this alignment (XLA's CPU minimum).
CPU_ZERO_COPY_ALIGNMENT = 64


def backends() -> dict[str, Any]:
  """``xla_bridge.backends()``, without its locking once initialised.

  Its identity changes when JAX clears its backends: caches start over then.
  """
  initialised: dict[str, Any] = xla_bridge._backends  # pylint: disable=protected-access
  return initialised or xla_bridge.backends()


# Format from JAX 0.6, Layout before (its DeviceLocalLayout: Layout from 0.7).
FORMAT_TYPE: type[Any] = getattr(jax_layout, "Format", None) or jax_layout.Layout
# As users import it: jax.experimental.layout names it so on every version.
FORMAT_NAME = f"jax.experimental.layout.{FORMAT_TYPE.__name__}"
# Layout.AUTO's class: AutoLayout to JAX 0.9, AutoLayoutSingleton from 0.10.
_AUTO_LAYOUT_TYPE: type[Any] = vars(jax_layout).get("AutoLayoutSingleton",
                                                    jax_layout.AutoLayout)


def format_parts(target_format: Any) -> tuple[Any, Any]:
  """A ``Format``'s device-local layout and sharding, either may be None."""
  if hasattr(target_format, "device_local_layout"):  # Before JAX 0.7.
    return target_format.device_local_layout, target_format.sharding
  return target_format.layout, target_format.sharding


def is_auto_layout(layout: Any) -> bool:
  """Whether ``layout`` is ``Layout.AUTO``, which only ``jit`` can resolve."""
  return isinstance(layout, _AUTO_LAYOUT_TYPE)


# Whether JAX holds CPU arrays in non-default layouts: before 0.5.1 XLA's CPU
# compiler overrides them and JAX fails ("Unexpected XLA layout override").
JAX_HOLDS_CPU_LAYOUTS = EXTENSION_VERSION >= JAXLIB_0_5_1


def layout_of(x: Any) -> Any:
  """The device-local layout single-device ``x`` lies in."""
  array_format = getattr(x, "format", None) or x.layout  # .layout before 0.6.
  return format_parts(array_format)[0]


def layout_matches(requested: Any, actual: Any) -> bool:
  """Whether data in layout ``actual`` is in the ``requested`` layout.

  Untiled, ``requested`` asks only for a dimension order, as in JAX's check.
  """
  return actual is not None and pxla.is_user_xla_layout_equal(requested,
                                                              actual)
