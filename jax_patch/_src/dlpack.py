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

A drop-in replacement for ``jax/_src/dlpack.py``, whose export half
(``to_dlpack``, ``jax.Array.__dlpack__``) lives in :mod:`dlpack_export` and
is re-exported here. ``from_dlpack`` goes
through five steps, each in its own function: check the arguments, negotiate
a capsule with the producer, import it (sharing memory or copying it once, as
:func:`dlpack_plan.plan` decides), place the result on the requested device,
and check that what was promised about copying holds.
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
from jax._src.sharding import Sharding
from jax._src.typing import Array, DLDeviceType, DTypeLike
from jax_patch._src import dlpack_capsule
from jax_patch._src import dlpack_compat
from jax_patch._src import dlpack_device
from jax_patch._src import dlpack_errors
from jax_patch._src import dlpack_export
from jax_patch._src import dlpack_plan

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

# Look this set up with a scalar type, not a dtype instance: their hashes
# differ.
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


def is_supported_dtype(dtype: DTypeLike) -> bool:
  """Checks if ``dtype`` is supported by ``jax.dlpack``."""
  if dtype is None:
    # NumPy would silently read None as float64.
    raise TypeError(f"Expected a string or dtype-like object; got {dtype=}")
  return np.dtype(dtype) in SUPPORTED_DTYPES_SET


def from_dlpack(external_array: Any,
                device: dlpack_device.Target | None = None,
                copy: bool | None = None) -> Array:
  """``jax.dlpack.from_dlpack``: the standard's import, as JAX spells it.

  It is :func:`array_api_from_dlpack`, with ``device`` and ``copy``
  positional too.
  """
  return array_api_from_dlpack(external_array, device=device, copy=copy)


_Function = TypeVar("_Function", bound=Callable[..., Any])


