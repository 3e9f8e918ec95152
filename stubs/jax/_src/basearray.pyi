# The declarations jax-patch sets in jax/_src/basearray.pyi; every other
# line of that file stays upstream's. `jax-patch` replaces each declaration
# below by name (jax_patch/_delivery/source_patch.py) and adds those upstream lacks
# after the one before them here.
#
# Upstream declares `__dlpack__(self) -> Any` with no keywords and no
# `__dlpack_device__`, so `x.__dlpack__(max_version=(1, 0))` fails mypy.

from typing import Any

class Array:
  def __dlpack__(self, *, stream: int | Any | None = None,
                 max_version: tuple[int, int] | None = None,
                 dl_device: tuple[Any, int] | None = None,
                 copy: bool | None = None) -> Any: ...
  # (DLDeviceType, device_id); the enum lives in jax._src.typing, which
  # imports this module.
  def __dlpack_device__(self) -> tuple[Any, int]: ...
