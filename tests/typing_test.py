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

"""Typing tests: the stubs type-check real usage and fix the seed failures.

Each test runs mypy or pytype in a subprocess and compares what it reports
with what the checked file expects.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from absl.testing import absltest
import jax

from jax_patch._src import source_patch

_ROOT = pathlib.Path(__file__).resolve().parents[1]
_TYPING = _ROOT / "tests" / "typing"
_SEED = _TYPING / "seed"
_USAGE = _TYPING / "from_dlpack_usage.py"
_BINDING_SHAPES = _TYPING / "binding_shapes.py"
_MYPY_ERROR = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+): error: .*"
                         r"\[(?P<code>[a-z-]+)\]$", re.MULTILINE)
_EXPECTED = re.compile(r"#\s*E:\s*(?P<code>[a-z-]+)[ \t]*$")
_PYTYPE_ERROR = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+):\d+: .*"
                           r"\[(?P<code>[a-z-]+)\]$", re.MULTILINE)

Errors = set[tuple[int, str]]

# pytype 2024.10.11 analyses Python 3.10 to 3.12 only, and the typecheck
# extra installs it only there (setup.cfg); tools/type_check.py says the same.
_PYTYPE_RUNS_HERE = sys.version_info < (3, 13)
_NO_PYTYPE_HERE = ("pytype 2024.10.11 runs on Python 3.10 to 3.12, not "
                   f"{sys.version_info.major}.{sys.version_info.minor}")
requires_pytype = unittest.skipUnless(_PYTYPE_RUNS_HERE, _NO_PYTYPE_HERE)


def expected_errors(source: str) -> Errors:
  """The ``(line, code)`` pairs a file marks with ``# E: code``."""
  return {(number, match["code"])
          for number, line in enumerate(source.splitlines(), start=1)
          for match in _EXPECTED.finditer(line)}


def mypy_errors(path: pathlib.Path, mypy_path: list[pathlib.Path],
                cache_dir: pathlib.Path) -> tuple[Errors, str]:
  """Runs mypy on ``path``; returns its ``(line, code)`` errors and output."""
  env = dict(os.environ, MYPYPATH=os.pathsep.join(map(str, mypy_path)))
  run = subprocess.run(
      [sys.executable, "-m", "mypy", "--config-file", str(_ROOT / "setup.cfg"),
       "--no-error-summary", "--show-error-codes", "--cache-dir",
       str(cache_dir), str(path)],
      cwd=_ROOT, env=env, capture_output=True, text=True, timeout=600,
      check=False)
  output = run.stdout + run.stderr
  errors = {(int(m["line"]), m["code"]) for m in _MYPY_ERROR.finditer(output)
            if pathlib.Path(m["path"]).name == path.name}
  return errors, output


def pytype_run(path: pathlib.Path,
               pythonpath: pathlib.Path) -> tuple[int, str]:
  """Runs pytype on ``path``; returns its exit status (0: clean) and output."""
  run = subprocess.run(
      [sys.executable, "-m", "pytype.main", f"--pythonpath={pythonpath}",
       str(path)],
      cwd=_ROOT, capture_output=True, text=True, timeout=600, check=False)
  return run.returncode, run.stdout + run.stderr