def _called(name: str) -> Callable[[_Function], _Function]:
  """Names a function as users call it, in argument errors and tracebacks.

  No wrapper, so no call layer: the function's own code object is renamed.
  """
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

  The Array API standard's ``from_dlpack``, which ``jax.numpy`` exports
  as it is: the entry point every import goes through, one call deep.

  Args:
    x: an object with ``__dlpack__`` and ``__dlpack_device__`` methods (a
      NumPy array, a torch tensor, a ``jax.Array``, ...).
    device: where to place the result: ``None`` keeps the producer's device,
      a ``jax.Device`` or a single-device ``Sharding`` places it on that
      device, a multi-device ``Sharding`` replicates or shards it.
    copy: ``True`` always returns an independent buffer. ``False`` never
      copies: the result shares memory with ``x``, or an error is raised.
      ``None`` shares memory where possible and copies otherwise.

  Sharing is possible when the data lies on ``device`` (or no device was
  given), is 64-byte aligned on the CPU, is laid out in row-major order (or
  compactly in any dimension order, where jaxlib handles that soundly:
  ``dlpack_compat.non_row_major_problem``), and has a dtype that needs no
  canonicalisation (with ``jax_enable_x64`` off, 64-bit types become 32-bit
  ones). Zero-size arrays have no memory to share and are always returned
  fresh.

  Returns:
    A ``jax.Array``. A shared result aliases the producer's memory: writes to
    the producer's array show through it.

  Raises:
    TypeError: ``copy`` is not a bool or ``None``.
    InvalidDeviceError: (a ``TypeError`` and ``ValueError``) ``device`` is
      not a device or sharding.
    MissingDLPackMethodsError: (an ``AttributeError`` and ``TypeError``)
      ``x`` lacks ``__dlpack__`` or ``__dlpack_device__``.
    UnsupportedDeviceError: (a ``BufferError`` and ``TypeError``) the array
      lives on a device type JAX cannot read.
    CopyRequiredError: (a ``BufferError`` and ``ValueError``) ``copy=False``
      but a copy is needed; the message says why.
    BufferError: the producer cannot export the array, or the array lives on
      a platform this JAX has no backend for and no host device was given.
      A ``BufferError`` raised by the producer propagates unchanged.
    TransformationError: called while tracing a JAX transformation.
    MemoryError: a copy the import needs does not fit in memory (once
      copied, a broadcast tensor holds every element).
  """
  if copy is not None and copy is not True and copy is not False:
    copy = dlpack_plan.check_copy(copy)
  target = None if device is None else dlpack_device.check_target(device)
  if not dlpack_compat.trace_state_clean():
    raise _transformation_error()
  if isinstance(target, dlpack_compat.FORMAT_TYPE):
    return _from_dlpack_in_format(x, target, copy)
  if type(x) is np.ndarray:  # pylint: disable=unidiomatic-typecheck
    result = None
    if target is not None and copy is not False:
      result = _from_numpy_to_accelerator(x, target)
    if result is None:
      result = _from_numpy_as_is(x, target, copy)
    if result is not None:
      return result
  elif isinstance(x, array.ArrayImpl):
    return _from_jax_array(x, target, copy)
  elif type(x) is _torch_tensor_type():  # pylint: disable=unidiomatic-typecheck
    result = _from_torch_as_is(x, target, copy)
    if result is not None:
      return result
  _check_dlpack_methods(x)
  dl_device = dlpack_device.dlpack_device_of(x)
  source = dlpack_device.jax_device_for(dl_device)
  if source is None:
    return _from_foreign_platform(x, dl_device, target, copy)
  # Decided again once the capsule is read; a move copy=False forbids raises
  # before the producer is asked.
  decision = dlpack_plan.plan(copy, target, source)
  stream = _consumer_stream(x, dl_device, source)
  kind = type(x)
  is_torch_tensor = kind is _torch_tensor_type()
  if (is_torch_tensor and decision is _SHARE_OR_COPY
      and not dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES):
    # torch has no read-only tensors and copies only when asked: its 0.x
    # capsule says all its 1.x one would, and this jaxlib reads it as it is.
    capsule = x.__dlpack__(stream=stream)
  else:
    capsule = _request_capsule(x, stream, copy)
  result = _import(x, capsule, source, dl_device[0], stream, copy, target,
                   fresh=is_torch_tensor or kind is np.ndarray)
  return _place(result, target, source)


def _from_dlpack_in_format(x: Any, target_format: dlpack_device.Format,
                           copy: bool | None) -> Array:
  """Imports ``x`` onto a ``Format``'s sharding, in its layout.

  The import is shared where ``copy`` allows and the data already lies as
  the ``Format`` asks: on its sharding's device and memory kind (none: the
  producer's device), in its layout (none: any), as a transposed NumPy
  array lies in the layout its strides give. Otherwise the data is copied
  there once, which ``copy=False`` refuses. Under ``copy=True`` the result
  is always a buffer of its own.
  """
  layout, sharding = dlpack_device.format_parts(target_format)
  # Into a layout, copy=True is met after the import, by the copy into it or
  # by a copy in it: the import itself need not copy too.
  copies_after = layout is not None and dlpack_plan.plan(copy) is _COPY
  result = array_api_from_dlpack(x, device=sharding,
                                 copy=None if copies_after else copy)
  obstacle = dlpack_device.format_obstacle(result, layout, sharding)
  # Raises under copy=False where the result does not lie as asked.
  dlpack_plan.plan(copy, obstacle=obstacle,
                   specified=f"device={target_format!r}")
  if obstacle is not None:
    return _finished(dlpack_device.place_in_format(result, layout, sharding))
  if copies_after:
    return _finished(dlpack_device.place(
        result, dlpack_compat.FORMAT_TYPE(layout, result.sharding),
        may_alias=False))
  return result


def _torch_tensor_type() -> type[Any] | None:
  """``torch.Tensor``, once something has imported torch; else ``None``.

  ``numpy.ndarray`` and ``torch.Tensor`` make a new capsule at every
  ``__dlpack__`` call, which only the caller holds: it need not be claimed
  against other threads. Only these classes themselves are known to; a
  subclass may override ``__dlpack__``.
  """
  if _torch_tensor[0] is None:
    torch = sys.modules.get("torch")
    _torch_tensor[0] = getattr(torch, "Tensor", None)
  return _torch_tensor[0]


# Found once torch is imported: the patch never imports it.
_torch_tensor: list[type[Any] | None] = [None]


def _from_numpy_as_is(x: np.ndarray[Any, Any],
                      target: dlpack_device.Target | None,
                      copy: bool | None) -> Array | None:
  """Shares a NumPy array jaxlib can alias as it is; ``None`` if it cannot.

  The fast path for the commonest producer: a C-contiguous array of a dtype
  JAX keeps. NumPy's own capsule goes to jaxlib: a 0.x one for a writable
  array, a READ_ONLY 1.x one for a read-only array (as a 0.x structure
  holding it, where jaxlib reads only 0.x). NumPy filled it with the array's
  own fields, so there is nothing to check (as :func:`dlpack_capsule.take`
  does for capsules a producer might share or corrupt), and NumPy's C
  functions release it: no Python runs when the result is freed. See
  :func:`_import_as_is` for alignment; everything else, and anything jaxlib
  refuses, takes the general path.
  """
  flags = x.flags
  nbytes = x.nbytes  # Zero only for a zero-size array: no dtype has size 0.
  dtype = x.dtype
  if (not flags.c_contiguous or not nbytes
      # The narrow test first spares the commonest dtypes a call.
      or (dtype not in _NARROW_EXPORTED_DTYPES
          and not _numpy_exports_as_kept(dtype))
      or (dlpack_compat.JAXLIB_ORDERS_SIZE_ONE_DIMENSIONS and 1 in x.shape)):
    return None
  source = dlpack_device.jax_device_for(dlpack_device.HOST_DL_DEVICE)
  if source is None:
    return None
  writable = flags.writeable
  decision = dlpack_plan.plan(copy, target, source, None, not writable)
  if decision is _COPY:
    return None
  producer: Any = x  # NumPy's stubs for pytype lack __dlpack__.
  address = None
  if writable:
    capsule = producer.__dlpack__()
  elif dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES:
    capsule = producer.__dlpack__(max_version=dlpack_capsule.MAX_VERSION)
  else:
    capsule, address = dlpack_capsule.legacy_capsule_of_read_only(x)
  if dlpack_compat.JAXLIB_COPIES_UNALIGNED:
    address = None  # jaxlib checks the alignment itself.
  elif address is None:
    address = dlpack_capsule.writable_buffer_address(x)
  return _import_as_is(capsule, address, nbytes, source, target, decision)


def _from_numpy_to_accelerator(x: np.ndarray[Any, Any],
                               target: dlpack_device.Target) -> Array | None:
  """Moves a NumPy array onto an accelerator in one hop; ``None`` otherwise.

  A move to an accelerator copies whatever ``copy`` says (but ``False``,
  which the general path refuses), and jaxlib's own transfer reads the array
  as it lies, any strides, where the general path would first import a host
  alias (or, for unaligned data, a host copy) and then move that. ``None``
  for a host target, and for a dtype the general path must judge.

  jaxlib may go on reading the source after ``device_put`` returns (it asks
  for zero-copy host semantics), so the result is handed back only once the
  transfer is done: a later write to the source never shows in it.
  """
  if (x.dtype not in dlpack_capsule.NUMPY_EXPORTED_DTYPES
      or dlpack_device.is_host(target)):
    return None
  return _finished(dlpack_device.place(x, target))


def _from_torch_as_is(tensor: Any, target: dlpack_device.Target | None,
                      copy: bool | None) -> Array | None:
  """Shares a CPU torch tensor jaxlib can alias as it is; ``None`` if not.

  The fast path for torch: a contiguous host tensor of a dtype JAX keeps.
  Its properties say all that reading its capsule would: torch exports a
  host tensor's own memory with its own fields, never copies unless asked
  and has no read-only tensors, so the capsule needs no checks and no
  conversion (a 0.x one where jaxlib reads only 0.x). torch's own
  ``__dlpack__`` makes it, refusing what it refuses on the general path
  (tensors that require grad, conjugate views), and torch's C deleter
  releases it. See :func:`_import_as_is` for alignment; everything else,
  and anything jaxlib refuses, takes the general path.
  """
  dtype = _torch_dtypes().get(tensor.dtype)
  if (dtype is None or not tensor.is_cpu
      or not tensor.is_contiguous() or not tensor.numel()
      or not _numpy_exports_as_kept(dtype)
      or (dlpack_compat.JAXLIB_ORDERS_SIZE_ONE_DIMENSIONS
          and 1 in tensor.shape)):
    return None
  source = dlpack_device.jax_device_for(dlpack_device.HOST_DL_DEVICE)
  if source is None:
    return None
  decision = dlpack_plan.plan(copy, target, source)  # torch has no read-only.
  if decision is _COPY:
    return None
  if dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES:
    capsule = tensor.__dlpack__(max_version=dlpack_capsule.MAX_VERSION)
  else:
    capsule = tensor.__dlpack__()
  address = (None if dlpack_compat.JAXLIB_COPIES_UNALIGNED
             else tensor.data_ptr())
  return _import_as_is(capsule, address, tensor.nbytes, source, target,
                       decision)


def _torch_dtypes() -> dict[Any, np.dtype[Any]]:
  """torch's dtypes that have a NumPy twin, keyed by the torch dtype."""
  if not _torch_dtype_twins:
    torch = sys.modules["torch"]
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8",
                 "uint16", "uint32", "uint64", "float16", "float32",
                 "float64", "complex64", "complex128"):
      if hasattr(torch, name):
        _torch_dtype_twins[getattr(torch, name)] = np.dtype(name)
  return _torch_dtype_twins


