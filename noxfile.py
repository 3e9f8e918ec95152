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

"""The version matrix: the same patch on every supported JAX minor line.

Each `matrix` session makes its own virtualenv with one jax/jaxlib pair on
one Python and runs, in it, the test suite, `jax-patch check` and `jax-patch
vendor` (the dry run), with jax_enable_x64 off; the oldest and newest pair
(the edges) run all three with x64 on too (less the tests whose outcome
cannot depend on the mode: tests/conftest.py), plus mypy, pytype, pyright,
pyrefly and the typing tests, and the memory-safety tests under a hostile
allocator (tools/hostile_allocator.sh), which their x64-off test run leaves
those tests to. The `table` session prints version x step from what they
recorded.

  .venv/bin/nox                         # every version, then the table
  .venv/bin/nox -t edges                # oldest and newest (.ci/run)
  .venv/bin/nox -s "matrix(0.6.2, py3.11)" table
  .venv/bin/nox -s boundary             # the releases beside each gate
  .venv/bin/nox -s series               # the upstream series on the sdist
  .venv/bin/nox -s mutation             # every named mutation is caught
  .venv/bin/nox -t py3.12               # every session on Python 3.12

Python 3.12 and 3.13 are taken from pyenv's directory when it has them (see
`_interpreter`), so nox itself may run on any of the three.
"""

import json
import os
import pathlib
import re
import sys
import time

import nox

sys.path.insert(0, str(pathlib.Path(__file__).parent / "tools"))
import junit_counts  # pylint: disable=g-import-not-at-top,wrong-import-position

# (jax/jaxlib, Python): one release per minor line, 0.4.35 (the oldest
# supported) to 0.12.1, and 0.12.0.1 beside 0.12.1 (its jaxlib reads and
# writes DLPack 1.x as 0.12.1's does, without 0.12.1's layout and copy=True
# changes). JAX 0.11 and later install only on Python 3.12 and newer; the
# newest also runs on 3.13, the newest Python it supports.
MATRIX = (("0.4.35", "3.11"), ("0.4.38", "3.11"), ("0.5.3", "3.11"),
          ("0.6.2", "3.11"), ("0.7.2", "3.11"), ("0.8.2", "3.11"),
          ("0.9.2", "3.11"), ("0.10.2", "3.11"), ("0.11.2", "3.12"),
          ("0.12.0.1", "3.12"), ("0.12.1", "3.12"), ("0.12.1", "3.13"))
# Type-checked too: the oldest and the newest, each on a Python that both
# mypy and pytype run on (pytype 2024.10.11 has no Python 3.13).
NEWEST = ("0.12.1", "3.12")
# The release whose sdist's jax/ the upstream queue is cut on
# (upstream/README.md).
SERIES_BASE = NEWEST
TYPE_CHECKED = (MATRIX[0], NEWEST)
# pytype reads no installed package (setup.cfg: pythonpath ".", import-error
# off), so its verdict depends on the Python alone; Bazel's pytype_test gives
# it for CI's Python 3.11. Of the edges, only the newest's Python needs it.
PYTYPE_CHECKED = (NEWEST,)
# Run with jax_enable_x64 on as well as off: the edges, and the newest JAX
# on the newest Python.
BOTH_X64_MODES = TYPE_CHECKED + (("0.12.1", "3.13"),)
STEPS = ("tests", "tests x64", "check", "vendor", "types", "memory")

# The releases on either side of each gate in jax_patch/_src/dlpack_compat.py
# that the matrix does not already hold: the layout gates of 0.5 to 0.8, the
# compact-layout gate at jaxlib 0.11.2 (0.11.1 is below it) and the versioned
# import and export gate at 0.12.0 (0.11.2, below it, is in the matrix).
BOUNDARIES = (("0.5.0", "3.11"), ("0.5.1", "3.11"), ("0.6.0", "3.11"),
              ("0.6.1", "3.11"), ("0.7.0", "3.11"), ("0.7.1", "3.11"),
              ("0.8.0", "3.11"), ("0.8.1", "3.11"), ("0.11.1", "3.12"),
              ("0.12.0", "3.12"))

