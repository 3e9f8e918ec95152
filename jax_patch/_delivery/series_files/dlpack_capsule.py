# Copyright 2026 The JAX Authors.
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

"""DLPack 1.x capsules for jaxlib before 0.12, which knows only DLPack 0.x.

jaxlib before 0.12 imports and exports only DLPack 0.x capsules
("dltensor"). Only DLPack 1.x capsules ("dltensor_versioned") can say
READ_ONLY, and NumPy exports a read-only array only as one. This module
converts between the two without copying the tensor: a new managed tensor
of the other
version describes the same DLTensor, whose bytes it copies without reading
them (jaxlib reads and checks them), and holds the original capsule until
it is released. A tensor whose deleter is NULL is the exception: nothing
keeps its producer's structure alive after the import, so the new one
stores its own copy of the shape and strides.

The new structures are released by NumPy's own DLPack deleter, found once in
a capsule NumPy makes: in C, with the GIL taken, it frees the structure and
drops its reference to the original capsule, whose destructor then releases
the tensor. A ctypes callback would instead run Python on whichever thread
jaxlib frees a buffer, and crash if that is after the interpreter finalized.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from typing import Any, NamedTuple

import numpy as np

FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1


class _DLDevice(ctypes.Structure):
  _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
  _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
              ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
  # Copied whole: jaxlib reads and checks the fields. Only the shape and
  # strides of a tensor with a NULL deleter are read here, to copy them.
  _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice),
              ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
              ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
              ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
  _fields_ = [("dl_tensor", _DLTensor),
              ("manager_ctx", ctypes.c_void_p),
              ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):
  _fields_ = [("major", ctypes.c_uint32),
              ("minor", ctypes.c_uint32),
              ("manager_ctx", ctypes.c_void_p),
              ("deleter", ctypes.c_void_p),
              ("flags", ctypes.c_uint64),
              ("dl_tensor", _DLTensor)]


def _capi(name: str, restype: Any, *argtypes: Any) -> Any:
  # PYFUNCTYPE keeps the GIL held, as the capsule API needs.
  return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_capsule_is_valid = _capi("PyCapsule_IsValid", ctypes.c_int,
                          ctypes.py_object, ctypes.c_char_p)
_capsule_get_pointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p,
                             ctypes.py_object, ctypes.c_char_p)
_capsule_set_name = _capi("PyCapsule_SetName", ctypes.c_int,
                          ctypes.py_object, ctypes.c_char_p)
_capsule_new = _capi("PyCapsule_New", ctypes.py_object, ctypes.c_void_p,
                     ctypes.c_char_p, ctypes.c_void_p)
_capsule_get_destructor = _capi("PyCapsule_GetDestructor", ctypes.c_void_p,
                                ctypes.py_object)
_pymem_malloc = _capi("PyMem_Malloc", ctypes.c_void_p, ctypes.c_size_t)
_py_incref = _capi("Py_IncRef", None, ctypes.py_object)
_call_deleter = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)


def _static_name(name: bytes) -> ctypes.c_char_p:
  # A capsule keeps a pointer to its name, which must outlive every capsule,
  # even those jaxlib frees after this module is torn down.
  buffer = ctypes.create_string_buffer(name)
  _py_incref(buffer)
  return ctypes.c_char_p(ctypes.addressof(buffer))


_LEGACY_NAME = _static_name(b"dltensor")
_VERSIONED_NAME = _static_name(b"dltensor_versioned")
_USED_VERSIONED_NAME = _static_name(b"used_dltensor_versioned")


class _NumpyRelease(NamedTuple):
  """NumPy's C functions that release the DLPack structures it makes.

  Each deleter frees its structure (one PyMem_Malloc block) and drops a
  reference to ``manager_ctx``; each destructor calls the tensor's deleter
  unless the capsule was renamed as used (NumPy 2.1 on, as JAX requires).
  """
  legacy_deleter: int
  versioned_deleter: int
  legacy_destructor: int
  versioned_destructor: int


@functools.cache
def _numpy_release() -> _NumpyRelease:
  probe: Any = np.zeros(1, np.uint8)
  legacy = probe.__dlpack__()
  versioned = probe.__dlpack__(max_version=(1, 0))
  return _NumpyRelease(
      _DLManagedTensor.from_address(
          _capsule_get_pointer(legacy, _LEGACY_NAME)).deleter,
      _DLManagedTensorVersioned.from_address(
          _capsule_get_pointer(versioned, _VERSIONED_NAME)).deleter,
      _capsule_get_destructor(legacy),
      _capsule_get_destructor(versioned))


def _new_capsule(managed: _DLManagedTensor | _DLManagedTensorVersioned,
                 owner: Any, dims: tuple[int, ...] | None = None,
                 has_strides: bool = False) -> Any:
  """Copies ``managed`` to a new structure that holds ``owner``, in a capsule.

  Releasing the structure drops the reference to ``owner``. Given ``dims``
  (the shape, then the strides if ``has_strides``), the new structure stores
  them after itself, as NumPy does, and points at them: it then needs
  nothing of the structure ``managed`` was copied from.
  """
  release = _numpy_release()
  versioned = isinstance(managed, _DLManagedTensorVersioned)
  size = ctypes.sizeof(managed)
  address = _pymem_malloc(size + 8 * len(dims or ()))
  if not address:
    raise MemoryError("no memory for a DLPack structure")
  managed.manager_ctx = id(owner)
  managed.deleter = (release.versioned_deleter if versioned
                     else release.legacy_deleter)
  if dims is not None:
    ndim = managed.dl_tensor.ndim
    managed.dl_tensor.shape = address + size if ndim else None
    managed.dl_tensor.strides = (
        address + size + 8 * ndim if ndim and has_strides else None)
    (ctypes.c_int64 * len(dims)).from_address(address + size)[:] = list(dims)
  ctypes.memmove(address, ctypes.addressof(managed), size)
  _py_incref(owner)
  try:
    return _capsule_new(
        address, _VERSIONED_NAME if versioned else _LEGACY_NAME,
        release.versioned_destructor if versioned
        else release.legacy_destructor)
  except BaseException:
    _call_deleter(managed.deleter)(address)  # Frees it, drops ``owner``.
    raise


# Serializes claims: between testing a capsule's name and renaming it as
# used, another thread could claim it too, and its tensor be freed twice.
_claim_lock = threading.Lock()


def _renew_claim_lock() -> None:
  # A fork while another thread held the lock leaves it held in the child.
  global _claim_lock
  _claim_lock = threading.Lock()


os.register_at_fork(after_in_child=_renew_claim_lock)


def _release(address: int) -> None:
  """Calls a claimed 1.x tensor's deleter, if it has one."""
  deleter = _DLManagedTensorVersioned.from_address(address).deleter
  if deleter:
    _call_deleter(deleter)(address)