# Filled on the first torch import: the patch never imports torch.
_torch_dtype_twins: dict[Any, np.dtype[Any]] = {}


def _import_as_is(capsule: Any, address: int | None, nbytes: int,
                  source: Any, target: dlpack_device.Target | None,
                  decision: dlpack_plan.Decision) -> Array | None:
  """Hands a producer's own host capsule to jaxlib; ``None`` if it refuses.

  Where jaxlib copies unaligned data itself (``address`` is then ``None``),
  it is asked to alias or, for small data a ``SHARE_OR_COPY`` decision lets
  it copy, to copy, which is the fastest copy for them; asked not to copy,
  it refuses unaligned data. Elsewhere only a 64-byte aligned ``address`` is
  imported. A capsule not imported dies unconsumed, releasing what it holds,
  and the general path decides.
  """
  copies = False
  if address is None:
    copies = (decision is _SHARE_OR_COPY
              and nbytes <= _JAXLIB_COPY_MAX_BYTES)
  elif address % dlpack_compat.CPU_ZERO_COPY_ALIGNMENT:
    return None
  try:
    if copies:
      result = dlpack_compat.import_aliasing_or_copying(capsule, source,
                                                        None, _KDL_CPU)
    else:
      result = dlpack_compat.import_capsule(capsule, source, None, _KDL_CPU)
  except dlpack_compat.RuntimeErrorType:
    return None
  if (decision is _SHARE and address is not None
      and result.unsafe_buffer_pointer() != address):
    dlpack_plan.replan(decision, _JAXLIB_COPIED)  # Raises.
  return result if target is None else _place(result, target, source)


