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

"""Import tests beyond the conformance cases: memory, object counts, peers."""

import os

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

import gc  # pylint: disable=g-import-not-at-top
import sys
import tempfile
import textwrap
import warnings
from typing import Any
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

import jax_patch
from jax_patch._src import dlpack
from jax_patch._src import dlpack_capsule
from jax_patch._src import dlpack_compat
from jax_patch._src import dlpack_device
from jax_patch._src import dlpack_plan
from jax_patch.testing import conformance
from tests import fresh_process
from tests import memory
from tests import producers




class _CapsuleNameRecorder:
  """Wraps a real producer and records the name of each capsule it returns."""

  def __init__(self, array: Any):
    self.array = array
    self.names: list[bytes | None] = []

  def __dlpack_device__(self) -> Any:
    return self.array.__dlpack_device__()

  def __dlpack__(self, **kwargs: Any) -> Any:
    capsule = self.array.__dlpack__(**kwargs)
    self.names.append(dlpack_capsule.capsule_name(capsule))
    return capsule


class MemoryMappedImportTest(absltest.TestCase):

  def test_one_gigabyte_file_imports_without_reading_it(self) -> None:
    with tempfile.TemporaryDirectory() as folder:
      path = os.path.join(folder, "checkpoint.npy")
      # open_memmap leaves the file sparse: nothing is written but a header.
      writer = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                         shape=(256, 1024, 1024))
      del writer
      weights = np.load(path, mmap_mode="r")
      with jax_patch.patched():
        jnp.from_dlpack(weights[:1], copy=False)  # First-call set-up.
        before = memory.resident_bytes()
        result = jnp.from_dlpack(weights, copy=False)
        growth = memory.resident_bytes() - before
      self.assertEqual(result.unsafe_buffer_pointer(), weights.ctypes.data)
      self.assertLessEqual(growth, 16 * memory.PAGE)  # not 1 GiB
      del result, weights

  def test_read_only_map_is_never_written_by_jax(self) -> None:
    # Donated to jit, computed with and moved: JAX must never write into a
    # foreign buffer it aliases, and a read-only map would crash if it did.
    with tempfile.TemporaryDirectory() as folder:
      path = os.path.join(folder, "weights.npy")
      np.save(path, np.arange(4096, dtype=np.float32).reshape(64, 64))
      with open(path, "rb") as file:
        saved = file.read()
      weights = np.load(path, mmap_mode="r")
      donating = jax.jit(lambda x: x * 2 + 1, donate_argnums=0)
      cpu = cpu_devices.require(2)
      with warnings.catch_warnings():
        # "Some donated buffers were not usable": the alias is not reused.
        warnings.simplefilter("ignore")
        for _ in range(3):
          imported = dlpack.from_dlpack(weights, copy=False)
          self.assertEqual(imported.unsafe_buffer_pointer(),
                           weights.ctypes.data)
          donating(imported).block_until_ready()
          imported = dlpack.from_dlpack(weights, copy=False)
          jnp.sort(imported[::-1] + 1, axis=0).block_until_ready()
          jax.device_put(imported, cpu[1]).block_until_ready()
          dlpack.from_dlpack(weights, device=cpu[1]).block_until_ready()
      del imported, weights
      with open(path, "rb") as file:
        self.assertEqual(file.read(), saved)


class LiveObjectTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("zero_copy_legacy", lambda: conformance.aligned_array((64,))),
      ("zero_copy_versioned_read_only",
       lambda: np.broadcast_to(conformance.aligned_array((64,)), (64,))),
      ("copy_strided", lambda: conformance.aligned_array((64,))[::2]),
  )
  def test_ten_thousand_imports_leave_no_objects_behind(self,
                                                        make: Any) -> None:
    source = make()
    for _ in range(100):  # Warm caches before counting.
      dlpack.from_dlpack(source)
    gc.collect()
    objects_before = len(gc.get_objects())
    with memory.python_heap() as growth:
      for _ in range(10_000):
        dlpack.from_dlpack(source)
      # A DLPack structure or capsule left behind per import would be
      # 640 KB or more.
      self.assertLess(growth(), 64 << 10)
    self.assertLess(len(gc.get_objects()) - objects_before, 100)


class _NumpySubclass(np.ndarray):
  pass


