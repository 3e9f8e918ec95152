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

"""The foreign-platform-host-copy pull request of the series.

Its commit subject is "dlpack: import a host copy from a platform JAX has no
backend for".
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="foreign-platform-host-copy",
    subject="dlpack: import a host copy from a platform JAX has no backend for",
    depends_on=("exception-classes",),
    body="""\
from_dlpack of a CUDA tensor under a CPU-only jaxlib raised RuntimeError
"Unknown backend cuda", also with device= a CPU device. The DLPack
protocol lets a consumer ask the producer for a copy on another device:
from_dlpack now asks for a host copy (dl_device=(kDLCPU, 0), copy=True,
stream=None, since no stream of that platform exists here) when device=
is on the CPU, and otherwise raises BufferError saying to pass device=.
Pinned host memory (kDLCUDAHost) of a missing platform is asked the
same way. copy=False raises the copy-required error.

Measured on jax 0.12.0.1 (CPU-only): a producer reporting kDLCUDA raises
RuntimeError, with or without device=jax.devices("cpu")[0].
""",
    claims=("foreign_platform_imports_host_copy",
            "foreign_platform_without_device_raises",
            "cuda_host_source_gets_no_stream"),
    edits=(
        base.Edit(base.DLPACK, """\
  backend = xla_bridge.get_backend(dl_device_platform)
  dlpack_device = backend.device_from_local_hardware_id(device_id)
""", """\
  try:
    backend = xla_bridge.get_backend(dl_device_platform)
  except RuntimeError:
    # No backend for the producer's platform (a CUDA tensor under a
    # CPU-only jaxlib): only a host copy can be imported.
    return _import_host_copy(external_array, device, copy)
  dlpack_device = backend.device_from_local_hardware_id(device_id)
"""),
        # After _is_tensorflow_tensor: strided-input adds its helper before.
        base.Edit(base.DLPACK, """\
def from_dlpack(external_array,""", """\
def _import_host_copy(external_array, device, copy):
  \"\"\"Imports the producer's host copy, placed on ``device`` (on the CPU).\"\"\"
  devices = device.device_set if isinstance(device, Sharding) else {device}
  if device is None or any(d.platform != "cpu" for d in devices):
    raise BufferError(
        "from_dlpack: JAX has no backend for the array's platform. Pass "
        "device= a CPU device to import a copy on the host.")
  if copy is False:
    raise _CopyRequiredError(
        "Specified a CPU device, which requires a copy since the array's "
        "platform has no backend here, however copy=False. Set copy=True "
        "or copy=None to perform the requested operation.")
  dlpack = external_array.__dlpack__(
      stream=None, dl_device=(DLDeviceType.kDLCPU, 0), copy=True)
  cpu = xla_bridge.get_backend("cpu").local_devices()[0]
  arr = _jax.dlpack_managed_tensor_to_buffer(
      dlpack, cpu, None, None, int(DLDeviceType.kDLCPU))
  arr = jnp.asarray(arr, dtype=dtypes.canonicalize_dtype(arr.dtype))
  return _place_array(arr, device, cpu, None)

def from_dlpack(external_array,"""),
    ),
    test_edits=base.test_methods(
        before=base.BEFORE_TPU_HOST_BUFFER_DMA_MAP, source="""\
  @jtu.run_on_devices("cpu")
  def testForeignPlatformImportsAHostCopy(self):
    if (jax.default_backend() != "cpu"
        or dlpack_src.xla_bridge.backends().get("cuda")):
      self.skipTest("needs a JAX without CUDA")

    class CudaTensor:
      def __init__(self):
        self.calls = []

      def __dlpack_device__(self):
        return (dlpack_src.DLDeviceType.kDLCUDA, 0)

      def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        if kwargs.get("dl_device") != (dlpack_src.DLDeviceType.kDLCPU, 0):
          raise BufferError("only host copies")
        return np.arange(4.0).__dlpack__(copy=True)

    tensor = CudaTensor()
    with self.assertRaisesRegex(BufferError, "device="):
      jnp.from_dlpack(tensor)
    y = jnp.from_dlpack(tensor, device=jax.devices("cpu")[0])
    self.assertAllClose(np.arange(4.0), y)
    self.assertIsNone(tensor.calls[-1]["stream"])
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("New features", """\
{func}`jax.numpy.from_dlpack` of an array on a platform this JAX has no
backend for (a CUDA tensor under a CPU-only jaxlib) asks the producer for a
host copy when `device` is a CPU device, and otherwise raises `BufferError`
saying to pass one.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
