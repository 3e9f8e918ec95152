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

"""``jax-patch series``: the upstream pull request, as a patch series.

:func:`write_series` applies the patches of ``series_patches.SERIES`` its
jaxlib range needs to a JAX tree one patch at a time, committing each in a
scratch git repository, and writes them out with ``git format-patch``,
each with its pull request description and CHANGELOG.md entry beside it.
:func:`check_series` applies them with ``git am`` to a scratch copy of the
tree and, after each, checks that JAX imports, that the target's own type
checker (pyrefly or mypy, as its ``pyproject.toml`` configures) accepts the
touched files, that JAX's pre-commit gates pass (its hooks and ruff on the
touched files, pyrefly over the whole tree with no error the base lacks),
that the conformance cases the patches so far claim pass against the
target's ``jax.numpy.from_dlpack``, and (where asked) the target's own
DLPack test.
"""

from __future__ import annotations

import ast
import collections
from collections.abc import Callable, Iterable
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any
from xml.etree import ElementTree

from jax_patch._delivery import series_patches
from jax_patch._delivery import series_reports
from jax_patch._src import conformance

# The series is written for this jaxlib range: every gate jax_patch keeps
# for older jaxlib is constant over it.
MIN_SUPPORTED_JAXLIB = (0, 11, 0)

