# Once jnp.from_dlpack(x) returns, it must be done reading x. Here x is not
# 64-byte aligned, so jaxlib copies it (its CPU client shares only aligned
# host memory): writing to x right after the return must not reach the copy.
import jax.numpy as jnp
import numpy as np

SIZE = 1 << 23  # 32 MiB of float32: a copy that takes a while.
TRIES = 20
not_ready = changed = torn = 0
for _ in range(TRIES):
  x = np.ones(SIZE + 1, np.float32)[1:]  # 4 bytes into its allocation.
  assert x.ctypes.data % 64, "x must not be 64-byte aligned"
  y = jnp.from_dlpack(x)
  ready = y.is_ready()
  x[-1] = 2.0  # First where a front-to-back copy reads last.
  x[...] = 2.0
  # float32: no dtype conversion (float64 with x64 off would be converted
  # in Python, another copy), so the copy is jaxlib's.
  assert y.dtype == np.float32, y.dtype
  values = np.unique(np.asarray(y)).tolist()
  not_ready += not ready
  changed += values != [1.0]
  torn += len(values) > 1

if changed:
  print(f"reproduces: of {TRIES} imports of 32 MiB of unaligned 1.0s, "
        f"{not_ready} were not ready when from_dlpack returned, and in "
        f"{changed} the write of 2.0 to x after the return reached the "
        f"result ({torn} torn: part 1.0, part 2.0)")
else:
  print(f"fixed: of {TRIES} imports of 32 MiB of unaligned 1.0s, none "
        f"changed when x was written after the return ({not_ready} were not "
        "ready when from_dlpack returned)")
