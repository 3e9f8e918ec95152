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

"""The merge queue: the pull requests merged in order, as maintainers take them.

:func:`merge_queue` merges each pull request's branch (its dependencies'
commits and its own) into a scratch copy of the target, one after another;
where a merge conflicts, the later pull request is rebased onto the queue,
as a maintainer would ask. What still conflicts once rebased is a conflict,
and the queue's tree must equal the stack's.
"""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess
import tempfile

from jax_patch._delivery import series_patches
from jax_patch._delivery import series_plan
from jax_patch._delivery import series_tree

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


def merge_queue(target: series_tree.Target) -> MergeQueue:
  """Merges the pull requests in order, as maintainers would take them.

  Each pull request's branch holds the branches of its dependencies (a
  stacked pull request) and its own commit; they merge one by one into a
  copy of the target. Pull requests that each add a CHANGELOG.md entry in
  the same place conflict there, and one cut on a dependency that was
  rebased conflicts with it: the later one is rebased onto the queue and
  merges. What still conflicts once rebased is a conflict. The result must
  equal the stack's.
  """
  patches = series_plan.patches_for(target)
  queue = MergeQueue()
  with tempfile.TemporaryDirectory() as scratch:
    repo = series_tree.scratch_repo(target, pathlib.Path(scratch))
    base = series_tree.git(repo, "rev-parse", "HEAD").strip()
    branches: dict[str, str] = {}
    for patch in patches:
      series_tree.git(repo, "checkout", "-q", "--detach", base)
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
        series_tree.commit(repo, (patch,), target,
                           series_tree.SCRATCH_COMMITTER)
        branches[patch.behaviour] = series_tree.git(
            repo, "rev-parse", "HEAD").strip()
    series_tree.git(repo, "checkout", "-q", "--detach", base)
    series_tree.commit(repo, patches, target, series_tree.SCRATCH_COMMITTER)
    stack = series_tree.git(repo, "rev-parse", "HEAD").strip()
    series_tree.git(repo, "checkout", "-q", "--detach", base)
    for patch in patches:
      if patch.behaviour not in branches:
        continue
      failed, rebased = _take(repo, branches[patch.behaviour], patch)
      if failed:
        queue.conflicts[patch.subject] = failed
      elif rebased:
        queue.rebased[patch.subject] = rebased
    if not queue.conflicts:
      differing = series_tree.git(repo, "diff", "--name-only", "HEAD",
                                  stack).split()
      if differing:
        queue.conflicts["the stack"] = differing
  return queue


def _take(repo: pathlib.Path, branch: str,
          patch: series_patches.SeriesPatch) -> tuple[list[str], list[str]]:
  """Merges ``branch`` into HEAD, or rebases its own commit where that fails.

  Where the merge conflicts (or leaves CHANGELOG.md other than ``patch``'s
  entry added to HEAD's), its own commit is rebased onto HEAD
  (:func:`_rebase_onto_head`).

  Returns:
    The files that still conflict (nothing is merged where there are
    some), and those the merge conflicted in where the rebase took it.
  """
  head = series_tree.git(repo, "rev-parse", "HEAD").strip()
  changelog = series_tree.git(repo, "show",
                              f"HEAD:{series_patches.CHANGELOG}")
  conflicting = _merge(repo, branch)
  if not conflicting:
    merged = (repo / series_patches.CHANGELOG).read_text()
    if merged == series_patches.with_changelog_entry(changelog, patch):
      return [], []
    # A clean merge can still garble it: two pull requests that each made
    # the same section leave it twice.
    series_tree.git(repo, "reset", "-q", "--hard", head)
    conflicting = [series_patches.CHANGELOG]
  failed = _rebase_onto_head(repo, branch, patch)
  return failed, [] if failed else conflicting


def _rebase_onto_head(repo: pathlib.Path, branch: str,
                      patch: series_patches.SeriesPatch) -> list[str]:
  """Picks ``branch``'s own commit onto HEAD, with ``patch``'s CHANGELOG.md.

  ``patch``'s entry is added to HEAD's CHANGELOG.md. Returns the files that
  conflict besides, picking nothing where there are some.
  """
  picked = subprocess.run(
      ["git", "-C", str(repo), "cherry-pick", "--no-commit", branch],
      env=series_tree.git_env(series_tree.SCRATCH_COMMITTER), text=True,
      capture_output=True, check=False)
  conflicting = series_tree.git(repo, "diff", "--name-only",
                                "--diff-filter=U").split()
  others = [path for path in conflicting
            if path != series_patches.CHANGELOG]
  if others or (picked.returncode and not conflicting):
    series_tree.git(repo, "reset", "-q", "--hard", "HEAD")
    return others or [picked.stderr.strip()]
  changelog = repo / series_patches.CHANGELOG
  changelog.write_text(series_patches.with_changelog_entry(
      series_tree.git(repo, "show", f"HEAD:{series_patches.CHANGELOG}"), patch))
  series_tree.git(repo, "add", series_patches.CHANGELOG)
  series_tree.git(repo, "commit", "-q", "--no-edit", "-C", branch)
  return []


def _merge(repo: pathlib.Path, commit: str) -> list[str]:
  """Merges ``commit`` into HEAD, returning the files that conflict.

  Where some conflict, nothing is merged.
  """
  merged = subprocess.run(
      ["git", "-C", str(repo), "merge", "-q", "--no-edit", commit],
      env=series_tree.git_env(series_tree.SCRATCH_COMMITTER), text=True,
      capture_output=True, check=False)
  if not merged.returncode:
    return []
  conflicting = series_tree.git(repo, "diff", "--name-only",
                                "--diff-filter=U").split()
  series_tree.git(repo, "merge", "--abort")
  return conflicting or [merged.stderr.strip()]