_ROOT = pathlib.Path(__file__).parent
_RESULTS = _ROOT / ".nox" / "matrix-results"
# The rest of the stack, pinned as the matrix was measured.
_CONSTRAINTS = _ROOT / "tools" / "matrix-constraints.txt"

# nox imports this file once per run: the table shows this run's sessions.
_RUN = f"{time.time():.6f}"

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["matrix", "table"]
# A Python the matrix needs but this machine lacks fails its session, rather
# than skipping it quietly (and leaving it out of the table), and nox does not
# try to download one, which an offline machine cannot.
nox.options.error_on_missing_interpreters = True
nox.options.download_python = "never"


def _pyenv_interpreter(version: str) -> str | None:
  """pyenv's newest CPython `version`.x (e.g. 3.12.1 for "3.12"), if any."""
  versions = pathlib.Path(
      os.environ.get("PYENV_ROOT", pathlib.Path.home() / ".pyenv"), "versions")
  releases = []
  for path in versions.glob(f"{version}.*"):
    # Only plain builds: not "3.13.0t" (free-threaded) or "3.12.0rc1".
    match = re.fullmatch(re.escape(version) + r"\.(\d+)", path.name)
    executable = path / "bin" / f"python{version}"
    if match and os.access(executable, os.X_OK):
      releases.append((int(match.group(1)), str(executable)))
  return max(releases)[1] if releases else None


def _interpreter(version: str) -> str:
  """The interpreter to make a virtualenv of Python `version` ("3.12") with.

  On this project's machines Python 3.12 and 3.13 are pyenv versions beside
  the selected 3.11. pyenv's shims put `python3.13` on PATH, but running it
  fails ("pyenv: python3.13: command not found"), and nox's own lookup
  (python-discovery) tries that shim and finds no Python 3.13; so pyenv's
  directory is asked first. Then the Python running nox, if it is that
  version; else nox looks the version up itself, and says plainly when it
  finds none.
  """
  found = _pyenv_interpreter(version)
  if found:
    return found
  if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
    return sys.executable
  return version


def _name(jax: str, python: str) -> str:
  """Names a (jax, Python) pair in session ids and messages."""
  return f"{jax}, py{python}"


def _parametrize(pairs: tuple[tuple[str, str], ...],
                 tagged: tuple[tuple[str, str], ...] = ()):
  """nox.parametrize over (jax, Python) pairs, with readable ids.

  `python` is a parameter the session function does not take: nox then makes
  the virtualenv with that interpreter, while the session gets the version
  as `python_version` and the id shows it, not a path. Each pair is tagged
  with its Python ("py3.12"), as `nox -p` matches interpreter paths here.
  """
  return nox.parametrize(
      "python,jax,python_version",
      [(_interpreter(python), jax, python) for jax, python in pairs],
      ids=[_name(*pair) for pair in pairs],
      tags=[[f"py{pair[1]}"] + (["edges"] if pair in tagged else [])
            for pair in pairs])


def _result_path(jax: str, python: str, suffix: str) -> pathlib.Path:
  return _RESULTS / f"{jax}-py{python}{suffix}"


def _record(jax: str, python: str, results: dict[str, str]) -> None:
  _RESULTS.mkdir(parents=True, exist_ok=True)
  _result_path(jax, python, ".json").write_text(
      json.dumps(dict(results, run=_RUN)))


def _install(session: nox.Session, jax: str, extras: str) -> None:
  """The project, with one jax/jaxlib pair and the pinned stack."""
  session.install("--quiet", "-c", str(_CONSTRAINTS), f"jax=={jax}",
                  f"jaxlib=={jax}", "-e", f".[{extras}]")


