# Typing stub for the parts of jaxlib._jax that jax-patch calls.
#
# jaxlib ships no stub for _jax from 0.6.1 on, so type checkers saw it as
# Any. This stub is partial (see __getattr__) and covers every shape the
# DLPack binding has had from jaxlib 0.4.26 to 0.10.2 as overloads.
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

# jaxlib 0.4.26 on; `copy` from 0.8.1 (extension version 384),
# `dl_device_type` from 0.10.2 (extension version 467). `stream` has no
# default: pass None explicitly.
@overload
def dlpack_managed_tensor_to_buffer(
    dlpack: Capsule, device: Device, stream: int | None,
    copy: bool | None = ..., dl_device_type: int | None = ...,
) -> ArrayImpl: ...

# The legacy form, jaxlib 0.4.26 to 0.7.1.
@overload
def dlpack_managed_tensor_to_buffer(
    dlpack: Capsule, cpu_backend: Client | None = ...,
    gpu_backend: Client | None = ...,
) -> ArrayImpl: ...

def buffer_to_dlpack_managed_tensor(
    buffer: ArrayImpl, stream: int | Any | None = ...) -> Capsule: ...

def __getattr__(name: str) -> Any: ...
