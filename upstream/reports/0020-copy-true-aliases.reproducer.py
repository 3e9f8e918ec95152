# jnp.from_dlpack(x, copy=True) must always copy: writing to x afterwards
# must leave the result as it was.
import jax.numpy as jnp
import numpy as np


def aligned_arange(n):
  # 64-byte aligned: jaxlib's CPU client shares only such host memory.
  raw = np.empty(n * 4 + 64, np.uint8)
  out = np.ndarray((n,), np.float32, buffer=raw, offset=-raw.ctypes.data % 64)
  out[...] = np.arange(n)
  return out


x = aligned_arange(1024)
y = jnp.from_dlpack(x, copy=True)
same_address = y.unsafe_buffer_pointer() == x.ctypes.data
x[...] = -1.0
changed = int((np.asarray(y) == -1.0).sum())
if changed:
  print(f"reproduces: after x[...] = -1, {changed} of {x.size} elements of "
        "jnp.from_dlpack(x, copy=True) read -1 (its buffer is "
        f"{'' if same_address else 'not '}at x's address)")
else:
  print("fixed: x[...] = -1 left jnp.from_dlpack(x, copy=True) unchanged")
