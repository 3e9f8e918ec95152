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

"""Memory of this process, for the leak and memory-map tests."""

from collections.abc import Callable, Iterator
import contextlib
import ctypes
import ctypes.util
import gc
import importlib
import resource
import tracemalloc

PAGE = resource.getpagesize()


def resident_bytes() -> int:
  with open("/proc/self/statm") as statm:
    return int(statm.read().split()[1]) * PAGE


def _jaxlib_collect_garbage() -> Callable[[], None]:
  """jaxlib's own collection of what its arrays keep, where it has one.

  jaxlib keeps each array's creation traceback until Python's cyclic
  collector runs, and a loop of imports allocates nothing that triggers
  it: without this, tens of MB pile up that are jaxlib's, not the patch's.
  """
  lib = importlib.import_module("jax._src.lib")
  # `_jax` from jaxlib 0.6.1, `xla_extension` before.
  extension = getattr(lib, "_jax", None) or getattr(lib, "xla_extension",
                                                    None)
  collect: Callable[[], None] | None = getattr(extension, "collect_garbage",
                                               None)
  return collect if collect is not None else (lambda: None)


collect_jax_garbage = _jaxlib_collect_garbage()

_LIBC = ctypes.CDLL(ctypes.util.find_library("c"))


def settled_resident_bytes() -> int:
  """Resident bytes once every collector has run and malloc has trimmed.

  What is left is what something still holds, not what an allocator keeps
  for reuse.
  """
  gc.collect()
  collect_jax_garbage()
  _LIBC.malloc_trim(0)
  return resident_bytes()


@contextlib.contextmanager
def python_heap() -> Iterator[Callable[[], int]]:
  """Traces Python's allocators, ``PyMem_*`` and ``PyObject_*``, meanwhile.

  DLPack structures that NumPy and jax-patch make are ``PyMem_Malloc``
  blocks, and capsules are Python objects: what leaks of them shows here.

  Yields:
    A function returning the bytes allocated since the block began and not
    yet freed, after a garbage collection.
  """
  tracemalloc.start()
  try:
    gc.collect()
    start = tracemalloc.get_traced_memory()[0]

    def growth() -> int:
      gc.collect()
      return tracemalloc.get_traced_memory()[0] - start

    yield growth
  finally:
    tracemalloc.stop()
