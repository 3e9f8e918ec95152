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

"""DLPack import for JAX, following the Python Array API standard.

A drop-in for ``jax/_src/dlpack.py``, re-exporting :mod:`dlpack_export`.
Each import is a request (:mod:`dlpack_request`), a negotiation, one plan
(:mod:`dlpack_plan`), its route's import, and the placement.
"""

from __future__ import annotations

from collections.abc import Callable
import math
import sys
from typing import Any, TypeVar

import numpy as np

from jax._src import array
from jax._src import dtypes
from jax._src.lax.lax import _array_copy
from jax._src.typing import Array, DLDeviceType, DTypeLike
from jax_patch._src import dlpack_capsule
from jax_patch._src import dlpack_compat
from jax_patch._src import dlpack_device
from jax_patch._src import dlpack_errors
from jax_patch._src import dlpack_export
from jax_patch._src import dlpack_plan
from jax_patch._src import dlpack_request

CopyRequiredError = dlpack_errors.CopyRequiredError
InvalidDeviceError = dlpack_errors.InvalidDeviceError
MissingDLPackMethodsError = dlpack_errors.MissingDLPackMethodsError
TransformationError = dlpack_errors.TransformationError
UnsupportedDeviceError = dlpack_errors.UnsupportedDeviceError
# The export half of jax/_src/dlpack.py, which has both.
array_dlpack = dlpack_export.array_dlpack
to_dlpack = dlpack_export.to_dlpack

__all__ = [
    "CopyRequiredError", "DLDeviceType", "DLPACK_VERSION",
    "InvalidDeviceError", "MIN_DLPACK_VERSION", "MissingDLPackMethodsError",
    "SUPPORTED_DTYPES", "SUPPORTED_DTYPES_SET", "TransformationError",
    "UnsupportedDeviceError", "from_dlpack", "is_supported_dtype", "to_dlpack",
]

# The newest DLPack version to_dlpack exports; from_dlpack reads up to it.
DLPACK_VERSION = dlpack_capsule.MAX_VERSION
MIN_DLPACK_VERSION = (0, 5)

jnp_types = dlpack_compat.scalar_types

# Look up with a scalar type, not a dtype instance: their hashes differ.
SUPPORTED_DTYPES: frozenset[DTypeLike] = frozenset({
    jnp_types.int8, jnp_types.int16, jnp_types.int32, jnp_types.int64,
    jnp_types.uint8, jnp_types.uint16, jnp_types.uint32, jnp_types.uint64,
    jnp_types.float16, jnp_types.bfloat16, jnp_types.float32,
    jnp_types.float64, jnp_types.complex64, jnp_types.complex128,
    jnp_types.bool_})

SUPPORTED_DTYPES_SET: frozenset[np.dtype[Any]] = frozenset(
    {np.dtype(dt) for dt in SUPPORTED_DTYPES})

_KDL_CPU = dlpack_device.KDL_CPU
# plan's answers, as globals: the fast paths read them at every import.
_SHARE = dlpack_plan.SHARE
_SHARE_OR_COPY = dlpack_plan.SHARE_OR_COPY
_COPY = dlpack_plan.COPY
# The copy values dlpack_request.of would leave as they are.
_PLAIN_COPY_TYPES = frozenset({bool, type(None)})


def is_supported_dtype(dtype: DTypeLike) -> bool:
  """Checks if ``dtype`` is supported by ``jax.dlpack``."""
  if dtype is None:
    # NumPy would silently read None as float64.
    raise TypeError(f"Expected a string or dtype-like object; got {dtype=}")
  return np.dtype(dtype) in SUPPORTED_DTYPES_SET


def from_dlpack(external_array: Any,
                device: dlpack_device.Target | None = None,
                copy: bool | None = None) -> Array:
  """``jax.dlpack.from_dlpack``: :func:`array_api_from_dlpack` as JAX spells it.

  ``device`` and ``copy`` may be passed by position too.
  """
  return array_api_from_dlpack(external_array, device=device, copy=copy)


_Function = TypeVar("_Function", bound=Callable[..., Any])


def _called(name: str) -> Callable[[_Function], _Function]:
  """Renames a function in errors and tracebacks: its code, not a wrapper."""
  def rename(function: _Function) -> _Function:
    if sys.version_info >= (3, 11):
      code = function.__code__.replace(co_name=name, co_qualname=name)
    else:
      code = function.__code__.replace(co_name=name)
    function.__code__ = code
    function.__name__ = function.__qualname__ = name
    return function
  return rename


