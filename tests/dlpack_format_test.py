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

"""``from_dlpack(x, device=Format(layout, sharding))``, on the CPU.

JAX 0.12.1 takes a ``Format`` as ``device``; every supported JAX has the
class (``Layout`` before 0.6), and the patch takes it on each. The result
shares the source where ``copy`` allows and the data already lies as the
``Format`` asks (its sharding's device and memory kind, its layout);
otherwise it is one copy in that format, which ``copy=False`` refuses with
the standard's error. Sharing is shown by writing into the source.

x64: the sources are float32, which both modes keep; the 64-bit neighbour
states what holds in each mode.
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

from typing import Any  # pylint: disable=g-import-not-at-top

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

import jax_patch
from jax_patch._src import dlpack_compat
from jax_patch.testing import conformance

_SENTINEL = 99


def _format(layout: Any, sharding: Any) -> Any:
  return dlpack_compat.FORMAT_TYPE(layout, sharding)


def _on_cpu(major_to_minor: tuple[int, ...] | None = None,
            memory_kind: str | None = None) -> Any:
  """A Format on the first CPU device, in that dimension order (if any)."""
  sharding = conformance.single_device_sharding(cpu_devices.cpu())
  if memory_kind is not None:
    sharding = sharding.with_memory_kind(memory_kind)
  layout = None if major_to_minor is None else conformance.layout(
      major_to_minor)
  return _format(layout, sharding)


def _transposed() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
  """An aligned (4, 4) array and its transpose, whose order is (1, 0)."""
  base = conformance.aligned_array((4, 4))
  return base, base.T


def _shares(result: Any, written: np.ndarray[Any, Any]) -> bool:
  """Writes into ``written`` and says whether ``result`` saw it."""
  written[(0,) * written.ndim] = _SENTINEL
  return bool(np.asarray(result)[(0,) * result.ndim] == _SENTINEL)


def _in_layout(result: Any, major_to_minor: tuple[int, ...]) -> bool:
  return dlpack_compat.layout_matches(conformance.layout(major_to_minor),
                                      dlpack_compat.layout_of(result))


class FormatWithoutLayoutTest(cpu_devices.CpuDefaultTestCase):
  """A Format without a layout is its sharding."""

  def test_places_on_its_shardings_device(self) -> None:
    other = cpu_devices.require(2)[1]
    target = _format(None, conformance.single_device_sharding(other))
    result = jax_patch.from_dlpack(conformance.aligned_array((8,)),
                                   device=target)
    self.assertEqual(result.devices(), {other})
    np.testing.assert_array_equal(np.asarray(result), np.arange(8))

  @parameterized.named_parameters(("copy_none", None), ("copy_false", False))
  def test_on_the_source_device_shares(self, copy: bool | None) -> None:
    source = conformance.aligned_array((8,))
    result = jax_patch.from_dlpack(source, device=_on_cpu(), copy=copy)
    self.assertTrue(_shares(result, source))

  def test_copy_true_is_independent(self) -> None:
    source = conformance.aligned_array((8,))
    result = jax_patch.from_dlpack(source, device=_on_cpu(), copy=True)
    self.assertFalse(_shares(result, source))

  def test_without_sharding_keeps_the_source_device(self) -> None:
    other = cpu_devices.require(2)[1]
    source = jax.device_put(jnp.arange(4.0), other)
    result = jax_patch.from_dlpack(source, device=_format(None, None))
    self.assertEqual(result.devices(), {other})

  def test_copy_false_to_another_device_raises(self) -> None:
    other = cpu_devices.require(2)[1]
    target = _format(None, conformance.single_device_sharding(other))
    with self.assertRaisesRegex(jax_patch.CopyRequiredError, "copy=False"):
      jax_patch.from_dlpack(conformance.aligned_array((8,)), device=target,
                            copy=False)


class FormatLayoutTest(cpu_devices.CpuDefaultTestCase):
  """A Format's layout: kept where the data has it, copied into otherwise."""

  def _require_cpu_layouts(self) -> None:
    if not dlpack_compat.JAX_HOLDS_CPU_LAYOUTS:
      self.skipTest("JAX before 0.5.1 holds CPU arrays in their default "
                    "layout only: test_layout_this_jax_cannot_hold_raises "
                    "pins what happens instead")

  def _require_compact_aliases(self) -> None:
    if not dlpack_compat.JAXLIB_ALIASES_ANY_COMPACT_LAYOUT:
      self.skipTest("this jaxlib cannot alias a transposed layout soundly "
                    "(dlpack_compat.non_row_major_problem); "
                    "test_source_layout_refused_where_jaxlib_cannot_alias "
                    "pins what happens instead")

  @parameterized.named_parameters(("copy_none", None), ("copy_false", False))
  def test_source_layout_shares(self, copy: bool | None) -> None:
    self._require_compact_aliases()
    base, source = _transposed()
    result = jax_patch.from_dlpack(source, device=_on_cpu((1, 0)), copy=copy)
    self.assertTrue(_in_layout(result, (1, 0)))
    self.assertTrue(_shares(result, base))

  def test_source_layout_refused_where_jaxlib_cannot_alias(self) -> None:
    if dlpack_compat.JAXLIB_ALIASES_ANY_COMPACT_LAYOUT:
      self.skipTest("this jaxlib aliases a transposed layout soundly: "
                    "test_source_layout_shares shows it")
    _, source = _transposed()
    with self.assertRaisesRegex(jax_patch.CopyRequiredError, "copy=False"):
      jax_patch.from_dlpack(source, device=_on_cpu((1, 0)), copy=False)

  def test_default_layout_of_row_major_source_shares(self) -> None:
    source = conformance.aligned_array((4, 4))
    result = jax_patch.from_dlpack(source, device=_on_cpu((0, 1)),
                                   copy=False)
    self.assertTrue(_shares(result, source))

  def test_source_layout_copy_true_is_independent_in_that_layout(
      self) -> None:
    self._require_cpu_layouts()
    base, source = _transposed()
    expected = np.array(source)
    result = jax_patch.from_dlpack(source, device=_on_cpu((1, 0)), copy=True)
    self.assertTrue(_in_layout(result, (1, 0)))
    self.assertFalse(_shares(result, base))
    np.testing.assert_array_equal(np.asarray(result), expected)

  @parameterized.named_parameters(("copy_none", None), ("copy_true", True))
  def test_other_layout_copies_into_it(self, copy: bool | None) -> None:
    self._require_cpu_layouts()
    source = conformance.aligned_array((4, 4))
    expected = np.array(source)
    result = jax_patch.from_dlpack(source, device=_on_cpu((1, 0)), copy=copy)
    self.assertTrue(_in_layout(result, (1, 0)))
    self.assertFalse(_shares(result, source))
    np.testing.assert_array_equal(np.asarray(result), expected)
    # Computes as the values it holds, whatever its layout.
    np.testing.assert_array_equal(np.asarray(result @ jnp.eye(4)), expected)

  def test_other_layout_copy_false_raises_the_standards_error(self) -> None:
    self._require_cpu_layouts()
    source = conformance.aligned_array((4, 4))
    with self.assertRaisesRegex(
        jax_patch.CopyRequiredError,
        r"^Specified device=.* which requires a copy since the data lies in "
        r"layout .*, however copy=False") as raised:
      jax_patch.from_dlpack(source, device=_on_cpu((1, 0)), copy=False)
    self.assertIsInstance(raised.exception, BufferError)
    self.assertIsInstance(raised.exception, ValueError)

  def test_jax_array_in_another_layout_is_copied_into_it(self) -> None:
    self._require_cpu_layouts()
    source = jnp.arange(16.0, dtype=jnp.float32).reshape(4, 4)
    with self.assertRaises(jax_patch.CopyRequiredError):
      jax_patch.from_dlpack(source, device=_on_cpu((1, 0)), copy=False)
    result = jax_patch.from_dlpack(source, device=_on_cpu((1, 0)))
    self.assertTrue(_in_layout(result, (1, 0)))
    np.testing.assert_array_equal(np.asarray(result), np.asarray(source))

  @parameterized.named_parameters(("copy_none", None), ("copy_false", False))
  def test_layout_this_jax_cannot_hold_raises(self, copy: bool | None) -> None:
    if dlpack_compat.JAX_HOLDS_CPU_LAYOUTS:
      self.skipTest("this JAX holds CPU arrays in any layout: "
                    "test_other_layout_copies_into_it shows it")
    with self.assertRaisesRegex(ValueError, "before JAX 0.5.1") as raised:
      jax_patch.from_dlpack(conformance.aligned_array((4, 4)),
                            device=_on_cpu((1, 0)), copy=copy)
    self.assertNotIsInstance(raised.exception, BufferError)

  def test_int64_with_x64_off_is_narrowed_copy_else_shared(self) -> None:
    # x64 off: int64 becomes int32, a copy copy=False refuses. x64 on:
    # kept, and shared in the layout it already has.
    source = conformance.aligned_array((4, 4), np.int64)
    if not conformance.x64_enabled():
      with self.assertRaises(jax_patch.CopyRequiredError):
        jax_patch.from_dlpack(source, device=_on_cpu((0, 1)), copy=False)
      return
    result = jax_patch.from_dlpack(source, device=_on_cpu((0, 1)),
                                   copy=False)
    self.assertEqual(result.dtype, np.int64)
    self.assertTrue(_shares(result, source))

  def test_auto_layout_raises_value_error_naming_it(self) -> None:
    auto = conformance.layout((0,)).AUTO
    target = _format(auto, conformance.single_device_sharding(
        cpu_devices.cpu()))
    with self.assertRaisesRegex(ValueError, "Layout.AUTO") as raised:
      jax_patch.from_dlpack(conformance.aligned_array((8,)), device=target)
    self.assertNotIsInstance(raised.exception, BufferError)


