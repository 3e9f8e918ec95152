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

"""Producers whose structures are really freed, for valgrind's memcheck.

  valgrind --tool=memcheck python tools/valgrind_lifetimes.py

Each producer puts its managed tensor, shape and strides in one block from
libc's malloc and frees it as soon as it may: in its deleter, or, with a
NULL deleter (which tells it nothing), right after ``from_dlpack`` returns.
Each import is then released (aliased, copied, moved to ``cpu:1``, and
released by a jaxlib worker). Memcheck keeps freed blocks out of reuse and
reports any later read of one as "inside a block ... free'd", wherever it
happens: `tools/valgrind_check.sh` fails on such a report. Without valgrind
the script still runs, and proves only that nothing crashed.
"""

import ctypes
import gc
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS",
                      "--xla_force_host_platform_device_count=2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from jax_patch._src import dlpack  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax_patch._src import dlpack_capsule  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax_patch.testing import conformance  # pylint: disable=g-import-not-at-top,wrong-import-position

_LIBC = ctypes.CDLL(None)
_LIBC.malloc.restype = ctypes.c_void_p
_LIBC.malloc.argtypes = [ctypes.c_size_t]
_LIBC.free.argtypes = [ctypes.c_void_p]
_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
        ("PyCapsule_New", ctypes.pythonapi))
_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class MallocProducer:
  """A producer of one 2-D float32 tensor over ``array``, in malloc'd memory."""

  def __init__(self, array: np.ndarray, versioned: bool,
               null_deleter: bool) -> None:
    self.array = array
    self.versioned = versioned
    self.deletes = 0
    managed_type = (dlpack_capsule._DLManagedTensorVersioned if versioned
                    else dlpack_capsule._DLManagedTensor)
    size = ctypes.sizeof(managed_type)
    self.block = _LIBC.malloc(size + 16 * array.ndim)
    managed = managed_type.from_address(self.block)
    ctypes.memset(self.block, 0, size)
    if versioned:
      managed.version.major = 1
    self.deleter = _Deleter(self._delete)
    managed.deleter = (None if null_deleter
                       else ctypes.cast(self.deleter, ctypes.c_void_p).value)
    tensor = managed.dl_tensor
    tensor.data = array.ctypes.data
    tensor.device.device_type = 1
    tensor.ndim = array.ndim
    tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = 2, 32, 1
    dims = (ctypes.c_int64 * (2 * array.ndim)).from_address(self.block + size)
    dims[:] = (*array.shape, *(s // array.itemsize for s in array.strides))
    tensor.shape = ctypes.cast(self.block + size,
                               ctypes.POINTER(ctypes.c_int64))
    tensor.strides = ctypes.cast(self.block + size + 8 * array.ndim,
                                 ctypes.POINTER(ctypes.c_int64))

  def _delete(self, address: int) -> None:
    assert address == self.block
    self.deletes += 1
    self.free()

  def free(self) -> None:
    _LIBC.free(self.block)

  def __dlpack_device__(self) -> tuple[int, int]:
    return (1, 0)

  def __dlpack__(self, **kwargs: object) -> object:
    del kwargs
    name = (dlpack_capsule.VERSIONED_NAME if self.versioned
            else dlpack_capsule.LEGACY_NAME)
    return _capsule_new(self.block, name, None)


def import_then_release(versioned: bool, null_deleter: bool,
                        mode: str) -> None:
  cpu = jax.devices("cpu")
  source = conformance.aligned_array(
      (512, 512) if mode == "released_by_a_worker" else (16, 16))
  producer = MallocProducer(source, versioned, null_deleter)
  kwargs = {"copied": {"copy": True}, "moved": {"device": cpu[1]}}.get(
      mode, {})
  result = dlpack.from_dlpack(producer, **kwargs)
  if null_deleter:
    producer.free()  # Nothing will tell the producer: it may free now.
  if mode == "released_by_a_worker":
    moved = jax.device_put(result, cpu[1])
    del result
    result = moved
  np.testing.assert_array_equal(np.asarray(result), source)
  del result
  gc.collect()
  time.sleep(0.1)
  gc.collect()
  assert producer.deletes == (0 if null_deleter else 1), producer.deletes


def main() -> None:
  for versioned in (False, True):
    for null_deleter in (True, False):
      for mode in ("aliased", "copied", "moved", "released_by_a_worker"):
        import_then_release(versioned, null_deleter, mode)
        print("ok", "1.x" if versioned else "0.x",
              "NULL deleter" if null_deleter else "deleter", mode, flush=True)


if __name__ == "__main__":
  main()