class NumpyFastPathTest(parameterized.TestCase):
  """A writable NumPy array jaxlib can alias goes straight to jaxlib."""

  def _imports_taken(self, source: Any, **kwargs: Any) -> tuple[Any, int]:
    """Imports ``source``; returns the result and how often take() ran."""
    with mock.patch.object(dlpack_capsule, "take",
                           wraps=dlpack_capsule.take) as take:
      result = dlpack.from_dlpack(source, **kwargs)
    return result, take.call_count

  @parameterized.named_parameters(
      ("copy_none", None), ("copy_false", False))
  def test_aligned_writable_array_skips_take_and_shares(
      self, copy: bool | None) -> None:
    source = conformance.aligned_array((4, 16))
    made = dlpack_capsule.structures_made
    result, taken = self._imports_taken(source, copy=copy)
    self.assertEqual(taken, 0)
    # NumPy's own capsule, as NumPy made it.
    self.assertEqual(dlpack_capsule.structures_made, made)
    source[0, 0] = 42
    self.assertEqual(float(result[0, 0]), 42.0)

  def test_aligned_read_only_array_skips_take_and_shares(self) -> None:
    source = conformance.aligned_array((4, 16))
    read_only = source.view()
    read_only.flags.writeable = False
    made = dlpack_capsule.structures_made
    result, taken = self._imports_taken(read_only, copy=False)
    self.assertEqual(taken, 0)
    # NumPy's READ_ONLY 1.x capsule as it is, or a 0.x structure holding it.
    self.assertEqual(
        dlpack_capsule.structures_made - made,
        0 if dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES else 1)
    source[0, 0] = 42
    self.assertEqual(float(result[0, 0]), 42.0)

  def test_small_unaligned_array_is_copied_by_jaxlib_without_take(self) -> None:
    if not dlpack_compat.JAXLIB_COPIES_UNALIGNED:
      self.skipTest("jaxlib before 0.8.1 cannot be asked to copy")
    source = conformance.aligned_array((4, 16), misalign_bytes=16)
    result, taken = self._imports_taken(source)
    self.assertEqual(taken, 0)
    source[0, 0] = 42
    self.assertEqual(float(result[0, 0]), 0.0)

  @parameterized.named_parameters(
      ("broadcast", lambda a: np.broadcast_to(a, (2,) + a.shape), {}),
      ("strided", lambda a: a[:, ::2], {}),
      ("transposed", lambda a: a.T, {}),
      ("unaligned_large",
       lambda a: np.tile(a, (64, 16)).reshape(-1)[1:], {}),
      ("unaligned_copy_false", lambda a: a.reshape(-1)[1:],
       dict(copy=False)),
      ("copy_true", lambda a: a, dict(copy=True)),
      ("narrowed_by_x64_off", lambda a: a.astype(np.float64), {}),
      ("zero_size", lambda a: a[:0], {}),
      ("subclass", lambda a: a.view(_NumpySubclass), {}),
  )
  def test_what_it_cannot_share_as_is_takes_the_general_path(
      self, view: Any, kwargs: dict[str, Any]) -> None:
    source = view(conformance.aligned_array((4, 16)))
    if source.dtype == np.float64:
      conformance.require_x64(False, "with x64 on float64 is kept, and "
                              "NumPy's own capsule serves as for float32 "
                              "(dlpack_x64_test)")
    if kwargs.get("copy") is False:
      with self.assertRaises(dlpack.CopyRequiredError):
        self._imports_taken(source, **kwargs)
      return
    result, taken = self._imports_taken(source, **kwargs)
    self.assertEqual(taken, 1)
    np.testing.assert_array_equal(np.asarray(result), source)

  @parameterized.product(
      dtype=[np.bool_, np.int8, np.int16, np.int32, np.uint8, np.uint16,
             np.uint32, np.float16, np.float32, np.complex64],
      shape=[(16,), (4, 16), (2, 3, 64), (1, 1, 64)],
      writeable=[True, False])
  def test_results_equal_the_general_paths(self, dtype: Any,
                                           shape: tuple[int, ...],
                                           writeable: bool) -> None:
    source = conformance.aligned_array(shape, dtype)
    view = source.view()
    view.flags.writeable = writeable
    fast = dlpack.from_dlpack(view)
    general = dlpack.from_dlpack(conformance.DLPackOnly(view))
    self.assertEqual(fast.dtype, general.dtype)
    self.assertEqual(fast.shape, general.shape)
    np.testing.assert_array_equal(np.asarray(fast), np.asarray(general))
    source.reshape(-1)[-1] = 0  # Was nonzero: both must share.
    self.assertFalse(fast.reshape(-1)[-1])
    self.assertFalse(general.reshape(-1)[-1])

  def test_after_jax_clears_its_backends_shares_onto_its_new_cpu_device(
      self) -> None:
    # The host device is cached for as long as JAX keeps its backends: one
    # kept past clear_backends would put the result on a client JAX dropped.
    # A fresh process, as clearing drops every live array's client.
    script = textwrap.dedent("""
        import jax
        from jax.extend import backend
        import jax_patch
        from jax_patch.testing import conformance
        source = conformance.aligned_array((16,))
        jax_patch.from_dlpack(source)
        backend.clear_backends()
        result = jax_patch.from_dlpack(source)
        source[0] = 42
        print("value", float(result[0]))
        print("on JAX's CPU device", result.devices() == {jax.devices("cpu")[0]})
        """)
    run = fresh_process.run(script)
    self.assertEqual(run.returncode, 0, run.stderr)
    self.assertIn("value 42.0", run.stdout)
    self.assertIn("on JAX's CPU device True", run.stdout)


def _general_path_for_torch() -> Any:
  """Sends torch tensors past their fast path, to the general one."""
  return mock.patch.object(dlpack, "_negotiate_torch", return_value=None)


def _torch_from(source: np.ndarray[Any, Any]) -> Any:
  """A plain ``torch.Tensor`` sharing ``source``'s (aligned) memory."""
  import torch  # pylint: disable=g-import-not-at-top
  return torch.from_numpy(source)