_DATE = "Fri, 4 Dec 2026 00:00:00 +0000"  # Fixed: the output is reproducible.
_AUTHOR = re.compile(r"^\s*([^<>]+?)\s*<([^<>\s]+@[^<>\s]+)>\s*$")
# Who commits in the scratch repository; each patch's author is the user.
_SCRATCH_COMMITTER = ("jax-patch", "jax-patch@users.noreply.github.com")
_MIN_JAXLIB = re.compile(
    r"^_minimum_jaxlib_version\s*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_VERSION = re.compile(r"^_version\s*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
# The files a patch may touch, and what a scratch copy of the target needs.
_TREE_FILES = ("jax", "pyproject.toml", series_patches.INTEROP_TEST,
               series_patches.CHANGELOG)


class SeriesError(Exception):
  """The series cannot be written for, or applied to, the target."""


@dataclasses.dataclass(frozen=True)
class Target:
  root: pathlib.Path
  jax_version: str
  min_jaxlib: tuple[int, ...]
  # The newest jaxlib it accepts: JAX refuses a jaxlib newer than itself.
  max_jaxlib: tuple[int, ...]
  has_interop_test: bool
  # A JAX release's source distribution carries no CHANGELOG.md: the pull
  # requests' entries then go against a stand-in (:func:`_scratch_repo`).
  has_changelog: bool


@dataclasses.dataclass
class StepResult:
  """What the checks found after applying a pull request (and, in the
  stack, those before it)."""
  index: int  # The pull request's number (pull_request_number).
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


def _version_tuple(version: str) -> tuple[int, ...]:
  return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def read_target(root: pathlib.Path) -> Target:
  """Reads the target's JAX version and minimum jaxlib from jax/version.py.

  Raises:
    SeriesError: ``root`` is no JAX tree, or supports a jaxlib older than
      the series is written for.
  """
  version_file = root / "jax" / "version.py"
  if not version_file.is_file():
    raise SeriesError(f"{root} is not a JAX tree: it has no jax/version.py.")
  text = version_file.read_text()
  version, minimum = _VERSION.search(text), _MIN_JAXLIB.search(text)
  if version is None or minimum is None:
    raise SeriesError(
        f"{version_file} sets no _version or _minimum_jaxlib_version.")
  min_jaxlib = _version_tuple(minimum.group(1))
  if min_jaxlib < MIN_SUPPORTED_JAXLIB:
    raise SeriesError(
        f"JAX {version.group(1)} supports jaxlib {minimum.group(1)}, older "
        f"than the series' {'.'.join(map(str, MIN_SUPPORTED_JAXLIB))}: "
        "vendor the patch there instead (jax-patch vendor).")
  return Target(root, version.group(1), min_jaxlib,
                _version_tuple(version.group(1)),
                (root / series_patches.INTEROP_TEST).is_file(),
                (root / series_patches.CHANGELOG).is_file())


def patches_for(target: Target) -> tuple[series_patches.SeriesPatch, ...]:
  """The patches ``target``'s jaxlib range and import path need, less those
  it has merged (:func:`merged_in`)."""
  return tuple(patch for patch in _needed(target)
               if not _is_merged(patch, target))


def merged_in(target: Target) -> list[str]:
  """The subjects of the patches ``target`` already holds, as merged.

  As pull requests merge one by one, the series is rewritten against the
  new main: a merged one drops out, and those that went after it apply
  to main by themselves.
  """
  return [patch.subject for patch in _needed(target)
          if _is_merged(patch, target)]


def _needed(target: Target) -> tuple[series_patches.SeriesPatch, ...]:
  return series_patches.for_target(target.min_jaxlib, target.max_jaxlib)


def _is_merged(patch: series_patches.SeriesPatch, target: Target) -> bool:
  """Whether every text ``patch`` writes is in ``target`` already."""
  edits = patch.edits + (patch.test_edits if target.has_interop_test else ())
  for edit in edits:
    path = target.root / edit.path
    if not path.is_file() or edit.new not in path.read_text():
      return False
  return True


# Every pull request's behaviour, in queue order: its number is its place.
_BEHAVIOURS = tuple(dict.fromkeys(
    patch.behaviour for patch in series_patches.SERIES))


def pull_request_number(patch: series_patches.SeriesPatch) -> int:
  """The pull request's number, the same for every target.

  Its place in the whole queue, whether a target needs the pull requests
  before it or not: a number a target leaves out (one it holds already, or
  whose jaxlib range does not need it) is skipped, not reused, so that the
  README's queue table and a series written for any target, or written
  again after some pull requests merged, name each one alike.
  """
  return _BEHAVIOURS.index(patch.behaviour) + 1


def left_out(target: Target) -> list[tuple[int, str, str]]:
  """The pull requests ``target`` does not get, as ``(number, subject,
  why)``, in queue order: those it holds already (:func:`merged_in`), and
  those no form of which its jaxlib range gets: not needed there, or a
  jaxlib workaround whose defect every jaxlib of the range has, which gets
  the defect's report instead (``SeriesPatch.stands_in_for``)."""
  needed = _needed(target)
  found = {pull_request_number(patch): (patch.subject, "already in the target")
           for patch in needed if _is_merged(patch, target)}
  behaviours = {patch.behaviour for patch in needed}
  reported = {report.slug: report for report in reports_for(target)}
  for patch in series_patches.SERIES:  # A behaviour's first form names it.
    if patch.behaviour in behaviours:
      continue
    why = "not needed for its jaxlib range"
    if patch.stands_in_for in reported:
      report = reported[patch.stands_in_for]
      why = (f"every jaxlib of its range has the defect: report "
             f"{report_number(report):04d} ({report.slug}) instead")
    found.setdefault(pull_request_number(patch), (patch.subject, why))
  return [(number, *found[number]) for number in sorted(found)]


def dependency_numbers(target: Target) -> dict[int, list[int]]:
  """Each pull request's number: the numbers of those it goes on after."""
  patches = patches_for(target)
  return {
      pull_request_number(patch): [
          pull_request_number(dependency) for dependency in
          series_patches.with_dependencies(patch, patches)[:-1]]
      for patch in patches}


def author_from(author: str | None, root: pathlib.Path) -> tuple[str, str]:
  """The patches' author and committer: ``author``, else git's config.

  Args:
    author: ``"Name <email>"``, as ``--author`` gives it, or ``None``.
    root: where git's config is read (the target's repository, then the
      user's global one).

  Raises:
    SeriesError: ``author`` is malformed, or it is ``None`` and git has no
      ``user.name`` and ``user.email``.
  """
  if author is None:
    name, email = (_git_config(root, key) for key in ("user.name",
                                                      "user.email"))
    if not name or not email:
      raise SeriesError(
          "no author for the patches: pass --author 'Name <email>', or set "
          "git config user.name and user.email")
    return name, email
  match = _AUTHOR.match(author)
  if match is None:
    raise SeriesError(f"--author {author!r}: expected 'Name <email>'")
  return match.group(1), match.group(2)


def _git_config(root: pathlib.Path, key: str) -> str:
  done = subprocess.run(["git", "-C", str(root), "config", key], text=True,
                        capture_output=True, check=False)
  return done.stdout.strip()


def _git_env(who: tuple[str, str]) -> dict[str, str]:
  return dict(os.environ, GIT_AUTHOR_DATE=_DATE, GIT_COMMITTER_DATE=_DATE,
              GIT_AUTHOR_NAME=who[0], GIT_COMMITTER_NAME=who[0],
              GIT_AUTHOR_EMAIL=who[1], GIT_COMMITTER_EMAIL=who[1])


def _git(repo: pathlib.Path, *args: str,
         who: tuple[str, str] = _SCRATCH_COMMITTER) -> str:
  done = subprocess.run(["git", "-C", str(repo), *args], env=_git_env(who),
                        text=True, capture_output=True, check=False)
  if done.returncode:
    raise SeriesError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
  return done.stdout


def changelog_stand_in(target: Target) -> str:
  """What a target without CHANGELOG.md gets in its place: JAX's headings
  for the unreleased changes and the target's release, empty, so that the
  pull requests' entries and their conflicts in a merge queue are made and
  checked as on JAX's own file."""
  return f"""\
# Change log

<!--
A stand-in made by jax-patch: the source distribution of JAX
{target.jax_version} carries no CHANGELOG.md. Write the series against a
git checkout of JAX to send it: its entries then go into JAX's own file.
-->

## Unreleased

## JAX {target.jax_version}
"""


def _scratch_repo(target: Target, scratch: pathlib.Path) -> pathlib.Path:
  """A git repository holding a copy of the target's files, committed, with
  a stand-in CHANGELOG.md where the target has none."""
  repo = scratch / "tree"
  repo.mkdir()
  for name in _TREE_FILES:
    source = target.root / name
    if source.is_dir():
      shutil.copytree(source, repo / name,
                      ignore=shutil.ignore_patterns("__pycache__"))
    elif source.is_file():
      (repo / name).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(source, repo / name)
  if not target.has_changelog:
    (repo / series_patches.CHANGELOG).write_text(changelog_stand_in(target))
  _git(repo, "init", "-q")
  _git(repo, "add", "-A")
  _git(repo, "commit", "-q", "-m", f"JAX {target.jax_version}")
  return repo


def _apply(patch: series_patches.SeriesPatch, repo: pathlib.Path,
           with_tests: bool) -> list[str]:
  """Applies ``patch``'s edits in ``repo``; returns the files it touched."""
  touched = []
  for edit in patch.edits + (patch.test_edits if with_tests else ()):
    path = repo / edit.path
    if not edit.old:
      if path.exists():
        raise SeriesError(
            f"patch {patch.slug!r}: {edit.path}, which it creates, exists.")
      path.write_text(edit.new)
      touched.append(edit.path)
      continue
    text = path.read_text()
    count = text.count(edit.old)
    if count != 1:
      raise SeriesError(
          f"patch {patch.slug!r}: {edit.path} has {count} copies of the "
          f"text it replaces, not one:\n{edit.old}")
    path.write_text(text.replace(edit.old, edit.new))
    touched.append(edit.path)
  return sorted(set(touched))


# Beside the pull requests: the order to send them in, each with the file
# names of those it goes on after.
QUEUE = "queue.json"


def read_queue(out: pathlib.Path) -> list[dict[str, Any]]:
  """The queue :func:`write_series` wrote into ``out``: in the order to send
  them, ``{"patch": file name, "title": subject, "depends_on": [file
  names]}`` for each pull request."""
  queue: list[dict[str, Any]] = json.loads((out / QUEUE).read_text())
  return queue


def write_series(target: Target, out: pathlib.Path,
                 author: tuple[str, str]) -> list[pathlib.Path]:
  """Writes the pull requests for ``target`` (see :func:`read_target`).

  Each ``out/NNNN-name.patch`` is one pull request's commit, numbered as
  :func:`pull_request_number` says (the same on every target), made against
  the target and the commits of the patch's declared dependencies only
  (``series_patches.with_dependencies``): one that needs none applies to the
  target by itself. Beside it go ``NNNN-name.description.md``, the pull
  request's description (naming, by title, the pull requests it goes on
  after); ``queue.json`` lists them in order, each with its dependencies'
  files. Each commit adds its entry to JAX's CHANGELOG.md, under
  Unreleased (to a stand-in where the target has no CHANGELOG.md:
  :func:`changelog_stand_in`).
  ``out/stack/`` holds the same commits made one on another, in order: what
  the target becomes as they merge (:func:`stack_files`). The jaxlib
  defects reported upstream that affect the target's jaxlib range go beside
  them as ``NNNN-slug.issue.md``, each with its reproducer.

  Args:
    target: the JAX tree.
    out: where the files go.
    author: ``(name, email)`` of the patches' author and committer
      (:func:`author_from`).

  Returns:
    The pull requests' patch files, in the recommended order.

  Raises:
    SeriesError: a patch's text is not in the target.
  """
  out.mkdir(parents=True, exist_ok=True)
  # A series written before, maybe for another target, must not mix in.
  for pattern in ("*.patch", "*.description.md", "*.changelog.md",
                  "*.issue.md", "*.reproducer.py", "stack/*.patch"):
    for stale in out.glob(pattern):
      stale.unlink()
  patches = patches_for(target)
  pull_requests = []
  with tempfile.TemporaryDirectory() as scratch:
    repo = _scratch_repo(target, pathlib.Path(scratch))
    base = _git(repo, "rev-parse", "HEAD").strip()
    for patch in patches:
      _git(repo, "checkout", "-q", "--detach", base)
      _commit(repo, series_patches.with_dependencies(patch, patches), target,
              author)
      pull_requests.extend(_format_patches(repo, "HEAD~1", out,
                                           pull_request_number(patch)))
    _git(repo, "checkout", "-q", "--detach", base)
    for patch in patches:
      # One at a time, so that each keeps its pull request's number.
      _commit(repo, (patch,), target, author)
      _format_patches(repo, "HEAD~1", out / "stack",
                      pull_request_number(patch))
  queue: list[dict[str, Any]] = []
  file_names = {patch.behaviour: patch_file.name
                for patch_file, patch in zip(pull_requests, patches)}
  for patch_file, patch in zip(pull_requests, patches):
    stem = patch_file.name[:-len(".patch")]
    dependencies = series_patches.with_dependencies(patch, patches)[:-1]
    (out / f"{stem}.description.md").write_text(
        series_patches.description(patch, dependencies))
    queue.append({"patch": patch_file.name, "title": patch.subject,
                  "depends_on": [file_names[each.behaviour]
                                 for each in dependencies]})
  (out / QUEUE).write_text(json.dumps(queue, indent=2) + "\n")
  for report in reports_for(target):
    stem = f"{report_number(report):04d}-{report.slug}"
    (out / f"{stem}.issue.md").write_text(
        series_reports.issue_text(report, target.jax_version))
    (out / f"{stem}.reproducer.py").write_text(report.reproducer)
  return pull_requests


def reports_for(target: Target) -> tuple[series_reports.JaxlibReport, ...]:
  """The jaxlib defects reported upstream that affect a jaxlib ``target``
  supports."""
  return series_reports.for_range(target.min_jaxlib, target.max_jaxlib)


def report_number(report: series_reports.JaxlibReport) -> int:
  """A report's number: after every pull request's, the same on every
  target, as :func:`pull_request_number` is."""
  return len(_BEHAVIOURS) + 1 + series_reports.REPORTS.index(report)


def report_files(out: pathlib.Path) -> list[pathlib.Path]:
  """The bug reports :func:`write_series` wrote into ``out``."""
  return sorted(out.glob("*.issue.md"))


@dataclasses.dataclass(frozen=True)
class ReportResult:
  """What a report's reproducer did with the installed jaxlib."""
  number: int  # report_number
  title: str
  result: str  # "reproduces", "fixed" or "error"
  detail: str  # what the reproducer saw
  # Why the result contradicts the jaxlib versions the report names as
  # affected; empty where it agrees.
  problem: str

  @property
  def ok(self) -> bool:
    return not self.problem


def check_reports(target: Target,
                  python: str = sys.executable) -> list[ReportResult]:
  """Runs each report's reproducer against ``target``'s own JAX (unpatched:
  the defect is jaxlib's) and ``python``'s jaxlib, with x64 off.

  A report whose jaxlib range includes the installed jaxlib must reproduce;
  one whose range excludes it must not; a reproducer that fails to run
  fails the check either way.
  """
  results = []
  with tempfile.TemporaryDirectory() as scratch:
    repo = _scratch_repo(target, pathlib.Path(scratch))
    jaxlib = _jaxlib_version(repo, python)
    for report in reports_for(target):
      done = _run(repo, python, "-c", report.reproducer,
                  env={"JAX_ENABLE_X64": "0"})
      result, detail = series_reports.outcome(
          done.returncode, done.stdout, done.stderr, report.crash)
      results.append(ReportResult(
          report_number(report), report.title, result, detail,
          series_reports.verdict(report, jaxlib, result)))
  return results


def stack_files(out: pathlib.Path) -> list[pathlib.Path]:
  """The whole series as :func:`write_series` wrote it into ``out``."""
  return sorted((out / "stack").glob("*.patch"))


def _commit(repo: pathlib.Path, patches: tuple[series_patches.SeriesPatch, ...],
            target: Target, author: tuple[str, str]) -> None:
  for patch in patches:
    _apply(patch, repo, target.has_interop_test)
    changelog = repo / series_patches.CHANGELOG
    changelog.write_text(series_patches.with_changelog_entry(
        changelog.read_text(), patch))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", f"{patch.subject}\n\n{patch.body}",
         who=author)