class MypyUsageTest(absltest.TestCase):
  """The typed API, with JAX's stubs corrected as vendoring corrects them."""

  scratch: pathlib.Path
  mypy_path: list[pathlib.Path]

  @classmethod
  def setUpClass(cls) -> None:
    super().setUpClass()
    cls.scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-typing-"))
    jax_tree = source_patch.linked_copy(pathlib.Path(jax.__file__).parent,
                                      cls.scratch / "tree")
    source_patch.correct_tree(jax_tree)
    cls.mypy_path = [jax_tree, _ROOT / "stubs"]

  @classmethod
  def tearDownClass(cls) -> None:
    shutil.rmtree(cls.scratch, ignore_errors=True)
    super().tearDownClass()

  def _check(self, path: pathlib.Path) -> tuple[Errors, Errors, str]:
    reported, output = mypy_errors(path, self.mypy_path,
                                   self.scratch / "cache")
    return reported, expected_errors(path.read_text()), output

  def test_usage_reports_exactly_the_expected_errors(self) -> None:
    reported, expected, output = self._check(_USAGE)
    self.assertNotEmpty(expected)
    self.assertEqual(reported, expected, output)

  def test_removing_an_expectation_makes_the_check_fail(self) -> None:
    lines = _USAGE.read_text().splitlines(keepends=True)
    marked, code = next((i, match["code"]) for i, line in enumerate(lines)
                        if (match := _EXPECTED.search(line)))
    lines[marked] = _EXPECTED.sub("", lines[marked])
    edited = self.scratch / _USAGE.name
    edited.write_text("".join(lines))
    reported, expected, _ = self._check(edited)
    self.assertEqual(reported - expected, {(marked + 1, code)})


class BindingShapesTest(absltest.TestCase):
  """stubs/jaxlib/_jax.pyi types every shape the DLPack binding has had."""

  def setUp(self) -> None:
    super().setUp()
    self.scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-shapes-"))
    self.addCleanup(shutil.rmtree, self.scratch, ignore_errors=True)

  def test_mypy_accepts_every_shape_and_reports_exactly_the_misuses(
      self) -> None:
    errors, output = mypy_errors(_BINDING_SHAPES, [_ROOT / "stubs"],
                                 self.scratch)
    expected = expected_errors(_BINDING_SHAPES.read_text())
    self.assertNotEmpty(expected)
    self.assertEqual(errors, expected, output)

  @requires_pytype
  def test_pytype_accepts_every_shape_and_reports_exactly_the_misuses(
      self) -> None:
    # pytype reads the stub as part of a package; mypy must not see this
    # __init__.pyi, which would shadow the real jaxlib.
    package = self.scratch / "jaxlib"
    package.mkdir()
    (package / "__init__.pyi").write_text("")
    shutil.copy(_ROOT / "stubs" / "jaxlib" / "_jax.pyi", package)
    _, output = pytype_run(_BINDING_SHAPES, self.scratch)
    reported = {int(m["line"]) for m in _PYTYPE_ERROR.finditer(output)
                if pathlib.Path(m["path"]).name == _BINDING_SHAPES.name}
    expected = {line for line, _ in
                expected_errors(_BINDING_SHAPES.read_text())}
    self.assertNotEmpty(expected)
    self.assertEqual(reported, expected, output)


class SeedRegressionTest(absltest.TestCase):
  """The two failures that held up the upstream change, and their fixes."""

  def setUp(self) -> None:
    super().setUp()
    # Not create_tempdir(): absl's flags are unparsed under pytest.
    self.cache = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-mypy-"))
    self.addCleanup(shutil.rmtree, self.cache, ignore_errors=True)

  def test_mypy_flags_the_legacy_call_without_the_overloads(self) -> None:
    errors, output = mypy_errors(_SEED / "legacy_call.py",
                                 [_SEED / "no_overloads"], self.cache)
    self.assertIn((10, "arg-type"), errors, output)

  def test_mypy_accepts_the_legacy_call_with_our_stub(self) -> None:
    errors, output = mypy_errors(_SEED / "legacy_call.py", [], self.cache)
    self.assertEqual(errors, set(), output)

  @requires_pytype
  def test_pytype_fails_the_import_with_a_named_device_type(self) -> None:
    _, output = pytype_run(_SEED / "numpy_user.py",
                           _SEED / "pytype_named_device")
    self.assertIn("Couldn't import pyi for 'seedjax.numpy'", output)
    self.assertIn("[pyi-error]", output)

  @requires_pytype
  def test_pytype_accepts_device_spelled_any(self) -> None:
    # The exit status too: a pytype that cannot start prints no "error".
    status, output = pytype_run(_SEED / "numpy_user.py",
                                _SEED / "pytype_any_device")
    self.assertEqual(status, 0, output)
    self.assertNotIn("error", output)


if __name__ == "__main__":
  absltest.main()