class TorchFastPathTest(parameterized.TestCase):
  """A contiguous CPU torch tensor goes straight to jaxlib."""

  def _imports_counted(self, source: Any,
                       **kwargs: Any) -> tuple[Any, int, int]:
    """Imports ``source``; returns the result, take() and device calls."""
    import torch  # pylint: disable=g-import-not-at-top
    with mock.patch.object(dlpack_capsule, "take",
                           wraps=dlpack_capsule.take) as take, \
        mock.patch.object(torch.Tensor, "__dlpack_device__", autospec=True,
                          side_effect=torch.Tensor.__dlpack_device__) as asked:
      result = dlpack.from_dlpack(source, **kwargs)
    return result, take.call_count, asked.call_count

  @producers.requires_torch
  @parameterized.named_parameters(
      ("copy_none", None), ("copy_false", False))
  def test_contiguous_tensor_skips_take_and_shares(
      self, copy: bool | None) -> None:
    backing = conformance.aligned_array((4, 16))
    made = dlpack_capsule.structures_made
    result, taken, device_asked = self._imports_counted(
        _torch_from(backing), copy=copy)
    self.assertEqual((taken, device_asked), (0, 0))
    # torch's own capsule, as torch made it: no conversion.
    self.assertEqual(dlpack_capsule.structures_made, made)
    backing[0, 0] = 42
    self.assertEqual(float(result[0, 0]), 42.0)

  @producers.requires_torch
  def test_torch_is_asked_for_the_capsule_this_jaxlib_reads(self) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    source = _torch_from(conformance.aligned_array((64,)))
    asked: list[dict[str, Any]] = []
    original = torch.Tensor.__dlpack__

    def spy(tensor: Any, **kwargs: Any) -> Any:
      asked.append(kwargs)
      return original(tensor, **kwargs)

    with mock.patch.object(torch.Tensor, "__dlpack__", spy):
      dlpack.from_dlpack(source)
      dlpack.from_dlpack(source, copy=False)
    # A host tensor is never copied unless asked: copy=False needs no 1.x
    # request, and a 0.x capsule serves where jaxlib reads only 0.x.
    expected = ({"max_version": dlpack_capsule.MAX_VERSION}
                if dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES else {})
    self.assertEqual(asked, [expected, expected])

  @producers.requires_torch
  def test_small_unaligned_tensor_is_copied_without_take(self) -> None:
    if not dlpack_compat.JAXLIB_COPIES_UNALIGNED:
      self.skipTest("jaxlib before 0.8.1 cannot be asked to copy")
    backing = conformance.aligned_array((64,))
    result, taken, _ = self._imports_counted(_torch_from(backing)[1:])
    self.assertEqual(taken, 0)
    backing[1] = 42
    self.assertEqual(float(result[0]), 1.0)

  @producers.requires_torch
  @parameterized.named_parameters(
      ("contiguous", lambda t: t), ("strided", lambda t: t[:, ::2]),
      ("transposed", lambda t: t.T))
  def test_copy_true_is_independent_of_the_tensor(self, view: Any) -> None:
    source = view(_torch_from(conformance.aligned_array((4, 16))))
    result = dlpack.from_dlpack(source, copy=True)
    source[0, 0] = 99  # torch writes in place, where an alias would see it.
    self.assertEqual(float(np.asarray(result)[0, 0]), 0.0)

  @producers.requires_torch
  @parameterized.named_parameters(
      ("strided", lambda t: t[:, ::2], {}),
      ("transposed", lambda t: t.T, {}),
      ("unaligned_large", lambda t: t.repeat(64, 16).reshape(-1)[1:], {}),
      ("unaligned_copy_false", lambda t: t.reshape(-1)[1:],
       dict(copy=False)),
      ("copy_true", lambda t: t, dict(copy=True)),
      ("narrowed_by_x64_off", lambda t: t.double(), {}),
      ("bfloat16", lambda t: t.bfloat16(), {}),
      ("zero_size", lambda t: t[:0], {}),
      ("parameter", lambda t: __import__("torch").nn.Parameter(
          t, requires_grad=False), {}),
  )
  def test_what_it_cannot_share_as_is_takes_the_general_path(
      self, view: Any, kwargs: dict[str, Any]) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    source = view(_torch_from(conformance.aligned_array((4, 16))))
    if source.dtype == torch.float64:
      conformance.require_x64(False, "with x64 on float64 is kept, and "
                              "torch's own capsule serves as for float32 "
                              "(dlpack_x64_test)")
    if kwargs.get("copy") is False:
      with self.assertRaises(dlpack.CopyRequiredError):
        self._imports_counted(source, **kwargs)
      return
    result, taken, device_asked = self._imports_counted(source, **kwargs)
    self.assertEqual((taken, device_asked), (1, 1))
    np.testing.assert_array_equal(
        np.asarray(result, np.float32), source.float().numpy())

  @producers.requires_torch
  def test_tensor_requiring_grad_is_refused_as_on_the_general_path(
      self) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    source = torch.ones(16, requires_grad=True)
    with self.assertRaisesRegex(BufferError, "require gradient"):
      dlpack.from_dlpack(source)
    with self.assertRaisesRegex(BufferError, "require gradient"):
      dlpack.from_dlpack(conformance.DLPackOnly(source))

  @producers.requires_torch
  @parameterized.product(
      dtype=[np.bool_, np.int8, np.int16, np.int32, np.uint8, np.float16,
             np.float32, np.complex64],
      shape=[(16,), (4, 16), (2, 3, 64), (1, 1, 64)])
  def test_results_equal_the_general_paths(self, dtype: Any,
                                           shape: tuple[int, ...]) -> None:
    backing = conformance.aligned_array(shape, dtype)
    fast = dlpack.from_dlpack(_torch_from(backing))
    general = dlpack.from_dlpack(conformance.DLPackOnly(_torch_from(backing)))
    self.assertEqual(fast.dtype, general.dtype)
    self.assertEqual(fast.shape, general.shape)
    np.testing.assert_array_equal(np.asarray(fast), np.asarray(general))
    backing.reshape(-1)[-1] = 0  # Was nonzero: both must share.
    self.assertFalse(fast.reshape(-1)[-1])
    self.assertFalse(general.reshape(-1)[-1])


