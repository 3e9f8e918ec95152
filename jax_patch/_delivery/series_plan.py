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

"""Which pull requests and bug reports a target gets, and their numbers.

A target gets the forms of ``series_patches.SERIES`` its jaxlib range needs
(:func:`patches_for`), less those it holds already (:func:`merged_in`), and
the jaxlib defects reported upstream that affect its range
(:func:`reports_for`). Each keeps the number of its place in the whole
queue on every target (:func:`pull_request_number`,
:func:`report_number`); :func:`left_out` says why a number is skipped.
"""

from __future__ import annotations

from jax_patch._delivery import series_patches
from jax_patch._delivery import series_reports
from jax_patch._delivery import series_tree

def patches_for(
    target: series_tree.Target) -> tuple[series_patches.SeriesPatch, ...]:
  """The patches ``target``'s jaxlib range and import path need.

  Less those it has merged (:func:`merged_in`).
  """
  return tuple(patch for patch in _needed(target)
               if not _is_merged(patch, target))


def merged_in(target: series_tree.Target) -> list[str]:
  """The subjects of the patches ``target`` already holds, as merged.

  As pull requests merge one by one, the series is rewritten against the
  new main: a merged one drops out, and those that went after it apply
  to main by themselves.
  """
  return [patch.subject for patch in _needed(target)
          if _is_merged(patch, target)]


def _needed(
    target: series_tree.Target) -> tuple[series_patches.SeriesPatch, ...]:
  return series_patches.for_target(target.min_jaxlib, target.max_jaxlib)


def _is_merged(patch: series_patches.SeriesPatch,
               target: series_tree.Target) -> bool:
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
  queue table of docs/upstream.md and a series written for any target, or
  written again after some pull requests merged, name each one alike.
  """
  return _BEHAVIOURS.index(patch.behaviour) + 1


def left_out(target: series_tree.Target) -> list[tuple[int, str, str]]:
  """The pull requests ``target`` does not get, as ``(number, subject, why)``.

  In queue order: those it holds already (:func:`merged_in`), and those no
  form of which its jaxlib range gets: not needed there, or a jaxlib
  workaround whose defect every jaxlib of the range has, which gets the
  defect's report instead (``SeriesPatch.stands_in_for``).
  """
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


def dependency_numbers(target: series_tree.Target) -> dict[int, list[int]]:
  """Each pull request's number: the numbers of those it goes on after."""
  patches = patches_for(target)
  return {
      pull_request_number(patch): [
          pull_request_number(dependency) for dependency in
          series_patches.with_dependencies(patch, patches)[:-1]]
      for patch in patches}


def reports_for(
    target: series_tree.Target) -> tuple[series_reports.JaxlibReport, ...]:
  """The jaxlib defects reported upstream that affect ``target``'s jaxlibs."""
  return series_reports.for_range(target.min_jaxlib, target.max_jaxlib)


def report_number(report: series_reports.JaxlibReport) -> int:
  """A report's number: after every pull request's, the same on every target.

  As :func:`pull_request_number` is.
  """
  return len(_BEHAVIOURS) + 1 + series_reports.REPORTS.index(report)
