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

This is the only module that reads version numbers. Each gate compares the
extension version jaxlib reports, never a version string, and never catches
an error to guess which shape an API has. Where the same name works on every
supported version (``xla_client._xla`` for the binding module,
``xla_client.XlaRuntimeError`` for its error), there is no gate at all.

Supported: jax and jaxlib 0.4.35 to 0.12.1, each measured. A newer JAX
(a later release, or JAX's main branch) runs on the newest gates, and is
reported as untested. Where its jaxlib's DLPack functions only gained
parameters with defaults, the patch calls them as before; where they took a
shape no gate knows, ``BINDING_SHAPE_PROBLEM`` says so and the patch steps
aside for JAX's own functions (``jax_patch._src.dlpack``, ``install``) rather
than guess. JAX pins jaxlib to at most its own version and at least its
minimum, which for every change gated here is the release that made it, so
a jaxlib number also bounds the JAX beside it.
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

# jax._src.lib names the number xla_extension_version up to JAX 0.5 and
# jaxlib_extension_version from 0.6 on; both are jaxlib's xla_client._version.
EXTENSION_VERSION: int = (getattr(lib, "jaxlib_extension_version", None)
                          or getattr(lib, "xla_extension_version"))

# The jaxlib releases that changed what this patch uses, by extension version
# (each measured on the release's wheel).
JAXLIB_0_4_35 = 293  # The oldest supported.
JAXLIB_0_5_1 = 317  # jax 0.5.1 moved the jnp scalar types to scalar_types.
JAXLIB_0_5_3 = 320  # DLPack import and export know the float8 types.
JAXLIB_0_6_1 = 342  # Import ignores strides: x.T comes back permuted.
JAXLIB_0_7_2 = 373  # Import refuses strides that are not row-major.
JAXLIB_0_8_0 = 380  # Import reads strides again; device_put mishandles them.
JAXLIB_0_8_1 = 384  # dlpack_managed_tensor_to_buffer takes copy.
JAXLIB_0_10_2 = 467  # dlpack_managed_tensor_to_buffer takes dl_device_type.
JAXLIB_0_11_2 = 495  # A moved alias of any compact layout is right.
# Import reads DLPack 1.x capsules; export writes them (max_version, copied).
# 0.12.0 and 0.12.0.1 share the number.
JAXLIB_0_12_0 = 505
# dlpack_managed_tensor_to_buffer takes a layout (a defaulted parameter the
# patch leaves alone: on the CPU jaxlib applies it only where it equals the
# layout the strides give, which the import reads anyway); copy=True copies.
JAXLIB_0_12_1 = 525

# The releases this patch was measured on, oldest and newest.
OLDEST_TESTED_JAX = "0.4.35"
NEWEST_TESTED_JAX = "0.12.1"
TESTED_RANGE = f"JAX {OLDEST_TESTED_JAX} to {NEWEST_TESTED_JAX}"
# Whether the running jaxlib is past the newest measured one: its gates are
# the newest ones, untested.
IS_UNTESTED_JAXLIB = EXTENSION_VERSION > JAXLIB_0_12_1

_BINDING_TAKES_DL_DEVICE_TYPE = EXTENSION_VERSION >= JAXLIB_0_10_2
_BINDING_TAKES_COPY = EXTENSION_VERSION >= JAXLIB_0_8_1

# Whether jaxlib's import reads DLPack 1.x (``"dltensor_versioned"``)
# capsules itself, and then renames them and calls their deleter as the spec
# says. It ignores their flags: READ_ONLY data is aliased (JAX never writes
# into an import) and IS_COPIED is not checked, so the caller reads them.
JAXLIB_READS_VERSIONED_CAPSULES = EXTENSION_VERSION >= JAXLIB_0_12_0

# Whether jaxlib's export writes a DLPack 1.x capsule when asked with
# ``max_version``: READ_ONLY set, its own DLPack version (1.3 on 0.12) whatever
# 1.x minor was asked for, which the standard allows. Its copy is marked
# READ_ONLY too, so copies are not exported through it.
JAXLIB_EXPORTS_VERSIONED_CAPSULES = EXTENSION_VERSION >= JAXLIB_0_12_0


def non_row_major_problem(extension_version: int) -> str | None:
  """What goes wrong when jaxlib aliases a compact layout other than C order.

  A transposed array, say. ``None`` where nothing does: jaxlib 0.5.1 to
  0.6.0, and 0.11.2 on.
  """
  if extension_version < JAXLIB_0_5_1:
    return "JAX before 0.5.1 cannot compute with such an alias"
  if JAXLIB_0_6_1 <= extension_version < JAXLIB_0_7_2:
    return "jaxlib 0.6.1 to 0.7.1 would read it as row-major"
  if JAXLIB_0_7_2 <= extension_version < JAXLIB_0_8_0:
    return "jaxlib 0.7.2 cannot alias it"
  if JAXLIB_0_8_0 <= extension_version < JAXLIB_0_11_2:
    # 0.8 and 0.9 permute the moved values; 0.10 and 0.11.0-0.11.1 move
    # values that read right but compute wrong.
    return ("jaxlib 0.8.0 to 0.11.1 would corrupt it when it moves to "
            "another device")
  return None


# Whether a tensor jaxlib aliases in any compact layout is then right
# everywhere; where not, only row-major tensors are aliased.
JAXLIB_ALIASES_ANY_COMPACT_LAYOUT = (
    non_row_major_problem(EXTENSION_VERSION) is None)

# Whether jaxlib orders an alias's dimensions by the strides of its size-1
# dimensions too: (3, 1) with strides (1, 3) is then a transposed layout.
# Before 0.5.1 JAX cannot compute with that alias; 0.7.2 refuses it. Other
# releases give size-1 dimensions the row-major place whatever their stride.
JAXLIB_ORDERS_SIZE_ONE_DIMENSIONS = (
    EXTENSION_VERSION < JAXLIB_0_5_1
    or JAXLIB_0_7_2 <= EXTENSION_VERSION < JAXLIB_0_8_0)

_JAXLIB_HAS_DLPACK_FLOAT8 = EXTENSION_VERSION >= JAXLIB_0_5_3
# DLPack's type codes for the float8 types.
_FLOAT8_TYPE_CODES = frozenset(range(7, 15))


def jax_has_dtype(dtype: Any) -> bool:
  """Whether this JAX has arrays of ``dtype``.

  JAX added float8_e3m4 and float8_e4m3 in 0.4.36, float8_e8m0fnu in 0.5.0:
  what DLPack and ml_dtypes can carry, an older JAX may not hold.
  """
  # The set check_valid_dtype reads, under this name on every version.
  return dtype in dtypes._jax_dtype_set  # pylint: disable=protected-access


def jaxlib_knows_type_code(code: int) -> bool:
  """Whether jaxlib's DLPack import and export know a DLPack type code."""
  return _JAXLIB_HAS_DLPACK_FLOAT8 or code not in _FLOAT8_TYPE_CODES


if TYPE_CHECKING:
  # stubs/jaxlib/_jax.pyi describes every shape the binding has had; mypy
  # reads it (mypy_path). To pyright and pyrefly the binding is untyped:
  # jaxlib ships no stub for it, and stubs/ on their path would be all of
  # jax (stubs/jax) and jaxlib to them.
  # pyrefly: ignore[missing-module-attribute,missing-import]
  from jaxlib import _jax as _binding  # pyright: ignore[reportAttributeAccessIssue,reportMissingImports]
else:
  # xla_extension up to jaxlib 0.6.0, _jax after; xla_client names it _xla
  # in both.
  _binding = xla_client._xla  # pylint: disable=protected-access

# Whether NumPy's view of a CPU array (``np.asarray``) is the array's own
# buffer, read-only: measured on every supported release. Past them the
# export checks the address each time.
NUMPY_VIEW_ALIASES_CPU_BUFFERS = not IS_UNTESTED_JAXLIB

# The DLPack version jaxlib's own 1.x capsules carry ((1, 3) on 0.12).
JAXLIB_DLPACK_VERSION: tuple[int, int] | None = (
    (_binding.dlpack_version[0], _binding.dlpack_version[1])
    if JAXLIB_EXPORTS_VERSIONED_CAPSULES else None)

# The error jaxlib raises when a runtime call fails (JaxRuntimeError from
# jaxlib 0.8, which xla_client still exports under this name).
RuntimeErrorType: type[Exception] = xla_client.XlaRuntimeError

# The module defining jnp.int8, jnp.bfloat16, ...: jax._src.dlpack's
# SUPPORTED_DTYPES holds those objects. Typed as a module: which one depends
# on the version, and pyright and pyrefly would read it as the last import.
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

  Only for ``JAXLIB_EXPORTS_VERSIONED_CAPSULES``, and a ``max_version`` of at
  least ``(1, 0)``. The capsule carries jaxlib's own DLPack version.
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

  It does where ``signature`` starts with those parameters and every
  parameter after them has a default: a jaxlib that gained parameters with
  defaults is called as before.
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


# Where jaxlib's DLPack functions take a shape no gate knows, why (a JAX past
# the tested range); None otherwise. The patch then steps aside: its entry
# points are JAX's own (jax_patch._src.dlpack) and install() leaves JAX as it
# is, so that no call fails where JAX's own would have worked.
BINDING_SHAPE_PROBLEM = binding_shape_problem()


def _bind_import(
    copy: bool | None) -> Callable[[Any, Any, int | None, int], Any]:
  """The binding, called as this jaxlib's shape of it needs, with ``copy``.

  Bound once: every import calls it, and the binding's shape does not
  change. Parameters a newer jaxlib added after these keep their defaults.
  """
  convert = _binding.dlpack_managed_tensor_to_buffer
  if _BINDING_TAKES_DL_DEVICE_TYPE:
    return lambda capsule, device, stream, dl_device_type: convert(
        capsule, device, stream, copy, dl_device_type)
  if _BINDING_TAKES_COPY:
    return lambda capsule, device, stream, dl_device_type: convert(
        capsule, device, stream, copy)
  return lambda capsule, device, stream, dl_device_type: convert(
      capsule, device, stream)


# import_capsule(capsule, device, stream, dl_device_type) hands a capsule to
# jaxlib, which must not copy it: a DLPack 0.x capsule on every version, a
# 1.x one only where JAXLIB_READS_VERSIONED_CAPSULES. It returns the ArrayImpl
# aliasing the capsule's memory, which jaxlib has consumed, or raises
# RuntimeErrorType where jaxlib cannot alias it, leaving the capsule
# unconsumed.
import_capsule = _bind_import(False)

# Whether jaxlib can be asked to copy an unaligned host buffer itself.
JAXLIB_COPIES_UNALIGNED = _BINDING_TAKES_COPY

# import_aliasing_or_copying(capsule, device, stream, dl_device_type), only
# for JAXLIB_COPIES_UNALIGNED, hands jaxlib a compact host capsule to alias,
# or to copy if unaligned: jaxlib's copy is the cheapest for small arrays and
# the slowest for large ones. It raises RuntimeErrorType, leaving the capsule
# unconsumed, where jaxlib cannot import it (say, non-compact strides).
import_aliasing_or_copying = _bind_import(None)


# Whether JAX keeps its current trace in context variables of jax._src.core
# (JAX 0.10 on; 0.4.36 to 0.9 keep it in a thread-local TracingContext):
# then the eval trace at the top axis environment is the untransformed
# state, read in two lookups.
_TRACE_CONTEXT = tuple(getattr(core, name, None) for name in (
    "trace_state_strong_ref", "eval_trace", "axis_env_state", "top_axis_env"))
JAX_HAS_TRACE_CONTEXT = None not in _TRACE_CONTEXT


def _bind_trace_state_clean() -> Callable[[], bool]:
  """Whether no JAX transformation (jit, vmap, grad, ...) is being traced.

  ``core.trace_state_clean`` answers on every version, through a method and
  two properties: a twentieth of a small import, which asks at every call.
  Where the trace context exists its two values are read directly; they
  suffice to say "clean" (no trace, no tracer, nothing to bake in), and
  anything else is left to ``core.trace_state_clean`` to judge.
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

  The dict is replaced, not mutated, when JAX clears its backends, so its
  identity tells a cache of devices when to start over.
  """
  initialised: dict[str, Any] = xla_bridge._backends  # pylint: disable=protected-access
  return initialised or xla_bridge.backends()


# device=Format(layout, sharding): the class is jax._src.layout.Format from
# JAX 0.6 and Layout before it (whose device-local layout was then
# DeviceLocalLayout, and is Layout from 0.7).
FORMAT_TYPE: type[Any] = getattr(jax_layout, "Format", None) or jax_layout.Layout
# As users import it: jax.experimental.layout names it so on every version.
FORMAT_NAME = f"jax.experimental.layout.{FORMAT_TYPE.__name__}"
# Layout.AUTO's class: an instance of it is AUTO (a class of that name up to
# JAX 0.9, AutoLayoutSingleton from 0.10, when AutoLayout became the instance).
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


# Whether JAX can hold a CPU array in a layout other than the default: before
# 0.5.1 XLA's CPU compiler overrides the layout asked for, and JAX fails
# ("Unexpected XLA layout override"), as it does computing with such an alias.
JAX_HOLDS_CPU_LAYOUTS = EXTENSION_VERSION >= JAXLIB_0_5_1


def layout_of(x: Any) -> Any:
  """The device-local layout single-device ``x`` lies in."""
  array_format = getattr(x, "format", None) or x.layout  # .layout before 0.6.
  return format_parts(array_format)[0]


def layout_matches(requested: Any, actual: Any) -> bool:
  """Whether data in layout ``actual`` is in the ``requested`` layout.

  A requested layout without a tiling asks only for its dimension order, as
  JAX compares a user's layout with the one XLA chose.
  """
  return actual is not None and pxla.is_user_xla_layout_equal(requested,
                                                              actual)
