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

"""64-bit types in both x64 modes: each test states what holds in the mode.

With ``jax_enable_x64`` off JAX narrows int64, uint64, float64 and
complex128 to their 32-bit types, so importing them is a copy, and
``copy=False`` refuses it. With x64 on JAX keeps them, and the patch shares
them as it shares any other type. Run the suite with ``JAX_ENABLE_X64=1``
for the second mode; the dtypes expected here are written out per mode, not
read back from JAX's own canonicalisation.
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

from typing import Any  # pylint: disable=g-import-not-at-top
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import numpy as np

import jax_patch
from jax_patch._src import dlpack
from jax_patch._src import dlpack_capsule
from jax_patch.testing import conformance
from tests import producers

# Each 64-bit type and the type JAX narrows it to with x64 off.
_NARROWED = {np.int64: np.int32, np.uint64: np.uint32,
             np.float64: np.float32, np.complex128: np.complex64}
_WIDE = [(np.dtype(wide).name, wide) for wide in _NARROWED]


def _x64() -> bool:
  return conformance.x64_enabled()


def _counting_takes() -> Any:
  """Counts the capsules the general path takes (the fast path takes none)."""
  return mock.patch.object(dlpack_capsule, "take", wraps=dlpack_capsule.take)


def _imported_dtype(wide: Any) -> np.dtype[Any]:
  """The dtype a 64-bit input becomes in this run's mode."""
  return np.dtype(wide if _x64() else _NARROWED[wide])


class DTypeConversionTest(parameterized.TestCase):

  @parameterized.named_parameters(_WIDE)
  def test_kept_and_shared_with_x64_on_narrowed_copy_with_it_off(
      self, wide: Any) -> None:
    source = conformance.aligned_array((4, 16), wide)
    before = np.array(source)
    result = jax_patch.from_dlpack(source)
    source[0, 0] = 99  # Before any read of result.
    self.assertEqual(result.dtype, _imported_dtype(wide))
    seen = np.asarray(result)
    if _x64():
      self.assertEqual(seen[0, 0], 99, "with x64 on, copy=None copied")
      np.testing.assert_array_equal(seen, source)
    else:
      np.testing.assert_array_equal(seen, before.astype(_NARROWED[wide]))

  @parameterized.named_parameters(_WIDE)
  def test_copy_false_shares_with_x64_on_and_is_refused_with_it_off(
      self, wide: Any) -> None:
    source = conformance.aligned_array((8,), wide)
    if not _x64():
      with self.assertRaisesRegex(
          jax_patch.CopyRequiredError,
          f"becomes {np.dtype(_NARROWED[wide]).name} with jax_enable_x64 "
          "off"):
        jax_patch.from_dlpack(source, copy=False)
      return
    result = jax_patch.from_dlpack(source, copy=False)
    source[0] = 99
    self.assertEqual(result.dtype, np.dtype(wide))
    self.assertEqual(np.asarray(result)[0], 99)

  @parameterized.named_parameters(_WIDE)
  def test_copy_true_is_independent_in_either_mode(self, wide: Any) -> None:
    source = conformance.aligned_array((8,), wide)
    result = jax_patch.from_dlpack(source, copy=True)
    source[...] = 99
    self.assertEqual(result.dtype, _imported_dtype(wide))
    np.testing.assert_array_equal(np.asarray(result), np.arange(8))

  @parameterized.named_parameters(_WIDE)
  def test_fast_and_general_paths_agree_in_either_mode(
      self, wide: Any) -> None:
    # NumPy's own capsule (the fast path) and the capsule read field by
    # field (the general path): the same dtype, and both shared or both
    # copied as the mode says.
    source = conformance.aligned_array((4, 16), wide)
    with _counting_takes() as take:
      fast = dlpack.from_dlpack(source)
    # With x64 off the narrowing copy leaves the fast path.
    self.assertEqual(take.call_count, 0 if _x64() else 1)
    general = dlpack.from_dlpack(conformance.DLPackOnly(source))
    source[0, 0] = 99
    for result in (fast, general):
      self.assertEqual(result.dtype, _imported_dtype(wide))
      self.assertEqual(np.asarray(result)[0, 0], 99 if _x64() else 0)

  @producers.requires_torch
  @parameterized.named_parameters(("int64", "int64"), ("float64", "float64"))
  def test_torch_tensor_kept_and_shared_with_x64_on_copied_with_it_off(
      self, name: str) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    wide = np.dtype(name).type
    backing = conformance.aligned_array((64,), wide)
    with _counting_takes() as take:
      result = jax_patch.from_dlpack(torch.from_numpy(backing))
    # torch's own capsule goes to jaxlib as it is only where nothing narrows.
    self.assertEqual(take.call_count, 0 if _x64() else 1)
    backing[0] = 99
    self.assertEqual(result.dtype, _imported_dtype(wide))
    self.assertEqual(np.asarray(result)[0], 99 if _x64() else 0)


