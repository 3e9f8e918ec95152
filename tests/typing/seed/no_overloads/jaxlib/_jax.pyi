# The broken variant: the binding's legacy form is missing (no overloads),
# and devices are a named class.

from typing import Any

class Device: ...
class Client: ...

def dlpack_managed_tensor_to_buffer(
    dlpack: Any, device: Device, stream: int | None) -> Any: ...
