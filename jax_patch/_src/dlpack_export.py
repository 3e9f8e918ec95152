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

"""DLPack export for JAX: ``jax.Array.__dlpack__`` and ``to_dlpack``.

An export asks :func:`dlpack_plan.plan` whether to share or copy ``x``'s
buffer, places the data where the consumer asked and hands over a capsule:
READ_ONLY where it aliases JAX's buffer, IS_COPIED where it holds a copy.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import operator
from typing import Any, cast

import numpy as np

from jax._src import array
from jax._src import dtypes
from jax._src.lax.lax import _array_copy
from jax._src.typing import Array, DLDeviceType
from jax_patch._src import dlpack_capsule
from jax_patch._src import dlpack_compat
from jax_patch._src import dlpack_device
from jax_patch._src import dlpack_plan
from jax_patch._src import dlpack_request

_KDL_CPU = dlpack_device.KDL_CPU
_COPY = dlpack_plan.COPY


def array_dlpack(self: Array, *, stream: int | Any | None = None,
                 max_version: tuple[int, int] | None = None,
                 dl_device: tuple[DLDeviceType | int, int] | None = None,
                 copy: bool | None = None) -> Any:
  """``jax.Array.__dlpack__``: :func:`to_dlpack` of the array, as a method.

  Replaces JAX's method (saving its per-call import). A 1.x request with no
  stream, copy or non-host device takes jaxlib's 1.x export, or without it
  :func:`_export_through_numpy`; all else goes to :func:`to_dlpack`.
  """
  # plan's SHARE or SHARE_OR_COPY cases, inlined; a test keeps them in step.
  if ((copy is None or copy is False) and (stream is None or stream == -1)
      and (dl_device is None or dl_device == dlpack_device.HOST_DL_DEVICE)
      and type(max_version) is tuple and len(max_version) == 2  # pylint: disable=unidiomatic-typecheck
      and max_version >= (1, 0)):
    device = dlpack_device.single_device(self, "to_dlpack")
    if not dlpack_compat.JAXLIB_EXPORTS_VERSIONED_CAPSULES:
      capsule = _export_through_numpy(self, device, max_version)
      if capsule is not None:
        return capsule
    elif dl_device is None or device.platform == "cpu":
      # As to_dlpack: jaxlib's READ_ONLY alias of the array, its only shard.
      try:
        return dlpack_compat.export_versioned_capsule(self, None, max_version)
      except dlpack_compat.RuntimeErrorType:
        # to_dlpack says why; checking the dtype first would cost 6%.
        pass
  return to_dlpack(self, stream=stream, max_version=max_version,
                   dl_device=dl_device, copy=copy)


def to_dlpack(x: Array, stream: int | Any | None = None,
              src_device: Any | None = None,
              dl_device: tuple[DLDeviceType | int, int] | None = None,
              max_version: tuple[int, int] | None = None,
              copy: bool | None = None) -> Any:
  """Returns a DLPack capsule holding the data of a single-device ``x``.

  Args:
    x: a single-device :class:`~jax.Array`.
    stream: the consumer's stream, per the DLPack Python spec: ``None`` (or
      ``-1``, no sync) for host memory; on CUDA and ROCm ``None``, ``1``,
      ``2`` or a stream pointer, never ``0``.
    src_device: ``x``'s device, if the caller knows it.
    dl_device: ``(device_type, device_id)`` wanted; any CPU serves ``kDLCPU``.
    max_version: the newest DLPack version the consumer reads.
    copy: ``True`` always copies; ``False`` never does, raising if it must;
      ``None`` copies only to change device.

  Returns:
    A 1.x capsule if ``max_version`` is at least ``(1, 0)``, else 0.x. A 1.x
    capsule aliases ``x``'s buffer (READ_ONLY) or holds a copy the consumer
    owns (IS_COPIED). A 0.x capsule has no flags: for a 0.x ``max_version``
    it holds a copy; for none (a pre-1.0 consumer) it aliases ``x``, as
    upstream JAX and NumPy do, and the consumer must not write.

  Raises:
    TypeError: ``x`` is not a ``jax.Array``, ``copy`` is not a bool, or
      ``stream`` is not an integer.
    BufferError: ``x``'s dtype has no DLPack type JAX exports (the message
      names it), ``x`` spans several devices, ``dl_device`` names a device
      JAX lacks, or ``stream`` is invalid for ``x``'s device.
    CopyRequiredError: ``copy=False`` but ``dl_device`` needs a transfer, or
      ``max_version`` asks for a 0.x capsule, which cannot be shared safely.
  """
  if not isinstance(x, array.ArrayImpl):
    raise TypeError(f"Argument to to_dlpack must be a jax.Array, got {type(x)}")
  if copy is not None:
    copy = dlpack_request.check_copy(copy, "to_dlpack")
  _check_stream_type(stream)
  # Some JAXs annotate ArrayImpl.dtype as possibly extended; it never is.
  type_code = _export_type_code(cast(np.dtype[Any], x.dtype))
  requested = None if max_version is None else (max_version[0],
                                                 max_version[1])
  obstacle = None
  if requested is not None and requested[0] < 1:
    obstacle = ("a DLPack 0.x capsule cannot mark JAX's immutable buffer "
                "read-only (ask with max_version=(1, 0) or later to share it)")
  if src_device is None:
    src_device = dlpack_device.single_device(x, "to_dlpack")
  target = _export_target(src_device, dl_device)
  # Before any copy: memory DLPack cannot name is refused, not copied.
  dl_type = _exported_dl_device_type(x, src_device, target)
  decision = dlpack_plan.plan(copy, target, src_device, obstacle,
                              caller="to_dlpack",
                              specified=f"max_version={requested}")
  dlpack_device.check_export_stream(stream, dl_type, "to_dlpack")
  if (target is not None and dlpack_device.host_dl_device(target) is not None
      and dlpack_device.host_dl_device(src_device) is None):
    return _export_host_copy(x, requested)
  exported, device, copied = _export_placement(x, src_device, target,
                                               decision)
  if requested is None or requested[0] < 1:
    return _export_capsule(exported, device, stream, type_code)
  if not copied and dlpack_compat.JAXLIB_EXPORTS_VERSIONED_CAPSULES:
    # jaxlib 0.12+ knows every exported dtype and marks its alias READ_ONLY.
    with _jaxlib_refusal_as_buffer_error(device):
      return dlpack_compat.export_versioned_capsule(
          exported.addressable_data(0), _jaxlib_stream(stream), requested)
  if not copied:
    capsule = _export_through_numpy(exported, device, requested)
    if capsule is not None:
      return capsule
  capsule = _export_capsule(exported, device, stream, type_code)
  flags = (dlpack_capsule.FLAG_IS_COPIED if copied
           else dlpack_capsule.FLAG_READ_ONLY)
  return dlpack_capsule.as_versioned_capsule(
      capsule, min(requested, dlpack_capsule.MAX_VERSION), flags)


def _export_host_copy(x: Any, requested: tuple[int, int] | None) -> Any:
  """Exports a host copy of an accelerator array that only the consumer holds.

  Writable (IS_COPIED if 1.x), as PyTorch and CuPy export. NumPy allocates
  it, so no writer gets ``x``'s cached host value, which a move may alias.
  """
  host = np.array(x)  # One transfer (kept as x's host value), one memcpy.
  if host.dtype in dlpack_capsule.NUMPY_EXPORTED_DTYPES:
    producer: Any = host  # NumPy's stubs for pytype lack __dlpack__.
    if requested is None or requested[0] < 1:
      return producer.__dlpack__()
    return dlpack_capsule.mark_copied(
        producer.__dlpack__(max_version=min(requested,
                                            dlpack_capsule.MAX_VERSION)))
  capsule = dlpack_capsule.capsule_for_host_array(host)  # bfloat16, float8.
  if requested is None or requested[0] < 1:
    return capsule
  return dlpack_capsule.as_versioned_capsule(
      capsule, min(requested, dlpack_capsule.MAX_VERSION),
      dlpack_capsule.FLAG_IS_COPIED)


def _export_type_code(dtype: np.dtype[Any]) -> int:
  """DLPack's type code for an export of ``dtype``, if it can be exported.

  The one place that decides: every dtype with a DLPack type, float4_e2m1fn
  packed two to a byte (DLPack 1.1's layout), float8 with DLPack 1.1 codes.
  Codes jaxlib lacks, :func:`_export_capsule` exports from a CPU buffer.

  Raises:
    BufferError: no DLPack type for ``dtype`` that JAX exports (int1, int2,
      int4, their unsigned twins, float6, strings); the message names it.
  """
  code = dlpack_capsule.buffer_type_code(dtype)
  if code is None:
    raise BufferError(
        f"to_dlpack: cannot export an array of {dtype}: DLPack has no type "
        f"for it that JAX exports{_conversion_hint(dtype)}.")
  return code


def _conversion_hint(dtype: np.dtype[Any]) -> str:
  """Says which exportable type to convert ``dtype`` to, if any fits."""
  for kind, wider in ((np.signedinteger, "int8"),
                      (np.unsignedinteger, "uint8"), (np.floating, "float32")):
    if dtypes.issubdtype(dtype, kind):
      return f"; convert it first, say with x.astype(jnp.{wider})"
  return ""


def _export_through_numpy(x: Array, device: Any,
                          requested: tuple[int, int]) -> Any | None:
  """Exports a ``cpu:0`` buffer as NumPy's READ_ONLY 1.x capsule of it.

  The cheapest correct export: NumPy's read-only view aliases the buffer and
  keeps it alive, and NumPy builds the capsule in C. ``None`` for a device
  id other than 0, a dtype NumPy does not export (bfloat16, float8), or a
  view that would be a copy.
  """
  if dlpack_device.host_dl_device(device) != dlpack_device.HOST_DL_DEVICE:
    return None
  # np.asarray reaches jaxlib's own read-only view in C, faster than Python.
  view: Any = np.asarray(x)  # NumPy's stubs for pytype lack __dlpack__.
  if not dlpack_compat.NUMPY_VIEW_ALIASES_CPU_BUFFERS and (
      view.flags.writeable
      or view.ctypes.data != x.unsafe_buffer_pointer()):
    return None  # Not JAX's buffer itself.
  try:
    return view.__dlpack__(max_version=requested)
  except BufferError:
    # A dtype outside NUMPY_EXPORTED_DTYPES: cheaper than checking first.
    return None


def _jaxlib_stream(stream: int | Any | None) -> int | Any | None:
  # -1 asks for no synchronisation, which is what jaxlib does without one.
  return None if stream == -1 else stream


def _export_capsule(x: Any, device: Any, stream: int | Any | None,
                    type_code: int) -> Any:
  """Returns a 0.x capsule aliasing ``x``'s buffer, of DLPack ``type_code``."""
  buffer = x.addressable_data(0)
  if dlpack_compat.jaxlib_knows_type_code(type_code):
    with _jaxlib_refusal_as_buffer_error(device):
      return dlpack_compat.export_legacy_capsule(buffer,
                                                 _jaxlib_stream(stream))
  if device.platform != "cpu":
    raise BufferError(
        f"to_dlpack: jaxlib before 0.5.3 cannot export {x.dtype} from "
        f"{device}.")
  # float8: a CPU buffer's NumPy view aliases, awaits and keeps it alive.
  view = np.asarray(buffer)
  if view.ctypes.data != buffer.unsafe_buffer_pointer():
    raise BufferError(
        f"to_dlpack: this jaxlib cannot export {x.dtype} without a copy.")
  return dlpack_capsule.capsule_for_host_array(
      view, device.local_hardware_id or 0)


def _export_target(src_device: Any,
                   dl_device: tuple[Any, int] | None) -> Any | None:
  """The device a consumer's ``dl_device`` asks for; ``None`` to stay.

  Raises:
    BufferError: ``dl_device`` names a platform this JAX has no backend for.
  """
  if dl_device is None:
    return None
  requested = (int(dl_device[0]), int(dl_device[1]))
  if requested[0] == _KDL_CPU and src_device.platform == "cpu":
    return None  # All CPU devices share host memory.
  target = dlpack_device.jax_device_for(requested, exporting=True)
  if target is None:
    raise BufferError(
        f"to_dlpack: dl_device={dl_device} names a platform this JAX has no "
        "backend for.")
  return target


def _export_placement(x: Any, src_device: Any, target: Any | None,
                      decision: dlpack_plan.Decision) -> tuple[Any, Any, bool]:
  """Returns ``x``, a copy, or ``x`` moved; its device; whether it copied."""
  if target is None or target == src_device:
    if decision is _COPY:
      return _array_copy(x), src_device, True
    return x, src_device, False
  return dlpack_device.place(x, target), target, True


def _check_stream_type(stream: Any) -> None:
  """Raises ``TypeError`` for a ``stream`` that is not an integer."""
  if stream is None:
    return
  try:
    operator.index(stream)
  except TypeError:
    raise TypeError(
        f"to_dlpack: stream must be an integer or None, got {stream!r} of "
        f"type {type(stream).__name__}.") from None


def _exported_dl_device_type(x: Any, src_device: Any,
                              target: Any | None) -> int:
  """The DLPack device type of the memory exported: ``x``'s or ``target``'s.

  Raises:
    BufferError: DLPack cannot name that memory (TPU device memory, say).
  """
  device, memory_kind = ((src_device, x.sharding.memory_kind)
                         if target is None else (target, None))
  code = dlpack_device.dl_device_type_of(device, memory_kind)
  if code is None:
    raise BufferError(dlpack_device.unnameable_memory_message(
        "to_dlpack", device, memory_kind))
  return code


@contextlib.contextmanager
def _jaxlib_refusal_as_buffer_error(device: Any) -> Iterator[None]:
  """Turns jaxlib's refusal to export into the standard's ``BufferError``."""
  try:
    yield
  except dlpack_compat.RuntimeErrorType as err:
    raise BufferError(
        f"to_dlpack: jaxlib cannot export this array from {device}: {err}"
    ) from err
