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

"""The series' target: the JAX tree, and the scratch copies it is checked in.

:func:`read_target` reads what the series needs to know of a JAX tree (a
git checkout or a release's sdist). :func:`scratch_repo` copies it into a
scratch git repository, where :func:`apply` and :func:`commit` make the
pull requests' commits (as :func:`author_from` names their author) and
:func:`run` runs Python on the tree's own ``jax/``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess

from jax_patch._delivery import jax_tree
from jax_patch._delivery import series_patches

# The series is written for this jaxlib range: every gate jax_patch keeps
# for older jaxlib is constant over it.
MIN_SUPPORTED_JAXLIB = (0, 11, 0)

_DATE = "Fri, 4 Dec 2026 00:00:00 +0000"  # Fixed: the output is reproducible.
_AUTHOR = re.compile(r"^\s*([^<>]+?)\s*<([^<>\s]+@[^<>\s]+)>\s*$")
# Who commits in the scratch repository; each patch's author is the user.
SCRATCH_COMMITTER = ("jax-patch", "jax-patch@users.noreply.github.com")
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
  # requests' entries then go against a stand-in (:func:`scratch_repo`).
  has_changelog: bool


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
  return Target(root, version, min_jaxlib, version_tuple(version),
                (root / series_patches.INTEROP_TEST).is_file(),
                (root / series_patches.CHANGELOG).is_file())


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


def git_env(who: tuple[str, str]) -> dict[str, str]:
  return dict(os.environ, GIT_AUTHOR_DATE=_DATE, GIT_COMMITTER_DATE=_DATE,
              GIT_AUTHOR_NAME=who[0], GIT_COMMITTER_NAME=who[0],
              GIT_AUTHOR_EMAIL=who[1], GIT_COMMITTER_EMAIL=who[1])


def git(repo: pathlib.Path, *args: str,
        who: tuple[str, str] = SCRATCH_COMMITTER) -> str:
  done = subprocess.run(["git", "-C", str(repo), *args], env=git_env(who),
                        text=True, capture_output=True, check=False)
  if done.returncode:
    raise SeriesError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
  return done.stdout


def changelog_stand_in(target: Target) -> str:
  """What a target without CHANGELOG.md gets in its place.

  JAX's headings for the unreleased changes and the target's release,
  empty, so that the pull requests' entries and their conflicts in a merge
  queue are made and checked as on JAX's own file.
  """
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


def scratch_repo(target: Target, scratch: pathlib.Path) -> pathlib.Path:
  """A git repository holding a copy of the target's files, committed.

  With a stand-in CHANGELOG.md where the target has none.
  """
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
  git(repo, "init", "-q")
  git(repo, "add", "-A")
  git(repo, "commit", "-q", "-m", f"JAX {target.jax_version}")
  return repo


def apply(patch: series_patches.SeriesPatch, repo: pathlib.Path,
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


def commit(repo: pathlib.Path, patches: tuple[series_patches.SeriesPatch, ...],
           target: Target, author: tuple[str, str]) -> None:
  for patch in patches:
    apply(patch, repo, target.has_interop_test)
    changelog = repo / series_patches.CHANGELOG
    changelog.write_text(series_patches.with_changelog_entry(
        changelog.read_text(), patch))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{patch.subject}\n\n{patch.body}",
        who=author)


def run(repo: pathlib.Path, python: str, *args: str,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
  env = dict(os.environ, **(env or {}))
  # The target's jax/ first; jax_patch (for its conformance cases) after.
  env["PYTHONPATH"] = os.pathsep.join(
      [str(repo), str(pathlib.Path(__file__).absolute().parents[2])])
  env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
  env["JAX_PLATFORMS"] = "cpu"
  return subprocess.run([python, *args], cwd=repo, env=env, text=True,
                        capture_output=True, check=False)


def jaxlib_version(repo: pathlib.Path, python: str) -> tuple[int, ...]:
  """The version of the jaxlib ``python`` imports."""
  done = run(repo, python, "-c", "import jaxlib; print(jaxlib.__version__)")
  if done.returncode:
    raise SeriesError(f"{python} cannot import jaxlib: {done.stderr[-500:]}")
  return version_tuple(done.stdout)
