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

"""The upstream patch series: one behaviour each, as edits to JAX's files.

Each patch edits JAX's own ``jax/_src/dlpack.py`` (and ``jax/_src/array.py``)
in place, in JAX's style, for the jaxlib range of JAX main and the newest
release (jaxlib 0.11.0 on): the version gates jax_patch keeps for jaxlib
back to 0.4.35 are constant there, and none of them appears. One thing
jaxlib before 0.12 lacks does: it reads and writes only DLPack 0.x
capsules, so the series adds a small module, ``jax/_src/dlpack_capsule.py``,
that converts 1.x capsules for it (ungated on a JAX whose every jaxlib is
older than 0.12, gated like JAX's own code where its range straddles 0.12,
absent where it starts at 0.12). Each patch also adds its tests to JAX's
``tests/array_interoperability_test.py`` where the target has it, and names
the conformance cases (``conformance.CASES``) it makes pass; ``series.py``
checks each claim after applying the patches up to it.

An edit replaces one exact, unique text of the target: where JAX's text has
moved, the series refuses with the patch and the text it looked for.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import textwrap

DLPACK = "jax/_src/dlpack.py"
ARRAY = "jax/_src/array.py"
INTEROP_TEST = "tests/array_interoperability_test.py"

# Where a patch's tests go: the end of JAX's DLPackTest class, or before one
# of its tests. Pull requests that do not depend on each other put theirs in
# different places, so that each merges after the others without a conflict.
_END_OF_DLPACK_TEST = "\n\nclass CudaArrayInterfaceTest(jtu.JaxTestCase):\n"
_BEFORE_JAX_ARRAY_ROUND_TRIP = """\
  @jtu.sample_product(
      shape=all_shapes,
      dtype=dlpack_dtypes,
      device_type=[None, "cpu", "gpu"],
  )
  def testJaxArrayRoundTrip("""
_BEFORE_PINNED_HOST_ROUND_TRIP = """\
  @jtu.run_on_devices("gpu", "tpu")
  def testJaxPinnedHostRoundTrip(self):"""
_BEFORE_TENSORFLOW_TO_JAX = """\
  @jtu.sample_product(shape=all_shapes, dtype=dlpack_dtypes)
  @unittest.skipIf(not tf, "Test requires TensorFlow")
  def testTensorFlowToJax(self, shape, dtype):"""
_BEFORE_JAX_TO_TENSORFLOW = """\
  @jtu.sample_product(
      shape=all_shapes,
      dtype=dlpack_dtypes,
  )
  @jtu.run_on_devices("cpu", "gpu")
  @unittest.skipIf(not tf, "Test requires TensorFlow")
  def testJaxToTensorFlow("""
_BEFORE_TENSORFLOW_TO_JAX_INT64 = """\
  @unittest.skipIf(not tf, "Test requires TensorFlow")
  def testTensorFlowToJaxInt64(self):"""
_BEFORE_TENSORFLOW_NONDEFAULT_LAYOUT = """\
  @unittest.skipIf(not tf, "Test requires TensorFlow")
  def testTensorFlowToJaxNondefaultLayout(self):"""
_BEFORE_NUMPY_TO_JAX = """\
  @jtu.sample_product(
    shape=all_shapes,
    dtype=numpy_dtypes,
    copy=[False, True, None],
    aligned=[False, True],
  )
  def testNumpyToJax("""
_AFTER_NUMPY_TO_JAX = "  def testNumpyToJaxNondefaultLayout(self):"
_BEFORE_JAX_TO_NUMPY = """\
  @jtu.sample_product(shape=all_shapes, dtype=numpy_dtypes)
  @jtu.run_on_devices("cpu")  # NumPy only accepts cpu DLPacks
  def testJaxToNumpy("""
_BEFORE_TPU_HOST_BUFFER_DMA_MAP = """\
  @jtu.run_on_devices("tpu")
  def testTpuHostBufferDmaMap(self):"""
# Module-level helpers' places, likewise apart.
_BEFORE_DLPACK_TEST = "\n\nclass DLPackTest(jtu.JaxTestCase):"
_BEFORE_MAX_ALIGN_BITS = "\n\n@cache()\ndef _get_max_align_bits(dtype, device):"
_BEFORE_ENSURE_ALIGNMENT_TEST = "\n\ndef test_ensure_alignment():"


@dataclasses.dataclass(frozen=True)
class Edit:
  """Replaces the one occurrence of ``old`` in ``path`` with ``new``."""
  path: str
  old: str
  new: str


@dataclasses.dataclass(frozen=True)
class SeriesPatch:
  """One commit of the series.

  Attributes:
    slug: the file name's stem in the series.
    subject: the commit subject, in JAX's ``module: change`` form.
    body: the measured upstream failure and the standard's clause.
    claims: the conformance cases this patch makes pass.
    edits: the change to JAX's sources; an edit whose ``old`` is empty
      creates its file.
    test_edits: its tests, applied where the target has JAX's test file.
  """
  slug: str
  subject: str
  body: str
  claims: tuple[str, ...]
  edits: tuple[Edit, ...]
  test_edits: tuple[Edit, ...] = ()
  # For a typing patch: code the target's type checker must accept after
  # the patch, and reject before it.
  typing_probe: str = ""
  # For a behaviour no conformance case pins down (a race): a script that
  # must exit 0 on the target after the patch, and fail before it.
  runtime_probe: str = ""
  # Only for targets whose minimum jaxlib is older than this: the fix of a
  # jaxlib bug, or a stand-in for what a newer jaxlib does itself, needless
  # (and absent) where every supported jaxlib has it.
  only_below_jaxlib: tuple[int, ...] | None = None
  # With only_below_jaxlib: True for the form that tests
  # jaxlib_extension_version, for a target whose jaxlib range reaches that
  # version; False for the form without the test, for a target whose every
  # jaxlib is older (a gate constant over the range is left out).
  gated: bool | None = None
  # Only for targets whose from_dlpack already asks for DLPack 1.x capsules
  # (True: JAX 0.12 on), or only for those that do not (False): the two
  # differ in the text a patch edits.
  versioned_import: bool | None = None
  # The behaviours (see ``behaviour``) whose code this patch edits: its pull
  # request goes on the base after theirs. None: it applies to the base
  # alone.
  depends_on: tuple[str, ...] = ()
  # For a speed patch: the most its import of a small NumPy array may take,
  # as a fraction of the base's time.
  speed_target: float | None = None
  # Where correctness costs time on the paths the patch does not fix: the
  # cost, measured, which its description states (and ``--check --speed``
  # then does not hold against the tolerance).
  speed_cost: str = ""

  @property
  def behaviour(self) -> str:
    """The slug, less the jaxlib range that picks among a behaviour's forms."""
    return self.slug.split("-before-jaxlib-")[0]

  def is_for(self, min_jaxlib: tuple[int, ...], max_jaxlib: tuple[int, ...],
             imports_versioned: bool) -> bool:
    """Whether a target with this jaxlib range and import path needs it."""
    if (self.versioned_import is not None
        and self.versioned_import != imports_versioned):
      return False
    if self.only_below_jaxlib is None:
      return True
    reaches_fixed_jaxlib = max_jaxlib >= self.only_below_jaxlib
    return (min_jaxlib < self.only_below_jaxlib
            and self.gated in (None, reaches_fixed_jaxlib))

  def shows_on_jaxlib(self, jaxlib: tuple[int, ...]) -> bool:
    """Whether upstream fails its claims with ``jaxlib``."""
    return self.only_below_jaxlib is None or jaxlib < self.only_below_jaxlib


# The target already negotiates DLPack 1.x capsules on import (JAX 0.12 on).
VERSIONED_IMPORT_MARK = "max_version=DLPACK_VERSION"


def _tests(source: str, before: str = _END_OF_DLPACK_TEST
           ) -> tuple[Edit, ...]:
  """Edits adding test methods (``source``) to DLPackTest: at its end, or
  ``before`` one of its tests."""
  source = source.rstrip("\n") + "\n"
  if before == _END_OF_DLPACK_TEST:
    return (Edit(INTEROP_TEST, before, "\n" + source + before),)
  return (Edit(INTEROP_TEST, before, source + "\n" + before),)


def _helper(source: str, before: str) -> Edit:
  """An edit adding module-level test code (``source``) ``before`` a
  module-level anchor of JAX's test file."""
  return Edit(INTEROP_TEST, before,
              "\n\n" + source.strip("\n") + "\n" + before)


_EXCEPTION_CLASSES = SeriesPatch(
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
            "copy_accepts_numpy_bool", "copy_string_raises",
            "device_string_raises", "missing_dlpack_methods_raises",
            "raw_capsule_refused", "unsupported_device_type_raises"),
    edits=(
        Edit(DLPACK, """\
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
        Edit(DLPACK, """\
  if device and dlpack_device != device:
    if copy is not None and not copy:
      raise ValueError(""", """\
  if device and dlpack_device != device:
    if copy is not None and not copy:
      raise _CopyRequiredError("""),
        Edit(DLPACK, """\
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
        Edit(DLPACK, """\
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
        Edit(DLPACK, """\
    raise TypeError(
        "Array passed to from_dlpack is on unsupported device type \"""",
             """\
    raise _UnsupportedDeviceError(
        "Array passed to from_dlpack is on unsupported device type \""""),
        Edit(DLPACK, """\
      i = se.index("is not aligned to")
      raise ValueError(""", """\
      i = se.index("is not aligned to")
      raise _CopyRequiredError("""),
    ),
    test_edits=_tests("""\
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


_NO_SILENT_NARROWING = SeriesPatch(
    slug="copy-false-no-narrowing",
    subject="dlpack: copy=False never narrows a 64-bit import silently",
    depends_on=("exception-classes",),
    body="""\
With jax_enable_x64 off, from_dlpack(x, copy=False) on an int64 or float64
array returned a copied int32 or float32 array. The Array API standard:
copy=False "must never copy", and raises in case a copy is needed. It now
raises the copy-required error, saying which dtype would have become which.
copy=None and copy=True still canonicalise as before.

JAX's own testNumpyToJax expected the silent copy for 64-bit dtypes with
copy=False; it now expects the error there, as for unaligned input.

Measured on jax 0.12.0.1 (CPU, x64 off): from_dlpack(np.arange(8),
copy=False) returns an int32 array that does not share the source's memory.
""",
    claims=("copy_false_int64_raises", "copy_false_float64_raises"),
    edits=(
        # Above JAX's comment, not on the line it explains: the lines after
        # it are copy-true-copies' and finished-at-return's to edit.
        Edit(DLPACK, """\
  # TODO(phawkins): when we are ready to support x64 arrays in
""", """\
  if copy is False and dtypes.canonicalize_dtype(arr.dtype) != arr.dtype:
    raise _CopyRequiredError(
        f"Specified input of dtype {arr.dtype}, which requires a copy since "
        f"it becomes {dtypes.canonicalize_dtype(arr.dtype)} with "
        "jax_enable_x64 off, however copy=False. Set copy=True or "
        "copy=None, or enable x64.")
  # TODO(phawkins): when we are ready to support x64 arrays in
"""),
    ),
    test_edits=(
        Edit(INTEROP_TEST, """\
    if copy is not None and not copy and (jax.default_backend() != "cpu"
                                          or not aligned):""", """\
    narrowed = dtypes.canonicalize_dtype(dtype) != np.dtype(dtype)
    if copy is not None and not copy and (jax.default_backend() != "cpu"
                                          or not aligned or narrowed):"""),
        Edit(INTEROP_TEST, "from jax._src import config\n",
             "from jax._src import config\nfrom jax._src import dtypes\n"),
    ) + _tests(before=_BEFORE_NUMPY_TO_JAX, source="""\
  @jtu.run_on_devices("cpu")
  def testCopyFalseDoesNotNarrow(self):
    x = _ensure_alignment(np.arange(8, dtype=np.int64),
                          desired_alignment=64)
    if not config.enable_x64.value:
      with self.assertRaisesRegex(BufferError, "becomes int32"):
        jnp.from_dlpack(x, copy=False)
      return
    y = jnp.from_dlpack(x, copy=False)  # x64 on: int64 is kept, and shared.
    x[0] = 99
    self.assertEqual(np.asarray(y)[0], 99)
"""))


_COPY_TRUE_COPIES = SeriesPatch(
    slug="copy-true-copies",
    subject="dlpack: copy=True always returns an independent buffer",
    body="""\
jaxlib's dlpack_managed_tensor_to_buffer aliases 64-byte-aligned host
memory even when passed copy=True, and from_dlpack then dropped the copy
("copy was already handled"). So from_dlpack(x, copy=True) on an aligned
NumPy array returned a view: writing to x changed the "copy". The Array
API standard: copy=True "must always copy".

from_dlpack now imports as copy=None and copies the result itself. An
unaligned source, which jaxlib copies on import, is copied a second time;
a follow-up in jaxlib (honouring copy=True) can remove that.

Measured on jax 0.12.0.1 (CPU): the result of copy=True changes with the
source, for any aligned input (from jax 0.8.1, when copy reached jaxlib).
""",
    claims=("copy_true_aligned_is_independent",),
    edits=(
        Edit(DLPACK, """\
    arr = _jax.dlpack_managed_tensor_to_buffer(
      dlpack, dlpack_device, stream, copy, int(dl_device_type))""", """\
    # jaxlib aliases aligned host memory even under copy=True: that copy is
    # made after the import, in _place_array.
    arr = _jax.dlpack_managed_tensor_to_buffer(
      dlpack, dlpack_device, stream, None if copy else copy,
      int(dl_device_type))"""),
        Edit(DLPACK, """\
  if copy:
    # copy was already handled by dlpack_managed_tensor_to_buffer.
    copy = None
""", ""),
        Edit(DLPACK, """\
  if copy:
    return jnp.array(_arr, copy=True)""", """\
  if copy:
    # Finished before returning: the caller may write to the source next.
    return jnp.array(_arr, copy=True).block_until_ready()"""),
    ),
    test_edits=_tests(before=_AFTER_NUMPY_TO_JAX, source="""\
  @jtu.run_on_devices("cpu")
  def testCopyTrueIsIndependentOfTheSource(self):
    x = _ensure_alignment(np.arange(16, dtype=np.float32),
                          desired_alignment=64)
    y = jnp.from_dlpack(x, copy=True)
    x[0] = 42
    self.assertEqual(y[0], 0)
"""))


_NO_TRACING = SeriesPatch(
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
        Edit(DLPACK, "from jax._src import array\n",
             "from jax._src import array\nfrom jax._src import core\n"),
        Edit(DLPACK, """\
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
    test_edits=_tests("""\
  @jtu.run_on_devices("cpu")
  def testFromDLPackRaisesInsideJit(self):
    x = np.arange(4.0)
    with self.assertRaisesRegex(RuntimeError, "inside a JAX transformation"):
      jax.jit(lambda: jnp.from_dlpack(x))()
    with self.assertRaisesRegex(RuntimeError, "inside a JAX transformation"):
      jax.vmap(lambda y: y + jnp.from_dlpack(x))(jnp.ones((2, 4)))
"""))


_JAX_ARRAY_KEEPS_DEVICE = SeriesPatch(
    slug="jax-array-keeps-device",
    subject="dlpack: a jax.Array passed to from_dlpack keeps its device",
    body="""\
from_dlpack(jax_array) went through DLPack: it exported the array and
imported it again on the device __dlpack_device__ named. A CPU array
always reports device id 0, so an array on cpu:1 came back on cpu:0, and
every call paid an export and an import. A jax.Array on one device needs
no DLPack at all: from_dlpack now returns it (copy=True: a copy), placed
on `device` when one is given. copy=False with another device still
raises.

Measured on jax 0.12.0.1 with 2 CPU devices: from_dlpack(x) of an array
on cpu:1 returns an array on cpu:0.
""",
    claims=("jax_array_keeps_device",),
    edits=(
        Edit(DLPACK, """\
  if not hasattr(external_array, "__dlpack__") or not hasattr(external_array, "__dlpack_device__"):""",
             """\
  if (isinstance(external_array, array.ArrayImpl)
      and len(external_array.sharding.device_set) == 1):
    # No DLPack round trip, which would lose a CPU array's device.
    source_device, = external_array.sharding.device_set
    _check_device(device, source_device, copy)
    return _place_array(external_array, device, source_device, copy)
  if not hasattr(external_array, "__dlpack__") or not hasattr(external_array, "__dlpack_device__"):"""),
    ),
    test_edits=_tests(before=_BEFORE_PINNED_HOST_ROUND_TRIP, source="""\
  def testJaxArrayKeepsItsDevice(self):
    if jax.device_count() < 2:
      self.skipTest("needs two devices")
    device = jax.devices()[1]
    x = jax.device_put(jnp.arange(4.0), device)
    self.assertEqual(jnp.from_dlpack(x).devices(), {device})
    self.assertEqual(jnp.from_dlpack(x, copy=True).devices(), {device})
"""))


_CPU_DEVICE_ID = SeriesPatch(
    slug="cpu-dlpack-device-id",
    subject="array: __dlpack_device__ reports a CPU array's own device id",
    body="""\
jax.Array.__dlpack_device__ returned (kDLCPU, 0) for every CPU array, so
a consumer that places the import on the device it names (JAX itself, via
device_from_local_hardware_id) put an array from cpu:1 on cpu:0. It now
returns the device's local hardware id, as it does for GPUs.

Measured on jax 0.12.0.1 with 2 CPU devices: an array on cpu:1 reports
(kDLCPU, 0), and a DLPack round trip through any wrapper lands on cpu:0.
""",
    claims=("dlpack_round_trip_keeps_device",),
    edits=(
        Edit(ARRAY, """\
    if self.platform() == "cpu":
      return DLDeviceType.kDLCPU, 0""", """\
    if self.platform() == "cpu":
      return DLDeviceType.kDLCPU, _get_device(self).local_hardware_id or 0"""),
    ),
    test_edits=_tests(before=_BEFORE_JAX_ARRAY_ROUND_TRIP, source="""\
  @jtu.run_on_devices("cpu")
  def testCpuDLPackDeviceHasTheDeviceId(self):
    if jax.device_count() < 2:
      self.skipTest("needs two devices")
    x = jax.device_put(jnp.arange(4.0), jax.devices()[1])
    self.assertEqual(x.__dlpack_device__()[1], 1)
"""))


_STRIDED_INPUT = SeriesPatch(
    slug="strided-input",
    subject="dlpack: import non-compact strides via the producer's copy",
    depends_on=("exception-classes",),
    body="""\
jaxlib imports only compact layouts: from_dlpack(x[::2]),
from_dlpack(x[::-1]) and from_dlpack(np.broadcast_to(...)) raised
JaxRuntimeError UNIMPLEMENTED ("Only DLPack tensors with trivial (compact)
striding are supported"), also under copy=None, and under copy=False
raised that instead of the copy-required error. The Array API standard:
copy=None "must avoid a copy if possible but may copy if needed".

from_dlpack now asks the producer for a compact copy, with the DLPack
1.0 copy=True keyword (NumPy, torch and CuPy honour it), and imports that.
Under copy=False it raises the copy-required error, saying why. jaxlib
copies the producer's copy again only where it is not 64-byte aligned.

Measured on jax 0.12.0.1 (CPU): the three raise UNIMPLEMENTED.
""",
    claims=("copy_none_step_slice_imports", "copy_none_reversed_imports",
            "copy_false_strided_raises"),
    edits=(
        Edit(DLPACK, """\
        "copy=None to perform the requested operation."
      )
    else:
      raise
""", """\
        "copy=None to perform the requested operation."
      )
    elif "trivial (compact) striding" in se:
      if copy is False:
        raise _CopyRequiredError(
            "Specified input with non-compact strides, which requires a "
            "copy since jaxlib imports only compact layouts, however "
            "copy=False. Set copy=True or copy=None to perform the "
            "requested operation.") from None
      arr = _import_compact_copy(external_array, dlpack_device, stream,
                                 int(dl_device_type))
    else:
      raise
"""),
        Edit(DLPACK, """\
def _is_tensorflow_tensor(external_array):""", """\
def _import_compact_copy(external_array, device, stream, dl_device_type):
  \"\"\"Imports the producer's compact copy of an array laid out otherwise.\"\"\"
  try:
    dlpack = external_array.__dlpack__(stream=stream, copy=True)
  except TypeError:
    raise BufferError(
        "from_dlpack: the array's strides are not compact, which jaxlib "
        "cannot import, and its producer does not take the DLPack 1.0 "
        "copy keyword to make a compact copy.") from None
  return _jax.dlpack_managed_tensor_to_buffer(
      dlpack, device, stream, None, dl_device_type)

def _is_tensorflow_tensor(external_array):"""),
    ),
    test_edits=_tests(before=_BEFORE_JAX_TO_NUMPY, source="""\
  @jtu.sample_product(step=[2, -1])
  @jtu.run_on_devices("cpu")
  def testNumpyToJaxNonCompactStrides(self, step):
    x = np.arange(16.0)[::step]
    self.assertAllClose(x, jnp.from_dlpack(x))
    for error in (BufferError, ValueError):
      with self.assertRaisesRegex(error, "non-compact strides"):
        jnp.from_dlpack(x, copy=False)
"""))


_MULTI_DEVICE_SHARDING = SeriesPatch(
    slug="multi-device-sharding",
    subject="dlpack: place imports on multi-device shardings",
    depends_on=("exception-classes", "copy-true-copies",
                "jax-array-keeps-device"),
    body="""\
device= takes a Sharding, but from_dlpack refused any Sharding over more
than one device ("can only unpack a dlpack tensor onto a singular device").
It now imports onto the producer's device and device_puts the result to
the sharding, which replicates or shards it; copy=False raises the
copy-required error, since the other devices need copies. copy=True
copies before placing: a device_put between CPU devices may alias its
input, so a replicated result shared the source's memory.

Measured on jax 0.12.0.1 with 4 CPU devices:
from_dlpack(x, device=NamedSharding(mesh, P("x"))) raises ValueError.
""",
    claims=("copy_true_replicated_is_independent",
            "multi_device_sharding_shards",
            "multi_device_sharding_copy_false_raises"),
    edits=(
        Edit(DLPACK, """\
  if isinstance(device, Sharding):
    device_set = device.device_set
    if len(device_set) > 1:
      raise ValueError(
        "from_dlpack can only unpack a dlpack tensor onto a singular device, but "
        f"a Sharding with {len(device_set)} devices was provided."
      )
    device, = device_set
""", """\
  if isinstance(device, Sharding) and len(device.device_set) == 1:
    device, = device.device_set
"""),
        Edit(DLPACK, """\
  if device and dlpack_device != device:
    return device_put(_arr, device)
  if copy:
    # Finished before returning: the caller may write to the source next.
    return jnp.array(_arr, copy=True).block_until_ready()
  return _arr""", """\
  if copy:
    # Copied before placing: device_put between CPU devices may alias.
    # Finished before returning: the caller may write to the source next.
    _arr = jnp.array(_arr, copy=True).block_until_ready()
  if device and dlpack_device != device:
    return device_put(_arr, device)
  return _arr"""),
    ),
    test_edits=_tests(before=_BEFORE_PINNED_HOST_ROUND_TRIP, source="""\
  @jtu.run_on_devices("cpu")
  def testFromDLPackShardsOverAMesh(self):
    if jax.device_count() < 2:
      self.skipTest("needs two devices")
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
    sharding = jax.sharding.NamedSharding(mesh, P("x"))
    x = np.arange(8.0)
    y = jnp.from_dlpack(x, device=sharding)
    self.assertEqual(y.sharding, sharding)
    self.assertAllClose(x, y)
    with self.assertRaisesRegex(BufferError, "requires a copy"):
      jnp.from_dlpack(x, device=sharding, copy=False)
"""))


BASEARRAY_STUB = "jax/_src/basearray.pyi"

_STUBS = SeriesPatch(
    slug="dlpack-stubs",
    subject="basearray.pyi: declare __dlpack__'s keywords, __dlpack_device__",
    body="""\
jax.Array's stub declared __dlpack__(self) with no parameters and no
__dlpack_device__, so type checkers rejected the calls the DLPack
protocol makes: x.__dlpack__(stream=None, max_version=(1, 0),
dl_device=(1, 0), copy=False) and x.__dlpack_device__(). They now match
ArrayImpl's runtime signature. The device type stays Any: DLDeviceType
lives in jax._src.typing, which imports this module.

Measured with pyrefly 1.1.1 on JAX's configuration: both calls are
reported as errors.
""",
    claims=(),
    edits=(
        Edit(BASEARRAY_STUB, """\
  def __dlpack__(self) -> Any: ...
""", """\
  def __dlpack__(self, *, stream: int | Any | None = None,
                 max_version: tuple[int, int] | None = None,
                 dl_device: tuple[Any, int] | None = None,
                 copy: bool | None = None) -> Any: ...
  def __dlpack_device__(self) -> tuple[Any, int]: ...
"""),
    ),
    typing_probe="""\
import jax
import jax.numpy as jnp

def export(x: jax.Array) -> object:
  device_type, device_id = x.__dlpack_device__()
  del device_type
  return x.__dlpack__(stream=None, max_version=(1, 0),
                      dl_device=(1, device_id), copy=False)

def round_trip(x: jax.Array) -> jax.Array:
  return jnp.from_dlpack(x, device=None, copy=None)
""")


# A copy or move still running at return shows first as a result not yet
# ready: that was so in 40 of 40 moves of 16 MiB on an idle CPU (jax
# 0.12.0.1), where only 19 came back torn, and on a CI machine none of 20
# did. Torn values, the harm itself, are checked too.
_SNAPSHOT_CHECK = """\
def _import_then_write(kind, device=None):
  n = 1 << 22
  x = np.ones(n + 1, np.float32)[1:] if kind == "unaligned" else np.ones(
      n, np.float64 if kind == "float64" else np.float32)
  y = jnp.from_dlpack(x, device=device)
  finished = y.is_ready()
  x[...] = 2  # The caller owns its memory again.
  return finished, np.unique(np.asarray(y))
"""

_FINISHED_AT_RETURN = SeriesPatch(
    slug="finished-at-return",
    subject="dlpack: a copied or moved import has finished at return",
    depends_on=("copy-true-copies",),
    body="""\
JAX copies and transfers asynchronously. When from_dlpack's result is not
the producer's memory itself (a move to device=, a dtype conversion with
x64 off, jaxlib's copy of unaligned host memory), the copy could still be
reading that memory when from_dlpack returned, and the caller's next
write to it (which the DLPack protocol allows once the import returns)
reached the result in part: a torn array. from_dlpack now waits for such
a copy or move to finish. A zero-copy import does not wait, but on the
CPU, where jaxlib may have copied without saying so and waiting on a
ready buffer costs next to nothing.

Measured on jax 0.12.0.1 and JAX main (jaxlib 0.11.1), CPU, 16 MiB
float32: writing the source right after from_dlpack(x, device=cpu1)
left the result part old, part new in 11 to 16 of 20 tries; the same
after importing unaligned memory in up to 20 of 20. With jaxlib 0.11.1,
unsafe_buffer_pointer() on such an unfinished import of a float64 array
hangs (the import's release waits for the GIL it holds); it now returns.
""",
    claims=(),
    edits=(
        Edit(DLPACK, """\
  arr = jnp.asarray(arr, dtype=dtypes.canonicalize_dtype(arr.dtype))
  return _place_array(arr, device, dlpack_device, copy)
""", """\
  result = _place_array(
      jnp.asarray(arr, dtype=dtypes.canonicalize_dtype(arr.dtype)), device,
      dlpack_device, copy)
  if result is not arr or dlpack_device.platform == "cpu":
    # A copy or move (jaxlib's own, of unaligned host memory, too) may still
    # be reading the producer's memory, which the caller may write next.
    result.block_until_ready()
  return result
"""),
    ),
    test_edits=_tests(before=_AFTER_NUMPY_TO_JAX, source="""\
  @jtu.sample_product(kind=["moved", "unaligned", "float64"])
  @jtu.run_on_devices("cpu")
  def testCopiedOrMovedImportHasFinishedAtReturn(self, kind):
    if kind == "moved" and jax.device_count() < 2:
      self.skipTest("needs two devices")
    device = jax.devices()[1] if kind == "moved" else None
    for _ in range(5):
      finished, values = _import_then_write(kind, device)
      self.assertTrue(finished)
      self.assertLen(values, 1)  # Never torn.
""") + (_helper(_SNAPSHOT_CHECK, _BEFORE_MAX_ALIGN_BITS),),
    runtime_probe="""\
import jax
import jax.numpy as jnp
import numpy as np

""" + _SNAPSHOT_CHECK + """
for kind in ("moved", "unaligned", "float64"):
  device = jax.devices()[1] if kind == "moved" else None
  for _ in range(20):
    finished, values = _import_then_write(kind, device)
    assert finished, f"{kind}: still copying at return"
    assert len(values) == 1, f"{kind}: torn, {values}"
""")


_FOREIGN_PLATFORM = SeriesPatch(
    slug="foreign-platform-host-copy",
    subject="dlpack: import a host copy from a platform JAX has no backend for",
    depends_on=("exception-classes",),
    body="""\
from_dlpack of a CUDA tensor under a CPU-only jaxlib raised RuntimeError
"Unknown backend cuda", also with device= a CPU device. The DLPack
protocol lets a consumer ask the producer for a copy on another device:
from_dlpack now asks for a host copy (dl_device=(kDLCPU, 0), copy=True,
stream=None, since no stream of that platform exists here) when device=
is on the CPU, and otherwise raises BufferError saying to pass device=.
Pinned host memory (kDLCUDAHost) of a missing platform is asked the
same way. copy=False raises the copy-required error.

Measured on jax 0.12.0.1 (CPU-only): a producer reporting kDLCUDA raises
RuntimeError, with or without device=jax.devices("cpu")[0].
""",
    claims=("foreign_platform_imports_host_copy",
            "foreign_platform_without_device_raises",
            "cuda_host_source_gets_no_stream"),
    edits=(
        Edit(DLPACK, """\
  backend = xla_bridge.get_backend(dl_device_platform)
  dlpack_device = backend.device_from_local_hardware_id(device_id)
""", """\
  try:
    backend = xla_bridge.get_backend(dl_device_platform)
  except RuntimeError:
    # No backend for the producer's platform (a CUDA tensor under a
    # CPU-only jaxlib): only a host copy can be imported.
    return _import_host_copy(external_array, device, copy)
  dlpack_device = backend.device_from_local_hardware_id(device_id)
"""),
        # After _is_tensorflow_tensor: strided-input adds its helper before.
        Edit(DLPACK, """\
def from_dlpack(external_array,""", """\
def _import_host_copy(external_array, device, copy):
  \"\"\"Imports the producer's host copy, placed on ``device`` (on the CPU).\"\"\"
  devices = device.device_set if isinstance(device, Sharding) else {device}
  if device is None or any(d.platform != "cpu" for d in devices):
    raise BufferError(
        "from_dlpack: JAX has no backend for the array's platform. Pass "
        "device= a CPU device to import a copy on the host.")
  if copy is False:
    raise _CopyRequiredError(
        "Specified a CPU device, which requires a copy since the array's "
        "platform has no backend here, however copy=False. Set copy=True "
        "or copy=None to perform the requested operation.")
  dlpack = external_array.__dlpack__(
      stream=None, dl_device=(DLDeviceType.kDLCPU, 0), copy=True)
  cpu = xla_bridge.get_backend("cpu").local_devices()[0]
  arr = _jax.dlpack_managed_tensor_to_buffer(
      dlpack, cpu, None, None, int(DLDeviceType.kDLCPU))
  arr = jnp.asarray(arr, dtype=dtypes.canonicalize_dtype(arr.dtype))
  return _place_array(arr, device, cpu, None)

def from_dlpack(external_array,"""),
    ),
    test_edits=_tests(before=_BEFORE_TPU_HOST_BUFFER_DMA_MAP, source="""\
  @jtu.run_on_devices("cpu")
  def testForeignPlatformImportsAHostCopy(self):
    if (jax.default_backend() != "cpu"
        or dlpack_src.xla_bridge.backends().get("cuda")):
      self.skipTest("needs a JAX without CUDA")

    class CudaTensor:
      def __init__(self):
        self.calls = []

      def __dlpack_device__(self):
        return (dlpack_src.DLDeviceType.kDLCUDA, 0)

      def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        if kwargs.get("dl_device") != (dlpack_src.DLDeviceType.kDLCPU, 0):
          raise BufferError("only host copies")
        return np.arange(4.0).__dlpack__(copy=True)

    tensor = CudaTensor()
    with self.assertRaisesRegex(BufferError, "device="):
      jnp.from_dlpack(tensor)
    y = jnp.from_dlpack(tensor, device=jax.devices("cpu")[0])
    self.assertAllClose(np.arange(4.0), y)
    self.assertIsNone(tensor.calls[-1]["stream"])
"""))


_EXPORT_MISSING_PLATFORM = SeriesPatch(
    slug="export-missing-platform",
    subject="dlpack: __dlpack__(dl_device=) of a missing platform is a BufferError",
    body="""\
jax.Array.__dlpack__(dl_device=(kDLCUDA, 0)) under a CPU-only jaxlib let
xla_bridge's RuntimeError "Unknown backend cuda" escape. The Array API
standard: __dlpack__ raises BufferError when it cannot export to the
requested device, which is what JAX already raises for a device type it
does not know. It now raises BufferError for a known one it has no
backend for too.

Measured on jax 0.12.0.1 (CPU-only): RuntimeError.
""",
    claims=("export_missing_platform_raises",),
    edits=(
        Edit(DLPACK, """\
      backend = xla_bridge.get_backend(dl_device_platform)
      device = backend.device_from_local_hardware_id(local_hardware_id)
    except KeyError:""", """\
      backend = xla_bridge.get_backend(dl_device_platform)
      device = backend.device_from_local_hardware_id(local_hardware_id)
    except RuntimeError as err:
      raise BufferError(
          f"to_dlpack: cannot export to {dl_device}: {err}") from None
    except KeyError:"""),
    ),
    test_edits=_tests(before=_BEFORE_TENSORFLOW_TO_JAX, source="""\
  @jtu.run_on_devices("cpu")
  def testExportToAMissingPlatformRaisesBufferError(self):
    if dlpack_src.xla_bridge.backends().get("cuda"):
      self.skipTest("needs a JAX without CUDA")
    with self.assertRaisesRegex(BufferError, "cannot export"):
      jnp.arange(4.0).__dlpack__(
          dl_device=(dlpack_src.DLDeviceType.kDLCUDA, 0))
"""))


_EXPORT_LEGACY_COPY = SeriesPatch(
    slug="export-legacy-copy",
    subject="dlpack: a DLPack 0.x export holds a copy",
    depends_on=("exception-classes",),
    body="""\
jax.Array.__dlpack__(max_version=(0, 8)) returned a 0.x capsule aliasing
the array's buffer. A 0.x capsule cannot say READ_ONLY, so its consumer
may write to memory JAX treats as immutable (torch does: it has no
read-only tensors).
The DLPack Python specification lets a producer serve an older consumer
with a copy: a consumer that asks for 0.x now gets one, and copy=False
raises the copy-required error. Exports without max_version keep the
alias, for consumers that predate the keyword.

Measured on jax 0.12.0.1: the 0.x capsule's data pointer is the array's
unsafe_buffer_pointer().
""",
    claims=("export_legacy_max_version_is_a_copy",),
    edits=(
        Edit(DLPACK, """\
  # As new versions are adopted over time, we can maintain some legacy paths
""", """\
  if max_version is not None and max_version < (1, 0):
    # 0.x cannot mark the buffer read-only, and a consumer may write to it.
    if copy is False:
      raise _CopyRequiredError(
          f"Specified max_version={max_version}, which requires a copy "
          "since a DLPack 0.x capsule cannot be marked read-only, however "
          "copy=False. Set copy=True or copy=None to perform the "
          "requested operation.")
    copy = True
  # As new versions are adopted over time, we can maintain some legacy paths
"""),
    ),
    test_edits=_tests(before=_BEFORE_JAX_TO_TENSORFLOW, source="""\
  @jtu.run_on_devices("cpu")
  def testLegacyExportIsACopy(self):
    x = jnp.arange(4.0)
    y = np.from_dlpack(_LegacyConsumerView(x))
    self.assertNotEqual(y.__array_interface__["data"][0],
                        x.unsafe_buffer_pointer())
    self.assertAllClose(x, y)
    with self.assertRaisesRegex(BufferError, "requires a copy"):
      x.__dlpack__(max_version=(0, 8), copy=False)
""") + (
        _helper("""\
class _LegacyConsumerView:
  \"\"\"Asks its array for a DLPack 0.x capsule, as a pre-1.0 consumer.\"\"\"

  def __init__(self, array):
    self.array = array

  def __dlpack__(self, **kwargs):
    del kwargs
    return self.array.__dlpack__(max_version=(0, 8))

  def __dlpack_device__(self):
    return self.array.__dlpack_device__()
""", _BEFORE_ENSURE_ALIGNMENT_TEST),
    ))


CAPSULE_MODULE = "jax/_src/dlpack_capsule.py"

# jax/_src/dlpack_capsule.py as the whole series leaves it is a module of
# this repository, which the project's type checkers and tests read; what
# each patch adds to it is cut from that file.
_CAPSULE_MODULE_AFTER_SERIES = (
    pathlib.Path(__file__).parent / "series_files" / "dlpack_capsule.py"
).read_text()


def _function(source: str, name: str) -> str:
  """The text of ``source``'s top-level function ``name``."""
  start = source.index(f"\ndef {name}(") + 1
  end = source.find("\n\n\n", start)
  return source[start:] if end == -1 else source[start:end + 1]


def _before(source: str, edits: tuple[Edit, ...]) -> str:
  """``source`` as it was before ``edits`` (applied in order) made it."""
  for edit in reversed(edits):
    if source.count(edit.new) != 1:
      raise ValueError(f"{edit.path} holds {source.count(edit.new)} copies "
                       f"of an edit's text, not one:\n{edit.new}")
    source = source.replace(edit.new, edit.old)
  return source


# What the versioned-export patch adds to it.
_CAPSULE_EXPORT_EDITS = (
    Edit(CAPSULE_MODULE, """\
jaxlib before 0.12 imports only DLPack 0.x capsules ("dltensor"). Only
DLPack 1.x capsules ("dltensor_versioned") can say READ_ONLY, and NumPy
exports a read-only array only as one. This module hands jaxlib a 1.x
capsule's tensor without copying it: a new managed tensor of the other
""", """\
jaxlib before 0.12 imports and exports only DLPack 0.x capsules
("dltensor"). Only DLPack 1.x capsules ("dltensor_versioned") can say
READ_ONLY, and NumPy exports a read-only array only as one. This module
converts between the two without copying the tensor: a new managed tensor
of the other
"""),
    Edit(CAPSULE_MODULE, """\
import numpy as np


""", """\
import numpy as np

FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1


"""),
    Edit(CAPSULE_MODULE, """\
  return _new_capsule(_DLManagedTensor(dl_tensor=versioned.dl_tensor), owner)
""", """\
  return _new_capsule(_DLManagedTensor(dl_tensor=versioned.dl_tensor), owner)


""" + _function(_CAPSULE_MODULE_AFTER_SERIES, "as_versioned_capsule")),
)

# What the producer-copied patch adds to it.
_VERSIONED_FLAGS_EDIT = Edit(CAPSULE_MODULE, """\
                                dl_tensor=legacy.dl_tensor), capsule)
""", """\
                                dl_tensor=legacy.dl_tensor), capsule)


""" + _function(_CAPSULE_MODULE_AFTER_SERIES, "versioned_flags"))

# jax/_src/dlpack_capsule.py, as the versioned-import patch adds it.
_CAPSULE_MODULE = _before(_CAPSULE_MODULE_AFTER_SERIES,
                          _CAPSULE_EXPORT_EDITS + (_VERSIONED_FLAGS_EDIT,))


# Both forms of the versioned-import patch add the module, and import it.
_ADDS_CAPSULE_MODULE = (
    Edit(CAPSULE_MODULE, "", _CAPSULE_MODULE),
    Edit(DLPACK, """\
from jax._src import core
""", """\
from jax._src import core
from jax._src import dlpack_capsule
"""),
)

# What the two forms of the versioned-import patch say alike.
_VERSIONED_IMPORT_PROBLEM = """\
a read-only NumPy array (np.load(..., mmap_mode="r"), np.broadcast_to
output), which NumPy exports only as a 1.x capsule with READ_ONLY set,
raised BufferError ("Cannot export readonly array since signalling
readonly is unsupported by DLPack"), and a producer that exports only 1.x
could not be imported. The Array API standard has consumers pass
max_version so that producers can return 1.x.
"""
_VERSIONED_IMPORT_MODULE = """\
That takes a new module, jax/_src/dlpack_capsule.py: it claims the
capsule under a lock (renames it as used, as the DLPack Python
specification has consumers do), refuses a major version other than 1,
and builds the 0.x structure with ctypes, released by NumPy's own C
deleter so that no Python runs when jaxlib frees the buffer. A producer
whose deleter is NULL (DLPack allows one) is never told when the import
is done and may free its structure at once: its tensor gets a structure
that holds its own copy of the shape and strides. It is kept
apart from dlpack.py because it is memory-safety code with its own tests,
and goes away once jaxlib 0.12 is the minimum. A read-only import is safe
to alias: JAX never writes to an imported buffer, and does not reuse one
donated to a computation.

Measured on {measured} (CPU): the read-only
cases raise BufferError; a producer that raises without max_version
cannot import.
"""

# A producer with a NULL deleter (DLPack allows one) is never told when an
# import is done, so it may free its structure once from_dlpack returns.
_NULL_DELETER_CHECK = """\
def _reads_after_null_deleter_import(convert):
  raw = np.zeros(32, np.float32)
  x = raw[(-raw.ctypes.data % 64) // 4:][:16]  # Aligned: imported as is.
  capsule = x.__dlpack__(max_version=(1, 0))
  managed = ctypes.PYFUNCTYPE(
      ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
          ("PyCapsule_GetPointer", ctypes.pythonapi))(
              capsule, b"dltensor_versioned")
  # DLManagedTensorVersioned.deleter, after the version and manager_ctx.
  deleter = ctypes.c_void_p.from_address(managed + 16)
  numpy_deleter, deleter.value = deleter.value, None
  if convert:
    capsule = dlpack_src.dlpack_capsule.as_legacy_capsule(capsule)

  class NullDeleterProducer:
    def __dlpack__(self, **kwargs):
      del kwargs
      return capsule

    def __dlpack_device__(self):
      return (1, 0)

  y = jnp.from_dlpack(NullDeleterProducer())
  reads = []
  record = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(reads.append)
  # The producer frees its structure: the deleter field is garbage now.
  deleter.value = ctypes.cast(record, ctypes.c_void_p).value
  y.delete()
  # What NumPy, the real producer, frees when it is done.
  ctypes.CFUNCTYPE(None, ctypes.c_void_p)(numpy_deleter)(managed)
  return len(reads)
"""

_VERSIONED_IMPORT_CLAIMS = (
    "read_only_imports_without_copy",
    "memory_mapped_file_imports_without_copy",
    "donation_leaves_read_only_source_unchanged",
    "copy_none_broadcast_imports", "versioned_only_producer_imports",
    "producer_without_copy_keyword_imports", "cpu_producer_gets_stream_none")

_VERSIONED_IMPORT_TESTS = _tests("""\
  @jtu.run_on_devices("cpu")
  def testReadOnlyNumpyArrayImportsWithoutCopy(self):
    x = _ensure_alignment(np.arange(16, dtype=np.float32),
                          desired_alignment=64)
    read_only = x.view()
    read_only.flags.writeable = False
    y = jnp.from_dlpack(read_only, copy=False)
    x[0] = 7.0
    self.assertEqual(np.asarray(y)[0], 7.0)

  @jtu.run_on_devices("cpu")
  def testVersionedOnlyProducerImports(self):
    x = np.arange(8.0)

    class VersionedOnlyProducer:
      def __dlpack__(self, *, stream=None, max_version=None):
        if max_version is None:
          raise BufferError("exports DLPack 1.x only")
        return x.__dlpack__(stream=stream, max_version=max_version)

      def __dlpack_device__(self):
        return (dlpack_src.DLDeviceType.kDLCPU, 0)

    self.assertAllClose(x, jnp.from_dlpack(VersionedOnlyProducer()))

  @jtu.run_on_devices("cpu")
  def testVersionedImportReleasesTheProducerTensor(self):
    x = _ensure_alignment(np.arange(16, dtype=np.float32),
                          desired_alignment=64)
    read_only = x.view()
    read_only.flags.writeable = False
    alive = weakref.ref(read_only)
    y = jnp.from_dlpack(read_only, copy=False)
    del read_only
    self.assertIsNotNone(alive())
    y.delete()
    self.assertIsNone(alive())

  @jtu.run_on_devices("cpu")
  def testVersionedCapsuleIsConsumedOnce(self):
    capsule = np.arange(8.0).__dlpack__(max_version=(1, 0))

    class SameCapsuleProducer:
      def __dlpack__(self, **kwargs):
        del kwargs
        return capsule

      def __dlpack_device__(self):
        return (dlpack_src.DLDeviceType.kDLCPU, 0)

    jnp.from_dlpack(SameCapsuleProducer())
    with self.assertRaisesRegex(Exception, "consumed at most once"):
      jnp.from_dlpack(SameCapsuleProducer())

  @jtu.run_on_devices("cpu")
  def testUnknownDLPackMajorVersionIsRefusedAndReleased(self):
    view = np.arange(8.0).view()
    capsule = view.__dlpack__(max_version=(1, 0))
    alive = weakref.ref(view)
    del view
    get_pointer = ctypes.PYFUNCTYPE(
        ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_GetPointer", ctypes.pythonapi))
    # DLPackVersion.major, the structure's first field.
    ctypes.c_uint32.from_address(
        get_pointer(capsule, b"dltensor_versioned")).value = 2

    with self.assertRaisesRegex(BufferError, "DLPack 2.0"):
      dlpack_src.dlpack_capsule.as_legacy_capsule(capsule)
    self.assertIsNone(alive())  # Its deleter ran.

  @jtu.run_on_devices("cpu")
  def testNullDeleterImportReadsNothingOfTheProducerLater(self):
    self.assertEqual(_reads_after_null_deleter_import(convert=True), 0)
""") + (_helper(_NULL_DELETER_CHECK, _BEFORE_DLPACK_TEST),)

# jaxlib 0.12 reads 1.x capsules itself, without the module, and aborts on
# a NULL deleter: the probe runs only with an older jaxlib.
_NULL_DELETER_PROBE = """\
import ctypes
import jax.numpy as jnp
import numpy as np

""" + _NULL_DELETER_CHECK + """
assert _reads_after_null_deleter_import(convert=False) == 0, (
    "a NULL-deleter producer's structure was read after from_dlpack")
"""


_VERSIONED_IMPORT = SeriesPatch(
    slug="versioned-import",
    subject="dlpack: import DLPack 1.x capsules (read-only arrays)",
    speed_cost="""\
Every jaxlib JAX main supports is older than 0.12 and reads only DLPack 0.x
capsules, so from_dlpack now asks each producer for a 1.x capsule (the only
kind that can say READ_ONLY) and converts it for jaxlib, for writable arrays
too: jnp.from_dlpack of a 64-element float32 NumPy array went from about 27
to 38 us (1.33x to 1.40x; jaxlib 0.11.1, this 2-core machine, the fastest
of 5 alternating rounds, under load). A release whose jaxlib range reaches
0.12 gets the conversion behind jaxlib_extension_version, so that jaxlib
0.12 on pays nothing (0.12.0.1: 0.93x to 1.05x).
""",
    depends_on=("raise-under-transformations", "strided-input"),
    body="""\
jaxlib before 0.12 imports only DLPack 0.x capsules, and from_dlpack
asked producers for nothing newer, so what only 1.x can carry failed:
""" + _VERSIONED_IMPORT_PROBLEM + """
from_dlpack now asks for max_version=(1, 0) (and again without it, for
producers before DLPack 1.0), and hands jaxlib a 1.x capsule's tensor as
a 0.x one, without copying it.
""" + _VERSIONED_IMPORT_MODULE.format(measured="jax main with jaxlib 0.11.1"),
    claims=_VERSIONED_IMPORT_CLAIMS,
    versioned_import=False,
    only_below_jaxlib=(0, 12),
    gated=False,
    edits=(
        *_ADDS_CAPSULE_MODULE,
        Edit(DLPACK, """\
DLPACK_VERSION = (0, 8)
""", """\
# jaxlib reads only 0.x capsules; from_dlpack converts 1.x ones for it.
DLPACK_VERSION = (1, 0)
"""),
        Edit(DLPACK, """\
  dlpack = external_array.__dlpack__(stream=stream)

""", """\
  try:
    dlpack = external_array.__dlpack__(stream=stream, max_version=DLPACK_VERSION)
  except TypeError:
    dlpack = external_array.__dlpack__(stream=stream)
  dlpack = dlpack_capsule.as_legacy_capsule(dlpack)

"""),
    ),
    test_edits=_VERSIONED_IMPORT_TESTS,
    runtime_probe=_NULL_DELETER_PROBE)

_VERSIONED_IMPORT_BEFORE_JAXLIB_0_12 = SeriesPatch(
    slug="versioned-import-before-jaxlib-0.12",
    subject="dlpack: import DLPack 1.x capsules on jaxlib before 0.12",
    depends_on=("raise-under-transformations", "strided-input"),
    body="""\
from_dlpack asks producers for DLPack 1.x capsules only where jaxlib (0.12
on) reads them. With jaxlib 0.11.2, which JAX still supports, it asks for
0.x, and what only 1.x can carry failed:
""" + _VERSIONED_IMPORT_PROBLEM + """
With jaxlib before 0.12, from_dlpack now asks for max_version=(1, 0) too,
and hands jaxlib a 1.x capsule's tensor as a 0.x one, without copying it.
""" + _VERSIONED_IMPORT_MODULE.format(
        measured="jax 0.12.0.1 with jaxlib 0.11.2"),
    claims=_VERSIONED_IMPORT_CLAIMS,
    versioned_import=True,
    only_below_jaxlib=(0, 12),
    gated=True,
    edits=(
        *_ADDS_CAPSULE_MODULE,
        Edit(DLPACK, """\
DLPACK_VERSION = _jax.dlpack_version if jaxlib_extension_version >= 499 else (0, 8)
""", """\
# Before 0.12, jaxlib reads only 0.x capsules; from_dlpack converts 1.x ones.
DLPACK_VERSION = _jax.dlpack_version if jaxlib_extension_version >= 499 else (1, 0)
"""),
        Edit(DLPACK, """\
  except TypeError:
    dlpack = external_array.__dlpack__(stream=stream)
""", """\
  except TypeError:
    dlpack = external_array.__dlpack__(stream=stream)
  if jaxlib_extension_version < 499:
    dlpack = dlpack_capsule.as_legacy_capsule(dlpack)
"""),
    ),
    test_edits=_VERSIONED_IMPORT_TESTS,
    runtime_probe=_NULL_DELETER_PROBE)


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

_VERSIONED_EXPORT_TESTS = _tests("""\
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
_WRAPS_LEGACY_EXPORT = Edit(DLPACK, """\
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


def _passes_max_version(branch: str) -> Edit:
  """Has one of to_dlpack's two (alike) ``_to_dlpack`` calls pass it on."""
  call = f"""\
    # {branch}
    return _to_dlpack(
      x, stream=stream,
      src_device=src_device,
      device=device,
      copy=copy"""
  return Edit(DLPACK, call + "\n    )\n",
              call + ",\n      max_version=max_version,\n    )\n")


_VERSIONED_EXPORT = SeriesPatch(
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
    edits=_CAPSULE_EXPORT_EDITS + (
        Edit(DLPACK, """\
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

_VERSIONED_EXPORT_BEFORE_JAXLIB_0_12 = SeriesPatch(
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
    edits=_CAPSULE_EXPORT_EDITS + (
        _WRAPS_LEGACY_EXPORT,
    ),
    test_edits=_VERSIONED_EXPORT_TESTS)


_PRODUCER_COPIED = SeriesPatch(
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
    claims=("copy_false_producer_copied_raises",),
    edits=(
        Edit(DLPACK, """\
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
        _VERSIONED_FLAGS_EDIT,
    ),
    test_edits=_tests("""\
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


_NON_ROW_MAJOR_BODY = """\
jaxlib before 0.11.2 aliases a compact but non-row-major host tensor
(x.T, any permutation) with a matching XLA layout, which reads right,
but device_put to another device then moves it wrongly: the moved array
computes wrong values (jaxlib 0.10 to 0.11.1; 0.8 and 0.9 permute the
moved values). from_dlpack now copies such an import once into the
default layout on those jaxlib versions, and under copy=False raises the
copy-required error saying why. jaxlib 0.11.2 fixed the move, and there
the alias is kept; this patch goes away with the minimum jaxlib.

Measured with jaxlib 0.11.1 and 2 CPU devices:
device_put(from_dlpack(x.transpose(1, 2, 0)), cpu1) * 1 differs from
x.transpose(1, 2, 0).
"""

_NON_ROW_MAJOR_CHECK = """\
    if copy is False:
      raise _CopyRequiredError(
          "Specified input with a non-row-major layout, which requires a "
          "copy since this jaxlib moves such arrays between devices "
          "wrongly (fixed in jaxlib 0.11.2), however copy=False. Set "
          "copy=True or copy=None to perform the requested operation.")
    arr = _array_copy(arr)
  # TODO(phawkins): when we are ready to support x64 arrays in
  # non-x64 mode, change the semantics to not canonicalize here.
"""

_NON_ROW_MAJOR_TESTS = _tests(before=_BEFORE_TENSORFLOW_NONDEFAULT_LAYOUT, source="""\
  @jtu.run_on_devices("cpu")
  def testNonRowMajorImportMovesRight(self):
    if jax.device_count() < 2:
      self.skipTest("needs two devices")
    x = _ensure_alignment(np.arange(24, dtype=np.float32),
                          desired_alignment=64)
    x = x.reshape(2, 3, 4).transpose(1, 2, 0)
    y = jax.device_put(jnp.from_dlpack(x), jax.devices()[1])
    self.assertArraysEqual(x * 2, np.asarray(y * 2))
""")

_BEFORE_TODO_CANONICALIZE = """\
  # TODO(phawkins): when we are ready to support x64 arrays in
  # non-x64 mode, change the semantics to not canonicalize here.
"""

# A JAX whose every jaxlib is older than 0.11.2 (JAX main at 0.11.1).
_NON_ROW_MAJOR = SeriesPatch(
    slug="non-row-major-layouts",
    subject="dlpack: copy non-row-major imports (jaxlib moves them wrongly)",
    speed_cost="""\
Every import now reads the array's layout, to copy a non-row-major one:
jnp.from_dlpack of a 64-element float32 NumPy array went from about 27 to
33 us (1.22x; jaxlib 0.11.1, this 2-core machine, the fastest of 5
alternating rounds, under load). A release whose jaxlib range reaches
0.11.2 gets the check behind jaxlib_extension_version, and 0.12.0.1, whose
minimum jaxlib is 0.11.2, does not get the patch.
""",
    # Its check goes where copy-false-no-narrowing's does, after it.
    depends_on=("exception-classes", "copy-false-no-narrowing"),
    body=_NON_ROW_MAJOR_BODY,
    claims=("transposed_values_are_right", "copy_false_transposed_shares"),
    only_below_jaxlib=(0, 11, 2),
    gated=False,
    edits=(
        Edit(DLPACK, _BEFORE_TODO_CANONICALIZE, """\
  # jaxlib before 0.11.2 aliases other layouts, but moves them to other
  # devices wrongly.
  if not copy and arr.format.layout.major_to_minor != tuple(range(arr.ndim)):
""" + _NON_ROW_MAJOR_CHECK),
    ),
    test_edits=_NON_ROW_MAJOR_TESTS)

# A JAX supporting jaxlib from before 0.11.2 to 0.11.2 or later.
_NON_ROW_MAJOR_BEFORE_JAXLIB_0_11_2 = SeriesPatch(
    slug="non-row-major-layouts-before-jaxlib-0.11.2",
    subject="dlpack: copy non-row-major imports on jaxlib before 0.11.2",
    # Its check goes where copy-false-no-narrowing's does, after it.
    depends_on=("exception-classes", "copy-false-no-narrowing"),
    body=_NON_ROW_MAJOR_BODY,
    claims=("transposed_values_are_right", "copy_false_transposed_shares"),
    only_below_jaxlib=(0, 11, 2),
    gated=True,
    edits=(
        Edit(DLPACK, """\
from jax._src.lib import _jax
from jax._src.lib import xla_client
""", """\
from jax._src.lib import _jax
from jax._src.lib import jaxlib_extension_version
from jax._src.lib import xla_client
"""),
        Edit(DLPACK, _BEFORE_TODO_CANONICALIZE, """\
  # jaxlib before 0.11.2 (extension 495) aliases other layouts, but moves
  # them to other devices wrongly.
  if (jaxlib_extension_version < 495 and not copy
      and arr.format.layout.major_to_minor != tuple(range(arr.ndim))):
""" + _NON_ROW_MAJOR_CHECK),
    ),
    test_edits=_NON_ROW_MAJOR_TESTS)


_FAST_CPU_IMPORT_PROBE = """\
import jax.numpy as jnp
import numpy as np
from jax._src import dlpack

def refuse(*args, **kwargs):
  raise AssertionError("from_dlpack re-wrapped a canonical import")

dlpack.jnp.asarray = refuse
x = np.arange(8, dtype=np.float32)
assert jnp.from_dlpack(x).dtype == np.float32
"""

# Last but the stubs: it edits the lines finished-at-return writes.
_FAST_CPU_IMPORT = SeriesPatch(
    slug="fast-cpu-import",
    subject="dlpack: import host arrays without a stream query or a re-wrap",
    depends_on=("finished-at-return",),
    body="""\
from_dlpack spent most of its time on two things an import of host memory
does not need. It asked the CPU device for a stream, which raised
UNIMPLEMENTED, and caught that; DLPack's stream is None for the CPU. Then
it passed jaxlib's array through jnp.asarray to canonicalise its dtype,
which costs as much as the import itself when the dtype is already
canonical. Both are now skipped: the stream is None for a CPU producer,
and jnp.asarray runs only to convert.

Measured on jax 0.12.0.1 with jaxlib 0.12.0.1 (CPU, x64 off), importing a
64-element float32 NumPy array with jnp.from_dlpack, back to back against
the unpatched tree: 30.7 us before, 7.1 us after (0.23x). The stream query
alone, raising and caught, took about 8 us.
""",
    claims=(),
    edits=(
        Edit(DLPACK, """\
    stream = None
  else:
    try:
      stream = dlpack_device.get_stream_for_external_ready_events()""", """\
    stream = None
  elif dl_device_type == DLDeviceType.kDLCPU:
    # DLPack's stream is None for the CPU; asking the device for one raises.
    stream = None
  else:
    try:
      stream = dlpack_device.get_stream_for_external_ready_events()"""),
        Edit(DLPACK, """\
  result = _place_array(
      jnp.asarray(arr, dtype=dtypes.canonicalize_dtype(arr.dtype)), device,
      dlpack_device, copy)""", """\
  canonical_dtype = dtypes.canonicalize_dtype(arr.dtype)
  # jnp.asarray costs as much as the import itself: only to convert.
  converted = (arr if arr.dtype == canonical_dtype
               else jnp.asarray(arr, dtype=canonical_dtype))
  result = _place_array(converted, device, dlpack_device, copy)"""),
    ),
    test_edits=_tests(before=_BEFORE_TENSORFLOW_TO_JAX_INT64, source="""\
  @jtu.run_on_devices("cpu")
  def testCanonicalHostImportIsNotRewrapped(self):
    def refuse(*args, **kwargs):
      raise AssertionError("from_dlpack re-wrapped a canonical import")

    x = np.arange(8, dtype=np.float32)
    asarray, dlpack_src.jnp.asarray = dlpack_src.jnp.asarray, refuse
    try:
      y = jnp.from_dlpack(x)
    finally:
      dlpack_src.jnp.asarray = asarray
    self.assertEqual(y.dtype, np.float32)
    self.assertArraysEqual(y, x)
"""),
    runtime_probe=_FAST_CPU_IMPORT_PROBE,
    speed_target=0.35)


def for_target(min_jaxlib: tuple[int, ...], max_jaxlib: tuple[int, ...],
               imports_versioned: bool) -> tuple[SeriesPatch, ...]:
  """The series for a JAX supporting jaxlib ``min_jaxlib`` to ``max_jaxlib``
  whose from_dlpack imports DLPack 1.x capsules or not."""
  return tuple(patch for patch in SERIES
               if patch.is_for(min_jaxlib, max_jaxlib, imports_versioned))


def with_dependencies(patch: SeriesPatch,
                      series: tuple[SeriesPatch, ...]) -> tuple[SeriesPatch, ...]:
  """``patch``'s dependencies in ``series``, transitively, then ``patch``.

  In series order: the commits its pull request applies on the base. A
  behaviour ``series`` lacks is one the target has without the series (its
  jaxlib does it), so nothing is applied for it.
  """
  by_behaviour = {each.behaviour: each for each in series}
  wanted: set[str] = set()
  pending = [patch.behaviour]
  while pending:
    behaviour = pending.pop()
    if behaviour not in wanted and behaviour in by_behaviour:
      wanted.add(behaviour)
      pending.extend(by_behaviour[behaviour].depends_on)
  return tuple(each for each in series if each.behaviour in wanted)


SERIES: tuple[SeriesPatch, ...] = (
    _EXCEPTION_CLASSES,
    _NO_SILENT_NARROWING,
    _COPY_TRUE_COPIES,
    _NO_TRACING,
    _JAX_ARRAY_KEEPS_DEVICE,
    _CPU_DEVICE_ID,
    _STRIDED_INPUT,
    _MULTI_DEVICE_SHARDING,
    _FINISHED_AT_RETURN,
    _FOREIGN_PLATFORM,
    _EXPORT_MISSING_PLATFORM,
    _EXPORT_LEGACY_COPY,
    _VERSIONED_IMPORT,
    _VERSIONED_IMPORT_BEFORE_JAXLIB_0_12,
    _VERSIONED_EXPORT,
    _VERSIONED_EXPORT_BEFORE_JAXLIB_0_12,
    _PRODUCER_COPIED,
    _NON_ROW_MAJOR,
    _NON_ROW_MAJOR_BEFORE_JAXLIB_0_11_2,
    _FAST_CPU_IMPORT,
    _STUBS,
)

# Conformance cases jax_patch passes and upstream (0.12.0.1, JAX main)
# fails that no patch of the series claims yet: each is a patch still to
# write. A test keeps this list, the claims and the conformance results
# consistent.
NOT_YET_IN_SERIES: frozenset[str] = frozenset()


# Each patch's entry in JAX's CHANGELOG.md, under "Unreleased": its section
# there, and the item, as JAX words them (Sphinx roles included).
CHANGELOG_ENTRIES: dict[str, tuple[str, str]] = {
    "exception-classes": ("Changes", """\
{func}`jax.dlpack.from_dlpack` and {func}`jax.numpy.from_dlpack` raise the
exception classes the Python Array API standard names, each also deriving
from the type raised before: `BufferError` (also a `ValueError`) when
`copy=False` but a copy is needed, `AttributeError` (also a `TypeError`)
for an object without `__dlpack__` or `__dlpack_device__`, and a
`TypeError` naming `from_dlpack` for an invalid `copy` or `device`."""),
    "copy-false-no-narrowing": ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` with `copy=False` no longer returns a copied
32-bit array for int64 or float64 input when `jax_enable_x64` is off: it
raises the copy-required error, as the Array API standard asks."""),
    "copy-true-copies": ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` with `copy=True` always returns an independent
buffer. Previously a 64-byte-aligned host array was aliased, so writing to
the source changed the "copy"."""),
    "raise-under-transformations": ("Changes", """\
{func}`jax.numpy.from_dlpack` raises inside JAX transformations (`jit`,
`vmap`, `grad`, ...) instead of baking the external buffer's current
contents into the trace as a constant. Import outside the transformation
and pass the array in."""),
    "jax-array-keeps-device": ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` of a `jax.Array` returns it without a DLPack
round trip, on its own device (or on `device` when given). Previously an
array on a CPU device other than the first came back on the first."""),
    "cpu-dlpack-device-id": ("Bug fixes", """\
`jax.Array.__dlpack_device__` reports a CPU array's own device id instead
of 0 for every CPU device."""),
    "strided-input": ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` imports non-compact strided input (`x[::2]`,
`x[::-1]`, `np.broadcast_to` output) through the producer's compact copy
when `copy` allows one, instead of raising `UNIMPLEMENTED`."""),
    "multi-device-sharding": ("New features", """\
{func}`jax.numpy.from_dlpack` accepts a multi-device `Sharding` as `device`,
replicating or sharding the import; `copy=False` raises the copy-required
error, since the other devices need copies."""),
    "dlpack-stubs": ("Changes", """\
The type stubs of `jax.Array` declare `__dlpack__`'s `stream`,
`max_version`, `dl_device` and `copy` keywords, and `__dlpack_device__`."""),
    "finished-at-return": ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` waits for a copy or transfer that reads the
producer's memory (a move to `device`, a dtype conversion, jaxlib's copy of
unaligned host memory) before returning, so a write to the source right
after the import no longer reaches the result in part."""),
    "fast-cpu-import": ("Changes", """\
{func}`jax.numpy.from_dlpack` imports host arrays faster: it no longer asks
the CPU device for a stream, and converts jaxlib's array with
{func}`jax.numpy.asarray` only when its dtype is not canonical."""),
    "foreign-platform-host-copy": ("New features", """\
{func}`jax.numpy.from_dlpack` of an array on a platform this JAX has no
backend for (a CUDA tensor under a CPU-only jaxlib) asks the producer for a
host copy when `device` is a CPU device, and otherwise raises `BufferError`
saying to pass one."""),
    "export-missing-platform": ("Bug fixes", """\
`jax.Array.__dlpack__(dl_device=...)` naming a platform this JAX has no
backend for raises `BufferError`, as the Array API standard asks, instead of
a `RuntimeError`."""),
    "export-legacy-copy": ("Changes", """\
`jax.Array.__dlpack__(max_version=(0, x))` exports a copy, since a DLPack
0.x capsule cannot mark JAX's immutable buffer read-only; `copy=False`
raises the copy-required error. Exports without `max_version` still alias
the array."""),
    "versioned-import": ("New features", """\
{func}`jax.numpy.from_dlpack` imports DLPack 1.x capsules with every
supported jaxlib: read-only NumPy arrays (memory maps, `np.broadcast_to`
output) and producers that export only DLPack 1.x now import without a
copy."""),
    "versioned-export": ("New features", """\
`jax.Array.__dlpack__(max_version=(1, x))` returns a DLPack 1.x capsule with
every supported jaxlib, flagged `READ_ONLY` when it aliases the array and
`IS_COPIED` when it holds a copy."""),
    "copy-false-producer-copied": ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` with `copy=False` raises the copy-required
error when the producer's DLPack 1.x capsule says it holds a copy
(`IS_COPIED`)."""),
    "non-row-major-layouts": ("Bug fixes", """\
{func}`jax.numpy.from_dlpack` copies a non-row-major host tensor (`x.T`)
once on jaxlib before 0.11.2, which moved such imports to other devices
wrongly; `copy=False` raises the copy-required error there."""),
}
# The gated form of a patch says what the ungated one says.
for _form, _same_as in (
    ("versioned-import-before-jaxlib-0.12", "versioned-import"),
    ("versioned-export-before-jaxlib-0.12", "versioned-export"),
    ("non-row-major-layouts-before-jaxlib-0.11.2", "non-row-major-layouts")):
  CHANGELOG_ENTRIES[_form] = CHANGELOG_ENTRIES[_same_as]


def changelog(patch: SeriesPatch) -> str:
  """The patch's entry for JAX's CHANGELOG.md, as it goes under Unreleased."""
  section, item = CHANGELOG_ENTRIES[patch.slug]
  # JAX aligns an item's lines with its first, within 80 columns.
  lines = textwrap.fill(" ".join(item.split()), width=80,
                        initial_indent="  * ", subsequent_indent="    ",
                        break_long_words=False, break_on_hyphens=False)
  return f"## Unreleased\n\n* {section}\n{lines}\n"


def added_tests(patch: SeriesPatch) -> list[str]:
  """The JAX test methods the patch adds or changes, by name."""
  names: set[str] = set()
  for edit in patch.test_edits:
    names.update(re.findall(r"^  def (test\w+)\(", edit.new, re.MULTILINE))
    if edit.old and not re.search(r"^  def test", edit.new, re.MULTILINE):
      # An edit inside a test: name the test it is in, if JAX's text says.
      names.update(re.findall(r"def (test\w+)\(", edit.old))
  return sorted(names)


def description(patch: SeriesPatch) -> str:
  """The pull request's description: what was wrong, the standard's clause
  and the measured upstream behaviour (the commit message's body), how to
  test it, and its changelog entry."""
  parts = [f"# {patch.subject}\n", patch.body, "## How to test\n"]
  tests = added_tests(patch)
  if tests:
    parts.append(
        "```sh\npytest tests/array_interoperability_test.py -k "
        f"\"{' or '.join(tests)}\"\n```\n")
  if patch.typing_probe:
    parts.append("The target's type checker (pyrefly, as JAX's pre-commit "
                 "runs it) accepts this after the change and rejects it "
                 "before:\n\n```python\n" + patch.typing_probe + "```\n")
  if patch.runtime_probe:
    parts.append("This script fails before the change and passes after "
                 "it:\n\n```python\n" + patch.runtime_probe + "```\n")
  if patch.claims:
    parts.append(
        "The Array API conformance cases it makes pass, as jax-patch (which "
        "prepared this change) names them: "
        + ", ".join(f"`{claim}`" for claim in patch.claims) + ".\n")
  if patch.speed_cost:
    parts.append("## What it costs\n\n" + patch.speed_cost)
  parts.append("## Changelog\n\nIts entry in CHANGELOG.md:\n\n```md\n"
               + changelog(patch) + "```\n")
  return "\n".join(parts)
