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

"""The fast-cpu-import pull request of the series.

Its commit subject is "dlpack: import host arrays without a stream query or a
re-wrap".
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


_FAST_CPU_IMPORT_PROBE = """\
import jax.numpy as jnp
import numpy as np
from jax._src import dlpack

def refuse(*args, **kwargs):
  raise AssertionError("from_dlpack re-wrapped a canonical import")

dlpack.jnp.asarray = refuse
x = np.arange(8, dtype=np.float32)
assert jnp.from_dlpack(x).dtype == np.float32
"""

# Last but the stubs: it edits the lines finished-at-return writes.
PATCH = base.SeriesPatch(
    slug="fast-cpu-import",
    subject="dlpack: import host arrays without a stream query or a re-wrap",
    depends_on=("finished-at-return",),
    body="""\
from_dlpack spent most of its time on two things an import of host memory
does not need. It asked the CPU device for a stream, which raised
UNIMPLEMENTED, and caught that; DLPack's stream is None for the CPU. Then
it passed jaxlib's array through jnp.asarray to canonicalise its dtype,
which costs as much as the import itself when the dtype is already
canonical. Both are now skipped: the stream is None for a CPU producer,
and jnp.asarray runs only to convert.

Measured importing a 64-element float32 NumPy array with jnp.from_dlpack
(CPU, x64 off), back to back against the unpatched tree, the fastest of 5
rounds of each: 27.2 us before, 6.4 us after (0.24x) on JAX main with
jaxlib 0.11.1; 30.2 us before, 7.8 us after (0.26x) on jax 0.12.0.1 with
jaxlib 0.12.0.1. The stream query alone, raising and caught, took about
8 us.
""",
    claims=(),
    edits=(
        base.Edit(base.DLPACK, """\
    stream = None
  else:
    try:
      stream = dlpack_device.get_stream_for_external_ready_events()""", """\
    stream = None
  elif dl_device_type == DLDeviceType.kDLCPU:
    # DLPack's stream is None for the CPU; asking the device for one raises.
    stream = None
  else:
    try:
      stream = dlpack_device.get_stream_for_external_ready_events()"""),
        base.Edit(base.DLPACK, """\
  result = _place_array(
      jnp.asarray(arr, dtype=dtypes.canonicalize_dtype(arr.dtype)), device,
      dlpack_device, copy)""", """\
  canonical_dtype = dtypes.canonicalize_dtype(arr.dtype)
  # jnp.asarray costs as much as the import itself: only to convert.
  converted = (arr if arr.dtype == canonical_dtype
               else jnp.asarray(arr, dtype=canonical_dtype))
  result = _place_array(converted, device, dlpack_device, copy)"""),
    ),
    test_edits=base.test_methods(
        before=base.BEFORE_TENSORFLOW_TO_JAX_INT64, source="""\
  @jtu.run_on_devices("cpu")
  def testCanonicalHostImportIsNotRewrapped(self):
    def refuse(*args, **kwargs):
      raise AssertionError("from_dlpack re-wrapped a canonical import")

    x = np.arange(8, dtype=np.float32)
    asarray, dlpack_src.jnp.asarray = dlpack_src.jnp.asarray, refuse
    try:
      y = jnp.from_dlpack(x)
    finally:
      dlpack_src.jnp.asarray = asarray
    self.assertEqual(y.dtype, np.float32)
    self.assertArraysEqual(y, x)
"""),
    runtime_probe=_FAST_CPU_IMPORT_PROBE,
    speed_target=0.35)


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Changes", """\
{func}`jax.numpy.from_dlpack` imports host arrays faster: it no longer asks
the CPU device for a stream, and converts jaxlib's array with
{func}`jax.numpy.asarray` only when its dtype is not canonical.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
