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

"""The strided-input pull request of the series.

Its commit subject is "dlpack: import non-compact strides via the producer's
copy".
"""

from __future__ import annotations

from jax_patch._delivery import series_reports
from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="strided-input",
    subject="dlpack: import non-compact strides via the producer's copy",
    depends_on=("exception-classes",),
    body="""\
jaxlib imports only compact layouts: from_dlpack(x[::2]),
from_dlpack(x[::-1]) and from_dlpack(np.broadcast_to(...)) raised
JaxRuntimeError UNIMPLEMENTED ("Only DLPack tensors with trivial (compact)
striding are supported"), also under copy=None, and under copy=False
raised that instead of the copy-required error. The Array API standard:
copy=None "must avoid a copy if possible but may copy if needed".

from_dlpack now asks the producer for a compact copy, with the DLPack
1.0 copy=True keyword (NumPy, torch and CuPy honour it), and imports that.
Under copy=False it raises the copy-required error, saying why. jaxlib
copies the producer's copy again only where it is not 64-byte aligned.
jaxlib could make the compact copy itself, which would serve producers
without the copy keyword too; that is reported to JAX as
"{title}".
This path runs only where jaxlib has refused the layout, so it costs
nothing on others.

Measured on jax 0.12.0.1 (CPU): the three raise UNIMPLEMENTED.
""".format(title=series_reports.NON_COMPACT_STRIDES_UNIMPLEMENTED.title),
    # A broadcast is read-only: with jaxlib before 0.12 it cannot be
    # exported as 0.x at all (series_patches.NEEDS_JAXLIB).
    claims=("copy_none_step_slice_imports", "copy_none_reversed_imports",
            "copy_false_strided_raises", "copy_none_broadcast_imports"),
    edits=(
        base.Edit(base.DLPACK, """\
        "copy=None to perform the requested operation."
      )
    else:
      raise
""", """\
        "copy=None to perform the requested operation."
      )
    elif "trivial (compact) striding" in se:
      if copy is False:
        raise _CopyRequiredError(
            "Specified input with non-compact strides, which requires a "
            "copy since jaxlib imports only compact layouts, however "
            "copy=False. Set copy=True or copy=None to perform the "
            "requested operation.") from None
      arr = _import_compact_copy(external_array, dlpack_device, stream,
                                 int(dl_device_type))
    else:
      raise
"""),
        base.Edit(base.DLPACK, """\
def _is_tensorflow_tensor(external_array):""", """\
def _import_compact_copy(external_array, device, stream, dl_device_type):
  \"\"\"Imports the producer's compact copy of an array laid out otherwise.\"\"\"
  try:
    dlpack = external_array.__dlpack__(stream=stream, copy=True)
  except TypeError:
    raise BufferError(
        "from_dlpack: the array's strides are not compact, which jaxlib "
        "cannot import, and its producer does not take the DLPack 1.0 "
        "copy keyword to make a compact copy.") from None
  return _jax.dlpack_managed_tensor_to_buffer(
      dlpack, device, stream, None, dl_device_type)

def _is_tensorflow_tensor(external_array):"""),
    ),
    test_edits=base.test_methods(
        before=base.BEFORE_JAX_TO_NUMPY, source="""\
  @jtu.sample_product(step=[2, -1])
  @jtu.run_on_devices("cpu")
  def testNumpyToJaxNonCompactStrides(self, step):
    x = np.arange(16.0)[::step]
    self.assertAllClose(x, jnp.from_dlpack(x))
    for error in (BufferError, ValueError):
      with self.assertRaisesRegex(error, "non-compact strides"):
        jnp.from_dlpack(x, copy=False)
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` imports non-compact strided input (`x[::2]`,
`x[::-1]`, `np.broadcast_to` output) through the producer's compact copy
when `copy` allows one, instead of raising `UNIMPLEMENTED`.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
