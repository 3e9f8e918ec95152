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

jaxlib before 0.12 consumes only DLPack 0.x capsules (named ``"dltensor"``).
For those, a DLPack 1.x capsule (``"dltensor_versioned"``) is converted here
into a 0.x one that points at the same data; the producer's deleter runs
exactly once, when jaxlib (or the converted capsule, if never consumed)
releases the tensor. jaxlib 0.12 on reads 1.x capsules itself: they are only
read here, and handed over as they are.
"""

from __future__ import annotations

import ctypes
import dataclasses
import datetime
import math
import struct
import threading
from typing import Any, Callable

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

# Sanity bound on ndim: larger values are a corrupt tensor, not a real one.
_MAX_NDIM = 64

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


@dataclasses.dataclass(frozen=True)
class TensorInfo:
  """What a DLPack capsule describes, read without taking ownership.

  Attributes:
    versioned: whether the capsule is a DLPack 1.x ``"dltensor_versioned"``.
    version: the capsule's ``(major, minor)``; ``(0, 0)`` for a 0.x capsule,
      which does not record its minor version.
    flags: the 1.x flags bit field; 0 for a 0.x capsule.
    address: the address of the first element (``data + byte_offset``).
    device: ``(device_type, device_id)``.
    dtype: the NumPy dtype, or ``None`` if DLPack's type has no NumPy twin.
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
  dtype: np.dtype[Any] | None
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


def _managed_tensor_address(capsule: Any) -> tuple[bool, int]:
  """Returns ``(versioned, address)`` of the capsule's managed tensor."""
  if not is_capsule(capsule):
    raise TypeError(
        f"__dlpack__ returned a {type(capsule).__name__}, not a DLPack "
        "capsule.")
  name = capsule_name(capsule)
  if name == LEGACY_NAME:
    return False, _capsule_get_pointer(capsule, _LEGACY_NAME_PTR)
  if name == VERSIONED_NAME:
    return True, _capsule_get_pointer(capsule, _VERSIONED_NAME_PTR)
  if name in (USED_LEGACY_NAME, USED_VERSIONED_NAME):
    raise BufferError(
        "The DLPack capsule was already consumed; call __dlpack__ again for a "
        "fresh one.")
  raise BufferError(
      f"Expected a DLPack capsule named 'dltensor' or 'dltensor_versioned', "
      f"got one named {name!r}.")


def inspect(capsule: Any) -> TensorInfo:
  """Reads what ``capsule`` describes, without consuming it.

  Raises:
    TypeError: ``capsule`` is not a capsule.
    BufferError: the capsule is consumed, misnamed, of an unknown major
      version (its deleter has then been called), or describes an
      inconsistent tensor.
  """
  versioned, address = _managed_tensor_address(capsule)
  if versioned:
    raw = bytes(_VERSIONED_BYTES.from_address(address))
    major, minor, _, _, flags = _VERSIONED_HEADER.unpack_from(raw)
    if major > MAX_VERSION[0]:
      _refuse_versioned(capsule,
                        _DLManagedTensorVersioned.from_address(address))
      raise BufferError(
          f"The producer returned a DLPack {major}.{minor} capsule; "
          f"this JAX reads DLPack up to {MAX_VERSION[0]}.x.")
    fields = _TENSOR_FIELDS.unpack_from(raw, _HEADER_SIZE)
    return _tensor_info(fields, True, (major, minor), flags)
  fields = _TENSOR_FIELDS.unpack(_TENSOR_BYTES.from_address(address))
  return _tensor_info(fields, False, (0, 0), 0)


def _tensor_info(fields: tuple[Any, ...], versioned: bool,
                 version: tuple[int, int], flags: int) -> TensorInfo:
  """Checks and converts the fields of a DLTensor, in declaration order."""
  (data, device_type, device_id, ndim, code, bits, lanes, shape_address,
   strides_address, byte_offset) = fields
  _check_fields(fields)
  shape = _int64s(shape_address, ndim)
  if ndim and strides_address:
    strides = _int64s(strides_address, ndim)
  else:
    strides = _row_major_strides(shape)
  dl_dtype = (code, bits, lanes)
  return TensorInfo(
      versioned=versioned, version=version, flags=flags,
      address=data + byte_offset, device=(device_type, device_id),
      dtype=numpy_dtype(dl_dtype), dl_dtype=dl_dtype, shape=shape,
      strides=strides)


def _int64s(address: int, count: int) -> tuple[int, ...]:
  if not count:
    return ()
  return tuple((ctypes.c_int64 * count).from_address(address))


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
_DELETER_ADDRESS = _address_of(_make_deleter(live_tensors))
_DESTRUCTOR_ADDRESS = {
    name.value: _address_of(_make_capsule_destructor(
        live_tensors, name, _raw_capsule_is_valid, _raw_capsule_get_pointer))
    for name in (_LEGACY_NAME_PTR, _VERSIONED_NAME_PTR)}


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


