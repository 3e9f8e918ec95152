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

"""The pull request "dlpack: from_dlpack raises inside JAX transformations"
(raise-under-transformations).
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="raise-under-transformations",
    subject="dlpack: from_dlpack raises inside JAX transformations",
    depends_on=("exception-classes",),
    body="""\
from_dlpack reads an external, mutable buffer that tracing cannot follow.
Inside jit (or vmap, grad, scan) it imported the buffer at trace time and
baked its contents into the trace as a constant: later calls silently
used the stale values, and writes to the source never showed. The
maintainers said, when device/copy were added, that it should fail inside
transformations; it now raises a RuntimeError saying so, and what to do
instead (import outside, pass the array in).

Measured on jax 0.12.0.1: jit(lambda: jnp.from_dlpack(x))() returns the
values x had at the first call, after x has changed.
""",
    claims=("inside_jit_raises", "inside_vmap_raises", "inside_grad_raises",
            "inside_scan_raises"),
    edits=(
        base.Edit(base.DLPACK, "from jax._src import array\n",
                  "from jax._src import array\nfrom jax._src import core\n"),
        base.Edit(base.DLPACK, """\
  copy = _check_copy_argument(copy)
""", """\
  if not core.trace_state_clean():
    raise RuntimeError(
        "from_dlpack cannot be called inside a JAX transformation (jit, "
        "vmap, grad, scan, ...): it reads an external buffer that tracing "
        "cannot follow, and the trace would keep its current contents. "
        "Import outside the transformation and pass the array in.")
  copy = _check_copy_argument(copy)
"""),
    ),
    test_edits=base.test_methods("""\
  @jtu.run_on_devices("cpu")
  def testFromDLPackRaisesInsideJit(self):
    x = np.arange(4.0)
    with self.assertRaisesRegex(RuntimeError, "inside a JAX transformation"):
      jax.jit(lambda: jnp.from_dlpack(x))()
    with self.assertRaisesRegex(RuntimeError, "inside a JAX transformation"):
      jax.vmap(lambda y: y + jnp.from_dlpack(x))(jnp.ones((2, 4)))
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Changes", """\
{func}`jax.numpy.from_dlpack` raises inside JAX transformations (`jit`,
`vmap`, `grad`, ...) instead of baking the external buffer's current
contents into the trace as a constant. Import outside the transformation
and pass the array in.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
