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

"""Tests for capsule reading, conversion and deleter accounting."""

import contextlib
import ctypes
import gc
import struct
import sys
import textwrap
import threading
import weakref
from typing import Any, Iterator

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from jax_patch._src import dlpack
from jax_patch._src import dlpack_capsule
from jax_patch._src import dlpack_compat
from jax_patch.testing import conformance
from tests import fresh_process
from tests import memory
from tests import producers

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

CountingProducer = producers.CraftedProducer


class InspectTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("compact", lambda a: a),
      ("transposed", lambda a: a.T),
      ("strided_and_reversed", lambda a: a[::2, ::-1]),
      ("broadcast", lambda a: np.broadcast_to(a[0], (3, 4))),
  )
  def test_host_view_matches_source(self, make: Any) -> None:
    source = make(conformance.aligned_array((4, 4)))
    for max_version in (None, (1, 0)):
      if max_version is None and not source.flags.writeable:
        continue  # NumPy cannot export a read-only array as 0.x.
      capsule = source.__dlpack__(max_version=max_version)
      info = dlpack_capsule.inspect(capsule)
      np.testing.assert_array_equal(dlpack_capsule.host_view(info), source)

  def test_versioned_capsule_reports_version_and_read_only(self) -> None:
    source = np.broadcast_to(np.arange(3.0), (2, 3))
    info = dlpack_capsule.inspect(source.__dlpack__(max_version=(1, 0)))
    self.assertTrue(info.versioned)
    self.assertEqual(info.version[0], 1)
    self.assertTrue(info.read_only)
    self.assertEqual(info.strides, (0, 1))

  def test_non_capsule_raises_type_error(self) -> None:
    with self.assertRaisesRegex(TypeError, "not a DLPack capsule"):
      dlpack_capsule.inspect(object())

  def test_consumed_capsule_raises_buffer_error(self) -> None:
    source: Any = conformance.aligned_array((4,))  # pytype's NumPy lacks DLPack.
    capsule = source.__dlpack__()
    dlpack.from_dlpack(conformance.PreparedCapsule(capsule))
    with self.assertRaisesRegex(BufferError, "already consumed"):
      dlpack_capsule.inspect(capsule)

  def test_misnamed_capsule_raises_buffer_error(self) -> None:
    capsule = _capsule_new(1, b"not_dltensor", None)
    with self.assertRaisesRegex(BufferError, "not_dltensor"):
      dlpack_capsule.inspect(capsule)


