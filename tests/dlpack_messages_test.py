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

"""The messages code written against upstream JAX matches on.

Where upstream raised for a situation, the patch's message must still match
upstream's pattern. Each pattern is pinned against the bare upstream of the
running JAX too (from the release that introduced it), so a pattern that
upstream never wrote cannot pass here.
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

import dataclasses  # pylint: disable=g-import-not-at-top
from typing import Any, Callable
import unittest
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

import jax_patch
from jax_patch._delivery import vendor
from jax_patch.testing import conformance


class _OnDeviceType99:
  """A producer on a DLPack device type no JAX knows."""

  def __dlpack__(self, **kwargs: Any) -> Any:
    return np.ones(3).__dlpack__(**kwargs)

  def __dlpack_device__(self) -> tuple[int, int]:
    return 99, 0


def _any(x: Any) -> Any:
  # jax/_src/basearray.pyi declares __dlpack__ without keywords.
  return x


def _unaligned() -> np.ndarray[Any, Any]:
  return conformance.aligned_array((4,), misalign_bytes=4)


@dataclasses.dataclass(frozen=True)
class Family:
  pattern: str
  situation: Callable[[], Any]
  # The first JAX release whose upstream raises with the pattern.
  upstream_since: tuple[int, ...]


FAMILIES = {
    "copy_false_device_mismatch": Family(
        r"Specified device=.* which requires a copy since the source device "
        r"is .*, however copy=False",
        lambda: jnp.from_dlpack(np.ones(4), device=cpu_devices.require(2)[1],
                                copy=False),
        (0, 4, 35)),
    "copy_false_unaligned": Family(
        r"Specified input which requires a copy since the source data buffer "
        r"is not aligned to 64 bytes",
        lambda: jnp.from_dlpack(_unaligned(), copy=False),
        (0, 8, 1)),
    "unsupported_device_import": Family(
        r"Array passed to from_dlpack is on unsupported device type "
        r"\(DLDeviceType: 99",
        lambda: jnp.from_dlpack(_OnDeviceType99()),
        (0, 5, 0)),
    "unsupported_device_export": Family(
        r"The device specification passed to to_dlpack contains an "
        r"unsupported device type \(DLDeviceType: 99\)",
        lambda: _any(jax.device_put(np.arange(4.0), cpu_devices.cpu())
                     ).__dlpack__(dl_device=(99, 0)),
        (0, 5, 0)),
    "missing_dlpack_methods": Family(
        r"The array passed to from_dlpack must have __dlpack__ and "
        r"__dlpack_device__ methods",
        lambda: jnp.from_dlpack([1.0, 2.0]),
        (0, 7, 2)),
}

# Situations upstream never raised for (it copied silently), which join the
# copy=False family: the pattern JAX's own tests match for it.
COPY_FALSE_PATTERN = r"Specified .* which requires a copy"
NEW_COPY_FALSE_SITUATIONS = {
    "int64_with_x64_off": lambda: jnp.from_dlpack(
        conformance.aligned_array((4,), np.int64), copy=False),
    "strided": lambda: jnp.from_dlpack(
        conformance.aligned_array((8,))[::2], copy=False),
}
# Situations that need a copy in one x64 mode only: why the other has none.
NEEDS_X64_OFF = {
    "int64_with_x64_off": "with x64 on int64 is kept, and copy=False shares "
                          "it (conformance: copy_false_int64_shares_with_x64_on)",
}


def _message(situation: Callable[[], Any]) -> str | None:
  """The message ``situation`` raises with; ``None`` if it returns."""
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      situation()
  except unittest.SkipTest:
    raise  # The situation needs what this process lacks (devices, say).
  except Exception as err:  # pylint: disable=broad-except
    return str(err)
  return None


class UpstreamMessageTest(parameterized.TestCase):

  def setUp(self) -> None:
    super().setUp()
    self.assertFalse(jax_patch.is_installed())

  def _raised(self, situation: Callable[[], Any], who: str) -> str:
    message = _message(situation)
    if message is None:
      raise self.failureException(f"{who} did not raise")
    return message

  def _raised_patched(self, situation: Callable[[], Any]) -> str:
    with jax_patch.patched():
      return self._raised(situation, "the patch")

  @parameterized.named_parameters(*FAMILIES.items())
  def test_patch_message_matches_upstream_pattern(self, family: Family) -> None:
    self.assertRegex(self._raised_patched(family.situation), family.pattern)

  @parameterized.named_parameters(*FAMILIES.items())
  def test_pattern_is_upstreams_own(self, family: Family) -> None:
    if vendor.release(jax.__version__) < family.upstream_since:
      self.skipTest(f"upstream JAX {jax.__version__} does not raise this "
                    f"yet (from {family.upstream_since})")
    self.assertRegex(self._raised(family.situation, "upstream"),
                     family.pattern)

  @parameterized.named_parameters(
      (name, name, situation)
      for name, situation in NEW_COPY_FALSE_SITUATIONS.items())
  def test_new_copy_false_refusals_join_the_family(
      self, name: str, situation: Callable[[], Any]) -> None:
    if name in NEEDS_X64_OFF:
      conformance.require_x64(False, NEEDS_X64_OFF[name])
    self.assertRegex(self._raised_patched(situation), COPY_FALSE_PATTERN)

  def test_message_then_says_what_to_pass(self) -> None:
    message = self._raised_patched(FAMILIES["copy_false_unaligned"].situation)
    self.assertRegex(message, r"pass copy=None .* or copy=True")

  def test_unsupported_device_names_the_types_jax_knows(self) -> None:
    message = self._raised_patched(
        FAMILIES["unsupported_device_import"].situation)
    self.assertRegex(message, r"JAX knows DLDeviceTypes \[1, 2")


if __name__ == "__main__":
  absltest.main()
