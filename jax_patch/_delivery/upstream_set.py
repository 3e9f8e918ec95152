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

"""The upstream patch set as the repository holds it (``upstream/``).

The pull requests are ``git format-patch`` files, in the order
``queue.json`` gives; ``stack.patch`` is all of them merged, one diff
against the base they are cut on (upstream/README.md); ``left-undone.json``
names the conformance cases the queue does not make pass, each with why;
and ``reports/`` holds what goes to JAX's issue tracker first, with
reproducers. The series reads them; nothing here writes JAX code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import tempfile

INTEROP_TEST = "tests/array_interoperability_test.py"
_QUEUE = "queue.json"
_STACK = "stack.patch"
_LEFT_UNDONE = "left-undone.json"
_ADDED_TEST = re.compile(r"^\+  def (test\w+)\(", re.MULTILINE)
_FILE_HEADER = re.compile(r"^diff --git a/(\S+) b/")


class PatchSetError(Exception):
  """The patch set's files are missing or do not hold together."""


@dataclasses.dataclass(frozen=True)
class PullRequest:
  """One pull request: its patch file and what it goes on after."""
  number: int
  patch: pathlib.Path
  title: str
  depends_on: tuple[int, ...]

  def text(self) -> str:
    return self.patch.read_text()


@dataclasses.dataclass(frozen=True)
class PatchSet:
  """``upstream/``, read (:func:`read`)."""
  root: pathlib.Path
  pull_requests: tuple[PullRequest, ...]
  stack: pathlib.Path
  # Conformance case name -> why the queue leaves it failing.
  left_undone: dict[str, str]
  reproducers: tuple[pathlib.Path, ...]

  def by_number(self, number: int) -> PullRequest:
    return next(pr for pr in self.pull_requests if pr.number == number)


def default_root() -> pathlib.Path:
  """``upstream/`` beside the ``jax_patch`` package in a checkout."""
  return pathlib.Path(__file__).absolute().parents[2] / "upstream"


def read(root: pathlib.Path) -> PatchSet:
  """Reads the patch set in ``root``.

  Raises:
    PatchSetError: a file is missing, or the queue names a patch that is
      not there or a dependency that does not come before it.
  """
  try:
    queue = json.loads((root / _QUEUE).read_text())
    left_undone = json.loads((root / _LEFT_UNDONE).read_text())
  except (OSError, ValueError) as err:
    raise PatchSetError(f"{root}: not a patch set ({err})") from err
  by_name: dict[str, int] = {}
  pull_requests = []
  for entry in queue:
    name = entry["patch"]
    missing = [dep for dep in entry["depends_on"] if dep not in by_name]
    if not (root / name).is_file() or missing:
      raise PatchSetError(
          f"{root / _QUEUE}: {name} is missing or goes before "
          f"{', '.join(missing)}")
    number = int(name[:4])
    by_name[name] = number
    pull_requests.append(PullRequest(
        number, root / name, entry["title"],
        tuple(by_name[dep] for dep in entry["depends_on"])))
  stack = root / _STACK
  if not stack.is_file():
    raise PatchSetError(f"{stack} is missing")
  return PatchSet(root, tuple(pull_requests), stack, dict(left_undone),
                  tuple(sorted((root / "reports").glob("*.reproducer.py"))))


def touched_files(patch: pathlib.Path) -> list[str]:
  """The files a patch or diff changes, as git reads it.

  Raises:
    PatchSetError: git cannot read it.
  """
  done = git_outside_any_repository("apply", "--numstat",
                                    str(pathlib.Path(patch).resolve()))
  if done.returncode:
    raise PatchSetError(f"{patch}: {done.stderr.strip()}")
  return [line.split("\t")[2] for line in done.stdout.splitlines()]


def git_outside_any_repository(
    *args: str) -> subprocess.CompletedProcess[str]:
  """Runs ``git ARGS`` where it finds no repository.

  Inside a repository's subfolder ``git apply`` leaves out the paths outside
  that folder, and this checkout may lie inside someone's repository (a
  monorepo, a vendored subfolder): git runs in an empty folder instead, and
  looks no further up than it.
  """
  with tempfile.TemporaryDirectory() as empty:
    return subprocess.run(
        ["git", *args], capture_output=True, text=True, check=False,
        cwd=empty, env={**os.environ,
                        "GIT_CEILING_DIRECTORIES": str(pathlib.Path(empty).parent)})


def file_diffs(patch_text: str) -> dict[str, list[str]]:
  """Each file's part of a patch or diff, by path: its lines, header first."""
  parts: dict[str, list[str]] = {}
  lines: list[str] | None = None
  for line in patch_text.splitlines():
    header = _FILE_HEADER.match(line)
    if header:
      lines = parts.setdefault(header.group(1), [])
    if lines is not None:
      lines.append(line)
  return parts


def added_tests(patch_text: str) -> list[str]:
  """The JAX test methods a patch adds to JAX's DLPack test, by name."""
  section = "\n".join(file_diffs(patch_text).get(INTEROP_TEST, []))
  return sorted(set(_ADDED_TEST.findall(section)))
