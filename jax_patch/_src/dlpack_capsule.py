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

This is the only module that touches DLPack's C structures. It needs no
compiled extension: the structures are declared with ``ctypes`` and capsules
are handled through the CPython capsule API, reached through ``ctypes``.

A producer's capsule is memory-safety input. :func:`take` claims it (renames
it as used, under a lock) before reading a field, so that it is consumed
exactly once whatever other threads do; it then checks every field's
arithmetic before anything reads the tensor's memory, and hands jaxlib only
capsules it can release: jaxlib before 0.12 reads only DLPack 0.x capsules
(named ``"dltensor"``), and no jaxlib copes with a NULL deleter. The
producer's deleter runs exactly once, when jaxlib (or the capsule made here,
if never consumed) releases the tensor, or at once when the tensor is
refused.

What this module allocates is released by NumPy's own C functions for
DLPack (:class:`_NumpyRelease`), never by Python: freeing an import runs no
Python code, on any thread, and nothing of this module's is needed once the
interpreter is shutting down.
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

# The newest DLPack version whose structures this module reads. Every 1.x
# minor version keeps the 1.0 layout, so any 1.x capsule is accepted.
MAX_VERSION = (1, 1)

FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2

KDL_CPU = 1

# The most dimensions a tensor may have: NumPy's limit, and more than any
# producer makes. More is a corrupt tensor.
_MAX_NDIM = 64
# A tensor's bytes, and any offset into them, must fit in a signed 64-bit
# integer (jaxlib and NumPy compute them so); addresses must not wrap.
_INT64_MAX = (1 << 63) - 1
_ADDRESS_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1
# No 64-bit machine maps more than this for a process (x86-64 with 5-level
# paging gives user space 2**56 bytes, arm64 at most 2**52): a tensor that
# spans more describes memory that cannot exist, and a result that holds more
# cannot be made.
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
  # Function pointers are kept as plain addresses so that ctypes never wraps
  # (and never frees) them behind our back.
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


# A producer's deleter, called from here with the GIL held, as NumPy calls
# it: not every producer takes the GIL itself.
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
  """Returns ``obj`` with a reference that is never dropped.

  jaxlib may free an imported buffer during interpreter shutdown, after this
  module's globals are cleared; what its capsules point at must outlive
  them.
  """
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


# DLPack (type code, bits) -> NumPy dtype. Only the dtypes that jaxlib and
# NumPy/ml_dtypes can both represent one element per byte-addressable item.
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
    versioned: whether the capsule is a DLPack 1.x ``"dltensor_versioned"``.
    version: the capsule's ``(major, minor)``; ``(0, 0)`` for a 0.x capsule,
      which does not record its minor version.
    flags: the 1.x flags bit field; 0 for a 0.x capsule.
    address: the address of the first element (``data + byte_offset``).
    device: ``(device_type, device_id)``.
    dtype: the NumPy dtype (a DLPack type without one is refused).
    dl_dtype: DLPack's ``(code, bits, lanes)``.
    shape: the shape.
    strides: strides in elements; compact row-major when the producer passed
      none.
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


# Serialises claims: between reading a capsule's name and renaming it, another
# thread could otherwise claim it too, and the tensor be released twice.
_claim_lock = threading.Lock()


def _claim(capsule: Any) -> tuple[bool, int]:
  """Renames ``capsule`` as used and returns ``(versioned, address)``.

  From then on the managed tensor at ``address`` is the caller's to release:
  the producer's capsule destructor leaves a used capsule alone, and a second
  consumer finds it used.

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

  For a capsule only the calling thread holds, such as an export; an import
  claims its capsule first, with :func:`take`.

  Raises:
    TypeError: ``capsule`` is not a capsule.
    BufferError: the capsule is consumed, misnamed, of an unknown major
      version (its deleter has then been called), or describes a tensor no
      consumer may read (see :func:`take`).
  """
  versioned, address = _managed_tensor_address(capsule)
  version, _, flags, tensor = _read_structure(address, versioned)
  if versioned and version[0] != MAX_VERSION[0]:
    # Renamed first, so that the producer's destructor will not call the
    # deleter a second time; the deleter runs as the new capsule dies.
    _capsule_set_name(capsule, _USED_VERSIONED_NAME_PTR)
    _reissue(address, True)
    raise _version_error(*version)
  return _tensor_info(_TENSOR_FIELDS.unpack(tensor), versioned, version,
                      flags)