def _run_step(session: nox.Session, *command: str, x64: bool = False) -> str:
  """Runs a step with jax_enable_x64 set as asked, whatever nox's own
  environment says; "ok" or "FAIL"."""
  env = {"PYTHONUNBUFFERED": "1", "JAX_ENABLE_X64": "1" if x64 else "0"}
  try:
    session.run(*command, env=env)
  except nox.command.CommandFailed:
    return "FAIL"
  return "ok"


def _both(*outcomes: str) -> str:
  return "ok" if all(outcome == "ok" for outcome in outcomes) else "FAIL"


def _test_counts(*junits: pathlib.Path) -> str:
  """Counts from pytest's JUnit XML files; empty if one is missing."""
  if not all(junit.is_file() for junit in junits):
    return ""
  return junit_counts.summary(list(junits))


def _memory(session: nox.Session, junit: pathlib.Path) -> str:
  """The memory-safety tests under a hostile allocator (x64 off), on every
  core."""
  python = pathlib.Path(session.virtualenv.location) / "bin" / "python"
  junit.unlink(missing_ok=True)
  try:
    session.run("bash", "tools/hostile_allocator.sh", str(python), "-n",
                "auto", f"--junitxml={junit}", external=True,
                env={"PYTHONUNBUFFERED": "1", "JAX_ENABLE_X64": "0"})
  except nox.command.CommandFailed:
    return "FAIL"
  return "ok"


def _types(session: nox.Session, with_pytype: bool) -> str:
  """mypy (strict), pyright, pyrefly and, where asked, pytype.

  Over jax_patch and tests; mypy and pytype keep their caches inside the
  virtualenv.
  """
  scratch = pathlib.Path(session.virtualenv.location)
  mypy = _run_step(session, "mypy", f"--cache-dir={scratch / 'mypy'}")
  pytype = (_run_step(session, "pytype", "--config=setup.cfg", "--jobs=2",
                      f"--output={scratch / 'pytype'}")
            if with_pytype else "ok")
  pyright = _run_step(session, "python", "tools/type_check.py", "pyright")
  pyrefly = _run_step(session, "python", "tools/type_check.py", "pyrefly")
  return _both(mypy, pytype, pyright, pyrefly)


@nox.session
@_parametrize(MATRIX, tagged=TYPE_CHECKED)
def matrix(session: nox.Session, jax: str, python_version: str) -> None:
  """Tests, check and a vendored dry run against one jax/jaxlib pair."""
  python = python_version
  typed = (jax, python) in TYPE_CHECKED
  _install(session, jax, "test,typecheck" if typed else "test")
  session.run("python", "-c", "import sys, jax, jaxlib; print('jax', "
              "jax.__version__, 'jaxlib', jaxlib.__version__, 'python', "
              "sys.version.split()[0])")
  both_modes = (jax, python) in BOTH_X64_MODES
  junits = {x64: _result_path(jax, python, f"-tests{'-x64' * x64}.xml")
            for x64 in (False, True)}
  memory_junit = _result_path(jax, python, "-memory.xml")

  def pytest(x64: bool) -> str:
    junits[x64].unlink(missing_ok=True)
    # On every core (pytest-xdist).
    command = ["python", "-m", "pytest", "-q", "-n", "auto", "tests",
               f"--junitxml={junits[x64]}"]
    if not typed:
      command.append("--ignore=tests/typing_test.py")  # Needs mypy, pytype.
    elif not x64:
      # The memory step runs these in this mode, in this virtualenv, under
      # an allocator that poisons freed memory: the same tests, stricter.
      command += ["-m", "not memory_safety"]
    else:
      # Their outcome is the x64-off pass's (tests/x64_independence_test.py,
      # which runs in both passes, proves it of each).
      command += ["-m", "not x64_independent"]
    return _run_step(session, *command, x64=x64)

  results = {"tests": pytest(x64=False),
             "tests x64": pytest(x64=True) if both_modes else "-"}
  if both_modes:
    # check runs each mode in a process of its own.
    results["check"] = _run_step(session, "jax-patch", "check", "--x64",
                                 "both")
    results["vendor"] = _both(
        *(_run_step(session, "jax-patch", "vendor", x64=x64)
          for x64 in (False, True)))
  else:
    results["check"] = _run_step(session, "jax-patch", "check")
    results["vendor"] = _run_step(session, "jax-patch", "vendor")
  results["types"] = (_types(session, (jax, python) in PYTYPE_CHECKED)
                      if typed else "-")
  # Issue 25's reads after free fail at once under it: at both edges.
  results["memory"] = _memory(session, memory_junit) if typed else "-"
  results["test counts"] = (_test_counts(junits[False], memory_junit)
                            if typed else _test_counts(junits[False]))
  results["test counts x64"] = (_test_counts(junits[True]) if both_modes
                                else "")
  _record(jax, python, results)
  failed = [step for step in STEPS if results[step] == "FAIL"]
  if failed:
    session.error(f"jax {_name(jax, python)}: {', '.join(failed)} failed")


