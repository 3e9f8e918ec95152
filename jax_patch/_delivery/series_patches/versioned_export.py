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

"""The pull request "dlpack: export DLPack 1.x capsules, READ_ONLY or
IS_COPIED" (versioned-export).

In two forms: PATCH, for a target whose every jaxlib is older than 0.12
(from jaxlib 0.12 on, none of it is needed), and PATCH_BEFORE_JAXLIB_0_12,
gated on jaxlib_extension_version, for a target whose jaxlib range reaches
0.12.
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base
from jax_patch._delivery.series_patches import capsule_module


_VERSIONED_EXPORT_BODY = """\
jax.Array.__dlpack__(max_version=(1, 0)) returned a DLPack 0.x capsule
where jaxlib is older than 0.12, which exports nothing newer: a consumer
could not tell that the buffer, which it aliases, must not be written
(JAX arrays are immutable), nor that copy=True had copied. The DLPack
Python specification has a producer return a 1.x capsule to a consumer
that asks for one, with READ_ONLY set for memory the consumer must not
write and IS_COPIED for a copy.

The export now wraps jaxlib's 0.x capsule in a 1.0 one (the tensor is not
copied), flagged READ_ONLY when it aliases the array and IS_COPIED when
it holds a copy, with dlpack_capsule.as_versioned_capsule. A consumer that
asks for no version still gets jaxlib's 0.x capsule.
"""

_VERSIONED_EXPORT_CLAIMS = ("export_versioned_read_only",
                            "export_copy_true_is_copied")

_VERSIONED_EXPORT_TESTS = base.test_methods("""\
  @jtu.run_on_devices("cpu")
  def testVersionedExportSaysReadOnlyOrCopied(self):
    x = jnp.arange(4.0)
    shared = np.from_dlpack(x)
    self.assertFalse(shared.flags.writeable)
    self.assertEqual(shared.__array_interface__["data"][0],
                     x.unsafe_buffer_pointer())
    copied = np.from_dlpack(x, copy=True)
    self.assertNotEqual(copied.__array_interface__["data"][0],
                        x.unsafe_buffer_pointer())
""")


# Both forms: jaxlib's export, wrapped as 1.0 for a consumer that asks.
_WRAPS_LEGACY_EXPORT = base.Edit(base.DLPACK, """\
  return _jax.buffer_to_dlpack_managed_tensor(
    arr.addressable_data(0), stream=stream
  )
""", """\
  dlpack = _jax.buffer_to_dlpack_managed_tensor(
    arr.addressable_data(0), stream=stream
  )
  if max_version is None or max_version < (1, 0):
    return dlpack
  # jaxlib before 0.12 exports only 0.x capsules, which cannot say READ_ONLY.
  return dlpack_capsule.as_versioned_capsule(
      dlpack, dlpack_capsule.FLAG_READ_ONLY if arr is x
      else dlpack_capsule.FLAG_IS_COPIED)
""")


def _passes_max_version(branch: str) -> base.Edit:
  """Has one of to_dlpack's two (alike) ``_to_dlpack`` calls pass it on."""
  call = f"""\
    # {branch}
    return _to_dlpack(
      x, stream=stream,
      src_device=src_device,
      device=device,
      copy=copy"""
  return base.Edit(base.DLPACK, call + "\n    )\n",
                   call + ",\n      max_version=max_version,\n    )\n")


PATCH = base.SeriesPatch(
    slug="versioned-export",
    subject="dlpack: export DLPack 1.x capsules, READ_ONLY or IS_COPIED",
    speed_cost="""\
NumPy asks for a DLPack 1.x capsule; jaxlib before 0.12 exports 0.x only, so
__dlpack__(max_version=(1, x)) now wraps jaxlib's export in a 1.0 capsule:
np.from_dlpack of a 64-element JAX array went from about 2.1 to 5.6 us
(2.7x; jaxlib 0.11.1, this 2-core machine, the fastest of 5 alternating
rounds). A consumer asking for 0.x pays nothing; a release whose jaxlib range
reaches 0.12 gets the wrapper behind jaxlib_extension_version (0.12.0.1
with jaxlib 0.12: 1.00x).
""",
    depends_on=("versioned-import",),
    body=_VERSIONED_EXPORT_BODY + """
Measured on jax main with jaxlib 0.11.1: np.from_dlpack(jnp.arange(4.0))
is writable, and aliases the array.
""",
    claims=_VERSIONED_EXPORT_CLAIMS,
    versioned_import=False,
    only_below_jaxlib=(0, 12),
    gated=False,
    edits=capsule_module.EXPORT_EDITS + (
        base.Edit(base.DLPACK, """\
               copy: bool | None = None):

  if src_device is None:
""", """\
               copy: bool | None = None,
               max_version: tuple[int, int] | None = None):

  if src_device is None:
"""),
        _WRAPS_LEGACY_EXPORT,
        _passes_max_version("Latest"),
        _passes_max_version("Oldest supported"),
    ),
    test_edits=_VERSIONED_EXPORT_TESTS)

PATCH_BEFORE_JAXLIB_0_12 = base.SeriesPatch(
    slug="versioned-export-before-jaxlib-0.12",
    subject="dlpack: export DLPack 1.x capsules on jaxlib before 0.12",
    depends_on=("versioned-import",),
    body=_VERSIONED_EXPORT_BODY + """
Measured on jax 0.12.0.1 with jaxlib 0.11.2:
np.from_dlpack(jnp.arange(4.0)) is writable, and aliases the array.
""",
    claims=_VERSIONED_EXPORT_CLAIMS,
    versioned_import=True,
    only_below_jaxlib=(0, 12),
    gated=True,
    edits=capsule_module.EXPORT_EDITS + (
        _WRAPS_LEGACY_EXPORT,
    ),
    test_edits=_VERSIONED_EXPORT_TESTS)


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("New features", """\
`jax.Array.__dlpack__(max_version=(1, x))` returns a DLPack 1.x capsule with
every supported jaxlib, flagged `READ_ONLY` when it aliases the array and
`IS_COPIED` when it holds a copy.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH, PATCH_BEFORE_JAXLIB_0_12)
