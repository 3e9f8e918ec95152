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

"""DLPack capsules: reading them and handing them to jaxlib.

The only module touching DLPack's C structures (``ctypes``, no extension). A
producer's capsule is memory-safety input: :func:`take` claims it (renames it
used, under a lock) before reading a field, so it is consumed exactly once
whatever other threads do; checks every field's arithmetic before anything reads
tensor memory; and hands jaxlib only capsules it can release (jaxlib before 0.12
reads only 0.x ``"dltensor"``; none copes with a NULL deleter). The producer's
deleter runs exactly once: when jaxlib (or the capsule made here, if unconsumed)
releases the tensor, or at once if it is refused. Allocations are released by
NumPy's C functions (:class:`_NumpyRelease`), never Python: freeing an import
runs no Python, on any thread, and needs nothing of this module's at shutdown.
"""

from __future__ import annotations

import ctypes
import datetime
import functools
import math
import operator
import os
import struct
import threading
from typing import Any, Callable, NamedTuple

import ml_dtypes
import numpy as np

LEGACY_NAME = b"dltensor"
VERSIONED_NAME = b"dltensor_versioned"
USED_LEGACY_NAME = b"used_dltensor"
USED_VERSIONED_NAME = b"used_dltensor_versioned"

# Newest DLPack version read; any 1.x is accepted (all keep 1.0's layout).
MAX_VERSION = (1, 1)

FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2

KDL_CPU = 1

# Most dimensions a tensor may have (NumPy's limit); more is a corrupt tensor.
_MAX_NDIM = 64
# Byte sizes, offsets must fit int64 (jaxlib, NumPy use it); no address wraps.
_INT64_MAX = (1 << 63) - 1
_ADDRESS_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1
# No process maps more (x86-64: 2**56, arm64: 2**52): no span or result can.
_MAX_SPAN_BYTES = 1 << 56

# datetime exposes its C API as a capsule: a ready specimen of the type.
_CAPSULE_TYPE = type(getattr(datetime, "datetime_CAPI"))