@_called("from_dlpack")
def array_api_from_dlpack(x: Any, /, *,
                          device: dlpack_device.Target | None = None,
                          copy: bool | None = None) -> Array:
  """Returns a :class:`~jax.Array` holding the data of a DLPack array.

  The Array API standard's ``from_dlpack`` (``jax.numpy``'s, as is): request
  (:func:`dlpack_request.of`), negotiation (``_negotiate_*``), one plan
  (:func:`dlpack_plan.plan`), the route's import, and :func:`_place`.

  Args:
    x: an object with ``__dlpack__`` and ``__dlpack_device__`` methods (a
      NumPy array, a torch tensor, a ``jax.Array``, ...).
    device: ``None`` keeps the producer's device; a ``jax.Device`` or a
      single-device ``Sharding`` places the result on that device, a
      multi-device ``Sharding`` replicates or shards it, and a ``Format``
      places it on its sharding in its layout.
    copy: ``True`` always returns an independent buffer; ``False`` never
      copies (the result shares memory with ``x``, or an error is raised);
      ``None`` shares memory where possible and copies otherwise.

  Sharing is possible when the data lies on ``device`` (if given), in its
  memory kind and layout, 64-byte aligned on the CPU, in row-major order (or
  compact in any dimension order, where jaxlib handles that soundly:
  ``dlpack_compat.non_row_major_problem``), with a dtype that needs no
  canonicalisation (with ``jax_enable_x64`` off, 64-bit types become 32-bit
  ones). Zero-size arrays have no memory to share and are always returned
  fresh. docs/behaviour.md's table gives what each source and target comes to.

  Returns:
    A ``jax.Array``. A shared one aliases the producer's memory: writes to
    the producer's array show through it.

  Raises:
    TypeError: ``copy`` is not a bool or ``None``.
    InvalidDeviceError: (a ``TypeError`` and ``ValueError``) ``device`` is
      not a device, sharding or ``Format``.
    ValueError: ``device`` is a ``Format`` whose layout is ``Layout.AUTO``,
      or one this JAX cannot hold a CPU array in.
    MissingDLPackMethodsError: (an ``AttributeError`` and ``TypeError``)
      ``x`` lacks ``__dlpack__`` or ``__dlpack_device__``.
    UnsupportedDeviceError: (a ``BufferError`` and ``TypeError``) the array
      lives on a device type JAX cannot read.
    CopyRequiredError: (a ``BufferError`` and ``ValueError``) ``copy=False``
      but a copy is needed; the message says why.
    BufferError: the producer cannot export the array (its own
      ``BufferError`` propagates unchanged), or the array lives on a
      platform this JAX has no backend for and no host device was given.
    TransformationError: called while tracing a JAX transformation.
    MemoryError: a copy the import needs (of every element, for a broadcast
      tensor) does not fit in memory.
  """
  if device is None and type(copy) in _PLAIN_COPY_TYPES:
    target = layout = None  # The commonest request, already as plans read it.
  else:
    target, layout, copy = dlpack_request.of(device, copy)
  if not dlpack_compat.trace_state_clean():
    raise dlpack_request.transformation_error()
  # The negotiation: jax.Arrays, and NumPy arrays and torch tensors jaxlib
  # takes as they are, say what they are; others are asked for a capsule.
  kind = type(x)
  if kind is np.ndarray:
    negotiated = (_negotiate_numpy(x, target)
                  or _negotiate_capsule(x, target, copy))
  elif isinstance(x, array.ArrayImpl):
    negotiated = _negotiate_jax_array(x)
  elif kind is _torch_tensor_type():
    negotiated = _negotiate_torch(x) or _negotiate_capsule(x, target, copy)
  else:
    negotiated = _negotiate_capsule(x, target, copy)
  route, source, obstacle, read_only, producer_copied, held = negotiated
  # The one plan, then its execution: the route's import, the placement.
  decision = dlpack_plan.plan(copy, target, source, obstacle, read_only,
                              producer_copied)
  # Into a layout, a copy is made by the placement into it: not twice.
  imported = route(held, source, _SHARE_OR_COPY
                   if layout is not None and decision is _COPY else decision)
  if target is None and layout is None:
    return imported  # Placed already: the commonest request, spared a call.
  return _place(imported, target, layout, decision, device)


# A negotiation's answer: the route, the device (or jax.Array) holding the
# data, the plan's facts (obstacle, read-only, producer copied), what the
# route takes.
_Route = Callable[[Any, Any, dlpack_plan.Decision], Array]
_Negotiated = tuple[_Route, Any, "str | None", bool, bool, Any]


def _torch_tensor_type() -> type[Any] | None:
  """``torch.Tensor`` once something imported torch, else ``None``.

  It and ``numpy.ndarray`` (not subclasses) make a capsule per call. Found,
  it brings torch's dtypes (``_torch_dtype_twins``) with it.
  """
  if _torch_tensor[0] is None:
    torch: Any = sys.modules.get("torch")
    if hasattr(torch, "Tensor"):  # Not while torch is being imported.
      _torch_dtype_twins.update(
          (getattr(torch, name), np.dtype(name)) for name in (
              "bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
              "uint32", "uint64", "float16", "float32", "float64",
              "complex64", "complex128") if hasattr(torch, name))
      _torch_tensor[0] = torch.Tensor  # After its dtypes: threads read both.
  return _torch_tensor[0]


# Found once torch is imported: the patch never imports it. The twins are
# torch's dtypes that have a NumPy twin, keyed by the torch dtype.
_torch_tensor: list[type[Any] | None] = [None]
_torch_dtype_twins: dict[Any, np.dtype[Any]] = {}


