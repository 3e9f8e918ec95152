# A JAX array on the second CPU device reports (kDLCPU, 0), so a consumer
# that places its import on the device __dlpack_device__ names (JAX itself)
# puts it on the first CPU device.
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
import jax.numpy as jnp


class Producer:
  # Only the DLPack protocol, as a consumer other than JAX sees an array.

  def __init__(self, array):
    self.array = array

  def __dlpack__(self, **kwargs):
    return self.array.__dlpack__(**kwargs)

  def __dlpack_device__(self):
    return self.array.__dlpack_device__()


cpu1 = jax.devices("cpu")[1]
x = jax.device_put(jnp.arange(4.0), cpu1)
reported = x.__dlpack_device__()
landed = jnp.from_dlpack(Producer(x)).devices()
if reported[1] == 0 and landed != {cpu1}:
  print(f"reproduces: an array on {cpu1} reports {tuple(map(int, reported))} "
        f"and a DLPack round trip lands on {landed}")
else:
  print(f"fixed: an array on {cpu1} reports {tuple(map(int, reported))} and "
        f"a DLPack round trip lands on {landed}")
