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
files, a virtualenv holding `jax-patch stubs --install`'s distribution (inside
the project or outside it), and each checker run as docs/typing.md says,
activated or not, over the project, a file, or `.`.
"""

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
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
                env: dict[str, str | None] | None = None
                ) -> subprocess.CompletedProcess[str]:
  """Runs a type checker, or a user's set-up step, in a subprocess.

  It is this module's only way to start one. Its environment is this
  process's, less JAX_ENABLE_X64, plus ``env`` (a None there unsets the
  variable): the checkers read source and never run it, and without the
  flag nothing they run can see it either. This module's outcome is therefore the same in
  both x64 modes, which lets the edges' x64-on pass leave it out
  (tests/conftest.py, tests/x64_independence_test.py).
  """
  environment = {name: value for name, value in os.environ.items()
                 if name != "JAX_ENABLE_X64"}
  for name, value in (env or {}).items():
    if value is None:
      environment.pop(name, None)
    else:
      environment[name] = value
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

  The two usage files, ``typings/`` as ``jax-patch stubs --out typings``
  writes it (or ``files``, to try another layout), and a ``pyproject.toml``
  holding docs/typing.md's pyright and pyrefly snippets for it. One line each adds this checkout,
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
           env: dict[str, str | None] | None = None
           ) -> subprocess.CompletedProcess[str]:
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


def doc_commands(snippet: str) -> dict[str, list[str]]:
  """The documented command line of each checker in snippet ``snippet``:
  checker name (``mypy``, ``pyright``, ``pyrefly``) -> argv, ``$VENV``
  unexpanded."""
  commands = {}
  for line in readme_snippet(snippet).splitlines():
    argv = shlex.split(line, comments=True)
    if argv:
      checker = pathlib.PurePosixPath(argv[0]).name
      commands[checker] = argv
  return commands


def _script(name: str) -> str:
  """A console script's source, as pip writes ``bin/name``, less shebang."""
  entry = {"mypy": "from mypy.__main__ import console_entry as main",
           "pyright": "from pyright.cli import entrypoint as main",
           "jax-patch": "from jax_patch._delivery.cli import main"}[name]
  return f"import sys\n{entry}\nsys.exit(main())\n"


def _set_up(command: list[str]) -> str:
  """Runs a step of a user's set-up; returns its output, or fails.

  The failure says which command failed, and what it printed.
  """
  run = run_checker(command, _ROOT)
  if run.returncode:
    raise AssertionError(f"{shlex.join(command)}: {run.stdout}{run.stderr}")
  return run.stdout