def _numpy_exports_as_kept(dtype: np.dtype[Any]) -> bool:
  """Whether NumPy exports ``dtype`` and JAX keeps it as it is."""
  # JAX changes only 64-bit types, and only with jax_enable_x64 off.
  return dtype in _NARROW_EXPORTED_DTYPES or (
      dtype in dlpack_capsule.NUMPY_EXPORTED_DTYPES
      and _canonical_dtype(dtype) == dtype)


_NARROW_EXPORTED_DTYPES = frozenset(
    dtype for dtype in dlpack_capsule.NUMPY_EXPORTED_DTYPES
    if dtype.itemsize < 8)



def _transformation_error() -> TransformationError:
  return TransformationError(
      "from_dlpack cannot be called inside a JAX transformation (jit, vmap, "
      "grad, scan, ...): it reads an external buffer that tracing cannot "
      "follow, so the traced function would bake in the buffer's current "
      "contents. Call from_dlpack outside the transformation and pass the "
      "result in as an argument.")


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


def _place(result: Array, target: dlpack_device.Target | None,
           source: Any) -> Array:
  if dlpack_device.is_only(target, source):
    return result
  return _finished(dlpack_device.place(result, target))


def _finished(copied: Array) -> Array:
  """Returns ``copied`` once the copy or transfer making it has finished.

  JAX copies and transfers asynchronously. One whose input aliases a
  producer's memory must have read it before from_dlpack returns: the
  producer may change or free that memory from then on.
  """
  return copied.block_until_ready()