class DeleterTest(parameterized.TestCase):

  def test_deleter_runs_once_after_the_jax_array_is_gone(self) -> None:
    producer = CountingProducer(conformance.aligned_array((16,)))
    result = dlpack.from_dlpack(producer, copy=False)
    gc.collect()
    self.assertEqual(producer.deletes, 0)
    producer.array[0] = 7
    self.assertEqual(np.asarray(result)[0], 7)
    del result
    gc.collect()
    self.assertEqual(producer.deletes, 1)

  def test_deleter_runs_once_after_a_copying_import(self) -> None:
    source = conformance.aligned_array((16,), misalign_bytes=4)
    producer = CountingProducer(source)
    result = dlpack.from_dlpack(producer)
    gc.collect()
    self.assertEqual(producer.deletes, 1)  # The copy no longer needs it.
    source[0] = 7
    self.assertEqual(np.asarray(result)[0], 0)

  def test_is_copied_capsule_with_copy_true_is_not_copied_again(
      self) -> None:
    source = conformance.aligned_array((16,))
    producer = CountingProducer(source, flags=dlpack_capsule.FLAG_IS_COPIED)
    result = dlpack.from_dlpack(producer, copy=True)
    source[0] = 7  # The producer's copy is the JAX array's buffer now.
    self.assertEqual(np.asarray(result)[0], 7)

  @parameterized.named_parameters(
      ("newer", 2, r"^from_dlpack: .*DLPack 2\.0 capsule; this JAX reads"),
      ("far_newer", 255, r"^from_dlpack: .*DLPack 255\.0 capsule"),
      ("older_than_the_structure", 0,
       r"^from_dlpack: .*'dltensor_versioned' capsule of DLPack 0\.0; that "
       "structure exists only from DLPack 1.0"),
  )
  def test_versioned_capsule_of_another_major_is_refused_after_its_deleter(
      self, major: int, message: str) -> None:
    producer = CountingProducer(conformance.aligned_array((4,)), major=major)
    with self.assertRaisesRegex(BufferError, message):
      dlpack.from_dlpack(producer)
    gc.collect()
    self.assertEqual(producer.deletes, 1)

  def test_inspect_refuses_another_major_and_releases_it_once(self) -> None:
    producer = CountingProducer(conformance.aligned_array((4,)), major=2)
    capsule = producer.__dlpack__()
    with self.assertRaisesRegex(BufferError, r"DLPack 2\.0"):
      dlpack_capsule.inspect(capsule)
    del capsule  # Its destructor must find it consumed.
    gc.collect()
    self.assertEqual(producer.deletes, 1)

  @parameterized.named_parameters(
      ("alone", 0),
      # As jaxlib 0.12 marks its own copies.
      ("read_only", dlpack_capsule.FLAG_READ_ONLY),
      ("subbyte_padded", dlpack_capsule.FLAG_IS_SUBBYTE_TYPE_PADDED),
      ("every_defined_bit", dlpack_capsule.FLAG_READ_ONLY
       | dlpack_capsule.FLAG_IS_SUBBYTE_TYPE_PADDED),
      ("an_undefined_bit", 1 << 40),
  )
  def test_is_copied_capsule_with_copy_false_raises_and_releases(
      self, other_flags: int) -> None:
    # IS_COPIED is one bit of the flags: whatever else is set, the
    # producer copied, and copy=False was a promise of no copy.
    producer = CountingProducer(
        conformance.aligned_array((4,)),
        flags=dlpack_capsule.FLAG_IS_COPIED | other_flags)
    with self.assertRaisesRegex(dlpack.CopyRequiredError, "IS_COPIED"):
      dlpack.from_dlpack(producer, copy=False)
    gc.collect()
    self.assertEqual(producer.deletes, 1)

  @parameterized.named_parameters(
      ("none", 0),
      ("read_only", dlpack_capsule.FLAG_READ_ONLY),
      ("an_undefined_bit", 1 << 40),
  )
  def test_capsule_not_flagged_is_copied_with_copy_false_shares(
      self, flags: int) -> None:
    source = conformance.aligned_array((4,))
    result = dlpack.from_dlpack(CountingProducer(source, flags=flags),
                                copy=False)
    source[0] = 7  # Shared: the write shows through.
    self.assertEqual(np.asarray(result)[0], 7)

  def test_numpy_source_is_released_when_the_import_dies(self) -> None:
    source = conformance.aligned_array((16,))
    source.flags.writeable = False
    alive = weakref.ref(source.base)
    result = dlpack.from_dlpack(source, copy=False)
    del source
    gc.collect()
    self.assertIsNotNone(alive())
    del result
    gc.collect()
    self.assertIsNone(alive())

  def test_exit_with_live_imports_is_clean(self) -> None:
    script = textwrap.dedent("""
        import threading
        import numpy as np
        from jax_patch._src import dlpack
        from jax_patch.testing import conformance
        kept = [dlpack.from_dlpack(
            np.broadcast_to(conformance.aligned_array((16,)), (16,)))]
        def imports():
          kept.append(dlpack.from_dlpack(conformance.aligned_array((16,))))
        thread = threading.Thread(target=imports)
        thread.start()
        thread.join()
        print("done", len(kept))
        """)
    run = fresh_process.run(script)
    self.assertEqual(run.returncode, 0, run.stderr)
    self.assertIn("done 2", run.stdout)

  def test_exit_with_a_taken_capsule_never_consumed_is_clean(self) -> None:
    # A capsule take() made for the producer's own structure, alive at exit:
    # its destructor runs during shutdown and calls NumPy's deleter.
    script = textwrap.dedent("""
        import numpy as np
        from jax_patch._src import dlpack_capsule
        from jax_patch.testing import conformance
        source = conformance.aligned_array((16,))
        kept = [dlpack_capsule.take(
            source.__dlpack__(max_version=max_version), versioned_ok=True)[0]
                for max_version in (None, (1, 0))]
        names = [dlpack_capsule.capsule_name(capsule) for capsule in kept]
        assert names == [b"dltensor", b"dltensor_versioned"], names
        print("taken")
        """)
    run = fresh_process.run(script)
    self.assertEqual(run.returncode, 0, run.stderr[-2000:])
    self.assertIn("taken", run.stdout)

  @parameterized.named_parameters(
      ("released_by_jaxlib", 1, "dlpack.from_dlpack(producer, copy=False)"),
      ("refused_as_dlpack_2", 2,
       "dlpack_capsule.inspect(producer.__dlpack__())"),
  )
  def test_producer_deleter_runs_with_the_gil_held(self, major: int,
                                                   use: str) -> None:
    # PyThreadState_Get aborts the process when called without the GIL: as
    # the producer's deleter, it shows how the deleter was called. (jaxlib
    # 0.4.35's own deleter aborts, more rarely, when called without it.)
    if major == 1 and dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES:
      self.skipTest("jaxlib 0.12 on consumes 1.x capsules itself and calls "
                    "the deleter as the DLPack spec allows, from any thread: "
                    "test_jaxlib_calls_a_versioned_deleter_exactly_once")
    script = textwrap.dedent(f"""
        import ctypes, gc
        from jax_patch._src import dlpack, dlpack_capsule
        from jax_patch.testing import conformance
        from tests import producers
        gil_check = ctypes.cast(ctypes.pythonapi.PyThreadState_Get,
                                ctypes.c_void_p).value
        producer = producers.CraftedProducer(
            conformance.aligned_array((16,)), major={major},
            deleter=gil_check)
        try:
          result = {use}
        except BufferError:
          pass
        result = None
        gc.collect()
        print("deleted")
        """)
    run = fresh_process.run(script)
    self.assertEqual(run.returncode, 0, run.stderr[-2000:])
    self.assertIn("deleted", run.stdout)

  def test_jaxlib_calls_a_versioned_deleter_exactly_once(self) -> None:
    # Where jaxlib reads 1.x capsules, the patch hands them over unconverted:
    # jaxlib, not the patch, then releases the producer's tensor.
    source = conformance.aligned_array((16,))
    producer = producers.CraftedProducer(source)
    before = dlpack_capsule.structures_made
    result = dlpack.from_dlpack(producer, copy=False)
    converted = dlpack_capsule.structures_made - before
    self.assertEqual(converted,
                     0 if dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES else 1)
    source[0] = 7
    self.assertEqual(float(np.asarray(result)[0]), 7.0)
    self.assertEqual(producer.deletes, 0)
    del result
    gc.collect()
    self.assertEqual(producer.deletes, 1)


