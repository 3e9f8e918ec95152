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

Each test runs a type checker (mypy, pyright, pyrefly or pytype) in a
subprocess and compares what it reports with what the checked file expects.
The usage tests check a scratch project as a user's CI has it: the usage
files, `jax-patch stubs`'s output for the installed JAX, and each checker
configured by the README's own snippet.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Callable
import unittest

from absl.testing import absltest
from absl.testing import parameterized
import jax

from jax_patch._delivery import stubs

_ROOT = pathlib.Path(__file__).resolve().parents[1]
_TYPING = _ROOT / "tests" / "typing"
_SEED = _TYPING / "seed"
_USAGE = _TYPING / "from_dlpack_usage.py"
_ORDINARY = _TYPING / "ordinary_jax_usage.py"
# "Typing in your CI", which the README links.
_TYPING_DOC = _ROOT / "docs" / "typing.md"
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


def run_checker(command: list[str], cwd: pathlib.Path,
                env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess[str]:
  """Runs a type checker in a subprocess, this module's only way to run one.

  Its environment is this process's, less JAX_ENABLE_X64, plus ``env``: the
  checkers read source and never run it, and without the flag nothing they
  run can see it either. This module's outcome is therefore the same in
  both x64 modes, which lets the edges' x64-on pass leave it out
  (tests/conftest.py, tests/x64_independence_test.py).
  """
  environment = {name: value for name, value in os.environ.items()
                 if name != "JAX_ENABLE_X64"}
  environment.update(env or {})
  return subprocess.run(command, cwd=cwd, env=environment,
                        capture_output=True, text=True, timeout=600,
                        check=False)


def expected_errors(source: str) -> Errors:
  """The ``(line, code)`` pairs a file marks with ``# E: code``."""
  return {(number, match["code"])
          for number, line in enumerate(source.splitlines(), start=1)
          for match in _EXPECTED.finditer(line)}


def mypy_errors(path: pathlib.Path, mypy_path: list[pathlib.Path],
                cache_dir: pathlib.Path) -> tuple[Errors, str]:
  """Runs mypy on ``path``; returns its ``(line, code)`` errors and output."""
  run = run_checker(
      [sys.executable, "-m", "mypy", "--config-file", str(_ROOT / "setup.cfg"),
       "--no-error-summary", "--show-error-codes", "--cache-dir",
       str(cache_dir), str(path)],
      _ROOT, {"MYPYPATH": os.pathsep.join(map(str, mypy_path))})
  output = run.stdout + run.stderr
  errors = {(int(m["line"]), m["code"]) for m in _MYPY_ERROR.finditer(output)
            if pathlib.Path(m["path"]).name == path.name}
  return errors, output


def pytype_run(path: pathlib.Path,
               pythonpath: pathlib.Path) -> tuple[int, str]:
  """Runs pytype on ``path``; returns its exit status (0: clean) and output."""
  run = run_checker(
      [sys.executable, "-m", "pytype.main", f"--pythonpath={pythonpath}",
       str(path)], _ROOT)
  return run.returncode, run.stdout + run.stderr


def readme_snippet(checker: str) -> str:
  """The documented configuration for ``checker``: the code block after its
  ``<!-- typing-ci: checker -->`` marker, dedented."""
  match = re.search(
      rf"<!-- typing-ci: {checker} -->\n(?P<indent>[ \t]*)```[a-z]*\n"
      r"(?P<body>.*?)\n(?P=indent)```", _TYPING_DOC.read_text(), re.DOTALL)
  if match is None:
    raise AssertionError(
        f"docs/typing.md has no typing-ci snippet for {checker}")
  indent = match["indent"]
  return "".join(line[len(indent):] + "\n" if line.startswith(indent)
                 else line + "\n" for line in match["body"].splitlines())


def _installed_stubs() -> stubs.StubPackage:
  root = pathlib.Path(jax.__file__).parent.parent
  return stubs.build(root, jax.__version__)


class UserProject:
  """A scratch project as a user's CI has it.

  The two usage files, ``typings/`` as ``jax-patch stubs`` writes it (or
  ``files``, to try another layout), and a ``pyproject.toml`` holding the
  README's pyright and pyrefly snippets. One line each adds this checkout,
  where the checkers find ``jax_patch``: an editable install of it is an
  import hook no checker follows.
  """

  def __init__(self, root: pathlib.Path,
               files: dict[str, bytes] | None) -> None:
    self.root = root
    self.files = files or {}
    root.mkdir(parents=True)
    for source in (_USAGE, _ORDINARY):
      shutil.copy(source, root)
    if files is not None:
      stubs.write(root / stubs.DEFAULT_DIR,
                  stubs.StubPackage(jax.__version__, files))
    (root / "pyproject.toml").write_text(
        readme_snippet("pyright") + f"extraPaths = [{str(_ROOT)!r}]\n\n"
        + readme_snippet("pyrefly") + f"search-path = [{str(_ROOT)!r}]\n")

  def _run(self, command: list[str],
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_checker(command, self.root, env)

  def mypy(self, cache: pathlib.Path) -> tuple[dict[str, Errors], str]:
    """The README's command: the stub package on the interpreter's path."""
    paths = [str(self.root / stubs.DEFAULT_DIR), str(_ROOT)]
    run = self._run(
        [sys.executable, "-m", "mypy", "--no-error-summary",
         "--show-error-codes", "--cache-dir", str(cache), _USAGE.name,
         _ORDINARY.name], env={"PYTHONPATH": os.pathsep.join(paths)})
    output = run.stdout + run.stderr
    errors: dict[str, Errors] = {_USAGE.name: set(), _ORDINARY.name: set()}
    for m in _MYPY_ERROR.finditer(output):
      errors.setdefault(pathlib.Path(m["path"]).name, set()).add(
          (int(m["line"]), m["code"]))
    return errors, output

  def pyright(self) -> tuple[dict[str, set[int]], str]:
    """pyright over the project, as `pyright` with no arguments checks it."""
    run = self._run([sys.executable, "-m", "pyright", "--outputjson",
                     "--pythonpath", sys.executable],
                    env={"PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"})
    report = json.loads(run.stdout)
    lines: dict[str, set[int]] = {_USAGE.name: set(), _ORDINARY.name: set()}
    for diagnostic in report["generalDiagnostics"]:
      if diagnostic["severity"] == "error":
        lines.setdefault(pathlib.Path(diagnostic["file"]).name, set()).add(
            diagnostic["range"]["start"]["line"] + 1)
    if not report["summary"]["filesAnalyzed"]:
      raise AssertionError(f"pyright checked no file: {run.stdout}")
    return lines, run.stdout + run.stderr

  def pyrefly(self) -> tuple[dict[str, set[int]], str]:
    """pyrefly over the project, as `pyrefly check` checks it."""
    run = self._run([sys.executable, "-m", "pyrefly", "check",
                     "--output-format", "json", "--python-interpreter-path",
                     sys.executable])
    lines: dict[str, set[int]] = {_USAGE.name: set(), _ORDINARY.name: set()}
    for error in json.loads(run.stdout)["errors"]:
      if error["severity"] == "error":
        lines.setdefault(pathlib.Path(error["path"]).name, set()).add(
            error["line"])
    if run.returncode not in (0, 1):
      raise AssertionError(f"pyrefly failed: {run.stderr}")
    return lines, run.stdout + run.stderr


# parameterized.named_parameters' cases: one per checker of a user's CI.
_USER_CHECKERS = (("_mypy", "mypy"), ("_pyright", "pyright"),
                  ("_pyrefly", "pyrefly"))


def _lines(errors: Errors) -> set[int]:
  return {line for line, _ in errors}


def _dlpack_method_lines() -> set[int]:
  """The lines of the usage file's calls to ``jax.Array``'s DLPack methods,
  which JAX's own stubs reject."""
  lines = _USAGE.read_text().splitlines()
  first = next(i for i, line in enumerate(lines, 1)
               if "default.__dlpack__(stream=" in line)
  last = next(i for i, line in enumerate(lines, 1)
              if "default.__dlpack_device__()" in line)
  return set(range(first, last + 1))


class UserCITest(parameterized.TestCase):
  """mypy, pyright and pyrefly in a user's project, as the README sets
  each up, with `jax-patch stubs`'s output; and what goes wrong without it
  or with another layout."""

  scratch: pathlib.Path
  project: UserProject
  bare: UserProject
  results: dict[str, dict[str, set[int]]]
  outputs: dict[str, str]

  @classmethod
  def setUpClass(cls) -> None:
    super().setUpClass()
    cls.scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-ci-"))
    cls.project = UserProject(cls.scratch / "project",
                              _installed_stubs().files)
    cls.bare = UserProject(cls.scratch / "bare", None)
    cls.results, cls.outputs = {}, {}

  @classmethod
  def tearDownClass(cls) -> None:
    shutil.rmtree(cls.scratch, ignore_errors=True)
    super().tearDownClass()

  @classmethod
  def reported(cls, checker: str, project: UserProject) -> dict[str, set[int]]:
    """Error lines per file; each checker runs once per project."""
    key = f"{checker} {project.root.name}"
    if key not in cls.results:
      if checker == "mypy":
        errors, output = project.mypy(cls.scratch / "mypy-cache")
        cls.results[key] = {name: _lines(found)
                            for name, found in errors.items()}
      else:
        cls.results[key], output = getattr(project, checker)()
      cls.outputs[key] = output
    return cls.results[key]

  def check(self, checker: str, project: UserProject, path: pathlib.Path,
            expected: set[int]) -> None:
    reported = self.reported(checker, project)
    self.assertEqual(reported[path.name], expected,
                     self.outputs[f"{checker} {project.root.name}"])

  @parameterized.named_parameters(*_USER_CHECKERS)
  def test_usage_gets_exactly_its_marked_rejections(self, checker: str) -> None:
    expected = _lines(expected_errors(_USAGE.read_text()))
    self.assertNotEmpty(expected)
    self.check(checker, self.project, _USAGE, expected)

  @parameterized.named_parameters(*_USER_CHECKERS)
  def test_ordinary_jax_gets_only_its_marked_rejection(
      self, checker: str) -> None:
    expected = _lines(expected_errors(_ORDINARY.read_text()))
    self.assertLen(expected, 1)
    self.check(checker, self.project, _ORDINARY, expected)

  @parameterized.named_parameters(*_USER_CHECKERS)
  def test_without_the_stubs_array_dlpack_calls_are_rejected(
      self, checker: str) -> None:
    # What the issue measured: JAX's own stubs reject the standard's calls.
    expected = _lines(expected_errors(_USAGE.read_text()))
    reported = self.reported(checker, self.bare)[_USAGE.name]
    self.assertNotEmpty(reported - expected)
    self.assertLessEqual(reported - expected, _dlpack_method_lines())

  def test_mypy_codes_are_the_marked_ones(self) -> None:
    errors, output = self.project.mypy(self.scratch / "mypy-cache")
    self.assertEqual(errors[_USAGE.name],
                     expected_errors(_USAGE.read_text()), output)
    self.assertEqual(errors[_ORDINARY.name],
                     expected_errors(_ORDINARY.read_text()), output)

  def test_mypy_reports_a_removed_expectation(self) -> None:
    lines = _USAGE.read_text().splitlines(keepends=True)
    marked, code = next((i, match["code"]) for i, line in enumerate(lines)
                        if (match := _EXPECTED.search(line)))
    lines[marked] = _EXPECTED.sub("", lines[marked])
    (self.project.root / _USAGE.name).write_text("".join(lines))
    self.addCleanup(shutil.copy, _USAGE, self.project.root)
    errors, _ = self.project.mypy(self.scratch / "mypy-cache")
    self.assertEqual(errors[_USAGE.name] - expected_errors("".join(lines)),
                     {(marked + 1, code)})


class LayoutTest(absltest.TestCase):
  """Why the stub package holds what it holds: without JAX's other stubs,
  pyright loses JAX's names; without JAX's __init__, pyrefly does."""

  def setUp(self) -> None:
    super().setUp()
    self.scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-layout-"))
    self.addCleanup(shutil.rmtree, self.scratch, ignore_errors=True)
    self.files = _installed_stubs().files
    self.ordinary = _lines(expected_errors(_ORDINARY.read_text()))

  def without(self, keep: Callable[[str], bool]) -> UserProject:
    return UserProject(self.scratch / "project",
                       {path: contents for path, contents
                        in self.files.items() if keep(path)})

  def test_pyright_shadows_jax_without_its_unchanged_stubs(self) -> None:
    # Only the .pyi files our declarations change (jax.numpy's, say, is
    # JAX's own on 0.4.35 and 0.12.0.1 alike).
    installed = pathlib.Path(jax.__file__).parent

    def changed(path: str) -> bool:
      own = installed / path[len(stubs.STUB_PACKAGE) + 1:]
      return own.read_bytes() != self.files[path]

    project = self.without(lambda path: not path.endswith(".pyi")
                           or changed(path))
    self.assertLess(len(project.files), len(self.files))
    reported, output = project.pyright()
    self.assertNotEmpty(reported[_ORDINARY.name] - self.ordinary, output)

  def test_pyrefly_shadows_jax_without_its_init(self) -> None:
    project = self.without(lambda path: path != "jax-stubs/__init__.py")
    reported, output = project.pyrefly()
    self.assertNotEmpty(reported[_ORDINARY.name] - self.ordinary, output)


class PytypeUserTest(absltest.TestCase):
  """pytype in a user's project, configured as the README says: not at all.

  It reads no installed package's types, so JAX and jax_patch are Any to it:
  it reports nothing on either usage file, stubs or not.
  """

  @requires_pytype
  def test_reports_nothing_on_the_usage_files(self) -> None:
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-pytype-"))
    self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
    project = UserProject(scratch / "project", _installed_stubs().files)
    # A plain error beside them: pytype does check this project.
    plain = project.root / "plain_error.py"
    plain.write_text("total = 1 + 'one'\n")
    path = os.pathsep.join([os.path.dirname(sys.executable),
                            os.environ.get("PATH", "")])
    run = run_checker(
        [sys.executable, "-m", "pytype.tools.analyze_project.main",
         "--jobs=2", "--output", str(scratch / "out"), _USAGE.name,
         _ORDINARY.name, plain.name], project.root, {"PATH": path})
    output = run.stdout + run.stderr
    reported = {(pathlib.Path(m["path"]).name, int(m["line"]))
                for m in _PYTYPE_ERROR.finditer(output)}
    self.assertEqual(reported, {(plain.name, 1)}, output)


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