def _from_jax_array(x: Array, target: dlpack_device.Target | None,
                    copy: bool | None) -> Array:
  """Imports a ``jax.Array`` without a DLPack round trip; keeps its device.

  A ``COPY`` decision copies before any move: ``device_put`` may alias
  across CPU devices.
  """
  canonical = dtypes.canonicalize_dtype(x.dtype)
  narrowing = None if canonical == x.dtype else _narrowing(x.dtype, canonical)
  decision = dlpack_plan.plan(copy, target, x, narrowing)
  if narrowing is not None:
    x = x.astype(canonical)  # The copy the decision asked for.
  elif decision is _COPY:
    x = _array_copy(x)
  if target is None or dlpack_device.holds(x, target):
    return x
  return dlpack_device.place(x, target)


def _consumer_stream(external_array: Any, dl_device: tuple[int, int],
                     source: Any) -> int | None:
  """Returns the stream the producer must make the data ready on."""
  if dl_device[0] in dlpack_device.HOST_DEVICE_TYPES:
    # Pinned host tensors export through their CPU __dlpack__ (torch), which
    # rejects any stream but None.
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

  A producer that does not know a keyword raises ``TypeError``; it is asked
  again with fewer: first without ``dl_device`` and ``copy``, then with
  ``stream`` alone. Dropping ``copy=False`` is safe, since the import checks
  what it gets and never copies under it; a ``dl_device`` request cannot be
  dropped, and raises ``BufferError`` instead.
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


def _import(producer: Any, capsule: Any, source: Any, dl_device_type: int,
            stream: int | None, copy: bool | None,
            target: dlpack_device.Target | None, fresh: bool = False) -> Any:
  """Imports ``capsule`` onto ``source``, its producer's device.

  Args:
    producer: the object whose ``__dlpack__`` made ``capsule``; an import
      whose tensor has a NULL deleter holds it (see
      :func:`dlpack_capsule.take`).
    copy: the caller's ``copy``, which :func:`dlpack_plan.plan` turns into
      sharing or copying once the capsule's fields are known.
    target: where the caller places the result afterwards.
    fresh: the producer makes a new capsule per call (see
      :func:`dlpack_capsule.take`).
  """
  # From here `capsule` owns the producer's memory, which a copy reads: it
  # stays alive until this function returns.
  capsule, info = dlpack_capsule.take(
      capsule,
      versioned_ok=dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES,
      fresh=fresh, keep_alive=producer)
  if info.device[0] != dl_device_type:
    if not _is_pinned_host_as_cpu(info.device[0], dl_device_type):
      raise BufferError(
          f"from_dlpack: the capsule is on DLDeviceType {info.device[0]} "
          f"but __dlpack_device__ said {dl_device_type}.")
    # torch's __dlpack_device__ says a pinned tensor is kDLCUDAHost, and its
    # capsule says kDLCPU: host memory either way, which the CPU reads.
    source = dlpack_device.jax_device_for(dlpack_device.HOST_DL_DEVICE)
    dl_device_type = _KDL_CPU
  if not dlpack_compat.jax_has_dtype(info.dtype):
    raise BufferError(
        f"from_dlpack: the DLPack tensor's dtype is {info.dtype}, which this "
        "JAX does not have.")
  canonical = _canonical_dtype(info.dtype)
  if dl_device_type != _KDL_CPU:
    return _import_device(capsule, info, source, dl_device_type, stream,
                          canonical, copy, target)
  return _import_host(capsule, info, source, canonical, copy, target)