def _format_patches(repo: pathlib.Path, since: str, out: pathlib.Path,
                    start: int) -> list[pathlib.Path]:
  """``git format-patch`` of ``since..HEAD`` into ``out``, numbered from
  ``start``; the files written, in order."""
  written = _git(repo, "format-patch", "--no-signature", "--zero-commit",
                 "--no-numbered", "--start-number", str(start), "-o",
                 str(out.absolute()), f"{since}..HEAD")
  return [pathlib.Path(line) for line in written.splitlines()]


def touched_files(patch_file: pathlib.Path) -> list[str]:
  """The files a patch in ``git format-patch`` form changes."""
  return sorted(set(re.findall(r"^\+\+\+ b/(\S+)$", patch_file.read_text(),
                               re.MULTILINE)))


def check_series(target: Target, patches: list[pathlib.Path],
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
    repo = _scratch_repo(target, pathlib.Path(scratch))
    checker = _checker(repo, python) if gates else []
    jaxlib = _jaxlib_version(repo, python)
    base_errors = _pyrefly_errors(repo, python) if checker else None
    for patch_file, patch in zip(patches, patches_for(target)):
      step = StepResult(pull_request_number(patch), patch.subject,
                        gated=gates)
      results.append(step)
      probe_before = (
          _type_check(repo, python, checker, [_write_probe(repo, patch)])
          if patch.typing_probe and checker else "")
      # A probe of a fix for older jaxlib shows nothing with a newer one.
      probes = bool(patch.runtime_probe) and patch.shows_on_jaxlib(jaxlib)
      runtime_before = (_runtime_probe(repo, python, patch.runtime_probe)
                        if probes else "")
      if not _apply_and_check(step, repo, python, checker, patch, patch_file,
                              base_errors):
        break
      claimed.extend(_claims_on(jaxlib, (patch,)))
      if probe_before == "ok":
        step.type_check = ("the typing probe passes before the patch too: "
                           "it shows nothing")
      step.imports, step.failed_claims = _imports_and_claims(repo, python,
                                                             claimed)
      if probes:
        probed.append(patch)
      for earlier in probed:
        outcome = _runtime_probe(repo, python, earlier.runtime_probe)
        if outcome != "ok":
          step.failed_probes[earlier.slug] = outcome
      if runtime_before == "ok":
        step.failed_probes[patch.slug] = (
            "the runtime probe passes before the patch too: it shows nothing")
      if interop_test and target.has_interop_test:
        step.interop_passed, step.interop_test = _interop_test(repo, python)
    if results and results[-1].applied and len(results) == len(patches):
      results[-1].failed_after_series = _failed_after_series(
          repo, python, series_patches.left_undone(jaxlib))
  return results


@dataclasses.dataclass
class MergeQueue:
  """How the pull requests merged in order (:func:`merge_queue`)."""
  # The conflicting files, by the subject of the pull request whose merge
  # conflicts (or "the stack", if the merged queue differs from its tree).
  conflicts: dict[str, list[str]] = dataclasses.field(default_factory=dict)
  # The pull requests whose merge conflicted, and which merged once rebased
  # (their own commit picked onto the queue, a CHANGELOG.md entry added
  # after those merged before it), with the files their merge conflicted
  # in: as a maintainer asks of the later of two pull requests.
  rebased: dict[str, list[str]] = dataclasses.field(default_factory=dict)


def merge_queue(target: Target) -> MergeQueue:
  """Merges the pull requests in order, as maintainers would take them.

  Each pull request's branch holds the branches of its dependencies (a
  stacked pull request) and its own commit; they merge one by one into a
  copy of the target. Pull requests that each add a CHANGELOG.md entry in
  the same place conflict there, and one cut on a dependency that was
  rebased conflicts with it: the later one is rebased onto the queue and
  merges. What still conflicts once rebased is a conflict. The result must
  equal the stack's.
  """
  patches = patches_for(target)
  queue = MergeQueue()
  with tempfile.TemporaryDirectory() as scratch:
    repo = _scratch_repo(target, pathlib.Path(scratch))
    base = _git(repo, "rev-parse", "HEAD").strip()
    branches: dict[str, str] = {}
    for patch in patches:
      _git(repo, "checkout", "-q", "--detach", base)
      chain = series_patches.with_dependencies(patch, patches)
      for dependency in chain[:-1]:
        if dependency.behaviour not in branches:  # Its branch failed.
          queue.conflicts[f"{patch.subject} (its dependencies)"] = [
              f"(no branch for {dependency.behaviour})"]
          break
        failed, _ = _take(repo, branches[dependency.behaviour], dependency)
        if failed:
          queue.conflicts[f"{patch.subject} (its dependencies)"] = failed
          break
      else:
        _commit(repo, (patch,), target, _SCRATCH_COMMITTER)
        branches[patch.behaviour] = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "checkout", "-q", "--detach", base)
    _commit(repo, patches, target, _SCRATCH_COMMITTER)
    stack = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "checkout", "-q", "--detach", base)
    for patch in patches:
      if patch.behaviour not in branches:
        continue
      failed, rebased = _take(repo, branches[patch.behaviour], patch)
      if failed:
        queue.conflicts[patch.subject] = failed
      elif rebased:
        queue.rebased[patch.subject] = rebased
    if not queue.conflicts:
      differing = _git(repo, "diff", "--name-only", "HEAD", stack).split()
      if differing:
        queue.conflicts["the stack"] = differing
  return queue


