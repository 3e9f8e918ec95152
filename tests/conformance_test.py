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

"""Runs every conformance case against every patched entry point.

In the x64 mode the run gives (``JAX_ENABLE_X64``): the cases that hold in
one mode only skip in the other, saying why, and ``X64ModeTest`` checks that
exactly those do.
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # noqa: F401  # pylint: disable=unused-import

from typing import Any  # pylint: disable=g-import-not-at-top
import warnings  # pylint: disable=g-import-not-at-top

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.dlpack
import jax.numpy as jnp

import jax_patch
from jax_patch._src import dlpack_compat
from jax_patch.testing import conformance


def _through_jnp(x: Any, **kwargs: Any) -> Any:
  return jnp.from_dlpack(x, **kwargs)


def _through_jax_dlpack(x: Any, **kwargs: Any) -> Any:
  return jax.dlpack.from_dlpack(x, **kwargs)


_ENTRY_POINTS = {
    "jax_patch": jax_patch.from_dlpack,
    "installed_jnp": _through_jnp,
    "installed_jax_dlpack": _through_jax_dlpack,
}


class ConformanceTest(parameterized.TestCase):

  def setUp(self) -> None:
    super().setUp()
    jax_patch.install()
    self.addCleanup(jax_patch.uninstall)

  @parameterized.named_parameters(
      (f"{case.name}__{entry}", case, entry)
      for case in conformance.CASES for entry in _ENTRY_POINTS)
  def test_case(self, case: conformance.Case, entry: str) -> None:
    with conformance.on_its_device(case):
      case.run(_ENTRY_POINTS[entry])


# Upstream fails these on every supported JAX, 0.4.35 to 0.10.2 (and, where
# noted below, on 0.12).
_UPSTREAM_BUGS = frozenset({
    "copy_false_float64_raises", "copy_false_int64_raises",
    "copy_false_other_device_raises", "copy_false_producer_copied_raises",
    # Issue 36's cases, measured on 0.4.35, 0.10.2 and 0.12.0.1.
    "copy_false_read_only_copy_raises", "copy_int_raises",
    "export_cpu_stream_raises", "jax_array_sharded_onto_one_device",
    "copy_false_strided_raises", "copy_false_unaligned_raises",
    "copy_none_broadcast_imports", "copy_none_reversed_imports",
    "copy_none_step_slice_imports", "copy_string_raises",
    "copy_true_replicated_is_independent", "cpu_producer_gets_stream_none",
    "cuda_host_source_gets_no_stream", "device_string_raises",
    "dlpack_round_trip_keeps_device",
    "donation_leaves_read_only_source_unchanged",
    "export_copy_true_is_copied", "export_legacy_max_version_is_a_copy",
    "export_missing_platform_raises", "export_versioned_read_only",
    "foreign_platform_imports_host_copy",
    "foreign_platform_without_device_raises", "inside_grad_raises",
    "inside_jit_raises", "inside_scan_raises", "inside_vmap_raises",
    "jax_array_keeps_device", "memory_mapped_file_imports_without_copy",
    "missing_dlpack_methods_raises",
    "multi_device_sharding_copy_false_raises", "multi_device_sharding_shards",
    "producer_without_copy_keyword_imports", "raw_capsule_refused",
    "read_only_imports_without_copy",
    "torch_dtypes_round_trip", "unsupported_device_type_raises",
    "versioned_only_producer_imports",
    # Issue 45's export cases, measured on 0.4.35, 0.10.2 and 0.12.0.1.
    "export_cpu_dl_device_any_id_aliases", "export_cpu_stream_minus_one_exports",
    "export_int4_raises_with_conversion_hint", "export_max_version_negotiated",
    # Issue 50's device=Format cases, measured on 0.4.35, 0.10.2, 0.12.0.1
    # and 0.12.1: upstream raises a plain ValueError under copy=False, and
    # device_put refuses a Format on another device ("incompatible devices").
    "format_in_other_layout_copies", "format_places_result",
})


# The cases that hold in one x64 mode only, by the mode they hold in.
_X64_OFF_ONLY = frozenset({"copy_false_float64_raises",
                           "copy_false_int64_raises"})
_X64_ON_ONLY = frozenset({"copy_false_float64_shares_with_x64_on",
                          "copy_false_int64_shares_with_x64_on"})


def upstream_bugs(extension_version: int, x64: bool) -> frozenset[str]:
  """The cases upstream JAX fails, for a jaxlib extension version and x64
  mode."""
  bugs = set(_UPSTREAM_BUGS)
  if x64:
    # Upstream narrows 64-bit input under copy=False only with x64 off; with
    # it on, it shares that input as the standard says (and those cases
    # skip).
    bugs -= _X64_OFF_ONLY
  if extension_version < dlpack_compat.JAXLIB_0_5_3:
    bugs.add("jax_producer_float8_round_trips")  # No DLPack float8 in jaxlib.
  if dlpack_compat.non_row_major_problem(extension_version) is not None:
    # Upstream aliases x.T where that goes wrong (or refuses it, on 0.7.2).
    bugs |= {"copy_false_transposed_shares", "transposed_values_are_right"}
  if extension_version >= dlpack_compat.JAXLIB_0_8_1:
    # Passing copy into the binding made copy=True alias aligned input and
    # made nanobind refuse np.bool_.
    bugs |= {"copy_true_aligned_is_independent", "copy_accepts_numpy_bool"}
  if extension_version >= dlpack_compat.JAXLIB_0_12_0:
    # Upstream asks for max_version, and jaxlib reads and writes 1.x capsules.
    bugs -= {"cpu_producer_gets_stream_none",
             "donation_leaves_read_only_source_unchanged",
             "export_copy_true_is_copied", "export_versioned_read_only",
             "memory_mapped_file_imports_without_copy",
             "producer_without_copy_keyword_imports",
             "read_only_imports_without_copy",
             "versioned_only_producer_imports"}
  if extension_version >= dlpack_compat.JAXLIB_0_12_1:
    bugs.discard("copy_true_aligned_is_independent")  # jaxlib copies.
  else:
    # Before 0.12.1 upstream hands a Format to device_put, which copy=False
    # refuses with a plain ValueError, whatever the layout.
    bugs.add("format_in_source_layout_shares")
  return frozenset(bugs)


class UpstreamBaselineTest(absltest.TestCase):
  """The cases are not vacuous: upstream JAX fails exactly its known bugs."""

  def test_upstream_fails_exactly_its_known_bugs(self) -> None:
    if jax.default_backend() != "cpu":
      self.skipTest("upstream's failures were measured with a CPU-only "
                    "jaxlib; GPU machines run tools/device_check.sh")
    jax_patch.uninstall()
    with warnings.catch_warnings():
      # Up to 0.7.1, upstream warns as it imports a raw capsule.
      warnings.simplefilter("ignore", DeprecationWarning)
      outcomes = {case.name: conformance.run_case(case, jnp.from_dlpack)[1]
                  for case in conformance.CASES}
    # Upstream's results on a GPU are unmeasured, and cases whose producer
    # is missing here (torch, say) are skipped.
    ran = {name for name, passed in outcomes.items()
           if passed is not None and name not in conformance.GPU_CASES}
    self.assertNotEmpty(ran)
    failing = {name for name in ran if outcomes[name] is False}
    self.assertEqual(
        failing, upstream_bugs(dlpack_compat.EXTENSION_VERSION,
                               conformance.x64_enabled()) & ran)


class X64ModeTest(parameterized.TestCase):
  """A case for one x64 mode runs in it, and skips in the other saying so."""

  @parameterized.named_parameters(
      (name, name) for name in sorted(_X64_OFF_ONLY | _X64_ON_ONLY))
  def test_mode_specific_case_runs_in_its_mode_only(self, name: str) -> None:
    case, = (case for case in conformance.CASES if case.name == name)
    holds_with_x64 = name in _X64_ON_ONLY
    self.assertIn(f"x64 {'on' if holds_with_x64 else 'off'}", case.behaviour)
    with jax_patch.patched():
      detail, passed = conformance.run_case(case, jax_patch.from_dlpack)
    if conformance.x64_enabled() == holds_with_x64:
      self.assertIs(passed, True, detail)
    else:
      self.assertIsNone(passed, detail)
      self.assertIn(f"holds with x64 {'on' if holds_with_x64 else 'off'} "
                    f"only (this run: {conformance.x64_mode()})", detail)

  def test_every_other_case_runs_in_both_modes(self) -> None:
    # No case but those above may skip for the mode.
    with jax_patch.patched():
      skipped_for_the_mode = {
          case.name for case in conformance.CASES
          if "holds with x64" in conformance.run_case(
              case, jax_patch.from_dlpack)[0]}
    expected = _X64_ON_ONLY if not conformance.x64_enabled() else (
        _X64_OFF_ONLY)
    self.assertEqual(skipped_for_the_mode, expected)


if __name__ == "__main__":
  absltest.main()