class FreshCapsuleTest(parameterized.TestCase):
  """NumPy's and torch's capsules are new per call: none is claimed."""

  def _claims(self, source: Any) -> tuple[Any, int]:
    """Imports ``source``; returns the result and how many claims it made."""
    with mock.patch.object(dlpack_capsule, "_claim",
                           wraps=dlpack_capsule._claim) as claim:
      result = dlpack.from_dlpack(source)
    return result, claim.call_count

  @parameterized.named_parameters(
      ("strided", lambda a: a[:, ::2]),
      ("transposed", lambda a: a.T),
      ("broadcast", lambda a: np.broadcast_to(a, (2,) + a.shape)),
  )
  def test_numpy_general_path_shares_without_a_claim(self, view: Any) -> None:
    source = conformance.aligned_array((4, 16))
    fresh, claims = self._claims(view(source))
    self.assertEqual(claims, 0)
    claimed, claims = self._claims(conformance.DLPackOnly(view(source)))
    self.assertEqual(claims, 1)
    np.testing.assert_array_equal(np.asarray(fresh), np.asarray(claimed))

  @producers.requires_torch
  def test_torch_tensor_is_not_claimed_but_a_subclass_is(self) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    source = torch.arange(64, dtype=torch.float32)
    with _general_path_for_torch():
      result, claims = self._claims(source)
    self.assertEqual(claims, 0)
    source[0] = 42
    self.assertEqual(float(result[0]), 42.0)
    _, claims = self._claims(torch.nn.Parameter(source, requires_grad=False))
    self.assertEqual(claims, 1)

  @producers.requires_torch
  def test_general_path_asks_torch_for_the_capsule_this_jaxlib_reads(
      self) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    source = torch.arange(64, dtype=torch.float32)
    asked: list[dict[str, Any]] = []
    original = torch.Tensor.__dlpack__

    def spy(tensor: Any, **kwargs: Any) -> Any:
      asked.append(kwargs)
      return original(tensor, **kwargs)

    made = dlpack_capsule.structures_made
    with mock.patch.object(torch.Tensor, "__dlpack__", spy), \
        _general_path_for_torch():
      shared = dlpack.from_dlpack(source)
      dlpack.from_dlpack(source, copy=False)
    # Before jaxlib 0.12, a 0.x capsule: torch's 1.x one would say nothing
    # more (no read-only tensors, no copy unless asked), and needs no
    # conversion. copy=False is asked as such, which needs 1.x.
    versioned = dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES
    self.assertEqual("max_version" in asked[0], versioned)
    self.assertIn("max_version", asked[1])
    self.assertEqual(dlpack_capsule.structures_made - made,
                     0 if versioned else 1)
    source[0] = 42
    self.assertEqual(float(shared[0]), 42.0)


class ReleaseTest(parameterized.TestCase):
  """Freeing an import runs no Python: C functions release it."""

  @parameterized.named_parameters(
      ("numpy_writable", lambda: conformance.aligned_array((16,))),
      ("numpy_read_only", lambda: np.broadcast_to(
          conformance.aligned_array((16,)), (16,))),
      ("numpy_strided", lambda: conformance.aligned_array((64,))[::2]),
      ("numpy_unaligned_large",
       lambda: conformance.aligned_array((1 << 16,), misalign_bytes=16)),
      ("numpy_broadcast", lambda: np.broadcast_to(np.float32(1), (4, 16))),
      ("numpy_narrowed_copy", lambda: conformance.aligned_array(
          (16,), np.int64)),
  )
  def test_freeing_an_import_runs_no_python(self, make: Any) -> None:
    source = make()
    if source.dtype == np.int64:
      conformance.require_x64(False, "with x64 on int64 is kept and shared, "
                              "as numpy_writable is")
    result = dlpack.from_dlpack(source)
    del source  # The import alone keeps what it needs.
    self.assertEqual(_python_calls_while(lambda: result.delete()), [])

  @producers.requires_torch
  def test_freeing_a_torch_import_runs_no_python(self) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    result = dlpack.from_dlpack(torch.arange(16, dtype=torch.float32))
    self.assertEqual(_python_calls_while(lambda: result.delete()), [])


def _python_calls_while(act: Any) -> list[str]:
  """The Python functions that run, on this thread, while ``act()`` does."""
  calls: list[str] = []

  def profile(frame: Any, event: str, arg: Any) -> None:
    del arg
    if event == "call":
      calls.append(frame.f_code.co_qualname)

  sys.setprofile(profile)
  try:
    act()
  finally:
    sys.setprofile(None)
  # act itself, and jax.Array.delete, are not the release.
  return [name for name in calls
          if not name.endswith(("<lambda>", "ArrayImpl.delete"))]


class SnapshotTest(parameterized.TestCase):
  """A result that is not the producer's memory never changes after return.

  JAX copies and transfers asynchronously; a copy still reading the source
  when from_dlpack returns would see later writes to it, in part.
  """

  @parameterized.named_parameters(("copy_none", None), ("copy_true", True))
  def test_writes_after_return_reach_a_moved_result_never_or_wholly(
      self, copy: bool | None) -> None:
    other_device = cpu_devices.require(2)[1]
    for _ in range(_SNAPSHOT_TRIES):
      source = conformance.aligned_array((_SNAPSHOT_ELEMENTS,), np.float32)
      source[...] = 1
      result = jax_patch.from_dlpack(source, device=other_device, copy=copy)
      source[...] = 2
      shared = result.unsafe_buffer_pointer() == source.ctypes.data
      self.assertFalse(shared and copy)
      np.testing.assert_array_equal(np.unique(np.asarray(result)),
                                    [2 if shared else 1])


# Large enough that a transfer still running at return is caught at it: an
# unfinished 16 MiB transfer was caught in 3 to 9 of 10 tries.
_SNAPSHOT_ELEMENTS = 1 << 22
_SNAPSHOT_TRIES = 10


class PeerProducerTest(absltest.TestCase):

  @producers.requires_torch
  def test_torch_is_asked_for_and_returns_a_versioned_capsule(self) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    producer = _CapsuleNameRecorder(torch.arange(64, dtype=torch.float32))
    result = dlpack.from_dlpack(producer, copy=False)
    self.assertEqual(producer.names, [dlpack_capsule.VERSIONED_NAME])
    producer.array[0] = 5
    self.assertEqual(float(np.asarray(result)[0]), 5.0)

  def test_numpy_read_only_array_comes_as_a_versioned_capsule(self) -> None:
    source = conformance.aligned_array((8,))
    source.flags.writeable = False
    producer = _CapsuleNameRecorder(source)
    dlpack.from_dlpack(producer, copy=False)
    self.assertEqual(producer.names, [dlpack_capsule.VERSIONED_NAME])


