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
"""

from __future__ import annotations

import ctypes
import datetime
import math
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


# Our deleters and capsule destructors, called from C: ctypes takes the GIL.
_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# A producer's deleter, called from here with the GIL held, as NumPy calls
# it: not every producer takes the GIL itself. jaxlib 0.4.35's, called
# without it while other threads work, aborts the process.
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
# Used from a capsule destructor, where the capsule's refcount is already zero:
# it must be passed as a raw pointer, never as a Python object.
_raw_capsule_is_valid = _capsule_api(
    "PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
_raw_capsule_get_pointer = _capsule_api(
    "PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)


def _immortal(obj: Any) -> Any:
  """Returns ``obj`` with a reference that is never dropped.

  jaxlib may free an imported buffer during interpreter shutdown, after this
  module's globals are cleared; what its deleter needs must outlive them.
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
  if not is_capsule(capsule):
    raise TypeError(
        f"__dlpack__ returned a {type(capsule).__name__}, not a DLPack "
        "capsule.")
  name = capsule_name(capsule)
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
  if versioned:
    raw = bytes(_VERSIONED_BYTES.from_address(address))
    major, minor, _, _, flags = _VERSIONED_HEADER.unpack_from(raw)
    if major != MAX_VERSION[0]:
      _refuse_versioned(capsule,
                        _DLManagedTensorVersioned.from_address(address))
      raise _version_error(major, minor)
    fields = _TENSOR_FIELDS.unpack_from(raw, _HEADER_SIZE)
    return _tensor_info(fields, True, (major, minor), flags)
  fields = _TENSOR_FIELDS.unpack(_TENSOR_BYTES.from_address(address))
  return _tensor_info(fields, False, (0, 0), 0)


def _version_error(major: int, minor: int) -> BufferError:
  if major > MAX_VERSION[0]:
    return BufferError(
        f"from_dlpack: the producer returned a DLPack {major}.{minor} "
        f"capsule; this JAX reads DLPack up to {MAX_VERSION[0]}.x.")
  return BufferError(
      f"from_dlpack: the producer returned a 'dltensor_versioned' capsule of "
      f"DLPack {major}.{minor}; that structure exists only from DLPack 1.0.")


def take(capsule: Any, *, versioned_ok: bool,
         null_deleter_ok: bool) -> tuple[Any, TensorInfo]:
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
    null_deleter_ok: whether jaxlib copes with a NULL deleter, which DLPack
      allows; where not, a tensor with one is handed over with a deleter of
      this module's, which calls nothing.

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
  versioned, address = _claim(capsule)
  release: Callable[[], None] = lambda: None
  try:
    if versioned:
      raw = bytes(_VERSIONED_BYTES.from_address(address))
      major, minor, _, deleter, flags = _VERSIONED_HEADER.unpack_from(raw)
      tensor = raw[_HEADER_SIZE:]
    else:
      raw = bytes(_LegacyBytes.from_address(address))
      (major, minor), flags = (0, 0), 0
      deleter = _LEGACY_TAIL.unpack_from(raw, _TENSOR_SIZE)[1]
      tensor = raw[:_TENSOR_SIZE]
    release = _producer_release(deleter, address)
    if versioned and major != MAX_VERSION[0]:
      raise _version_error(major, minor)
    info = _tensor_info(_TENSOR_FIELDS.unpack(tensor), versioned,
                        (major, minor), flags)
    if (versioned_ok or not versioned) and (deleter or null_deleter_ok):
      # jaxlib reads the producer's own structure: only the capsule is new.
      name = _VERSIONED_NAME_PTR if versioned else _LEGACY_NAME_PTR
      return _capsule_new(address, name,
                          _REISSUE_DESTRUCTOR_ADDRESS[name.value]), info
    legacy = _LegacyBytes.from_buffer_copy(
        tensor + _LEGACY_TAIL.pack(address, _DELETER_ADDRESS))
  except BaseException:
    release()  # Nothing else will: the capsule is claimed.
    raise
  # From here _new_capsule releases the tensor if it fails.
  return _new_capsule(ctypes.addressof(legacy), _LEGACY_NAME_PTR,
                      LEGACY_NAME, legacy, release), info


