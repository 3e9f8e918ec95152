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

"""Export rules that turn on the device: device types, ids, streams, dtypes.

The rules are docs/behaviour.md's "Devices on export". What a CPU can show
runs here on the CPU devices it names; the map from JAX memory to DLPack
device types and the stream rules are plain functions of plain values, so
every accelerator's row is checked on any machine. Every case holds in
either x64 mode: none turns on a 64-bit type.
"""

from tests import cpu_devices  # pylint: disable=g-import-not-at-top

from collections.abc import Callable  # pylint: disable=g-import-not-at-top
import itertools
from typing import Any
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import ml_dtypes
import numpy as np

import jax_patch
import jax_patch.dlpack
from jax_patch._src import dlpack
from jax_patch._src import dlpack_capsule
from jax_patch._src import dlpack_compat
from jax_patch._src import dlpack_device
from jax_patch._src import dlpack_export

_KDL_CPU = 1


def _export_entry_points(x: jax.Array) -> dict[str, Callable[..., Any]]:
  """Every way a consumer asks ``x`` for a capsule, each taking keywords."""
  def dunder(**kwargs: Any) -> Any:
    with jax_patch.patched():
      return x.__dlpack__(**kwargs)
  return {
      "__dlpack__": dunder,
      "array_dlpack": lambda **kwargs: dlpack.array_dlpack(x, **kwargs),
      "to_dlpack": lambda **kwargs: dlpack.to_dlpack(x, **kwargs),
      "jax_patch.dlpack.to_dlpack":
          lambda **kwargs: jax_patch.dlpack.to_dlpack(x, **kwargs),
  }


def _data_pointer(capsule: Any) -> int:
  """The address a capsule's tensor starts at, read without consuming it."""
  return dlpack_capsule.inspect(capsule).address


class DLDeviceTypeTest(parameterized.TestCase):
  """The one map from JAX memory to DLPack device types, row by row."""

  @parameterized.named_parameters(
      ("cpu", "cpu", "cpu", None, 1),
      ("cpu_unpinned_host", "cpu", "cpu", "unpinned_host", 1),
      ("cuda", "gpu", "cuda 12.8", None, 2),
      ("cuda_device_kind", "gpu", "cuda 12.8", "device", 2),
      ("cuda_pinned_host", "gpu", "cuda 12.8", "pinned_host", 3),
      ("rocm", "gpu", "rocm 6.4", "device", 10),
      ("rocm_pinned_host", "gpu", "rocm 6.4", "pinned_host", 11),
      ("oneapi", "gpu", "oneapi 2025", "device", 14),
      ("tpu_pinned_host", "tpu", "", "pinned_host", 20),
  )
  def test_memory_gets_its_dlpack_device_type(
      self, platform: str, version: str, memory_kind: str | None,
      expected: int) -> None:
    self.assertEqual(
        dlpack_device.dl_device_type(platform, version, memory_kind),
        expected)

  @parameterized.named_parameters(
      ("tpu_device_memory", "tpu", "", "device"),
      ("tpu_default_memory", "tpu", "", None),
      ("tpu_unpinned_host", "tpu", "", "unpinned_host"),
      ("unknown_gpu", "gpu", "metal 1", "device"),
      ("oneapi_pinned_host", "gpu", "oneapi 2025", "pinned_host"),
      ("unknown_platform", "neuron", "", None),
  )
  def test_memory_no_released_dlpack_names_has_none(
      self, platform: str, version: str, memory_kind: str | None) -> None:
    self.assertIsNone(
        dlpack_device.dl_device_type(platform, version, memory_kind))

  def test_message_names_the_device_and_the_route_to_the_host(self) -> None:
    cpu = jax.devices("cpu")[0]
    message = dlpack_device.unnameable_memory_message(
        "to_dlpack", cpu, "device")
    self.assertIn(str(cpu), message)
    self.assertIn("dl_device=(1, 0)", message)
    self.assertIn("np.from_dlpack(x, device='cpu')", message)
    self.assertIn("jax.device_put(x, jax.devices('cpu')[0])", message)