def _gather(producer: producers.CraftedProducer,
            canonical: np.dtype[Any] | None = None) -> Any:
  """Takes the producer's capsule as an import would, and gathers it."""
  capsule, info = dlpack_capsule.take(
      producer.__dlpack__(),
      versioned_ok=dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES)
  return dlpack.gather_on_device(capsule, info, jax.devices("cpu")[0], None,
                                 1, info.dtype if canonical is None
                                 else canonical)


class GatherOnDeviceTest(parameterized.TestCase):
  """The on-device copy of layouts jaxlib cannot alias, shown on the CPU.

  from_dlpack takes it for accelerator tensors (a strided CUDA tensor, say);
  host tensors are copied by NumPy instead, so these tests call it directly.
  On the CPU, jaxlib aliases only a 64-byte-aligned span: each view here
  starts its span at its aligned base.
  """

  @parameterized.named_parameters(
      ("step", lambda base: base[::2, ::3]),
      ("reversed_rows", lambda base: base[::-1, ::2]),
      ("broadcast", lambda base: np.broadcast_to(base[:1], (4, 8))),
      ("transposed", lambda base: base.T),
      ("zero_size", lambda base: base[:0, ::2]),
  )
  def test_gathers_an_independent_row_major_copy(self, view: Any) -> None:
    base = conformance.aligned_array((8, 8))
    source = view(base)
    expected = np.array(source)
    producer = producers.CraftedProducer(source)
    result = _gather(producer)
    base[...] = -1
    np.testing.assert_array_equal(np.asarray(result), expected)
    self.assertEqual(result.dtype, source.dtype)
    gc.collect()
    self.assertEqual(producer.deletes, 1)  # Released once the gather read it.

  def test_casts_to_the_dtype_it_is_given(self) -> None:
    # As from_dlpack gives it float32 for float64 with x64 off; the cast is
    # the gather's, whatever the mode.
    base = conformance.aligned_array((16,), np.float64)
    producer = producers.CraftedProducer(base[::2])  # Owns the tensor.
    result = _gather(producer, np.dtype(np.float32))
    self.assertEqual(result.dtype, np.float32)
    np.testing.assert_array_equal(np.asarray(result), np.arange(0, 16, 2))

  def test_span_jaxlib_refuses_raises_buffer_error_and_releases_once(
      self) -> None:
    # Its span starts 4 bytes past the aligned base: jaxlib's CPU alias
    # refuses it where the binding takes copy=False; older ones copy it.
    source = conformance.aligned_array((8, 8))[::-1, ::-2]
    expected = np.array(source)
    producer = producers.CraftedProducer(source)
    gather = lambda: _gather(producer)
    if dlpack_compat.JAXLIB_COPIES_UNALIGNED:
      with self.assertRaisesRegex(BufferError, "jaxlib cannot import"):
        gather()
    else:
      np.testing.assert_array_equal(np.asarray(gather()), expected)
    gc.collect()
    self.assertEqual(producer.deletes, 1)


def _two_device_sharding(cpu: list[Any], spec: str) -> Any:
  """cpu[0] and cpu[1], each holding all (replicated) or half (sharded)."""
  return jax.sharding.NamedSharding(
      jax.sharding.Mesh(np.array(cpu[:2]), ("x",)),
      jax.sharding.PartitionSpec(*(("x",) if spec == "sharded" else ())))


class CopyArgumentTest(parameterized.TestCase):
  """``copy`` is a bool or ``None``: other values raise, whatever they mean
  to ``bool()``. Holds in either x64 mode."""

  @parameterized.named_parameters(
      ("one", 1), ("zero", 0), ("two", 2), ("minus_one", -1),
      ("float", 1.0), ("string", "yes"), ("empty_string", ""),
      ("empty_tuple", ()), ("list", [True]))
  def test_other_values_raise_type_error_naming_from_dlpack(
      self, copy: Any) -> None:
    for source in (conformance.aligned_array((8,)), jnp.arange(8.0),
                   conformance.DLPackOnly(conformance.aligned_array((8,)))):
      with self.subTest(source=type(source).__name__):
        with self.assertRaisesRegex(TypeError, "from_dlpack: copy must be"):
          dlpack.from_dlpack(source, copy=copy)

  @parameterized.parameters(True, False, None, np.True_, np.False_)
  def test_bools_none_and_numpy_bools_are_accepted(self, copy: Any) -> None:
    source = conformance.aligned_array((8,))
    result = dlpack.from_dlpack(source, copy=copy)
    source[0] = 7  # Shared unless copy is true.
    self.assertEqual(np.asarray(result)[0], 0 if copy else 7)