def _tensor_info(fields: tuple[Any, ...], versioned: bool,
                 version: tuple[int, int], flags: int) -> TensorInfo:
  """Checks and converts the fields of a DLTensor, in declaration order.

  Reads the shape and strides arrays, and none of the tensor's elements.

  Raises:
    BufferError: a field no consumer may act on; the message names it.
  """
  (data, device_type, device_id, ndim, code, bits, lanes, shape_address,
   strides_address, byte_offset) = fields
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
  return tuple(_INT64_ARRAYS[count].from_address(address))


# Made once: ctypes looks an array type up on every `c_int64 * n`.
_INT64_ARRAYS = [ctypes.c_int64 * count for count in range(_MAX_NDIM + 1)]


def _row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
  strides, step = [], 1
  for dim in reversed(shape):
    strides.append(step)
    step *= max(dim, 1)
  return tuple(reversed(strides))


def _refuse_versioned(capsule: Any,
                      managed: _DLManagedTensorVersioned) -> None:
  # Renamed first, so that the producer's capsule destructor will not call
  # the deleter a second time.
  _capsule_set_name(capsule, _USED_VERSIONED_NAME_PTR)
  if managed.deleter:
    _ProducerDeleter(managed.deleter)(ctypes.addressof(managed))


class _LiveTensors:
  """Managed tensors this module made, with what each keeps alive.

  A tensor leaves exactly once, when its deleter runs. The methods read no
  module globals, so they still work during interpreter shutdown.
  """

  def __init__(self) -> None:
    self._lock = threading.Lock()
    self._entries: dict[int, tuple[Any, Callable[[], None]]] = {}

  def add(self, address: int, keep_alive: Any,
          on_release: Callable[[], None]) -> None:
    with self._lock:
      self._entries[address] = (keep_alive, on_release)

  def release(self, address: int) -> None:
    with self._lock:
      entry = self._entries.pop(address, None)
    if entry is not None:
      entry[1]()

  def __len__(self) -> int:
    return len(self._entries)

  def renew_lock(self) -> None:
    """Replaces the lock, in a forked child: only its thread runs there."""
    self._lock = threading.Lock()


def _make_deleter(live: _LiveTensors) -> Any:
  def deleter(address: int | None) -> None:
    # Runs on whichever thread frees the tensor; ctypes takes the GIL
    # first. Nothing may escape into C.
    try:
      if address:
        live.release(address)
    except BaseException:  # pylint: disable=broad-except
      pass
  return _immortal(_Deleter(deleter))


def _make_capsule_destructor(live: _LiveTensors, name: ctypes.c_char_p,
                             is_valid: Any, get_pointer: Any) -> Any:
  def destructor(capsule: int | None) -> None:
    # A capsule of ours that dies still owns its tensor unless a consumer
    # took it (and renamed the capsule).
    try:
      if capsule and is_valid(capsule, name):
        live.release(get_pointer(capsule, name))
    except BaseException:  # pylint: disable=broad-except
      pass
  return _immortal(_Deleter(destructor))


def _address_of(function: Any) -> int:
  address: int = ctypes.cast(function, ctypes.c_void_p).value or 0
  return address


live_tensors = _immortal(_LiveTensors())


def _renew_locks_after_fork() -> None:
  # A fork while another thread held a lock leaves it held in the child,
  # where no thread will release it.
  global _claim_lock
  _claim_lock = threading.Lock()
  live_tensors.renew_lock()


os.register_at_fork(after_in_child=_renew_locks_after_fork)
_DELETER_ADDRESS = _address_of(_make_deleter(live_tensors))
_DESTRUCTOR_ADDRESS = {
    name.value: _address_of(_make_capsule_destructor(
        live_tensors, name, _raw_capsule_is_valid, _raw_capsule_get_pointer))
    for name in (_LEGACY_NAME_PTR, _VERSIONED_NAME_PTR)}