def _take(repo: pathlib.Path, branch: str,
          patch: series_patches.SeriesPatch) -> tuple[list[str], list[str]]:
  """Merges ``branch`` into HEAD, or where that conflicts (or leaves
  CHANGELOG.md other than ``patch``'s entry added to HEAD's), rebases its
  own commit onto HEAD (:func:`_rebase_onto_head`).

  Returns:
    The files that still conflict (nothing is merged where there are
    some), and those the merge conflicted in where the rebase took it.
  """
  head = _git(repo, "rev-parse", "HEAD").strip()
  changelog = _git(repo, "show", f"HEAD:{series_patches.CHANGELOG}")
  conflicting = _merge(repo, branch)
  if not conflicting:
    merged = (repo / series_patches.CHANGELOG).read_text()
    if merged == series_patches.with_changelog_entry(changelog, patch):
      return [], []
    # A clean merge can still garble it: two pull requests that each made
    # the same section leave it twice.
    _git(repo, "reset", "-q", "--hard", head)
    conflicting = [series_patches.CHANGELOG]
  failed = _rebase_onto_head(repo, branch, patch)
  return failed, [] if failed else conflicting


def _rebase_onto_head(repo: pathlib.Path, branch: str,
                      patch: series_patches.SeriesPatch) -> list[str]:
  """Picks ``branch``'s own commit onto HEAD, adding ``patch``'s CHANGELOG.md
  entry to HEAD's: the files that conflict besides, picking nothing where
  there are some."""
  picked = subprocess.run(
      ["git", "-C", str(repo), "cherry-pick", "--no-commit", branch],
      env=_git_env(_SCRATCH_COMMITTER), text=True, capture_output=True,
      check=False)
  conflicting = _git(repo, "diff", "--name-only", "--diff-filter=U").split()
  others = [path for path in conflicting
            if path != series_patches.CHANGELOG]
  if others or (picked.returncode and not conflicting):
    _git(repo, "reset", "-q", "--hard", "HEAD")
    return others or [picked.stderr.strip()]
  changelog = repo / series_patches.CHANGELOG
  changelog.write_text(series_patches.with_changelog_entry(
      _git(repo, "show", f"HEAD:{series_patches.CHANGELOG}"), patch))
  _git(repo, "add", series_patches.CHANGELOG)
  _git(repo, "commit", "-q", "--no-edit", "-C", branch)
  return []


