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

"""The export-legacy-copy pull request of the series.

Its commit subject is "dlpack: a DLPack 0.x export holds a copy".
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="export-legacy-copy",
    subject="dlpack: a DLPack 0.x export holds a copy",
    depends_on=("exception-classes",),
    body="""\
jax.Array.__dlpack__(max_version=(0, 8)) returned a 0.x capsule aliasing
the array's buffer. A 0.x capsule cannot say READ_ONLY, so its consumer
may write to memory JAX treats as immutable (torch does: it has no
read-only tensors).
The DLPack Python specification lets a producer serve an older consumer
with a copy: a consumer that asks for 0.x now gets one, and copy=False
raises the copy-required error. Exports without max_version keep the
alias, for consumers that predate the keyword.

Measured on jax 0.12.0.1: the 0.x capsule's data pointer is the array's
unsafe_buffer_pointer().
""",
    claims=("export_legacy_max_version_is_a_copy",),
    edits=(
        base.Edit(base.DLPACK, """\
  # As new versions are adopted over time, we can maintain some legacy paths
""", """\
  if max_version is not None and max_version < (1, 0):
    # 0.x cannot mark the buffer read-only, and a consumer may write to it.
    if copy is False:
      raise _CopyRequiredError(
          f"Specified max_version={max_version}, which requires a copy "
          "since a DLPack 0.x capsule cannot be marked read-only, however "
          "copy=False. Set copy=True or copy=None to perform the "
          "requested operation.")
    copy = True
  # As new versions are adopted over time, we can maintain some legacy paths
"""),
    ),
    test_edits=base.test_methods(
        before=base.BEFORE_JAX_TO_TENSORFLOW, source="""\
  @jtu.run_on_devices("cpu")
  def testLegacyExportIsACopy(self):
    x = jnp.arange(4.0)
    y = np.from_dlpack(_LegacyConsumerView(x))
    self.assertNotEqual(y.__array_interface__["data"][0],
                        x.unsafe_buffer_pointer())
    self.assertAllClose(x, y)
    with self.assertRaisesRegex(BufferError, "requires a copy"):
      x.__dlpack__(max_version=(0, 8), copy=False)
""") + (
        base.test_helper("""\
class _LegacyConsumerView:
  \"\"\"Asks its array for a DLPack 0.x capsule, as a pre-1.0 consumer.\"\"\"

  def __init__(self, array):
    self.array = array

  def __dlpack__(self, **kwargs):
    del kwargs
    return self.array.__dlpack__(max_version=(0, 8))

  def __dlpack_device__(self):
    return self.array.__dlpack_device__()
""", base.BEFORE_ENSURE_ALIGNMENT_TEST),
    ))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Changes", """\
`jax.Array.__dlpack__(max_version=(0, x))` exports a copy, since a DLPack
0.x capsule cannot mark JAX's immutable buffer read-only; `copy=False`
raises the copy-required error. Exports without `max_version` still alias
the array.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
