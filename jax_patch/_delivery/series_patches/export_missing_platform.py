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

"""The export-missing-platform pull request of the series.

Its commit subject is "dlpack: __dlpack__(dl_device=) of a missing platform is
a BufferError".
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="export-missing-platform",
    subject="dlpack: __dlpack__(dl_device=) of a missing platform is a BufferError",
    body="""\
jax.Array.__dlpack__(dl_device=(kDLCUDA, 0)) under a CPU-only jaxlib let
xla_bridge's RuntimeError "Unknown backend cuda" escape. The Array API
standard: __dlpack__ raises BufferError when it cannot export to the
requested device, which is what JAX already raises for a device type it
does not know. It now raises BufferError for a known one it has no
backend for too.

Measured on jax 0.12.0.1 (CPU-only): RuntimeError.
""",
    claims=("export_missing_platform_raises",),
    edits=(
        base.Edit(base.DLPACK, """\
      backend = xla_bridge.get_backend(dl_device_platform)
      device = backend.device_from_local_hardware_id(local_hardware_id)
    except KeyError:""", """\
      backend = xla_bridge.get_backend(dl_device_platform)
      device = backend.device_from_local_hardware_id(local_hardware_id)
    except RuntimeError as err:
      raise BufferError(
          f"to_dlpack: cannot export to {dl_device}: {err}") from None
    except KeyError:"""),
    ),
    test_edits=base.test_methods(
        before=base.BEFORE_TENSORFLOW_TO_JAX, source="""\
  @jtu.run_on_devices("cpu")
  def testExportToAMissingPlatformRaisesBufferError(self):
    if dlpack_src.xla_bridge.backends().get("cuda"):
      self.skipTest("needs a JAX without CUDA")
    with self.assertRaisesRegex(BufferError, "cannot export"):
      jnp.arange(4.0).__dlpack__(
          dl_device=(dlpack_src.DLDeviceType.kDLCUDA, 0))
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Bug fixes", """\
`jax.Array.__dlpack__(dl_device=...)` naming a platform this JAX has no
backend for raises `BufferError`, as the Array API standard asks, instead of
a `RuntimeError`.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
