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

"""Writes the series' files: the pull requests, their queue, the reports.

:func:`write_series` makes each pull request's commit in a scratch copy of
the target and writes it out with ``git format-patch``, with its
description beside it, the order to send them in (:data:`QUEUE`), the same
commits made one on another (``stack/``), and the jaxlib defects' reports
with their reproducers.
"""

from __future__ import annotations

import json
import pathlib
import tempfile
from typing import Any

from jax_patch._delivery import series_patches
from jax_patch._delivery import series_plan
from jax_patch._delivery import series_reports
from jax_patch._delivery import series_tree

# Beside the pull requests: the order to send them in, each with the file
# names of those it goes on after.
QUEUE = "queue.json"


def read_queue(out: pathlib.Path) -> list[dict[str, Any]]:
  """The queue :func:`write_series` wrote into ``out``.

  In the order to send them, ``{"patch": file name, "title": subject,
  "depends_on": [file names]}`` for each pull request.
  """
  queue: list[dict[str, Any]] = json.loads((out / QUEUE).read_text())
  return queue


def write_series(target: series_tree.Target, out: pathlib.Path,
                 author: tuple[str, str]) -> list[pathlib.Path]:
  """Writes the pull requests for ``target``, as ``series_tree`` reads it.

  Each ``out/NNNN-name.patch`` is one pull request's commit, numbered as
  ``series_plan.pull_request_number`` says (the same on every target), made
  against the target and the commits of the patch's declared dependencies only
  (``series_patches.with_dependencies``): one that needs none applies to the
  target by itself. Beside it go ``NNNN-name.description.md``, the pull
  request's description (naming, by title, the pull requests it goes on
  after); ``queue.json`` lists them in order, each with its dependencies'
  files. Each commit adds its entry to JAX's CHANGELOG.md, under
  Unreleased (to a stand-in where the target has no CHANGELOG.md:
  ``series_tree.changelog_stand_in``).
  ``out/stack/`` holds the same commits made one on another, in order: what
  the target becomes as they merge (:func:`stack_files`). The jaxlib
  defects reported upstream that affect the target's jaxlib range go beside
  them as ``NNNN-slug.issue.md``, each with its reproducer.

  Args:
    target: the JAX tree.
    out: where the files go.
    author: ``(name, email)`` of the patches' author and committer
      (``series_tree.author_from``).

  Returns:
    The pull requests' patch files, in the recommended order.

  Raises:
    series_tree.SeriesError: a patch's text is not in the target.
  """
  out.mkdir(parents=True, exist_ok=True)
  # A series written before, maybe for another target, must not mix in.
  for pattern in ("*.patch", "*.description.md", "*.changelog.md",
                  "*.issue.md", "*.reproducer.py", "stack/*.patch"):
    for stale in out.glob(pattern):
      stale.unlink()
  patches = series_plan.patches_for(target)
  pull_requests = []
  with tempfile.TemporaryDirectory() as scratch:
    repo = series_tree.scratch_repo(target, pathlib.Path(scratch))
    base = series_tree.git(repo, "rev-parse", "HEAD").strip()
    for patch in patches:
      series_tree.git(repo, "checkout", "-q", "--detach", base)
      series_tree.commit(repo,
                         series_patches.with_dependencies(patch, patches),
                         target, author)
      pull_requests.extend(_format_patches(
          repo, "HEAD~1", out, series_plan.pull_request_number(patch)))
    series_tree.git(repo, "checkout", "-q", "--detach", base)
    for patch in patches:
      # One at a time, so that each keeps its pull request's number.
      series_tree.commit(repo, (patch,), target, author)
      _format_patches(repo, "HEAD~1", out / "stack",
                      series_plan.pull_request_number(patch))
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
  for report in series_plan.reports_for(target):
    stem = f"{series_plan.report_number(report):04d}-{report.slug}"
    (out / f"{stem}.issue.md").write_text(
        series_reports.issue_text(report, target.jax_version))
    (out / f"{stem}.reproducer.py").write_text(report.reproducer)
  return pull_requests


def report_files(out: pathlib.Path) -> list[pathlib.Path]:
  """The bug reports :func:`write_series` wrote into ``out``."""
  return sorted(out.glob("*.issue.md"))


def stack_files(out: pathlib.Path) -> list[pathlib.Path]:
  """The whole series as :func:`write_series` wrote it into ``out``."""
  return sorted((out / "stack").glob("*.patch"))


def _format_patches(repo: pathlib.Path, since: str, out: pathlib.Path,
                    start: int) -> list[pathlib.Path]:
  """``git format-patch`` of ``since..HEAD`` into ``out``; the files, in order.

  Numbered from ``start``.
  """
  written = series_tree.git(repo, "format-patch", "--no-signature",
                            "--zero-commit", "--no-numbered",
                            "--start-number", str(start), "-o",
                            str(out.absolute()), f"{since}..HEAD")
  return [pathlib.Path(line) for line in written.splitlines()]
