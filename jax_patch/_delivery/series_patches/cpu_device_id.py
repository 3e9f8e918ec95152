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

"""The cpu-dlpack-device-id pull request of the series.

Its commit subject is "array: __dlpack_device__ reports a CPU array's own
device id".
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="cpu-dlpack-device-id",
    subject="array: __dlpack_device__ reports a CPU array's own device id",
    body="""\
jax.Array.__dlpack_device__ returned (kDLCPU, 0) for every CPU array, so
a consumer that places the import on the device it names (JAX itself, via
device_from_local_hardware_id) put an array from cpu:1 on cpu:0. It now
returns the device's local hardware id, as it does for GPUs.

Measured on jax 0.12.0.1 with 2 CPU devices: an array on cpu:1 reports
(kDLCPU, 0), and a DLPack round trip through any wrapper lands on cpu:0.
""",
    claims=("dlpack_round_trip_keeps_device",),
    edits=(
        base.Edit(base.ARRAY, """\
    if self.platform() == "cpu":
      return DLDeviceType.kDLCPU, 0""", """\
    if self.platform() == "cpu":
      return DLDeviceType.kDLCPU, _get_device(self).local_hardware_id or 0"""),
    ),
    test_edits=base.test_methods(
        before=base.BEFORE_JAX_ARRAY_ROUND_TRIP, source="""\
  @jtu.run_on_devices("cpu")
  def testCpuDLPackDeviceHasTheDeviceId(self):
    if jax.device_count() < 2:
      self.skipTest("needs two devices")
    x = jax.device_put(jnp.arange(4.0), jax.devices()[1])
    self.assertEqual(x.__dlpack_device__()[1], 1)
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Bug fixes", """\
`jax.Array.__dlpack_device__` reports a CPU array's own device id instead
of 0 for every CPU device.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
