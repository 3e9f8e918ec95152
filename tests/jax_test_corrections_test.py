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

"""Tests for correcting JAX's own DLPack test when vendoring into a checkout.

JAX's test file is not part of this project. The tests that read it run
where ``JAX_GIT_DIR`` names a JAX git repository (a clone or a mirror);
``tools/jax_own_tests.py --vendored`` runs the corrected file itself. The
corrected ``copy=False`` lines are the project's own, and run here in the
x64 mode the run gives.
"""

import os
import pathlib
import shutil
import subprocess
import tempfile
import textwrap
import types
from typing import Any, Callable

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

import jax_patch
from jax_patch._delivery import jax_test_corrections
from jax_patch._delivery import source_patch
from jax_patch._delivery import vendor
from jax_patch.testing import conformance
from tests import cpu_devices

_TEST_FILE = jax_test_corrections.TEST_FILE
_JAX_GIT_DIR = os.environ.get("JAX_GIT_DIR")

# A test file whose testNumpyToJax no JAX release has.
_UNFAMILIAR = """\
class DLPackTest:

  def testNumpyToJax(self, shape, dtype, copy):
    self.assertTrue(copy or not copy)

  def testJaxToNumpy(self):
    pass
"""

_WITHOUT_DECLARATIONS = """\
class DLPackTest:

  def testJaxToNumpy(self):
    pass
"""