def _read_structure(address: int,
                    versioned: bool) -> tuple[tuple[int, int], int, int, bytes]:
  """Reads a managed tensor in one go.

  Returns:
    ``(version, deleter, flags, tensor)``: ``(0, 0)`` and no flags for a 0.x
    structure, and the ``DLTensor``'s bytes.
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

  The capsule is claimed (renamed as used) before any field is read, and
  every field is checked before anything reads the tensor's memory: ndim,
  shape, dtype, strides, byte offset, and that the bytes the tensor spans
  fit in a signed 64-bit size and lie inside the address space, without
  wrapping. What is refused has its producer's deleter called at once.

  Args:
    capsule: what the producer's ``__dlpack__`` returned.
    versioned_ok: whether jaxlib reads 1.x capsules; where not, a 1.x
      capsule's tensor is handed over as a 0.x one.
    fresh: ``capsule`` is known to be new and held only by the caller, as
      NumPy's and torch's ``__dlpack__`` make them: no other thread can
      consume it, so it is not claimed, and it is itself what jaxlib gets,
      or what a 0.x structure holds, unconsumed. Its fields are checked all
      the same.
    keep_alive: what the import holds instead of the producer's structure
      where the deleter is NULL (the producer object, say): see below.

  A NULL deleter, which DLPack allows, tells the producer nothing when the
  consumer is done, so nothing keeps its structure alive past this call: it
  may be freed as soon as ``from_dlpack`` returns. Such a tensor is handed
  over as a 0.x structure of this module's that holds its own copy of the
  shape and strides and ``keep_alive``; nothing of the producer's structure
  is read after this returns, and its release calls nothing of the
  producer's. (No jaxlib gets a NULL deleter either: every one up to 0.12
  aborts on one.) Only the tensor's memory is still the producer's: the
  import aliases it for as long as it lives, as it does any producer's.

  Returns:
    ``(own, info)``: a capsule jaxlib can consume, which owns the tensor
    (its destructor releases it if nothing consumes it), and what the tensor
    is.

  Raises:
    TypeError: ``capsule`` is not a capsule.
    BufferError: the capsule is consumed, misnamed or of an unsupported
      version, or a field is invalid; the message names the field and its
      value.
  """
  if fresh:
    versioned, address = _managed_tensor_address(capsule)
    own = capsule
  else:
    versioned, address = _claim(capsule)
    own = _reissue(address, versioned)
  # From here holding `own` is holding the tensor: where this raises, it dies
  # with the frame and the producer's deleter runs.
  try:
    version, deleter, flags, tensor = _read_structure(address, versioned)
    if versioned and version[0] != MAX_VERSION[0]:
      raise _version_error(*version)
    info = _tensor_info(_TENSOR_FIELDS.unpack(tensor), versioned, version,
                        flags)
    if not deleter:
      # `own`'s destructor reads the structure, which is alive now but may
      # not be once this returns: it dies here.
      return _self_contained_structure(tensor, info, keep_alive), info
    if versioned_ok or not versioned:
      return own, info  # jaxlib reads the producer's own structure.
    # A 0.x structure of the same DLTensor, pointing into the producer's
    # shape and strides, which live until the producer's deleter runs: when
    # `own` dies, after jaxlib releases the new structure.
    return _new_structure(_LEGACY_SIZE, _after(tensor), own,
                          versioned=False), info
  except BaseException:
    # Released now, not when the traceback's frames die.
    del own
    raise