def _negotiate_numpy(x: np.ndarray[Any, Any],
                     target: dlpack_device.Target | None
                     ) -> _Negotiated | None:
  """A NumPy array jaxlib takes as it is; ``None`` for the capsule route.

  A C-contiguous array of a dtype JAX keeps, whose flags say all its capsule
  would: NumPy's own capsule, made here, goes to jaxlib unchecked (NumPy
  filled it; :func:`_import_as_is`). To an accelerator, any exported one, in
  one hop (:func:`_move_numpy`).
  """
  if (target is not None and x.dtype in dlpack_capsule.NUMPY_EXPORTED_DTYPES
      and not dlpack_device.is_host(target)):
    return (_move_numpy, dlpack_device.host_device(), None, False, False,
            (x, target))
  flags = x.flags
  dtype = x.dtype
  if (not flags.c_contiguous or not x.nbytes  # Zero for zero-size arrays.
      # The narrow test first spares the commonest dtypes a call.
      or (dtype not in _NARROW_EXPORTED_DTYPES
          and not _numpy_exports_as_kept(dtype))
      or (dlpack_compat.JAXLIB_ORDERS_SIZE_ONE_DIMENSIONS and 1 in x.shape)):
    return None
  host = dlpack_device.host_device()
  if host is None:
    return None  # No CPU backend: the capsule route says what follows.
  producer: Any = x  # NumPy's stubs for pytype lack __dlpack__.
  writable = flags.writeable
  address: int | None
  if writable:
    capsule, address = producer.__dlpack__(), None
  elif dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES:
    capsule, address = producer.__dlpack__(
        max_version=dlpack_capsule.MAX_VERSION), None
  else:  # READ_ONLY is 1.x only: a 0.x structure holds the 1.x capsule.
    capsule, address = dlpack_capsule.legacy_capsule_of_read_only(x)
  if dlpack_compat.JAXLIB_COPIES_UNALIGNED:
    address = None  # jaxlib checks the alignment itself.
  elif writable:
    address = dlpack_capsule.writable_buffer_address(x)
  return (_import_as_is, host, None, not writable, False,
          (x, capsule, address, x.nbytes))


def _import_through_capsule(x: Any, decision: dlpack_plan.Decision) -> Array:
  """Imports what a fast route declined through its capsule, as planned.

  ``SHARE`` raises where the capsule shows what the fast route could not.
  """
  route, source, obstacle, _, _, held = _negotiate_capsule(x, None, None)
  if obstacle is not None and decision is not _COPY:
    decision = dlpack_plan.sharing_failed(decision, obstacle)
  return route(held, source, decision)


def _move_numpy(held: tuple[np.ndarray[Any, Any], dlpack_device.Target],
                source: Any, decision: dlpack_plan.Decision) -> Array:
  """Moves a NumPy array onto an accelerator in one hop.

  A move copies (the plan refuses ``copy=False``). jaxlib reads the array as
  it lies, maybe after ``device_put`` returns: the result comes back once
  the transfer is done, so later writes to the source never show in it.
  """
  del source, decision  # A move is a copy.
  x, target = held
  return _finished(dlpack_device.place(x, target))


def _negotiate_torch(tensor: Any) -> _Negotiated | None:
  """A CPU torch tensor jaxlib takes as it is; ``None`` for the capsule route.

  Contiguous, of a dtype JAX keeps: torch's capsule then needs no reading.
  """
  dtype = _torch_dtype_twins.get(tensor.dtype)
  if dtype is None or not tensor.is_cpu or not tensor.is_contiguous():
    return None
  nbytes = tensor.numel() * dtype.itemsize  # Cheaper than tensor.nbytes.
  if (not nbytes
      or (dtype not in _NARROW_EXPORTED_DTYPES
          and not _numpy_exports_as_kept(dtype))
      or (dlpack_compat.JAXLIB_ORDERS_SIZE_ONE_DIMENSIONS
          and 1 in tensor.shape)):
    return None
  host = dlpack_device.host_device()
  if host is None:
    return None  # No CPU backend: the capsule route says what follows.
  return _import_torch, host, None, False, False, (tensor, nbytes)


def _import_torch(held: tuple[Any, int], source: Any,
                  decision: dlpack_plan.Decision) -> Array:
  """Imports a torch tensor :func:`_negotiate_torch` took, as planned.

  torch's ``__dlpack__`` makes the capsule (0.x where jaxlib reads only 0.x),
  refusing as on the capsule route (grad-requiring tensors, conjugate views),
  and torch's C deleter releases it. Otherwise as :func:`_import_as_is`.
  """
  tensor, nbytes = held
  if decision is _COPY:
    return _import_through_capsule(tensor, decision)
  if dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES:
    capsule = tensor.__dlpack__(max_version=dlpack_capsule.MAX_VERSION)
  else:
    capsule = tensor.__dlpack__()
  address = (None if dlpack_compat.JAXLIB_COPIES_UNALIGNED
             else tensor.data_ptr())
  return _import_as_is((tensor, capsule, address, nbytes), source, decision)


