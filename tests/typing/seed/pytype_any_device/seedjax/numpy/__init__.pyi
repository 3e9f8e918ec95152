# The fix, as jax/_src/basearray.pyi and stubs/ spell it: Device = Any.
from typing import Any

Device = Any

def from_dlpack(x: Any, /, *, device: Device | None = None,
                copy: bool | None = None) -> Any: ...