def _tensor_info(fields: tuple[Any, ...], versioned: bool,
                 version: tuple[int, int], flags: int) -> TensorInfo:
  """Checks and converts the fields of a DLTensor, in declaration order.

  Reads the shape and strides arrays, and none of the tensor's elements.

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

  Every producer's everyday tensor: a known dtype, one or more dimensions,
  none empty, strides given and none negative. For those the checks of
  :func:`_tensor_info` reduce to a few bounds, checked here with a
  fraction of the work; everything else, valid or not, is ``None``, and
  takes the field-by-field checks, which word any refusal.
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
  # With no dimension empty and no stride negative, the elements span from
  # the first to sum(stride * (dim - 1)) past it.
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
  # A result holds every element, even of a broadcast; a zero dimension
  # counts as one, as NumPy counts it.
  if math.prod((max(dim, 1) for dim in shape),
               start=dtype.itemsize) > _MAX_SPAN_BYTES:
    raise _field_error("shape", shape,
                       f"its {dtype} elements need more bytes than any "
                       "address space holds")
  return shape


def _checked_strides(strides: tuple[int, ...],
                     dtype: np.dtype[Any]) -> tuple[int, ...]:
  # jaxlib multiplies every stride by the item size in 64 bits, also where
  # the dimension is 0 or 1 and the stride reaches nothing.
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
    layout_field: the field that set ``strides``: ``"strides"``, or
      ``"shape"`` where the producer passed none.
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


# The structures are read and written as bytes: one ctypes call and one
# (un)pack cost far less than a ctypes field access each.
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

  Every structure this module makes is released by them, so that no Python
  runs when jaxlib frees an import, on whichever thread, and none can run
  after the interpreter has finalised (NumPy's deleters then leak, as they
  must). From NumPy 2.1 (the first with DLPack 1.x) to 2.5 and on its main
  branch (read in ``numpy/_core/src/multiarray/dlpack.c``; ``GateTest``
  checks the installed one):

  Attributes:
    legacy_deleter, versioned_deleter: a ``DLManagedTensor[Versioned]``
      deleter. With the GIL taken, it frees the structure, one
      ``PyMem_Malloc`` block, and drops one reference to ``manager_ctx``.
    legacy_destructor, versioned_destructor: a capsule destructor. Unless
      the capsule was renamed as used, it calls the tensor's deleter, if not
      NULL, as the DLPack spec has every producer's destructor do.
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
  """Returns a new capsule for a claimed managed tensor, which it then owns.

  Unless a consumer takes it, the tensor's deleter runs when the capsule
  dies, in NumPy's destructor: holding the capsule is holding the tensor.
  """
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
    size: the bytes to allocate: the structure, and any shape and strides
      stored after it.
    layout: ``layout(address, manager_ctx, deleter)`` returns the ``size``
      bytes to write at ``address``, with those two fields as given.
    owner: what the tensor needs alive until it is released: releasing it
      drops this reference, which may release a tensor ``owner`` holds.
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

  Laid out as NumPy lays out its own: the shape, then the strides, after the
  structure, in the same allocation, so that it points into nothing but the
  tensor's memory.

  Args:
    fields: a ``DLTensor``'s fields, in declaration order; its shape and
      strides pointers are replaced.
    shape: the shape to store.
    strides: the strides to store, in elements; ``None`` stores NULL strides
      (row-major).

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
  """The layout of a 0.x structure of ``tensor``, a ``DLTensor``'s bytes.

  Its shape and strides stay where ``tensor`` points: in the structure the
  new one's owner holds.
  """
  return lambda _, manager_ctx, deleter: tensor + _LEGACY_TAIL.pack(
      manager_ctx, deleter)


# How many managed tensors this module has made: a count tests read to see
# which path an import or export took.
structures_made = 0


def _renew_lock_after_fork() -> None:
  # A fork while another thread held the lock leaves it held in the child,
  # where no thread will release it.
  global _claim_lock
  _claim_lock = threading.Lock()


os.register_at_fork(after_in_child=_renew_lock_after_fork)


def numpy_dtype(dl_dtype: tuple[int, int, int]) -> np.dtype[Any] | None:
  """The NumPy dtype for DLPack's ``(code, bits, lanes)``, if there is one."""
  return _DTYPES.get(dl_dtype[:2]) if dl_dtype[2] == 1 else None


def as_versioned_capsule(capsule: Any, version: tuple[int, int],
                         flags: int) -> Any:
  """Returns a 1.x capsule for the tensor of a 0.x one, taking it over.

  The new tensor holds ``capsule``, unconsumed; its destructor runs the
  tensor's deleter exactly once, when the new capsule's consumer releases
  the tensor, or when the new capsule dies unconsumed.

  Args:
    capsule: a 0.x capsule only the caller holds, such as jaxlib exports; the
      caller must not hand it to anything else.
    version: the ``(1, minor)`` to stamp on the new capsule.
    flags: the 1.x flags (``FLAG_READ_ONLY``, ``FLAG_IS_COPIED``).
  """
  versioned, address = _managed_tensor_address(capsule)
  if versioned:
    raise ValueError("as_versioned_capsule takes a 0.x capsule.")
  # The 0.x capsule stays unconsumed, held by the new tensor: when that is
  # released, the capsule dies and its destructor releases what it holds.
  tensor = bytes(_TENSOR_BYTES.from_address(address))

  def layout(structure: int, manager_ctx: int, deleter: int) -> bytes:
    del structure  # The DLTensor points into the 0.x structure.
    return _VERSIONED_HEADER.pack(version[0], version[1], manager_ctx,
                                  deleter, flags) + tensor

  return _new_structure(_HEADER_SIZE + _TENSOR_SIZE, layout, capsule,
                        versioned=True)