class JaxArrayInputTest(parameterized.TestCase):
  """A ``jax.Array`` is imported without DLPack, keeping every promise."""

  def test_device_places_it_there(self) -> None:
    cpu = cpu_devices.require(2)
    x = jax.device_put(jnp.arange(4.0, dtype=jnp.float32), cpu[0])
    result = dlpack.from_dlpack(x, device=cpu[1])
    self.assertEqual(result.devices(), {cpu[1]})
    np.testing.assert_array_equal(np.asarray(result), np.arange(4.0))

  def test_copy_false_onto_another_device_raises(self) -> None:
    cpu = cpu_devices.require(2)
    x = jax.device_put(jnp.arange(4.0, dtype=jnp.float32), cpu[0])
    with self.assertRaises(dlpack.CopyRequiredError):
      dlpack.from_dlpack(x, device=cpu[1], copy=False)

  @parameterized.product(target_index=[0, 1], copy=[None, True],
                         spec=["replicated", "sharded"])
  def test_device_in_its_sharding_places_it_there_alone(
      self, target_index: int, copy: bool | None, spec: str) -> None:
    # A device the array is on, among others, is not where it is: the
    # result is on that device only, with every value (a gather where
    # sharded).
    cpu = cpu_devices.require(2)
    x = jax.device_put(jnp.arange(8.0, dtype=jnp.float32),
                       _two_device_sharding(cpu, spec))
    result = dlpack.from_dlpack(x, device=cpu[target_index], copy=copy)
    self.assertEqual(result.devices(), {cpu[target_index]})
    np.testing.assert_array_equal(np.asarray(result), np.arange(8.0))

  @parameterized.product(target_index=[0, 1],
                         spec=["replicated", "sharded"])
  def test_copy_false_onto_one_device_of_its_sharding_raises(
      self, target_index: int, spec: str) -> None:
    cpu = cpu_devices.require(2)
    x = jax.device_put(jnp.arange(8.0, dtype=jnp.float32),
                       _two_device_sharding(cpu, spec))
    with self.assertRaises(dlpack.CopyRequiredError):
      dlpack.from_dlpack(x, device=cpu[target_index], copy=False)

  @parameterized.parameters("replicated", "sharded")
  def test_copy_false_onto_its_own_sharding_returns_it(
      self, spec: str) -> None:
    cpu = cpu_devices.require(2)
    sharding = _two_device_sharding(cpu, spec)
    x = jax.device_put(jnp.arange(8.0, dtype=jnp.float32), sharding)
    self.assertIs(dlpack.from_dlpack(x, device=sharding, copy=False), x)

  @parameterized.named_parameters(
      ("same_device", lambda cpu: cpu[0]),
      ("replicated_over_its_device_and_another", lambda cpu: (
          jax.sharding.NamedSharding(
              jax.sharding.Mesh(np.array(cpu[:2]), ("x",)),
              jax.sharding.PartitionSpec()))),
  )
  def test_copy_true_shares_no_buffer_with_it(self, target: Any) -> None:
    # JAX arrays are immutable: a shared buffer shows only by its address.
    cpu = cpu_devices.require(2)
    x = jax.device_put(jnp.arange(8.0, dtype=jnp.float32), cpu[0])
    result = dlpack.from_dlpack(x, device=target(cpu), copy=True)
    addresses = {shard.data.unsafe_buffer_pointer()
                 for shard in result.addressable_shards}
    self.assertNotIn(x.unsafe_buffer_pointer(), addresses)
    np.testing.assert_array_equal(np.asarray(result), np.arange(8.0))


class _HostCopyingProducer:
  """A producer on a platform this JAX lacks (CUDA) that honours
  ``dl_device`` with a host copy, and ignores ``copy``, as the standard
  lets an older producer do.
  """

  def __init__(self, array: np.ndarray[Any, Any]):
    self.array: Any = array
    self.calls: list[dict[str, Any]] = []

  def __dlpack_device__(self) -> tuple[int, int]:
    return (2, 0)  # kDLCUDA

  def __dlpack__(self, **kwargs: Any) -> Any:
    self.calls.append(kwargs)
    if kwargs.get("dl_device") != (1, 0):
      raise BufferError("this producer's data is on CUDA")
    return self.array.copy().__dlpack__()


class ProducerRequestTest(absltest.TestCase):
  """What the producer is asked for, and what its answer may not break."""

  def test_copy_false_is_asked_of_the_producer(self) -> None:
    producer = conformance.RecordingProducer(conformance.aligned_array((8,)))
    dlpack.from_dlpack(producer, copy=False)
    self.assertEqual(producer.calls[0].get("copy"), False)

  def test_copy_false_from_a_platform_without_backend_raises(self) -> None:
    if _has_cuda_backend():
      self.skipTest("this JAX has a CUDA backend: the producer is not "
                    "foreign here")
    producer = _HostCopyingProducer(conformance.aligned_array((8,)))
    with self.assertRaises(dlpack.CopyRequiredError):
      dlpack.from_dlpack(producer, device=jax.devices("cpu")[0], copy=False)
    self.assertEqual(producer.calls, [])  # Refused before asking.

  def test_a_platform_without_backend_imports_a_host_copy(self) -> None:
    if _has_cuda_backend():
      self.skipTest("this JAX has a CUDA backend: the producer is not "
                    "foreign here")
    source = conformance.aligned_array((8,))
    producer = _HostCopyingProducer(source)
    result = dlpack.from_dlpack(producer, device=jax.devices("cpu")[0])
    np.testing.assert_array_equal(np.asarray(result), source)
    self.assertEqual(producer.calls[0]["dl_device"], (1, 0))


class _PinnedHostProducer(conformance.RecordingProducer):
  """torch's pinned tensors: kDLCUDAHost said, a kDLCPU capsule given."""

  def __dlpack_device__(self) -> tuple[int, int]:
    return (3, 0)  # kDLCUDAHost


