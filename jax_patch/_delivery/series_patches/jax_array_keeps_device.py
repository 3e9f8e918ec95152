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

"""The jax-array-keeps-device pull request of the series.

Its commit subject is "dlpack: a jax.Array passed to from_dlpack keeps its
device".
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="jax-array-keeps-device",
    subject="dlpack: a jax.Array passed to from_dlpack keeps its device",
    body="""\
from_dlpack(jax_array) went through DLPack: it exported the array and
imported it again on the device __dlpack_device__ named. A CPU array
always reports device id 0, so an array on cpu:1 came back on cpu:0, and
every call paid an export and an import. A jax.Array on one device needs
no DLPack at all: from_dlpack now returns it (copy=True: a copy), placed
on `device` when one is given. copy=False with another device still
raises.

Measured on jax 0.12.0.1 with 2 CPU devices: from_dlpack(x) of an array
on cpu:1 returns an array on cpu:0.
""",
    claims=("jax_array_keeps_device",),
    edits=(
        base.Edit(base.DLPACK, """\
  if not hasattr(external_array, "__dlpack__") or not hasattr(external_array, "__dlpack_device__"):""",
                  """\
  if (isinstance(external_array, array.ArrayImpl)
      and len(external_array.sharding.device_set) == 1):
    # No DLPack round trip, which would lose a CPU array's device.
    source_device, = external_array.sharding.device_set
    _check_device(device, source_device, copy)
    return _place_array(external_array, device, source_device, copy)
  if not hasattr(external_array, "__dlpack__") or not hasattr(external_array, "__dlpack_device__"):"""),
    ),
    test_edits=base.test_methods(
        before=base.BEFORE_PINNED_HOST_ROUND_TRIP, source="""\
  def testJaxArrayKeepsItsDevice(self):
    if jax.device_count() < 2:
      self.skipTest("needs two devices")
    device = jax.devices()[1]
    x = jax.device_put(jnp.arange(4.0), device)
    self.assertEqual(jnp.from_dlpack(x).devices(), {device})
    self.assertEqual(jnp.from_dlpack(x, copy=True).devices(), {device})
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` of a `jax.Array` returns it without a DLPack
round trip, on its own device (or on `device` when given). Previously an
array on a CPU device other than the first came back on the first.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