class NumpyReleaseTest(parameterized.TestCase):
  """NumPy's C release functions do what every structure made here needs.

  A gate: a NumPy whose deleter or capsule destructor changed would leak or
  double-free what the patch allocates.
  """

  def _structure(self, owner: Any, versioned: bool) -> tuple[Any, int]:
    """A capsule of a new structure holding ``owner``, and its size."""
    size = (ctypes.sizeof(dlpack_capsule._DLManagedTensorVersioned)
            if versioned else ctypes.sizeof(dlpack_capsule._DLManagedTensor))
    def layout(structure: int, ctx: int, deleter: int) -> bytes:
      del structure  # An empty tensor: no field points anywhere.
      if versioned:
        return struct.pack("=IIQQQ", 1, 0, ctx, deleter, 0) + bytes(48)
      return bytes(48) + struct.pack("=QQ", ctx, deleter)

    return dlpack_capsule._new_structure(size, layout, owner,
                                         versioned), size

  def test_release_functions_are_those_of_numpys_own_capsules(self) -> None:
    release = dlpack_capsule._numpy_release()
    self.assertEqual(release, dlpack_capsule._NUMPY)
    self.assertNotIn(0, release)

  @parameterized.named_parameters(("legacy", False), ("versioned", True))
  def test_unconsumed_capsule_frees_its_structure_and_drops_the_owner(
      self, versioned: bool) -> None:
    owner = [object()]
    before = sys.getrefcount(owner)
    with memory.python_heap() as growth:
      capsule, size = self._structure(owner, versioned)
      self.assertEqual(sys.getrefcount(owner), before + 1)
      held = growth()
      del capsule
      self.assertEqual(sys.getrefcount(owner), before)
      self.assertLessEqual(growth(), held - size)

  @parameterized.named_parameters(("legacy", False), ("versioned", True))
  def test_consumed_capsule_leaves_release_to_the_consumer(
      self, versioned: bool) -> None:
    owner = [object()]
    before = sys.getrefcount(owner)
    capsule, _ = self._structure(owner, versioned)
    name = (dlpack_capsule._USED_VERSIONED_NAME_PTR if versioned
            else dlpack_capsule._USED_LEGACY_NAME_PTR)
    address = dlpack_capsule._capsule_get_pointer(
        capsule, dlpack_capsule._VERSIONED_NAME_PTR if versioned
        else dlpack_capsule._LEGACY_NAME_PTR)
    dlpack_capsule._capsule_set_name(capsule, name)
    del capsule
    self.assertEqual(sys.getrefcount(owner), before + 1)
    dlpack_capsule._release_now(address, versioned)  # As a consumer would.
    self.assertEqual(sys.getrefcount(owner), before)