class PinnedHostTest(parameterized.TestCase):
  """Pinned host memory whose capsule says kDLCPU imports onto the CPU.

  Shown with a stand-in: kDLCUDAHost is mapped to ``cpu:1`` in place of the
  GPU device a CUDA jaxlib maps it to. On a GPU, tools/device_check.sh runs
  the same with torch's pinned tensors.
  """

  def setUp(self) -> None:
    super().setUp()
    cpu = cpu_devices.require(2)  # cpu:1 stands in for the GPU.
    look_up = dlpack_device.jax_device_for
    self.enter_context(mock.patch.object(
        dlpack_device, "jax_device_for",
        side_effect=lambda dl_device, exporting=False: (
            cpu[1] if dl_device[0] == 3 else look_up(dl_device, exporting))))

  @parameterized.named_parameters(
      ("copy_none", None, lambda base: base),
      ("copy_true", True, lambda base: base),
      ("strided", None, lambda base: base[::2]))
  def test_imports_host_memory_onto_the_cpu(self, copy: bool | None,
                                           view: Any) -> None:
    base = conformance.aligned_array((16,))
    source = view(base)
    expected = np.array(source)
    result = dlpack.from_dlpack(_PinnedHostProducer(source), copy=copy)
    self.assertEqual(result.devices(), {jax.devices("cpu")[0]})
    base[...] = -1  # A copy keeps its values.
    if copy or source is not base:
      np.testing.assert_array_equal(np.asarray(result), expected)

  def test_copy_none_shares_aligned_host_memory(self) -> None:
    source = conformance.aligned_array((16,))
    result = dlpack.from_dlpack(_PinnedHostProducer(source))
    source[0] = 99
    self.assertEqual(np.asarray(result)[0], 99)

  def test_a_device_capsule_under_a_host_report_is_refused(self) -> None:
    producer = producers.CraftedProducer(conformance.aligned_array((4,)),
                                         device_type=2)
    producer.reported_device = (3, 0)
    with self.assertRaisesRegex(BufferError, "DLDeviceType 2"):
      dlpack.from_dlpack(producer)


def _has_cuda_backend() -> bool:
  try:
    return bool(jax.devices("cuda"))
  except RuntimeError:
    return False


def _import_device(source: np.ndarray[Any, Any], copy: bool | None) -> Any:
  """Imports ``source`` through the accelerator path, on the CPU.

  ``_device_route`` takes what ``from_dlpack`` has read of a tensor on a
  device other than the host: a claimed capsule, what it describes, and its
  JAX device; the plan and the route's import follow, as in ``from_dlpack``.
  A CPU capsule and ``cpu:0`` show on the CPU everything it does with
  ``copy`` and the dtype; only the dispatch to it, and the stream a device
  asks the producer for, need an accelerator.
  """
  producer = producers.CraftedProducer(source)
  capsule, info = dlpack_capsule.take(
      producer.__dlpack__(),
      versioned_ok=dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES)
  route, source, obstacle, read_only, producer_copied, held = (
      dlpack._device_route(capsule, info, jax.devices("cpu")[0],
                           dlpack_capsule.KDL_CPU, None,
                           dlpack._canonical_dtype(info.dtype)))
  decision = dlpack_plan.plan(copy, None, source, obstacle, read_only,
                              producer_copied)
  return route(held, source, decision)


class ImportDeviceTest(parameterized.TestCase):
  """The accelerator import's promises, shown on the CPU (see above)."""

  @parameterized.named_parameters(("copy_none", None), ("copy_false", False))
  def test_a_layout_jaxlib_aliases_is_shared(self, copy: bool | None) -> None:
    source = conformance.aligned_array((4, 4))
    result = _import_device(source, copy)
    source[0, 0] = 99
    self.assertEqual(np.asarray(result)[0, 0], 99)

  def test_copy_true_is_independent_of_the_source(self) -> None:
    source = conformance.aligned_array((4, 4))
    result = _import_device(source, True)
    source[0, 0] = 99
    self.assertEqual(np.asarray(result)[0, 0], 0)

  def test_64_bit_input_under_copy_false(self) -> None:
    source = conformance.aligned_array((4,), np.float64)
    if not conformance.x64_enabled():
      # x64 off: float64 becomes float32, a copy copy=False forbids.
      with self.assertRaisesRegex(dlpack.CopyRequiredError, "float64"):
        _import_device(source, False)
      return
    result = _import_device(source, False)  # x64 on: kept, so shared.
    source[0] = 99
    self.assertEqual(np.asarray(result)[0], 99)

  def test_64_bit_input_under_copy_none(self) -> None:
    source = conformance.aligned_array((4,), np.float64)
    result = _import_device(source, None)
    source[0] = 99
    if conformance.x64_enabled():  # Kept as float64, and shared.
      self.assertEqual(result.dtype, np.float64)
      self.assertEqual(np.asarray(result)[0], 99)
    else:  # Cast to float32 on the device: a copy.
      self.assertEqual(result.dtype, np.float32)
      np.testing.assert_array_equal(np.asarray(result), [0, 1, 2, 3])

  @parameterized.named_parameters(("copy_none", None), ("copy_true", True))
  def test_a_layout_jaxlib_cannot_alias_is_gathered(
      self, copy: bool | None) -> None:
    base = conformance.aligned_array((8, 8))
    source = base[:, ::2]  # Strided: no jaxlib aliases it.
    expected = np.array(source)
    result = _import_device(source, copy)
    base[...] = -1
    np.testing.assert_array_equal(np.asarray(result), expected)

  def test_copy_false_refuses_a_layout_jaxlib_cannot_alias(self) -> None:
    source = conformance.aligned_array((8, 8))[:, ::2]
    with self.assertRaises(dlpack.CopyRequiredError):
      _import_device(source, False)


