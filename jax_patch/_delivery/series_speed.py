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

"""Times JAX's import and export of small arrays, with the queue and without.

:func:`stack_speed` times the target with the whole queue against the
target itself (:data:`STACK_SPEED_TARGETS`), back to back, each tree keeping
its fastest round (:func:`_time_trees`).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import pathlib

from jax_patch._delivery import series_tree

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
  fail the stack.
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


def stack_speed(base: pathlib.Path, repo: pathlib.Path,
                python: str) -> StackSpeed:
  """Times ``repo`` (the target with the whole queue) against ``base``.

  Back to back (:func:`_time_trees`), against :data:`STACK_SPEED_TARGETS`;
  a reading over a target is measured again, and each tree keeps its
  fastest.
  """
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
