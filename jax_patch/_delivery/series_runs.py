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

"""What the series runs on a patched tree: JAX's DLPack test and the cases.

Each in a process of its own, on the tree's own ``jax/``
(``series_tree.run``). JAX's test runs as JAX's CI runs it, ``XLA_FLAGS``
unset; jax_patch's conformance cases with four CPU devices and x64 off, the
mode the queue states its behaviour in.
"""

from __future__ import annotations

import json
import pathlib
import re
from xml.etree import ElementTree

from jax_patch._delivery import series_tree
from jax_patch._delivery import upstream_set

# Its first line says where JAX came from, before any case can end the
# process; its last, the failed cases.
_CASES_SCRIPT = """
import json
import jax, jax.dlpack, jax.numpy as jnp
print(json.dumps(jax.__file__), flush=True)
from jax_patch.testing import conformance
failed, passed = {}, 0
for case in conformance.CASES:
  detail, outcome = conformance.run_case(case, jnp.from_dlpack)
  if outcome is False:
    failed[case.name] = detail
  passed += outcome is True
print(json.dumps({"failed": failed, "passed": passed}))
"""


def conformance_failures(repo: pathlib.Path,
                         python: str) -> tuple[int, dict[str, str]]:
  """Every conformance case on the tree: how many pass, and what fails.

  Raises:
    series_tree.SeriesError: the tree's own JAX did not import, or the cases
      did not run to the end.
  """
  done = series_tree.run(repo, python, "-c", _CASES_SCRIPT, cpu_devices=4,
                         env={"JAX_ENABLE_X64": "0"})
  lines = done.stdout.strip().splitlines()
  try:
    imported_from = pathlib.Path(json.loads(lines[0])).parent
    result = json.loads(lines[-1])
  except (IndexError, ValueError) as err:
    raise series_tree.SeriesError(
        f"the cases did not run: {done.stderr.strip()[-1000:]}") from err
  if imported_from != repo / "jax":
    raise series_tree.SeriesError(
        f"JAX imported from {imported_from}, not the patched tree")
  return result["passed"], result["failed"]


def imports(repo: pathlib.Path, python: str) -> str:
  """"ok" where the tree's own JAX imports with its DLPack module; else why."""
  done = series_tree.run(
      repo, python, "-c",
      "import jax, jax.dlpack, jax.numpy as jnp, pathlib, sys; "
      "sys.exit(pathlib.Path(jax.__file__).parent != pathlib.Path('jax')"
      ".absolute())")
  if done.returncode:
    return (done.stderr.strip()[-1000:] or
            "JAX imported from elsewhere than the patched tree")
  return "ok"


def interop_test(repo: pathlib.Path, python: str,
                 names: list[str] | None = None) -> tuple[bool, str]:
  """Runs the target's DLPack test (``names`` alone, where given).

  Returns:
    Whether it passed, and pytest's summary line.
  """
  selection = ["-k", " or ".join(names)] if names else []
  done = series_tree.run(repo, python, "-m", "pytest", "-q", "-p",
                         "no:cacheprovider", *selection,
                         upstream_set.INTEROP_TEST)
  summary = (done.stdout.strip().splitlines() or ["no output"])[-1]
  return done.returncode == 0, summary


def tests_not_failing(repo: pathlib.Path, python: str,
                      names: list[str]) -> dict[str, str]:
  """Of the test methods ``names``, those that do not fail on ``repo``.

  Run on a tree holding a pull request's tests without its change: a test
  that passes or skips there shows nothing. Returns each with what it did.
  """
  if not names:
    return {}
  report = repo / "new-tests.xml"
  series_tree.run(repo, python, "-m", "pytest", "-q", "-p",
                  "no:cacheprovider", f"--junitxml={report}", "-k",
                  " or ".join(names), upstream_set.INTEROP_TEST)
  outcomes: dict[str, set[str]] = {name: set() for name in names}
  if report.is_file():
    for case in ElementTree.parse(report).iter("testcase"):
      found = {child.tag for child in case} & {"failure", "error", "skipped"}
      outcome = min(found) if found else "passed"  # error, failure, skipped
      matched = [name for name in names
                 if re.match(rf"{name}(?![A-Za-z])", case.get("name", ""))]
      if not matched and outcome == "error":
        matched = names  # The module did not import: every test errs.
      for name in matched:
        outcomes[name].add(outcome)
    report.unlink()
  return {name: (", ".join(sorted(seen)) or "not collected")
          for name, seen in outcomes.items()
          if not seen & {"failure", "error"}}


def reproducer(path: pathlib.Path, repo: pathlib.Path,
               python: str) -> tuple[str, str]:
  """Runs a report's reproducer on ``repo``'s JAX, x64 off.

  Returns:
    ``("reproduces" | "fixed" | "error", what it printed last)``. A process
    killed by a signal (an abort is the defect of some reports) reproduces.
  """
  done = series_tree.run(repo, python, str(path.absolute()),
                         env={"JAX_ENABLE_X64": "0"})
  last = (done.stdout.strip().splitlines() or [""])[-1]
  if done.returncode < 0:
    return "reproduces", f"the process died of signal {-done.returncode}"
  if done.returncode == 0 and last.startswith(("reproduces:", "fixed:")):
    return last.split(":", 1)[0], last
  return "error", (done.stdout + done.stderr).strip()[-1000:]
