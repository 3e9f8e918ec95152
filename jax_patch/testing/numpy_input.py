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

"""NumPy input as users make it: how often ``copy=False`` shares.

The conformance cases and the zero-copy benchmark rows import 64-byte
aligned arrays, the only ones jaxlib's CPU client aliases. Users mostly
pass what ``np.arange`` and friends return. :func:`survey` makes fresh
arrays each way a user can (NumPy's default allocation, ``aligned_copy``,
``aligned_allocation``) and imports each with ``copy=False``: an import
that does not raise must share, proved by writing to the source.
``jax-patch check`` and the benchmark report it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from jax_patch._src import dlpack_errors
from jax_patch._src import numpy_alignment

FromDLPack = Callable[..., Any]

# float32 elements: 16 B to 16 MB, as the issue that added this measured.
SIZES = (4, 64, 4096, 65536, 1 << 20, 4 << 20)
_SENTINEL = 99.0


@dataclasses.dataclass(frozen=True)
class Row:
  """One way of making arrays, at one size: what ``copy=False`` did.

  Of ``made`` arrays, ``shared`` were shared and ``copied`` were copied
  although ``copy=False`` forbids it (upstream JAX 0.4.35 does); the
  rest raised.
  """
  route: str
  elements: int
  made: int
  shared: int
  copied: int = 0


def _default(count: int) -> np.ndarray[Any, Any]:
  return np.arange(count, dtype=np.float32)


def _aligned_copy(count: int) -> np.ndarray[Any, Any]:
  return numpy_alignment.aligned_copy(np.arange(count, dtype=np.float32))


def _under_aligned_allocation(count: int) -> np.ndarray[Any, Any]:
  with numpy_alignment.aligned_allocation():
    return np.arange(count, dtype=np.float32)


DEFAULT_ROUTE = "np.arange (default allocation)"


def routes() -> dict[str, Callable[[int], np.ndarray[Any, Any]]]:
  """How a user gets a float32 array, by name.

  ``aligned_allocation`` is among them only where numpy-allocator is.
  """
  made: dict[str, Callable[[int], np.ndarray[Any, Any]]] = {
      DEFAULT_ROUTE: _default,
      "aligned_copy of np.arange": _aligned_copy}
  if not numpy_alignment.aligned_allocation_available():
    return made
  made["np.arange in aligned_allocation"] = _under_aligned_allocation
  return made


SHARED, RAISED, COPIED = "shared", "raised", "copied"


def outcome(from_dlpack: FromDLPack, source: np.ndarray[Any, Any]) -> str:
  """What ``from_dlpack(source, copy=False)`` did: SHARED, RAISED or COPIED.

  Sharing is proved by writing to ``source`` after the import; COPIED is a
  result that does not see the write, which ``copy=False`` forbids.
  """
  try:
    result = from_dlpack(source, copy=False)
  except (dlpack_errors.CopyRequiredError, BufferError, ValueError):
    return RAISED
  source[0] = _SENTINEL
  return SHARED if float(np.asarray(result)[0]) == _SENTINEL else COPIED


def survey(from_dlpack: FromDLPack, count: int = 50,
           sizes: tuple[int, ...] = SIZES) -> list[Row]:
  """Imports fresh arrays of each route and size with ``copy=False``.

  ``count`` arrays per route and size are alive at once, as in a program.
  """
  rows = []
  for route, make in routes().items():
    for elements in sizes:
      arrays = [make(elements) for _ in range(count)]
      found = [outcome(from_dlpack, a) for a in arrays]
      rows.append(Row(route, elements, count, found.count(SHARED),
                      found.count(COPIED)))
  return rows


def broken(rows: list[Row]) -> list[Row]:
  """The rows that break a promise of ``copy=False``.

  An array was copied although ``copy=False`` forbids it, or one made to
  share (by an aligning route) did not share.
  """
  return [row for row in rows
          if row.copied
          or (row.route != DEFAULT_ROUTE and row.shared != row.made)]


def lines(rows: list[Row]) -> Iterator[str]:
  """``rows`` as text, one line per route: shared/made at each size."""
  by_route: dict[str, list[Row]] = {}
  for row in rows:
    by_route.setdefault(row.route, []).append(row)
  for route, found in by_route.items():
    cells = ", ".join(
        f"{_size(r.elements * 4)} {r.shared}/{r.made}"
        + (f" ({r.copied} copied under copy=False)" if r.copied else "")
        for r in found)
    yield f"{route}: {cells}"


def _size(nbytes: int) -> str:
  for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
    if nbytes >= scale:
      return f"{nbytes // scale} {unit}"
  return f"{nbytes} B"
