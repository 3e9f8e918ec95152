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

"""The copy-true-copies pull request of the series.

Its commit subject is "dlpack: copy=True always returns an independent buffer".
"""

from __future__ import annotations

from jax_patch._delivery import series_reports
from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="copy-true-copies",
    subject="dlpack: copy=True always returns an independent buffer",
    body="""\
jaxlib's dlpack_managed_tensor_to_buffer aliases 64-byte-aligned host
memory even when passed copy=True, and from_dlpack then dropped the copy
("copy was already handled"). So from_dlpack(x, copy=True) on an aligned
NumPy array returned a view: writing to x changed the "copy". The Array
API standard: copy=True "must always copy".

from_dlpack now imports as copy=None and copies the result itself. An
unaligned source, which jaxlib copies on import, is copied a second time.
The defect is jaxlib's, reported to JAX as
"{title}".
Once jaxlib honours copy=True, this guard goes behind a
jaxlib_extension_version check, and then with the minimum jaxlib. It
costs nothing on the copy=None and copy=False paths.

Measured on jax 0.12.0.1 (CPU): the result of copy=True changes with the
source, for any aligned input (from jax 0.8.1, when copy reached jaxlib).
""".format(title=series_reports.COPY_TRUE_ALIASES.title),
    claims=("copy_true_aligned_is_independent",),
    edits=(
        base.Edit(base.DLPACK, """\
    arr = _jax.dlpack_managed_tensor_to_buffer(
      dlpack, dlpack_device, stream, copy, int(dl_device_type))""", """\
    # jaxlib aliases aligned host memory even under copy=True (a jaxlib
    # bug, reported): that copy is made after the import, in _place_array.
    arr = _jax.dlpack_managed_tensor_to_buffer(
      dlpack, dlpack_device, stream, None if copy else copy,
      int(dl_device_type))"""),
        base.Edit(base.DLPACK, """\
  if copy:
    # copy was already handled by dlpack_managed_tensor_to_buffer.
    copy = None
""", ""),
        base.Edit(base.DLPACK, """\
  if copy:
    return jnp.array(_arr, copy=True)""", """\
  if copy:
    # Finished before returning: the caller may write to the source next.
    return jnp.array(_arr, copy=True).block_until_ready()"""),
    ),
    test_edits=base.test_methods(
        before=base.AFTER_NUMPY_TO_JAX, source="""\
  @jtu.run_on_devices("cpu")
  def testCopyTrueIsIndependentOfTheSource(self):
    x = _ensure_alignment(np.arange(16, dtype=np.float32),
                          desired_alignment=64)
    y = jnp.from_dlpack(x, copy=True)
    x[0] = 42
    self.assertEqual(y[0], 0)
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` with `copy=True` always returns an independent
buffer. Previously a 64-byte-aligned host array was aliased, so writing to
the source changed the "copy".""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
