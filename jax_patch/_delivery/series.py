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

"""``jax-patch series``: writes the upstream pull requests, then checks them.

The command's two halves, as ``cli`` calls them: :func:`write` writes the
series for a JAX tree and says what it wrote; :func:`check` runs every
check on it and prints what each found. The work is done by one module per
job:

* ``series_tree``: the target (a JAX tree) and its scratch git copies;
* ``series_plan``: which pull requests and reports a target gets, and
  their numbers;
* ``series_write``: the pull requests' files, their queue, the reports;
* ``series_check``: the stack step by step, each pull request alone, the
  reports' reproducers; with ``series_gates`` (JAX's pre-commit gates and
  type check) and ``series_runs`` (the cases, probes and tests run on a
  tree);
* ``series_merge_queue``: the pull requests merged in order;
* ``series_speed``: their import and export times, and the stack's.
"""

from __future__ import annotations

from concurrent import futures
import dataclasses
import json
import pathlib
import shutil
import textwrap

from jax_patch._delivery import series_check
from jax_patch._delivery import series_merge_queue
from jax_patch._delivery import series_plan
from jax_patch._delivery import series_speed
from jax_patch._delivery import series_tree
from jax_patch._delivery import series_write


def write(root: pathlib.Path, out: pathlib.Path, author: str | None
          ) -> tuple[series_tree.Target, list[pathlib.Path]]:
  """Writes the series for the JAX tree ``root`` into ``out``, saying so.

  Args:
    root: the JAX tree (``series_tree.read_target``).
    out: where the files go; made if need be.
    author: ``"Name <email>"``, or ``None`` for git's config
      (``series_tree.author_from``).

  Returns:
    The target, and its pull requests' patch files, in order.

  Raises:
    series_tree.SeriesError: the series cannot be written for ``root``.
    OSError: ``out`` cannot be written.
  """
  target = series_tree.read_target(root)
  patches = _write_series(target, out,
                          series_tree.author_from(author, root))
  for number, subject, why in series_plan.left_out(target):
    print(f"left out {number:04d} ({why}): {subject}")
  print(f"wrote {len(patches)} patches for JAX {target.jax_version} "
        f"(jaxlib >= {'.'.join(map(str, target.min_jaxlib))}) into {out}")
  for patch in patches:
    print(f"  {patch.name}")
  print(f"  {series_write.QUEUE} (the order to send them in, and what each "
        "goes on after)")
  for report in series_write.report_files(out):
    print(f"  {report.name} (a jaxlib defect, for JAX's issue tracker)")
  return target, patches