def _apply_and_check(step: StepResult, repo: pathlib.Path, python: str,
                     checker: list[str], patch: series_patches.SeriesPatch,
                     patch_file: pathlib.Path,
                     base_errors: collections.Counter[tuple[str, ...]] | None
                     ) -> bool:
  """Applies ``patch_file`` with ``git am``, then checks it: the type check
  (with the patch's typing probe) and the lint gates, where ``step`` is
  gated.

  Returns:
    Whether it applied; where not, ``step`` says why and the ``git am`` is
    aborted.
  """
  touched = touched_files(patch_file)
  lint_before = _ruff_findings(repo, python, touched) if step.gated else None
  try:
    _git(repo, "am", "-q", str(patch_file.absolute()))
  except SeriesError as err:
    step.type_check = str(err)
    _git(repo, "am", "--abort")
    return False
  step.applied = True
  if lint_before is None:
    return True
  checked = [path for path in touched if path.startswith("jax/")]
  if patch.typing_probe:
    checked.append(_write_probe(repo, patch))
  step.type_check = _type_check(repo, python, checker, checked)
  step.lint = _lint(repo, python, touched, lint_before, base_errors)
  return True


def _merge(repo: pathlib.Path, commit: str) -> list[str]:
  """Merges ``commit`` into HEAD: the conflicting files, merging nothing
  where there are some."""
  merged = subprocess.run(
      ["git", "-C", str(repo), "merge", "-q", "--no-edit", commit],
      env=_git_env(_SCRATCH_COMMITTER), text=True, capture_output=True,
      check=False)
  if not merged.returncode:
    return []
  conflicting = _git(repo, "diff", "--name-only", "--diff-filter=U").split()
  _git(repo, "merge", "--abort")
  return conflicting or [merged.stderr.strip()]


# How much slower than the tree it is cut on (the base plus its
# dependencies) a pull request may make the import or the export on the
# paths it does not fix, unless it states its cost
# (``SeriesPatch.speed_cost``). Above this machine's noise: whole processes
# of the same code run about 13% apart, so a patch that leaves a path alone
# has read up to 1.23x (a .pyi-only patch 1.12x); a reading above it is
# measured again (:func:`_timed`).
SPEED_TOLERANCE = 1.25

_SPEED_SCRIPT = """
import json, timeit
import numpy as np
import jax.numpy as jnp
x = np.arange(64, dtype=np.float32)
a = jnp.arange(64, dtype=jnp.float32).block_until_ready()
calls = {"import": lambda: jnp.from_dlpack(x), "export": lambda: np.from_dlpack(a)}
medians = {}
for name, call in calls.items():
  timeit.timeit(call, number=300)
  times = sorted(timeit.repeat(call, number=300, repeat=9))
  medians[name] = times[len(times) // 2] / 300 * 1e6
print(json.dumps(medians))
"""


def _time_trees(trees: list[pathlib.Path], python: str,
                rounds: int = 5) -> list[dict[str, float]]:
  """Import and export times (us) on each of ``trees``, in its order.

  Every round times each tree once, in a process of its own, so that drift
  hits all alike; a round gives a median of 9 runs of 300 calls, and each
  tree's fastest round counts: a shared machine's noise only adds time (a
  round here now and then takes twice as long, and whole processes run 10%
  to 30% slower than others of the same code), so one slow round must not
  fail a pull request.
  """
  runs: list[dict[str, list[float]]] = [
      collections.defaultdict(list) for _ in trees]
  for _ in range(rounds):
    for tree, tree_runs in zip(trees, runs):
      done = _run(tree, python, "-c", _SPEED_SCRIPT)
      if done.returncode:
        raise SeriesError(f"the speed script failed in {tree}: "
                          f"{done.stderr[-1000:]}")
      for name, value in json.loads(done.stdout.splitlines()[-1]).items():
        tree_runs[name].append(value)
  return [{name: min(values) for name, values in tree_runs.items()}
          for tree_runs in runs]


def _speed(base: pathlib.Path, repo: pathlib.Path,
           python: str) -> dict[str, float]:
  """:func:`_time_trees` of ``base`` and ``repo``: ``"import"`` and
  ``"export"`` on ``repo``, ``"base import"`` and ``"base export"`` on
  ``base``."""
  base_times, times = _time_trees([base, repo], python)
  return dict(times, **{f"base {name}": value
                        for name, value in base_times.items()})


