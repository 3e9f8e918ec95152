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

"""The series' ``jax/_src/dlpack_capsule.py``, as its patches write it.

The module (``jax_patch/_delivery/series_files/dlpack_capsule.py``, from which
the patches are cut) converts producers' capsules for jaxlib before 0.12:
memory-safety code. It is tested here on its own, on every JAX of the version matrix, with
NumPy as the consumer (it reads both capsule versions), so that no jaxlib is
needed: real NumPy capsules where they show the behaviour, and a producer
double for what no real producer does (another major version, a NULL
deleter, a capsule handed out twice), fuzzed with Hypothesis.
"""

from __future__ import annotations

import ctypes
import gc
import pathlib
import threading
from typing import Any
import weakref

from absl.testing import absltest
from absl.testing import parameterized
import hypothesis
from hypothesis import strategies as st
import numpy as np

from jax_patch._delivery import series_patches
from jax_patch._delivery.series_files import dlpack_capsule


def _module_text(min_jaxlib: tuple[int, ...], max_jaxlib: tuple[int, ...],
                 imports_versioned: bool) -> str:
  """The module after every patch of a target's series that edits it."""
  text = ""
  for patch in series_patches.for_target(min_jaxlib, max_jaxlib,
                                         imports_versioned):
    for edit in patch.edits:
      if edit.path == series_patches.CAPSULE_MODULE:
        if not edit.old:
          text = edit.new
        else:
          assert text.count(edit.old) == 1, (patch.slug, edit.old)
          text = text.replace(edit.old, edit.new)
  return text

_get_pointer = ctypes.PYFUNCTYPE(
    ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
        ("PyCapsule_New", ctypes.pythonapi))


class _DLTensor(ctypes.Structure):
  _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
              ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
              ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
              ("lanes", ctypes.c_uint16), ("shape", ctypes.c_void_p),
              ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]


class _Versioned(ctypes.Structure):
  _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
              ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
              ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


def _header(capsule: Any) -> _Versioned:
  return _Versioned.from_address(_get_pointer(capsule, b"dltensor_versioned"))


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _HostileProducer:
  """A producer double: one 1.x tensor of 8 float64s, every header field set.

  Its deleter counts its calls and poisons the elements, as a producer
  freeing them would. Every instance is kept: a deleter called late must
  find its callback and memory still there, and count, not crash.
  """

  instances: list[_HostileProducer] = []

  def __init__(self, major: int = 1, minor: int = 0, flags: int = 0,
               with_deleter: bool = True):
    self.elements = np.arange(8.0)
    self.shape = (ctypes.c_int64 * 1)(8)
    self.deletions = 0
    self.deleter = _DELETER(self._delete)
    self.managed = _Versioned(
        major=major, minor=minor, flags=flags,
        deleter=ctypes.cast(self.deleter, ctypes.c_void_p).value
        if with_deleter else None,
        dl_tensor=_DLTensor(
            data=self.elements.ctypes.data, device_type=1, ndim=1, code=2,
            bits=64, lanes=1, shape=ctypes.addressof(self.shape)))
    # No destructor: a capsule dying unconsumed leaks, so that only the code
    # under test ever calls the deleter.
    self.capsule = _capsule_new(ctypes.addressof(self.managed),
                                b"dltensor_versioned", None)
    _HostileProducer.instances.append(self)

  def _delete(self, address: int) -> None:
    assert address == ctypes.addressof(self.managed)
    self.deletions += 1
    self.elements[:] = -1.0

  def free_structure(self) -> list[int]:
    """Overwrites the managed tensor and shape as freed memory.

    What a producer with a NULL deleter may do once the conversion returns:
    it is never told when the consumer is done. The bytes become 0xA5,
    whose shape would fault if followed, but for the deleter field, which
    points at a function that records its calls, so that a late read fails
    the test instead of crashing it.

    Returns:
      The calls' record.
    """
    for block in (self.managed, self.shape):
      ctypes.memset(ctypes.addressof(block), 0xA5, ctypes.sizeof(block))
    calls: list[int] = []
    self.late_deleter = _DELETER(calls.append)
    self.managed.deleter = ctypes.cast(self.late_deleter, ctypes.c_void_p).value
    return calls


