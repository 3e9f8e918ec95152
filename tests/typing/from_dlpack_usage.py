"""Real uses of jax-patch's typed API, checked by tests/typing_test.py.

With `jax-patch stubs`'s output, every line must type-check under mypy,
pyright and pyrefly, configured as the README says, except those ending in
an `E: code` comment: each checker must reject those and nothing else (mypy
with that error code).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import SingleDeviceSharding

import jax_patch
import jax_patch.dlpack
import jax_patch.numpy

source = np.arange(4.0)
cpu = jax.devices("cpu")[0]

# Every accepted device and copy.
default: jax.Array = jax_patch.from_dlpack(source)
on_device = jax_patch.from_dlpack(source, device=cpu)
on_sharding = jax_patch.from_dlpack(source, device=SingleDeviceSharding(cpu))
copied = jax_patch.from_dlpack(source, device=None, copy=True)
shared = jax_patch.from_dlpack(source, copy=False)
either = jax_patch.from_dlpack(source, copy=None)
via_numpy = jax_patch.numpy.from_dlpack(source, device=cpu, copy=False)
via_dlpack = jax_patch.dlpack.from_dlpack(source, cpu, True)
via_jnp = jnp.from_dlpack(source, device=cpu, copy=True)

# The exception classes derive from both of the types they stand for.
try:
  jax_patch.from_dlpack(source, copy=False)
except jax_patch.CopyRequiredError as copy_error:
  as_buffer_error: BufferError = copy_error
  as_value_error: ValueError = copy_error
except jax_patch.MissingDLPackMethodsError as missing:
  as_attribute_error: AttributeError = missing
  as_type_error: TypeError = missing
except jax_patch.UnsupportedDeviceError as unsupported:
  also_buffer_error: BufferError = unsupported
  also_type_error: TypeError = unsupported
except jax_patch.TransformationError as traced:
  as_runtime_error: RuntimeError = traced

# jax.Array's DLPack methods take the standard's keywords.
capsule = default.__dlpack__(stream=None, max_version=(1, 0),
                             dl_device=(1, 0), copy=False)
device_type, device_id = default.__dlpack_device__()

jax_patch.install()
jax_patch.uninstall()
with jax_patch.patched():
  pass

# NumPy arrays made to share: 64-byte aligned memory.
aligned = jax_patch.aligned_empty((2, 3), np.float32)
one_dimension = jax_patch.aligned_empty(8)
once_copied = jax_patch.aligned_copy(source)
with jax_patch.aligned_allocation():
  made_aligned = np.ones(4, np.float32)
shared_aligned: jax.Array = jax_patch.from_dlpack(made_aligned, copy=False)

# Rejected.
jax_patch.from_dlpack(source, copy="yes")  # E: arg-type
jax_patch.from_dlpack(source, cpu)  # E: call-arg
jax_patch.numpy.from_dlpack(source, cpu, True)  # E: call-arg
jax_patch.from_dlpack(source, copy=1.5)  # E: arg-type
default.__dlpack__(max_version="1.0")  # E: arg-type
jax_patch.aligned_empty(2.5)  # E: arg-type
