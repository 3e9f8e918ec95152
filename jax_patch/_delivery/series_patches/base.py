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

"""What every pull request of the series is made of.

The ``SeriesPatch``, its ``Edit``s, the JAX files they edit, and the places
in JAX's DLPack test where pull requests add their tests without colliding.
"""

from __future__ import annotations

import dataclasses


DLPACK = "jax/_src/dlpack.py"
ARRAY = "jax/_src/array.py"
DEPRECATIONS = "jax/_src/deprecations.py"
INTEROP_TEST = "tests/array_interoperability_test.py"
CHANGELOG = "CHANGELOG.md"

# Where a patch's tests go: the end of JAX's DLPackTest class, or before one
# of its tests. Pull requests that do not depend on each other put theirs in
# different places, so that each merges after the others without a conflict.
END_OF_DLPACK_TEST = "\n\nclass CudaArrayInterfaceTest(jtu.JaxTestCase):\n"
BEFORE_JAX_ROUND_TRIP = """\
  @jtu.sample_product(
      shape=all_shapes,
      dtype=dlpack_dtypes + extra_dlpack_dtypes,
      copy=[False, True, None],
      use_stream=[False, True],
  )
  @jtu.run_on_devices("gpu")
  def testJaxRoundTrip("""
BEFORE_JAX_ARRAY_ROUND_TRIP = """\
  @jtu.sample_product(
      shape=all_shapes,
      dtype=dlpack_dtypes,
      device_type=[None, "cpu", "gpu"],
  )
  def testJaxArrayRoundTrip("""
BEFORE_PINNED_HOST_ROUND_TRIP = """\
  @jtu.run_on_devices("gpu", "tpu")
  def testJaxPinnedHostRoundTrip(self):"""
BEFORE_TENSORFLOW_TO_JAX = """\
  @jtu.sample_product(shape=all_shapes, dtype=dlpack_dtypes)
  @unittest.skipIf(not tf, "Test requires TensorFlow")
  def testTensorFlowToJax(self, shape, dtype):"""
BEFORE_JAX_TO_TENSORFLOW = """\
  @jtu.sample_product(
      shape=all_shapes,
      dtype=dlpack_dtypes,
  )
  @jtu.run_on_devices("cpu", "gpu")
  @unittest.skipIf(not tf, "Test requires TensorFlow")
  def testJaxToTensorFlow("""
BEFORE_TENSORFLOW_TO_JAX_INT64 = """\
  @unittest.skipIf(not tf, "Test requires TensorFlow")
  def testTensorFlowToJaxInt64(self):"""
BEFORE_TENSORFLOW_NONDEFAULT_LAYOUT = """\
  @unittest.skipIf(not tf, "Test requires TensorFlow")
  def testTensorFlowToJaxNondefaultLayout(self):"""
BEFORE_NUMPY_TO_JAX = """\
  @jtu.sample_product(
    shape=all_shapes,
    dtype=numpy_dtypes,
    copy=[False, True, None],
    aligned=[False, True],
  )
  def testNumpyToJax("""
AFTER_NUMPY_TO_JAX = "  def testNumpyToJaxNondefaultLayout(self):"
BEFORE_JAX_TO_NUMPY = """\
  @jtu.sample_product(shape=all_shapes, dtype=numpy_dtypes)
  @jtu.run_on_devices("cpu")  # NumPy only accepts cpu DLPacks
  def testJaxToNumpy("""
BEFORE_TPU_HOST_BUFFER_DMA_MAP = """\
  @jtu.run_on_devices("tpu")
  def testTpuHostBufferDmaMap(self):"""
# Module-level helpers' places, likewise apart.
BEFORE_DLPACK_TEST = "\n\nclass DLPackTest(jtu.JaxTestCase):"
BEFORE_MAX_ALIGN_BITS = "\n\n@cache()\ndef _get_max_align_bits(dtype, device):"
BEFORE_ENSURE_ALIGNMENT_TEST = "\n\ndef test_ensure_alignment():"


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
  # With only_below_jaxlib: the jaxlib defect (a ``series_reports`` slug)
  # whose fix, in that jaxlib, this stands in for on older ones. A target
  # whose every jaxlib has the defect gets the report, not a workaround.
  stands_in_for: str = ""
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

  def is_for(self, min_jaxlib: tuple[int, ...],
             max_jaxlib: tuple[int, ...]) -> bool:
    """Whether a target with this jaxlib range needs it."""
    if self.only_below_jaxlib is None:
      return True
    reaches_fixed_jaxlib = max_jaxlib >= self.only_below_jaxlib
    return (min_jaxlib < self.only_below_jaxlib
            and self.gated in (None, reaches_fixed_jaxlib))

  def shows_on_jaxlib(self, jaxlib: tuple[int, ...]) -> bool:
    """Whether upstream fails its claims with ``jaxlib``."""
    return self.only_below_jaxlib is None or jaxlib < self.only_below_jaxlib


def test_methods(source: str, before: str = END_OF_DLPACK_TEST
           ) -> tuple[Edit, ...]:
  """Edits adding test methods (``source``) to DLPackTest.

  They go at its end, or ``before`` one of its tests.
  """
  source = source.rstrip("\n") + "\n"
  if before == END_OF_DLPACK_TEST:
    return (Edit(INTEROP_TEST, before, "\n" + source + before),)
  return (Edit(INTEROP_TEST, before, source + "\n" + before),)


def test_helper(source: str, before: str) -> Edit:
  """An edit adding module-level test code (``source``) to JAX's test file.

  It goes ``before`` a module-level anchor of that file.
  """
  return Edit(INTEROP_TEST, before,
              "\n\n" + source.strip("\n") + "\n" + before)