def mark_copied(capsule: Any) -> Any:
  """Sets IS_COPIED on a fresh 1.x capsule only the caller holds; returns it.

  For a capsule the caller just had made of a copy it owns (NumPy's of a
  private array, say), whose producer does not know it is a copy.

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
    ``(low, count)``: the lowest element offset the strides reach (0 or
    negative) and how many elements lie from there to the highest; ``(0,
    0)`` for a tensor with no elements.
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

  The new tensor is one row-major vector of ``info.dtype``, from the lowest
  element the strides reach to the highest: a layout every jaxlib aliases,
  from which the strided tensor can be gathered. The new tensor holds
  ``capsule``, unconsumed, so its producer's deleter runs exactly once, when
  the new capsule's consumer releases the tensor or the new capsule dies
  unconsumed, and ``capsule`` with it.

  Args:
    capsule: a capsule :func:`take` returned, unconsumed, and the ``info``
      it returned with it; the caller must not hand ``capsule`` to anything
      else.
    info: what :func:`take` read.
    align: the vector starts at a multiple of ``align`` bytes, that many
      elements before the lowest one at most (an executable that reads it
      may need that). Only where the memory's allocation is known to start
      at such a multiple, so that the bytes added lie in the same
      allocation: CUDA and ROCm allocations start at 256 bytes.

  Returns:
    ``(span_capsule, first, count)``: the new capsule, the offset of the
    tensor's first element in the vector and the vector's length, in
    elements.

  Raises:
    BufferError: the lowest element lies a number of bytes past an
      ``align`` boundary that is no multiple of the element size.
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
    # The one dimension is stored after the structure; NULL strides mean
    # row-major.
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


# DLPack 1.1's float4_e2m1fn, which JAX holds as DLPack 1.1 lays sub-byte
# types out by default: packed, two elements to a byte (IS_SUBBYTE_TYPE_PADDED
# unset). NumPy holds it one element to a byte, so it is not in _DTYPES.
_PACKED_TYPE_CODES = {np.dtype(ml_dtypes.float4_e2m1fn): 17}


def buffer_type_code(dtype: np.dtype[Any]) -> int | None:
  """DLPack's type code for a JAX buffer of ``dtype``, or ``None`` if none.

  Unlike :func:`dl_type_code`, which describes NumPy arrays, it knows the
  sub-byte types JAX packs as DLPack does.
  """
  code = dl_type_code(dtype)
  return _PACKED_TYPE_CODES.get(dtype) if code is None else code


def capsule_for_host_array(array: np.ndarray[Any, Any],
                           device_id: int = 0) -> Any:
  """Returns a 0.x capsule on the CPU that keeps ``array`` alive.

  Unlike ``array.__dlpack__()``, it accepts the ml_dtypes dtypes (bfloat16,
  float8) that NumPy refuses to export.

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

  For jaxlib that reads only 0.x capsules. NumPy exports a read-only array
  only as a READ_ONLY 1.x capsule, which only the caller holds and whose
  fields NumPy filled, so there is nothing to claim or check: a 0.x
  structure of the same tensor holds it, unconsumed, and it releases the
  array when the structure is released.

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
  """The address of a writable C-contiguous array's first element.

  A fifth of what ``array.ctypes.data`` costs, for the import's fast path.
  """
  buffer: Any = array  # NumPy's stubs do not declare the buffer protocol.
  return ctypes.addressof(_CHAR.from_buffer(buffer))


_CHAR = ctypes.c_char


def host_view(info: TensorInfo) -> np.ndarray[Any, Any]:
  """Returns a read-only NumPy view of a CPU tensor's elements.

  The view does not own the memory: the capsule ``info`` was read from must
  stay alive, unconsumed, for as long as the view is used.
  """
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