class NullDeleterTest(absltest.TestCase):

  def test_null_deleter_imports_everywhere_and_nothing_is_called(self) -> None:
    # DLPack allows a NULL deleter; jaxlib, handed one, aborts the process
    # when it copies the tensor or frees the import
    # (dlpack_compat.JAXLIB_ABORTS_ON_NULL_DELETERS). Every dtype, layout,
    # alignment, copy and device, 0.x and 1.x, in a process of its own.
    script = textwrap.dedent("""
        import gc, itertools
        import jax, numpy as np
        from jax_patch._src import dlpack, dlpack_capsule
        from jax_patch._src import dlpack_compat
        from jax_patch.testing import conformance
        from tests import producers
        layouts = {
            "row_major": lambda a: a, "transposed": lambda a: a.T,
            "strided_reversed": lambda a: a[::2, ::-1],
            "zero_size": lambda a: a[:0]}
        devices = (None, *jax.devices("cpu")[:2])
        dtypes = sorted((d for d in set(dlpack_capsule._DTYPES.values())
                         if dlpack_compat.jax_has_dtype(d)), key=str)
        imported = refused = 0
        for dtype, misalign, layout, versioned, copy, device in (
            itertools.product(dtypes, (0, 1), layouts, (True, False),
                              (None, True, False), devices)):
          source = layouts[layout](conformance.aligned_array(
              (8, 8), dtype, misalign_bytes=misalign * dtype.itemsize))
          expected = np.asarray(source).astype(
              jax.dtypes.canonicalize_dtype(dtype))
          producer = producers.CraftedProducer(
              source, versioned=versioned, deleter=0)
          try:
            result = dlpack.from_dlpack(producer, device=device, copy=copy)
          except dlpack.CopyRequiredError:
            assert copy is False, (dtype, layout, misalign, copy)
            refused += 1
            continue
          # Byte for byte: NumPy before numpy/numpy#30879 compares
          # ml_dtypes' NaNs (float8_e8m0fnu's) as unequal.
          np.testing.assert_array_equal(
              np.ascontiguousarray(result).view(np.uint8),
              np.ascontiguousarray(expected).view(np.uint8))
          imported += 1
          del result
        gc.collect()
        print("imported", imported, "refused", refused)
        """)
    run = fresh_process.run(script)
    self.assertEqual(run.returncode, 0, run.stderr[-3000:])
    self.assertRegex(run.stdout, r"imported [1-9]\d* refused \d+")


