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

"""Reliability: hostile producers, leaks, threads and source lifetimes.

The loops are short by default; set JAX_PATCH_SOAK to a multiplier (say 20)
for a longer soak.
"""

import ctypes
import ctypes.util
import gc
import os
import textwrap
import threading
import time
from typing import Any, Callable, Mapping
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np

import jax_patch
from jax_patch._src import dlpack
from jax_patch._src import dlpack_capsule
from jax_patch.testing import conformance
from tests import cpu_devices
from tests import fresh_process
from tests import memory
from tests import producers

_SOAK = float(os.environ.get("JAX_PATCH_SOAK", "1"))



class _Raising:
  def __init__(self, error: BaseException):
    self.error = error

  def __dlpack_device__(self) -> tuple[int, int]:
    return (1, 0)

  def __dlpack__(self, **kwargs: Any) -> Any:
    raise self.error


class HostileProducerTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("buffer_error", BufferError("no")),
      ("value_error", ValueError("no")),
      ("runtime_error", RuntimeError("no")),
  )
  def test_producer_error_propagates_unchanged(self,
                                               error: BaseException) -> None:
    with self.assertRaises(type(error)) as raised:
      dlpack.from_dlpack(_Raising(error))
    self.assertIs(raised.exception, error)

  def test_non_capsule_raises_type_error(self) -> None:
    with self.assertRaisesRegex(TypeError, "not a DLPack capsule"):
      dlpack.from_dlpack(conformance.PreparedCapsule(42))

  def test_wrongly_named_capsule_raises_buffer_error(self) -> None:
    capsule = producers._capsule_new(1, b"something_else", None)
    with self.assertRaisesRegex(BufferError, "something_else"):
      dlpack.from_dlpack(conformance.PreparedCapsule(capsule))

  def test_consumed_capsule_raises_buffer_error(self) -> None:
    source: Any = conformance.aligned_array((4,))  # pytype's NumPy lacks DLPack.
    capsule = source.__dlpack__()
    dlpack.from_dlpack(conformance.PreparedCapsule(capsule))
    with self.assertRaisesRegex(BufferError, "already consumed"):
      dlpack.from_dlpack(conformance.PreparedCapsule(capsule))

  @parameterized.named_parameters(
      ("negative_ndim", dict(ndim=-1), r"ndim is -1"),
      ("absurd_ndim", dict(ndim=1000), r"ndim is 1000"),
      ("negative_dimension", dict(shape=(-4,)), r"shape is \(-4,\)"),
      ("null_data", dict(data=0), r"data is NULL"),
      ("unknown_dtype_code", dict(dtype=(99, 32)),
       r"dtype is \(code=99, bits=32, lanes=1\)"),
      ("unknown_dtype_bits", dict(dtype=(2, 7)), r"dtype is \(code=2, bits=7,"),
      ("vector_lanes", dict(dtype=(2, 32, 2)), r"dtype is .*lanes=2\)"),
      ("shape_beyond_int64", dict(ndim=2, shape=(2**62, 4), strides=(4, 1)),
       r"shape is \(4611686018427387904, 4\): .*more bytes than any address"),
      ("zero_size_shape_beyond_int64",
       dict(ndim=2, shape=(2**62, 0), strides=(0, 1)),
       r"shape is \(4611686018427387904, 0\)"),
      ("broadcast_beyond_any_address_space",
       dict(dtype=(0, 8), shape=(2**62,), strides=(0,)),
       r"shape is \(4611686018427387904,\): .*more bytes than any address"),
      ("stride_beyond_int64",
       dict(ndim=2, shape=(2, 2), strides=(2**63 - 1, 1)),
       r"strides is \(9223372036854775807, 1\): a stride in bytes overflows"),
      ("stride_in_bytes_beyond_int64_on_a_size_one_dimension",
       dict(ndim=2, shape=(1, 4), strides=(2**62, 1)),
       r"strides is \(4611686018427387904, 1\): a stride in bytes overflows"),
      ("negative_stride_in_bytes_beyond_int64_on_a_size_one_dimension",
       dict(ndim=2, shape=(1, 4), strides=(-2**62, 1)),
       r"strides is \(-4611686018427387904, 1\): a stride in bytes overflows"),
      ("stride_in_bytes_beyond_int64_on_a_zero_size_dimension",
       dict(ndim=2, shape=(0, 4), strides=(2**62, 1)),
       r"strides is \(4611686018427387904, 1\): a stride in bytes overflows"),
      ("byte_offset_beyond_int64", dict(byte_offset=2**64 - 64),
       r"byte_offset is 18446744073709551552: beyond a signed 64-bit"),
      ("byte_offset_wrapping", dict(data=2**64 - 128, byte_offset=256),
       r"byte_offset is 256: data \+ byte_offset wraps"),
      ("span_past_the_address_space", dict(data=2**64 - 64, shape=(32,)),
       r"strides is \(1,\): .*beyond any address space"),
      ("span_below_address_zero", dict(data=64, strides=(-1000,)),
       r"strides is \(-1000,\): .*beyond any address space"),
      ("span_beyond_any_address_space",
       dict(dtype=(0, 8), ndim=2, shape=(2, 2), strides=(2**62, 1)),
       r"strides is \(4611686018427387904, 1\): .*beyond any address space"),
      ("dimension_beyond_any_address_space",
       dict(dtype=(0, 8), shape=(2**57,)),
       r"shape is \(144115188075855872,\): .*more bytes than any address"),
  )
  def test_invalid_field_raises_naming_it_and_releases_once(
      self, overrides: dict[str, Any], message: str) -> None:
    # Each is refused before anything reads the tensor's memory (none of
    # these fields describes memory the test owns), whatever copy asks.
    for versioned in (True, False):
      for copy in (None, True, False):
        producer = producers.CraftedProducer(
            conformance.aligned_array((4,)), versioned=versioned,
            **overrides)
        with self.subTest(versioned=versioned, copy=copy):
          with self.assertRaisesRegex(
              BufferError, "^from_dlpack: the DLPack tensor's " + message):
            dlpack.from_dlpack(producer, copy=copy)
          gc.collect()
          self.assertEqual(producer.deletes, 1)

  def test_any_error_while_reading_a_claimed_capsule_releases_it_once(
      self) -> None:
    # Once claimed, the tensor is the patch's alone to release: an error of
    # any kind while reading it must not leak it.
    for versioned in (True, False):
      producer = producers.CraftedProducer(conformance.aligned_array((4,)),
                                           versioned=versioned)
      with mock.patch.object(dlpack_capsule, "_tensor_info",
                             side_effect=MemoryError("reading")):
        with self.assertRaisesRegex(MemoryError, "reading"):
          dlpack.from_dlpack(producer)
      gc.collect()
      self.assertEqual(producer.deletes, 1, f"versioned={versioned}")

  @parameterized.named_parameters(
      ("string", "cpu"), ("one_number", 1), ("none", None),
      ("unknown_type", (99, 0)),
  )
  def test_bad_dlpack_device_raises_unsupported_device(self,
                                                       device: Any) -> None:
    with self.assertRaises(jax_patch.UnsupportedDeviceError):
      dlpack.from_dlpack(conformance.PreparedCapsule(None, device=device))

  def test_capsule_on_another_device_than_reported_raises(self) -> None:
    producer = producers.CraftedProducer(conformance.aligned_array((4,)),
                                         device_type=3)
    producer.reported_device = (1, 0)
    with self.assertRaisesRegex(BufferError, "DLDeviceType 3"):
      dlpack.from_dlpack(producer)
    gc.collect()
    self.assertEqual(producer.deletes, 1)


