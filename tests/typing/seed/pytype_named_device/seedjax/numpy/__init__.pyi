# The broken variant: the device type is named through jax._src.lib.
from typing import Any

from seedjax.lib import xla_client

def from_dlpack(x: Any, /, *, device: xla_client.Device | None = None,
                copy: bool | None = None) -> Any: ...