@contextlib.contextmanager
def _switch_interval(seconds: float) -> Iterator[None]:
  before = sys.getswitchinterval()
  sys.setswitchinterval(seconds)
  try:
    yield
  finally:
    sys.setswitchinterval(before)


class SharedCapsuleTest(parameterized.TestCase):
  """A producer whose ``__dlpack__`` hands one capsule to every caller."""

  _THREADS = 8
  _ROUNDS = 60

  def setUp(self) -> None:
    super().setUp()
    # Switch threads every microsecond rather than every 5 ms, so that they
    # interleave inside an import, where a race would be.
    self.enter_context(_switch_interval(1e-6))

  def _consume_at_once(self, shared: Any,
                       copy: bool | None) -> tuple[list[Any], list[str]]:
    """Imports ``shared`` from eight threads released together."""
    barrier = threading.Barrier(self._THREADS)
    results: list[Any] = []
    errors: list[str] = []

    def consume() -> None:
      barrier.wait()
      try:
        results.append(dlpack.from_dlpack(shared, copy=copy))
      except BufferError as err:
        errors.append(str(err))

    threads = [threading.Thread(target=consume)
               for _ in range(self._THREADS)]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    return results, errors

  @parameterized.named_parameters(
      ("versioned_aliased", True, None), ("versioned_copied", True, True),
      ("legacy_aliased", False, None), ("legacy_copied", False, True),
  )
  def test_eight_threads_consume_it_exactly_once(self, versioned: bool,
                                                 copy: bool | None) -> None:
    for round_ in range(self._ROUNDS):
      source = conformance.aligned_array((64,))
      producer = producers.CraftedProducer(source, versioned=versioned)
      shared = conformance.PreparedCapsule(producer.__dlpack__())
      results, errors = self._consume_at_once(shared, copy)
      self.assertLen(results, 1, f"round {round_}: {errors}")
      for error in errors:
        self.assertIn("already consumed", error)
      np.testing.assert_array_equal(np.asarray(results[0]), source)
      del results[:], shared.capsule
      gc.collect()
      self.assertEqual(producer.deletes, 1, f"round {round_}")

  def test_numpy_capsule_shared_by_threads_is_freed_once(self) -> None:
    # A NumPy capsule's deleter frees memory: run twice, it corrupts the
    # heap, so this runs in a process of its own.
    script = textwrap.dedent("""
        import gc, sys, threading
        import numpy as np
        from jax_patch._src import dlpack
        from jax_patch.testing import conformance
        sys.setswitchinterval(1e-6)
        for round_ in range(100):
          source = conformance.aligned_array((256,))
          shared = conformance.PreparedCapsule(
              source.__dlpack__(max_version=(1, 0)))
          barrier = threading.Barrier(8)
          results = []
          def consume():
            barrier.wait()
            try:
              results.append(dlpack.from_dlpack(shared))
            except BufferError:
              pass
          threads = [threading.Thread(target=consume) for _ in range(8)]
          for thread in threads:
            thread.start()
          for thread in threads:
            thread.join()
          assert len(results) == 1, (round_, len(results))
          np.testing.assert_array_equal(np.asarray(results[0]), source)
          del results, shared
        gc.collect()
        print("rounds", round_ + 1)
        """)
    run = fresh_process.run(script)
    self.assertEqual(run.returncode, 0, run.stderr[-3000:])
    self.assertIn("rounds 100", run.stdout)


if __name__ == "__main__":
  absltest.main()
