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

"""The multi-device-sharding pull request of the series.

Its commit subject is "dlpack: place imports on multi-device shardings".
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="multi-device-sharding",
    subject="dlpack: place imports on multi-device shardings",
    # copy-argument's check goes right above the lines it replaces.
    depends_on=("exception-classes", "copy-argument", "copy-true-copies",
                "jax-array-keeps-device"),
    body="""\
device= takes a Sharding, but from_dlpack refused any Sharding over more
than one device ("can only unpack a dlpack tensor onto a singular device").
It now imports onto the producer's device and device_puts the result to
the sharding, which replicates or shards it; copy=False raises the
copy-required error, since the other devices need copies. copy=True
copies before placing: a device_put between CPU devices may alias its
input, so a replicated result shared the source's memory.

Measured on jax 0.12.0.1 with 4 CPU devices:
from_dlpack(x, device=NamedSharding(mesh, P("x"))) raises ValueError.
""",
    claims=("copy_true_replicated_is_independent",
            "multi_device_sharding_shards",
            "multi_device_sharding_copy_false_raises"),
    edits=(
        base.Edit(base.DLPACK, """\
  if isinstance(device, Sharding):
    device_set = device.device_set
    if len(device_set) > 1:
      raise ValueError(
        "from_dlpack can only unpack a dlpack tensor onto a singular device, but "
        f"a Sharding with {len(device_set)} devices was provided."
      )
    device, = device_set
""", """\
  if isinstance(device, Sharding) and len(device.device_set) == 1:
    device, = device.device_set
"""),
        base.Edit(base.DLPACK, """\
  if device and dlpack_device != device:
    return device_put(_arr, device)
  if copy:
    # Finished before returning: the caller may write to the source next.
    return jnp.array(_arr, copy=True).block_until_ready()
  return _arr""", """\
  if copy:
    # Copied before placing: device_put between CPU devices may alias.
    # Finished before returning: the caller may write to the source next.
    _arr = jnp.array(_arr, copy=True).block_until_ready()
  if device and dlpack_device != device:
    return device_put(_arr, device)
  return _arr"""),
    ),
    test_edits=base.test_methods(
        before=base.BEFORE_PINNED_HOST_ROUND_TRIP, source="""\
  @jtu.run_on_devices("cpu")
  def testFromDLPackShardsOverAMesh(self):
    if jax.device_count() < 2:
      self.skipTest("needs two devices")
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
    sharding = jax.sharding.NamedSharding(mesh, P("x"))
    x = np.arange(8.0)
    y = jnp.from_dlpack(x, device=sharding)
    self.assertEqual(y.sharding, sharding)
    self.assertAllClose(x, y)
    with self.assertRaisesRegex(BufferError, "requires a copy"):
      jnp.from_dlpack(x, device=sharding, copy=False)
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("New features", """\
{func}`jax.numpy.from_dlpack` accepts a multi-device `Sharding` as `device`,
replicating or sharding the import; `copy=False` raises the copy-required
error, since the other devices need copies.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