def _timed(patch: series_patches.SeriesPatch, speed: dict[str, float],
           base: pathlib.Path, repo: pathlib.Path,
           python: str) -> tuple[dict[str, float], str]:
  """``speed``, a reading of ``base`` and ``repo`` (:func:`_speed`'s
  names), and why it is too slow if so.

  A reading over the tolerance or the target is measured again, in fresh
  processes, and each tree keeps its fastest round of both: a slowdown the
  patch makes shows again, while a lucky fast round of the base (a quiet
  run here read 1.23x for a patch that leaves the path alone) does not
  fail it. Both trees get the extra rounds, so neither is favoured.
  """
  slow = _too_slow(patch, speed)
  if slow:
    again = _speed(base, repo, python)
    speed = {name: min(value, again[name]) for name, value in speed.items()}
    slow = _too_slow(patch, speed)
  return speed, slow


def _time_pull_requests(
    repo: pathlib.Path, timed: list[tuple[StepResult,
                                          series_patches.SeriesPatch,
                                          str, str]],
    python: str, scratch: pathlib.Path) -> None:
  """Times each pull request against the tree it is cut on.

  Args:
    repo: the scratch repository that holds every commit named in
      ``timed``.
    timed: ``(step, patch, base commit, its commit)`` of each pull request
      to time; sets the step's ``speed`` and ``slow``.
    scratch: where each tree gets a work tree of its own.

  Many pull requests are cut on the same tree (the target, or a
  dependency's), so each distinct tree (git's tree hash) is timed once,
  all of them in the same rounds.
  """
  places: dict[str, pathlib.Path] = {}
  for _, _, *commits in timed:
    for commit in commits:
      tree = _git(repo, "rev-parse", f"{commit}^{{tree}}").strip()
      if tree not in places:
        places[tree] = scratch / f"timed-{len(places)}"
        _git(repo, "worktree", "add", "-q", "--detach", str(places[tree]),
             commit)
  keys = {commit: _git(repo, "rev-parse", f"{commit}^{{tree}}").strip()
          for _, _, *commits in timed for commit in commits}
  times = dict(zip(places, _time_trees(list(places.values()), python)))
  for step, patch, base, commit in timed:
    reading = dict(times[keys[commit]],
                   **{f"base {name}": value
                      for name, value in times[keys[base]].items()})
    step.speed, step.slow = _timed(patch, reading, places[keys[base]],
                                   places[keys[commit]], python)


def _too_slow(patch: series_patches.SeriesPatch,
              speed: dict[str, float]) -> str:
  """Why ``speed`` breaks the patch's speed target or the tolerance."""
  ratios = {name: speed[name] / speed["base " + name]
            for name in ("import", "export")}
  if patch.speed_target is not None:
    if ratios["import"] > patch.speed_target:
      return (f"import takes {ratios['import']:.2f}x the base's time; the "
              f"target is {patch.speed_target}x")
    return ""
  if patch.speed_cost:
    return ""
  return "; ".join(
      f"{name} takes {ratio:.2f}x the time without it (tolerance "
      f"{SPEED_TOLERANCE}x)" for name, ratio in ratios.items()
      if ratio > SPEED_TOLERANCE)


# What the whole stack may take against its base, as a fraction of the
# base's time: the import of a small writable NumPy array, and the export
# of a small JAX array to NumPy. The export target allows this machine's
# noise (whole processes of the same code run up to about 13% apart; the
# fastest of 5 rounds, measured twice where over, comes within 5%).
STACK_SPEED_TARGETS = {"import": 0.35, "export": 1.0}
STACK_SPEED_NOISE = 1.05


@dataclasses.dataclass(frozen=True)
class StackSpeed:
  """The whole stack timed against its base (:func:`stack_speed`)."""
  # "import", "export", "base import", "base export": microseconds.
  speed: dict[str, float]
  slow: str  # Which target it misses, or "".

  def ratio(self, name: str) -> float:
    return self.speed[name] / self.speed["base " + name]


def stack_speed(target: Target, python: str = sys.executable) -> StackSpeed:
  """Times the target with every pull request merged against the target
  alone, back to back (:func:`_time_trees`), and checks the stack against
  :data:`STACK_SPEED_TARGETS`; a reading over a target is measured again,
  and each tree keeps its fastest."""
  with tempfile.TemporaryDirectory() as scratch:
    repo = _scratch_repo(target, pathlib.Path(scratch))
    base = pathlib.Path(scratch) / "base"
    _git(repo, "worktree", "add", "-q", "--detach", str(base), "HEAD")
    _commit(repo, patches_for(target), target, _SCRATCH_COMMITTER)
    speed = _speed(base, repo, python)
    slow = _stack_too_slow(speed)
    if slow:
      again = _speed(base, repo, python)
      speed = {name: min(value, again[name]) for name, value in speed.items()}
      slow = _stack_too_slow(speed)
  return StackSpeed(speed, slow)


def _stack_too_slow(speed: dict[str, float]) -> str:
  missed = []
  for name, target in STACK_SPEED_TARGETS.items():
    ratio = speed[name] / speed["base " + name]
    allowed = target * (STACK_SPEED_NOISE if target >= 1 else 1)
    if ratio > allowed:
      missed.append(f"{name} takes {ratio:.2f}x the base's time; the target "
                    f"is {target}x")
  return "; ".join(missed)


