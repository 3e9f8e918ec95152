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

"""The series' checks, each on a scratch git copy of the target.

:func:`check_step` checks the tree after a step of the stack: JAX imports,
its pre-commit gates hold (``series_gates``) and, where asked, its DLPack
test passes. :func:`check_alone` checks a pull request as a reviewer takes
it: on the target and its dependencies only, where it applies with plain
``git am`` and its new tests fail without its change. The rest
(:func:`check_merge_queue`, :func:`check_conformance`,
:func:`check_reproducer`) check the whole queue and the reports.
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib

from jax_patch._delivery import series_gates
from jax_patch._delivery import series_runs
from jax_patch._delivery import series_tree
from jax_patch._delivery import upstream_set

Findings = collections.Counter[tuple[str, ...]]


@dataclasses.dataclass(frozen=True)
class Check:
  """One check's outcome, as the series prints it."""
  name: str  # "step 0004", "pull request 0010 (after 0001, 0002)", ...
  ok: bool
  summary: str
  detail: str = ""


def base_findings(repo: pathlib.Path, python: str,
                  gates: bool) -> Findings | None:
  """pyrefly's errors on the unpatched tree, where the tree configures it."""
  config = repo / "pyproject.toml"
  if not gates or not config.is_file() or (
      "[tool.pyrefly]" not in config.read_text()):
    return None
  return series_gates.pyrefly_errors(repo, python)


def check_step(name: str, title: str, repo: pathlib.Path, python: str,
               touched: list[str], ruff_before: Findings,
               base_errors: Findings | None, gates: bool,
               interop_test: bool) -> Check:
  """Checks the tree after a step that changed ``touched``."""
  problems = {}
  imported = series_runs.imports(repo, python)
  if imported != "ok":
    problems["JAX imports"] = imported
  if gates:
    problems.update(series_gates.lint(repo, python, touched, ruff_before,
                                      base_errors))
  summary = title
  if interop_test and (repo / upstream_set.INTEROP_TEST).is_file():
    passed, said = series_runs.interop_test(repo, python)
    summary += f" (DLPack test: {said})"
    if not passed:
      problems["DLPack test"] = said
  return Check(name, not problems, summary, _detail(problems))


def apply_alone(pull_request: upstream_set.PullRequest,
                patch_set: upstream_set.PatchSet, tree: pathlib.Path,
                left_out: list[str], on_base: bool
                ) -> list[series_tree.Conflict]:
  """Commits a pull request as a reviewer takes it, on its dependencies only.

  ``tree`` is a scratch work tree of the unpatched target. Its dependencies
  go on with ``git am -3``, each CHANGELOG.md entry placed; then the pull
  request itself: on the tree it was cut on (``on_base``) with plain
  ``git am``, as it must apply there; on another tree as its dependencies
  did. Its commits also give the stack's ``git am -3`` the blobs the file
  names.
  """
  for number in pull_request.depends_on:
    conflicts = series_tree.apply_pull_request(
        tree, patch_set.by_number(number), left_out)
    if conflicts:
      return conflicts
  if on_base and not left_out:
    return series_tree.apply_plain(tree, pull_request)
  return series_tree.apply_pull_request(tree, pull_request, left_out)


def check_alone(pull_request: upstream_set.PullRequest, tree: pathlib.Path,
                python: str) -> Check:
  """Checks a pull request :func:`apply_alone` committed in ``tree``.

  JAX must import, its DLPack test must pass, and the tests it adds must
  fail on the same tree with its non-test changes reverted.
  """
  after = ", ".join(f"{number:04d}" for number in pull_request.depends_on)
  name = f"pull request {pull_request.number:04d}" + (
      f" (after {after})" if after else "")
  problems = {}
  imported = series_runs.imports(tree, python)
  if imported != "ok":
    problems["JAX imports"] = imported
  passed, said = series_runs.interop_test(tree, python)
  if not passed:
    problems["DLPack test"] = said
  added = upstream_set.added_tests(pull_request.text())
  if added:
    series_tree.git(tree, "checkout", "HEAD~1", "--", ".",
                    f":!{upstream_set.INTEROP_TEST}")
    shown_nothing = series_runs.tests_not_failing(tree, python, added)
    series_tree.git(tree, "checkout", "HEAD", "--", ".")
    if any(name.startswith("jaxlib/")
           for name in upstream_set.touched_files(pull_request.patch)):
      # Its tests of the jaxlib fix it proposes skip on every released
      # jaxlib, gated on the extension version that brings the fix.
      shown_nothing = {test: outcome for test, outcome in shown_nothing.items()
                       if outcome != "skipped"}
    if shown_nothing:
      problems["its tests without its change"] = "\n".join(
          f"{test}: {outcome}" for test, outcome in shown_nothing.items())
  return Check(name, not problems,
               f"{pull_request.title} (DLPack test: {said}; its "
               f"{len(added)} new tests fail without it, or skip gated on "
               "its jaxlib fix)" if added else
               f"{pull_request.title} (DLPack test: {said}; no new test)",
               _detail(problems))


def check_merge_queue(repo: pathlib.Path, base: str,
                      patch_set: upstream_set.PatchSet,
                      left_out: list[str]) -> Check:
  """The pull requests merged in order give ``stack.patch``'s tree."""
  merged = series_tree.git(repo, "rev-parse", "HEAD^{tree}").strip()
  series_tree.git(repo, "checkout", "-q", "--detach", base)
  conflicts = series_tree.apply_diff(repo, patch_set.stack, left_out,
                                     "stack.patch")
  stacked = series_tree.git(repo, "rev-parse", "HEAD^{tree}").strip()
  if conflicts:
    return Check("merge queue", False, "stack.patch does not apply",
                 "\n".join(map(str, conflicts)))
  if merged != stacked:
    differ = series_tree.git(repo, "diff", "--stat", merged, stacked)
    return Check("merge queue", False,
                 "the pull requests merged in order differ from stack.patch",
                 differ)
  return Check("merge queue", True,
               f"the {len(patch_set.pull_requests)} pull requests merged in "
               "order (each CHANGELOG.md entry last in its section) give "
               "stack.patch's tree")


def check_conformance(repo: pathlib.Path, python: str,
                      left_undone: dict[str, str]) -> Check:
  """Every conformance case passes on the patched tree, but those left undone.

  A case ``upstream/left-undone.json`` names may pass (a newer jaxlib does
  what it needs); a case it does not name must not fail.
  """
  try:
    passed, failed = series_runs.conformance_failures(repo, python)
  except series_tree.SeriesError as err:
    return Check("conformance", False, "the cases did not run", str(err))
  unexpected = {name: detail for name, detail in failed.items()
                if name not in left_undone}
  summary = (f"{passed} cases pass; {len(failed)} fail, of them "
             f"{len(failed) - len(unexpected)} left undone "
             "(upstream/left-undone.json)")
  return Check("conformance", not unexpected, summary, _detail(unexpected))


def check_reproducer(path: pathlib.Path, repo: pathlib.Path,
                     python: str) -> Check:
  """Runs a report's reproducer on the unpatched target: it must run."""
  result, said = series_runs.reproducer(path, repo, python)
  name = "report " + path.name[:4]
  return Check(name, result != "error", f"{result}: {said}"[:300],
               said if result == "error" else "")


def _detail(problems: dict[str, str]) -> str:
  return "\n".join(f"{what}: {why}" for what, why in problems.items())
