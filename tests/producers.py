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

"""DLPack producers for the tests.

A producer the tests control, down to the bytes of its tensor: no real
producer can show a test its deleter being called, or hand over a corrupt
tensor; this one builds its managed tensor with ctypes over a NumPy array it
keeps alive. Like a real producer, its capsule's destructor calls the deleter
if no consumer took the tensor. And ``requires_torch``, for tests of a real
peer that may be absent.
"""

import ctypes
import importlib.util
import sys
from typing import Any
import unittest

import numpy as np

from jax_patch._src import dlpack_capsule

# The test extra pins torch 2.13.0 on Python 3.11 only, the one Python with a
# CPU wheel here; elsewhere a test needing torch skips unless torch is there
# anyway (a CUDA build, say). On 3.11 a missing torch fails, as a broken
# install should.
requires_torch = unittest.skipUnless(
    importlib.util.find_spec("torch") is not None
    or sys.version_info[:2] == (3, 11),
    "torch is not installed: the test extra pins torch 2.13.0 (CPU) on "
    "Python 3.11 only, the one Python with a CPU wheel here")

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
# Called from a capsule destructor, where the capsule's refcount is already
# zero: it must be passed as a raw pointer, never as a Python object.
_raw_capsule_is_valid = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
        ("PyCapsule_IsValid", ctypes.pythonapi))
# A producer's C callbacks: ctypes takes the GIL when C calls them, from any
# thread, as a real producer's deleter must.
_Callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class CraftedProducer:
  """A DLPack 1.x producer (0.x with ``versioned=False``).

  Keyword overrides replace fields of the tensor it describes: ``ndim``,
  ``shape``, ``strides`` (in elements), ``data`` (an address),
  ``byte_offset``, ``dtype`` (``(code, bits)`` or ``(code, bits, lanes)``),
  ``device_type``, ``deleter`` (the address of a C function to call instead
  of counting the delete, or 0 for NULL). With ``poison_on_delete``, the
  counting deleter also poisons what it frees (see :meth:`poison`).
  """

  def __init__(self, array: np.ndarray[Any, Any], *, major: int = 1,
               flags: int = 0, versioned: bool = True,
               poison_on_delete: bool = False, **overrides: Any):
    self.array = array
    self.deletes = 0
    self.poison_on_delete = poison_on_delete
    self.versioned = versioned
    self.reported_device = (overrides.get("device_type", 1), 0)
    self._deleter = _Callback(self._on_delete)
    self._destructor = _Callback(self._on_capsule_death)
    shape = overrides.get("shape", array.shape)
    self._shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    strides = overrides.get(
        "strides", [s // array.itemsize for s in array.strides])
    self._strides = (ctypes.c_int64 * max(len(strides), 1))(*strides)
    if versioned:
      managed: Any = dlpack_capsule._DLManagedTensorVersioned()
      managed.version.major, managed.version.minor = major, 0
      managed.flags = flags
      self._name = dlpack_capsule.VERSIONED_NAME
    else:
      managed = dlpack_capsule._DLManagedTensor()
      self._name = dlpack_capsule.LEGACY_NAME
    managed.deleter = overrides.get(
        "deleter", ctypes.cast(self._deleter, ctypes.c_void_p).value)
    tensor = managed.dl_tensor
    tensor.data = overrides.get("data", array.ctypes.data)
    tensor.device.device_type = overrides.get("device_type", 1)
    tensor.ndim = overrides.get("ndim", array.ndim)
    code, bits, *lanes = overrides.get(
        "dtype", dlpack_capsule._DL_DTYPES[array.dtype])
    tensor.dtype.code, tensor.dtype.bits = code, bits
    tensor.dtype.lanes = lanes[0] if lanes else 1
    tensor.byte_offset = overrides.get("byte_offset", 0)
    tensor.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = ctypes.cast(self._strides,
                                 ctypes.POINTER(ctypes.c_int64))
    self._managed = managed

  def _on_delete(self, address: int) -> None:
    del address
    self.deletes += 1
    if self.poison_on_delete:
      self.poison()

  def poison(self) -> None:
    """Overwrites the managed tensor, shape and strides as freed memory.

    What a producer may do once nothing will read them any more: after its
    deleter ran, or, with a NULL deleter, once the import has returned. A
    consumer that then reads them finds garbage (0xA5 bytes: a deleter or
    an array pointer that faults if followed). They stay allocated, so
    that nothing else can reuse the memory and make a late read look valid.
    """
    for field in (self._managed, self._shape, self._strides):
      ctypes.memset(ctypes.addressof(field), 0xA5, ctypes.sizeof(field))

  def _on_capsule_death(self, capsule: int) -> None:
    if _raw_capsule_is_valid(capsule, self._name):
      self._on_delete(capsule)

  def __dlpack_device__(self) -> tuple[int, int]:
    return self.reported_device

  def __dlpack__(self, **kwargs: Any) -> Any:
    del kwargs
    return _capsule_new(ctypes.addressof(self._managed), self._name,
                        ctypes.cast(self._destructor, ctypes.c_void_p).value)
