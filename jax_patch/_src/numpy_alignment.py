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

"""NumPy arrays whose memory JAX's CPU client can share.

jaxlib aliases host memory only at 64 bytes (XLA's CPU minimum), which
NumPy's default allocator (glibc's ``malloc``: 16 bytes) almost never gives,
so ``from_dlpack(np_array, copy=False)`` usually raises. These share:
:func:`aligned_empty` (like ``np.empty``), :func:`aligned_copy` (one copy)
and :func:`aligned_allocation` (a context under which NumPy allocates new
arrays at 64 bytes, via NEP 49 and ``numpy-allocator``). Each raises
``TypeError`` for a dtype JAX cannot import through DLPack.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import operator
import sys
from collections.abc import Iterator, Sequence
from typing import Any, SupportsIndex

import numpy as np

from jax._src.typing import DTypeLike
from jax_patch._src import dlpack
from jax_patch._src import dlpack_compat

ALIGNMENT = dlpack_compat.CPU_ZERO_COPY_ALIGNMENT
# NumPy's name for the context's allocator (``get_handler_name``).
HANDLER_NAME = f"jax_patch_aligned_{ALIGNMENT}"
_INSTALL_HINT = ("pip install 'jax-patch[aligned]' (numpy-allocator has "
                 "wheels for Linux x86-64 only)")


def aligned_empty(shape: SupportsIndex | Sequence[SupportsIndex],
                  dtype: DTypeLike = np.float64) -> np.ndarray[Any, Any]:
  """A new, uninitialised C-contiguous array whose data is 64-byte aligned.

  Like ``np.empty(shape, dtype)``; ``from_dlpack(result, copy=False)``
  shares it (with ``jax_enable_x64`` off a 64-bit dtype becomes 32-bit, a
  copy). Its ``base`` is a ``uint8`` block up to 64 bytes larger.

  Raises:
    TypeError: JAX cannot import ``dtype`` through DLPack.
    ValueError: a dimension is negative.
  """
  return dlpack.aligned_empty(_shape(shape),
                              _shareable_dtype(dtype, "aligned_empty"))


def aligned_copy(x: Any, /) -> np.ndarray[Any, Any]:
  """Copies ``x`` once into a new C-contiguous, 64-byte aligned array.

  ``x`` is anything ``np.asarray`` reads; the copy keeps its dtype and
  values, is writable, shares nothing with ``x``; import it with ``copy=False``.

  Raises:
    TypeError: JAX cannot import ``x``'s dtype through DLPack.
  """
  source = np.asarray(x)
  copied = dlpack.aligned_empty(source.shape,
                                _shareable_dtype(source.dtype, "aligned_copy"))
  np.copyto(copied, source, casting="no")
  return copied


@contextlib.contextmanager
def aligned_allocation() -> Iterator[None]:
  """A context under which NumPy allocates new arrays' data at 64 bytes.

  Sets NumPy's allocator (NEP 49) for this thread or task only, restoring
  the previous one on exit; nesting is fine. Arrays made inside keep it for
  life, are freed by the C library's ``free`` without Python, and show in
  ``tracemalloc``. Each costs a Python call; no huge pages are requested.

  Raises:
    ImportError: ``numpy-allocator`` (Linux x86-64 wheels only) is missing.
  """
  allocator = _allocator()
  handler = allocator.handler()
  previous = _numpy_allocator().set_handler(handler)
  try:
    yield
  finally:
    _numpy_allocator().set_handler(previous)


def aligned_allocation_available() -> bool:
  """Whether :func:`aligned_allocation` can run: numpy-allocator imports."""
  try:
    _numpy_allocator()
  except ImportError:
    return False
  return True


def allocated_aligned(x: np.ndarray[Any, Any]) -> bool:
  """Whether :func:`aligned_allocation` allocated the memory ``x`` views."""
  return bool(_allocator().handles(x))


def _shape(shape: SupportsIndex | Sequence[SupportsIndex]) -> tuple[int, ...]:
  dims = ((operator.index(shape),) if isinstance(shape, SupportsIndex)
          else tuple(operator.index(dim) for dim in shape))
  if any(dim < 0 for dim in dims):
    raise ValueError(f"negative dimensions are not allowed: {dims}")
  return dims


def _shareable_dtype(dtype: DTypeLike, caller: str) -> np.dtype[Any]:
  """``dtype`` as a NumPy dtype, if JAX can import it through DLPack."""
  resolved = np.dtype(dtype)
  if not dlpack.is_supported_dtype(resolved):
    raise TypeError(
        f"{caller}: JAX cannot import {resolved} through DLPack, so an "
        "array of it could never be shared; supported: bool, (u)int8-64, "
        "float16, bfloat16, float32, float64, complex64, complex128")
  return resolved


def _numpy_allocator() -> Any:
  """The numpy_allocator module: a C extension no type checker can read."""
  try:
    return importlib.import_module("numpy_allocator")
  except ImportError as err:
    raise ImportError(
        f"aligned_allocation needs numpy-allocator: {_INSTALL_HINT}") from err


@functools.cache
def _libc() -> ctypes.CDLL:
  """The C library's allocator, with the signatures the allocator calls.

  Looked up in the process, not libc.so: ``free`` and these must come from
  one malloc, which a preloaded one (jemalloc, tcmalloc...) replaces.
  """
  libc = ctypes.CDLL(None)
  libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
  libc.aligned_alloc.restype = ctypes.c_void_p
  libc.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
  libc.realloc.restype = ctypes.c_void_p
  libc.free.argtypes = [ctypes.c_void_p]
  libc.free.restype = None
  libc.memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
  libc.memcpy.restype = ctypes.c_void_p
  libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
  libc.memset.restype = ctypes.c_void_p
  return libc


def _padded(size: int) -> int | None:
  """``size`` rounded up to the alignment (C11's rule), or ``None`` if huge."""
  padded = -(-max(size, 1) // ALIGNMENT) * ALIGNMENT
  return padded if padded <= sys.maxsize else None


def _malloc(size: int) -> int | None:
  padded = _padded(size)
  if padded is None:
    return None  # NULL: NumPy raises MemoryError.
  address: int | None = _libc().aligned_alloc(ALIGNMENT, padded)
  return address


def _calloc(count: int, itemsize: int) -> int | None:
  address = _malloc(count * itemsize)  # Python ints: no overflow.
  if address is not None:
    _libc().memset(address, 0, count * itemsize)
  return address


def _realloc(address: int | None, size: int) -> int | None:
  """Resizes keeping the alignment; on failure the old block stays valid."""
  if address is None:
    return _malloc(size)
  padded = _padded(size)
  if padded is None:
    return None
  libc = _libc()
  moved: int | None = libc.realloc(address, padded)
  if moved is None or not moved % ALIGNMENT:
    return moved
  aligned = _malloc(size)
  if aligned is None:
    return moved  # Valid, only unaligned: it copies on import.
  libc.memcpy(aligned, moved, size)
  libc.free(moved)
  return aligned


@functools.cache
def _allocator() -> Any:
  """The NEP 49 allocator, built once and kept for good.

  Its arrays hold its handler for life, the class the handler, this cache
  the class. ``free`` is the one found with ``aligned_alloc``, called from
  C: freeing runs no Python, even at interpreter shutdown.
  """
  numpy_allocator = _numpy_allocator()
  # numpy-allocator calls the address in this cell (kept by the class) as
  # free(ptr, size); its platforms' C conventions ignore the extra size.
  free = ctypes.c_void_p(ctypes.cast(_libc().free, ctypes.c_void_p).value)
  return numpy_allocator.type(HANDLER_NAME, (), {
      "_malloc_": staticmethod(_malloc),
      "_calloc_": staticmethod(_calloc),
      "_realloc_": staticmethod(_realloc),
      "_free_": ctypes.addressof(free),
      "_free_cell": free,
  })
