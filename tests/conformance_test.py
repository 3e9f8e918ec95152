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

"""Runs every conformance case against every patched entry point."""

import os

# Several CPU devices, before JAX creates its CPU backend.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=4")

from typing import Any  # pylint: disable=g-import-not-at-top

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.dlpack
import jax.numpy as jnp

import jax_patch
from jax_patch._src import conformance


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
    case.run(_ENTRY_POINTS[entry])


class UpstreamBaselineTest(absltest.TestCase):
  """The cases are not vacuous: upstream JAX fails the bugs they name."""

  def test_upstream_fails_the_cases_for_its_known_bugs(self) -> None:
    jax_patch.uninstall()
    failing = set()
    for case in conformance.CASES:
      try:
        case.run(jnp.from_dlpack)
      except AssertionError:
        failing.add(case.name)
      except Exception:  # pylint: disable=broad-except
        failing.add(case.name)
    self.assertContainsSubset(
        {"copy_true_aligned_is_independent", "copy_false_int64_raises",
         "copy_false_float64_raises", "copy_false_unaligned_raises",
         "copy_none_step_slice_imports", "copy_none_reversed_imports",
         "copy_none_broadcast_imports", "read_only_imports_without_copy",
         "multi_device_sharding_shards", "foreign_platform_imports_host_copy",
         "unsupported_device_type_raises", "jax_array_keeps_device",
         "inside_jit_raises", "inside_vmap_raises", "copy_string_raises",
         "device_string_raises", "missing_dlpack_methods_raises"},
        failing)


if __name__ == "__main__":
  absltest.main()