def _import_as_is(held: tuple[Any, Any, int | None, int], source: Any,
                  decision: dlpack_plan.Decision) -> Array:
  """Hands a producer's own host capsule of ``x`` to jaxlib, as planned.

  ``held``: ``(x, capsule, address, nbytes)``. With ``address`` ``None``,
  jaxlib checks the alignment, and may copy small data under
  ``SHARE_OR_COPY`` (their fastest copy); else only an aligned ``address``
  is imported. A copy, and what jaxlib declines, take the capsule route.
  """
  x, capsule, address, nbytes = held
  if decision is _COPY:
    return _import_through_capsule(x, decision)
  jaxlib_copies: bool | None = False  # None lets jaxlib copy.
  if address is None:
    if decision is _SHARE_OR_COPY and nbytes <= _JAXLIB_COPY_MAX_BYTES:
      jaxlib_copies = None
  elif address % dlpack_compat.CPU_ZERO_COPY_ALIGNMENT:
    return _import_through_capsule(x, decision)
  try:
    result = dlpack_compat.import_buffer(capsule, source, None, jaxlib_copies,
                                         _KDL_CPU)
  except dlpack_compat.RuntimeErrorType:
    return _import_through_capsule(x, decision)
  if (decision is _SHARE and address is not None
      and result.unsafe_buffer_pointer() != address):
    dlpack_plan.sharing_failed(decision, _JAXLIB_COPIED)  # Raises.
  imported: Array = result
  return imported


def _numpy_exports_as_kept(dtype: np.dtype[Any]) -> bool:
  """Whether NumPy exports ``dtype`` and JAX keeps it as it is."""
  # JAX changes only 64-bit types, and only with jax_enable_x64 off.
  return dtype in _NARROW_EXPORTED_DTYPES or (
      dtype in dlpack_capsule.NUMPY_EXPORTED_DTYPES
      and _canonical_dtype(dtype) == dtype)


_NARROW_EXPORTED_DTYPES = frozenset(
    dtype for dtype in dlpack_capsule.NUMPY_EXPORTED_DTYPES
    if dtype.itemsize < 8)


def _check_dlpack_methods(external_array: Any) -> None:
  if (hasattr(external_array, "__dlpack__")
      and hasattr(external_array, "__dlpack_device__")):
    return
  missing = [name for name in ("__dlpack__", "__dlpack_device__")
             if not hasattr(external_array, name)]
  hint = ""
  if dlpack_capsule.is_capsule(external_array):
    hint = (" Raw DLPack capsules are not accepted: pass the array that "
            "produced the capsule instead.")
  raise MissingDLPackMethodsError(
      "The array passed to from_dlpack must have __dlpack__ and "
      f"__dlpack_device__ methods. This {type(external_array).__name__} "
      f"object has no {' or '.join(missing)}, so it does not support "
      f"DLPack.{hint}")


# What a copy=False import that jaxlib copied anyway raises.
_JAXLIB_COPIED = "jaxlib copied the data it was given"


def _place(imported: Array, target: dlpack_device.Target | None,
           layout: Any, decision: dlpack_plan.Decision,
           device: object) -> Array:
  """Places an import where the request asked: the last step of each call.

  A move copies: the plan refused it under ``copy=False``. Another memory
  kind or layout than asked for, which the plan could not see, is copied
  into as well (``copy=False`` refuses it, naming ``device``). Under
  ``copy=True`` into a layout, the copy is made here.
  """
  obstacle = dlpack_device.placement_obstacle(imported, target, layout)
  if obstacle is None:
    if layout is None or decision is not _COPY:
      return imported
    return _finished(dlpack_device.place(
        imported, dlpack_compat.FORMAT_TYPE(layout, imported.sharding),
        may_alias=False))
  if not dlpack_device.moves(imported, target):
    dlpack_plan.sharing_failed(decision, obstacle, f"device={device!r}")
  return _finished(dlpack_device.place_in_format(imported, layout, target))


def _finished(copied: Array) -> Array:
  """Returns ``copied`` once the copy or transfer making it has finished.

  The producer may change or free what it read once from_dlpack returns.
  """
  return copied.block_until_ready()


def _negotiate_jax_array(x: Array) -> _Negotiated:
  """A ``jax.Array``, taken without DLPack; only x64 narrowing bars sharing."""
  dtype = x.dtype
  canonical = _canonical_dtype(dtype)
  if canonical == dtype:
    return _import_jax_array, x, None, False, False, x
  return (_narrow_jax_array, x, _narrowing(dtype, canonical), False, False,
          (x, canonical))


def _import_jax_array(x: Array, source: Any,
                      decision: dlpack_plan.Decision) -> Array:
  """Returns the array, or as planned its copy (``device_put`` may alias)."""
  del source  # The array.
  if decision is _COPY:
    return _array_copy(x)
  return x


def _narrow_jax_array(held: tuple[Array, Any], source: Any,
                      decision: dlpack_plan.Decision) -> Array:
  """Returns the array as the dtype x64 off holds it: the plan's copy."""
  del source, decision  # The array; a copy.
  x, canonical = held
  return x.astype(canonical)