def _import_host(capsule: Any, info: dlpack_capsule.TensorInfo, source: Any,
                 canonical: np.dtype[Any], copy: bool | None,
                 target: dlpack_device.Target | None) -> Any:
  """Imports a host tensor: shares it, or copies it once into aligned memory.

  ``info`` is what ``capsule`` describes; ``canonical`` the dtype JAX holds
  it as.
  """
  obstacle = _why_host_copy(info, canonical)
  decision = dlpack_plan.plan(copy, target, source, obstacle, info.read_only,
                              info.is_copied)
  if decision is not _COPY and info.size:
    # Zero-size data has no memory to alias: it comes back fresh below.
    try:
      result = dlpack_compat.import_capsule(capsule, source, None, _KDL_CPU)
    except dlpack_compat.RuntimeErrorType as err:
      # The capsule is still ours.
      decision = dlpack_plan.replan(decision, f"jaxlib cannot alias it ({err})")
    else:
      if (decision is _SHARE
          and result.unsafe_buffer_pointer() != info.address):
        dlpack_plan.replan(decision, _JAXLIB_COPIED)  # Raises.
      return result
  elif (info.address % dlpack_compat.CPU_ZERO_COPY_ALIGNMENT
        and dlpack_compat.JAXLIB_COPIES_UNALIGNED and canonical == info.dtype
        and _why_jaxlib_cannot_read(info) is None):
    result = _import_small_unaligned(capsule, info, source)
    if result is not None:
      return result
  return _import_host_copy(info, source, canonical)


def _is_pinned_host_as_cpu(capsule_type: int, reported_type: int) -> bool:
  """Whether a capsule says kDLCPU for memory reported as pinned host."""
  return (capsule_type == _KDL_CPU and reported_type != _KDL_CPU
          and reported_type in dlpack_device.HOST_DEVICE_TYPES)


# Below this size jaxlib's own copy of unaligned data is the cheapest; above
# it, one np.copyto into aligned memory is several times faster.
_JAXLIB_COPY_MAX_BYTES = 1 << 16


def _import_small_unaligned(capsule: Any, info: dlpack_capsule.TensorInfo,
                            source: Any) -> Any | None:
  """Lets jaxlib copy a small unaligned host tensor; ``None`` if it won't.

  ``info`` is what ``capsule`` describes.
  """
  if (info.size * info.dtype.itemsize > _JAXLIB_COPY_MAX_BYTES
      or not _is_compact(info.shape, info.strides)):
    return None
  try:
    return dlpack_compat.import_aliasing_or_copying(capsule, source, None,
                                                    _KDL_CPU)
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
    # No element: its strides lay out nothing, and a fresh buffer shares
    # all there is (see _import_host). Unaligned, it is refused above, as
    # upstream refuses it: code relies on that.
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
  """Whether sorting dimensions by stride keeps them in C order.

  That is the order jaxlib gives row-major strides whose size-1 dimensions
  it does not set apart (ties keep C order).
  """
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

  The capsule ``info`` was read from owns the producer's memory, which the
  copy reads: the caller keeps it alive until this returns.
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
  # DLPack cannot carry this dtype into an older jaxlib; JAX's own transfer
  # can, and may alias the copy, which nothing else writes.
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
  # Built on the buffer directly: reshaping a zero-size view would not keep
  # its (aligned) data pointer.
  return np.ndarray(shape, dtype, buffer=raw, offset=start)


def _import_device(capsule: Any, info: dlpack_capsule.TensorInfo,
                   source: Any, dl_device_type: int, stream: int | None,
                   canonical: np.dtype[Any], copy: bool | None,
                   target: dlpack_device.Target | None) -> Any:
  """Imports an accelerator tensor; copies, when needed, on the device."""
  narrowing = (None if canonical == info.dtype
               else _narrowing(info.dtype, canonical))
  # Asking jaxlib despite a refusal could import the data permuted.
  layout = _why_jaxlib_cannot_read(info) or _why_xla_cannot_compute_on(
      info, dl_device_type)
  decision = dlpack_plan.plan(copy, target, source, narrowing or layout,
                              info.read_only, info.is_copied)
  if layout is None:
    try:
      result = dlpack_compat.import_capsule(capsule, source, stream,
                                            dl_device_type)
    except dlpack_compat.RuntimeErrorType as err:
      layout = f"jaxlib cannot alias it ({err})"  # The capsule is still ours.
      decision = dlpack_plan.replan(decision, layout)
  if layout is not None:
    return gather_on_device(capsule, info, source, stream, dl_device_type,
                            canonical, _device_alignment(dl_device_type))
  if narrowing is not None:
    return _finished(result.astype(canonical))
  if decision is _COPY:
    return _finished(_array_copy(result))
  return result