class PlacementTest(parameterized.TestCase):
  """``device=`` moves 64-bit input as the mode says it is held."""

  def _targets(self) -> dict[str, Any]:
    devices = cpu_devices.require(4)
    mesh = Mesh(np.array(devices), ("x",))
    return {
        "device": devices[1],
        "sharding": conformance.single_device_sharding(devices[2]),
        "multi_device_sharding": NamedSharding(
            mesh, PartitionSpec("x")),
    }

  @parameterized.product(
      target=["device", "sharding", "multi_device_sharding"],
      copy=[None, True], wide=list(_NARROWED))
  def test_placed_with_the_dtype_the_mode_holds_and_independent(
      self, target: str, copy: bool | None, wide: Any) -> None:
    place = self._targets()[target]
    source = conformance.aligned_array((8,), wide)
    result = jax_patch.from_dlpack(source, device=place, copy=copy)
    source[...] = 99  # A move is a copy, in either mode.
    self.assertEqual(result.dtype, _imported_dtype(wide))
    expected = (place.device_set if hasattr(place, "device_set")
                else {place})
    self.assertEqual(result.devices(), expected)
    np.testing.assert_array_equal(np.asarray(result), np.arange(8))

  @parameterized.named_parameters(_WIDE)
  def test_copy_false_to_another_device_is_refused_in_either_mode(
      self, wide: Any) -> None:
    with self.assertRaises(jax_patch.CopyRequiredError):
      jax_patch.from_dlpack(conformance.aligned_array((8,), wide),
                            device=cpu_devices.require(2)[1], copy=False)


class ExportTest(cpu_devices.CpuDefaultTestCase):
  """A CPU array made from 64-bit data exports the type JAX holds."""

  @parameterized.named_parameters(_WIDE)
  def test_exports_the_held_dtype_read_only_and_shared(
      self, wide: Any) -> None:
    x: Any = jnp.asarray(np.arange(4).astype(wide))
    self.assertEqual(x.dtype, _imported_dtype(wide))
    with jax_patch.patched():
      info = dlpack_capsule.inspect(x.__dlpack__(max_version=(1, 0)))
      imported = np.from_dlpack(x)
    self.assertEqual(info.dtype, _imported_dtype(wide))
    self.assertTrue(info.read_only)
    self.assertEqual(info.address, x.unsafe_buffer_pointer())
    self.assertEqual(imported.dtype, _imported_dtype(wide))
    self.assertEqual(imported.ctypes.data, x.unsafe_buffer_pointer())

  @parameterized.named_parameters(_WIDE)
  def test_round_trip_keeps_the_held_dtype_and_the_buffer(
      self, wide: Any) -> None:
    x = jnp.asarray(np.arange(4).astype(wide))
    with jax_patch.patched():
      result = jax_patch.from_dlpack(conformance.DLPackOnly(x), copy=False)
    self.assertEqual(result.dtype, _imported_dtype(wide))
    self.assertEqual(result.unsafe_buffer_pointer(),
                     x.unsafe_buffer_pointer())

  @producers.requires_torch
  def test_torch_imports_the_held_dtype(self) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    from torch.utils import dlpack as torch_dlpack  # pylint: disable=g-import-not-at-top
    x = jnp.asarray(np.arange(4.0))
    with jax_patch.patched():
      tensor = torch_dlpack.from_dlpack(x)
    self.assertEqual(tensor.dtype,
                     torch.float64 if _x64() else torch.float32)
    np.testing.assert_array_equal(tensor.numpy(), np.arange(4.0))


if __name__ == "__main__":
  absltest.main()