def check(target: series_tree.Target, out: pathlib.Path,
          patches: list[pathlib.Path], python: str,
          interop_test: bool = False, stack_only: bool = False,
          runtime_only: bool = False, speed: bool = False) -> int:
  """Checks the series :func:`write` wrote into ``out``, printing each check.

  Args:
    target: the JAX tree it was written for.
    out: where it was written.
    patches: the pull requests' patch files, as :func:`write` returns them.
    python: the interpreter to check with (``series_check.check_series``).
    interop_test: also run the target's DLPack test.
    stack_only: check only the stack, not the merge queue or each pull
      request alone.
    runtime_only: leave out JAX's pre-commit gates and the type check.
    speed: also time each pull request, and the whole stack.

  Returns:
    0 when every check passes, 1 otherwise.
  """
  conflicts: dict[str, list[str]] = {}
  alone: list[series_check.StepResult] = []
  stack = series_write.stack_files(out)
  # The stack and the pull requests alone are checked side by side, each
  # in a scratch tree of its own (their processes take both cores); the
  # pull requests are timed once the stack is done.
  with futures.ThreadPoolExecutor(max_workers=1) as beside:
    stacked = beside.submit(series_check.check_series, target, stack,
                            python=python, interop_test=interop_test,
                            gates=not runtime_only)
    if not stack_only:
      queue = series_merge_queue.merge_queue(target)
      conflicts = queue.conflicts
      for subject, files in queue.rebased.items():
        print(f"merge queue: rebased, as its merge conflicted in "
              f"{', '.join(files)}: {subject}")
      for subject, files in conflicts.items():
        print(f"merge queue: FAILED: {subject} conflicts in "
              f"{', '.join(files)}")
      if not conflicts:
        print(f"merge queue: ok: the {len(patches)} pull requests merge in "
              "order, the later rebased where a merge conflicts, into the "
              "stack's tree")
      alone = series_check.check_alone(target, patches, python=python,
                                       interop_test=interop_test,
                                       speed=speed, quiet=stacked.result)
      _print_steps("pull request", alone,
                   series_plan.dependency_numbers(target))
    results = stacked.result()
  _print_steps("stack step", results, {})
  # With --speed, the whole stack against the base: one check more.
  speed_checks, stack_slow = 0, False
  if speed and not stack_only:
    whole = series_speed.stack_speed(target, python=python)
    _print_stack_speed(whole)
    speed_checks, stack_slow = 1, bool(whole.slow)
  reports = series_check.check_reports(target, python=python)
  _print_reports(reports)
  queue_checks = 0 if stack_only else 1
  failed = (sum(not step.ok for step in alone + results) + bool(conflicts)
            + queue_checks * len(patches) - len(alone)
            + len(stack) - len(results)
            + sum(not report.ok for report in reports)
            + stack_slow)
  checks = (queue_checks + speed_checks + len(alone) + len(results)
            + len(reports))
  print(f"{checks - failed} passed, {failed} failed")
  return 1 if failed else 0


def _write_series(target: series_tree.Target, out: pathlib.Path,
                  author: tuple[str, str]) -> list[pathlib.Path]:
  """Writes the series as ``series_write.write_series`` does, or nothing.

  Where it fails, the folders it made for ``out`` go too.
  """
  made = next((each for each in reversed((out, *out.parents))
               if not each.exists()), None)
  try:
    return series_write.write_series(target, out, author)
  except BaseException:
    if made is not None:
      shutil.rmtree(made, ignore_errors=True)
    raise


def _print_reports(reports: list[series_check.ReportResult]) -> None:
  """Prints what each report's reproducer found with the installed jaxlib.

  Whether the installed jaxlib has the defect, and whether that is what the
  report says of it.
  """
  for report in reports:
    said = {"reproduces": "reproduces",
            "fixed": "fixed in this jaxlib"}.get(report.result, "did not run")
    verdict = f"FAILED ({report.problem})" if report.problem else "ok"
    print(f"report {report.number:04d}: {verdict}: {said}: {report.title}")
    if report.problem:
      print(textwrap.indent(report.detail, "    "))


def _print_stack_speed(whole: series_speed.StackSpeed) -> None:
  """The whole stack's times against its base's, and the targets."""
  readings = ", ".join(
      f"{name} {whole.speed['base ' + name]:.1f} -> {whole.speed[name]:.1f} "
      f"us ({whole.ratio(name):.2f}x, target {target}x)"
      for name, target in series_speed.STACK_SPEED_TARGETS.items())
  verdict = f"FAILED ({whole.slow})" if whole.slow else "ok"
  print(f"stack speed: {verdict}: every pull request against the base: "
        f"{readings}")


def _print_steps(kind: str, results: list[series_check.StepResult],
                 dependencies: dict[int, list[int]]) -> None:
  for step in results:
    after = dependencies.get(step.index)
    on = (f" (after {', '.join(f'{each:04d}' for each in after)})"
          if after else "")
    interop = (f" (DLPack test: {step.interop_test})" if step.interop_test
               else "")
    if step.speed:
      interop += " (speed: " + ", ".join(
          f"{name} {step.speed['base ' + name]:.1f} -> "
          f"{step.speed[name]:.1f} us" for name in ("import", "export")) + ")"
    print(f"{kind} {step.index:04d}{on}: {'ok' if step.ok else 'FAILED'}: "
          f"{step.subject}{interop}")
    if not step.ok:
      print(textwrap.indent(json.dumps(dataclasses.asdict(step), indent=1),
                            "    "))
