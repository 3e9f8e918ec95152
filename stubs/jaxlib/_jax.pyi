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
# jaxlib 0.4.35 to 0.12.0.1 (dlpack_compat calls the one the running jaxlib
# has, by extension version); 0.12 kept 0.10.2's. `stream` has no default:
# pass None explicitly.

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

# buffer_to_dlpack_managed_tensor: one overload per shape, as above.

# Every supported jaxlib: a DLPack 0.x capsule.
@overload
def buffer_to_dlpack_managed_tensor(
    buffer: ArrayImpl, stream: int | Any | None = ...) -> Capsule: ...

# jaxlib 0.12.0 on (extension version 496 in JAX's sources; the first
# release, 0.12.0, is 505): a 1.x capsule when max_version is at least (1, 0),
# marked IS_COPIED when `copied`.
@overload
def buffer_to_dlpack_managed_tensor(
    buffer: ArrayImpl, stream: int | Any | None = ...,
    max_version: tuple[int, int] | None = ..., copied: bool = ...,
) -> Capsule: ...

# jaxlib 0.12.0 on (extension version 499): the DLPack version of the
# capsules its export writes ((1, 3) on 0.12).
dlpack_version: tuple[int, int]

def __getattr__(name: str) -> Any: ...
