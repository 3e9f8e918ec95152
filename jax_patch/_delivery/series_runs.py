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

"""What the series' checks run on a scratch tree, each in a process of its own.

The conformance cases against the tree's own ``jax.numpy.from_dlpack``
(:func:`imports_and_claims`, :func:`failed_after_series`), a patch's
runtime probe (:func:`runtime_probe`), the target's DLPack test
(:func:`interop_test`), and a pull request's new tests on the tree it is
cut on, where each must fail (:func:`tests_pass_before`).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from xml.etree import ElementTree

from jax_patch._delivery import series_patches
from jax_patch._delivery import series_tree
from jax_patch.testing import conformance

def failed_after_series(repo: pathlib.Path, python: str,
                        left_undone: frozenset[str]) -> dict[str, str]:
  """Every case on the fully patched tree, but those left undone."""
  names = [case.name for case in conformance.CASES]
  failed = _failed_cases(repo, python, names)
  return {name: detail for name, detail in failed.items()
          if name not in left_undone}


def runtime_probe(repo: pathlib.Path, python: str, probe: str) -> str:
  """Runs a runtime probe in the tree: "ok", or how it failed.

  With jax_enable_x64 off, as the claims: the mode the series states its
  behaviour in (finished-at-return's dtype conversion happens only there).
  """
  done = series_tree.run(repo, python, "-c", probe,
                         env={"JAX_ENABLE_X64": "0"})
  if done.returncode:
    return (done.stdout + done.stderr).strip()[-1000:] or "failed"
  return "ok"


# Its first line says where JAX came from, before any case can end the
# process; its last, the failed cases.
_CASES_SCRIPT = """
import json, sys
import jax, jax.dlpack, jax.numpy as jnp
print(json.dumps(jax.__file__), flush=True)
from jax_patch.testing import conformance
skips_fail = sys.argv[1] == "skips-fail"
wanted = set(sys.argv[2:])
failed = {}
for case in conformance.CASES:
  if case.name in wanted:
    detail, passed = conformance.run_case(case, jnp.from_dlpack)
    if passed is False or (passed is None and skips_fail):
      failed[case.name] = detail
print(json.dumps(failed))
"""

# Stands for every case where the cases could not run at all.
_CASES_DID_NOT_RUN = "(the cases did not run)"


def imports_and_claims(repo: pathlib.Path, python: str,
                       names: list[str]) -> tuple[bool, dict[str, str]]:
  """Whether the tree's own JAX imports, and which claims ``names`` fail.

  In one process. A claim that skips fails: it proves nothing.
  """
  return _cases(repo, python, names, skips_fail=True)


def _failed_cases(repo: pathlib.Path, python: str,
                  names: list[str]) -> dict[str, str]:
  """Cases ``names`` that fail in the tree, with what they saw."""
  return _cases(repo, python, names, skips_fail=False)[1]


def _cases(repo: pathlib.Path, python: str, names: list[str],
           skips_fail: bool) -> tuple[bool, dict[str, str]]:
  """Runs cases ``names`` in the tree, in a process of its own.

  The cases run with jax_enable_x64 off, JAX's default, the mode the series
  states its claims in (some hold in that mode only).

  Returns:
    Whether ``jax``, ``jax.numpy`` and ``jax.dlpack`` imported from the
    tree's own ``jax/``, and the failed cases, with what they saw; a case
    that skips counts as failed with ``skips_fail``.
  """
  done = series_tree.run(repo, python, "-c", _CASES_SCRIPT,
                         "skips-fail" if skips_fail else "skips-pass", *names,
                         env={"JAX_ENABLE_X64": "0"})
  lines = done.stdout.strip().splitlines()
  try:
    imported_from = pathlib.Path(json.loads(lines[0])).parent
  except (IndexError, ValueError):
    return False, {_CASES_DID_NOT_RUN: done.stderr.strip()[-1000:]}
  imports = imported_from == repo / "jax"
  if done.returncode or len(lines) < 2:
    return imports, {_CASES_DID_NOT_RUN: done.stderr.strip()[-1000:]}
  failed: dict[str, str] = json.loads(lines[-1])
  return imports, failed


def tests_pass_before(repo: pathlib.Path, python: str,
                      patch: series_patches.SeriesPatch) -> dict[str, str]:
  """Runs ``patch``'s new and changed JAX tests on ``repo`` without its change.

  Returns those that do not fail there (they show nothing), with what they
  did. Leaves the tests in ``repo``'s work tree.
  """
  names = series_patches.added_tests(patch)
  if not names:
    return {}
  series_tree.apply(dataclasses.replace(patch, edits=()), repo,
                    with_tests=True)
  report = repo / "new-tests.xml"
  series_tree.run(repo, python, "-m", "pytest", "-q", "-p",
                  "no:cacheprovider", f"--junitxml={report}", "-k",
                  " or ".join(names), series_patches.INTEROP_TEST)
  outcomes: dict[str, set[str]] = {name: set() for name in names}
  if report.is_file():
    for case in ElementTree.parse(report).iter("testcase"):
      found = {child.tag for child in case} & {"failure", "error", "skipped"}
      for name in names:
        if re.match(rf"{name}(?![A-Za-z])", case.get("name", "")):
          outcomes[name].add(found.pop() if found else "passed")
  return {name: (", ".join(sorted(seen)) or "not collected")
          for name, seen in outcomes.items()
          if not seen & {"failure", "error"}}


def interop_test(repo: pathlib.Path, python: str) -> tuple[bool, str]:
  """Runs the target's DLPack test: whether it passed, and pytest's summary."""
  done = series_tree.run(repo, python, "-m", "pytest", "-q", "-p",
                         "no:cacheprovider", series_patches.INTEROP_TEST)
  summary = (done.stdout.strip().splitlines() or ["no output"])[-1]
  return done.returncode == 0, summary
