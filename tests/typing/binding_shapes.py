"""Every shape of jaxlib's DLPack binding, as stubs/jaxlib/_jax.pyi types it.

tests/typing_test.py checks that mypy reports exactly the lines marked
`# E: code`, and that pytype accepts the calls above them.
"""

from typing import Any

from jaxlib import _jax


def every_shape(capsule: Any, device: Any, client: Any) -> list[Any]:
  return [
      # Every supported jaxlib.
      _jax.dlpack_managed_tensor_to_buffer(capsule, device, None),
      _jax.dlpack_managed_tensor_to_buffer(capsule, device, stream=None),
      # jaxlib 0.8.1 on.
      _jax.dlpack_managed_tensor_to_buffer(capsule, device, None, False),
      _jax.dlpack_managed_tensor_to_buffer(capsule, device, None, copy=None),
      # jaxlib 0.10.2 on.
      _jax.dlpack_managed_tensor_to_buffer(capsule, device, None, None, 1),
      _jax.dlpack_managed_tensor_to_buffer(
          capsule, device, None, copy=True, dl_device_type=2),
      # jaxlib 0.4.26 to 0.7.1.
      _jax.dlpack_managed_tensor_to_buffer(capsule),
      _jax.dlpack_managed_tensor_to_buffer(capsule, cpu_backend=client),
      _jax.dlpack_managed_tensor_to_buffer(capsule, client, client),
      # Export, every supported jaxlib.
      _jax.buffer_to_dlpack_managed_tensor(capsule),
      _jax.buffer_to_dlpack_managed_tensor(capsule, stream=None),
      # jaxlib 0.12.0 on.
      _jax.buffer_to_dlpack_managed_tensor(capsule, None, (1, 3), True),
      _jax.buffer_to_dlpack_managed_tensor(
          capsule, stream=None, max_version=(1, 0)),
      _jax.buffer_to_dlpack_managed_tensor(
          capsule, stream=None, max_version=None, copied=True),
  ]


def dlpack_version() -> tuple[int, int]:
  # jaxlib 0.12.0 on.
  return _jax.dlpack_version


def misuse(capsule: Any, device: Any) -> None:
  _jax.dlpack_managed_tensor_to_buffer(capsule, device, None, "yes")  # E: call-overload
  _jax.dlpack_managed_tensor_to_buffer(capsule, device, stream="1")  # E: call-overload
  _jax.dlpack_managed_tensor_to_buffer(capsule, device, None, None, 1, 2)  # E: call-overload
  _jax.buffer_to_dlpack_managed_tensor(capsule, max_version=1)  # E: call-overload
  _jax.buffer_to_dlpack_managed_tensor(capsule, None, (1, 0), "yes")  # E: call-overload
  _jax.buffer_to_dlpack_managed_tensor(capsule, None, (1, 0), False, 2)  # E: call-overload


def dlpack_version_misuse() -> tuple[int, int, int]:
  return _jax.dlpack_version  # E: return-value
