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

"""The copy-false-no-narrowing pull request of the series.

Its commit subject is "dlpack: copy=False never narrows a 64-bit import
silently".
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="copy-false-no-narrowing",
    subject="dlpack: copy=False never narrows a 64-bit import silently",
    depends_on=("exception-classes",),
    body="""\
With jax_enable_x64 off, from_dlpack(x, copy=False) on an int64 or float64
array returned a copied int32 or float32 array. The Array API standard:
copy=False "must never copy", and raises in case a copy is needed. It now
raises the copy-required error, saying which dtype would have become which.
copy=None and copy=True still canonicalise as before.

JAX's own testNumpyToJax expected the silent copy for 64-bit dtypes with
copy=False; it now expects the error there, as for unaligned input.

Measured on jax 0.12.0.1 (CPU, x64 off): from_dlpack(np.arange(8),
copy=False) returns an int32 array that does not share the source's memory.
""",
    claims=("copy_false_int64_raises", "copy_false_float64_raises"),
    edits=(
        # Above JAX's comment, not on the line it explains: the lines after
        # it are copy-true-copies' and finished-at-return's to edit.
        base.Edit(base.DLPACK, """\
  # TODO(phawkins): when we are ready to support x64 arrays in
""", """\
  if copy is False and dtypes.canonicalize_dtype(arr.dtype) != arr.dtype:
    raise _CopyRequiredError(
        f"Specified input of dtype {arr.dtype}, which requires a copy since "
        f"it becomes {dtypes.canonicalize_dtype(arr.dtype)} with "
        "jax_enable_x64 off, however copy=False. Set copy=True or "
        "copy=None, or enable x64.")
  # TODO(phawkins): when we are ready to support x64 arrays in
"""),
    ),
    test_edits=(
        base.Edit(base.INTEROP_TEST, """\
    if copy is not None and not copy and (jax.default_backend() != "cpu"
                                          or not aligned):""", """\
    narrowed = dtypes.canonicalize_dtype(dtype) != np.dtype(dtype)
    if copy is not None and not copy and (jax.default_backend() != "cpu"
                                          or not aligned or narrowed):"""),
        base.Edit(base.INTEROP_TEST,
                  "from jax._src import dlpack as dlpack_src\n",
                  "from jax._src import dlpack as dlpack_src\n"
                  "from jax._src import dtypes\n"),
    ) + base.test_methods(before=base.BEFORE_NUMPY_TO_JAX, source="""\
  @jtu.run_on_devices("cpu")
  def testCopyFalseDoesNotNarrow(self):
    x = _ensure_alignment(np.arange(8, dtype=np.int64),
                          desired_alignment=64)
    if not config.enable_x64.value:
      with self.assertRaisesRegex(BufferError, "becomes int32"):
        jnp.from_dlpack(x, copy=False)
      return
    y = jnp.from_dlpack(x, copy=False)  # x64 on: int64 is kept, and shared.
    x[0] = 99
    self.assertEqual(np.asarray(y)[0], 99)
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` with `copy=False` no longer returns a copied
32-bit array for int64 or float64 input when `jax_enable_x64` is off: it
raises the copy-required error, as the Array API standard asks.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