class UnnameableMemoryExportTest(parameterized.TestCase):
  """Memory DLPack cannot name (TPU device memory) is refused by every entry
  point with BufferError, before any copy; jaxlib's errors never escape.

  A CPU has no such memory, so here cpu:1 stands in for a TPU: the map says
  DLPack cannot name its memory, and jaxlib refuses to export it, with the
  error jaxlib gives on a TPU (test doubles for what a CPU cannot show; the
  TPU run shows the rest).
  """

  @parameterized.product(
      entry=["__dlpack__", "array_dlpack", "to_dlpack",
             "jax_patch.dlpack.to_dlpack"],
      kwargs=[{}, {"max_version": (1, 0)}, {"max_version": (0, 8)},
              {"copy": True}, {"copy": False}, {"stream": -1}])
  def test_every_entry_point_raises_buffer_error_naming_the_route(
      self, entry: str, kwargs: dict[str, Any]) -> None:
    x = jax.device_put(np.arange(4.0, dtype=np.float32),
                       cpu_devices.require(2)[1])
    refusal = dlpack_compat.RuntimeErrorType(
        "INVALID_ARGUMENT: Device TPU_0 cannot be used as a DLPack device")
    with mock.patch.object(dlpack_device, "dl_device_type_of",
                           return_value=None), \
        mock.patch.object(dlpack_compat, "export_versioned_capsule",
                          side_effect=refusal), \
        mock.patch.object(dlpack_compat, "export_legacy_capsule",
                          side_effect=refusal):
      with self.assertRaisesRegex(BufferError, r"dl_device=\(1, 0\)"):
        _export_entry_points(x)[entry](**kwargs)

  def test_dlpack_device_raises_buffer_error_naming_the_route(self) -> None:
    x = jax.device_put(np.arange(4.0, dtype=np.float32),
                       cpu_devices.require(2)[1])
    with mock.patch.object(dlpack_device, "host_dl_device",
                           return_value=None), \
        mock.patch.object(dlpack_device, "dl_device_type_of",
                          return_value=None):
      with self.assertRaisesRegex(BufferError, r"dl_device=\(1, 0\)"):
        dlpack_device.dlpack_device_of_array(x)

  def test_jaxlibs_refusal_becomes_buffer_error(self) -> None:
    x = jax.device_put(np.arange(4.0, dtype=np.float32),
                       jax.devices("cpu")[0])
    refusal = dlpack_compat.RuntimeErrorType(
        "UNIMPLEMENTED: Stream extension not implemented in this PJRT plugin")
    with mock.patch.object(dlpack_compat, "export_legacy_capsule",
                           side_effect=refusal):
      with self.assertRaisesRegex(BufferError, "Stream extension") as caught:
        dlpack.to_dlpack(x, max_version=(0, 8))
    self.assertIs(caught.exception.__cause__, refusal)


class HostCopyExportTest(parameterized.TestCase):
  """An accelerator array asked for on the host is handed over as a copy
  only the consumer holds, writable: IS_COPIED in 1.x, plain 0.x.

  The route runs for accelerator memory only; here a CPU array stands in
  for the array it copies, whose cached host value must never be shared.
  """

  @parameterized.product(
      dtype=["float32", "bfloat16"],
      max_version=[None, (0, 8), (1, 0), (1, 1), (2, 0)])
  def test_hands_over_a_private_writable_copy(
      self, dtype: str, max_version: tuple[int, int] | None) -> None:
    x = jax.device_put(np.arange(4.0).astype(dtype), jax.devices("cpu")[0])
    before = np.asarray(x)  # Its cached host value, as on an accelerator.
    capsule = dlpack_export._export_host_copy(x, max_version)  # pylint: disable=protected-access
    info = dlpack_capsule.inspect(capsule)
    self.assertEqual(info.device, (_KDL_CPU, 0))
    self.assertNotEqual(info.address, before.ctypes.data)
    self.assertNotEqual(info.address, x.unsafe_buffer_pointer())
    if max_version is None or max_version[0] < 1:
      self.assertFalse(info.versioned)
    else:
      self.assertTrue(info.versioned)
      self.assertEqual(info.version[0], 1)
      self.assertLessEqual(info.version, max_version)
      self.assertTrue(info.is_copied)
      self.assertFalse(info.read_only)
    if dtype == "float32":
      copied: Any = np.from_dlpack(conformance_capsule(capsule))
      # NumPy reads any 0.x import as read-only: it cannot tell.
      self.assertEqual(copied.flags.writeable, info.versioned)
      if copied.flags.writeable:
        copied[0] = 99
      np.testing.assert_array_equal(np.asarray(x), np.arange(4.0))

  def test_mark_copied_refuses_a_legacy_capsule(self) -> None:
    legacy: Any = np.zeros(2, np.float32)
    with self.assertRaises(ValueError):
      dlpack_capsule.mark_copied(legacy.__dlpack__())


def conformance_capsule(capsule: Any) -> Any:
  """A producer that hands out ``capsule``, for ``np.from_dlpack``."""
  from jax_patch.testing import conformance  # pylint: disable=g-import-not-at-top
  return conformance.PreparedCapsule(capsule)


class ExportStreamTest(parameterized.TestCase):
  """The DLPack Python spec's streams, for each device type's memory."""

  @parameterized.parameters(
      (2, None), (2, -1), (2, 1), (2, 2), (2, 3), (2, 2**47),
      (10, None), (10, -1), (10, 0), (10, 3), (10, 2**47),
      (1, None), (1, -1), (3, None), (3, -1), (20, None), (20, -1),
      (11, -1))
  def test_stream_the_spec_allows_passes(self, dl_type: int,
                                         stream: int | None) -> None:
    dlpack_device.check_export_stream(stream, dl_type, "to_dlpack")

  @parameterized.parameters(
      (2, 0), (2, -2),
      (10, 1), (10, 2), (10, -2),
      (1, 0), (1, 1), (1, 2), (1, 3), (1, -2),
      (3, 0), (3, 1), (3, 3),
      (20, 0), (20, 1), (20, 2), (20, 3), (20, -2))
  def test_stream_the_spec_rules_out_raises_buffer_error(
      self, dl_type: int, stream: int) -> None:
    with self.assertRaisesRegex(BufferError, f"stream={stream} is invalid"):
      dlpack_device.check_export_stream(stream, dl_type, "to_dlpack")


