# The declarations jax-patch sets in jax/_src/array.py; every other line of
# that file stays upstream's. `jax-patch vendor` replaces each declaration
# below by name (jax_patch/_delivery/source_patch.py).
#
# Upstream reports device id 0 for every CPU device, so a DLPack round trip
# of an array on cpu:1 lands on cpu:0.

import enum


class ArrayImpl:

  def __dlpack_device__(self) -> tuple[enum.Enum, int]:
    from jax._src.dlpack_device import dlpack_device_of_array  # pylint: disable=g-import-not-at-top
    return dlpack_device_of_array(self)
