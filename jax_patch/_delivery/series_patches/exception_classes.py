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

"""The exception-classes pull request of the series.

Its commit subject is "dlpack: raise the Array API standard's exception
classes".
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


PATCH = base.SeriesPatch(
    slug="exception-classes",
    subject="dlpack: raise the Array API standard's exception classes",
    body="""\
from_dlpack raises the exception types the Python Array API standard
names, as classes that also derive from the type JAX raised before, so that
code catching either keeps working:

- copy=False where a copy is needed (another device, unaligned host
  memory): the standard's `copy` text asks for BufferError and its Raises
  section for ValueError. JAX raised ValueError; now a BufferError that is
  a ValueError, with the same message.
- no __dlpack__/__dlpack_device__: the standard asks for AttributeError;
  JAX raised TypeError. The message now names the argument's type: for a
  raw DLPack capsule (imported with a deprecation warning up to JAX
  0.7.1) it reads "got a PyCapsule".
- an unsupported device type: BufferError (the standard's recommendation)
  and TypeError (JAX's).

Measured on jax 0.12.0.1 (CPU): each of these raised the old type alone.
""",
    claims=("copy_false_unaligned_raises", "copy_false_other_device_raises",
            "missing_dlpack_methods_raises", "raw_capsule_refused",
            "unsupported_device_type_raises"),
    edits=(
        base.Edit(base.DLPACK, """\
def is_supported_dtype(dtype: DTypeLike) -> bool:""", """\
class _CopyRequiredError(BufferError, ValueError):
  \"\"\"copy=False, but a copy is needed.

  The Array API standard asks for BufferError in its description of
  ``copy`` and for ValueError in its Raises section.
  \"\"\"


class _MissingDLPackMethodsError(AttributeError, TypeError):
  \"\"\"The argument lacks ``__dlpack__`` or ``__dlpack_device__``.\"\"\"


class _UnsupportedDeviceError(BufferError, TypeError):
  \"\"\"The array lives on a device type JAX cannot read.\"\"\"


def is_supported_dtype(dtype: DTypeLike) -> bool:"""),
        base.Edit(base.DLPACK, """\
  if device and dlpack_device != device:
    if copy is not None and not copy:
      raise ValueError(""", """\
  if device and dlpack_device != device:
    if copy is not None and not copy:
      raise _CopyRequiredError("""),
        base.Edit(base.DLPACK, """\
    raise TypeError(
        "The array passed to from_dlpack must have __dlpack__ and __dlpack_device__ methods."
    )""", """\
    raise _MissingDLPackMethodsError(
        "The array passed to from_dlpack must have __dlpack__ and "
        f"__dlpack_device__ methods; got a {type(external_array).__name__}."
    )"""),
        base.Edit(base.DLPACK, """\
    raise TypeError(
        "Array passed to from_dlpack is on unsupported device type \"""",
                  """\
    raise _UnsupportedDeviceError(
        "Array passed to from_dlpack is on unsupported device type \""""),
        base.Edit(base.DLPACK, """\
      i = se.index("is not aligned to")
      raise ValueError(""", """\
      i = se.index("is not aligned to")
      raise _CopyRequiredError("""),
    ),
    # Before testNumpyToJax, where copy-false-no-narrowing, which raises
    # _CopyRequiredError and so goes after this, adds its tests too.
    test_edits=base.test_methods(before=base.BEFORE_NUMPY_TO_JAX, source="""\
  @jtu.run_on_devices("cpu")
  def testCopyFalseUnalignedRaisesBufferError(self):
    x = _ensure_alignment(np.arange(8, dtype=np.float32),
                          desired_alignment=2)
    for error in (BufferError, ValueError):
      with self.assertRaisesRegex(error, "Specified .* which requires a copy"):
        jnp.from_dlpack(x, copy=False)

  @jtu.run_on_devices("cpu")
  def testCopyFalseToAnotherDeviceRaisesBufferError(self):
    if jax.device_count() < 2:
      self.skipTest("needs two devices")
    for error in (BufferError, ValueError):
      with self.assertRaisesRegex(error, "Specified .* which requires a copy"):
        jnp.from_dlpack(np.arange(4.0), device=jax.devices()[1], copy=False)

  def testMissingDLPackMethodsRaisesAttributeError(self):
    for error in (AttributeError, TypeError):
      with self.assertRaisesRegex(error, "must have __dlpack__.*got a list"):
        jnp.from_dlpack([1.0, 2.0])

  @jtu.run_on_devices("cpu")
  def testRawCapsuleNamesItsType(self):
    capsule = np.arange(4.0).__dlpack__()
    with self.assertRaisesRegex(AttributeError, "got a PyCapsule"):
      jnp.from_dlpack(capsule)

  def testUnsupportedDeviceTypeRaisesBufferError(self):
    class OpenCLArray:

      def __dlpack_device__(self):
        return 4, 0  # kDLOpenCL

      def __dlpack__(self, **kwargs):
        raise AssertionError("not reached")

    for error in (BufferError, TypeError):
      with self.assertRaisesRegex(error, "unsupported device type"):
        jnp.from_dlpack(OpenCLArray())
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Changes", """\
{func}`jax.dlpack.from_dlpack` and {func}`jax.numpy.from_dlpack` raise the
exception classes the Python Array API standard names, each also deriving
from the type raised before: `BufferError` (also a `ValueError`) when
`copy=False` but a copy is needed, `AttributeError` (also a `TypeError`)
for an object without `__dlpack__` or `__dlpack_device__`, and
`BufferError` (also a `TypeError`) for an array on an unsupported device
type.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