class ModuleIsWhatTheSeriesWritesTest(parameterized.TestCase):
  """The module tested here is the one each target's series leaves in JAX."""

  @parameterized.named_parameters(
      ("main", (0, 11, 0), (0, 11, 1), False),
      ("release_0_11_2", (0, 11, 0), (0, 11, 2), False),
      ("release_0_12", (0, 11, 2), (0, 12, 0), True))
  def test_the_series_writes_this_file(
      self, min_jaxlib: tuple[int, ...], max_jaxlib: tuple[int, ...],
      imports_versioned: bool) -> None:
    self.assertEqual(_module_text(min_jaxlib, max_jaxlib, imports_versioned),
                     pathlib.Path(dlpack_capsule.__file__).read_text())


class AsLegacyCapsuleTest(parameterized.TestCase):
  """A 1.x capsule handed over as 0.x: claimed once, released once."""

  def test_read_only_numpy_capsule_is_shared_not_copied(self) -> None:
    source = np.arange(8.0)
    view = source.view()
    view.flags.writeable = False
    legacy = dlpack_capsule.as_legacy_capsule(
        view.__dlpack__(max_version=(1, 0)))
    self.assertEqual(_get_name(legacy), b"dltensor")
    imported = np.from_dlpack(_CapsuleOnce(legacy))
    source[0] = 7.0
    self.assertEqual(imported[0], 7.0)

  def test_a_0x_capsule_and_a_non_capsule_pass_through(self) -> None:
    legacy = np.arange(4.0).__dlpack__()
    self.assertIs(dlpack_capsule.as_legacy_capsule(legacy), legacy)
    not_a_capsule = object()
    self.assertIs(dlpack_capsule.as_legacy_capsule(not_a_capsule),
                  not_a_capsule)

  def _import_then_release(self, producer: _HostileProducer,
                           legacy: Any) -> None:
    """NumPy imports ``legacy``, the caller's only reference, then frees it.

    The producer's tensor must live until the import dies.
    """
    imported = np.from_dlpack(_CapsuleOnce(legacy))
    del legacy
    gc.collect()
    self.assertEqual(producer.deletions, 0)
    np.testing.assert_array_equal(imported, np.arange(8.0))
    del imported
    gc.collect()

  def test_producer_tensor_lives_until_the_consumer_releases_it(
      self) -> None:
    producer = _HostileProducer()
    self._import_then_release(
        producer, dlpack_capsule.as_legacy_capsule(producer.capsule))
    self.assertEqual(producer.deletions, 1)

  def test_unconsumed_result_releases_the_tensor_when_it_dies(self) -> None:
    producer = _HostileProducer()
    legacy = dlpack_capsule.as_legacy_capsule(producer.capsule)
    self.assertEqual(producer.deletions, 0)
    del legacy
    gc.collect()
    self.assertEqual(producer.deletions, 1)

  @parameterized.named_parameters(("major_0", 0), ("major_2", 2),
                                  ("major_255", 255))
  def test_other_major_version_is_refused_and_released_at_once(
      self, major: int) -> None:
    producer = _HostileProducer(major=major)
    with self.assertRaisesRegex(BufferError, f"DLPack {major}.0"):
      dlpack_capsule.as_legacy_capsule(producer.capsule)
    self.assertEqual(producer.deletions, 1)

  def test_null_deleter_is_never_called(self) -> None:
    producer = _HostileProducer(with_deleter=False)
    legacy = dlpack_capsule.as_legacy_capsule(producer.capsule)
    imported = np.from_dlpack(_CapsuleOnce(legacy))
    np.testing.assert_array_equal(imported, np.arange(8.0))
    del legacy, imported
    gc.collect()  # Calling NULL would crash the process.

  @parameterized.named_parameters(("imported", True),
                                  ("never_imported", False))
  def test_null_deleter_structure_is_not_read_after_conversion(
      self, consume: bool) -> None:
    producer = _HostileProducer(with_deleter=False)
    legacy = dlpack_capsule.as_legacy_capsule(producer.capsule)
    late_calls = producer.free_structure()
    if consume:
      imported = np.from_dlpack(_CapsuleOnce(legacy))
      np.testing.assert_array_equal(imported, np.arange(8.0))
      del imported
    del legacy
    gc.collect()
    self.assertEqual(late_calls, [])

  def test_a_capsule_handed_out_twice_is_converted_once(self) -> None:
    producer = _HostileProducer()
    first = dlpack_capsule.as_legacy_capsule(producer.capsule)
    second = dlpack_capsule.as_legacy_capsule(producer.capsule)
    self.assertEqual(_get_name(first), b"dltensor")
    self.assertIs(second, producer.capsule)
    self.assertEqual(_get_name(second), b"used_dltensor_versioned")
    del first
    gc.collect()
    self.assertEqual(producer.deletions, 1)

  def test_threads_racing_for_one_capsule_convert_it_once(self) -> None:
    for _ in range(20):
      producer = _HostileProducer()
      start = threading.Barrier(8)
      results: list[Any] = []

      def convert(producer: _HostileProducer = producer,
                  start: threading.Barrier = start,
                  results: list[Any] = results) -> None:
        start.wait()
        results.append(dlpack_capsule.as_legacy_capsule(producer.capsule))

      threads = [threading.Thread(target=convert) for _ in range(8)]
      for thread in threads:
        thread.start()
      for thread in threads:
        thread.join()
      names = sorted(_get_name(result) for result in results)
      self.assertEqual(names, [b"dltensor"] + [b"used_dltensor_versioned"] * 7)
      results.clear()
      gc.collect()
      self.assertEqual(producer.deletions, 1)

  @hypothesis.settings(max_examples=300, deadline=None)
  @hypothesis.given(
      major=st.one_of(st.just(1), st.integers(0, 2**32 - 1)),
      minor=st.integers(0, 2**32 - 1),
      flags=st.integers(0, 2**64 - 1), with_deleter=st.booleans(),
      consume=st.booleans())
  def test_fuzzed_headers_keep_the_release_contract(
      self, major: int, minor: int, flags: int, with_deleter: bool,
      consume: bool) -> None:
    producer = _HostileProducer(major, minor, flags, with_deleter)
    self.assertEqual(dlpack_capsule.versioned_flags(producer.capsule), flags)
    try:
      legacy = dlpack_capsule.as_legacy_capsule(producer.capsule)
    except BufferError:
      self.assertNotEqual(major, 1)
      self.assertEqual(producer.deletions, int(with_deleter))
      return
    self.assertEqual(major, 1)
    self.assertEqual(dlpack_capsule.versioned_flags(producer.capsule), 0)
    self.assertEqual(dlpack_capsule.versioned_flags(legacy), 0)
    if consume:
      self._import_then_release(producer, legacy)
    del legacy
    gc.collect()
    self.assertEqual(producer.deletions, int(with_deleter))