class UserVenv:
  """A user's virtualenv, at ``root``: what they installed, and
  ``jax-patch stubs --install``'s distribution in its own site-packages.

  Its site-packages holds a copy of this interpreter's JAX beside the
  distribution, as a user's does: pyrefly, given files, reads each module
  under the configuration of where it lies, so JAX left in this one's venv
  would be read by the rules of wherever that venv is. The interpreter sees
  this one's other packages (jaxlib, NumPy, the checkers) and this checkout
  (``jax_patch``, as installed: an editable install's import hook is what
  no checker follows) through a ``.pth`` file, after its own site-packages,
  as a package installed there would be; ``bin/`` holds the checkers and
  ``jax-patch``, as pip installs them.
  """

  def __init__(self, root: pathlib.Path, install: bool = True) -> None:
    self.root = root
    _set_up([sys.executable, "-m", "venv", "--without-pip", str(root)])
    self.python = root / "bin" / "python"
    self.site = pathlib.Path(_set_up(
        [str(self.python), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
    paths = [str(_ROOT), *(path for path in sys.path
                           if "-packages" in path and os.path.isdir(path))]
    (self.site / "_jax_patch_user.pth").write_text("\n".join(paths) + "\n")
    jax_root = pathlib.Path(jax.__file__).parent
    shutil.copytree(jax_root, self.site / jax_root.name,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("mypy", "pyright", "jax-patch"):
      script = root / "bin" / name
      script.write_text(f"#!{self.python}\n" + _script(name))
      script.chmod(0o755)
    (root / "bin" / "pyrefly").symlink_to(
        pathlib.Path(sysconfig.get_path("scripts")) / "pyrefly")
    if install:
      _set_up([str(root / "bin" / "jax-patch"), "stubs", "--install"])

  def environment(self, activated: bool) -> dict[str, str | None]:
    """``source bin/activate``'s environment, or none of it."""
    path = [entry for entry in os.environ.get("PATH", "").split(os.pathsep)
            if entry]
    if not activated:
      return {"PATH": os.pathsep.join(path), "VIRTUAL_ENV": None}
    return {"PATH": os.pathsep.join([str(self.root / "bin"), *path]),
            "VIRTUAL_ENV": str(self.root)}


# Where a project's checkers are run from, as tests choose them: (location
# of the venv, activated, mode). Pairwise: each two of the three have each
# pair of their values in some case, in 6 runs rather than 12 (mypy, which
# has no project mode: 4). Modes: "project" runs the checker with no path,
# "FILE" names the two usage files, "." names the folder.
_CASES = (("outside", False, "project"), ("outside", True, "FILE"),
          ("outside", False, "."), ("inside", True, "project"),
          ("inside", False, "FILE"), ("inside", True, "."))
_MYPY_CASES = (("outside", False, "FILE"), ("outside", True, "."),
               ("inside", True, "FILE"), ("inside", False, "."))


def _case_name(checker: str, location: str, activated: bool,
               mode: str) -> str:
  state = "activated" if activated else "not_activated"
  where = {"project": "project", "FILE": "file", ".": "dot"}[mode]
  return f"_{checker}_venv_{location}_{state}_{where}"


def _user_cases() -> list[tuple[str, str, str, bool, str]]:
  return [(_case_name(checker, *case), checker, *case)
          for checker in ("mypy", "pyright", "pyrefly")
          for case in (_MYPY_CASES if checker == "mypy" else _CASES)]


def parse_report(checker: str, stdout: str) -> dict[str, set[int]]:
  """The error lines per file name in a checker's report (pyright's and
  pyrefly's JSON, mypy's text)."""
  lines: dict[str, set[int]] = {_USAGE.name: set(), _ORDINARY.name: set()}
  if checker == "mypy":
    found = [(m["path"], int(m["line"]))
             for m in _MYPY_ERROR.finditer(stdout)]
  elif checker == "pyright":
    report = json.loads(stdout)
    if not report["summary"]["filesAnalyzed"]:
      raise AssertionError(f"pyright checked no file: {stdout}")
    found = [(d["file"], d["range"]["start"]["line"] + 1)
             for d in report["generalDiagnostics"]
             if d["severity"] == "error"]
  else:
    found = [(e["path"], e["line"])
             for e in json.loads(stdout[stdout.index("{"):])["errors"]
             if e["severity"] == "error"]
  for path, line in found:
    lines.setdefault(pathlib.Path(path).name, set()).add(line)
  return lines


class UserVenvProject:
  """A scratch project: the two usage files, a ``pyproject.toml`` that only
  names pyrefly (pyrefly 1.1.1 with no configuration at all checks in its
  lenient ``basic`` preset, which reports none of the marked errors), and a
  :class:`UserVenv` inside it (``.venv``) or beside it."""

  def __init__(self, root: pathlib.Path, venv_inside: bool,
               install: bool = True,
               cache: pathlib.Path | None = None) -> None:
    self.root = root / "project"
    self.root.mkdir(parents=True)
    for source in (_USAGE, _ORDINARY):
      shutil.copy(source, self.root)
    (self.root / "pyproject.toml").write_text("[tool.pyrefly]\n")
    self.venv = UserVenv(self.root / ".venv" if venv_inside
                         else root / "venv", install)
    self.cache = cache or root / "mypy-cache"

  def run(self, checker: str, activated: bool,
          mode: str) -> tuple[dict[str, set[int]], str]:
    """``checker`` run as docs/typing.md says, over ``mode``."""
    argv = doc_commands("activated" if activated else "not-activated")[
        checker]
    argv = [arg.replace("$VENV", str(self.venv.root)) for arg in argv]
    paths = {"project": [], "FILE": [_USAGE.name, _ORDINARY.name],
             ".": ["."]}[mode]
    if checker == "mypy":
      argv = [arg for arg in argv if arg != "your_code"] + paths + [
          "--no-error-summary", "--show-error-codes"]
    else:
      argv = argv + paths + (["--outputjson"] if checker == "pyright" else
                             ["--output-format", "json"])
    env = self.venv.environment(activated)
    env["PYRIGHT_PYTHON_IGNORE_WARNINGS"] = "1"
    env["MYPY_CACHE_DIR"] = str(self.cache)
    run = run_checker(argv, self.root, env)
    output = f"{shlex.join(argv)}\n{run.stdout}{run.stderr}"
    if checker == "pyrefly" and run.returncode not in (0, 1):
      raise AssertionError(f"pyrefly failed: {output}")
    return parse_report(checker, run.stdout), output


class UserVenvTest(parameterized.TestCase):
  """mypy, pyright and pyrefly in a user's project, run as docs/typing.md
  says, with `jax-patch stubs --install`'s distribution in the venv: the
  venv inside the project or outside it, activated or not, each checker
  over the project, a file or `.`. Exactly the marked lines are rejected.

  And, in a venv without the distribution, the issue's false errors."""

  scratch: pathlib.Path
  projects: dict[str, UserVenvProject]

  @classmethod
  def setUpClass(cls) -> None:
    super().setUpClass()
    cls.scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-venv-"))
    cls.projects = {}

  @classmethod
  def tearDownClass(cls) -> None:
    shutil.rmtree(cls.scratch, ignore_errors=True)
    super().tearDownClass()

  @classmethod
  def project(cls, location: str, install: bool = True) -> UserVenvProject:
    key = location if install else f"{location}-bare"
    if key not in cls.projects:
      # One mypy cache for all: they differ in jax-stubs' paths only.
      cls.projects[key] = UserVenvProject(cls.scratch / key,
                                          location == "inside", install,
                                          cls.scratch / "mypy-cache")
    return cls.projects[key]

  @parameterized.named_parameters(*_user_cases())
  def test_exactly_the_marked_lines_are_rejected(
      self, checker: str, location: str, activated: bool, mode: str) -> None:
    reported, output = self.project(location).run(checker, activated, mode)
    for path in (_USAGE, _ORDINARY):
      expected = _lines(expected_errors(path.read_text()))
      self.assertNotEmpty(expected)
      self.assertEqual(reported[path.name], expected, output)

  @parameterized.named_parameters(*_USER_CHECKERS)
  def test_without_the_distribution_array_dlpack_calls_are_rejected(
      self, checker: str) -> None:
    # What the issue measured: JAX's own stubs reject the standard's calls.
    mode = "FILE" if checker == "mypy" else "project"
    reported, output = self.project("outside", install=False).run(
        checker, False, mode)
    expected = _lines(expected_errors(_USAGE.read_text()))
    self.assertNotEmpty(reported[_USAGE.name] - expected, output)
    self.assertLessEqual(reported[_USAGE.name] - expected,
                         _dlpack_method_lines(), output)

  @parameterized.named_parameters(("_inside", "inside"),
                                  ("_outside", "outside"))
  def test_pyrefly_reads_jax_as_set_up_in_the_scratch_project(
      self, location: str) -> None:
    # pyrefly, given files, reads each module under the configuration of
    # where it lies. Read from this suite's venv, JAX's modules came under
    # this checkout's pyproject.toml (the venv in the checkout) or, anywhere
    # else, under pyrefly's default, which searches that venv's
    # site-packages first and so finds JAX's uncorrected `Array` there: the
    # path-mode cases passed or failed by where this suite's venv lies.
    project = self.project(location)
    venv = project.venv
    modules = _set_up(
        [str(venv.python), "-c",
         "import jax, jax._src.typing\n"
         "print(jax.__file__, jax._src.typing.__file__)"]).split()
    run = run_checker(
        [str(venv.root / "bin" / "pyrefly"), "dump-config",
         "--python-interpreter-path", str(venv.python),
         # Else it skips files in a folder named venv, as it lists files.
         "--disable-project-excludes-heuristics", *modules],
        project.root)
    output = f"{run.stdout}{run.stderr}"
    self.assertEqual(run.returncode, 0, output)
    # Configurations, import roots and search paths; not the site-packages
    # path, which holds this venv's (jaxlib, NumPy, the checkers), nor a
    # warning's (pyrefly warns of a PYTHONPATH, as Bazel sets, that it does
    # not search).
    read_from = [pathlib.Path(path).resolve()
                 for line in output.splitlines()
                 if not line.strip().startswith(("Site package path", "WARN"))
                 for path in re.findall(r"[`\"](/[^`\"]*)[`\"]", line)]
    self.assertNotEmpty(read_from, output)
    scratch = self.scratch.resolve()
    for path in read_from:
      self.assertTrue(path.is_relative_to(scratch), f"{path}\n{output}")


class TypingsFolderTest(parameterized.TestCase):
  """mypy, pyright and pyrefly in a user's project with `jax-patch stubs
  --out typings` (no install), each set up as docs/typing.md's section on
  it says; and pyrefly's path mode with the venv outside the project,
  which that folder cannot serve (the reason the docs install the stubs
  instead)."""

  scratch: pathlib.Path
  project: UserProject
  results: dict[str, dict[str, set[int]]]
  outputs: dict[str, str]

  @classmethod
  def setUpClass(cls) -> None:
    super().setUpClass()
    cls.scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-ci-"))
    cls.project = UserProject(cls.scratch / "project",
                              _installed_stubs().files)
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

  def test_pyrefly_path_mode_does_not_read_the_folder(self) -> None:
    # pyrefly 1.1.1, its interpreter outside the project, applies
    # site-package-path in project mode only: given files, or `.`, it mixes
    # the folder's stubs with JAX's own, and rejects valid lines ("`Array`
    # is not assignable to `Array`", as the issue measured).
    run = run_checker([sys.executable, "-m", "pyrefly", "check",
                       "--output-format", "json", "--python-interpreter-path",
                       sys.executable, _USAGE.name], self.project.root)
    reported = parse_report("pyrefly", run.stdout)[_USAGE.name]
    expected = _lines(expected_errors(_USAGE.read_text()))
    self.assertNotEmpty(reported - expected, run.stdout)

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
  """pytype in a user's project, configured as docs/typing.md says: not at
  all, beside a venv holding the installed stubs.

  It reads no installed package's types, so JAX and jax_patch are Any to it:
  it reports nothing on either usage file, stubs or not.
  """

  @requires_pytype
  def test_reports_nothing_on_the_usage_files(self) -> None:
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-pytype-"))
    self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
    project = UserVenvProject(scratch, venv_inside=False)
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
