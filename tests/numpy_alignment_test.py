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

"""NumPy arrays made to share: aligned_empty, aligned_copy, aligned_allocation.

Sharing is proved by writing to the source after the import. Every import
here is float32, which JAX keeps in both x64 modes, except the 64-bit cases,
which state what holds in the mode they run in.
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

import gc  # pylint: disable=g-import-not-at-top
import re
import sys
import textwrap
import threading
import tracemalloc
from typing import Any
import unittest

from absl.testing import absltest
from absl.testing import parameterized
import ml_dtypes
import numpy as np
from numpy._core import multiarray

import jax_patch
from jax_patch._src import numpy_alignment
from jax_patch.testing import conformance
from jax_patch.testing import numpy_input
from tests import fresh_process

_ALIGNMENT = 64
_SENTINEL = 99.0
_SHAREABLE_DTYPES = (np.bool_, np.int8, np.int16, np.int32, np.int64,
                     np.uint8, np.uint16, np.uint32, np.uint64, np.float16,
                     ml_dtypes.bfloat16, np.float32, np.float64, np.complex64,
                     np.complex128)
# What no DLPack import into JAX can take, so no helper can make shareable.
_REFUSED_DTYPES = (("object", np.dtype(object)), ("unicode", np.dtype("U3")),
                   ("bytes", np.dtype("S4")),
                   ("structured", np.dtype([("a", np.float32)])),
                   ("void", np.dtype("V8")),
                   ("datetime", np.dtype("datetime64[s]")))
_SIZES = (1, 3, 16, 1000, 65536, 1 << 20)
_ALLOCATOR_MISSING = ("numpy-allocator is not installed here (the aligned "
                      "extra installs it on Linux x86-64)")
requires_allocator = unittest.skipUnless(
    numpy_alignment.aligned_allocation_available(), _ALLOCATOR_MISSING)


def _handler_name(x: np.ndarray[Any, Any]) -> str:
  # NumPy 2 names the allocator only in its private _core (NEP 49).
  return str(multiarray.get_handler_name(x))


def _is_aligned(x: np.ndarray[Any, Any]) -> bool:
  return x.ctypes.data % _ALIGNMENT == 0


def _shares(x: np.ndarray[Any, Any]) -> bool:
  """Imports ``x`` with ``copy=False``, then writes to ``x`` (float32)."""
  result = jax_patch.from_dlpack(x, copy=False)
  x.reshape(-1)[0] = _SENTINEL
  return bool(np.asarray(result).reshape(-1)[0] == _SENTINEL)


class AlignedEmptyTest(parameterized.TestCase):

  @parameterized.product(dtype=_SHAREABLE_DTYPES,
                         shape=[(), (0,), (7,), (3, 5), (2, 0, 4)])
  def test_data_is_aligned_and_c_contiguous(self, dtype: Any,
                                            shape: tuple[int, ...]) -> None:
    x = jax_patch.aligned_empty(shape, dtype)
    self.assertEqual((x.shape, x.dtype), (shape, np.dtype(dtype)))
    self.assertTrue(_is_aligned(x))
    self.assertTrue(x.flags.c_contiguous and x.flags.writeable)

  @parameterized.parameters(1, 16, 1000, 1 << 20)
  def test_an_int_shape_is_one_dimension(self, size: int) -> None:
    self.assertEqual(jax_patch.aligned_empty(size, np.float32).shape, (size,))

  def test_default_dtype_is_numpys(self) -> None:
    self.assertEqual(jax_patch.aligned_empty(3).dtype, np.empty(3).dtype)

  @parameterized.parameters((16,), (4, 8), (2, 3, 5))
  def test_copy_false_shares(self, *shape: int) -> None:
    x = jax_patch.aligned_empty(shape, np.float32)
    x[...] = 1
    self.assertTrue(_shares(x))

  def test_result_outlives_the_array(self) -> None:
    x = jax_patch.aligned_empty((1024,), np.float32)
    x[...] = np.arange(1024)
    result = jax_patch.from_dlpack(x, copy=False)
    del x
    gc.collect()
    np.testing.assert_array_equal(np.asarray(result), np.arange(1024))

  def test_float64_shares_with_x64_on_and_raises_with_it_off(self) -> None:
    x = jax_patch.aligned_empty((8,), np.float64)
    x[...] = 1
    if conformance.x64_enabled():
      # x64 on: JAX keeps float64, so the aligned memory is shared.
      result = jax_patch.from_dlpack(x, copy=False)
      x[0] = _SENTINEL
      self.assertEqual(float(result[0]), _SENTINEL)
    else:
      # x64 off: JAX narrows float64 to float32, which is a copy.
      with self.assertRaisesRegex(jax_patch.CopyRequiredError, "float64"):
        jax_patch.from_dlpack(x, copy=False)

  @parameterized.named_parameters(*_REFUSED_DTYPES)
  def test_refuses_a_dtype_jax_cannot_import(self, dtype: np.dtype[Any]
                                             ) -> None:
    with self.assertRaisesRegex(TypeError, re.escape(
        f"aligned_empty: JAX cannot import {dtype} through DLPack")):
      jax_patch.aligned_empty((4,), dtype)

  def test_refuses_a_negative_dimension(self) -> None:
    with self.assertRaisesRegex(ValueError, "negative"):
      jax_patch.aligned_empty((2, -1), np.float32)

  @parameterized.parameters(2.5, "3", None)
  def test_refuses_a_dimension_that_is_not_an_integer(self, dim: Any) -> None:
    with self.assertRaises(TypeError):
      jax_patch.aligned_empty((dim,), np.float32)


class AlignedCopyTest(parameterized.TestCase):

  def _sources(self) -> dict[str, np.ndarray[Any, Any]]:
    # At malloc's 16 bytes past the alignment, whatever the allocator gave:
    # then no view of it can be shared as it is.
    base = conformance.aligned_array((6, 8), misalign_bytes=16)
    read_only = conformance.aligned_array((6, 8), misalign_bytes=16)
    read_only.flags.writeable = False
    return {"misaligned": base,
            "transposed": base.T, "strided": base[::2, ::3],
            "reversed": base[::-1], "read_only": read_only,
            "zero_size": base[:0]}

  @parameterized.parameters("misaligned", "transposed", "strided", "reversed",
                            "read_only", "zero_size")
  def test_copy_is_aligned_contiguous_and_equal(self, name: str) -> None:
    source = self._sources()[name]
    copied = jax_patch.aligned_copy(source)
    self.assertTrue(_is_aligned(copied))
    self.assertTrue(copied.flags.c_contiguous and copied.flags.writeable)
    self.assertEqual(copied.dtype, source.dtype)
    np.testing.assert_array_equal(copied, source)

  def test_copy_shares_nothing_with_its_source(self) -> None:
    source = np.arange(16, dtype=np.float32)
    copied = jax_patch.aligned_copy(source)
    source[0] = _SENTINEL
    self.assertEqual(copied[0], 0)
    self.assertFalse(np.shares_memory(source, copied))

  def test_an_aligned_source_is_copied_too(self) -> None:
    source = conformance.aligned_array((16,))
    self.assertFalse(np.shares_memory(source, jax_patch.aligned_copy(source)))

  @parameterized.parameters("misaligned", "transposed", "strided", "reversed",
                            "read_only")
  def test_copy_false_shares_the_copy(self, name: str) -> None:
    source = self._sources()[name]
    with self.assertRaises(jax_patch.CopyRequiredError):
      # Without the helper: none of these can be shared.
      jax_patch.from_dlpack(source, copy=False)
    self.assertTrue(_shares(jax_patch.aligned_copy(source)))

  @parameterized.named_parameters(
      ("list_of_ints", [[1, 2], [3, 4]], np.array([[1, 2], [3, 4]]).dtype),
      ("list_of_floats", [1.5, 2.5], np.dtype(np.float64)),
      ("scalar", 3.0, np.dtype(np.float64)),
      ("bfloat16", np.ones(3, ml_dtypes.bfloat16), np.dtype(ml_dtypes.bfloat16)))
  def test_array_likes_keep_numpys_dtype(self, source: Any,
                                         dtype: np.dtype[Any]) -> None:
    copied = jax_patch.aligned_copy(source)
    self.assertEqual(copied.dtype, dtype)
    self.assertTrue(_is_aligned(copied))
    np.testing.assert_array_equal(copied, np.asarray(source))

  def test_a_jax_array_is_copied_to_the_host(self) -> None:
    source = jax_patch.from_dlpack(np.arange(8, dtype=np.float32))
    copied = jax_patch.aligned_copy(source)
    self.assertTrue(_is_aligned(copied))
    np.testing.assert_array_equal(copied, np.arange(8))

  @parameterized.named_parameters(
      ("objects", np.array([None, 1], dtype=object)),
      ("mixed_list", [1, "a"]),
      ("strings", np.array(["ab", "cd"])),
      ("structured", np.zeros(2, [("a", np.float32), ("b", np.int8)])),
      ("datetimes", np.array(["2026-12-06"], dtype="datetime64[D]")))
  def test_refuses_what_jax_cannot_import(self, source: Any) -> None:
    with self.assertRaisesRegex(TypeError, "aligned_copy: JAX cannot import"):
      jax_patch.aligned_copy(source)


@requires_allocator
class AlignedAllocationTest(parameterized.TestCase):

  @parameterized.parameters(*_SIZES)
  def test_new_arrays_are_aligned_and_share(self, size: int) -> None:
    with jax_patch.aligned_allocation():
      made = {"empty": np.empty(size, np.float32),
              "zeros": np.zeros(size, np.float32),
              "ones": np.ones(size, np.float32),
              "arange": np.arange(size, dtype=np.float32),
              "concatenate": np.concatenate([np.ones(size, np.float32)] * 2),
              "astype": np.ones(size, np.float64).astype(np.float32)}
    for name, x in made.items():
      with self.subTest(name):
        self.assertTrue(_is_aligned(x))
        self.assertEqual(_handler_name(x), numpy_alignment.HANDLER_NAME)
        self.assertTrue(numpy_alignment.allocated_aligned(x))
        self.assertTrue(_shares(x))

  @parameterized.parameters(*_SIZES)
  def test_zeros_are_zero_in_reused_memory(self, size: int) -> None:
    with jax_patch.aligned_allocation():
      dirty = np.full(size, 7, np.float32)
      del dirty
      zeros = np.zeros(size, np.float32)
    self.assertFalse(zeros.any())

  def test_resize_keeps_data_and_alignment(self) -> None:
    with jax_patch.aligned_allocation():
      x = np.arange(1000, dtype=np.float32)
      for size in (5000, 10, 1 << 20, 100):
        previous = min(size, x.size)
        kept = x[:previous].copy()
        x.resize(size, refcheck=False)
        self.assertTrue(_is_aligned(x))
        np.testing.assert_array_equal(x[:previous], kept)

  def test_numpy_is_unchanged_outside_the_context(self) -> None:
    before = np.empty(16)
    with jax_patch.aligned_allocation():
      pass
    after = np.empty(16)
    self.assertEqual({_handler_name(before), _handler_name(after)},
                     {"default_allocator"})

  def test_other_threads_keep_their_allocator(self) -> None:
    names = []
    with jax_patch.aligned_allocation():
      thread = threading.Thread(
          target=lambda: names.append(_handler_name(np.empty(16))))
      thread.start()
      thread.join()
      inside = np.empty(16)
    self.assertEqual(names, ["default_allocator"])
    self.assertEqual(_handler_name(inside), numpy_alignment.HANDLER_NAME)

  def test_nesting_and_errors_restore_the_allocator(self) -> None:
    with self.assertRaises(ZeroDivisionError):
      with jax_patch.aligned_allocation():
        with jax_patch.aligned_allocation():
          nested = np.empty(16)
        still = np.empty(16)
        _ = 1 / 0
    self.assertEqual(_handler_name(nested), numpy_alignment.HANDLER_NAME)
    self.assertEqual(_handler_name(still), numpy_alignment.HANDLER_NAME)
    self.assertEqual(_handler_name(np.empty(16)), "default_allocator")

  def test_tracemalloc_accounts_for_arrays_made_inside(self) -> None:
    nbytes = 8 << 20
    domain = tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)
    tracemalloc.start()
    self.addCleanup(tracemalloc.stop)

    def traced() -> int:
      snapshot = tracemalloc.take_snapshot().filter_traces([domain])
      return sum(stat.size for stat in snapshot.statistics("filename"))

    before = traced()
    with jax_patch.aligned_allocation():
      x = np.empty(nbytes, np.uint8)
    self.assertGreaterEqual(traced() - before, nbytes)
    del x  # Freed outside the context, by the allocator that made it.
    self.assertLess(traced() - before, nbytes)

  def test_arrays_freed_at_interpreter_exit(self) -> None:
    # Freeing runs no Python: arrays still alive at shutdown are freed
    # after the interpreter has gone, and the process exits cleanly.
    run = fresh_process.run(textwrap.dedent("""
        import numpy as np
        import jax_patch
        with jax_patch.aligned_allocation():
          kept = [np.ones(n, np.float32) for n in (1, 1000, 1 << 20)]
        kept.append(kept[0])
        print("made", all(x.ctypes.data % 64 == 0 for x in kept))
        """))
    self.assertEqual((run.returncode, run.stdout.strip()), (0, "made True"),
                     run.stderr)


class AllocatorMissingTest(absltest.TestCase):

  def test_aligned_allocation_says_what_to_install(self) -> None:
    run = fresh_process.run(textwrap.dedent("""
        import sys
        sys.modules["numpy_allocator"] = None  # What an import then raises.
        import jax_patch
        from jax_patch._src import numpy_alignment
        print(numpy_alignment.aligned_allocation_available())
        try:
          with jax_patch.aligned_allocation():
            pass
        except ImportError as err:
          print(err)
        """))
    self.assertEqual(run.returncode, 0, run.stderr)
    self.assertEqual(run.stdout.splitlines(), [
        "False",
        "aligned_allocation needs numpy-allocator: pip install "
        "'jax-patch[aligned]' (numpy-allocator has wheels for Linux x86-64 "
        "only)"])

  def test_padding_refuses_what_no_allocation_can_be(self) -> None:
    self.assertEqual(numpy_alignment._padded(0), _ALIGNMENT)
    self.assertEqual(numpy_alignment._padded(65), 2 * _ALIGNMENT)
    self.assertIsNone(numpy_alignment._padded(sys.maxsize))


class SurveyTest(absltest.TestCase):
  """jax_patch.testing.numpy_input, which check and the benchmark report."""

  def test_aligning_routes_all_share(self) -> None:
    rows = numpy_input.survey(jax_patch.from_dlpack, count=8,
                              sizes=(4, 4096))
    routes = {row.route for row in rows}
    self.assertIn(numpy_input.DEFAULT_ROUTE, routes)
    self.assertIn("aligned_copy of np.arange", routes)
    self.assertEqual(
        "np.arange in aligned_allocation" in routes,
        numpy_alignment.aligned_allocation_available())
    self.assertEqual(numpy_input.broken(rows), [])
    for row in rows:
      self.assertBetween(row.shared, 0, row.made)
      self.assertEqual(row.copied, 0)

  def test_a_copy_under_copy_false_is_counted_and_breaks_the_promise(
      self) -> None:
    # A hostile importer, as upstream JAX 0.4.35 is: it copies under
    # copy=False.
    def copies(x: Any, copy: bool | None = None) -> Any:
      del copy
      return np.array(x)

    rows = numpy_input.survey(copies, count=2, sizes=(4,))
    self.assertEqual({(row.shared, row.copied) for row in rows}, {(0, 2)})
    self.assertEqual(numpy_input.broken(rows), rows)
    self.assertIn("16 B 0/2 (2 copied under copy=False)",
                  "\n".join(numpy_input.lines(rows)))

  def test_an_aligning_route_that_did_not_share_breaks_the_promise(
      self) -> None:
    rows = [numpy_input.Row(numpy_input.DEFAULT_ROUTE, 4, 2, 0),
            numpy_input.Row("aligned_copy of np.arange", 4, 2, 1)]
    self.assertEqual(numpy_input.broken(rows), rows[1:])

  def test_a_refusal_is_neither_shared_nor_copied(self) -> None:
    source = conformance.aligned_array((16,), misalign_bytes=16)
    self.assertEqual(numpy_input.outcome(jax_patch.from_dlpack, source),
                     numpy_input.RAISED)
    self.assertEqual(
        numpy_input.outcome(jax_patch.from_dlpack,
                            jax_patch.aligned_copy(source)),
        numpy_input.SHARED)


if __name__ == "__main__":
  absltest.main()