def _consumer_stream(external_array: Any, dl_device: tuple[int, int],
                     source: Any) -> int | None:
  """Returns the stream the producer must make the data ready on."""
  if dl_device[0] in dlpack_device.HOST_DEVICE_TYPES:
    # Pinned host tensors export as CPU ones (torch): only stream None works.
    return None
  if _is_tensorflow_tensor(external_array):
    return None  # TensorFlow's __dlpack__ takes no stream.
  try:
    stream: int = source.get_stream_for_external_ready_events()
  except dlpack_compat.RuntimeErrorType as err:
    if "UNIMPLEMENTED" in str(err):
      return None
    raise
  return stream


def _is_tensorflow_tensor(external_array: Any) -> bool:
  t = type(external_array)
  return (t.__qualname__ == "EagerTensor"
          and t.__module__.endswith("tensorflow.python.framework.ops"))


def _request_capsule(external_array: Any, stream: int | None,
                     copy: bool | None,
                     dl_device: tuple[int, int] | None = None) -> Any:
  """Calls ``__dlpack__`` with only the keywords this import needs.

  A producer raising ``TypeError`` at a keyword is asked again without
  ``dl_device`` and ``copy`` (the import checks ``copy=False`` itself), then
  with ``stream`` alone; a ``dl_device`` request raises ``BufferError``.
  """
  if copy is None and dl_device is None:
    # The commonest request, asked without building the attempts below.
    try:
      return external_array.__dlpack__(
          stream=stream, max_version=dlpack_capsule.MAX_VERSION)
    except TypeError:
      return external_array.__dlpack__(stream=stream)
  attempts: list[dict[str, Any]] = [
      {"stream": stream, "max_version": dlpack_capsule.MAX_VERSION}]
  extra: dict[str, Any] = {}
  if dl_device is not None:
    extra["dl_device"] = dl_device
  if copy is False or (dl_device is not None and copy is not None):
    extra["copy"] = copy
  if extra:
    attempts.insert(0, {**attempts[0], **extra})
  attempts.append({"stream": stream})
  for kwargs in attempts[:-1]:
    try:
      return external_array.__dlpack__(**kwargs)
    except TypeError as err:
      if dl_device is not None:
        raise BufferError(
            "from_dlpack: the producer's __dlpack__ does not accept "
            "dl_device, so it cannot be asked for a copy in host memory."
        ) from err
  return external_array.__dlpack__(**attempts[-1])


def _negotiate_capsule(x: Any, target: dlpack_device.Target | None,
                       copy: bool | None) -> _Negotiated:
  """Asks any producer for its capsule, and reads it.

  Only a bool ``copy`` is passed on (the producer may copy, saying so, or
  refuse); a platform JAX lacks is not asked yet (:func:`_negotiate_foreign`).
  """
  _check_dlpack_methods(x)
  dl_device = dlpack_device.dlpack_device_of(x)
  source = dlpack_device.jax_device_for(dl_device)
  if source is None:
    return _negotiate_foreign(x, dl_device, target, copy)
  stream = _consumer_stream(x, dl_device, source)
  kind = type(x)
  is_torch_tensor = kind is _torch_tensor_type()
  if (is_torch_tensor and copy is None
      and not dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES):
    # torch's 0.x capsule says all its 1.x would; this jaxlib reads it as is.
    capsule = x.__dlpack__(stream=stream)
  else:
    capsule = _request_capsule(x, stream, copy)
  return _read_capsule(x, capsule, source, dl_device[0], stream,
                       fresh=is_torch_tensor or kind is np.ndarray)


def _read_capsule(producer: Any, capsule: Any, source: Any,
                  dl_device_type: int, stream: int | None,
                  fresh: bool = False) -> _Negotiated:
  """Claims and reads ``capsule``: what it holds, and its route.

  ``producer`` made it; an import of a tensor with a NULL deleter holds it.
  ``fresh``: the producer makes a new capsule per call. For both, see
  :func:`dlpack_capsule.take`. ``source`` is ``__dlpack_device__``'s device.
  """
  # `capsule` now owns the producer's memory: `held` keeps it for the import.
  capsule, info = dlpack_capsule.take(
      capsule,
      versioned_ok=dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES,
      fresh=fresh, keep_alive=producer)
  if info.device[0] != dl_device_type:
    if not _is_pinned_host_as_cpu(info.device[0], dl_device_type):
      raise BufferError(
          f"from_dlpack: the capsule is on DLDeviceType {info.device[0]} "
          f"but __dlpack_device__ said {dl_device_type}.")
    # torch says kDLCUDAHost for a pinned tensor, its capsule kDLCPU: host.
    source = dlpack_device.host_device()
    dl_device_type = _KDL_CPU
  if not dlpack_compat.jax_has_dtype(info.dtype):
    raise BufferError(
        f"from_dlpack: the DLPack tensor's dtype is {info.dtype}, which this "
        "JAX does not have.")
  canonical = _canonical_dtype(info.dtype)
  if dl_device_type != _KDL_CPU:
    return _device_route(capsule, info, source, dl_device_type, stream,
                         canonical)
  obstacle = _why_host_copy(info, canonical)
  return (_import_host, source, obstacle, info.read_only, info.is_copied,
          (capsule, info, canonical, obstacle))