class MisalignedDeviceDataTest(parameterized.TestCase):
  """Device data off XLA's alignment is gathered into aligned memory, its
  span starting on the boundary; ``copy=False`` refuses.

  Shown on the CPU, whose jaxlib aliases host memory only at 64 bytes (as
  XLA's GPU executables read device memory only at 16): the CPU path's
  alignment stands in for the GPU's. Holds in either x64 mode (float32).
  """

  def setUp(self) -> None:
    super().setUp()
    self.enter_context(mock.patch.object(
        dlpack, "_device_alignment",
        lambda dl_device_type: 64 if dl_device_type == 1 else 1))

  @parameterized.named_parameters(
      ("contiguous_at_4_bytes", lambda base: base.ravel()[1:]),
      ("rows_at_32_bytes", lambda base: base[1:]),
      ("strided_at_4_bytes", lambda base: base[:, 1::2]),
      ("transposed_at_4_bytes", lambda base: base[:, 1::2].T),
  )
  def test_is_gathered_into_aligned_memory(self, view: Any) -> None:
    base = conformance.aligned_array((8, 8))
    source = view(base)
    expected = np.array(source)
    for copy in (None, True):
      with self.subTest(copy=copy):
        result = _import_device(source, copy)
        self.assertEqual(result.unsafe_buffer_pointer() % 64, 0)
        base[...] = -1  # The gather has read the source already.
        np.testing.assert_array_equal(np.asarray(result), expected)
        base[...] = conformance.aligned_array((8, 8))

  def test_copy_false_refuses_saying_why(self) -> None:
    source = conformance.aligned_array((8, 8)).ravel()[1:]
    with self.assertRaisesRegex(dlpack.CopyRequiredError,
                                "not a multiple of 64 bytes"):
      _import_device(source, False)

  @parameterized.named_parameters(("copy_none", None), ("copy_false", False))
  def test_aligned_data_is_still_shared(self, copy: bool | None) -> None:
    base = conformance.aligned_array((8, 8))
    source = base[2:]  # 64 bytes in: on the boundary.
    result = _import_device(source, copy)
    base[2, 0] = 99
    self.assertEqual(np.asarray(result)[0, 0], 99)

  def test_a_start_off_the_element_grid_raises_buffer_error(self) -> None:
    raw = conformance.aligned_array((80,), np.uint8)
    # float32 elements 2 bytes past the boundary: no aligned vector of
    # float32 starts before them.
    source = np.ndarray((8,), np.float32, buffer=raw, offset=2)
    with self.assertRaisesRegex(BufferError, "cannot start a 64-byte"):
      _import_device(source, None)

  @parameterized.parameters((2, 4, True), (2, 16, False), (10, 4, True),
                            (1, 4, False), (13, 4, False))
  def test_only_gpu_data_off_16_bytes_is_refused_an_alias(
      self, dl_device_type: int, offset: int, refused: bool) -> None:
    # Any: pytype's NumPy stubs lack __dlpack__.
    array: Any = conformance.aligned_array((8,))
    info = dlpack_capsule.inspect(array.__dlpack__())._replace(
        address=1 << 20 | offset)
    self.enter_context(mock.patch.object(  # The real rule, not setUp's.
        dlpack, "_device_alignment", _REAL_DEVICE_ALIGNMENT))
    why = dlpack._why_xla_cannot_compute_on(info, dl_device_type)  # pylint: disable=protected-access
    self.assertEqual(why is not None, refused, why)


_REAL_DEVICE_ALIGNMENT = dlpack._device_alignment  # pylint: disable=protected-access


class JaxlibRefusalTest(parameterized.TestCase):
  """What follows when jaxlib refuses, or copies, a tensor it should alias.

  No jaxlib does either for the aligned, row-major float32 tensors below:
  jaxlib's import is replaced for its first call (the one that should
  alias), and later calls (a copy's import) reach jaxlib. Either way
  float32, so both x64 modes hold alike.
  """

  def _jaxlib_first(self, first: Any) -> None:
    real = dlpack_compat.import_capsule
    calls = []

    def import_capsule(*args: Any) -> Any:
      calls.append(args)
      return first(*args) if len(calls) == 1 else real(*args)

    self.enter_context(mock.patch.object(dlpack_compat, "import_capsule",
                                         import_capsule))

  def _refuse(self, *args: Any) -> Any:
    del args
    raise dlpack_compat.RuntimeErrorType("UNIMPLEMENTED: refused by a test")

  def _copy(self, capsule: Any, device: Any, *args: Any) -> Any:
    del capsule, args
    return jax.device_put(self.source.copy(), device)

  def setUp(self) -> None:
    super().setUp()
    self.source = conformance.aligned_array((16,))
    self.producer = producers.CraftedProducer(self.source)

  @parameterized.named_parameters(
      ("refuses", "_refuse", "jaxlib cannot alias it"),
      ("copies", "_copy", "jaxlib copied the data it was given"))
  def test_copy_false_raises_saying_what_jaxlib_did(self, jaxlib: str,
                                                    reason: str) -> None:
    self._jaxlib_first(getattr(self, jaxlib))
    with self.assertRaisesRegex(dlpack.CopyRequiredError, reason):
      dlpack.from_dlpack(self.producer, copy=False)

  @parameterized.named_parameters(("refuses", "_refuse"), ("copies", "_copy"))
  def test_copy_none_returns_an_independent_copy(self, jaxlib: str) -> None:
    self._jaxlib_first(getattr(self, jaxlib))
    result = dlpack.from_dlpack(self.producer)
    self.source[0] = 99
    np.testing.assert_array_equal(np.asarray(result), np.arange(16))


class ZeroSizeTest(parameterized.TestCase):
  """Zero-size data has no memory to share: it comes back fresh.

  float32 in either x64 mode.
  """

  @parameterized.named_parameters(
      ("row_major", {}), ("strides_no_layout_has", {"strides": [1, 1]}))
  def test_zero_size_comes_back_fresh_under_copy_false(
      self, overrides: dict[str, Any]) -> None:
    # JAX's own test imports np.empty((3, 0)) views with such strides.
    source = conformance.aligned_array((3, 0))
    result = dlpack.from_dlpack(
        producers.CraftedProducer(source, **overrides), copy=False)
    self.assertEqual(result.shape, (3, 0))
    self.assertEqual(result.dtype, np.float32)


if __name__ == "__main__":
  absltest.main()
