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

import ctypes
import gc
import pathlib
import subprocess
import sys
import textwrap
import weakref
from typing import Any

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from jax_patch._src import conformance
from jax_patch._src import dlpack
from jax_patch._src import dlpack_capsule
from jax_patch._src import dlpack_compat
from tests import producers

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

CountingProducer = producers.CraftedProducer


def _run_in_a_fresh_process(script: str) -> "subprocess.CompletedProcess[str]":
  """Runs ``script`` in a new interpreter from the repository root.

  For what may crash or abort the process: that must not take the tests down.
  """
  return subprocess.run([sys.executable, "-c", script], capture_output=True,
                        text=True, timeout=120, check=False,
                        cwd=pathlib.Path(__file__).parents[1])


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

  def test_newer_major_version_is_refused_after_calling_its_deleter(
      self) -> None:
    producer = CountingProducer(conformance.aligned_array((4,)), major=2)
    with self.assertRaisesRegex(BufferError, "DLPack 2.0"):
      dlpack.from_dlpack(producer)
    gc.collect()
    self.assertEqual(producer.deletes, 1)

  def test_is_copied_capsule_with_copy_false_raises_and_releases(
      self) -> None:
    producer = CountingProducer(conformance.aligned_array((4,)),
                                flags=dlpack_capsule.FLAG_IS_COPIED)
    with self.assertRaisesRegex(BufferError, "IS_COPIED"):
      dlpack.from_dlpack(producer, copy=False)
    gc.collect()
    self.assertEqual(producer.deletes, 1)

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
        from jax_patch._src import conformance, dlpack
        kept = [dlpack.from_dlpack(
            np.broadcast_to(conformance.aligned_array((16,)), (16,)))]
        def imports():
          kept.append(dlpack.from_dlpack(conformance.aligned_array((16,))))
        thread = threading.Thread(target=imports)
        thread.start()
        thread.join()
        print("done", len(kept))
        """)
    run = _run_in_a_fresh_process(script)
    self.assertEqual(run.returncode, 0, run.stderr)
    self.assertIn("done 2", run.stdout)

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
        from jax_patch._src import conformance, dlpack, dlpack_capsule
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
    run = _run_in_a_fresh_process(script)
    self.assertEqual(run.returncode, 0, run.stderr[-2000:])
    self.assertIn("deleted", run.stdout)

  def test_jaxlib_calls_a_versioned_deleter_exactly_once(self) -> None:
    # Where jaxlib reads 1.x capsules, the patch hands them over unconverted:
    # jaxlib, not the patch, then releases the producer's tensor.
    source = conformance.aligned_array((16,))
    producer = producers.CraftedProducer(source)
    before = len(dlpack_capsule.live_tensors)
    result = dlpack.from_dlpack(producer, copy=False)
    converted = len(dlpack_capsule.live_tensors) - before
    self.assertEqual(converted,
                     0 if dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES else 1)
    source[0] = 7
    self.assertEqual(float(np.asarray(result)[0]), 7.0)
    self.assertEqual(producer.deletes, 0)
    del result
    gc.collect()
    self.assertEqual(producer.deletes, 1)
    self.assertEqual(len(dlpack_capsule.live_tensors), before)

  def test_null_deleter_is_never_handed_to_jaxlib(self) -> None:
    # jaxlib calls whatever deleter it finds; a NULL one aborts the process
    # (measured on 0.12.0.1), so a 1.x capsule with none is converted.
    script = textwrap.dedent("""
        import gc
        from jax_patch._src import conformance, dlpack
        from tests import producers
        source = conformance.aligned_array((16,))
        producer = producers.CraftedProducer(source, deleter=0)
        result = dlpack.from_dlpack(producer, copy=False)
        source[0] = 7
        assert float(result[0]) == 7.0
        del result
        gc.collect()
        print("released")
        """)
    run = _run_in_a_fresh_process(script)
    self.assertEqual(run.returncode, 0, run.stderr[-2000:])
    self.assertIn("released", run.stdout)


if __name__ == "__main__":
  absltest.main()
