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

"""The copy-argument pull request of the series.

Its commit subject is "dlpack: from_dlpack checks copy, and takes NumPy bools".
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="copy-argument",
    subject="dlpack: from_dlpack checks copy, and takes NumPy bools",
    body="""\
from_dlpack passed `copy` through to the binding unchecked: anything but
True, False or None (a string, an int, and also np.True_ and np.False_)
reached dlpack_managed_tensor_to_buffer, whose nanobind signature raised
"incompatible function arguments", a TypeError that lists the binding's
arguments and does not name from_dlpack. The Array API standard types
`copy` as Optional[bool]; NumPy bools are what array code computes, and
NumPy's own from_dlpack takes them.

from_dlpack now reads a NumPy bool as the bool it is, and raises a
TypeError naming from_dlpack for any other `copy` that is not a bool or
None. An int is refused rather than read as a bool: copy=0 meaning
copy=False would be a guess.

Measured on jax 0.12.0.1 (CPU): from_dlpack(np.arange(4.0), copy=c)
raised nanobind's TypeError for c in "yes", 0, 1, 2, np.False_ and
np.True_.
""",
    claims=("copy_accepts_numpy_bool", "copy_string_raises",
            "copy_int_raises"),
    edits=(
        # Before _place_array: the lines before _check_device are
        # device-argument's, and the body of _check_device is
        # exception-classes'.
        base.Edit(base.DLPACK, """\
def _place_array(_arr, device, dlpack_device, copy):""", """\
def _check_copy_argument(copy: Any) -> bool | None:
  \"\"\"``copy`` as from_dlpack reads it: a bool (a NumPy bool too) or None.\"\"\"
  if copy is None or isinstance(copy, (bool, np.bool_)):
    return None if copy is None else bool(copy)
  raise TypeError(
      f"from_dlpack: copy must be a bool or None, got {copy!r} of type "
      f"{type(copy).__name__}.")

def _place_array(_arr, device, dlpack_device, copy):"""),
        base.Edit(base.DLPACK, """\
  if isinstance(device, Sharding):
    device_set = device.device_set""", """\
  copy = _check_copy_argument(copy)
  if isinstance(device, Sharding):
    device_set = device.device_set"""),
    ),
    # At the end of DLPackTest, where deprecate-under-transformations,
    # which goes after this, adds its test too.
    test_edits=base.test_methods("""\
  @jtu.run_on_devices("cpu")
  def testCopyMustBeABoolOrNone(self):
    x = np.arange(4.0)
    for copy in ("yes", 0, 1):
      with self.assertRaisesRegex(TypeError, "from_dlpack: copy must be"):
        jnp.from_dlpack(x, copy=copy)

  @jtu.run_on_devices("cpu")
  def testCopyTakesNumPyBools(self):
    x = _ensure_alignment(
        np.arange(4, dtype=np.float32),
        _get_max_align_bits(np.float32, jax.devices("cpu")[0]))
    y = jnp.from_dlpack(x, copy=np.False_)
    # Shared, as copy=False asks.
    self.assertEqual(y.unsafe_buffer_pointer(),
                     x.__array_interface__["data"][0])
    self.assertAllClose(x, jnp.from_dlpack(x, copy=np.True_))
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Bug fixes", """\
{func}`jax.dlpack.from_dlpack` and {func}`jax.numpy.from_dlpack` accept a
NumPy bool as `copy`, and raise a `TypeError` naming `from_dlpack` for a
`copy` that is neither a bool nor `None`, where they raised the binding's
"incompatible function arguments" error.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