def _device_route(capsule: Any, info: dlpack_capsule.TensorInfo, source: Any,
                  dl_device_type: int, stream: int | None,
                  canonical: np.dtype[Any]) -> _Negotiated:
  """The route of a read accelerator capsule, and what stands in its way.

  A dtype that narrows, or a layout jaxlib or XLA cannot take: asking jaxlib
  despite a refusal could import the data permuted.
  """
  narrowing = (None if canonical == info.dtype
               else _narrowing(info.dtype, canonical))
  layout = _why_jaxlib_cannot_read(info) or _why_xla_cannot_compute_on(
      info, dl_device_type)
  return (_import_device, source, narrowing or layout, info.read_only,
          info.is_copied, (capsule, info, canonical, dl_device_type, stream,
                           narrowing, layout))


def _import_host(held: tuple[Any, dlpack_capsule.TensorInfo, np.dtype[Any],
                              str | None],
                 source: Any, decision: dlpack_plan.Decision) -> Array:
  """Imports a host tensor: shares it, or copies it once into aligned memory.

  ``held``: the capsule, its info, JAX's dtype for it, and why jaxlib cannot
  alias it (or ``None``), which the plan knew. A copy the producer made is
  not copied again, where the plan was made before the capsule was read (for
  a platform JAX lacks).
  """
  capsule, info, canonical, obstacle = held
  if obstacle is None and decision is _COPY and info.is_copied:
    decision = _SHARE_OR_COPY  # The producer's copy is the copy asked for.
  if decision is not _COPY and info.size:
    # Zero-size data has no memory to alias: it comes back fresh below.
    try:
      result = dlpack_compat.import_capsule(capsule, source, None, _KDL_CPU)
    except dlpack_compat.RuntimeErrorType as err:
      # The capsule is still ours.
      dlpack_plan.sharing_failed(decision, f"jaxlib cannot alias it ({err})")
    else:
      if (decision is _SHARE
          and result.unsafe_buffer_pointer() != info.address):
        dlpack_plan.sharing_failed(decision, _JAXLIB_COPIED)  # Raises.
      imported: Array = result
      return imported
  elif (info.address % dlpack_compat.CPU_ZERO_COPY_ALIGNMENT
        and dlpack_compat.JAXLIB_COPIES_UNALIGNED and canonical == info.dtype
        and _why_jaxlib_cannot_read(info) is None):
    copied: Array | None = _import_small_unaligned(capsule, info, source)
    if copied is not None:
      return copied
  fresh: Array = _import_host_copy(info, source, canonical)
  return fresh


def _is_pinned_host_as_cpu(capsule_type: int, reported_type: int) -> bool:
  """Whether a capsule says kDLCPU for memory reported as pinned host."""
  return (capsule_type == _KDL_CPU and reported_type != _KDL_CPU
          and reported_type in dlpack_device.HOST_DEVICE_TYPES)


# jaxlib copies unaligned data fastest up to this size; np.copyto above it.
_JAXLIB_COPY_MAX_BYTES = 1 << 16


def _import_small_unaligned(capsule: Any, info: dlpack_capsule.TensorInfo,
                            source: Any) -> Any | None:
  """Lets jaxlib copy a small unaligned host tensor; ``None`` if it won't."""
  if (info.size * info.dtype.itemsize > _JAXLIB_COPY_MAX_BYTES
      or not _is_compact(info.shape, info.strides)):
    return None
  try:
    return dlpack_compat.import_buffer(capsule, source, None, None, _KDL_CPU)
  except dlpack_compat.RuntimeErrorType:
    return None


def _canonical_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
  # Only the 64-bit types change, and only with jax_enable_x64 off.
  if dtype.itemsize < 8 or dtype.kind not in "iufc":
    return dtype
  canonical: np.dtype[Any] = dtypes.canonicalize_dtype(dtype)
  return canonical


def _why_host_copy(info: dlpack_capsule.TensorInfo,
                   canonical: np.dtype[Any]) -> str | None:
  """Says why jaxlib cannot alias a host tensor; ``None`` if it can."""
  if info.dtype != canonical:
    return _narrowing(info.dtype, canonical)
  if info.address % dlpack_compat.CPU_ZERO_COPY_ALIGNMENT:
    # Upstream's words: code matches on them.
    return (f"the source data buffer is not aligned to "
            f"{dlpack_compat.CPU_ZERO_COPY_ALIGNMENT} bytes")
  if not info.size:
    # No element, no layout: a fresh buffer shares all there is. Unaligned,
    # it is refused above, as upstream does: code relies on that.
    return None
  if not _is_compact(info.shape, info.strides):
    return (f"strides {info.strides} (in elements, for shape {info.shape}) "
            "are not a compact layout")
  return _why_jaxlib_cannot_read(info)


def _narrowing(dtype: Any, canonical: Any) -> str:
  return (f"its dtype {dtype} becomes {canonical} with jax_enable_x64 off "
          "(enable it to share 64-bit data)")


