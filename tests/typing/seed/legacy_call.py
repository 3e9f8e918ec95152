"""The call mypy flagged in the upstream change behind jax-patch."""

from typing import Any

from jaxlib import _jax


def import_with_backends(capsule: Any, cpu_backend: _jax.Client) -> Any:
  # jax/_src/dlpack.py's legacy form, until jaxlib 0.7.2.
  return _jax.dlpack_managed_tensor_to_buffer(capsule, cpu_backend, None)