class _DLDevice(ctypes.Structure):
  _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
  _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
              ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
  _fields_ = [("data", ctypes.c_void_p),
              ("device", _DLDevice),
              ("ndim", ctypes.c_int32),
              ("dtype", _DLDataType),
              ("shape", ctypes.POINTER(ctypes.c_int64)),
              ("strides", ctypes.POINTER(ctypes.c_int64)),
              ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
  # Function pointers as plain addresses: ctypes never wraps (or frees) them.
  _fields_ = [("dl_tensor", _DLTensor),
              ("manager_ctx", ctypes.c_void_p),
              ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
  _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
  _fields_ = [("version", _DLPackVersion),
              ("manager_ctx", ctypes.c_void_p),
              ("deleter", ctypes.c_void_p),
              ("flags", ctypes.c_uint64),
              ("dl_tensor", _DLTensor)]


# A producer's deleter, called with the GIL held as NumPy does: not all take it.
_ProducerDeleter = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)


def _capsule_api(name: str, restype: Any, *argtypes: Any) -> Any:
  # PYFUNCTYPE keeps the GIL held across the call, as the capsule API needs.
  prototype = ctypes.PYFUNCTYPE(restype, *argtypes)
  return prototype((name, ctypes.pythonapi))


_capsule_get_name = _capsule_api(
    "PyCapsule_GetName", ctypes.c_char_p, ctypes.py_object)
_capsule_get_pointer = _capsule_api(
    "PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
_capsule_set_name = _capsule_api(
    "PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_capsule_new = _capsule_api(
    "PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
    ctypes.c_void_p)
_capsule_get_destructor = _capsule_api(
    "PyCapsule_GetDestructor", ctypes.c_void_p, ctypes.py_object)
_pymem_malloc = _capsule_api("PyMem_Malloc", ctypes.c_void_p, ctypes.c_size_t)
_py_incref = _capsule_api("Py_IncRef", None, ctypes.py_object)


def _immortal(obj: Any) -> Any:
  """Returns ``obj`` leaked, as jaxlib may free imports after globals clear."""
  ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
  return obj


def _static_c_string(value: bytes) -> ctypes.c_char_p:
  # Capsules keep a pointer to their name rather than a copy.
  buffer = _immortal(ctypes.create_string_buffer(value))
  return ctypes.c_char_p(ctypes.addressof(buffer))


_LEGACY_NAME_PTR = _static_c_string(LEGACY_NAME)
_VERSIONED_NAME_PTR = _static_c_string(VERSIONED_NAME)
_USED_LEGACY_NAME_PTR = _static_c_string(USED_LEGACY_NAME)
_USED_VERSIONED_NAME_PTR = _static_c_string(USED_VERSIONED_NAME)


# DLPack (code, bits) -> dtype both jaxlib and NumPy hold, whole-byte items.
_DTYPES: dict[tuple[int, int], np.dtype[Any]] = {
    (0, 8): np.dtype(np.int8), (0, 16): np.dtype(np.int16),
    (0, 32): np.dtype(np.int32), (0, 64): np.dtype(np.int64),
    (1, 8): np.dtype(np.uint8), (1, 16): np.dtype(np.uint16),
    (1, 32): np.dtype(np.uint32), (1, 64): np.dtype(np.uint64),
    (2, 16): np.dtype(np.float16), (2, 32): np.dtype(np.float32),
    (2, 64): np.dtype(np.float64),
    (4, 16): np.dtype(ml_dtypes.bfloat16),
    (5, 64): np.dtype(np.complex64), (5, 128): np.dtype(np.complex128),
    (6, 8): np.dtype(np.bool_),
    (7, 8): np.dtype(ml_dtypes.float8_e3m4),
    (8, 8): np.dtype(ml_dtypes.float8_e4m3),
    (9, 8): np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    (10, 8): np.dtype(ml_dtypes.float8_e4m3fn),
    (11, 8): np.dtype(ml_dtypes.float8_e4m3fnuz),
    (12, 8): np.dtype(ml_dtypes.float8_e5m2),
    (13, 8): np.dtype(ml_dtypes.float8_e5m2fnuz),
    (14, 8): np.dtype(ml_dtypes.float8_e8m0fnu),
}
_DL_DTYPES = {dtype: code_bits for code_bits, dtype in _DTYPES.items()}
# Those NumPy's own __dlpack__ exports: all but the ml_dtypes ones.
NUMPY_EXPORTED_DTYPES = frozenset(
    dtype for dtype in _DTYPES.values() if dtype.kind != "V")


class TensorInfo(NamedTuple):
  """What a DLPack capsule describes, read without taking ownership.

  Attributes:
    versioned: whether it is a DLPack 1.x ``"dltensor_versioned"``.
    version: ``(major, minor)``; ``(0, 0)`` for 0.x, which records no minor.
    flags: the 1.x flags bit field; 0 for 0.x.
    address: the first element's address (``data + byte_offset``).
    device: ``(device_type, device_id)``.
    dtype: the NumPy dtype (a DLPack type without one is refused).
    dl_dtype: DLPack's ``(code, bits, lanes)``.
    shape: the shape.
    strides: in elements; compact row-major when the producer passed none.
  """
  versioned: bool
  version: tuple[int, int]
  flags: int
  address: int
  device: tuple[int, int]
  dtype: np.dtype[Any]
  dl_dtype: tuple[int, int, int]
  shape: tuple[int, ...]
  strides: tuple[int, ...]

  @property
  def size(self) -> int:
    return math.prod(self.shape)

  @property
  def read_only(self) -> bool:
    return bool(self.flags & FLAG_READ_ONLY)

  @property
  def is_copied(self) -> bool:
    return bool(self.flags & FLAG_IS_COPIED)


def is_capsule(obj: object) -> bool:
  return type(obj) is _CAPSULE_TYPE


def capsule_name(capsule: Any) -> bytes | None:
  name: bytes | None = _capsule_get_name(capsule)
  return name


def _names(capsule: Any) -> tuple[bool, ctypes.c_char_p, ctypes.c_char_p]:
  """Returns ``(versioned, name, used_name)`` of an unconsumed capsule."""
  if type(capsule) is not _CAPSULE_TYPE:  # pylint: disable=unidiomatic-typecheck
    raise TypeError(
        f"__dlpack__ returned a {type(capsule).__name__}, not a DLPack "
        "capsule.")
  name = _capsule_get_name(capsule)
  if name == LEGACY_NAME:
    return False, _LEGACY_NAME_PTR, _USED_LEGACY_NAME_PTR
  if name == VERSIONED_NAME:
    return True, _VERSIONED_NAME_PTR, _USED_VERSIONED_NAME_PTR
  if name in (USED_LEGACY_NAME, USED_VERSIONED_NAME):
    raise BufferError(
        "from_dlpack: the DLPack capsule was already consumed; call "
        "__dlpack__ again for a fresh one.")
  raise BufferError(
      f"from_dlpack: expected a DLPack capsule named 'dltensor' or "
      f"'dltensor_versioned', got one named {name!r}.")


def _managed_tensor_address(capsule: Any) -> tuple[bool, int]:
  """Returns ``(versioned, address)`` of the capsule's managed tensor."""
  versioned, name, _ = _names(capsule)
  return versioned, _capsule_get_pointer(capsule, name)


# Serialises claims, lest two threads claim one capsule and free it twice.
_claim_lock = threading.Lock()


def _claim(capsule: Any) -> tuple[bool, int]:
  """Renames ``capsule`` as used and returns ``(versioned, address)``.

  The caller must then release the tensor at ``address``: the producer's
  destructor leaves a used capsule alone, and a second consumer finds it used.

  Raises:
    TypeError: ``capsule`` is not a capsule.
    BufferError: it is consumed or misnamed.
  """
  with _claim_lock:
    versioned, name, used_name = _names(capsule)
    address = _capsule_get_pointer(capsule, name)
    _capsule_set_name(capsule, used_name)
  return versioned, address


def inspect(capsule: Any) -> TensorInfo:
  """Reads what ``capsule`` describes, without consuming it.

  For a capsule only this thread holds (an export); imports use :func:`take`.

  Raises:
    TypeError: ``capsule`` is not a capsule.
    BufferError: it is consumed, misnamed, of an unknown major version (its
      deleter then called), or an invalid tensor (see :func:`take`).
  """
  versioned, address = _managed_tensor_address(capsule)
  version, _, flags, tensor = _read_structure(address, versioned)
  if versioned and version[0] != MAX_VERSION[0]:
    # Renamed first: only the new capsule's death runs the deleter, once.
    _capsule_set_name(capsule, _USED_VERSIONED_NAME_PTR)
    _reissue(address, True)
    raise _version_error(*version)
  return _tensor_info(_TENSOR_FIELDS.unpack(tensor), versioned, version,
                      flags)


def _read_structure(address: int,
                    versioned: bool) -> tuple[tuple[int, int], int, int, bytes]:
  """Reads a managed tensor in one go.

  Returns:
    ``(version, deleter, flags, dltensor_bytes)``; ``(0, 0)``, 0 flags for 0.x.
  """
  if versioned:
    raw = bytes(_VERSIONED_BYTES.from_address(address))
    major, minor, _, deleter, flags = _VERSIONED_HEADER.unpack_from(raw)
    return (major, minor), deleter, flags, raw[_HEADER_SIZE:]
  raw = bytes(_LegacyBytes.from_address(address))
  return (0, 0), _LEGACY_TAIL.unpack_from(raw, _TENSOR_SIZE)[1], 0, raw[
      :_TENSOR_SIZE]


def _version_error(major: int, minor: int) -> BufferError:
  if major > MAX_VERSION[0]:
    return BufferError(
        f"from_dlpack: the producer returned a DLPack {major}.{minor} "
        f"capsule; this JAX reads DLPack up to {MAX_VERSION[0]}.x.")
  return BufferError(
      f"from_dlpack: the producer returned a 'dltensor_versioned' capsule of "
      f"DLPack {major}.{minor}; that structure exists only from DLPack 1.0.")


def take(capsule: Any, *, versioned_ok: bool, fresh: bool = False,
         keep_alive: Any = None) -> tuple[Any, TensorInfo]:
  """Takes over a producer's capsule for an import, reading it once.

  Claims the capsule (renames it used) before reading any field, and checks
  every field (ndim, shape, dtype, strides, byte offset; the span fits int64
  bytes and the address space, unwrapped) before reading tensor memory; a
  refused tensor's deleter is called at once. A NULL deleter (DLPack allows
  it; jaxlib to 0.12 aborts on one) means the producer's structure may be
  freed once ``from_dlpack`` returns: the tensor goes over as this module's
  0.x structure holding its own shape, strides and ``keep_alive``; nothing of
  the producer's structure is read after this returns, and its release calls
  nothing of the producer's. The import still aliases the tensor's memory.

  Args:
    capsule: what the producer's ``__dlpack__`` returned.
    versioned_ok: whether jaxlib reads 1.x; if not, 1.x goes over as 0.x.
    fresh: ``capsule`` is new and the caller's alone (as NumPy's, torch's):
      unclaimed, jaxlib gets it or a 0.x structure holds it unconsumed; checked.
    keep_alive: held instead of the producer's structure if no deleter.

  Returns:
    ``(own, info)``: a capsule jaxlib can consume that owns the tensor
    (released if it dies unconsumed), and what the tensor is.

  Raises:
    TypeError: ``capsule`` is not a capsule.
    BufferError: consumed, misnamed, unsupported version, or invalid field
      (the message names the field and its value).
  """
  if fresh:
    versioned, address = _managed_tensor_address(capsule)
    own = capsule
  else:
    versioned, address = _claim(capsule)
    own = _reissue(address, versioned)
  # `own` holds the tensor now: if this raises, it dies and the deleter runs.
  try:
    version, deleter, flags, tensor = _read_structure(address, versioned)
    if versioned and version[0] != MAX_VERSION[0]:
      raise _version_error(*version)
    info = _tensor_info(_TENSOR_FIELDS.unpack(tensor), versioned, version,
                        flags)
    if not deleter:
      # `own` dies here, while the structure its destructor reads is alive.
      return _self_contained_structure(tensor, info, keep_alive), info
    if versioned_ok or not versioned:
      return own, info  # jaxlib reads the producer's own structure.
    # A 0.x structure holding `own`, so the shape and strides it uses live.
    return _new_structure(_LEGACY_SIZE, _after(tensor), own,
                          versioned=False), info
  except BaseException:
    # Released now, not when the traceback's frames die.
    del own
    raise


def _tensor_info(fields: tuple[Any, ...], versioned: bool,
                 version: tuple[int, int], flags: int) -> TensorInfo:
  """Checks and converts DLTensor fields (declaration order); reads no element.

  Raises:
    BufferError: a field no consumer may act on; the message names it.
  """
  (data, device_type, device_id, ndim, code, bits, lanes, shape_address,
   strides_address, byte_offset) = fields
  common = _common_layout(fields)
  if common is not None:
    return TensorInfo(versioned, version, flags, data + byte_offset,
                      (device_type, device_id), common[0],
                      (code, bits, lanes), common[1], common[2])
  dtype = _checked_dtype(code, bits, lanes)
  shape = _checked_shape(ndim, shape_address, dtype)
  if ndim and strides_address:
    strides = _checked_strides(_int64s(strides_address, ndim), dtype)
  else:
    strides = _row_major_strides(shape)
  address = _checked_address(data, byte_offset)
  _check_span(data, address, shape, strides, dtype,
              "strides" if ndim and strides_address else "shape")
  return TensorInfo(
      versioned=versioned, version=version, flags=flags, address=address,
      device=(device_type, device_id), dtype=dtype,
      dl_dtype=(code, bits, lanes), shape=shape, strides=strides)


def _common_layout(
    fields: tuple[Any, ...]
) -> tuple[np.dtype[Any], tuple[int, ...], tuple[int, ...]] | None:
  """``(dtype, shape, strides)`` of the commonest valid tensors, else ``None``.

  Known dtype, ndim >= 1, no empty dim, non-negative strides given: a few
  bounds suffice. Else (valid or not) ``None``: the field checks word refusals.
  """
  (data, _, _, ndim, code, bits, lanes, shape_address, strides_address,
   byte_offset) = fields
  dtype = _DTYPES.get((code, bits)) if lanes == 1 else None
  if (dtype is None or not 0 < ndim <= _MAX_NDIM or not shape_address
      or not strides_address or not data or byte_offset > _INT64_MAX):
    return None
  # Sliced first: a slice is read in C, iterating reads item by item.
  shape = tuple(_INT64_ARRAYS[ndim].from_address(shape_address)[:])
  strides = tuple(_INT64_ARRAYS[ndim].from_address(strides_address)[:])
  itemsize = dtype.itemsize
  if (min(shape) < 1 or min(strides) < 0
      or max(strides) * itemsize > _INT64_MAX
      or math.prod(shape) * itemsize > _MAX_SPAN_BYTES):
    return None
  # No empty dim, no negative stride: last element at sum(stride * (dim - 1)).
  span_bytes = (sum(map(operator.mul, strides, shape)) - sum(strides)
                + 1) * itemsize
  if (span_bytes > _MAX_SPAN_BYTES
      or data + byte_offset + span_bytes - 1 > _ADDRESS_MAX):
    return None
  return dtype, shape, strides


def _checked_dtype(code: int, bits: int, lanes: int) -> np.dtype[Any]:
  dtype = numpy_dtype((code, bits, lanes))
  if dtype is None:
    raise _field_error(
        "dtype", f"(code={code}, bits={bits}, lanes={lanes})",
        "not a type JAX reads through DLPack")
  return dtype


def _checked_shape(ndim: int, shape_address: int,
                   dtype: np.dtype[Any]) -> tuple[int, ...]:
  if not 0 <= ndim <= _MAX_NDIM:
    raise _field_error("ndim", ndim, f"expected 0 to {_MAX_NDIM}")
  if ndim and not shape_address:
    raise _field_error("shape", "NULL", f"with ndim {ndim}")
  shape = _int64s(shape_address, ndim)
  if any(dim < 0 for dim in shape):
    raise _field_error("shape", shape, "a dimension is negative")
  # A result holds every element, even broadcast ones; NumPy counts 0 as 1.
  if math.prod((max(dim, 1) for dim in shape),
               start=dtype.itemsize) > _MAX_SPAN_BYTES:
    raise _field_error("shape", shape,
                       f"its {dtype} elements need more bytes than any "
                       "address space holds")
  return shape


def _checked_strides(strides: tuple[int, ...],
                     dtype: np.dtype[Any]) -> tuple[int, ...]:
  # jaxlib scales every stride by the item size in int64, even unused ones.
  if any(abs(stride) * dtype.itemsize > _INT64_MAX for stride in strides):
    raise _field_error("strides", strides,
                       "a stride in bytes overflows a signed 64-bit offset")
  return strides


def _checked_address(data: int, byte_offset: int) -> int:
  """Returns ``data + byte_offset``, the address of the first element."""
  if byte_offset > _INT64_MAX:
    raise _field_error("byte_offset", byte_offset,
                       "beyond a signed 64-bit offset")
  address = data + byte_offset
  if address > _ADDRESS_MAX:
    raise _field_error("byte_offset", byte_offset,
                       f"data + byte_offset wraps around from {data:#x}")
  return address


def _check_span(data: int, address: int, shape: tuple[int, ...],
                strides: tuple[int, ...], dtype: np.dtype[Any],
                layout_field: str) -> None:
  """Checks that the bytes the elements span can exist.

  Args:
    layout_field: ``"strides"``, or ``"shape"`` if the producer passed none.
  """
  low, count = element_span(shape, strides)
  if not count:
    return  # No element, no memory.
  if not data:
    raise _field_error("data", "NULL",
                       f"for a tensor of {math.prod(shape)} elements")
  first = address + low * dtype.itemsize
  last = first + count * dtype.itemsize
  if (count * dtype.itemsize > _MAX_SPAN_BYTES or first < 0
      or last - 1 > _ADDRESS_MAX):
    raise _field_error(
        layout_field, strides if layout_field == "strides" else shape,
        f"at address {address:#x} the tensor spans bytes {first:#x} to "
        f"{last:#x}, beyond any address space")


def _field_error(field: str, value: object, why: str) -> BufferError:
  return BufferError(
      f"from_dlpack: the DLPack tensor's {field} is {value}: {why}. The "
      "producer's tensor is invalid; none of its elements was read.")


def _int64s(address: int, count: int) -> tuple[int, ...]:
  if not count:
    return ()
  return tuple(_INT64_ARRAYS[count].from_address(address)[:])


# Made once: ctypes looks an array type up on every `c_int64 * n`.
_INT64_ARRAYS = [ctypes.c_int64 * count for count in range(_MAX_NDIM + 1)]


def _row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
  strides, step = [], 1
  for dim in reversed(shape):
    strides.append(step)
    step *= max(dim, 1)
  return tuple(reversed(strides))


# Structures are read and written as bytes: far cheaper than ctypes fields.
_VERSIONED_HEADER = struct.Struct("=IIQQQ")  # version, ctx, deleter, flags
_TENSOR_FIELDS = struct.Struct("=QiiiBBHQQQ")  # DLTensor, in field order
_LEGACY_TAIL = struct.Struct("=QQ")  # manager_ctx, deleter
_HEADER_SIZE = _VERSIONED_HEADER.size
_TENSOR_SIZE = _TENSOR_FIELDS.size
_LEGACY_SIZE = _TENSOR_SIZE + _LEGACY_TAIL.size
assert _TENSOR_SIZE == ctypes.sizeof(_DLTensor)
assert _LEGACY_SIZE == ctypes.sizeof(_DLManagedTensor)
assert _HEADER_SIZE + _TENSOR_SIZE == ctypes.sizeof(_DLManagedTensorVersioned)
_TENSOR_BYTES = ctypes.c_char * _TENSOR_SIZE
_VERSIONED_BYTES = ctypes.c_char * (_HEADER_SIZE + _TENSOR_SIZE)
_LegacyBytes = ctypes.c_char * _LEGACY_SIZE


class _NumpyRelease(NamedTuple):
  """NumPy's C functions that release DLPack structures, by address.

  They release all structures made here, so no Python runs when jaxlib frees an
  import (any thread) or after finalisation (NumPy's deleters then leak, as they
  must). Per NumPy 2.1 to 2.5 and main (``dlpack.c``; ``GateTest`` checks):

  Attributes:
    legacy_deleter, versioned_deleter: taking the GIL, free the structure (one
      ``PyMem_Malloc`` block) and drop one reference to ``manager_ctx``.
    legacy_destructor, versioned_destructor: capsule destructors: call the
      tensor's deleter, if not NULL, unless the capsule was renamed used.
  """
  legacy_deleter: int
  versioned_deleter: int
  legacy_destructor: int
  versioned_destructor: int


def _numpy_release() -> _NumpyRelease:
  """Reads NumPy's release functions out of capsules NumPy makes."""
  probe: Any = np.zeros(1, np.uint8)  # NumPy's stubs for pytype lack __dlpack__.
  legacy = probe.__dlpack__()
  versioned = probe.__dlpack__(max_version=(1, 0))
  legacy_managed = _capsule_get_pointer(legacy, _LEGACY_NAME_PTR)
  versioned_managed = _capsule_get_pointer(versioned, _VERSIONED_NAME_PTR)
  # The capsules die unconsumed, and NumPy releases what it allocated.
  return _NumpyRelease(
      legacy_deleter=_LEGACY_TAIL.unpack(
          _LEGACY_TAIL_BYTES.from_address(legacy_managed + _TENSOR_SIZE))[1],
      versioned_deleter=_VERSIONED_HEADER.unpack(
          _VERSIONED_HEADER_BYTES.from_address(versioned_managed))[3],
      legacy_destructor=_capsule_get_destructor(legacy),
      versioned_destructor=_capsule_get_destructor(versioned))


_LEGACY_TAIL_BYTES = ctypes.c_char * _LEGACY_TAIL.size
_VERSIONED_HEADER_BYTES = ctypes.c_char * _HEADER_SIZE
_NUMPY = _numpy_release()
_DESTRUCTORS = {False: _NUMPY.legacy_destructor,
                True: _NUMPY.versioned_destructor}


def _reissue(address: int, versioned: bool) -> Any:
  """Returns a new capsule owning a claimed tensor (deleted if unconsumed)."""
  name = _VERSIONED_NAME_PTR if versioned else _LEGACY_NAME_PTR
  try:
    return _capsule_new(address, name, _DESTRUCTORS[versioned])
  except BaseException:
    _release_now(address, versioned)  # Nothing else will.
    raise


def _release_now(address: int, versioned: bool) -> None:
  """Calls a claimed managed tensor's deleter, if it has one."""
  offset = (_DLManagedTensorVersioned.deleter.offset if versioned
            else _DLManagedTensor.deleter.offset)
  deleter = ctypes.c_void_p.from_address(address + offset).value
  if deleter:
    _ProducerDeleter(deleter)(address)


def _new_structure(size: int, layout: Callable[[int, int, int], bytes],
                   owner: Any, versioned: bool) -> Any:
  """Returns a capsule of a new managed tensor, which keeps ``owner`` alive.

  Args:
    size: bytes to allocate: the structure, then any shape and strides.
    layout: ``layout(address, manager_ctx, deleter)`` returns the ``size``
      bytes to write at ``address``, with those two fields as given.
    owner: held until release, which drops it (perhaps releasing what it holds).
    versioned: whether the structure is a ``DLManagedTensorVersioned``.
  """
  structure = _pymem_malloc(size)
  if not structure:
    raise MemoryError("from_dlpack: no memory for a DLPack structure.")
  deleter = (_NUMPY.versioned_deleter if versioned
             else _NUMPY.legacy_deleter)
  _byte_array(size).from_address(structure).raw = layout(
      structure, id(owner), deleter)
  _py_incref(owner)
  global structures_made
  structures_made += 1
  name = _VERSIONED_NAME_PTR if versioned else _LEGACY_NAME_PTR
  try:
    return _capsule_new(structure, name, _DESTRUCTORS[versioned])
  except BaseException:
    _release_now(structure, versioned)  # Frees it and drops ``owner``.
    raise


@functools.lru_cache(maxsize=None)
def _byte_array(size: int) -> Any:
  # Made once per size: ctypes looks an array type up on every `c_char * n`.
  return ctypes.c_char * size


def _self_contained_layout(
    fields: tuple[int, ...], shape: tuple[int, ...],
    strides: tuple[int, ...] | None
) -> tuple[int, Callable[[int, int, int], bytes]]:
  """A 0.x structure that stores its own shape and strides.

  As NumPy's: shape, strides after it in one allocation; points only at data.

  Args:
    fields: a ``DLTensor``'s fields in order; shape and strides are replaced.
    shape: the shape to store.
    strides: in elements; ``None`` stores NULL strides (row-major).

  Returns:
    ``(size, layout)``, for :func:`_new_structure`.
  """
  ndim = len(shape)
  dims = shape if strides is None else shape + strides
  packed_dims = struct.pack(f"={len(dims)}q", *dims)

  def layout(structure: int, manager_ctx: int, deleter: int) -> bytes:
    shape_address = structure + _LEGACY_SIZE if ndim else 0
    strides_address = (
        shape_address + 8 * ndim if ndim and strides is not None else 0)
    return _TENSOR_FIELDS.pack(
        *fields[:7], shape_address, strides_address, fields[9]
    ) + _LEGACY_TAIL.pack(manager_ctx, deleter) + packed_dims

  return _LEGACY_SIZE + len(packed_dims), layout


def _self_contained_structure(tensor: bytes, info: TensorInfo,
                              keep_alive: Any) -> Any:
  """A 0.x capsule of ``tensor`` that needs nothing of its producer's.

  Args:
    tensor: a claimed ``DLTensor``'s bytes; ``info`` is what they say.
    keep_alive: held until the new structure is released.
  """
  fields = _TENSOR_FIELDS.unpack(tensor)
  has_strides = bool(fields[3] and fields[8])  # ndim, strides
  size, layout = _self_contained_layout(
      fields, info.shape, info.strides if has_strides else None)
  return _new_structure(size, layout, keep_alive, versioned=False)


def _after(tensor: bytes) -> Callable[[int, int, int], bytes]:
  """A 0.x layout of ``tensor``; its shape and strides stay in the owner."""
  return lambda _, manager_ctx, deleter: tensor + _LEGACY_TAIL.pack(
      manager_ctx, deleter)


# Managed tensors made; tests read it to see which path an import/export took.
structures_made = 0


def _renew_lock_after_fork() -> None:
  # A fork while another thread holds the lock leaves it stuck in the child.
  global _claim_lock
  _claim_lock = threading.Lock()


os.register_at_fork(after_in_child=_renew_lock_after_fork)


def numpy_dtype(dl_dtype: tuple[int, int, int]) -> np.dtype[Any] | None:
  """The NumPy dtype for DLPack's ``(code, bits, lanes)``, if there is one."""
  return _DTYPES.get(dl_dtype[:2]) if dl_dtype[2] == 1 else None


def as_versioned_capsule(capsule: Any, version: tuple[int, int],
                         flags: int) -> Any:
  """Returns a 1.x capsule for the tensor of a 0.x one, taking it over.

  Holding ``capsule`` unconsumed, the new tensor runs its deleter exactly once.

  Args:
    capsule: a 0.x capsule only the caller holds, handed nowhere else.
    version: the ``(1, minor)`` to stamp on the new capsule.
    flags: the 1.x flags (``FLAG_READ_ONLY``, ``FLAG_IS_COPIED``).
  """
  versioned, address = _managed_tensor_address(capsule)
  if versioned:
    raise ValueError("as_versioned_capsule takes a 0.x capsule.")
  tensor = bytes(_TENSOR_BYTES.from_address(address))

  def layout(structure: int, manager_ctx: int, deleter: int) -> bytes:
    del structure  # The DLTensor points into the 0.x structure.
    return _VERSIONED_HEADER.pack(version[0], version[1], manager_ctx,
                                  deleter, flags) + tensor

  return _new_structure(_HEADER_SIZE + _TENSOR_SIZE, layout, capsule,
                        versioned=True)


def mark_copied(capsule: Any) -> Any:
  """Sets IS_COPIED on a fresh 1.x capsule only the caller holds; returns it.

  For a copy the caller owns whose producer does not know it is a copy.

  Raises:
    ValueError: ``capsule`` is a 0.x capsule, which has no flags.
  """
  versioned, address = _managed_tensor_address(capsule)
  if not versioned:
    raise ValueError("mark_copied takes a 1.x capsule.")
  tensor = _DLManagedTensorVersioned.from_address(address)
  tensor.flags = (tensor.flags | FLAG_IS_COPIED) & ~FLAG_READ_ONLY
  return capsule


def element_span(shape: tuple[int, ...],
                 strides: tuple[int, ...]) -> tuple[int, int]:
  """Where a strided tensor's elements lie, relative to its first element.

  Returns:
    ``(low, count)``: the lowest offset the strides reach (<= 0) and the
    elements from there to the highest; ``(0, 0)`` if there are none.
  """
  if not math.prod(shape):
    return 0, 0
  extents = [stride * (dim - 1) for stride, dim in zip(strides, shape)]
  low = sum(e for e in extents if e < 0)
  high = sum(e for e in extents if e > 0)
  return low, high - low + 1


def as_span_capsule(capsule: Any, info: TensorInfo,
                    align: int = 1) -> tuple[Any, int, int]:
  """Takes over ``capsule`` as a 0.x capsule of all the memory it spans.

  The new tensor, one row-major ``info.dtype`` vector from the lowest element
  reached to the highest, is what every jaxlib aliases and the strided tensor
  is gathered from; holding ``capsule`` unconsumed, it runs its deleter
  exactly once.

  Args:
    capsule: an unconsumed capsule from :func:`take`, handed nowhere else.
    info: what :func:`take` returned with it.
    align: the vector starts at a multiple of ``align`` bytes, at most that
      many elements early (an executable may need it). Only where allocations
      start at such multiples (CUDA, ROCm: 256), so added bytes lie in them.

  Returns:
    ``(span_capsule, first, count)``: the new capsule, the first element's
    offset in the vector and the vector's length, in elements.

  Raises:
    BufferError: the lowest element is a fraction of an element off ``align``.
  """
  low, count = element_span(info.shape, info.strides)
  first = info.address + low * info.dtype.itemsize
  lead, remainder = divmod(first % align, info.dtype.itemsize)
  if remainder:
    raise BufferError(
        f"from_dlpack: the tensor's data at {first:#x} cannot start a "
        f"{align}-byte aligned vector of {info.dtype} elements.")
  if count:  # A zero-size tensor spans nothing to read, aligned or not.
    first -= lead * info.dtype.itemsize
    low -= lead
    count += lead

  def layout(structure: int, manager_ctx: int, deleter: int) -> bytes:
    # The one dimension is stored after the structure; NULL strides: row-major.
    return _TENSOR_FIELDS.pack(
        first, *info.device, 1, *info.dl_dtype, structure + _LEGACY_SIZE, 0,
        0) + _LEGACY_TAIL.pack(manager_ctx, deleter) + _INT64.pack(count)

  span = _new_structure(_LEGACY_SIZE + 8, layout, capsule, versioned=False)
  return span, -low, count


_INT64 = struct.Struct("=q")


def dl_type_code(dtype: np.dtype[Any]) -> int | None:
  """DLPack's type code for a NumPy dtype, or ``None`` if it has none."""
  code_bits = _DL_DTYPES.get(dtype)
  return None if code_bits is None else code_bits[0]


# DLPack 1.1's float4_e2m1fn, packed two a byte by JAX as by DLPack's default
# (IS_SUBBYTE_TYPE_PADDED unset); NumPy holds one a byte: not in _DTYPES.
_PACKED_TYPE_CODES = {np.dtype(ml_dtypes.float4_e2m1fn): 17}


def buffer_type_code(dtype: np.dtype[Any]) -> int | None:
  """DLPack's code for a JAX ``dtype`` buffer (packed sub-byte too), or None."""
  code = dl_type_code(dtype)
  return _PACKED_TYPE_CODES.get(dtype) if code is None else code


def capsule_for_host_array(array: np.ndarray[Any, Any],
                           device_id: int = 0) -> Any:
  """Returns a 0.x CPU capsule that keeps ``array`` alive; ml_dtypes too.

  Args:
    array: the data; the capsule aliases it.
    device_id: the ``kDLCPU`` device id to record.

  Raises:
    BufferError: ``array``'s dtype has no DLPack equivalent.
  """
  code_bits = _DL_DTYPES.get(array.dtype)
  if code_bits is None:
    raise BufferError(f"dtype {array.dtype} has no DLPack equivalent.")
  fields = (array.ctypes.data, KDL_CPU, device_id, array.ndim, code_bits[0],
            code_bits[1], 1, 0, 0, 0)
  size, layout = _self_contained_layout(
      fields, array.shape,
      tuple(stride // array.itemsize for stride in array.strides))
  return _new_structure(size, layout, array, versioned=False)


def legacy_capsule_of_read_only(
    array: np.ndarray[Any, Any]) -> tuple[Any, int]:
  """A 0.x capsule of a read-only NumPy array, and its data address.

  For 0.x-only jaxlib. NumPy exports a read-only array only as a READ_ONLY 1.x
  capsule, the caller's alone, with fields NumPy filled: nothing to claim or
  check. A 0.x structure holds it unconsumed; its release releases the array.

  Args:
    array: a read-only ``numpy.ndarray`` of a dtype NumPy exports.
  """
  producer: Any = array  # NumPy's stubs for pytype lack __dlpack__.
  capsule = producer.__dlpack__(max_version=MAX_VERSION)
  _, _, _, tensor = _read_structure(
      _capsule_get_pointer(capsule, _VERSIONED_NAME_PTR), True)
  fields = _TENSOR_FIELDS.unpack(tensor)
  address: int = fields[0] + fields[9]  # data + byte_offset
  return _new_structure(_LEGACY_SIZE, _after(tensor), capsule,
                        versioned=False), address


def writable_buffer_address(array: np.ndarray[Any, Any]) -> int:
  """A writable C-contiguous array's data address: 1/5 ``.ctypes.data`` cost."""
  buffer: Any = array  # NumPy's stubs do not declare the buffer protocol.
  return ctypes.addressof(_CHAR.from_buffer(buffer))


_CHAR = ctypes.c_char


def host_view(info: TensorInfo) -> np.ndarray[Any, Any]:
  """Read-only view of a CPU tensor; its capsule must outlive it unconsumed."""
  if info.size == 0:
    return np.empty(info.shape, info.dtype)
  itemsize = info.dtype.itemsize
  low, count = element_span(info.shape, info.strides)
  buffer = (ctypes.c_char * (count * itemsize)).from_address(
      info.address + low * itemsize)
  view: np.ndarray[Any, Any] = np.ndarray(
      info.shape, info.dtype, buffer=memoryview(buffer),
      offset=-low * itemsize,
      strides=tuple(s * itemsize for s in info.strides))
  view.flags.writeable = False
  return view