def _shape_and_strides(tensor: _DLTensor) -> tuple[tuple[int, ...], bool]:
  """Reads a tensor's shape, then its strides if it has them.

  Returns:
    ``(dims, has_strides)``.
  """
  ndim = tensor.ndim
  if not 0 <= ndim <= 64 or (ndim and not tensor.shape):
    raise BufferError(
        f"from_dlpack: the DLPack tensor's ndim is {ndim} with shape "
        f"{tensor.shape or 'NULL'}; the producer's tensor is invalid.")
  dims = ctypes.c_int64 * ndim
  shape = tuple(dims.from_address(tensor.shape)) if ndim else ()
  if not ndim or not tensor.strides:
    return shape, False
  return shape + tuple(dims.from_address(tensor.strides)), True


def as_legacy_capsule(capsule: Any) -> Any:
  """Returns a 0.x capsule of the tensor of a 1.x ``capsule``.

  The 1.x capsule is consumed (renamed as used); its tensor is released,
  exactly once, when jaxlib releases the import, or when the returned capsule
  dies unconsumed. Anything else, a 0.x capsule included, is returned as is,
  for jaxlib to import or refuse.

  Raises:
    BufferError: a DLPack major version other than 1, which this module
      cannot read; the tensor has then been released.
  """
  with _claim_lock:
    if not _capsule_is_valid(capsule, _VERSIONED_NAME):
      return capsule
    address = _capsule_get_pointer(capsule, _VERSIONED_NAME)
    _capsule_set_name(capsule, _USED_VERSIONED_NAME)
  # The tensor is ours to release. DLPack keeps the fields up to the
  # deleter where they are in every major version.
  versioned = _DLManagedTensorVersioned.from_address(address)
  if versioned.major != 1:
    major, minor = versioned.major, versioned.minor
    _release(address)
    raise BufferError(
        f"from_dlpack: the producer returned a DLPack {major}.{minor} "
        "capsule; JAX reads DLPack 1.x.")
  if not versioned.deleter:
    # DLPack allows a NULL deleter, but then nothing tells the producer when
    # the import is done, and nothing keeps its structure alive once
    # from_dlpack returns: the new one keeps its own shape and strides.
    tensor = versioned.dl_tensor
    return _new_capsule(_DLManagedTensor(dl_tensor=tensor), None,
                        *_shape_and_strides(tensor))
  try:
    # Releases the tensor when it dies.
    owner = _capsule_new(address, _VERSIONED_NAME,
                         _numpy_release().versioned_destructor)
  except BaseException:
    _release(address)
    raise
  return _new_capsule(_DLManagedTensor(dl_tensor=versioned.dl_tensor), owner)


def as_versioned_capsule(capsule: Any, flags: int) -> Any:
  """Returns a DLPack 1.0 capsule with ``flags`` of a 0.x ``capsule``'s tensor.

  ``capsule`` (jaxlib's export, which only the caller holds) stays
  unconsumed, held by the new tensor: it dies, and its destructor releases
  the tensor, when the new capsule's consumer releases it or the new capsule
  dies unconsumed.
  """
  legacy = _DLManagedTensor.from_address(
      _capsule_get_pointer(capsule, _LEGACY_NAME))
  return _new_capsule(
      _DLManagedTensorVersioned(major=1, minor=0, flags=flags,
                                dl_tensor=legacy.dl_tensor), capsule)


def versioned_flags(capsule: Any) -> int:
  """The flags of an unconsumed DLPack 1.x capsule; 0 for anything else."""
  with _claim_lock:
    if not _capsule_is_valid(capsule, _VERSIONED_NAME):
      return 0
    return int(_DLManagedTensorVersioned.from_address(
        _capsule_get_pointer(capsule, _VERSIONED_NAME)).flags)
