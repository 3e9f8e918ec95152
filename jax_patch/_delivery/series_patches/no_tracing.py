# Copyright 2026 The jax-patch Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""The deprecate-under-transformations pull request of the series.

Its commit subject is "dlpack: deprecate from_dlpack inside JAX
transformations".

A new restriction, so it follows JAX's API compatibility policy: a
DeprecationWarning for at least three months, then the error. JAX's own
mechanism (``jax._src.deprecations``) makes the warning an error where the
deprecation is accelerated, which is what jax_patch's runtime does now.
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base

# JAX's id for the deprecation (jax._src.deprecations.register).
DEPRECATION_ID = "jax-dlpack-from-dlpack-traced"
# The review that asked for it.
REVIEW = "https://github.com/jax-ml/jax/pull/20175"

# Each call that works upstream still works, with the warning; or, the
# deprecation accelerated (jax_patch's runtime), raises. Upstream, each
# works without a word.
_PROBE = f"""\
import warnings

import jax
import jax.numpy as jnp
import numpy as np

x = np.zeros(4 + 16, np.float32)
x = x[(-x.ctypes.data % 64) // 4:][:4]  # Aligned: copy=False imports it.
x[...] = np.arange(4)
ones = jnp.ones(4)


def compile_time_eval():
  with jax.ensure_compile_time_eval():
    return jnp.from_dlpack(x)


transformed = {{
    "jit": (lambda: jax.jit(lambda: jnp.from_dlpack(x))(), x),
    "jit, copy=True": (
        lambda: jax.jit(lambda: jnp.from_dlpack(x, copy=True))(), x),
    "jit, copy=False": (
        lambda: jax.jit(lambda: jnp.from_dlpack(x, copy=False))(), x),
    "vmap": (lambda: jax.vmap(lambda y: y + jnp.from_dlpack(x))(
        jnp.ones((2, 4))), np.stack([x + 1, x + 1])),
    "grad": (lambda: jax.grad(lambda y: (y * jnp.from_dlpack(x)).sum())(
        ones), x),
    "jvp": (lambda: jax.jvp(lambda y: y * jnp.from_dlpack(x), (ones,),
                            (ones,))[1], x),
    # Still traced: jit keeps the result, evaluated once, as a constant.
    "jit, ensure_compile_time_eval": (jax.jit(compile_time_eval), x),
}}
for name, (call, expected) in transformed.items():
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
      result = call()
    except RuntimeError as err:  # The deprecation, accelerated.
      assert "inside a JAX transformation" in str(err), (name, err)
      continue
  said = [str(w.message) for w in caught
          if issubclass(w.category, DeprecationWarning)]
  assert any("{REVIEW}" in message for message in said), (name, said)
  np.testing.assert_array_equal(np.asarray(result), expected, err_msg=name)
# Outside any transformation nothing changes.
with warnings.catch_warnings():
  warnings.simplefilter("error")
  np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(x)), x)
"""

PATCH = base.SeriesPatch(
    slug="deprecate-under-transformations",
    subject="dlpack: deprecate from_dlpack inside JAX transformations",
    depends_on=("copy-argument",),
    body=f"""\
from_dlpack reads an external, mutable buffer that tracing cannot follow.
Inside jit (or vmap, grad, scan) it imports the buffer at trace time and
bakes its contents into the trace as a constant: later calls silently
use the stale values, and writes to the source never show. In the review
that added device= and copy=, jakevdp wrote that from_dlpack "should
basically fail within any transformation ... its semantics are impure"
({REVIEW}).

Code that works today does call it there (eager vmap, grad and jvp, jit
under jax.ensure_compile_time_eval(), jit with any copy=), so, as JAX's
API compatibility policy asks of a new restriction, from_dlpack now warns
with a DeprecationWarning inside any transformation, citing that review
and saying what to do instead (import outside, pass the array in). The
warning becomes a RuntimeError once the deprecation is accelerated
({DEPRECATION_ID}), no sooner than three months after
the release that first warns. Outside transformations nothing changes.

Measured on jax 0.12.0.1: jit(lambda: jnp.from_dlpack(x))() returns the
values x had at the first call, after x has changed, without a warning.
""",
    claims=(),
    runtime_probe=_PROBE,
    edits=(
        base.Edit(base.DLPACK, "from jax._src import array\n",
                  "from jax._src import array\nfrom jax._src import core\n"
                  "from jax._src import deprecations\n"),
        base.Edit(base.DLPACK, """\
  copy = _check_copy_argument(copy)
""", f"""\
  if not core.trace_state_clean():
    deprecations.warn(
        "{DEPRECATION_ID}",
        "jnp.from_dlpack inside a JAX transformation (jit, vmap, grad, "
        "scan, ...) is deprecated and will raise an error in a future "
        "release: it reads an external buffer that tracing cannot follow, "
        "so the trace keeps the buffer's contents at trace time. Import "
        "outside the transformation and pass the array in. See "
        "{REVIEW}.",
        stacklevel=2, error_class=RuntimeError)
    with core.eval_context():
      if core.trace_state_clean():
        # Until then, imported as outside the transformation, whose trace
        # keeps the result as a constant, as it did before.
        return from_dlpack(external_array, device=device, copy=copy)
  copy = _check_copy_argument(copy)
"""),
        base.Edit(base.DEPRECATIONS, "register('jax-array-numpy-dtype')\n",
                  "register('jax-array-numpy-dtype')\n"
                  f"register('{DEPRECATION_ID}')\n"),
    ),
    test_edits=base.test_methods(f"""\
  @jtu.run_on_devices("cpu")
  def testFromDLPackInsideTransformationsIsDeprecated(self):
    x = np.arange(4.0)
    if deprecations.is_accelerated("{DEPRECATION_ID}"):
      expected = self.assertRaisesRegex(
          RuntimeError, "inside a JAX transformation")
    else:
      expected = self.assertWarnsRegex(
          DeprecationWarning, "inside a JAX transformation")
    with expected:
      jax.jit(lambda: jnp.from_dlpack(x))()
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      self.assertAllClose(x, jnp.from_dlpack(x))
""") + (base.Edit(base.INTEROP_TEST, """\
from jax._src import config
""", """\
from jax._src import config
from jax._src import deprecations
"""),))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Deprecations", """\
{func}`jax.numpy.from_dlpack` inside a JAX transformation (`jit`, `vmap`,
`grad`, ...) is deprecated and warns with a `DeprecationWarning`: it bakes
the external buffer's contents at trace time into the trace as a constant.
It will raise an error in a release at least three months after this one.
Import outside the transformation and pass the array in.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
