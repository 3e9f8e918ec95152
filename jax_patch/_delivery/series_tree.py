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

"""The series' target, and the patch files applied to copies of it by git.

:func:`read_target` reads what the series needs to know of a JAX tree (a
git checkout or a release's sdist). :func:`scratch_repo` copies it into a
scratch git repository, where :func:`apply_pull_request` applies a pull
request's file with ``git am -3`` and places its CHANGELOG.md entry
(``series_changelog``), and :func:`apply_diff` applies a whole stack with
``git apply``; each reports what conflicts by patch, file and hunk.
:func:`run` runs Python on the copy's own ``jax/``.

A scratch copy holds the target's files as they are, so git's blob ids
match a patch's ``index`` lines wherever the target's file is the one the
patch was cut on: ``git am -3`` then needs no history of the target.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import os
import pathlib
import re
import shutil
import subprocess

from jax_patch._delivery import jax_tree
from jax_patch._delivery import series_changelog
from jax_patch._delivery import upstream_set

# The series is written for this jaxlib range: older JAX takes the runtime.
MIN_SUPPORTED_JAXLIB = (0, 11, 0)
# Who commits in the scratch repository.
SCRATCH_COMMITTER = ("jax-patch", "jax-patch@users.noreply.github.com")
_DATE = "Fri, 4 Dec 2026 00:00:00 +0000"  # Fixed: scratch commits reproduce.
_ALWAYS_COPIED = ("jax", "pyproject.toml")
_REJECTED = re.compile(r"^Rejected hunk #(\d+)\.$")
_APPLYING = re.compile(r"^Applying patch (\S+) with \d+ rejects?\.\.\.$")


class SeriesError(Exception):
  """The series cannot be applied to, or checked on, the target."""


@dataclasses.dataclass(frozen=True)
class Target:
  root: pathlib.Path
  jax_version: str
  min_jaxlib: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Conflict:
  """A hunk of a patch that does not apply to the tree as it stands."""
  patch: str
  file: str
  hunk: str  # Its header, "@@ -277,8 +278,11 @@ def from_dlpack(...".

  def __str__(self) -> str:
    return f"{self.patch}: {self.file}: {self.hunk}"


def version_tuple(version: str) -> tuple[int, ...]:
  return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def read_target(root: pathlib.Path) -> Target:
  """Reads the target's JAX version and minimum jaxlib from jax/version.py.

  Raises:
    SeriesError: ``root`` is no JAX tree (see ``jax_tree``), or supports a
      jaxlib older than the series is written for.
  """
  try:
    version = jax_tree.read_version(root)
    minimum = jax_tree.read_minimum_jaxlib(root)
  except jax_tree.JaxTreeError as err:
    raise SeriesError(str(err)) from err
  min_jaxlib = version_tuple(minimum)
  if min_jaxlib < MIN_SUPPORTED_JAXLIB:
    raise SeriesError(
        f"JAX {version} supports jaxlib {minimum}, older "
        f"than the series' {'.'.join(map(str, MIN_SUPPORTED_JAXLIB))}: "
        "vendor the patch there instead (jax-patch vendor).")
  return Target(root, version, min_jaxlib)


def git_env() -> dict[str, str]:
  name, email = SCRATCH_COMMITTER
  return dict(os.environ, GIT_AUTHOR_DATE=_DATE, GIT_COMMITTER_DATE=_DATE,
              GIT_AUTHOR_NAME=name, GIT_COMMITTER_NAME=name,
              GIT_AUTHOR_EMAIL=email, GIT_COMMITTER_EMAIL=email)


def git_run(repo: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
  return subprocess.run(["git", "-C", str(repo), *args], env=git_env(),
                        text=True, capture_output=True, check=False)


def git(repo: pathlib.Path, *args: str) -> str:
  done = git_run(repo, *args)
  if done.returncode:
    raise SeriesError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
  return done.stdout


def scratch_repo(target: Target, scratch: pathlib.Path,
                 files: Sequence[str]) -> pathlib.Path:
  """A git repository holding the target's ``jax/`` and ``files``, committed.

  ``files`` the target lacks (an sdist has no tests or CHANGELOG.md) are
  left out: :func:`absent` names them.
  """
  repo = scratch / "tree"
  repo.mkdir(parents=True)
  for name in dict.fromkeys((*_ALWAYS_COPIED, *files)):
    source = target.root / name
    if source.is_dir():
      shutil.copytree(source, repo / name,
                      ignore=shutil.ignore_patterns("__pycache__"))
    elif source.is_file():
      (repo / name).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(source, repo / name)
  git(repo, "init", "-q")
  git(repo, "add", "-A")
  git(repo, "commit", "-q", "-m", f"JAX {target.jax_version}")
  return repo


def absent(repo: pathlib.Path, files: Sequence[str]) -> list[str]:
  """Which of ``files`` the tree does not have, so patches leave them out."""
  return sorted(name for name in set(files) if not (repo / name).exists())


def holds_preimages(repo: pathlib.Path,
                    pull_requests: Sequence[upstream_set.PullRequest]) -> bool:
  """Whether ``repo``'s HEAD is the tree the pull requests were cut on.

  Read from the blob ids in the ``index`` lines of those that depend on
  nothing: each file such a pull request changes is, in ``repo``, the
  file it was cut on (files ``repo`` lacks aside).
  """
  for pull_request in pull_requests:
    if pull_request.depends_on:
      continue
    for file, before in _preimages(pull_request.text()):
      if not (repo / file).exists():
        continue
      blob = git(repo, "rev-parse", f"HEAD:{file}").strip()
      if not blob.startswith(before):
        return False
  return True


def _preimages(text: str) -> list[tuple[str, str]]:
  """Each file a patch changes, with the abbreviated blob id it was cut on."""
  found = []
  for file, lines in upstream_set.file_diffs(text).items():
    index = next((line for line in lines if line.startswith("index ")), "")
    before = index[len("index "):].split("..")[0]
    if before and set(before) != {"0"}:
      found.append((file, before))
  return found


# jaxlib's extension version, which each C++ change bumps on one line so
# that two changes claiming one number conflict there; merged in order, the
# later one's number goes in, as a maintainer resolves that conflict.
EXTENSION_VERSION_FILE = "jaxlib/xla_client.py"
_EXTENSION_VERSION_LINE = re.compile(r"^_version = (\d+)\b.*$", re.MULTILINE)


def extension_version_bump(patch_text: str) -> str | None:
  """The extension version line a patch sets, if it changes nothing else.

  That is ``_version = N  # ...`` where it is all the patch changes in
  ``EXTENSION_VERSION_FILE``; else ``None``.
  """
  lines = upstream_set.file_diffs(patch_text).get(EXTENSION_VERSION_FILE, [])
  changed = _changed_lines(lines)
  added = [line[1:] for line in changed if line.startswith("+")]
  if (len(changed) != 2 or len(added) != 1
      or not _EXTENSION_VERSION_LINE.fullmatch(added[0])):
    return None
  return added[0]


_HUNK_HEADER = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _changed_lines(file_diff: list[str]) -> list[str]:
  """The added and removed lines of one file's part of a diff.

  Each hunk is read for as many lines as its header counts, so that what
  follows the last one (``git format-patch``'s ``-- `` signature) is not.
  """
  changed: list[str] = []
  old = new = 0
  for line in file_diff:
    header = _HUNK_HEADER.match(line)
    if header:
      old, new = (int(count) if count is not None else 1
                  for count in header.groups())
    elif old or new:
      if line.startswith("-"):
        old -= 1
        changed.append(line)
      elif line.startswith("+"):
        new -= 1
        changed.append(line)
      else:
        old -= 1
        new -= 1
  return changed


def _set_extension_version(repo: pathlib.Path, line: str) -> None:
  """Puts ``line`` in place of the file's own, where its number is newer."""
  path = repo / EXTENSION_VERSION_FILE
  text = path.read_text()
  current = _EXTENSION_VERSION_LINE.search(text)
  new = _EXTENSION_VERSION_LINE.fullmatch(line)
  assert current is not None and new is not None
  if int(new.group(1)) > int(current.group(1)):
    path.write_text(text[:current.start()] + line + text[current.end():])


def apply_pull_request(repo: pathlib.Path, pull_request: upstream_set.PullRequest,
                       left_out: Sequence[str] = (),
                       three_way: bool = True) -> list[Conflict]:
  """Commits a pull request's file on ``repo``'s HEAD, as a maintainer would.

  ``git am`` (``-3`` with ``three_way``) without its CHANGELOG.md hunk and
  ``left_out``, then its CHANGELOG.md entry placed last in its section. A
  bump of jaxlib's extension version alone goes in the same way: the newer
  number stays (``extension_version_bump``).

  Returns:
    What did not apply (nothing was committed then), or ``[]``.
  """
  excluded = [series_changelog.CHANGELOG, *left_out]
  version_line = extension_version_bump(pull_request.text())
  placed_version = (version_line is not None
                    and EXTENSION_VERSION_FILE not in left_out
                    and (repo / EXTENSION_VERSION_FILE).is_file())
  if placed_version:
    excluded.append(EXTENSION_VERSION_FILE)
  flags = [f"--exclude={name}" for name in excluded]
  done = git_run(repo, "am", "-q", *(["-3"] if three_way else []), *flags,
                 str(pull_request.patch))
  if done.returncode:
    git_run(repo, "am", "--abort")
    return _conflicts(repo, pull_request.patch, flags)
  if placed_version:
    assert version_line is not None
    _set_extension_version(repo, version_line)
    git(repo, "add", EXTENSION_VERSION_FILE)
    git(repo, "commit", "-q", "--amend", "--no-edit", "--allow-empty")
  changelog = repo / series_changelog.CHANGELOG
  if changelog.is_file() and series_changelog.CHANGELOG not in left_out:
    try:
      entry = series_changelog.entry_of(pull_request.text())
      if entry is not None:
        changelog.write_text(series_changelog.place(changelog.read_text(),
                                                    entry))
    except series_changelog.ChangelogError as err:
      # Its entry has no place in this tree's file: a conflict there.
      git(repo, "reset", "-q", "--hard", "HEAD~1")
      hunks = _hunk_headers(pull_request.text()).get(
          series_changelog.CHANGELOG, ["?"])
      return [Conflict(pull_request.patch.name, series_changelog.CHANGELOG,
                       f"{hunks[0]} ({err})")]
    git(repo, "add", series_changelog.CHANGELOG)
    git(repo, "commit", "-q", "--amend", "--no-edit", "--allow-empty")
  return []


def apply_plain(repo: pathlib.Path, pull_request: upstream_set.PullRequest
                ) -> list[Conflict]:
  """Plain ``git am`` of the whole file, CHANGELOG.md hunk included.

  How a pull request applies to the tree it is cut on.
  """
  done = git_run(repo, "am", "-q", str(pull_request.patch))
  if done.returncode:
    git_run(repo, "am", "--abort")
    return _conflicts(repo, pull_request.patch, [])
  return []


def apply_diff(repo: pathlib.Path, diff: pathlib.Path,
               left_out: Sequence[str], message: str) -> list[Conflict]:
  """Commits a whole diff (a stack) on ``repo``'s HEAD, leaving out files."""
  flags = [f"--exclude={name}" for name in left_out]
  done = git_run(repo, "apply", "--index", *flags, str(diff))
  if done.returncode:
    return _conflicts(repo, diff, flags)
  git(repo, "commit", "-q", "--allow-empty", "-m", message)
  return []


def _conflicts(repo: pathlib.Path, patch: pathlib.Path,
               flags: list[str]) -> list[Conflict]:
  """Each hunk of ``patch`` that does not apply to ``repo``'s work tree.

  Found with ``git apply --reject`` (which applies what it can), then the
  work tree is reset.
  """
  done = git_run(repo, "apply", "--reject", *flags, str(patch))
  git(repo, "reset", "-q", "--hard")
  git(repo, "clean", "-qfd")
  headers = _hunk_headers(patch.read_text())
  conflicts, file = [], ""
  for line in done.stderr.splitlines():
    applying = _APPLYING.match(line)
    if applying:
      file = applying.group(1)
    rejected = _REJECTED.match(line)
    if rejected:
      index = int(rejected.group(1)) - 1
      hunks = headers.get(file, [])
      conflicts.append(Conflict(patch.name, file, hunks[index]
                                if index < len(hunks) else "?"))
  if not conflicts and done.returncode:
    conflicts.append(Conflict(patch.name, "?", done.stderr.strip()[-300:]))
  return conflicts


def _hunk_headers(text: str) -> dict[str, list[str]]:
  return {file: [line for line in lines if line.startswith("@@ ")]
          for file, lines in upstream_set.file_diffs(text).items()}


def run(repo: pathlib.Path, python: str, *args: str, cpu_devices: int = 1,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
  """Runs ``python`` in ``repo`` on its own ``jax/``, on the CPU.

  With ``XLA_FLAGS`` unset, as JAX's CI runs its tests, unless
  ``cpu_devices`` asks for more than one CPU device (jax_patch's
  conformance cases use several).
  """
  env = dict(os.environ, **(env or {}))
  # The target's jax/ first; jax_patch (for its conformance cases) after.
  env["PYTHONPATH"] = os.pathsep.join(
      [str(repo), str(pathlib.Path(__file__).absolute().parents[2])])
  env.pop("XLA_FLAGS", None)
  if cpu_devices > 1:
    env["XLA_FLAGS"] = (
        f"--xla_force_host_platform_device_count={cpu_devices}")
  env["JAX_PLATFORMS"] = "cpu"
  return subprocess.run([python, *args], cwd=repo, env=env, text=True,
                        capture_output=True, check=False)

