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

"""Property tests: every layout, dtype, alignment, copy and device combination
follows the aliasing rules and raises only documented errors."""

import os

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

from typing import Any  # pylint: disable=g-import-not-at-top

from absl.testing import absltest
import hypothesis
from hypothesis import strategies as st
import jax
import ml_dtypes
import numpy as np

import jax_patch
from jax_patch.testing import conformance

_EXAMPLES = int(200 * float(os.environ.get("JAX_PATCH_SOAK", "1")))

_DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.int32, np.int64,
           np.uint32, np.uint64, np.float16, np.float32, np.float64,
           np.complex64, np.complex128]

_LAYOUTS = {
    "compact": lambda a: a,
    "transposed": lambda a: a.T,
    "sliced": lambda a: a[..., ::2],
    "reversed": lambda a: a[..., ::-1],
    "broadcast": lambda a: np.broadcast_to(a[..., :1], a.shape),
}

# Everything from_dlpack documents raising for valid input.
_DOCUMENTED = (jax_patch.CopyRequiredError,)


def _flip(base: np.ndarray[Any, Any]) -> None:
  """Changes every element of ``base`` in place."""
  if base.dtype == np.bool_:
    np.logical_not(base, out=base)
  else:
    base += base.dtype.type(1)


@st.composite
def _sources(draw: Any) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
  """(base, view): a writable base array and a view of it to import."""
  dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
  shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=3)))
  misalign = draw(st.sampled_from([0, dtype.itemsize, 16]))
  base = conformance.aligned_array(shape, dtype, misalign_bytes=misalign)
  layout = draw(st.sampled_from(sorted(_LAYOUTS)))
  view = _LAYOUTS[layout](base) if base.ndim else base[...]
  if view is base:
    view = base.view()
  if draw(st.booleans()):
    view = view.view()
    view.flags.writeable = False
  return base, view


class PropertyTest(absltest.TestCase):

  @hypothesis.settings(max_examples=_EXAMPLES, deadline=None,
                       suppress_health_check=list(hypothesis.HealthCheck))
  @hypothesis.given(
      source=_sources(),
      copy=st.sampled_from([None, False, True]),
      device_index=st.sampled_from([None, 0, 1]))
  def test_import_follows_the_aliasing_rules(
      self, source: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]],
      copy: bool | None, device_index: int | None) -> None:
    base, view = source
    device = (None if device_index is None
              else cpu_devices.require(2)[device_index])
    expected = np.array(view)
    try:
      result = jax_patch.from_dlpack(view, device=device, copy=copy)
    except _DOCUMENTED:
      self.assertIs(copy, False)
      return
    _flip(base)  # Before any read of result: a read may cache a copy.
    seen = np.asarray(result)
    canonical = jax.dtypes.canonicalize_dtype(view.dtype)
    self.assertEqual(result.shape, view.shape)
    # device=None keeps the producer's device: NumPy's host memory, cpu:0.
    self.assertEqual(result.devices(), {device or jax.devices("cpu")[0]})
    self.assertEqual(result.dtype, canonical)
    if view.size == 0:
      return
    shares = np.array_equal(seen, np.array(view).astype(canonical))
    unchanged = np.array_equal(seen, expected.astype(canonical))
    self.assertTrue(shares or unchanged, "neither the source nor a copy")
    if copy is True:
      self.assertTrue(unchanged, "copy=True shares memory")
    if copy is False:
      self.assertTrue(shares, "copy=False copied")
    # The result is a sound jax.Array: computed with, raveled and moved, it
    # keeps its values.
    other = cpu_devices.require(2)[1 - (device_index or 0)]
    self.assertEmpty(conformance.wrong_uses(result, seen, other))

  @hypothesis.settings(max_examples=_EXAMPLES // 2, deadline=None,
                       suppress_health_check=list(hypothesis.HealthCheck))
  @hypothesis.given(source=_sources())
  def test_copy_none_shares_exactly_when_copy_false_succeeds(
      self, source: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]
  ) -> None:
    base, view = source
    hypothesis.assume(view.size > 0)
    try:
      jax_patch.from_dlpack(view, copy=False)
      shareable = True
    except jax_patch.CopyRequiredError:
      shareable = False
    expected = np.array(view)
    result = jax_patch.from_dlpack(view)
    _flip(base)
    canonical = jax.dtypes.canonicalize_dtype(view.dtype)
    shares = not np.array_equal(np.asarray(result), expected.astype(canonical))
    self.assertEqual(shares, shareable)

  def test_bfloat16_from_jax_round_trips(self) -> None:
    # A host array: CPU behaviour, whatever JAX's default device is.
    source = jax.device_put(
        np.arange(6, dtype=ml_dtypes.bfloat16).reshape(2, 3),
        jax.devices("cpu")[0])
    result = jax_patch.from_dlpack(conformance.DLPackOnly(source))
    np.testing.assert_array_equal(np.asarray(result), np.asarray(source))


if __name__ == "__main__":
  absltest.main()
