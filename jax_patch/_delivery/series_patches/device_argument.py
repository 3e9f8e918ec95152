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

"""The pull request "dlpack: from_dlpack checks device" (device-argument)."""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="device-argument",
    subject="dlpack: from_dlpack checks device",
    body="""\
from_dlpack passed `device` on unchecked: a device that is neither None, a
jax.Device nor a Sharding (say "cpu") reached device_put, which raised a
ValueError about what device_put accepts, not naming from_dlpack. The
Array API standard types `device` as Optional[device], and JAX's signature
as Device | Sharding | None.

from_dlpack now raises, before it asks the producer for its data, a
TypeError naming from_dlpack and the type it got, which is also a
ValueError, as code catching device_put's error expects.

Measured on jax 0.12.0.1 (CPU): from_dlpack(np.arange(4.0), device="cpu")
raises device_put's ValueError.
""",
    claims=("device_string_raises",),
    edits=(
        # Around _check_device's first line: the lines before _place_array
        # are copy-argument's, and those further down exception-classes'.
        base.Edit(base.DLPACK, """\
def _check_device(device, dlpack_device, copy):
""", """\
class _InvalidDeviceError(TypeError, ValueError):
  \"\"\"``device`` is neither a Device, a Sharding nor None.

  A TypeError, and a ValueError, as device_put raised before.
  \"\"\"

def _check_device(device, dlpack_device, copy):
  if device is not None and not isinstance(device, (_jax.Device, Sharding)):
    raise _InvalidDeviceError(
        "from_dlpack: device must be None, a jax.Device or a "
        f"jax.sharding.Sharding, got {device!r} of type "
        f"{type(device).__name__}.")
"""),
    ),
    test_edits=base.test_methods(before=base.BEFORE_JAX_ROUND_TRIP, source="""\
  def testDeviceMustBeADeviceOrSharding(self):
    x = np.arange(4.0)
    for error in (TypeError, ValueError):
      with self.assertRaisesRegex(error, "from_dlpack: device must be"):
        jnp.from_dlpack(x, device="cpu")
    device = jax.devices()[0]
    for placement in (device, jax.sharding.SingleDeviceSharding(device)):
      self.assertEqual(jnp.from_dlpack(x, device=placement).devices(),
                       {device})
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Changes", """\
{func}`jax.dlpack.from_dlpack` and {func}`jax.numpy.from_dlpack` raise a
`TypeError` (also a `ValueError`, as before) naming `from_dlpack` for a
`device` that is neither `None`, a {class}`jax.Device` nor a
{class}`jax.sharding.Sharding`.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
