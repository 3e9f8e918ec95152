# The declarations jax-patch sets in jax/numpy/__init__.pyi; every other
# line of that file stays upstream's. `jax-patch` replaces each declaration
# below by name (jax_patch/_delivery/source_patch.py).
#
# jax 0.10.2 already declares from_dlpack this way; older lines of JAX do
# not, and get it from here.

import builtins
from typing import Any

from jax._src.basearray import Array
from jax._src.sharding import Sharding as _Sharding

_Device = Any

def from_dlpack(x: Any, /, *, device: _Device | _Sharding | None = None,
                copy: builtins.bool | None = None) -> Array: ...