def _make_reissue_destructor(name: ctypes.c_char_p, deleter_offset: int,
                             is_valid: Any, get_pointer: Any,
                             read_address: Any, deleter_call: Any) -> Any:
  def destructor(capsule: int | None) -> None:
    # Destroys a new capsule for a producer's own managed tensor: if no
    # consumer took it, the tensor's deleter runs, as the producer's capsule
    # destructor would have run it.
    try:
      if capsule and is_valid(capsule, name):
        managed = get_pointer(capsule, name)
        deleter = read_address(managed + deleter_offset).value
        if deleter:
          deleter_call(deleter)(managed)
    except BaseException:  # pylint: disable=broad-except
      pass
  return _immortal(_Deleter(destructor))


_REISSUE_DESTRUCTOR_ADDRESS = {
    name.value: _address_of(_make_reissue_destructor(
        name, getattr(structure, "deleter").offset, _raw_capsule_is_valid,
        _raw_capsule_get_pointer, ctypes.c_void_p.from_address,
        _ProducerDeleter))
    for name, structure in ((_LEGACY_NAME_PTR, _DLManagedTensor),
                            (_VERSIONED_NAME_PTR, _DLManagedTensorVersioned))}


def _new_capsule(address: int, name: ctypes.c_char_p, name_value: bytes,
                 keep_alive: Any, on_release: Callable[[], None]) -> Any:
  """Wraps the managed tensor at ``address``, whose deleter is ours."""
  live_tensors.add(address, keep_alive, on_release)
  try:
    return _capsule_new(address, name, _DESTRUCTOR_ADDRESS[name_value])
  except BaseException:
    live_tensors.release(address)
    raise


# Producers have one deleter each: wrapping it once saves a ctypes
# construction per import.
_deleter_calls: dict[int, Any] = {}


def _producer_release(deleter: int | None,
                      address: int) -> Callable[[], None]:
  """Returns a call of the producer's ``deleter`` on its tensor."""
  if not deleter:
    return lambda: None
  call = _deleter_calls.get(deleter)
  if call is None:
    call = _deleter_calls.setdefault(deleter, _ProducerDeleter(deleter))
  return lambda: call(address)


# The import fast path reads structures as bytes: one ctypes call and one
# unpack cost far less than a ctypes field access each.
_VERSIONED_HEADER = struct.Struct("=IIQQQ")  # version, ctx, deleter, flags
_TENSOR_FIELDS = struct.Struct("=QiiiBBHQQQ")  # DLTensor, in field order
_LEGACY_TAIL = struct.Struct("=QQ")  # manager_ctx, deleter
_HEADER_SIZE = _VERSIONED_HEADER.size
_TENSOR_SIZE = _TENSOR_FIELDS.size
assert _TENSOR_SIZE == ctypes.sizeof(_DLTensor)
assert _HEADER_SIZE + _TENSOR_SIZE == ctypes.sizeof(_DLManagedTensorVersioned)
# Views of foreign memory, and the storage of a converted 0.x tensor.
_TENSOR_BYTES = ctypes.c_char * _TENSOR_SIZE
_VERSIONED_BYTES = ctypes.c_char * (_HEADER_SIZE + _TENSOR_SIZE)
_LegacyBytes = ctypes.c_char * ctypes.sizeof(_DLManagedTensor)


def numpy_dtype(dl_dtype: tuple[int, int, int]) -> np.dtype[Any] | None:
  """The NumPy dtype for DLPack's ``(code, bits, lanes)``, if there is one."""
  return _DTYPES.get(dl_dtype[:2]) if dl_dtype[2] == 1 else None


def as_versioned_capsule(capsule: Any, version: tuple[int, int],
                         flags: int) -> Any:
  """Returns a 1.x capsule for the tensor of a 0.x one, taking it over.

  ``capsule`` is renamed ``"used_dltensor"``; its deleter runs exactly once,
  when the new capsule's consumer releases the tensor, or when the new
  capsule dies unconsumed.

  Args:
    capsule: a 0.x capsule, such as jaxlib exports.
    version: the ``(1, minor)`` to stamp on the new capsule.
    flags: the 1.x flags (``FLAG_READ_ONLY``, ``FLAG_IS_COPIED``).
  """
  versioned, address = _managed_tensor_address(capsule)
  if versioned:
    raise ValueError("as_versioned_capsule takes a 0.x capsule.")
  raw = bytes(_LegacyBytes.from_address(address))
  _, deleter = _LEGACY_TAIL.unpack_from(raw, _TENSOR_SIZE)
  managed = _VERSIONED_BYTES.from_buffer_copy(
      _VERSIONED_HEADER.pack(version[0], version[1], address,
                             _DELETER_ADDRESS, flags) + raw[:_TENSOR_SIZE])
  return _own(managed, _VERSIONED_NAME_PTR, VERSIONED_NAME, capsule,
              _USED_LEGACY_NAME_PTR, _producer_release(deleter, address))


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


