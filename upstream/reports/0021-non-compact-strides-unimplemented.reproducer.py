# from_dlpack must import a host tensor with non-compact strides under
# copy=None or copy=True: it cannot share the memory, so it copies it.
import jax.numpy as jnp
import numpy as np

x = np.arange(16, dtype=np.float32)
sources = {
    "x[::2]": x[::2],
    "x[::-1]": x[::-1],
    "x.reshape(4, 4)[:, :2]": x.reshape(4, 4)[:, :2],
    "np.broadcast_to(x[:4], (3, 4))": np.broadcast_to(x[:4], (3, 4)),
}
refused, imported, not_exported = [], [], []
for name, source in sources.items():
  for copy in (None, True):
    try:
      y = jnp.from_dlpack(source, copy=copy)
    except BufferError as err:
      # NumPy exports no read-only array (a broadcast is one) as DLPack 0.x,
      # the only version jaxlib before 0.12 reads: jaxlib never sees it.
      if "readonly" not in str(err):
        raise
      not_exported.append(f"{name}, copy={copy}")
    except Exception as err:  # pylint: disable=broad-except
      if "compact" not in str(err):
        raise
      message = str(err).split(";")[0]
      refused.append(f"{name}, copy={copy}")
    else:
      assert np.array_equal(np.asarray(y), source), (name, copy, y)
      imported.append(f"{name}, copy={copy}")

skipped = (f"; NumPy did not export {len(not_exported)} (read-only)"
           if not_exported else "")
if refused:
  print(f"reproduces: {len(refused)} of {len(refused) + len(imported)} "
        f"imports raised {message!r} ({'; '.join(refused)}){skipped}")
else:
  print(f"fixed: all {len(imported)} imports copied the strided tensor "
        f"right{skipped}")
