# A host array in a compact but not row-major layout (x.T, a permutation)
# imported by from_dlpack must keep its values when jax.device_put moves it
# to another device.
import os

# Two CPU devices; read when JAX starts its CPU backend.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2")

import jax
import jax.numpy as jnp
import numpy as np


def aligned_arange(shape):
  # 64-byte aligned: jaxlib's CPU client shares only such host memory.
  n = int(np.prod(shape))
  raw = np.empty(n * 4 + 64, np.uint8)
  out = np.ndarray(shape, np.float32, buffer=raw,
                   offset=-raw.ctypes.data % 64)
  out[...] = np.arange(n).reshape(shape)
  return out


other = jax.devices()[1]
wrong, right, cannot_compute = [], [], []
for shape, axes in (((4, 6), (1, 0)), ((2, 3, 4), (1, 2, 0)),
                    ((2, 3, 4), (2, 1, 0))):
  x = aligned_arange(shape).transpose(axes)
  name = f"arange{shape}.transpose{axes}"
  y = jnp.from_dlpack(x)
  aliased = y.unsafe_buffer_pointer() == x.ctypes.data
  try:
    here = np.asarray(y * 1)
  except AssertionError as err:
    # JAX before 0.5.1 computes with no such alias, moved or not ("Unexpected
    # XLA layout override"): a failure other than this one.
    if "layout" not in str(err):
      raise
    assert np.array_equal(np.asarray(jax.device_put(y, other)), x), name
    cannot_compute.append(f"{name}: {str(err).split(':')[0]}")
    continue
  # The import itself must be right, or this is another bug.
  assert np.array_equal(here, x), f"{name} imports wrong values"
  moved = np.asarray(jax.device_put(y, other) * 1)
  bad = int((moved != x).sum())
  (wrong if bad else right).append(
      f"{name}{' (aliased)' if aliased else ''}: "
      + (f"{bad} of {x.size} wrong" if bad else "right"))

if wrong:
  print("reproduces: jax.device_put(jnp.from_dlpack(x), jax.devices()[1]) "
        "* 1 differs from x: " + "; ".join(wrong + right))
else:
  seen = right + [f"{c}, computing on either device" for c in cannot_compute]
  print("fixed: no move computed wrong values: " + "; ".join(seen))
