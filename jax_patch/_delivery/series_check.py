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

"""The series' checks: the stack, each pull request alone, the reports.

:func:`check_series` applies the stack with ``git am`` to a scratch copy of
the target and, after each patch, checks that JAX imports, that the
target's own type checker accepts the touched files and JAX's pre-commit
gates pass (``series_gates``), that the conformance cases the patches so
far claim pass against the target's ``jax.numpy.from_dlpack``, its runtime
probes hold and (where asked) the target's own DLPack test passes
(``series_runs``). :func:`check_alone` checks each pull request on the
target and its dependencies only, as a reviewer takes it (with ``--speed``,
timed: ``series_speed``). :func:`check_reports` runs the jaxlib defects'
reproducers.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
import dataclasses
import pathlib
import re
import sys
import tempfile

from jax_patch._delivery import series_gates
from jax_patch._delivery import series_patches
from jax_patch._delivery import series_plan
from jax_patch._delivery import series_reports
from jax_patch._delivery import series_runs
from jax_patch._delivery import series_speed
from jax_patch._delivery import series_tree

@dataclasses.dataclass
class StepResult:
  """What the checks found after applying a pull request.

  In the stack, after those before it too.
  """
  index: int  # The pull request's number (series_plan.pull_request_number).
  subject: str
  applied: bool = False
  imports: bool = False
  type_check: str = ""  # "ok", or the checker's complaint
  # Failed cases, each with what it saw.
  failed_claims: dict[str, str] = dataclasses.field(default_factory=dict)
  # Runtime probes of the patches so far that failed, by patch slug; also
  # this patch's, if it passed before the patch (it shows nothing).
  failed_probes: dict[str, str] = dataclasses.field(default_factory=dict)
  # After the last step only: cases that fail on the full series though
  # they are neither claimed nor known to be left undone for this target.
  failed_after_series: dict[str, str] = dataclasses.field(
      default_factory=dict)
  interop_test: str = ""  # pytest's summary line, if it ran
  interop_passed: bool | None = None  # None: not run
  # Alone, with the DLPack test: the pull request's new or changed JAX tests
  # that do not fail on the tree it is cut on, with what they did there
  # (each must fail before the change, to show it).
  tests_pass_before: dict[str, str] = dataclasses.field(default_factory=dict)
  # JAX's pre-commit gates that fail, by gate: the hooks on the touched
  # files, ruff on them, and pyrefly's new errors over the whole tree.
  lint: dict[str, str] = dataclasses.field(default_factory=dict)
  # Whether the type check and the lint gates ran (see check_series).
  gated: bool = True
  # Alone, with --speed: the medians of jnp.from_dlpack of a small NumPy
  # array and of np.from_dlpack of a small JAX array, in microseconds, on
  # the tree it is cut on (the base, for a speed target) and with it, back
  # to back; and what is too slow.
  speed: dict[str, float] = dataclasses.field(default_factory=dict)
  slow: str = ""

  @property
  def ok(self) -> bool:
    return (self.applied and self.imports
            and (self.type_check == "ok" or not self.gated)
            and not self.failed_claims and not self.failed_probes
            and not self.failed_after_series and not self.lint
            and self.interop_passed is not False and not self.slow
            and not self.tests_pass_before)


def touched_files(patch_file: pathlib.Path) -> list[str]:
  """The files a patch in ``git format-patch`` form changes."""
  return sorted(set(re.findall(r"^\+\+\+ b/(\S+)$", patch_file.read_text(),
                               re.MULTILINE)))


def check_series(target: series_tree.Target, patches: list[pathlib.Path],
                 python: str = sys.executable,
                 interop_test: bool = False,
                 gates: bool = True) -> list[StepResult]:
  """Applies ``patches`` one by one to a copy of ``target``, checking each.

  Args:
    target: the JAX tree the series was written for.
    patches: the series, in order.
    python: an interpreter with a jaxlib the target supports, and the
      target's type checker, installed.
    interop_test: also run the target's tests/array_interoperability_test.py
      after each step (minutes each).
    gates: also run JAX's pre-commit gates and the target's type check
      (with each patch's typing probe). They read the text alone, as JAX
      runs them: once per commit, in an environment of their own, whatever
      jaxlib the tests run on. A second check of the same series at another
      jaxlib leaves them out.
  """
  results = []
  claimed: list[str] = []
  probed: list[series_patches.SeriesPatch] = []
  with tempfile.TemporaryDirectory() as scratch:
    repo = series_tree.scratch_repo(target, pathlib.Path(scratch))
    checker = series_gates.type_checker(repo, python) if gates else []
    jaxlib = series_tree.jaxlib_version(repo, python)
    base_errors = (series_gates.pyrefly_errors(repo, python) if checker
                   else None)
    for patch_file, patch in zip(patches, series_plan.patches_for(target)):
      step = StepResult(series_plan.pull_request_number(patch), patch.subject,
                        gated=gates)
      results.append(step)
      probe_before = (
          series_gates.type_check(repo, python, checker,
                                  [series_gates.write_probe(repo, patch)])
          if patch.typing_probe and checker else "")
      # A probe of a fix for older jaxlib shows nothing with a newer one.
      probes = bool(patch.runtime_probe) and patch.shows_on_jaxlib(jaxlib)
      runtime_before = (
          series_runs.runtime_probe(repo, python, patch.runtime_probe)
          if probes else "")
      if not _apply_and_check(step, repo, python, checker, patch, patch_file,
                              base_errors):
        break
      claimed.extend(_claims_on(jaxlib, (patch,)))
      if probe_before == "ok":
        step.type_check = ("the typing probe passes before the patch too: "
                           "it shows nothing")
      step.imports, step.failed_claims = series_runs.imports_and_claims(
          repo, python, claimed)
      if probes:
        probed.append(patch)
      for earlier in probed:
        outcome = series_runs.runtime_probe(repo, python,
                                            earlier.runtime_probe)
        if outcome != "ok":
          step.failed_probes[earlier.slug] = outcome
      if runtime_before == "ok":
        step.failed_probes[patch.slug] = (
            "the runtime probe passes before the patch too: it shows nothing")
      if interop_test and target.has_interop_test:
        step.interop_passed, step.interop_test = series_runs.interop_test(
            repo, python)
    if results and results[-1].applied and len(results) == len(patches):
      results[-1].failed_after_series = series_runs.failed_after_series(
          repo, python, series_patches.left_undone(jaxlib))
  return results


def _apply_and_check(step: StepResult, repo: pathlib.Path, python: str,
                     checker: list[str], patch: series_patches.SeriesPatch,
                     patch_file: pathlib.Path,
                     base_errors: collections.Counter[tuple[str, ...]] | None
                     ) -> bool:
  """Applies ``patch_file`` with ``git am``, then checks it where gated.

  The checks: the type check (with the patch's typing probe) and the lint
  gates, where ``step`` is gated.

  Returns:
    Whether it applied; where not, ``step`` says why and the ``git am`` is
    aborted.
  """
  touched = touched_files(patch_file)
  lint_before = (series_gates.ruff_findings(repo, python, touched)
                 if step.gated else None)
  try:
    series_tree.git(repo, "am", "-q", str(patch_file.absolute()))
  except series_tree.SeriesError as err:
    step.type_check = str(err)
    series_tree.git(repo, "am", "--abort")
    return False
  step.applied = True
  if lint_before is None:
    return True
  checked = [path for path in touched if path.startswith("jax/")]
  if patch.typing_probe:
    checked.append(series_gates.write_probe(repo, patch))
  step.type_check = series_gates.type_check(repo, python, checker, checked)
  step.lint = series_gates.lint(repo, python, touched, lint_before,
                                base_errors)
  return True


def check_alone(target: series_tree.Target,
                pull_requests: list[pathlib.Path],
                python: str = sys.executable,
                interop_test: bool = False,
                speed: bool = False,
                quiet: Callable[[], object] = lambda: None
                ) -> list[StepResult]:
  """Checks each pull request as a reviewer takes it: on ``target`` alone.

  Each goes on a fresh copy of the target after only the commits of its
  declared dependencies, with ``git am`` and no three-way merge, then
  must import, pass its claims and theirs, its typing and runtime probes,
  the type check of the files it touches and JAX's lint gates.

  Args:
    target: the JAX tree the pull requests were written for.
    pull_requests: ``series_write.write_series``' files, in its order.
    python: as for :func:`check_series`.
    interop_test: also run the target's DLPack test on each.
    speed: also time each against the base
      (``series_speed.SPEED_TOLERANCE``, and a patch's own
      ``speed_target``), once every one is checked; minutes.
    quiet: called before the timing starts, to return once nothing else
      runs beside it (a check of the stack, say).
  """
  patches = series_plan.patches_for(target)
  results = []
  # What --speed times once every pull request is checked.
  timed: list[tuple[StepResult, series_patches.SeriesPatch, str, str]] = []
  with tempfile.TemporaryDirectory() as scratch:
    repo = series_tree.scratch_repo(target, pathlib.Path(scratch))
    base = series_tree.git(repo, "rev-parse", "HEAD").strip()
    checker = series_gates.type_checker(repo, python)
    jaxlib = series_tree.jaxlib_version(repo, python)
    base_errors = (series_gates.pyrefly_errors(repo, python) if checker
                   else None)
    for patch_file, patch in zip(pull_requests, patches):
      step = StepResult(series_plan.pull_request_number(patch), patch.subject)
      results.append(step)
      series_tree.git(repo, "reset", "-q", "--hard", base)
      series_tree.git(repo, "clean", "-q", "-fdx")
      chain = series_patches.with_dependencies(patch, patches)
      # The dependencies as the pull request was cut on them: in a queue,
      # each of theirs merges first (their own files may not stack).
      series_tree.commit(repo, chain[:-1], target,
                         series_tree.SCRATCH_COMMITTER)
      cut_on = series_tree.git(repo, "rev-parse", "HEAD").strip()
      if interop_test and target.has_interop_test:
        step.tests_pass_before = series_runs.tests_pass_before(repo, python,
                                                               patch)
        series_tree.git(repo, "reset", "-q", "--hard", cut_on)
        series_tree.git(repo, "clean", "-q", "-fdx")
      if not _apply_and_check(step, repo, python, checker, patch, patch_file,
                              base_errors):
        continue
      claims = _claims_on(jaxlib, chain)
      step.imports, step.failed_claims = series_runs.imports_and_claims(
          repo, python, claims)
      if patch.runtime_probe and patch.shows_on_jaxlib(jaxlib):
        outcome = series_runs.runtime_probe(repo, python, patch.runtime_probe)
        if outcome != "ok":
          step.failed_probes[patch.slug] = outcome
      if interop_test and target.has_interop_test:
        step.interop_passed, step.interop_test = series_runs.interop_test(
            repo, python)
      if speed and step.imports:
        # Against the tree the pull request is cut on, so that what its
        # dependencies cost (stated in theirs) is not counted again; a speed
        # target is a fraction of the base's own time.
        timed.append((step, patch,
                      base if patch.speed_target is not None else cut_on,
                      series_tree.git(repo, "rev-parse", "HEAD").strip()))
    if timed:
      quiet()
      series_speed.time_pull_requests(repo, timed, python,
                                      pathlib.Path(scratch))
  return results


def _claims_on(jaxlib: tuple[int, ...],
               patches: Iterable[series_patches.SeriesPatch]) -> list[str]:
  """The claims of ``patches`` that can hold with ``jaxlib``.

  Not those that need a newer one (``series_patches.NEEDS_JAXLIB``).
  """
  too_new = series_patches.needs_newer_jaxlib(jaxlib)
  return [claim for patch in patches for claim in patch.claims
          if claim not in too_new]


@dataclasses.dataclass(frozen=True)
class ReportResult:
  """What a report's reproducer did with the installed jaxlib."""
  number: int  # series_plan.report_number
  title: str
  result: str  # "reproduces", "fixed" or "error"
  detail: str  # what the reproducer saw
  # Why the result contradicts the jaxlib versions the report names as
  # affected; empty where it agrees.
  problem: str

  @property
  def ok(self) -> bool:
    return not self.problem


def check_reports(target: series_tree.Target,
                  python: str = sys.executable) -> list[ReportResult]:
  """Runs each report's reproducer against ``target``'s own JAX.

  Unpatched (the defect is jaxlib's), with ``python``'s jaxlib and x64 off.

  A report whose jaxlib range includes the installed jaxlib must reproduce;
  one whose range excludes it must not; a reproducer that fails to run
  fails the check either way.
  """
  results = []
  with tempfile.TemporaryDirectory() as scratch:
    repo = series_tree.scratch_repo(target, pathlib.Path(scratch))
    jaxlib = series_tree.jaxlib_version(repo, python)
    for report in series_plan.reports_for(target):
      done = series_tree.run(repo, python, "-c", report.reproducer,
                             env={"JAX_ENABLE_X64": "0"})
      result, detail = series_reports.outcome(
          done.returncode, done.stdout, done.stderr, report.crash)
      results.append(ReportResult(
          series_plan.report_number(report), report.title, result, detail,
          series_reports.verdict(report, jaxlib, result)))
  return results