class FormatMemoryKindTest(cpu_devices.CpuDefaultTestCase):
  """A Format's memory kind counts, as upstream 0.12.1 counts it."""

  def setUp(self) -> None:
    super().setUp()
    kinds = {memory.kind for memory in cpu_devices.cpu().addressable_memories()}
    if "pinned_host" not in kinds:
      self.skipTest(f"this JAX's CPU device has memory kinds {sorted(kinds)}, "
                    "none of them pinned_host")
    pinned = _on_cpu(memory_kind="pinned_host").sharding
    try:
      jax.device_put(jnp.zeros(4), pinned).block_until_ready()
    except Exception as err:  # pylint: disable=broad-except
      # JAX 0.7 to 0.9 lack the CPU's placement custom call.
      self.skipTest(f"this JAX cannot move a CPU array into pinned_host "
                    f"memory itself ({type(err).__name__}: {err})")

  def test_copy_false_into_another_memory_kind_raises(self) -> None:
    with self.assertRaisesRegex(jax_patch.CopyRequiredError, "memory kind"):
      jax_patch.from_dlpack(conformance.aligned_array((8,)),
                            device=_on_cpu(memory_kind="pinned_host"),
                            copy=False)

  def test_copy_none_moves_into_that_memory_kind(self) -> None:
    source = conformance.aligned_array((8,))
    result = jax_patch.from_dlpack(source,
                                   device=_on_cpu(memory_kind="pinned_host"))
    self.assertEqual(result.sharding.memory_kind, "pinned_host")
    self.assertFalse(_shares(result, source))

  @parameterized.named_parameters(("copy_none", None), ("copy_true", True))
  def test_a_plain_sharding_of_that_memory_kind_counts_too(
      self, copy: bool | None) -> None:
    # A Format is one more kind of target: its sharding alone places alike.
    source = conformance.aligned_array((8,))
    pinned = _on_cpu(memory_kind="pinned_host").sharding
    result = jax_patch.from_dlpack(source, device=pinned, copy=copy)
    self.assertEqual(result.sharding.memory_kind, "pinned_host")
    self.assertFalse(_shares(result, source))
    with self.assertRaisesRegex(jax_patch.CopyRequiredError, "memory kind"):
      jax_patch.from_dlpack(source, device=pinned, copy=False)


class InstalledTest(cpu_devices.CpuDefaultTestCase):
  """``jnp.from_dlpack`` takes a Format once the patch is installed."""

  def setUp(self) -> None:
    super().setUp()
    jax_patch.install()
    self.addCleanup(jax_patch.uninstall)

  @parameterized.named_parameters(("jnp", lambda: jnp.from_dlpack),
                                  ("jax_dlpack", lambda: jax.dlpack.from_dlpack))
  def test_entry_point_shares_in_the_source_layout(self, entry: Any) -> None:
    source = conformance.aligned_array((4, 4))
    result = entry()(source, device=_on_cpu((0, 1)), copy=False)
    self.assertTrue(_shares(result, source))

  def test_check_target_names_format_for_a_wrong_device(self) -> None:
    with self.assertRaisesRegex(jax_patch.InvalidDeviceError,
                                dlpack_compat.FORMAT_NAME):
      jnp.from_dlpack(conformance.aligned_array((8,)), device="cpu")


if __name__ == "__main__":
  absltest.main()
