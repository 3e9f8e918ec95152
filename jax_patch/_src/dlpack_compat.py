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

"""Everything that depends on the JAX or jaxlib version.

This is the only module that reads version numbers. Each gate compares the
extension version jaxlib reports, never a version string, and never catches
an error to guess which shape an API has.
"""

from __future__ import annotations

from typing import Any

from jax._src import core
from jax._src import xla_bridge
from jax._src.lib import _jax
from jax._src.lib import jaxlib_extension_version

# jaxlib 0.10.2: dlpack_managed_tensor_to_buffer takes dl_device_type.
_BINDING_TAKES_DL_DEVICE_TYPE = jaxlib_extension_version >= 467
# jaxlib 0.8.1: dlpack_managed_tensor_to_buffer takes copy.
_BINDING_TAKES_COPY = jaxlib_extension_version >= 384

# The error jaxlib raises when a runtime call fails.
RuntimeErrorType: type[Exception] = _jax.JaxRuntimeError


def import_legacy_capsule(capsule: Any, device: Any, stream: int | None,
                          dl_device_type: int) -> Any:
  """Hands a DLPack 0.x capsule to jaxlib, which must not copy it.

  Returns:
    The ``ArrayImpl`` aliasing the capsule's memory; jaxlib has consumed the
    capsule.

  Raises:
    RuntimeErrorType: jaxlib cannot alias the memory; the capsule is then
      left unconsumed.
  """
  return _import(capsule, device, stream, dl_device_type, False)


# Whether jaxlib can be asked to copy an unaligned host buffer itself.
JAXLIB_COPIES_UNALIGNED = _BINDING_TAKES_COPY


def import_copying_unaligned(capsule: Any, device: Any,
                             dl_device_type: int) -> Any:
  """Hands jaxlib a compact but unaligned host capsule to copy itself.

  Only for ``JAXLIB_COPIES_UNALIGNED``. jaxlib's copy is the cheapest for
  small arrays and the slowest for large ones.

  Raises:
    RuntimeErrorType: jaxlib cannot import it (say, non-compact strides);
      the capsule is then left unconsumed.
  """
  return _import(capsule, device, None, dl_device_type, None)


def _import(capsule: Any, device: Any, stream: int | None,
            dl_device_type: int, copy: bool | None) -> Any:
  if _BINDING_TAKES_DL_DEVICE_TYPE:
    return _jax.dlpack_managed_tensor_to_buffer(
        capsule, device, stream, copy, dl_device_type)
  if _BINDING_TAKES_COPY:
    return _jax.dlpack_managed_tensor_to_buffer(capsule, device, stream, copy)
  return _jax.dlpack_managed_tensor_to_buffer(capsule, device, stream)


def export_legacy_capsule(buffer: Any, stream: int | Any | None) -> Any:
  """Returns a DLPack 0.x capsule aliasing a single-device ``ArrayImpl``."""
  return _jax.buffer_to_dlpack_managed_tensor(buffer, stream=stream)


def is_tracing() -> bool:
  """Whether a JAX transformation (jit, vmap, grad, ...) is being traced."""
  return not core.trace_ctx.is_top_level()

# jaxlib aliases host memory only at this alignment (XLA's CPU minimum).
CPU_ZERO_COPY_ALIGNMENT = 64


def backends() -> dict[str, Any]:
  """``xla_bridge.backends()``, without its locking once initialised.

  The dict is replaced, not mutated, when JAX clears its backends, so its
  identity tells a cache of devices when to start over.
  """
  initialised: dict[str, Any] = xla_bridge._backends  # pylint: disable=protected-access
  return initialised or xla_bridge.backends()
