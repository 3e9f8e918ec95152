# from_dlpack inside jit imports the producer's buffer once, at trace time:
# later calls return the values it had then, without a warning.
import warnings

import jax
import jax.numpy as jnp
import numpy as np

source = np.zeros(4, np.float32)


@jax.jit
def read_source():
  return jnp.from_dlpack(source) + 0


with warnings.catch_warnings(record=True) as caught:
  warnings.simplefilter("always")
  try:
    first = read_source()
  except Exception as err:  # An error inside jit is one fix.
    print(f"fixed: from_dlpack inside jit raises {type(err).__name__}: {err}")
    raise SystemExit(0)
source[:] = 1  # The producer writes its memory, as DLPack allows.
second = read_source()
said = [str(w.message) for w in caught if "dlpack" in str(w.message).lower()]
if said:
  print(f"fixed: from_dlpack inside jit warns: {said[0]}")
elif float(second[0]) == 0.0:
  print("reproduces: after the source changed, jit(from_dlpack) still "
        f"returns {np.asarray(second).tolist()}, the values of its first "
        "call, and nothing warned")
else:
  print("fixed: jit(from_dlpack) sees the source's new values")