def _loop(make: Any, count: int) -> None:
  for done in range(count):
    make()
    if done % 10_000 == 9_999:
      memory.collect_jax_garbage()  # See memory.settled_resident_bytes.


def _growth_over_second_half(make: Any, count: int) -> tuple[int, int, int]:
  """Runs ``make`` ``count`` times; returns what the second half added.

  Allocators grow once to a working size; a leak keeps growing. Comparing
  the second half with the first tells the two apart.

  Returns:
    (Python objects, bytes on Python's heap over 5,000 traced calls,
    resident bytes once settled: ``memory.settled_resident_bytes``) added
    during the second half. DLPack structures and
    capsules are on Python's heap: one left behind per call would add
    400 KB or more.
  """
  _loop(make, count // 2)
  before = (memory.settled_resident_bytes(), len(gc.get_objects()))
  _loop(make, count // 2)
  with memory.python_heap() as growth:
    _loop(make, 5_000)
    heap = growth()
  after = (memory.settled_resident_bytes(), len(gc.get_objects()))
  return after[1] - before[1], heap, after[0] - before[0]


def _assert_flat(test: absltest.TestCase, make: Any, count: int) -> None:
  objects, heap, resident = _growth_over_second_half(make, count)
  test.assertLess(heap, 64 << 10)
  test.assertLess(objects, 200)
  test.assertLess(resident, 16 << 20)


class LeakTest(cpu_devices.CpuDefaultTestCase):
  """Many calls leave memory and objects flat (exports from the CPU)."""

  @parameterized.named_parameters(
      ("numpy_zero_copy",
       lambda: dlpack.from_dlpack(conformance.aligned_array((64,)))),
      ("numpy_copy", lambda: dlpack.from_dlpack(np.arange(64.0)[::2])),
      ("numpy_read_only",
       lambda: dlpack.from_dlpack(np.broadcast_to(np.float32(1), (64,)))),
      ("export", lambda: dlpack_capsule.inspect(
          dlpack.to_dlpack(jnp.ones(64), max_version=(1, 0)))),
  )
  def test_many_calls_keep_memory_and_objects_flat(self, make: Any) -> None:
    _assert_flat(self, make, int(100_000 * _SOAK))

  @producers.requires_torch
  def test_torch_imports_keep_memory_flat(self) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    source = torch.arange(64, dtype=torch.float32)
    _assert_flat(self, lambda: dlpack.from_dlpack(source),
                 int(100_000 * _SOAK))


class _Leaker:
  """An importer that leaks what one kind of leak would leave, per call."""

  def __init__(self) -> None:
    self.kept: list[Any] = []
    self.libc = ctypes.CDLL(ctypes.util.find_library("c"))
    self.libc.malloc.restype = ctypes.c_void_p
    self.pymem_malloc = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(
        ("PyMem_Malloc", ctypes.pythonapi))

  def objects(self) -> None:
    self.kept.append(dlpack.from_dlpack(conformance.aligned_array((4,))))

  def python_heap(self) -> None:
    # A DLPack structure nothing releases: a PyMem block, as the patch's are.
    dlpack.from_dlpack(conformance.aligned_array((4,)))
    self.pymem_malloc(80)

  def native(self) -> None:
    # A buffer jaxlib would hold: malloc'd, touched, never freed.
    dlpack.from_dlpack(conformance.aligned_array((4,)))
    ctypes.memset(self.libc.malloc(4096), 1, 4096)


class LeakCheckTest(parameterized.TestCase):
  """The leak check fails an importer that leaks: it can fail."""

  @parameterized.named_parameters(
      ("python_objects", "objects"), ("python_heap", "python_heap"),
      ("native_memory", "native"))
  def test_a_leaking_importer_fails_the_check(self, kind: str) -> None:
    leak = getattr(_Leaker(), kind)
    with self.assertRaises(AssertionError):
      _assert_flat(self, leak, 20_000)


class ThreadTest(absltest.TestCase):

  def _run_eight_threads(
      self, check: Callable[[int, np.ndarray[Any, Any]], str | None],
      beside: Callable[[float], None] | None = None) -> None:
    """Calls ``check(index, source)`` in a loop on 8 threads for 2 s.

    ``check`` returns what went wrong, if anything. ``beside(deadline)``, if
    given, runs on a ninth thread meanwhile.
    """
    deadline = time.monotonic() + 2.0 * _SOAK
    failures: list[str] = []
    counts = [0] * 8

    def work(index: int) -> None:
      source = conformance.aligned_array((256,)) + index
      try:
        while time.monotonic() < deadline:
          failure = check(index, source)
          if failure:
            failures.append(f"thread {index}: {failure}")
          counts[index] += 1
      except Exception as err:  # pylint: disable=broad-except
        failures.append(f"thread {index}: {type(err).__name__}: {err}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    if beside is not None:
      threads.append(threading.Thread(target=beside, args=(deadline,)))
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    self.assertEqual(failures, [])
    self.assertTrue(all(counts), counts)

  def test_eight_threads_import_and_export_correctly(self) -> None:
    def import_and_export(index: int,
                          source: np.ndarray[Any, Any]) -> str | None:
      expected = source[::1 + index % 2]
      imported = dlpack.from_dlpack(expected)
      if not np.array_equal(np.asarray(imported), expected):
        return "wrong import"
      exported = np.from_dlpack(conformance.PreparedCapsule(
          dlpack.to_dlpack(imported, max_version=(1, 0))))
      if not np.array_equal(exported, expected):
        return "wrong export"
      return None

    self._run_eight_threads(import_and_export)

  def test_imports_stay_right_while_install_is_toggled_beside_them(
      self) -> None:
    def import_(index: int, source: np.ndarray[Any, Any]) -> str | None:
      del index
      # Patched or upstream, whichever is installed at that moment.
      imported = jnp.from_dlpack(source)
      return None if np.array_equal(np.asarray(imported),
                                    source) else "wrong import"

    def toggle(deadline: float) -> None:
      while time.monotonic() < deadline:
        jax_patch.install()
        jax_patch.uninstall()

    try:
      self._run_eight_threads(import_, beside=toggle)
    finally:
      jax_patch.uninstall()

  def test_deleter_called_from_another_thread_is_safe(self) -> None:
    producer = producers.CraftedProducer(conformance.aligned_array((16,)))
    holder = [dlpack.from_dlpack(producer, copy=False)]
    thread = threading.Thread(target=holder.clear)
    thread.start()
    thread.join()
    gc.collect()
    self.assertEqual(producer.deletes, 1)


def _without_malloc_check(environ: Mapping[str, str]) -> dict[str, str]:
  """``environ`` without glibc's malloc-check allocator, if it has it.

  tools/hostile_allocator.sh preloads libc_malloc_debug.so with
  MALLOC_CHECK_=3. That library keeps an arena of its own, which glibc's
  fork does not lock: a jaxlib thread that allocates during a fork leaves
  it locked in the child, and the child hangs in CPython's own after-fork
  code before any of ours runs (once in 30 runs of this test's script). Without it,
  allocations go to glibc's own malloc, whose fork is safe and which still
  honours MALLOC_PERTURB_.
  """
  env = {name: value for name, value in environ.items()
         if name != "MALLOC_CHECK_"}
  preload = [library for library in env.get("LD_PRELOAD", "").split(":")
             if library and "libc_malloc_debug" not in library]
  env.pop("LD_PRELOAD", None)
  if preload:
    env["LD_PRELOAD"] = ":".join(preload)
  return env


class ProcessTest(absltest.TestCase):

  def test_fork_after_imports_leaves_parent_and_child_sound(self) -> None:
    # Each fork happens while another thread holds the claim lock; the
    # child claims a capsule and ends with os._exit, as a forking server's
    # worker does. The parent keeps importing and exits with live imports
    # of every kind. A child that has not exited within a minute fails the
    # run at once, saying which fork it was.
    script = textwrap.dedent(f"""
        import gc, os, signal, sys, threading, time, warnings
        import numpy as np
        from jax_patch._src import dlpack, dlpack_capsule
        from jax_patch.testing import conformance
        from tests import producers
        warnings.simplefilter("ignore", RuntimeWarning)  # JAX's fork warning.
        kept, owners = [], []
        def imports():
          kept.append(dlpack.from_dlpack(conformance.aligned_array((64,))))
          kept.append(dlpack.from_dlpack(
              np.broadcast_to(conformance.aligned_array((64,)), (64,))))
          # With a NULL deleter the producer keeps its memory alive itself.
          owners.append(producers.CraftedProducer(
              conformance.aligned_array((64,)), deleter=0))
          kept.append(dlpack.from_dlpack(owners[-1]))
        def claim_in_child():
          # The claim lock, held by another thread at the fork, must be
          # free in the child. Only the capsule module runs here: jaxlib's
          # threads do not survive a fork.
          signal.alarm(20)  # A deadlocked child dies of SIGALRM.
          source = conformance.aligned_array((8,))
          producer = producers.CraftedProducer(source)
          capsule, info = dlpack_capsule.take(producer.__dlpack__(),
                                              versioned_ok=True)
          view = dlpack_capsule.host_view(info)
          os._exit(0 if np.array_equal(view, source) else 7)
        def exit_status(pid, fork):
          # The alarm covers the child's own code, not CPython's after-fork
          # code that runs before it.
          deadline = time.monotonic() + 60
          while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
              return os.waitstatus_to_exitcode(status)
            time.sleep(0.01)
          os.kill(pid, signal.SIGKILL)
          os.waitpid(pid, 0)
          sys.exit(f"the child of fork {{fork}} was still running after 60 s")
        imports()
        for fork in range({int(20 * _SOAK)}):
          holding, done = threading.Event(), threading.Event()
          def hold():
            with dlpack_capsule._claim_lock:
              holding.set()
              done.wait()
          holder = threading.Thread(target=hold)
          holder.start()
          holding.wait()
          pid = os.fork()
          if pid == 0:
            claim_in_child()
          done.set()
          holder.join()
          assert exit_status(pid, fork) == 0, fork
          imports()
        for imported in kept:
          assert float(imported[1]) == 1.0
        print("forks", fork + 1, "live imports", len(kept))
        """)
    run = fresh_process.run(
        script, env=_without_malloc_check(fresh_process.environment()))
    self.assertEqual(run.returncode, 0, run.stderr[-3000:])
    self.assertRegex(run.stdout, r"forks \d+ live imports \d+")

  def test_malloc_check_is_left_out_of_the_fork_test_alone(self) -> None:
    env = _without_malloc_check({
        "LD_PRELOAD": "/lib/libc_malloc_debug.so.0:/lib/libother.so",
        "MALLOC_CHECK_": "3", "MALLOC_PERTURB_": "165",
        "PYTHONMALLOC": "malloc"})
    self.assertEqual(env, {"LD_PRELOAD": "/lib/libother.so",
                           "MALLOC_PERTURB_": "165", "PYTHONMALLOC": "malloc"})
    self.assertNotIn("LD_PRELOAD", _without_malloc_check(
        {"LD_PRELOAD": "/lib/libc_malloc_debug.so.0"}))


class SourceLifetimeTest(absltest.TestCase):

  def test_deleting_the_source_first_keeps_the_import_valid(self) -> None:
    source = conformance.aligned_array((1024,))
    imported = dlpack.from_dlpack(source, copy=False)
    del source
    gc.collect()
    np.testing.assert_array_equal(np.asarray(imported), np.arange(1024))

  def test_deleting_the_import_first_keeps_the_source_valid(self) -> None:
    source = conformance.aligned_array((1024,))
    imported = dlpack.from_dlpack(source, copy=False)
    del imported
    gc.collect()
    source[0] = 5
    self.assertEqual(source[0], 5)
    np.testing.assert_array_equal(source[1:], np.arange(1, 1024))


if __name__ == "__main__":
  absltest.main()
