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

"""The non-row-major-layouts-before-jaxlib-0.11.2 pull request of the series.

Its commit subject is "dlpack: copy non-row-major imports on jaxlib before
0.11.2".

Only for a target whose jaxlib range reaches 0.11.2 from below, gated on
jaxlib_extension_version: there it is cheap, and keeps older jaxlibs right
until the minimum is raised. A target whose every jaxlib is older (JAX main
at 0.11.1) would pay for it on every import, for a defect jaxlib 0.11.2
fixed: it gets the bug report (series_reports.NON_ROW_MAJOR_MOVED_WRONGLY)
instead. From jaxlib 0.11.2 on, none of it is needed.
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


_NON_ROW_MAJOR_BODY = """\
jaxlib before 0.11.2 aliases a compact but non-row-major host tensor
(x.T, any permutation) with a matching XLA layout, which reads right,
but device_put to another device then moves it wrongly: the moved array
computes wrong values (jaxlib 0.10 to 0.11.1; 0.8 and 0.9 permute the
moved values). from_dlpack now copies such an import once into the
default layout on those jaxlib versions, and under copy=False raises the
copy-required error saying why. jaxlib 0.11.2 fixed the move, and there
the alias is kept; this patch goes away with the minimum jaxlib.

Measured with jaxlib 0.11.1 and 2 CPU devices:
device_put(from_dlpack(x.transpose(1, 2, 0)), cpu1) * 1 differs from
x.transpose(1, 2, 0).
"""

_NON_ROW_MAJOR_CHECK = """\
    if copy is False:
      raise _CopyRequiredError(
          "Specified input with a non-row-major layout, which requires a "
          "copy since this jaxlib moves such arrays between devices "
          "wrongly (fixed in jaxlib 0.11.2), however copy=False. Set "
          "copy=True or copy=None to perform the requested operation.")
    arr = _array_copy(arr)
  # TODO(phawkins): when we are ready to support x64 arrays in
  # non-x64 mode, change the semantics to not canonicalize here.
"""

_NON_ROW_MAJOR_TESTS = base.test_methods(

    before=base.BEFORE_TENSORFLOW_NONDEFAULT_LAYOUT, source="""\
  @jtu.run_on_devices("cpu")
  def testNonRowMajorImportMovesRight(self):
    if jax.device_count() < 2:
      self.skipTest("needs two devices")
    x = _ensure_alignment(np.arange(24, dtype=np.float32),
                          desired_alignment=64)
    x = x.reshape(2, 3, 4).transpose(1, 2, 0)
    y = jax.device_put(jnp.from_dlpack(x), jax.devices()[1])
    self.assertArraysEqual(x * 2, np.asarray(y * 2))
""")

_BEFORE_TODO_CANONICALIZE = """\
  # TODO(phawkins): when we are ready to support x64 arrays in
  # non-x64 mode, change the semantics to not canonicalize here.
"""

# A JAX supporting jaxlib from before 0.11.2 to 0.11.2 or later.
PATCH = base.SeriesPatch(
    slug="non-row-major-layouts-before-jaxlib-0.11.2",
    subject="dlpack: copy non-row-major imports on jaxlib before 0.11.2",
    # Its check goes where copy-false-no-narrowing's does, after it.
    depends_on=("exception-classes", "copy-false-no-narrowing"),
    body=_NON_ROW_MAJOR_BODY,
    claims=("transposed_values_are_right", "copy_false_transposed_shares"),
    only_below_jaxlib=(0, 11, 2),
    gated=True,
    stands_in_for="non-row-major-moved-wrongly",
    edits=(
        base.Edit(base.DLPACK, """\
from jax._src.lib import _jax
from jax._src.lib import xla_client
""", """\
from jax._src.lib import _jax
from jax._src.lib import jaxlib_extension_version
from jax._src.lib import xla_client
"""),
        base.Edit(base.DLPACK, _BEFORE_TODO_CANONICALIZE, """\
  # jaxlib before 0.11.2 (extension 495) aliases other layouts, but moves
  # them to other devices wrongly.
  if (jaxlib_extension_version < 495 and not copy
      and arr.format.layout.major_to_minor != tuple(range(arr.ndim))):
""" + _NON_ROW_MAJOR_CHECK),
    ),
    test_edits=_NON_ROW_MAJOR_TESTS)


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` copies a non-row-major host tensor (`x.T`)
once on jaxlib before 0.11.2, which moved such imports to other devices
wrongly; `copy=False` raises the copy-required error there.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
