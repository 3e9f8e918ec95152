# Typing stub for the parts of jaxlib's extension module that jax-patch calls.
#
# The module is jaxlib.xla_extension up to jaxlib 0.6.0 and jaxlib._jax from
# 0.6.1; jaxlib.xla_client names it _xla on every version, and
# jax_patch/_src/dlpack_compat.py type-checks it as this stub. jaxlib ships
# no stub for _jax, so type checkers saw it as Any. This stub is partial (see
# __getattr__).
#
# Devices and clients are Any, as jax/_src/basearray.pyi spells Device: a
# named device type that a checker cannot resolve (pytype on
# jax._src.lib.xla_client.Device) fails the whole import.

from typing import Any, overload

Device = Any
Client = Any
ArrayImpl = Any
# A PyCapsule: types.CapsuleType exists only from Python 3.13.
Capsule = Any

class JaxRuntimeError(RuntimeError): ...

# dlpack_managed_tensor_to_buffer: one overload per shape it has had from
# jaxlib 0.4.35 to 0.10.2 (dlpack_compat calls the one the running jaxlib
# has, by extension version). `stream` has no default: pass None explicitly.

# Every supported jaxlib.
@overload
def dlpack_managed_tensor_to_buffer(
    dlpack: Capsule, device: Device, stream: int | None) -> ArrayImpl: ...

# jaxlib 0.8.1 on (extension version 384): `copy`.
@overload
def dlpack_managed_tensor_to_buffer(
    dlpack: Capsule, device: Device, stream: int | None,
    copy: bool | None) -> ArrayImpl: ...

# jaxlib 0.10.2 on (extension version 467): `dl_device_type`.
@overload
def dlpack_managed_tensor_to_buffer(
    dlpack: Capsule, device: Device, stream: int | None,
    copy: bool | None, dl_device_type: int | None) -> ArrayImpl: ...

# The legacy form, jaxlib 0.4.26 to 0.7.1: backends instead of a device.
@overload
def dlpack_managed_tensor_to_buffer(
    dlpack: Capsule, cpu_backend: Client | None = ...,
    gpu_backend: Client | None = ...,
) -> ArrayImpl: ...

# Every supported jaxlib.
def buffer_to_dlpack_managed_tensor(
    buffer: ArrayImpl, stream: int | Any | None = ...) -> Capsule: ...

def __getattr__(name: str) -> Any: ...