def _this_runs_results() -> list[tuple[str, str, dict[str, str]]]:
  """(jax, Python, results) of the matrix sessions this run, in order."""
  rows = []
  for jax, python in MATRIX:
    path = _result_path(jax, python, ".json")
    results = json.loads(path.read_text()) if path.is_file() else {}
    if results.get("run") == _RUN:
      rows.append((jax, python, results))
  return rows


@nox.session
@_parametrize(BOUNDARIES)
def boundary(session: nox.Session, jax: str, python_version: str) -> None:
  """The gate and conformance tests at a release beside a version gate."""
  del python_version  # In the session's id; nox made the virtualenv with it.
  _install(session, jax, "test")
  session.run("python", "-m", "pytest", "-q", "tests/dlpack_compat_test.py",
              "tests/conformance_test.py")


@nox.session(python=_interpreter(NEWEST[1]))
def canary(session: nox.Session) -> None:
  """The newest JAX the registry has for Python 3.12, whatever it is.

  Unpinned, with the rest of the stack as a new user's ``pip install`` gets
  it today. It prints what it installed, then runs ``check --x64 both`` and
  the tests. Within the tested range everything must pass. Past it the
  patch promises only never to be worse than upstream, which ``check``
  judges (and says what is not yet better): the tests' failures are listed,
  and a new JAX release alone can never fail this session.
  """
  session.install("--quiet", "--upgrade", "jax", "jaxlib", "-e", ".[test]")
  session.run("python", "-c", "import sys, jax, jaxlib, numpy; "
              "from jax_patch._src import dlpack_compat as c; "
              "print('canary: jax', jax.__version__, 'jaxlib', "
              "jaxlib.__version__, 'numpy', numpy.__version__, 'python', "
              "sys.version.split()[0], 'extension', c.EXTENSION_VERSION); "
              "print('canary:', 'past the tested range' if "
              "c.IS_UNTESTED_JAXLIB else 'within the tested range', "
              "c.TESTED_RANGE)")
  untested = session.run(
      "python", "-c", "from jax_patch._src import dlpack_compat as c; "
      "print(int(c.IS_UNTESTED_JAXLIB))",
      silent=True).strip().splitlines()[-1] == "1"
  check = _run_step(session, "jax-patch", "check", "--x64", "both")
  tests = _run_step(session, "python", "-m", "pytest", "-q", "-n", "auto",
                    "tests", "--ignore=tests/typing_test.py")
  print(f"canary: check {check}, tests {tests}"
        + (" (past the tested range: only check's verdict counts)"
           if untested else ""))
  if check == "FAIL" or (tests == "FAIL" and not untested):
    session.error("the newest JAX fails what the canary requires")


