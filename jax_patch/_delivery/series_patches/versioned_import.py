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

"""The pull request "dlpack: import DLPack 1.x capsules (read-only arrays)"
(versioned-import).

In two forms: PATCH, for a target whose every jaxlib is older than 0.12
(from jaxlib 0.12 on, none of it is needed), and PATCH_BEFORE_JAXLIB_0_12,
gated on jaxlib_extension_version, for a target whose jaxlib range reaches
0.12.
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base
from jax_patch._delivery.series_patches import capsule_module


# Both forms of the versioned-import patch add the module, and import it.
_ADDS_CAPSULE_MODULE = (
    base.Edit(capsule_module.CAPSULE_MODULE, "",
              capsule_module.AS_VERSIONED_IMPORT_ADDS_IT),
    base.Edit(base.DLPACK, """\
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

_VERSIONED_IMPORT_TESTS = base.test_methods("""\
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
""") + (base.test_helper(_NULL_DELETER_CHECK, base.BEFORE_DLPACK_TEST),)

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


PATCH = base.SeriesPatch(
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
        base.Edit(base.DLPACK, """\
DLPACK_VERSION = (0, 8)
""", """\
# jaxlib reads only 0.x capsules; from_dlpack converts 1.x ones for it.
DLPACK_VERSION = (1, 0)
"""),
        base.Edit(base.DLPACK, """\
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

PATCH_BEFORE_JAXLIB_0_12 = base.SeriesPatch(
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
        base.Edit(base.DLPACK, """\
DLPACK_VERSION = _jax.dlpack_version if jaxlib_extension_version >= 499 else (0, 8)
""", """\
# Before 0.12, jaxlib reads only 0.x capsules; from_dlpack converts 1.x ones.
DLPACK_VERSION = _jax.dlpack_version if jaxlib_extension_version >= 499 else (1, 0)
"""),
        base.Edit(base.DLPACK, """\
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


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("New features", """\
{func}`jax.numpy.from_dlpack` imports DLPack 1.x capsules with every
supported jaxlib: read-only NumPy arrays (memory maps, `np.broadcast_to`
output) and producers that export only DLPack 1.x now import without a
copy.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH, PATCH_BEFORE_JAXLIB_0_12)
