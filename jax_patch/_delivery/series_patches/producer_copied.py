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

"""The pull request "dlpack: copy=False refuses a capsule flagged IS_COPIED"
(copy-false-producer-copied).
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base
from jax_patch._delivery.series_patches import capsule_module


PATCH = base.SeriesPatch(
    slug="copy-false-producer-copied",
    subject="dlpack: copy=False refuses a capsule flagged IS_COPIED",
    depends_on=("versioned-export",),
    body="""\
DLPack 1.0 has producers set IS_COPIED on a capsule that holds a copy,
so that a consumer that must not copy can tell. from_dlpack ignored the
flag, so from_dlpack(x, copy=False) returned a copy without a word when
the producer copied (say, a producer that ignores copy=False, or one that
cannot share its memory). It now reads the flag under copy=False, with
dlpack_capsule.versioned_flags, and raises the copy-required error. Only
1.x capsules carry the flag.

Measured on jax 0.12.0.1: a producer returning
np.arange(8.0).__dlpack__(max_version=(1, 0), copy=True) imports under
copy=False (64-byte-aligned copies alias the copy; others raise the
unaligned error instead).
""",
    claims=("copy_false_producer_copied_raises",
            "copy_false_read_only_copy_raises"),
    edits=(
        base.Edit(base.DLPACK, """\
  except TypeError:
    dlpack = external_array.__dlpack__(stream=stream)
""", """\
  except TypeError:
    dlpack = external_array.__dlpack__(stream=stream)
  if copy is False and (dlpack_capsule.versioned_flags(dlpack)
                        & dlpack_capsule.FLAG_IS_COPIED):
    raise _CopyRequiredError(
        "Specified copy=False, but the producer copied the data: its DLPack "
        "capsule sets IS_COPIED. Set copy=True or copy=None to perform the "
        "requested operation.")
"""),
        capsule_module.VERSIONED_FLAGS_EDIT,
    ),
    test_edits=base.test_methods("""\
  @jtu.run_on_devices("cpu")
  def testCopyFalseRefusesAProducerCopy(self):
    class CopyingProducer:
      def __dlpack__(self, **kwargs):
        del kwargs
        return np.arange(8.0).__dlpack__(max_version=(1, 0), copy=True)

      def __dlpack_device__(self):
        return (dlpack_src.DLDeviceType.kDLCPU, 0)

    with self.assertRaisesRegex(BufferError, "IS_COPIED"):
      jnp.from_dlpack(CopyingProducer(), copy=False)
    self.assertAllClose(np.arange(8.0), jnp.from_dlpack(CopyingProducer()))
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` with `copy=False` raises the copy-required
error when the producer's DLPack 1.x capsule says it holds a copy
(`IS_COPIED`).""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