# XLA's GPU executables take an entry parameter only at a multiple of 16
# bytes (kEntryParameterAlignBytes); else they fail, or a kernel faults with
# CUDA_ERROR_MISALIGNED_ADDRESS, which fails every later launch too.
_XLA_GPU_ALIGNMENT = 16


def _device_alignment(dl_device_type: int) -> int:
  """The byte alignment XLA needs of device memory of ``dl_device_type``."""
  if dl_device_type in (dlpack_device.KDL_CUDA, dlpack_device.KDL_ROCM):
    return _XLA_GPU_ALIGNMENT
  return 1


def _why_xla_cannot_compute_on(info: dlpack_capsule.TensorInfo,
                               dl_device_type: int) -> str | None:
  """Why an alias of device data would break XLA's executables, if it would.

  A view that starts mid-allocation (``t[1:]``, a CuPy ``[::3, ::-2]``) can
  start off XLA's alignment: jaxlib aliases it, and the first computation on
  it fails. Such data is gathered on the device into aligned memory instead,
  a copy ``copy=False`` refuses.
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

  Strided (``x[::2]``), reversed, broadcast or, where jaxlib mishandles
  them, permuted layouts. The memory the tensor spans is aliased as one
  row-major vector, which every jaxlib reads, and the tensor is gathered
  from it into a fresh row-major array. The producer's memory is read only
  by the gather, which has finished when this returns, and is released then.

  Args:
    capsule: an unconsumed capsule of the tensor ``info`` describes.
    align: the span starts at a multiple of ``align`` bytes
      (:func:`dlpack_capsule.as_span_capsule`), for memory whose executables
      need it (:func:`_device_alignment`).

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
    # Before the gather: JAX before 0.5 cannot index an array of a dtype
    # jax_enable_x64 rules out.
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


def _from_foreign_platform(external_array: Any, dl_device: tuple[int, int],
                           target: dlpack_device.Target | None,
                           copy: bool | None) -> Array:
  """Imports an array from a platform this JAX has no backend for.

  The standard lets a consumer ask the producer for a copy in host memory;
  that is done when the caller asked for the result on the CPU.
  """
  platform = dlpack_device.platform_of(dl_device)
  if target is None or not dlpack_device.is_host(target):
    raise BufferError(
        f"from_dlpack: the array is on {platform}, which this JAX has no "
        "backend for. Pass device=jax.devices('cpu')[0] to import a copy in "
        "host memory.")
  host = dlpack_device.jax_device_for(dlpack_device.HOST_DL_DEVICE)
  dlpack_plan.plan(
      copy, target, host,
      f"the source device is on {platform}, which this JAX has no backend "
      "for, and must be copied to host memory")
  capsule = _request_capsule(external_array, None, copy,
                             dl_device=dlpack_device.HOST_DL_DEVICE)
  result = _import(external_array, capsule, host, _KDL_CPU, None, copy,
                   target)
  return _place(result, target, host)


def _step_aside() -> None:
  """Makes this module's entry points JAX's own.

  For a jaxlib whose DLPack functions take a shape no gate knows
  (``dlpack_compat.BINDING_SHAPE_PROBLEM``): calling them by guesswork could
  fail, or worse, where JAX's own functions, made for that jaxlib, work.
  ``install`` then leaves JAX as it is and says why.
  """
  from jax._src import dlpack as jax_dlpack  # pylint: disable=g-import-not-at-top
  from jax._src.numpy import lax_numpy  # pylint: disable=g-import-not-at-top
  globals().update(
      from_dlpack=jax_dlpack.from_dlpack, to_dlpack=jax_dlpack.to_dlpack,
      array_api_from_dlpack=lax_numpy.from_dlpack,
      array_dlpack=array.ArrayImpl.__dlpack__)


if dlpack_compat.BINDING_SHAPE_PROBLEM is not None:
  _step_aside()
