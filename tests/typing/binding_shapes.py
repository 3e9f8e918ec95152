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
      _jax.buffer_to_dlpack_managed_tensor(capsule, stream=None),
  ]


def misuse(capsule: Any, device: Any) -> None:
  _jax.dlpack_managed_tensor_to_buffer(capsule, device, None, "yes")  # E: call-overload
  _jax.dlpack_managed_tensor_to_buffer(capsule, device, stream="1")  # E: call-overload
  _jax.dlpack_managed_tensor_to_buffer(capsule, device, None, None, 1, 2)  # E: call-overload
