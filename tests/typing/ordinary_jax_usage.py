"""Ordinary JAX, checked beside from_dlpack_usage.py by tests/typing_test.py.

With `jax-patch stubs`'s output, every checker (configured as the README
says) must accept every line, as it does with JAX's own stubs: nothing of
JAX is shadowed. The one line ending in an `E: code` comment must be
rejected, with that code under mypy: it shows JAX is typed here, not Any.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import SingleDeviceSharding

x: jax.Array = jnp.arange(6.0).reshape(2, 3)
total: jax.Array = jnp.sum(x)
mean = jnp.mean(x, axis=0)
stacked = jnp.stack([x, jnp.zeros_like(x)])
where = jnp.where(x > 1.0, x, jnp.ones((2, 3)))
product = jnp.matmul(x, x.T)
norm = jnp.linalg.norm(x)
clipped = lax.clamp(0.0, x, 1.0)


@jax.jit
def scale(y: jax.Array, factor: float) -> jax.Array:
  return y * factor


scaled: jax.Array = scale(x, 2.0)
gradient = jax.grad(lambda y: jnp.sum(y ** 2))(x)
mapped = jax.vmap(jnp.sum)(x)
activated = jax.nn.relu(x)
key = jax.random.key(0)
noise = jax.random.normal(key, (2, 3))

# jax.Array methods and attributes.
shape: tuple[int, ...] = x.shape
as_int = x.astype(jnp.int32)
flat = x.ravel()
updated = x.at[0, 0].set(1.0)
first = x[0]
host = jax.device_get(x)
device = jax.devices("cpu")[0]
placed = jax.device_put(x, SingleDeviceSharding(device))
ready = placed.block_until_ready()
capsule = x.__dlpack__()
on = x.devices()

# JAX is typed here: an attribute jax.Array lacks is an error.
x.not_an_array_method()  # E: attr-defined