class AsVersionedCapsuleTest(parameterized.TestCase):
  """A 0.x export wrapped as 1.0: flagged, shared, released once."""

  @parameterized.named_parameters(
      ("read_only", 1, False), ("is_copied", 2, True))
  def test_numpy_reads_the_flags_and_shares_the_tensor(
      self, flags: int, writable: bool) -> None:
    source = np.arange(4.0)
    versioned = dlpack_capsule.as_versioned_capsule(
        source.__dlpack__(), flags)
    header = _header(versioned)
    self.assertEqual((header.major, header.minor, header.flags),
                     (1, 0, flags))
    self.assertEqual(dlpack_capsule.versioned_flags(versioned), flags)
    imported = np.from_dlpack(_CapsuleOnce(versioned))
    self.assertEqual(imported.flags.writeable, writable)
    source[0] = 7.0
    self.assertEqual(imported[0], 7.0)

  def test_the_wrapped_capsule_is_released_with_the_new_one(self) -> None:
    source = np.arange(4.0)
    view = source.view()
    alive = weakref.ref(view)
    versioned = dlpack_capsule.as_versioned_capsule(view.__dlpack__(), 1)
    del view
    imported = np.from_dlpack(_CapsuleOnce(versioned))
    del versioned
    gc.collect()
    self.assertIsNotNone(alive())
    del imported
    gc.collect()
    self.assertIsNone(alive())

  def test_unconsumed_result_releases_the_wrapped_capsule(self) -> None:
    view = np.arange(4.0).view()
    alive = weakref.ref(view)
    versioned = dlpack_capsule.as_versioned_capsule(view.__dlpack__(), 1)
    del view, versioned
    gc.collect()
    self.assertIsNone(alive())

  def test_refuses_a_1x_capsule(self) -> None:
    with self.assertRaises(ValueError):
      dlpack_capsule.as_versioned_capsule(
          np.arange(4.0).__dlpack__(max_version=(1, 0)), 1)


class _CapsuleOnce:
  """Hands NumPy's from_dlpack one capsule made beforehand."""

  def __init__(self, capsule: Any):
    self.capsule = capsule

  def __dlpack__(self, **kwargs: Any) -> Any:
    del kwargs
    capsule, self.capsule = self.capsule, None
    return capsule

  def __dlpack_device__(self) -> tuple[int, int]:
    return (1, 0)


if __name__ == "__main__":
  absltest.main()