def to_legacy(
    capsule: Any) -> tuple[Any, int, int, int, tuple[int, int, int]]:
  """Takes over ``capsule`` as a 0.x capsule, reading only what imports need.

  The import's fast path: unlike :func:`inspect`, it reads no strides,
  which jaxlib checks itself. A 1.x capsule is renamed
  ``"used_dltensor_versioned"`` (it no longer owns the tensor) and a new 0.x
  capsule points at the same data; the producer's deleter runs exactly once,
  when the new capsule's consumer releases the tensor, or when the new
  capsule dies unconsumed.

  Returns:
    ``(legacy_capsule, flags, address, device_type, (code, bits, lanes))``:
    the 0.x capsule (``capsule`` itself if it was one), the 1.x flags (0 for
    0.x), the address of the first element, the DLPack device type and
    DLPack's dtype.

  Raises:
    TypeError, BufferError: as :func:`inspect`.
  """
  versioned, address = _managed_tensor_address(capsule)
  if not versioned:
    fields = _TENSOR_FIELDS.unpack(_TENSOR_BYTES.from_address(address))
    _check_fields(fields)
    return capsule, 0, fields[0] + fields[9], fields[1], fields[4:7]
  raw = _VERSIONED_BYTES.from_address(address)
  major, _, _, deleter, flags = _VERSIONED_HEADER.unpack_from(raw)
  if major > MAX_VERSION[0]:
    inspect(capsule)  # Calls the deleter and raises.
  fields = _TENSOR_FIELDS.unpack_from(raw, _HEADER_SIZE)
  _check_fields(fields)
  legacy = _LegacyBytes.from_buffer_copy(
      bytes(raw)[_HEADER_SIZE:] + _LEGACY_TAIL.pack(address, _DELETER_ADDRESS))
  converted = _own(legacy, _LEGACY_NAME_PTR, LEGACY_NAME, capsule,
                   _USED_VERSIONED_NAME_PTR,
                   _producer_release(deleter, address))
  return converted, flags, fields[0] + fields[9], fields[1], fields[4:7]


def read_for_import(
    capsule: Any) -> tuple[Any, int, int, int, tuple[int, int, int]]:
  """Reads what an import needs, for a jaxlib that reads 1.x capsules.

  Like :func:`to_legacy`, it reads no strides, but it leaves a 1.x capsule
  as it is, for jaxlib to consume. A 1.x capsule whose deleter is NULL (the
  producer needs no clean-up) is converted all the same: jaxlib calls the
  deleter it finds, and a NULL one aborts the process.

  Returns:
    ``(capsule, flags, address, device_type, (code, bits, lanes))``, as
    :func:`to_legacy`.

  Raises:
    TypeError, BufferError: as :func:`inspect`.
  """
  versioned, address = _managed_tensor_address(capsule)
  if not versioned:
    return to_legacy(capsule)
  raw = _VERSIONED_BYTES.from_address(address)
  major, _, _, deleter, flags = _VERSIONED_HEADER.unpack_from(raw)
  if major > MAX_VERSION[0] or not deleter:
    return to_legacy(capsule)  # Refuses it, or owns the clean-up.
  fields = _TENSOR_FIELDS.unpack_from(raw, _HEADER_SIZE)
  _check_fields(fields)
  return capsule, flags, fields[0] + fields[9], fields[1], fields[4:7]


def _check_fields(fields: tuple[Any, ...]) -> None:
  """Raises ``BufferError`` for a tensor jaxlib must never be handed.

  The capsule is left as it was: its destructor releases the tensor.
  """
  data, ndim, shape_address = fields[0], fields[3], fields[7]
  if not 0 <= ndim <= _MAX_NDIM or (ndim and not shape_address):
    raise BufferError(f"The DLPack tensor has an invalid ndim of {ndim} or "
                      "no shape.")
  shape = _int64s(shape_address, ndim)
  if any(d < 0 for d in shape):
    raise BufferError(f"The DLPack tensor has a negative dimension: {shape}.")
  if not data and math.prod(shape, start=1):
    raise BufferError("The DLPack tensor has a null data pointer.")


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


def as_span_capsule(capsule: Any, info: TensorInfo) -> tuple[Any, int]:
  """Takes over ``capsule`` as a 0.x capsule of all the memory it spans.

  The new tensor is one row-major vector of ``info.dtype``, from the lowest
  element the strides reach to the highest: a layout every jaxlib aliases,
  from which the strided tensor can be gathered. ``capsule`` is renamed as
  used; its producer's deleter runs exactly once, when the new capsule's
  consumer releases the tensor or the new capsule dies unconsumed.

  Args:
    capsule: the 0.x or 1.x capsule ``info`` was read from, unconsumed.
    info: what :func:`inspect` read from it; its dtype is known.

  Returns:
    ``(span_capsule, first)``: the new capsule, and the offset of the
    tensor's first element in the vector, in elements.
  """
  assert info.dtype is not None
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
  return span, -low


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


def host_view(info: TensorInfo) -> np.ndarray[Any, Any]:
  """Returns a read-only NumPy view of a CPU tensor's elements.

  The view does not own the memory: the capsule ``info`` was read from must
  stay alive, unconsumed, for as long as the view is used.

  Raises:
    BufferError: the tensor is not in host memory or its dtype has no NumPy
      equivalent.
  """
  if info.dtype is None:
    raise BufferError(
        f"DLPack dtype (code={info.dl_dtype[0]}, bits={info.dl_dtype[1]}, "
        f"lanes={info.dl_dtype[2]}) has no NumPy equivalent to copy through.")
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