def as_span_capsule(capsule: Any,
                    info: TensorInfo) -> tuple[Any, int, int]:
  """Takes over ``capsule`` as a 0.x capsule of all the memory it spans.

  The new tensor is one row-major vector of ``info.dtype``, from the lowest
  element the strides reach to the highest: a layout every jaxlib aliases,
  from which the strided tensor can be gathered. ``capsule`` is renamed as
  used; its producer's deleter runs exactly once, when the new capsule's
  consumer releases the tensor or the new capsule dies unconsumed.

  Args:
    capsule: the 0.x or 1.x capsule ``info`` was read from, unconsumed.
    info: what :func:`take` or :func:`inspect` read from it.

  Returns:
    ``(span_capsule, first, count)``: the new capsule, the offset of the
    tensor's first element in the vector and the vector's length, in
    elements.
  """
  versioned, address = _managed_tensor_address(capsule)
  if versioned:
    deleter = _VERSIONED_HEADER.unpack_from(
        _VERSIONED_BYTES.from_address(address))[3]
  else:
    deleter = _LEGACY_TAIL.unpack_from(
        _LegacyBytes.from_address(address), _TENSOR_SIZE)[1]
  low, count = element_span(info.shape, info.strides)
  legacy_size = ctypes.sizeof(_DLManagedTensor)
  storage = (ctypes.c_char * (legacy_size + 8))()
  shape_address = ctypes.addressof(storage) + legacy_size
  struct.pack_into(
      f"={_TENSOR_FIELDS.format[1:]}QQq", storage, 0,
      info.address + low * info.dtype.itemsize, *info.device, 1,
      *info.dl_dtype, shape_address, 0, 0, address, _DELETER_ADDRESS, count)
  used_name = (_USED_VERSIONED_NAME_PTR if versioned
               else _USED_LEGACY_NAME_PTR)
  span = _own(storage, _LEGACY_NAME_PTR, LEGACY_NAME, capsule, used_name,
              _producer_release(deleter, address))
  return span, -low, count


def _own(managed: Any, name: ctypes.c_char_p, name_value: bytes,
         capsule: Any, used_name: ctypes.c_char_p,
         on_release: Callable[[], None]) -> Any:
  """Wraps ``managed`` in a new capsule and retires ``capsule``.

  ``managed`` is the new tensor's storage, kept alive until its deleter
  runs; ``on_release`` then releases the tensor ``capsule`` owned.
  """
  converted = _new_capsule(ctypes.addressof(managed), name, name_value,
                           managed, on_release)
  _capsule_set_name(capsule, used_name)
  return converted


def dl_type_code(dtype: np.dtype[Any]) -> int | None:
  """DLPack's type code for a NumPy dtype, or ``None`` if it has none."""
  code_bits = _DL_DTYPES.get(dtype)
  return None if code_bits is None else code_bits[0]


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
  ndim = array.ndim
  # One allocation: the managed tensor, then its shape and strides.
  legacy_size = ctypes.sizeof(_DLManagedTensor)
  storage = (ctypes.c_char * (legacy_size + 16 * ndim))()
  address = ctypes.addressof(storage)
  shape_address = address + legacy_size
  strides_address = shape_address + 8 * ndim
  struct.pack_into(
      f"={_TENSOR_FIELDS.format[1:]}QQ{2 * ndim}q", storage, 0,
      array.ctypes.data, KDL_CPU, device_id, ndim, code_bits[0],
      code_bits[1], 1, shape_address if ndim else 0,
      strides_address if ndim else 0, 0, 0, _DELETER_ADDRESS, *array.shape,
      *(s // array.itemsize for s in array.strides))
  return _new_capsule(address, _LEGACY_NAME_PTR, LEGACY_NAME,
                      (storage, array), lambda: None)


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
