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

"""Tests for to_dlpack, the export behind jax.Array.__dlpack__, on the CPU.

Each class is a ``CpuDefaultTestCase``: what it exports is in CPU memory,
whatever JAX's default device is.
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

import ctypes  # pylint: disable=g-import-not-at-top
import math
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
from jax_patch._src import dlpack_export
from jax_patch.testing import conformance
from tests import memory
from tests import producers


def _as_numpy(capsule: Any) -> np.ndarray[Any, Any]:
  return np.from_dlpack(conformance.PreparedCapsule(capsule))


class ToDLPackTest(cpu_devices.CpuDefaultTestCase):

  def test_copy_true_exports_an_independent_buffer(self) -> None:
    x = jnp.arange(4.0)
    exported = _as_numpy(dlpack.to_dlpack(x, copy=True))
    # x is immutable, so its buffer's address stands in for a write.
    self.assertNotEqual(exported.ctypes.data, x.unsafe_buffer_pointer())
    np.testing.assert_array_equal(exported, np.arange(4.0))

  def test_copy_none_exports_the_arrays_own_buffer(self) -> None:
    x = jnp.arange(4.0)
    exported = _as_numpy(dlpack.to_dlpack(x))
    self.assertEqual(exported.ctypes.data, x.unsafe_buffer_pointer())

  def test_cpu_dl_device_keeps_an_array_on_another_cpu_device(self) -> None:
    x = jax.device_put(jnp.arange(4.0), cpu_devices.require(2)[1])
    exported = _as_numpy(dlpack.to_dlpack(x, dl_device=(1, 0), copy=False))
    self.assertEqual(exported.ctypes.data, x.unsafe_buffer_pointer())

  def test_dl_device_of_a_missing_platform_raises_buffer_error(self) -> None:
    with self.assertRaisesRegex(BufferError, "no backend"):
      dlpack.to_dlpack(jnp.arange(4.0), dl_device=(2, 0))

  def test_unsupported_dl_device_type_raises_buffer_error(self) -> None:
    with self.assertRaises(BufferError):
      dlpack.to_dlpack(jnp.arange(4.0), dl_device=(4, 0))

  def test_non_integer_stream_raises_type_error_not_buffer_error(
      self) -> None:
    for stream in (object(), "1", 1.5):
      with self.subTest(stream=stream):
        with self.assertRaises(TypeError) as caught:
          dlpack.to_dlpack(jnp.arange(4.0), stream=stream)
        self.assertNotIsInstance(caught.exception, BufferError)

  def test_numpy_integer_stream_is_an_integer(self) -> None:
    capsule = dlpack.to_dlpack(jnp.arange(4.0), stream=np.int64(-1))
    np.testing.assert_array_equal(_as_numpy(capsule), np.arange(4.0))

  def test_installed_dunder_dlpack_raises_type_error_for_object_stream(
      self) -> None:
    x: Any = jnp.arange(4.0)
    with jax_patch.patched():
      with self.assertRaises(TypeError):
        x.__dlpack__(stream=object())

  def test_sharded_array_raises_buffer_error(self) -> None:
    devices = cpu_devices.require(2)
    sharding = jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array(devices), ("x",)),
        jax.sharding.PartitionSpec("x"))
    with self.assertRaisesRegex(BufferError, "single-device"):
      dlpack.to_dlpack(jax.device_put(jnp.arange(4.0), sharding))

  def test_non_array_raises_type_error(self) -> None:
    with self.assertRaises(TypeError):
      dlpack.to_dlpack(np.arange(4.0))  # type: ignore[arg-type]

  def test_bad_copy_raises_type_error_naming_to_dlpack(self) -> None:
    with self.assertRaisesRegex(TypeError, "to_dlpack"):
      dlpack.to_dlpack(jnp.arange(4.0), copy="yes")  # type: ignore[arg-type]

  @producers.requires_torch
  def test_round_trip_through_numpy_and_torch_keeps_values(self) -> None:
    from torch.utils import dlpack as torch_dlpack  # pylint: disable=g-import-not-at-top
    # Any: jax/_src/basearray.pyi declares __dlpack__ without keywords.
    x: Any = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)
    with jax_patch.patched():
      back = jax_patch.from_dlpack(torch_dlpack.from_dlpack(np.from_dlpack(x)))
    np.testing.assert_array_equal(np.asarray(back), np.asarray(x))


def _uncopied_export_version(max_version: tuple[int, int]) -> tuple[int, int]:
  """The 1.x version an uncopied float32 export from ``cpu:0`` carries.

  jaxlib 0.12 on exports it, stamped with its own version whatever 1.x minor
  was asked for (the standard allows any); before, NumPy exports its view of
  the buffer, stamped with NumPy's version.
  """
  if dlpack_compat.JAXLIB_DLPACK_VERSION is not None:
    return dlpack_compat.JAXLIB_DLPACK_VERSION
  numpy_array: Any = np.zeros(1, np.float32)  # pytype's NumPy lacks it.
  return dlpack_capsule.inspect(
      numpy_array.__dlpack__(max_version=max_version)).version


def _write_as_a_legacy_consumer_may(info: dlpack_capsule.TensorInfo) -> None:
  """Writes -1 over a float32 tensor, as a 0.x capsule lets its consumer."""
  ctypes.memmove(info.address, np.full(info.shape, -1, np.float32).ctypes.data,
                 math.prod(info.shape) * 4)


class LegacyMaxVersionTest(cpu_devices.CpuDefaultTestCase):
  """A max_version of major 0 asks for a 0.x capsule, which has no flags."""

  @parameterized.parameters((0, 0), (0, 5), (0, 8))
  def test_gets_a_legacy_capsule_whose_writes_miss_the_jax_buffer(
      self, major: int, minor: int) -> None:
    x = jnp.arange(4.0, dtype=jnp.float32)
    capsule = dlpack.to_dlpack(x, max_version=(major, minor))
    info = dlpack_capsule.inspect(capsule)
    self.assertFalse(info.versioned)
    _write_as_a_legacy_consumer_may(info)
    np.testing.assert_array_equal(np.asarray(x), np.arange(4.0))

  def test_copy_false_raises_copy_required_error(self) -> None:
    with self.assertRaisesRegex(jax_patch.CopyRequiredError,
                                "Specified max_version=.* which requires a "
                                "copy"):
      dlpack.to_dlpack(jnp.arange(4.0), max_version=(0, 8), copy=False)

  def test_from_another_device_is_one_copy_on_the_target(self) -> None:
    x = jax.device_put(jnp.arange(4.0, dtype=jnp.float32),
                       cpu_devices.require(2)[1])
    capsule = dlpack.to_dlpack(x, max_version=(0, 8), dl_device=(1, 0))
    _write_as_a_legacy_consumer_may(dlpack_capsule.inspect(capsule))
    np.testing.assert_array_equal(np.asarray(x), np.arange(4.0))

  def test_without_max_version_still_aliases_as_upstream_does(self) -> None:
    x = jnp.arange(4.0)
    info = dlpack_capsule.inspect(dlpack.to_dlpack(x))
    self.assertFalse(info.versioned)
    self.assertEqual(info.address, x.unsafe_buffer_pointer())


class VersionedExportTest(cpu_devices.CpuDefaultTestCase):

  def test_max_version_1_0_exports_a_read_only_versioned_capsule(self) -> None:
    x = jnp.arange(4.0)
    info = dlpack_capsule.inspect(dlpack.to_dlpack(x, max_version=(1, 0)))
    self.assertTrue(info.versioned)
    self.assertEqual(info.version, _uncopied_export_version((1, 0)))
    self.assertTrue(info.read_only)
    self.assertFalse(info.is_copied)
    self.assertEqual(info.address, x.unsafe_buffer_pointer())

  def test_newer_max_version_gets_the_newest_known_minor(self) -> None:
    info = dlpack_capsule.inspect(
        dlpack.to_dlpack(jnp.arange(4.0), max_version=(1, 7)))
    self.assertEqual(info.version, _uncopied_export_version((1, 7)))

  def test_copy_carries_the_newest_minor_the_patch_reads(self) -> None:
    info = dlpack_capsule.inspect(
        dlpack.to_dlpack(jnp.arange(4.0), max_version=(1, 7), copy=True))
    self.assertEqual(info.version, dlpack_capsule.MAX_VERSION)

  def test_no_max_version_exports_a_legacy_capsule(self) -> None:
    for max_version in (None, (0, 8)):
      info = dlpack_capsule.inspect(
          dlpack.to_dlpack(jnp.arange(4.0), max_version=max_version))
      self.assertFalse(info.versioned)

  def test_copy_true_sets_is_copied_and_hands_over_a_writable_copy(
      self) -> None:
    x = jnp.arange(4.0)
    capsule = dlpack.to_dlpack(x, max_version=(1, 0), copy=True)
    info = dlpack_capsule.inspect(capsule)
    self.assertTrue(info.is_copied)
    self.assertFalse(info.read_only)
    exported = _as_numpy(capsule)
    exported[0] = 99.0
    self.assertEqual(float(x[0]), 0.0)

  def test_numpy_honours_read_only(self) -> None:
    exported = _as_numpy(dlpack.to_dlpack(jnp.arange(4.0), max_version=(1, 0)))
    with self.assertRaises(ValueError):
      exported[0] = 1.0

  # A copy's capsule is the patch's on every jaxlib (jaxlib 0.12 would mark
  # it READ_ONLY); uncopied ones are jaxlib's own from 0.12.

  def _held_then_left(self, export: Any) -> tuple[int, int]:
    """Bytes on Python's heap while 1,000 exports live, and after.

    Each export holds at least a 1.x structure (80 bytes) and jaxlib's
    capsule; caches warm up first, so that what is left is what leaked.
    """
    for _ in range(10):
      export()
    with memory.python_heap() as growth:
      exports = [export() for _ in range(1000)]
      held = growth()
      del exports
      return held, growth()

  def test_consumer_releasing_the_capsule_releases_the_buffer(self) -> None:
    x = jnp.arange(4.0)
    held, left = self._held_then_left(lambda: _as_numpy(
        dlpack.to_dlpack(x, max_version=(1, 0), copy=True)))
    self.assertGreater(held, 1000 * 80)
    self.assertLess(left, held // 8)

  def test_unconsumed_capsule_releases_the_buffer(self) -> None:
    x = jnp.arange(4.0)
    held, left = self._held_then_left(
        lambda: dlpack.to_dlpack(x, max_version=(1, 0), copy=True))
    self.assertGreater(held, 1000 * 80)
    self.assertLess(left, held // 8)

  def test_stream_other_than_none_on_cpu_raises_buffer_error(self) -> None:
    with self.assertRaisesRegex(BufferError, "stream"):
      dlpack.to_dlpack(jnp.arange(4.0), stream=1)

  def test_stream_minus_one_on_cpu_is_accepted(self) -> None:
    dlpack.to_dlpack(jnp.arange(4.0), stream=-1)


class JaxlibExportRouteTest(cpu_devices.CpuDefaultTestCase):
  """From jaxlib 0.12, the commonest request goes straight to jaxlib."""

  def setUp(self) -> None:
    super().setUp()
    if not dlpack_compat.JAXLIB_EXPORTS_VERSIONED_CAPSULES:
      self.skipTest("jaxlib before 0.12 exports only 0.x capsules")

  @parameterized.named_parameters(
      ("cpu0", 0, {}), ("cpu1", 1, {}),
      ("host_dl_device", 0, dict(dl_device=(1, 0))),
      ("no_sync_stream", 0, dict(stream=-1)), ("copy_false", 0,
                                               dict(copy=False)))
  def test_skips_to_dlpack_and_equals_its_export(
      self, index: int, kwargs: dict[str, Any]) -> None:
    x = jax.device_put(jnp.arange(8.0), cpu_devices.require(index + 1)[index])
    with mock.patch.object(dlpack_export, "to_dlpack",
                           wraps=dlpack_export.to_dlpack) as to_dlpack:
      fast = dlpack_capsule.inspect(
          dlpack.array_dlpack(x, max_version=(1, 0), **kwargs))
    self.assertEqual(to_dlpack.call_count, 0)
    general = dlpack_capsule.inspect(
        dlpack.to_dlpack(x, max_version=(1, 0), **kwargs))
    self.assertEqual(fast, general)
    self.assertEqual(fast.address, x.unsafe_buffer_pointer())
    self.assertTrue(fast.read_only)

  def test_copy_or_an_old_consumer_goes_to_to_dlpack(self) -> None:
    x = jnp.arange(8.0)
    for kwargs in (dict(max_version=(1, 0), copy=True),
                   dict(max_version=(0, 8)), {}):
      with mock.patch.object(dlpack_export, "to_dlpack",
                             wraps=dlpack_export.to_dlpack) as to_dlpack:
        dlpack.array_dlpack(x, **kwargs)
      self.assertEqual(to_dlpack.call_count, 1, kwargs)


class NumpyExportTest(cpu_devices.CpuDefaultTestCase):
  """Before jaxlib 0.12, NumPy exports its view of a ``cpu:0`` buffer."""

  def setUp(self) -> None:
    super().setUp()
    if dlpack_compat.JAXLIB_EXPORTS_VERSIONED_CAPSULES:
      self.skipTest("jaxlib 0.12 on exports 1.x capsules itself")

  def _export(self, x: Any) -> tuple[dlpack_capsule.TensorInfo, int]:
    """A 1.0 export of ``x``, and how many tensors of the patch's it made.

    The general path converts jaxlib's 0.x capsule into one (two for float8
    before jaxlib 0.5.3), alive until the capsule is consumed or dies;
    NumPy's capsule is NumPy's alone.
    """
    before = dlpack_capsule.structures_made
    capsule = dlpack.to_dlpack(x, max_version=(1, 0))
    made = dlpack_capsule.structures_made - before
    return dlpack_capsule.inspect(capsule), made

  def _export_general(self, x: Any) -> dlpack_capsule.TensorInfo:
    with mock.patch.object(dlpack_export, "_export_through_numpy",
                           return_value=None):
      info, made = self._export(x)
    self.assertGreaterEqual(made, 1)
    return info

  @parameterized.named_parameters(
      ("float32", jnp.float32, (3, 4)), ("int8", jnp.int8, (16,)),
      ("bool", jnp.bool_, (2, 2, 2)), ("complex64", jnp.complex64, ()),
      ("zero_size", jnp.float32, (0, 3)))
  def test_numpy_export_equals_the_general_paths(self, dtype: Any,
                                                shape: tuple[int, ...]) -> None:
    x = jnp.zeros(shape, dtype)
    fast, made = self._export(x)
    self.assertEqual(made, 0)  # NumPy's capsule.
    general = self._export_general(x)
    for field in ("address", "device", "dtype", "shape", "read_only",
                  "is_copied"):
      self.assertEqual(getattr(fast, field), getattr(general, field), field)
    self.assertTrue(fast.read_only)
    self.assertEqual(fast.address, x.unsafe_buffer_pointer())

  def test_other_cpu_devices_keep_their_device_id(self) -> None:
    # NumPy's capsule would say (kDLCPU, 0): the general path exports these.
    x = jax.device_put(jnp.arange(4.0), cpu_devices.require(2)[1])
    info, made = self._export(x)
    self.assertGreaterEqual(made, 1)
    self.assertEqual(info.device, (dlpack_device.KDL_CPU, 1))

  @parameterized.named_parameters(
      ("numpy_asks_for_1_0", dict(max_version=(1, 0)), 0),
      ("a_legacy_consumer", dict(), 1),
      ("a_copy", dict(max_version=(1, 0), copy=True), 1),
      ("a_stream", dict(max_version=(1, 0), stream=1), 1),
  )
  def test_installed_method_skips_to_dlpack_only_where_numpy_can_export(
      self, kwargs: dict[str, Any], to_dlpack_calls: int) -> None:
    x = jnp.arange(4.0)
    with mock.patch.object(dlpack_export, "to_dlpack",
                           wraps=dlpack_export.to_dlpack) as to_dlpack:
      with jax_patch.patched():
        if kwargs.get("stream") is None:
          x.__dlpack__(**kwargs)
        else:  # stream=1 on the CPU; to_dlpack says so.
          with self.assertRaisesRegex(BufferError, "stream=1 is invalid"):
            x.__dlpack__(**kwargs)
    self.assertEqual(to_dlpack.call_count, to_dlpack_calls)

  @parameterized.named_parameters(
      ("bfloat16", jnp.bfloat16), ("float8", jnp.float8_e4m3fn))
  def test_dtypes_numpy_does_not_export_take_the_general_path(
      self, dtype: Any) -> None:
    info, made = self._export(jnp.zeros(4, dtype))
    self.assertGreaterEqual(made, 1)
    self.assertEqual(info.dtype, np.dtype(dtype))


class DLPackDeviceTest(cpu_devices.CpuDefaultTestCase):

  def test_reports_the_cpu_device_it_is_on(self) -> None:
    device = cpu_devices.require(2)[1]
    x = jax.device_put(jnp.arange(4.0), device)
    self.assertEqual(dlpack_device.dlpack_device_of_array(x),
                     (dlpack.DLDeviceType.kDLCPU, device.local_hardware_id))

  def test_jax_to_jax_round_trip_through_dlpack_keeps_the_device(
      self) -> None:
    device = cpu_devices.require(3)[2]
    x = jax.device_put(jnp.arange(4.0), device)
    with jax_patch.patched():
      back = jax_patch.from_dlpack(conformance.DLPackOnly(x))
    self.assertEqual(back.devices(), {device})

  def test_sharded_array_raises_buffer_error(self) -> None:
    sharding = jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array(cpu_devices.require(2)), ("x",)),
        jax.sharding.PartitionSpec("x"))
    with self.assertRaises(BufferError):
      dlpack_device.dlpack_device_of_array(
          jax.device_put(jnp.arange(4.0), sharding))


def _exports(x: Any) -> dict[str, Any]:
  """Every export entry point, each called with ``**kwargs``."""
  def dunder(**kwargs: Any) -> Any:
    with jax_patch.patched():
      return x.__dlpack__(**kwargs)
  return {"to_dlpack": lambda **kwargs: dlpack.to_dlpack(x, **kwargs),
          "dunder": dunder}


class MaxVersionNegotiationTest(cpu_devices.CpuDefaultTestCase):
  """An export is stamped with a version the consumer asked for.

  A consumer's ``max_version`` caps the major version, it does not set it:
  a 1.x structure is never labelled 2.0, which a 2.x consumer would then
  misread (NumPy refuses it). Minor versions of one major share the ABI, so
  consumers check the major only: jaxlib 0.12's own alias carries jaxlib's
  version (1.3, whatever 1.x was asked), and a capsule the patch stamps
  itself (every copy, and every export before jaxlib 0.12) carries the
  older of the request and the newest it writes. Holds in either x64 mode.
  """

  @parameterized.product(
      entry=["to_dlpack", "dunder"],
      max_version=[(1, 0), (1, 1), (1, 5), (2, 0), (3, 7)],
      copy=[None, True])
  def test_stamps_no_version_newer_than_it_writes_or_was_asked(
      self, entry: str, max_version: tuple[int, int],
      copy: bool | None) -> None:
    x = jnp.arange(4.0)
    capsule = _exports(x)[entry](max_version=max_version, copy=copy)
    version = dlpack_capsule.inspect(capsule).version
    self.assertEqual(version[0], 1)
    if copy or not dlpack_compat.JAXLIB_EXPORTS_VERSIONED_CAPSULES:
      self.assertLessEqual(version,
                           min(max_version, dlpack_capsule.MAX_VERSION))
    exported = _as_numpy(capsule)
    np.testing.assert_array_equal(exported, np.asarray(x))

  @parameterized.parameters(None, True)
  def test_numpy_reads_an_export_asked_for_with_a_newer_major(
      self, copy: bool | None) -> None:
    x: Any = jnp.arange(4.0)

    class NewerConsumerAsks:
      def __dlpack_device__(self) -> tuple[int, int]:
        device: tuple[int, int] = x.__dlpack_device__()
        return device

      def __dlpack__(self, **kwargs: Any) -> Any:
        kwargs.update(max_version=(2, 0), copy=copy)
        return dlpack.array_dlpack(x, **kwargs)

    np.testing.assert_array_equal(np.from_dlpack(NewerConsumerAsks()),
                                  np.asarray(x))


class CpuStreamTest(cpu_devices.CpuDefaultTestCase):
  """On the CPU, ``stream`` is ``None``: host memory has no streams.

  Any other integer but -1 (no synchronisation, which host memory never
  needs) is a ``BufferError`` from every entry point and every
  ``max_version``, before jaxlib sees it (its own error is not the
  standard's). Holds in either x64 mode.
  """

  @parameterized.product(
      entry=["to_dlpack", "dunder"], stream=[0, -2, 1, 2, 3],
      max_version=[None, (0, 8), (1, 0), (1, 1)])
  def test_an_integer_stream_raises_buffer_error(
      self, entry: str, stream: int,
      max_version: tuple[int, int] | None) -> None:
    export = _exports(jnp.arange(4.0))[entry]
    with self.assertRaisesRegex(BufferError, f"stream={stream} is invalid"):
      export(stream=stream, max_version=max_version)

  @parameterized.product(entry=["to_dlpack", "dunder"], stream=[None, -1])
  def test_stream_none_or_no_synchronisation_exports(
      self, entry: str, stream: int | None) -> None:
    x = jnp.arange(4.0)
    capsule = _exports(x)[entry](stream=stream)
    np.testing.assert_array_equal(_as_numpy(capsule), np.asarray(x))


class OneDeviceNamedShardingExportTest(cpu_devices.CpuDefaultTestCase):
  """An array whose sharding is a one-device ``NamedSharding`` exports.

  ``jax.device_put`` onto a one-device mesh gives such an array; it is on
  one device, as a ``SingleDeviceSharding`` array is, and exports from it
  (the device it reports is that device). Holds in either x64 mode.
  """

  def _on_one_device_mesh(self, index: int) -> Any:
    device = cpu_devices.require(index + 1)[index]
    sharding = jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array([device]), ("x",)),
        jax.sharding.PartitionSpec())
    x: Any = jax.device_put(jnp.arange(4.0), sharding)
    self.assertIsInstance(x.sharding, jax.sharding.NamedSharding)
    return x

  @parameterized.parameters(0, 1)
  def test_reports_its_device(self, index: int) -> None:
    x = self._on_one_device_mesh(index)
    with jax_patch.patched():
      self.assertEqual(x.__dlpack_device__(),
                       (dlpack.DLDeviceType.kDLCPU, index))

  @parameterized.product(entry=["to_dlpack", "dunder"],
                         max_version=[None, (1, 0)], copy=[None, True],
                         index=[0, 1])
  def test_exports_its_values(self, entry: str,
                              max_version: tuple[int, int] | None,
                              copy: bool | None, index: int) -> None:
    x = self._on_one_device_mesh(index)
    capsule = _exports(x)[entry](max_version=max_version, copy=copy)
    np.testing.assert_array_equal(_as_numpy(capsule), np.asarray(x))

  @parameterized.parameters(0, 1)
  def test_numpy_and_jax_import_it(self, index: int) -> None:
    x = self._on_one_device_mesh(index)
    with jax_patch.patched():
      np.testing.assert_array_equal(np.from_dlpack(x), np.asarray(x))
      back = jax_patch.from_dlpack(conformance.DLPackOnly(x))
    self.assertEqual(back.devices(), x.devices())


if __name__ == "__main__":
  absltest.main()
