# A DLPack capsule whose deleter is NULL (DLPack allows one) must import,
# and the import must be freed, without killing the process.
import ctypes
import gc
import sys

import jax.numpy as jnp
import numpy as np

capsule_function = ctypes.PYFUNCTYPE(
    ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
get_pointer = capsule_function(("PyCapsule_GetPointer", ctypes.pythonapi))
is_valid = capsule_function(("PyCapsule_IsValid", ctypes.pythonapi))
# Where the deleter lies: DLManagedTensorVersioned is {version (2 x uint32),
# manager_ctx, deleter, flags, dl_tensor}; DLManagedTensor is {dl_tensor
# (48 bytes), manager_ctx, deleter}.
DELETER_OFFSET = {b"dltensor_versioned": 16, b"dltensor": 56}


class NullDeleterProducer:
  # NumPy's capsule, of the DLPack version the consumer asks for, with its
  # deleter set to NULL. It keeps NumPy's deleter, to call it itself once
  # the consumer is done, so that nothing leaks.

  def __init__(self, array):
    self.array = array
    self.to_release = []
    self.kind = None

  def __dlpack__(self, **kwargs):
    capsule = self.array.__dlpack__(**kwargs)
    name = next(n for n in DELETER_OFFSET if is_valid(capsule, n))
    managed = get_pointer(capsule, name)
    deleter = ctypes.c_void_p.from_address(managed + DELETER_OFFSET[name])
    self.to_release.append((managed, deleter.value))
    deleter.value = None
    self.kind = name.decode()
    print(f"importing a {self.kind!r} capsule whose deleter is NULL",
          file=sys.stderr, flush=True)
    return capsule

  def __dlpack_device__(self):
    return (1, 0)  # kDLCPU, device 0


# 64-byte aligned, so that jaxlib's CPU client imports it as a view.
raw = np.empty(16 * 4 + 64, np.uint8)
x = np.ndarray((16,), np.float32, buffer=raw, offset=-raw.ctypes.data % 64)
x[...] = np.arange(16)
producer = NullDeleterProducer(x)
try:
  y = jnp.from_dlpack(producer)
except RuntimeError as err:
  if "bad_function_call" not in str(err):
    raise
  result = (f"reproduces: from_dlpack of a {producer.kind!r} capsule raised "
            f"{type(err).__name__}: {err}")
else:
  assert np.asarray(y).tolist() == list(range(16)), np.asarray(y)
  y.delete()  # Frees the imported buffer: the process aborts here.
  del y
  gc.collect()
  result = (f"fixed: imported a {producer.kind!r} capsule whose deleter is "
            "NULL, read it and deleted it")
# The producer's own clean-up, now that JAX is done with its memory.
for managed, deleter in producer.to_release:
  ctypes.CFUNCTYPE(None, ctypes.c_void_p)(deleter)(managed)
print(result)
