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

"""The pull request "dlpack: raise the Array API standard's exception classes"
(exception-classes).
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
  JAX raised TypeError. A raw DLPack capsule (imported with a deprecation
  warning up to JAX 0.7.1) is named as such.
- an unsupported device type: BufferError (the standard's recommendation)
  and TypeError (JAX's).
- copy that is not a bool or None: JAX let the binding raise nanobind's
  "incompatible function arguments" (also for np.False_); now a TypeError
  naming from_dlpack, and NumPy bools are accepted.
- device that is not a Device or Sharding (say "cpu"): JAX let
  device_put raise a ValueError that does not name from_dlpack; now a
  TypeError that is also a ValueError, naming it.

Measured on jax 0.12.0.1 (CPU): each of these raised the old type.
""",
    claims=("copy_false_unaligned_raises", "copy_false_other_device_raises",
            "copy_accepts_numpy_bool", "copy_string_raises", "copy_int_raises",
            "device_string_raises", "missing_dlpack_methods_raises",
            "raw_capsule_refused", "unsupported_device_type_raises"),
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


class _InvalidDeviceError(TypeError, ValueError):
  \"\"\"``device`` is neither a Device, a Sharding nor None.\"\"\"


def _check_copy_argument(copy: Any) -> bool | None:
  if copy is None or isinstance(copy, (bool, np.bool_)):
    return None if copy is None else bool(copy)
  raise TypeError(
      f"from_dlpack: copy must be a bool or None, got {copy!r} of type "
      f"{type(copy).__name__}.")


def is_supported_dtype(dtype: DTypeLike) -> bool:"""),
        base.Edit(base.DLPACK, """\
  if device and dlpack_device != device:
    if copy is not None and not copy:
      raise ValueError(""", """\
  if device and dlpack_device != device:
    if copy is not None and not copy:
      raise _CopyRequiredError("""),
        base.Edit(base.DLPACK, """\
  if isinstance(device, Sharding):
    device_set = device.device_set""", """\
  copy = _check_copy_argument(copy)
  if device is not None and not isinstance(device, (_jax.Device, Sharding)):
    raise _InvalidDeviceError(
        "from_dlpack: device must be None, a jax.Device or a "
        f"jax.sharding.Sharding, got {device!r} of type "
        f"{type(device).__name__}.")
  if isinstance(device, Sharding):
    device_set = device.device_set"""),
        base.Edit(base.DLPACK, """\
    raise TypeError(
        "The array passed to from_dlpack must have __dlpack__ and __dlpack_device__ methods."
    )""", """\
    what = ("a DLPack capsule: pass the array that made it instead"
            if type(external_array).__name__ == "PyCapsule"
            else f"a {type(external_array).__name__}")
    raise _MissingDLPackMethodsError(
        "The array passed to from_dlpack must have __dlpack__ and "
        f"__dlpack_device__ methods; got {what}."
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
    test_edits=base.test_methods("""\
  @jtu.run_on_devices("cpu")
  def testCopyFalseUnalignedRaisesBufferError(self):
    x = _ensure_alignment(np.arange(8, dtype=np.float32),
                          desired_alignment=2)
    for error in (BufferError, ValueError):
      with self.assertRaisesRegex(error, "Specified .* which requires a copy"):
        jnp.from_dlpack(x, copy=False)

  def testMissingDLPackMethodsRaisesAttributeError(self):
    for error in (AttributeError, TypeError):
      with self.assertRaisesRegex(error, "must have __dlpack__"):
        jnp.from_dlpack([1.0, 2.0])

  @jtu.run_on_devices("cpu")
  def testRawCapsuleIsNamed(self):
    capsule = np.arange(4.0).__dlpack__()
    with self.assertRaisesRegex(AttributeError, "a DLPack capsule"):
      jnp.from_dlpack(capsule)

  @jtu.run_on_devices("cpu")
  def testCopyMustBeABool(self):
    with self.assertRaisesRegex(TypeError, "from_dlpack: copy must be"):
      jnp.from_dlpack(np.arange(4.0), copy="yes")
    x = np.arange(4.0)
    self.assertAllClose(x, jnp.from_dlpack(x, copy=np.True_))

  def testDeviceMustBeADeviceOrSharding(self):
    for error in (TypeError, ValueError):
      with self.assertRaisesRegex(error, "from_dlpack: device must be"):
        jnp.from_dlpack(np.arange(4.0), device="cpu")
"""))


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Changes", """\
{func}`jax.dlpack.from_dlpack` and {func}`jax.numpy.from_dlpack` raise the
exception classes the Python Array API standard names, each also deriving
from the type raised before: `BufferError` (also a `ValueError`) when
`copy=False` but a copy is needed, `AttributeError` (also a `TypeError`)
for an object without `__dlpack__` or `__dlpack_device__`, and a
`TypeError` naming `from_dlpack` for an invalid `copy` or `device`.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
