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

Each `matrix` session makes its own virtualenv with one jax/jaxlib pair and
runs, in it, the test suite, `jax-patch check` and `jax-patch vendor` (the
dry run), plus mypy, pytype and the typing tests on the oldest and newest
pair. The `table` session prints version x step from what they recorded.

  .venv/bin/nox                         # every version, then the table
  .venv/bin/nox -t edges                # oldest and newest (.ci/run)
  .venv/bin/nox -s "matrix(0.6.2)" table
  .venv/bin/nox -s boundary             # the releases beside each gate
"""

import json
import pathlib
import time
import xml.etree.ElementTree as ElementTree

import nox

# One release per minor line, 0.4.35 (the oldest supported) to 0.10.2.
VERSIONS = ("0.4.35", "0.4.38", "0.5.3", "0.6.2", "0.7.2", "0.8.2", "0.9.2",
            "0.10.2")
# Type-checked too: the oldest and the newest.
TYPE_CHECKED = (VERSIONS[0], VERSIONS[-1])
STEPS = ("tests", "check", "vendor", "types")

_ROOT = pathlib.Path(__file__).parent
_RESULTS = _ROOT / ".nox" / "matrix-results"
# The rest of the stack, pinned as the matrix was measured.
_CONSTRAINTS = _ROOT / "tools" / "matrix-constraints.txt"

# nox imports this file once per run: the table shows this run's sessions.
_RUN = f"{time.time():.6f}"

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["matrix", "table"]


def _record(version: str, results: dict[str, str]) -> None:
  _RESULTS.mkdir(parents=True, exist_ok=True)
  (_RESULTS / f"{version}.json").write_text(
      json.dumps(dict(results, run=_RUN)))


def _install(session: nox.Session, jax: str, extras: str) -> None:
  """The project, with one jax/jaxlib pair and the pinned stack."""
  session.install("--quiet", "-c", str(_CONSTRAINTS), f"jax=={jax}",
                  f"jaxlib=={jax}", "-e", f".[{extras}]")


def _run_step(session: nox.Session, *command: str) -> str:
  try:
    session.run(*command, env={"PYTHONUNBUFFERED": "1"})
  except nox.command.CommandFailed:
    return "FAIL"
  return "ok"


def _test_counts(junit: pathlib.Path) -> str:
  """Counts from pytest's JUnit XML; empty if it has none."""
  if not junit.is_file():
    return ""
  suite = ElementTree.parse(junit).getroot()
  if suite.tag == "testsuites":
    suite = suite[0]
  total, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
  failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
  passed = total - failed - skipped
  return f"{passed} passed, {failed} failed, {skipped} skipped"


@nox.session
@nox.parametrize("jax", VERSIONS, ids=VERSIONS, tags=[
    ["edges"] if v in TYPE_CHECKED else [] for v in VERSIONS])
def matrix(session: nox.Session, jax: str) -> None:
  """Tests, check and a vendored dry run against one jax/jaxlib pair."""
  typed = jax in TYPE_CHECKED
  _install(session, jax, "test,typecheck" if typed else "test")
  session.run("python", "-c", "import jax, jaxlib; print('jax', "
              "jax.__version__, 'jaxlib', jaxlib.__version__)")
  junit = _RESULTS / f"{jax}-tests.xml"
  junit.unlink(missing_ok=True)
  pytest = ["python", "-m", "pytest", "-q", "tests", f"--junitxml={junit}"]
  if not typed:
    pytest.append("--ignore=tests/typing_test.py")  # Needs mypy and pytype.
  results = {"tests": _run_step(session, *pytest),
             "check": _run_step(session, "jax-patch", "check"),
             "vendor": _run_step(session, "jax-patch", "vendor"),
             "types": "-"}
  if typed:
    scratch = pathlib.Path(session.virtualenv.location)
    mypy = _run_step(session, "mypy", f"--cache-dir={scratch / 'mypy'}")
    pytype = _run_step(session, "pytype", "--config=setup.cfg", "--jobs=2",
                       f"--output={scratch / 'pytype'}")
    results["types"] = "ok" if mypy == pytype == "ok" else "FAIL"
  results["test counts"] = _test_counts(junit)
  _record(jax, results)
  failed = [step for step in STEPS if results[step] == "FAIL"]
  if failed:
    session.error(f"jax {jax}: {', '.join(failed)} failed")


def _this_runs_results() -> list[tuple[str, dict[str, str]]]:
  rows = []
  for version in VERSIONS:
    path = _RESULTS / f"{version}.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    if results.get("run") == _RUN:
      rows.append((version, results))
  return rows


# The releases on either side of each gate in jax_patch/_src/dlpack_compat.py
# that the matrix does not already hold.
BOUNDARIES = ("0.5.0", "0.5.1", "0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0",
              "0.8.1")


@nox.session
@nox.parametrize("jax", BOUNDARIES, ids=BOUNDARIES)
def boundary(session: nox.Session, jax: str) -> None:
  """The gate and conformance tests at a release beside a version gate."""
  _install(session, jax, "test")
  session.run("python", "-m", "pytest", "-q", "tests/dlpack_compat_test.py",
              "tests/conformance_test.py")


@nox.session(python=False, tags=["edges"])
def table(session: nox.Session) -> None:
  """Prints version x step for the matrix sessions of this run."""
  rows = _this_runs_results()
  header = ["jax/jaxlib", *STEPS, "test counts"]
  widths = [max(len(header[0]), 10)] + [max(len(s), 6) for s in STEPS] + [33]
  print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
  for version, results in rows:
    cells = [version, *(results[s] for s in STEPS), results["test counts"]]
    print("  ".join(c.ljust(w) for c, w in zip(cells, widths)))
  cells = [results[s] for _, results in rows for s in STEPS]
  passed, failed = cells.count("ok"), cells.count("FAIL")
  print(f"matrix: {passed} passed, {failed} failed")
  if not rows:
    session.error("no matrix session ran")
  if failed:
    session.error(f"{failed} steps failed")