def check_alone(target: Target, pull_requests: list[pathlib.Path],
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
    pull_requests: :func:`write_series`' files, in its order.
    python: as for :func:`check_series`.
    interop_test: also run the target's DLPack test on each.
    speed: also time each against the base (:data:`SPEED_TOLERANCE`, and
      a patch's own ``speed_target``), once every one is checked; minutes.
    quiet: called before the timing starts, to return once nothing else
      runs beside it (a check of the stack, say).
  """
  patches = patches_for(target)
  results = []
  # What --speed times once every pull request is checked.
  timed: list[tuple[StepResult, series_patches.SeriesPatch, str, str]] = []
  with tempfile.TemporaryDirectory() as scratch:
    repo = _scratch_repo(target, pathlib.Path(scratch))
    base = _git(repo, "rev-parse", "HEAD").strip()
    checker = _checker(repo, python)
    jaxlib = _jaxlib_version(repo, python)
    base_errors = _pyrefly_errors(repo, python) if checker else None
    for patch_file, patch in zip(pull_requests, patches):
      step = StepResult(pull_request_number(patch), patch.subject)
      results.append(step)
      _git(repo, "reset", "-q", "--hard", base)
      _git(repo, "clean", "-q", "-fdx")
      chain = series_patches.with_dependencies(patch, patches)
      # The dependencies as the pull request was cut on them: in a queue,
      # each of theirs merges first (their own files may not stack).
      _commit(repo, chain[:-1], target, _SCRATCH_COMMITTER)
      cut_on = _git(repo, "rev-parse", "HEAD").strip()
      if interop_test and target.has_interop_test:
        step.tests_pass_before = _tests_pass_before(repo, python, patch)
        _git(repo, "reset", "-q", "--hard", cut_on)
        _git(repo, "clean", "-q", "-fdx")
      if not _apply_and_check(step, repo, python, checker, patch, patch_file,
                              base_errors):
        continue
      claims = _claims_on(jaxlib, chain)
      step.imports, step.failed_claims = _imports_and_claims(repo, python,
                                                             claims)
      if patch.runtime_probe and patch.shows_on_jaxlib(jaxlib):
        outcome = _runtime_probe(repo, python, patch.runtime_probe)
        if outcome != "ok":
          step.failed_probes[patch.slug] = outcome
      if interop_test and target.has_interop_test:
        step.interop_passed, step.interop_test = _interop_test(repo, python)
      if speed and step.imports:
        # Against the tree the pull request is cut on, so that what its
        # dependencies cost (stated in theirs) is not counted again; a speed
        # target is a fraction of the base's own time.
        timed.append((step, patch,
                      base if patch.speed_target is not None else cut_on,
                      _git(repo, "rev-parse", "HEAD").strip()))
    if timed:
      quiet()
      _time_pull_requests(repo, timed, python, pathlib.Path(scratch))
  return results


def _claims_on(jaxlib: tuple[int, ...],
               patches: Iterable[series_patches.SeriesPatch]) -> list[str]:
  """The claims of ``patches`` that can hold with ``jaxlib``: not those
  that need a newer one (``series_patches.NEEDS_JAXLIB``)."""
  too_new = series_patches.needs_newer_jaxlib(jaxlib)
  return [claim for patch in patches for claim in patch.claims
          if claim not in too_new]


def _failed_after_series(repo: pathlib.Path, python: str,
                         left_undone: frozenset[str]) -> dict[str, str]:
  """Every case on the fully patched tree, but those left undone."""
  names = [case.name for case in conformance.CASES]
  failed = _failed_cases(repo, python, names)
  return {name: detail for name, detail in failed.items()
          if name not in left_undone}


def _run(repo: pathlib.Path, python: str, *args: str,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
  env = dict(os.environ, **(env or {}))
  # The target's jax/ first; jax_patch (for its conformance cases) after.
  env["PYTHONPATH"] = os.pathsep.join(
      [str(repo), str(pathlib.Path(__file__).absolute().parents[2])])
  env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
  env["JAX_PLATFORMS"] = "cpu"
  return subprocess.run([python, *args], cwd=repo, env=env, text=True,
                        capture_output=True, check=False)


def _jaxlib_version(repo: pathlib.Path, python: str) -> tuple[int, ...]:
  """The version of the jaxlib ``python`` imports."""
  done = _run(repo, python, "-c", "import jaxlib; print(jaxlib.__version__)")
  if done.returncode:
    raise SeriesError(f"{python} cannot import jaxlib: {done.stderr[-500:]}")
  return _version_tuple(done.stdout)


def _runtime_probe(repo: pathlib.Path, python: str, probe: str) -> str:
  """Runs a runtime probe in the tree: "ok", or how it failed.

  With jax_enable_x64 off, as the claims: the mode the series states its
  behaviour in (finished-at-return's dtype conversion happens only there).
  """
  done = _run(repo, python, "-c", probe, env={"JAX_ENABLE_X64": "0"})
  if done.returncode:
    return (done.stdout + done.stderr).strip()[-1000:] or "failed"
  return "ok"


def _write_probe(repo: pathlib.Path, patch: series_patches.SeriesPatch) -> str:
  """Writes ``patch``'s typing probe where the target's checker looks."""
  # Inside jax/, which JAX's pyrefly configuration includes; not committed.
  path = f"jax/_jax_patch_probe_{patch.slug.replace('-', '_')}.py"
  (repo / path).write_text(patch.typing_probe)
  return path


def _checker(repo: pathlib.Path, python: str) -> list[str]:
  """The target's own type checker, as ``python`` arguments; [] if none."""
  config = (repo / "pyproject.toml").read_text() if (
      repo / "pyproject.toml").is_file() else ""
  if "[tool.pyrefly]" in config:
    # Told the interpreter: by default it asks the first python on PATH.
    return ["-m", "pyrefly", "check", "--python-interpreter-path",
            _interpreter_path(python)]
  if "[tool.mypy]" in config:
    return ["-m", "mypy", "--config-file", "pyproject.toml"]
  return []


def _type_check(repo: pathlib.Path, python: str, checker: list[str],
                files: list[str]) -> str:
  """``checker`` (see :func:`_checker`) on ``files``: "ok", or its report."""
  if not files or not checker:
    return "ok"  # Nothing touched, or the target configures no checker.
  done = _run(repo, python, *checker, *files)
  if done.returncode:
    return (done.stdout + done.stderr).strip()[-2000:] or "failed"
  return "ok"


def _interpreter_path(python: str) -> str:
  return str(pathlib.Path(shutil.which(python) or python).absolute())


# The modules pre-commit's debug-statements hook refuses to see imported.
_DEBUGGERS = frozenset({"bpdb", "ipdb", "pdb", "pdbr", "pudb", "pydevd_pycharm",
                        "q", "rdb", "rpdb", "wdb"})


def _hook_problems(repo: pathlib.Path, files: list[str]) -> list[str]:
  """What JAX's pre-commit hooks (check-ast, end-of-file-fixer,
  trailing-whitespace, debug-statements) find in ``files``' Python."""
  problems = []
  for name in files:
    if not name.endswith((".py", ".pyi")) or not (repo / name).is_file():
      continue
    text = (repo / name).read_text()
    try:
      tree = ast.parse(text, name)
    except SyntaxError as err:
      problems.append(f"{name}:{err.lineno}: check-ast: {err.msg}")
      continue
    if name.endswith(".py"):
      if text and (not text.endswith("\n") or text.endswith("\n\n")):
        problems.append(f"{name}: end-of-file-fixer: the file must end in "
                        "one newline")
      problems.extend(
          f"{name}:{number}: trailing-whitespace"
          for number, line in enumerate(text.splitlines(), start=1)
          if line != line.rstrip())
      problems.extend(f"{name}:{getattr(node, 'lineno', '?')}: "
                      "debug-statements"
                      for node in ast.walk(tree) if _is_debugging(node))
  return problems


def _is_debugging(node: ast.AST) -> bool:
  if isinstance(node, ast.Import):
    return any(alias.name.split(".")[0] in _DEBUGGERS for alias in node.names)
  if isinstance(node, ast.ImportFrom):
    return (node.module or "").split(".")[0] in _DEBUGGERS
  return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id == "breakpoint")


def _pyrefly_errors(repo: pathlib.Path,
                    python: str) -> collections.Counter[tuple[str, ...]]:
  """pyrefly's errors over the whole tree, as JAX's pre-commit runs it.

  Keyed by file, kind and message, not line: a patch moves lines.

  Raises:
    SeriesError: pyrefly did not run.
  """
  # The scratch tree may sit in a hidden, ignored folder (nox's TMPDIR is
  # in .nox/), which pyrefly's default excludes and ignore files would skip
  # whole. The tree's own project-excludes still hold; the defaults dropped
  # (node_modules, venv, __pycache__) hold nothing of a git copy's.
  done = _run(repo, python, "-m", "pyrefly", "check",
              "--python-interpreter-path", _interpreter_path(python),
              "--use-ignore-files=false",
              "--disable-project-excludes-heuristics",
              "--output-format", "json")
  try:
    errors = json.loads(done.stdout)["errors"]
  except (ValueError, KeyError) as err:
    raise SeriesError(f"pyrefly did not run in {python}: "
                      f"{(done.stdout + done.stderr)[-1000:]}") from err
  return collections.Counter(
      (error["path"], error["name"], error["concise_description"])
      for error in errors)


def _ruff_findings(repo: pathlib.Path, python: str,
                   files: list[str]) -> collections.Counter[tuple[str, ...]]:
  """ruff's findings in ``files``, with the tree's own configuration.

  Keyed by file, rule and message, not line: a patch moves lines.

  Raises:
    SeriesError: ruff did not run.
  """
  python_files = [name for name in files
                  if name.endswith((".py", ".pyi")) and (repo / name).is_file()]
  if not python_files:
    return collections.Counter()
  done = _run(repo, python, "-m", "ruff", "check", "--no-cache",
              "--output-format", "json", *python_files)
  try:
    findings = json.loads(done.stdout)
  except ValueError as err:
    raise SeriesError(f"ruff did not run in {python}: "
                      f"{(done.stdout + done.stderr)[-1000:]}") from err
  return collections.Counter(
      (str(pathlib.Path(finding["filename"]).relative_to(repo.resolve())),
       finding["code"] or "", finding["message"])
      for finding in findings)


def _lint(repo: pathlib.Path, python: str, touched: list[str],
          ruff_before: collections.Counter[tuple[str, ...]],
          base_errors: collections.Counter[tuple[str, ...]] | None
          ) -> dict[str, str]:
  """JAX's pre-commit gates after a step: the failing ones, with why.

  A release's own tree need not pass the ruff pinned here, so only what the
  step adds counts, for ruff as for pyrefly.

  Args:
    touched: the files the step's patch changed.
    ruff_before: ruff's findings in ``touched`` before the step.
    base_errors: pyrefly's errors on the unpatched tree; ``None`` where the
      target configures no pyrefly.
  """
  failed = {}
  hooks = _hook_problems(repo, touched)
  if hooks:
    failed["pre-commit hooks"] = "\n".join(hooks)
  new_ruff = _ruff_findings(repo, python, touched) - ruff_before
  if new_ruff:
    failed["ruff"] = "\n".join(
        f"{path}: {code} {message}" for path, code, message in sorted(new_ruff))
  if base_errors is not None:
    new = _pyrefly_errors(repo, python) - base_errors
    if new:
      failed["pyrefly (whole tree)"] = "\n".join(
          f"{path}: [{kind}] {message}" for path, kind, message in sorted(new))
  return failed


# Its first line says where JAX came from, before any case can end the
# process; its last, the failed cases.
_CASES_SCRIPT = """
import json, sys
import jax, jax.dlpack, jax.numpy as jnp
print(json.dumps(jax.__file__), flush=True)
from jax_patch._src import conformance
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


def _imports_and_claims(repo: pathlib.Path, python: str,
                        names: list[str]) -> tuple[bool, dict[str, str]]:
  """Whether the tree's own JAX imports, and its claims ``names`` that
  fail (a claim that skips fails: it proves nothing), in one process."""
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
  done = _run(repo, python, "-c", _CASES_SCRIPT,
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


def _tests_pass_before(repo: pathlib.Path, python: str,
                       patch: series_patches.SeriesPatch) -> dict[str, str]:
  """Runs ``patch``'s new and changed JAX tests on ``repo`` without its
  change: those that do not fail there (they show nothing), with what
  they did. Leaves the tests in ``repo``'s work tree."""
  names = series_patches.added_tests(patch)
  if not names:
    return {}
  _apply(dataclasses.replace(patch, edits=()), repo, with_tests=True)
  report = repo / "new-tests.xml"
  _run(repo, python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
       f"--junitxml={report}", "-k", " or ".join(names),
       series_patches.INTEROP_TEST)
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


def _interop_test(repo: pathlib.Path, python: str) -> tuple[bool, str]:
  """Runs the target's DLPack test: whether it passed, and pytest's summary."""
  done = _run(repo, python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
              series_patches.INTEROP_TEST)
  summary = (done.stdout.strip().splitlines() or ["no output"])[-1]
  return done.returncode == 0, summary
