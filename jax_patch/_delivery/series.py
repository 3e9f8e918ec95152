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

"""``jax-patch series``: applies the patch files to a JAX tree and checks them.

The patch set is files (``upstream/``, read by ``upstream_set``); git
applies them (``series_tree``) to a scratch copy of the target, never to
the target itself, and nothing here writes JAX code. Each pull request is
a step of the stack, ``git am -3`` with its CHANGELOG.md entry placed as a
maintainer merges it; on a tree that holds what the queue was cut on (the
base upstream/README.md names, or a release's sdist with that ``jax/``)
each also applies as a reviewer takes it; elsewhere the first that
conflicts is reported by file and hunk.

After each step ``series_check`` checks the tree; then the merge queue,
each pull request alone (``--alone``), the conformance cases, the
reports' reproducers and (``--speed``) the stack's speed. The last line is
``N passed, N failed``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
import contextlib
import functools
import pathlib
import tempfile
import textwrap

from jax_patch._delivery import series_check
from jax_patch._delivery import series_gates
from jax_patch._delivery import series_speed
from jax_patch._delivery import series_tree
from jax_patch._delivery import upstream_set


def check(root: pathlib.Path, patch_set: upstream_set.PatchSet, python: str,
          interop_test: bool = False, alone: bool = False,
          speed: bool = False, gates: bool = True,
          one_step: bool = False) -> int:
  """Applies ``patch_set`` to a scratch copy of ``root`` and checks it.

  Args:
    root: the JAX tree: a checkout or a release's sdist.
    patch_set: the files (``upstream_set.read``).
    python: the interpreter to check with, with a jaxlib ``root`` accepts.
    interop_test: run the tree's DLPack test after each step.
    alone: also check each pull request on the target and its
      dependencies only (a tree with JAX's tests).
    speed: also time the stack against the target.
    gates: run JAX's pre-commit gates after each step.
    one_step: check the tree once, after the whole stack, rather than after
      each step (JAX's gates take a minute a step): each pull request still
      goes on as a reviewer takes it and as a step of the stack.

  Returns:
    0 when every check passes, 1 otherwise.

  Raises:
    series_tree.SeriesError: ``root`` is no JAX tree the series is for, or
      ``python`` lacks the gates' tools.
  """
  if gates:
    missing = series_gates.missing_gate_tools(python)
    if missing:
      raise series_tree.SeriesError(
          f"--python {python} lacks {' and '.join(missing)}, which JAX's "
          "pre-commit gates run: install them there with pip install "
          f"'jax-patch[{series_gates.GATE_EXTRA}]' (or pass --runtime-only)")
  target = series_tree.read_target(root)
  touched = sorted({name for pr in patch_set.pull_requests
                    for name in upstream_set.touched_files(pr.patch)})
  checks: list[series_check.Check] = []
  with tempfile.TemporaryDirectory() as scratch_dir:
    scratch = pathlib.Path(scratch_dir)
    repo = series_tree.scratch_repo(target, scratch, touched)
    left_out = series_tree.absent(repo, touched)
    if left_out:
      print(f"left out, as JAX {target.jax_version}'s tree has no such "
            f"files: {', '.join(left_out)}")
    base = series_tree.git(repo, "rev-parse", "HEAD").strip()
    with _worktree(repo, scratch / "base", base) as unpatched:
      for reproducer in patch_set.reproducers:
        checks.append(_said(series_check.check_reproducer(
            reproducer, unpatched, python)))
    base_errors = series_check.base_findings(repo, python, gates)
    applied_all = True
    on_base = series_tree.holds_preimages(repo, patch_set.pull_requests)
    if not on_base:
      print(f"JAX {target.jax_version}'s tree is not the one the queue was "
            "cut on: each pull request goes on with a three-way merge")
    stacked = [name for name in touched if name not in left_out]
    ruff_before = (series_gates.ruff_findings(repo, python, stacked)
                   if gates and one_step else series_check.Findings())
    for pr in patch_set.pull_requests:
      with _worktree(repo, scratch / f"pr-{pr.number:04d}", base) as tree:
        # Cut as a reviewer takes it first: its commits also hold the
        # blobs the stack's three-way apply needs.
        conflicts = series_check.apply_alone(pr, patch_set, tree, left_out,
                                             on_base)
        apply = functools.partial(series_tree.apply_pull_request, repo, pr,
                                  left_out)
        if not conflicts and one_step:
          conflicts = apply()
          checks.append(_said(series_check.Check(
              f"step {pr.number:04d}", not conflicts,
              f"{pr.title}: applies as a reviewer takes it and to the stack"
              if not conflicts else f"{pr.title}: does not apply to the stack",
              "\n".join(map(str, conflicts)))))
        elif not conflicts:
          conflicts = _step(f"step {pr.number:04d}", pr.title, pr.patch,
                            apply, repo, python, left_out, base_errors, gates,
                            interop_test, checks)
        else:
          checks.append(_said(series_check.Check(
              f"pull request {pr.number:04d}", False,
              f"{pr.title}: does not apply on its dependencies to JAX "
              f"{target.jax_version}", "\n".join(map(str, conflicts)))))
        if conflicts:
          applied_all = False
          break
        if alone and not left_out:
          checks.append(_said(series_check.check_alone(pr, tree, python)))
    if not applied_all:
      return _summary(checks)
    if one_step:
      checks.append(_said(series_check.check_step(
          "the whole stack", f"{len(patch_set.pull_requests)} pull requests",
          repo, python, stacked, ruff_before, base_errors, gates,
          interop_test)))
    checks.append(_said(series_check.check_merge_queue(
        repo, base, patch_set, left_out)))
    checks.append(_said(series_check.check_conformance(
        repo, python, patch_set.left_undone)))
    if speed:
      with _worktree(repo, scratch / "unpatched", base) as unpatched:
        checks.append(_said(_stack_speed(unpatched, repo, python)))
  return _summary(checks)


def _step(name: str, title: str, patch: pathlib.Path,
          apply: Callable[[], list[series_tree.Conflict]],
          repo: pathlib.Path, python: str, left_out: list[str],
          base_errors: series_check.Findings | None, gates: bool,
          interop_test: bool, checks: list[series_check.Check]
          ) -> list[series_tree.Conflict]:
  """Applies one step of the stack and checks the tree after it."""
  changed = [name_ for name_ in upstream_set.touched_files(patch)
             if name_ not in left_out]
  ruff_before = (series_gates.ruff_findings(repo, python, changed)
                 if gates else series_check.Findings())
  conflicts = apply()
  if conflicts:
    checks.append(_said(series_check.Check(
        name, False, f"{title}: does not apply to the stack",
        "\n".join(map(str, conflicts)))))
    return conflicts
  checks.append(_said(series_check.check_step(
      name, title, repo, python, changed, ruff_before, base_errors, gates,
      interop_test)))
  return []


@contextlib.contextmanager
def _worktree(repo: pathlib.Path, path: pathlib.Path,
              commit: str) -> Iterator[pathlib.Path]:
  series_tree.git(repo, "worktree", "add", "-q", "--detach", str(path),
                  commit)
  try:
    yield path
  finally:
    series_tree.git(repo, "worktree", "remove", "--force", str(path))


def _stack_speed(base: pathlib.Path, repo: pathlib.Path,
                 python: str) -> series_check.Check:
  whole = series_speed.stack_speed(base, repo, python)
  readings = ", ".join(
      f"{name} {whole.speed['base ' + name]:.1f} -> {whole.speed[name]:.1f} "
      f"us ({whole.ratio(name):.2f}x, target {target}x)"
      for name, target in series_speed.STACK_SPEED_TARGETS.items())
  return series_check.Check("stack speed", not whole.slow,
                            f"against the target: {readings}", whole.slow)


def _said(result: series_check.Check) -> series_check.Check:
  print(f"{result.name}: {'ok' if result.ok else 'FAILED'}: {result.summary}",
        flush=True)
  if result.detail:
    print(textwrap.indent(result.detail, "    "), flush=True)
  return result


def _summary(checks: list[series_check.Check]) -> int:
  failed = sum(not each.ok for each in checks)
  print(f"{len(checks) - failed} passed, {failed} failed")
  return 1 if failed else 0