class CpuDeviceIdTest(parameterized.TestCase):
  """The CPU device id rule (docs/behaviour.md): every CPU device shares
  host memory, so ``dl_device=(kDLCPU, n)`` is met by an array on any CPU
  device as it is, whatever ``n``: an alias, never a move, also under
  ``copy=False``; and the array still reports its own id."""

  @parameterized.product(
      entry=["__dlpack__", "array_dlpack", "to_dlpack",
             "jax_patch.dlpack.to_dlpack"],
      source_index=[0, 1], requested_id=[0, 1, 3],
      copy=[None, False], max_version=[None, (1, 0), (1, 1)])
  def test_kdlcpu_with_any_id_exports_an_alias(
      self, entry: str, source_index: int, requested_id: int,
      copy: bool | None, max_version: tuple[int, int] | None) -> None:
    source = cpu_devices.require(2)[source_index]
    x = jax.device_put(np.arange(4.0, dtype=np.float32), source)
    capsule = _export_entry_points(x)[entry](
        dl_device=(_KDL_CPU, requested_id), copy=copy,
        max_version=max_version)
    self.assertEqual(_data_pointer(capsule), x.unsafe_buffer_pointer())
    self.assertEqual(dlpack_device.dlpack_device_of_array(x),
                     (_KDL_CPU, source.id))

  @parameterized.parameters(0, 1)
  def test_numpy_asking_for_the_host_shares(self, source_index: int) -> None:
    # NumPy asks with dl_device=(kDLCPU, 0) for device="cpu", and reads
    # JAX's READ_ONLY alias as a read-only view.
    x: Any = jax.device_put(np.arange(4.0, dtype=np.float32),
                            cpu_devices.require(2)[source_index])
    with jax_patch.patched():
      view = np.from_dlpack(x, device="cpu", copy=False)
    self.assertEqual(view.ctypes.data, x.unsafe_buffer_pointer())
    self.assertFalse(view.flags.writeable)


# Sub-byte and other types DLPack has no code JAX exports for, each with the
# exportable type the message suggests converting to.
_UNEXPORTABLE_WITH_HINT = {
    "int4": "int8", "uint4": "uint8", "int2": "int8", "uint2": "uint8",
    "float6_e2m3fn": "float32", "float6_e3m2fn": "float32",
}


def _unexportable_array(name: str) -> jax.Array:
  if not hasattr(ml_dtypes, name):
    raise absltest.SkipTest(f"ml_dtypes {ml_dtypes.__version__} has no {name}")
  dtype = np.dtype(getattr(ml_dtypes, name))
  if not dlpack_compat.jax_has_dtype(dtype):
    raise absltest.SkipTest(f"JAX {jax.__version__} has no arrays of {name}")
  try:
    made: jax.Array = jax.device_put(np.zeros(4, dtype), jax.devices("cpu")[0])
    return made
  except dlpack_compat.RuntimeErrorType as e:
    raise absltest.SkipTest(
        f"JAX {jax.__version__} cannot make a CPU array of {name}: {e}")


class UnexportableDTypeTest(parameterized.TestCase):
  """The BufferError for a dtype DLPack cannot carry names it and the type to
  convert to, from every entry point and consumer."""

  @parameterized.parameters(itertools.product(
      sorted(_UNEXPORTABLE_WITH_HINT),
      ["__dlpack__", "array_dlpack", "to_dlpack",
       "jax_patch.dlpack.to_dlpack"],
      [None, (0, 8), (1, 0), (1, 1)]))
  def test_message_names_the_dtype_and_the_conversion(
      self, name: str, entry: str,
      max_version: tuple[int, int] | None) -> None:
    x = _unexportable_array(name)
    with self.assertRaisesRegex(
        BufferError,
        rf"(?<!\w){name}(?!\w).*convert it first, say with "
        rf"x\.astype\(jnp\.{_UNEXPORTABLE_WITH_HINT[name]}\)"):
      _export_entry_points(x)[entry](max_version=max_version)

  @parameterized.parameters("int4", "uint4")
  def test_numpy_consumer_sees_the_same_message(self, name: str) -> None:
    # Any: jax/_src/basearray.pyi declares __dlpack__ without keywords.
    x: Any = _unexportable_array(name)
    with jax_patch.patched():
      with self.assertRaisesRegex(BufferError, r"convert it first"):
        np.from_dlpack(x)


if __name__ == "__main__":
  absltest.main()
