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

"""Times JAX's import and export of small arrays with the pull requests.

With ``--speed``, each pull request is timed against the tree it is cut on
(:func:`time_pull_requests`: within :data:`SPEED_TOLERANCE`, or its own
speed target), and the whole stack against the target
(:func:`stack_speed`: :data:`STACK_SPEED_TARGETS`); back to back, every
tree in each round, each keeping its fastest (:func:`_time_trees`).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
import dataclasses
import json
import pathlib
import sys
import tempfile
from typing import Protocol

from jax_patch._delivery import series_patches
from jax_patch._delivery import series_plan
from jax_patch._delivery import series_tree

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


class Timed(Protocol):
  """A check's result that :func:`time_pull_requests` fills in.

  ``series_check.StepResult``, named by what is set here: the check needs
  the timing, not the timing the check.
  """
  speed: dict[str, float]
  slow: str


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
      done = series_tree.run(tree, python, "-c", _SPEED_SCRIPT)
      if done.returncode:
        raise series_tree.SeriesError(f"the speed script failed in {tree}: "
                          f"{done.stderr[-1000:]}")
      for name, value in json.loads(done.stdout.splitlines()[-1]).items():
        tree_runs[name].append(value)
  return [{name: min(values) for name, values in tree_runs.items()}
          for tree_runs in runs]


def _speed(base: pathlib.Path, repo: pathlib.Path,
           python: str) -> dict[str, float]:
  """:func:`_time_trees` of ``base`` and ``repo``, in one dictionary.

  ``"import"`` and ``"export"`` on ``repo``, ``"base import"`` and ``"base
  export"`` on ``base``.
  """
  base_times, times = _time_trees([base, repo], python)
  return dict(times, **{f"base {name}": value
                        for name, value in base_times.items()})


def _timed(patch: series_patches.SeriesPatch, speed: dict[str, float],
           base: pathlib.Path, repo: pathlib.Path,
           python: str) -> tuple[dict[str, float], str]:
  """A reading of ``base`` and ``repo``, and why it is too slow if so.

  ``speed`` is the reading, in :func:`_speed`'s names.

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


def time_pull_requests(
    repo: pathlib.Path, timed: Sequence[tuple[Timed,
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
      tree = series_tree.git(repo, "rev-parse",
                             f"{commit}^{{tree}}").strip()
      if tree not in places:
        places[tree] = scratch / f"timed-{len(places)}"
        series_tree.git(repo, "worktree", "add", "-q", "--detach",
                        str(places[tree]), commit)
  keys = {commit: series_tree.git(repo, "rev-parse",
                                  f"{commit}^{{tree}}").strip()
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


def stack_speed(target: series_tree.Target,
                python: str = sys.executable) -> StackSpeed:
  """Times the target with every pull request merged against the target.

  Back to back (:func:`_time_trees`), and checks the stack against
  :data:`STACK_SPEED_TARGETS`; a reading over a target is measured again,
  and each tree keeps its fastest.
  """
  with tempfile.TemporaryDirectory() as scratch:
    repo = series_tree.scratch_repo(target, pathlib.Path(scratch))
    base = pathlib.Path(scratch) / "base"
    series_tree.git(repo, "worktree", "add", "-q", "--detach", str(base),
                    "HEAD")
    series_tree.commit(repo, series_plan.patches_for(target), target,
                       series_tree.SCRATCH_COMMITTER)
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