@nox.session(python=_interpreter(SERIES_BASE[1]))
def series(session: nox.Session) -> None:
  """The upstream patch set, applied to the sdist it is cut on, checked.

  The queue is cut on the newest release's jax/ (upstream/README.md): each
  pull request goes on as a reviewer takes it and as a step of the stack,
  files the sdist lacks (tests/, jaxlib/, CHANGELOG.md) left out, with the
  newest jaxlib (and the speed), then with the oldest the sdist supports.
  The sdist comes from the package registry, as CI cannot fetch JAX's
  repository: it holds jax/ and pyproject.toml (so the step runs JAX's own
  ruff and pyrefly configuration), but not JAX's tests; the checks with
  them run where JAX's repository is (docs/upstream.md).
  """
  _install(session, SERIES_BASE[0], "series")
  scratch = pathlib.Path(session.create_tmp())
  for stale in scratch.iterdir():
    session.run("rm", "-rf", str(stale), external=True)
  session.run("python", "-m", "pip", "download", "--quiet", "--no-deps",
              "--no-binary", ":all:", f"jax=={SERIES_BASE[0]}", "-d",
              str(scratch))
  sdist, = scratch.glob("jax-*.tar.gz")
  session.run("tar", "-xzf", str(sdist), "-C", str(scratch), external=True)
  tree = scratch / sdist.name[:-len(".tar.gz")]
  installed = session.run(
      "python", "-c", "import jax, pathlib; "
      "print(pathlib.Path(jax.__file__).parent)",
      silent=True).strip().splitlines()[-1]
  # The sdist's jax/ is the installed wheel's: the matrix tested that one.
  session.run("diff", "-rq", "-x", "__pycache__", installed,
              str(tree / "jax"), external=True)
  # JAX's gates once, on the whole stack: a minute a step would cost CI
  # a quarter of an hour; sessions run them step by step (docs/upstream.md).
  session.run("jax-patch", "series", "--against", str(tree), "--one-step",
              "--speed")
  minimum = session.run(
      "python", "-c", "import pathlib, sys; "
      "from jax_patch._delivery import series_tree;"
      "print('.'.join(map(str, series_tree.read_target("
      "pathlib.Path(sys.argv[1])).min_jaxlib)))", str(tree),
      silent=True).strip().splitlines()[-1]
  if minimum == SERIES_BASE[0]:
    session.log(f"jax {SERIES_BASE[0]} requires jaxlib {minimum}, which ran "
                "above: no older jaxlib to check")
    return
  session.install("--no-deps", f"jaxlib=={minimum}")
  # JAX's pre-commit gates read the text alone: they ran above.
  session.run("jax-patch", "series", "--against", str(tree), "--one-step",
              "--runtime-only")


@nox.session(python="3.11")
def mutation(session: nox.Session) -> None:
  """Every named mutation of tools/mutation_check.py must fail a test.

  On the newest JAX for Python 3.11, where torch's tests run too.
  Arguments after ``--`` go to the tool (``--only NAME``, ``--list``).
  """
  _install(session, "0.10.2", "test")
  session.run("python", "tools/mutation_check.py", *session.posargs)


@nox.session(python=False, tags=["edges"])
def table(session: nox.Session) -> None:
  """Prints version x step for the matrix sessions of this run."""
  rows = _this_runs_results()
  header = ["jax/jaxlib", "python", *STEPS, "test counts",
            "test counts x64"]
  widths = [10, 6] + [max(len(s), 6) for s in STEPS] + [33, 33]
  print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
  for jax, python, results in rows:
    cells = [jax, python, *(results[s] for s in STEPS),
             results["test counts"], results["test counts x64"]]
    print("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
  cells = [results[s] for _, _, results in rows for s in STEPS]
  passed, failed = cells.count("ok"), cells.count("FAIL")
  print(f"matrix: {passed} passed, {failed} failed")
  if not rows:
    session.error("no matrix session ran")
  if failed:
    session.error(f"{failed} steps failed")