class VendorCorrectsJaxTestsTest(absltest.TestCase):

  def setUp(self) -> None:
    super().setUp()
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-test-"))
    self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
    self.root = scratch / "checkout"
    shutil.copytree(pathlib.Path(jax.__file__).parent, self.root / "jax",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (self.root / "tests").mkdir()
    (self.root / "pyproject.toml").write_text("[project]\nname = 'jax'\n")

  def _write_jax_test(self, text: str) -> pathlib.Path:
    path = self.root / _TEST_FILE
    path.write_text(text)
    return path

  def test_unfamiliar_declaration_is_refused_by_name(self) -> None:
    self._write_jax_test(_UNFAMILIAR)
    with self.assertRaisesRegex(
        vendor.VendorError,
        r"DLPackTest\.testNumpyToJax \(sha256 [0-9a-f]{12}\) is not as any "
        r"JAX .*--force"):
      vendor.vendor(self.root)
    self.assertFalse((self.root / vendor.BACKUP_DIR).exists())

  def test_force_leaves_an_unfamiliar_declaration_as_it_is(self) -> None:
    path = self._write_jax_test(_UNFAMILIAR)
    prepared = vendor.vendor(self.root, force=True)
    self.assertEqual(path.read_text(), _UNFAMILIAR)
    self.assertTrue(any("DLPackTest.testNumpyToJax" in note
                        for note in prepared.notes), prepared.notes)
    self.assertIn("jax/_src/dlpack.py", [c.path for c in prepared.changes])

  def test_file_without_the_declarations_is_left_alone(self) -> None:
    path = self._write_jax_test(_WITHOUT_DECLARATIONS)
    changes = vendor.vendor(self.root).changes
    self.assertNotIn(_TEST_FILE, [c.path for c in changes])
    self.assertEqual(path.read_text(), _WITHOUT_DECLARATIONS)


_COPY_FALSE_FORMS = (
    ("before_the_aligned_parameter",
     jax_test_corrections._COPY_FALSE_WITHOUT_ALIGNED),
    ("with_the_aligned_parameter",
     jax_test_corrections._COPY_FALSE_WITH_ALIGNED),
)


class _JaxOnTheCpu:
  """``jax``, as JAX's tests see it where the CPU is the default backend."""

  def __getattr__(self, name: str) -> Any:
    return getattr(jax, name)

  def default_backend(self) -> str:
    return "cpu"


def _refusal_expected(form: tuple[str, str], x_np: np.ndarray[Any, Any],
                      from_dlpack: Callable[..., Any]) -> bool:
  """Runs a correction's lines as testNumpyToJax runs them on the CPU
  backend, copy=False.

  Returns:
    Whether they then expect ``from_dlpack`` to refuse (the branch that
    asserts "requires a copy").

  Raises:
    AssertionError: the lines' own check failed (a copy where they prove
      sharing).
  """
  _, lines = form
  # The corrected lines end in the `if` whose branch expects the refusal.
  body = textwrap.dedent(lines + "      refusal = True\n"
                         "    else:\n      refusal = False\n")
  scope: dict[str, Any] = dict(
      jax=_JaxOnTheCpu(), np=np, x_np=x_np, dtype=x_np.dtype.type,
      copy=False,
      aligned=not x_np.ctypes.data % 64,
      _from_dlpack=lambda: from_dlpack(x_np, copy=False),
      self=types.SimpleNamespace(
          assertArraysEqual=np.testing.assert_array_equal))
  exec(body, scope)  # pylint: disable=exec-used
  refusal: bool = scope["refusal"]
  return refusal


def _copying_from_dlpack(x: Any, copy: Any = None) -> Any:
  del copy
  return jax.device_put(np.array(x), cpu_devices.cpu())


class CorrectedCopyFalseTest(parameterized.TestCase):
  """The corrected testNumpyToJax states the standard in either x64 mode."""

  @parameterized.named_parameters(
      (f"{name}_{dtype.__name__}", form, dtype)
      for name, form in _COPY_FALSE_FORMS
      for dtype in (np.int64, np.float64))
  def test_64_bit_input_is_refused_with_x64_off_and_shared_with_it_on(
      self, form: tuple[str, str], dtype: Any) -> None:
    x_np = conformance.aligned_array((4,), dtype)
    with jax_patch.patched():
      refusal = _refusal_expected(form, x_np, jnp.from_dlpack)
    x64 = conformance.x64_enabled()
    self.assertEqual(refusal, not x64)
    # With x64 on the lines proved sharing by writing to x_np (each element
    # changes); with it off there is no import to prove anything of.
    self.assertEqual(x_np.tolist(), [1, 0, 0, 0] if x64 else [0, 1, 2, 3])

  @parameterized.named_parameters(*_COPY_FALSE_FORMS)
  def test_a_copy_under_copy_false_fails_the_mutation_check(
      self, form: tuple[str, str]) -> None:
    x_np = conformance.aligned_array((4,), np.float32)  # Either mode.
    with self.assertRaises(AssertionError):
      _refusal_expected(form, x_np, _copying_from_dlpack)


def _jax_test_at(ref: str) -> str:
  assert _JAX_GIT_DIR is not None
  return subprocess.run(
      ["git", f"--git-dir={_JAX_GIT_DIR}", "show", f"{ref}:{_TEST_FILE}"],
      check=True, capture_output=True, text=True).stdout


@absltest.skipUnless(_JAX_GIT_DIR, "reads JAX's own test file: set "
                     "JAX_GIT_DIR to a JAX git repository")
class RealJaxTestFileTest(parameterized.TestCase):

  @parameterized.parameters("jax-v0.4.35", "jax-v0.7.2", "jax-v0.8.0",
                            "jax-v0.8.1", "jax-v0.10.2", "jax-v0.11.0")
  def test_only_the_corrected_declarations_change_once(self, ref: str) -> None:
    original = _jax_test_at(ref)
    corrected = jax_test_corrections.corrected(original)
    self.assertEqual(jax_test_corrections.corrected(corrected), corrected)
    before, after = (source_patch.spans(original),
                     source_patch.spans(corrected))
    self.assertEqual(set(before), set(after))
    lines, fixed_lines = original.splitlines(), corrected.splitlines()
    changed = {key for key in before
               if lines[slice(*before[key])] != fixed_lines[slice(*after[key])]}
    targets = {c.declaration for c in jax_test_corrections.CORRECTIONS}
    self.assertEqual(changed, targets & set(before))
    self.assertIn(("DLPackTest", "testNumpyToJax"), changed)


if __name__ == "__main__":
  absltest.main()