def _why_jaxlib_cannot_read(info: dlpack_capsule.TensorInfo) -> str | None:
  """Says why this jaxlib cannot import the tensor as it is, if it cannot."""
  if not dlpack_compat.jaxlib_knows_type_code(info.dl_dtype[0]):
    return f"jaxlib before 0.5.3 cannot import {info.dtype} through DLPack"
  if dlpack_compat.JAXLIB_ALIASES_ANY_COMPACT_LAYOUT:
    return None
  if not _is_row_major(info.shape, info.strides):
    order = "are not row-major"
  elif (dlpack_compat.JAXLIB_ORDERS_SIZE_ONE_DIMENSIONS
        and not _strides_never_grow(info.strides)):
    order = ("are not row-major to this jaxlib, which orders size-1 "
             "dimensions by their strides too")
  else:
    return None
  problem = dlpack_compat.non_row_major_problem(
      dlpack_compat.EXTENSION_VERSION)
  return (f"strides {info.strides} (in elements, for shape {info.shape}) "
          f"{order}, and {problem}")


def _is_row_major(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
  """Whether the strides are C order; a dimension of size 1 has any stride."""
  if strides == (1,):
    return True  # The commonest answer, without the loop.
  expected = 1
  for dim, stride in zip(reversed(shape), reversed(strides)):
    if dim != 1 and stride != expected:
      return False
    expected *= dim
  return True


def _strides_never_grow(strides: tuple[int, ...]) -> bool:
  """Whether sorting dimensions by stride, as jaxlib does, keeps C order."""
  return all(outer >= inner for outer, inner in zip(strides, strides[1:]))


def _is_compact(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
  """Whether the strides tile memory densely in some dimension order."""
  expected = 1
  for stride, dim in sorted((s, d) for d, s in zip(shape, strides) if d != 1):
    if stride != expected:
      return False
    expected *= dim
  return True


def _import_host_copy(info: dlpack_capsule.TensorInfo, source: Any,
                      canonical: np.dtype[Any]) -> Any:
  """Copies a host tensor once, as ``canonical``, into memory jaxlib aliases.

  The caller keeps ``info``'s capsule, which owns the memory read, alive.
  """
  copied = aligned_empty(info.shape, canonical)
  np.copyto(copied, dlpack_capsule.host_view(info), casting="unsafe")
  return _adopt_host_copy(copied, source)


def _adopt_host_copy(copied: np.ndarray[Any, Any], source: Any) -> Any:
  """Hands an aligned array nothing else references to JAX on ``source``."""
  code = dlpack_capsule.dl_type_code(copied.dtype)
  if code is not None and dlpack_compat.jaxlib_knows_type_code(code):
    return dlpack_compat.import_capsule(
        dlpack_capsule.capsule_for_host_array(copied), source, None, _KDL_CPU)
  # Older jaxlibs lack this dtype in DLPack; device_put may alias the copy.
  return dlpack_device.place(copied, source)


def aligned_empty(shape: tuple[int, ...],
                  dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
  """A new C-contiguous array whose data jaxlib's CPU client aliases.

  Its ``base`` is a ``uint8`` block up to one alignment longer, which owns
  the memory. jax_patch's public ``aligned_empty`` checks the arguments.
  """
  alignment = dlpack_compat.CPU_ZERO_COPY_ALIGNMENT
  nbytes = math.prod(shape) * dtype.itemsize
  raw = np.empty(nbytes + alignment, np.uint8)
  start = -raw.ctypes.data % alignment
  # Not a reshaped view: a zero-size one would lose its aligned data pointer.
  return np.ndarray(shape, dtype, buffer=raw, offset=start)


def _import_device(held: tuple[Any, ...], source: Any,
                   decision: dlpack_plan.Decision) -> Array:
  """Imports an accelerator tensor; copies, when needed, on the device.

  ``held`` is what :func:`_read_capsule` found, with the plan's obstacles (a
  dtype that narrows, a layout jaxlib or XLA cannot take).
  """
  capsule, info, canonical, dl_device_type, stream, narrowing, layout = held
  if layout is None:
    try:
      result = dlpack_compat.import_capsule(capsule, source, stream,
                                            dl_device_type)
    except dlpack_compat.RuntimeErrorType as err:
      layout = f"jaxlib cannot alias it ({err})"  # The capsule is still ours.
      dlpack_plan.sharing_failed(decision, layout)
  if layout is not None:
    return gather_on_device(capsule, info, source, stream, dl_device_type,
                            canonical, _device_alignment(dl_device_type))
  if narrowing is not None:
    return _finished(result.astype(canonical))
  if decision is _COPY:
    return _finished(_array_copy(result))
  imported: Array = result
  return imported


# XLA GPU entry parameters need 16-byte alignment (kEntryParameterAlignBytes),
# else CUDA_ERROR_MISALIGNED_ADDRESS may fail this and every later launch.
_XLA_GPU_ALIGNMENT = 16


def _device_alignment(dl_device_type: int) -> int:
  """The byte alignment XLA needs of device memory of ``dl_device_type``."""
  if dl_device_type in (dlpack_device.KDL_CUDA, dlpack_device.KDL_ROCM):
    return _XLA_GPU_ALIGNMENT
  return 1


def _why_xla_cannot_compute_on(info: dlpack_capsule.TensorInfo,
                               dl_device_type: int) -> str | None:
  """Why an alias of device data would break XLA's executables, if it would.

  A view starting mid-allocation (``t[1:]``, a CuPy ``[::3, ::-2]``) may be
  off XLA's alignment: jaxlib aliases it and the first computation fails.
  It is gathered on the device into aligned memory (``copy=False`` refuses).
  """
  alignment = _device_alignment(dl_device_type)
  if not info.address % alignment or not math.prod(info.shape):
    return None
  return (f"its data starts at {info.address:#x}, not a multiple of "
          f"{alignment} bytes, where XLA's GPU executables cannot read it")


def gather_on_device(capsule: Any, info: dlpack_capsule.TensorInfo,
                     source: Any, stream: int | None, dl_device_type: int,
                     canonical: np.dtype[Any], align: int = 1) -> Array:
  """Copies a tensor jaxlib cannot alias as laid out, on its own device.

  Strided (``x[::2]``), reversed, broadcast or, where jaxlib mishandles them,
  permuted layouts: the span of ``capsule`` (unconsumed) is aliased as one
  row-major vector, which every jaxlib reads, starting at a multiple of
  ``align`` bytes (:func:`_device_alignment`), and gathered into a fresh
  row-major array. Only the gather reads the producer's memory, released
  when the gather has finished, before this returns.

  Raises:
    BufferError: the span is too long to index with ``jax_enable_x64`` off,
      or jaxlib cannot import the span.
  """
  index_dtype = _canonical_dtype(np.dtype(np.int64))
  span_capsule, first, count = dlpack_capsule.as_span_capsule(capsule, info,
                                                              align)
  if count > np.iinfo(index_dtype).max:
    raise BufferError(
        f"from_dlpack: this strided {source.platform} tensor spans more "
        f"elements than {index_dtype} indexes; enable jax_enable_x64 or make "
        "it contiguous in the producer.")
  try:
    span = dlpack_compat.import_capsule(span_capsule, source, stream,
                                        dl_device_type)
  except dlpack_compat.RuntimeErrorType as err:
    raise BufferError(
        f"from_dlpack: jaxlib cannot import this {source.platform} tensor "
        f"({err}).") from None
  if canonical != span.dtype:
    # First: JAX before 0.5 cannot index a dtype jax_enable_x64 rules out.
    span = span.astype(canonical)
  offsets = first + _element_offsets(info.shape, info.strides)
  return _finished(
      span[dlpack_device.place(offsets.astype(index_dtype), source)])


def _element_offsets(shape: tuple[int, ...],
                     strides: tuple[int, ...]) -> np.ndarray[Any, Any]:
  """Each element's offset from the first, in row-major order of ``shape``."""
  offsets = np.zeros(shape, np.int64)
  for axis, (dim, stride) in enumerate(zip(shape, strides)):
    along = np.arange(dim, dtype=np.int64) * stride
    offsets += along.reshape((dim,) + (1,) * (len(shape) - axis - 1))
  return offsets


def _negotiate_foreign(x: Any, dl_device: tuple[int, int],
                       target: dlpack_device.Target | None,
                       copy: bool | None) -> _Negotiated:
  """A source on a platform this JAX has no backend for.

  Only a host target takes its one route, the standard's copy in host
  memory, asked for only once the plan allows that copy.

  Raises:
    BufferError: no host target was given.
  """
  platform = dlpack_device.platform_of(dl_device)
  if target is None or not dlpack_device.is_host(target):
    raise BufferError(
        f"from_dlpack: the array is on {platform}, which this JAX has no "
        "backend for. Pass device=jax.devices('cpu')[0] to import a copy in "
        "host memory.")
  obstacle = (f"the source device is on {platform}, which this JAX has no "
              "backend for, and must be copied to host memory")
  return (_import_foreign, dlpack_device.host_device(), obstacle, False,
          False, (x, copy))


def _import_foreign(held: tuple[Any, bool | None], source: Any,
                    decision: dlpack_plan.Decision) -> Array:
  """Imports the host copy of a source on a platform JAX lacks, as planned.

  An IS_COPIED host copy is the copy the plan asked for (:func:`_import_host`).
  """
  x, copy = held
  capsule = _request_capsule(x, None, copy,
                             dl_device=dlpack_device.HOST_DL_DEVICE)
  route, source, _, _, _, capsule_held = _read_capsule(
      x, capsule, source, _KDL_CPU, None)
  return route(capsule_held, source, decision)


def _step_aside() -> None:
  """Makes this module's entry points JAX's own.

  Guessing at bindings no gate knows (``dlpack_compat.BINDING_SHAPE_PROBLEM``)
  could fail or worse; ``install`` then leaves JAX as is and says why.
  """
  from jax._src import dlpack as jax_dlpack  # pylint: disable=g-import-not-at-top
  from jax._src.numpy import lax_numpy  # pylint: disable=g-import-not-at-top
  globals().update(
      from_dlpack=jax_dlpack.from_dlpack, to_dlpack=jax_dlpack.to_dlpack,
      array_api_from_dlpack=lax_numpy.from_dlpack,
      array_dlpack=array.ArrayImpl.__dlpack__)


if dlpack_compat.BINDING_SHAPE_PROBLEM is not None:
  _step_aside()
