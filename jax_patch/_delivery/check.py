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

"""``jax-patch check``: the conformance cases, upstream and patched.

:func:`check` runs every case of ``jax_patch.testing.conformance`` against
the installed JAX's ``jax.numpy.from_dlpack`` and then the patch's, and
prints a table, or JSON; ``--x64 both`` runs it in each x64 mode, in a
process of its own (:func:`check_both`), and ``--require-gpu`` judges the
run by :func:`gpu_verdict`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from typing import Any, Callable, Iterator
import warnings

_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def _ensure_cpu_devices(count: int) -> None:
  # Read when JAX first creates its CPU backend, which has not happened yet.
  flags = os.environ.get("XLA_FLAGS", "")
  if _DEVICE_COUNT_FLAG not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_COUNT_FLAG}={count}".strip()


_OUTCOMES = {True: "passed", False: "failed", None: "skipped"}
_SHOWN = {"passed": "ok", "failed": "FAIL", "skipped": "skipped"}
_COLUMN = 9  # "upstream" and "patched", padded
_DEVICE_COLUMN = 12  # "accelerator", padded


def _run_cases(
    on_record: Callable[[dict[str, Any]], None] = lambda record: None,
) -> list[dict[str, Any]]:
  """Runs every case upstream, then patched; one record per case.

  ``on_record`` gets each record as its case finishes, so that what ran is
  shown even if a later case takes the process down.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import jax_patch  # pylint: disable=g-import-not-at-top
  from jax_patch._src import install  # pylint: disable=g-import-not-at-top
  from jax_patch.testing import conformance  # pylint: disable=g-import-not-at-top

  if jax_patch.is_installed():
    jax_patch.uninstall()
  upstream = jnp.from_dlpack
  records = []
  for case in conformance.CASES:
    _raise_a_lost_interrupt()
    before, upstream_passed = conformance.run_case(case, upstream)
    with warnings.catch_warnings():
      # The header says it; install()'s warning would split the table.
      warnings.simplefilter("ignore", install.UntestedJaxWarning)
      with jax_patch.patched():
        after, passed = conformance.run_case(case, jax_patch.from_dlpack)
    records.append({
        "name": case.name, "behaviour": case.behaviour,
        "device": conformance.device_of(case.name),
        "upstream": {"outcome": _OUTCOMES[upstream_passed],
                     "detail": before},
        "patched": {"outcome": _OUTCOMES[passed], "detail": after}})
    on_record(records[-1])
  return records


def _survey_numpy_input() -> dict[str, Any]:
  """NumPy input as users make it, upstream then patched (numpy_input).

  Each column is a list of rows, or the error that stopped it.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import jax_patch  # pylint: disable=g-import-not-at-top
  from jax_patch.testing import numpy_input  # pylint: disable=g-import-not-at-top

  survey: dict[str, Any] = {}
  for column, importer in (("upstream", jnp.from_dlpack),
                           ("patched", jax_patch.from_dlpack)):
    try:
      survey[column] = numpy_input.survey(importer, count=_SURVEY_COUNT)
    except Exception as err:  # pylint: disable=broad-except
      survey[column] = f"{type(err).__name__}: {err}"
  return survey


# Fresh arrays per route and size: enough to see a 1-in-4 chance.
_SURVEY_COUNT = 20


def _survey_met(survey: dict[str, Any]) -> bool:
  """Whether the patch kept the survey's promises (``numpy_input.broken``)."""
  from jax_patch.testing import numpy_input  # pylint: disable=g-import-not-at-top
  rows = survey["patched"]
  return not isinstance(rows, str) and not numpy_input.broken(rows)


def _print_survey(survey: dict[str, Any], width: int) -> None:
  """Prints the survey: per column, a paragraph per route."""
  from jax_patch.testing import numpy_input  # pylint: disable=g-import-not-at-top
  print(textwrap.fill(
      f"NumPy input as users make it: copy=False on {_SURVEY_COUNT} fresh "
      "float32 arrays per size, all alive; shared/made:", width))
  for column, rows in survey.items():
    found = ([f"could not run: {rows}"] if isinstance(rows, str)
             else numpy_input.lines(rows))
    for line in found:
      print(textwrap.fill(f"{column}, {line}", width, initial_indent="  ",
                          subsequent_indent="    "))
  if not _survey_met(survey):
    print(textwrap.fill("FAIL: patched, an array made to share "
                        "(aligned_copy, aligned_allocation) did not, or "
                        "copy=False copied", width))
  print()


def _survey_json(survey: dict[str, Any]) -> dict[str, Any]:
  return {column: rows if isinstance(rows, str)
          else [dataclasses.asdict(row) for row in rows]
          for column, rows in survey.items()} | {"met": _survey_met(survey)}


def _summary(records: list[dict[str, Any]], column: str) -> dict[str, int]:
  counts = {outcome: 0 for outcome in _OUTCOMES.values()}
  for record in records:
    counts[record[column]["outcome"]] += 1
  return counts


def _summary_line(column: str, counts: dict[str, int]) -> str:
  return (f"{column}: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped")


def _print_table_head(width: int) -> None:
  print(f"{'upstream':<{_COLUMN}}{'patched':<{_COLUMN}}"
        f"{'device':<{_DEVICE_COLUMN}}case")
  print("-" * width, flush=True)


def _print_row(record: dict[str, Any], width: int) -> None:
  """One case's row, its behaviour wrapped whole, out at once."""
  cells = "".join(f"{_SHOWN[record[column]['outcome']]:<{_COLUMN}}"
                  for column in ("upstream", "patched"))
  cells += f"{record['device']:<{_DEVICE_COLUMN}}"
  print(textwrap.fill(record["behaviour"], width, initial_indent=cells,
                      subsequent_indent=" " * len(cells)), flush=True)


def _print_table_end(records: list[dict[str, Any]], width: int) -> None:
  """Closes the rows; then, in full, what failed or skipped in either column.
  """
  print("-" * width)
  notable = [r for r in records
             if r["upstream"]["outcome"] != "passed"
             or r["patched"]["outcome"] != "passed"]
  if notable:
    print("Failed or skipped, in full:")
  for record in notable:
    print()
    print(textwrap.fill(f"{record['behaviour']} [{record['name']}]", width))
    for column in ("upstream", "patched"):
      print(textwrap.fill(record[column]["detail"], width,
                          initial_indent=f"  {column}: ",
                          subsequent_indent="    "))
  print()


X64_MODES = ("on", "off")


def check(as_json: bool = False, x64: str | None = None,
          require_gpu: bool = False, require_accelerator: bool = False) -> int:
  """Runs every conformance case against upstream JAX and the patch.

  Prints a header naming the JAX, its CPU devices and its x64 mode, a
  table, the full text of every failure and skip, and a summary line per
  column; or, with ``as_json``, all of that as one JSON object. The header
  says so when the running JAX is newer than the tested range.

  Args:
    as_json: print JSON instead.
    x64: ``"on"`` or ``"off"`` sets ``jax_enable_x64`` for the run (and
      puts back what it was after); ``"both"`` runs each mode in a child
      process of its own (``check_both``); ``None`` keeps the mode the
      environment gives (``JAX_ENABLE_X64``, or JAX's config).
    require_gpu: also fail unless every GPU case passes for the patch and
      no other case skips but those ``requirement_verdict`` allows; the
      verdict names each case that fails it (``"require_gpu"`` in JSON).
    require_accelerator: the same for the accelerator cases
      (``"require_accelerator"`` in JSON).

  Returns:
    0 when every case passes (or is skipped) for the patch, and each
    requirement asked for is met; 1 otherwise.
  """
  requirements = _requirements(require_gpu, require_accelerator)
  if x64 == "both":
    return check_both(as_json, require_gpu, require_accelerator)
  _ensure_cpu_devices(4)
  if x64 is None:
    return _check_in_this_mode(as_json, requirements)
  if x64 not in X64_MODES:
    raise ValueError(f"x64 must be 'on', 'off', 'both' or None, not {x64!r}")
  from jax_patch.testing import conformance  # pylint: disable=g-import-not-at-top
  previous = conformance.x64_enabled()
  _set_x64(x64 == "on")
  try:
    return _check_in_this_mode(as_json, requirements)
  finally:
    _set_x64(previous)


# A skip for the x64 mode, as conformance.require_x64 words it.
_X64_SKIP = "skipped: holds with x64 "


# What --require-gpu and --require-accelerator each require, as named in
# messages.
_REQUIRED_DEVICE_NAMES = {"gpu": "GPU", "accelerator": "accelerator"}


def _required_cases(device: str) -> frozenset[str]:
  from jax_patch.testing import conformance  # pylint: disable=g-import-not-at-top
  return (conformance.GPU_CASES if device == "gpu"
          else conformance.ACCELERATOR_CASES)


def _allowed_skip(name: str, detail: str, device: str) -> str | None:
  """Why case ``name`` may skip under ``--require-{device}``; None if not.
  """
  from jax_patch.testing import conformance  # pylint: disable=g-import-not-at-top
  if name in conformance.SKIPS_WHERE_JAX_HAS_CUDA:
    return conformance.SKIPS_WHERE_JAX_HAS_CUDA[name]
  if detail.startswith(_X64_SKIP):
    return ("holds in the other x64 mode only; a run in that mode (--x64 "
            "both) covers it")
  if device == "accelerator" and name in conformance.GPU_CASES:
    import jax  # pylint: disable=g-import-not-at-top
    if jax.devices()[0].platform != "gpu":
      return ("a GPU case, and JAX's default device here is no GPU; "
              "--require-gpu requires it where there is one")
  return None


def requirement_verdict(records: list[dict[str, Any]],
                        device: str) -> dict[str, Any]:
  """What ``check --require-gpu`` or ``--require-accelerator`` finds.

  Every case of ``device`` (``"gpu"``: ``conformance.GPU_CASES``;
  ``"accelerator"``: ``conformance.ACCELERATOR_CASES``) must pass for the
  patch; a skip counts as a failure. So does any other case's skip, unless
  it is named with its reason: the case never runs with JAX on CUDA
  (``conformance.SKIPS_WHERE_JAX_HAS_CUDA``), holds in the other x64 mode
  only (``--x64 both`` runs it there), or, for the accelerator, is a GPU
  case where the accelerator is no GPU.

  Returns:
    ``{"met": bool, "not_passed": {case: what it said}, "allowed_skips":
    {case: why it may skip}}``; a required case missing from the run is not
    passed either.
  """
  required = _required_cases(device)
  not_passed: dict[str, str] = {}
  allowed: dict[str, str] = {}
  for record in records:
    name, outcome = record["name"], record["patched"]["outcome"]
    detail = record["patched"]["detail"]
    if name in required:
      if outcome != "passed":
        not_passed[name] = detail
    elif outcome == "skipped":
      why = _allowed_skip(name, detail, device)
      if why is None:
        not_passed[name] = detail
      else:
        allowed[name] = why
  ran = {record["name"] for record in records}
  for name in sorted(required - ran):
    not_passed[name] = "not run"
  return {"met": not not_passed, "not_passed": not_passed,
          "allowed_skips": allowed}


def gpu_verdict(records: list[dict[str, Any]]) -> dict[str, Any]:
  """:func:`requirement_verdict` for ``--require-gpu``."""
  return requirement_verdict(records, "gpu")


def _print_verdict(verdict: dict[str, Any], device: str, width: int) -> None:
  required = _required_cases(device)
  name = _REQUIRED_DEVICE_NAMES[device]
  not_passed = verdict["not_passed"]
  if verdict["met"]:
    print(f"--require-{device}: met: all {len(required)} {name} cases "
          "passed, and no other case skipped without leave")
  else:
    count = sum(case in required for case in not_passed)
    print(f"--require-{device}: FAILED: {len(not_passed)} cases did not pass "
          f"({count} of the {len(required)} {name} cases; a skip "
          "counts as a failure):")
  for case, detail in not_passed.items():
    print(textwrap.fill(f"{case}: {detail}", width, initial_indent="  ",
                        subsequent_indent="    "))
  if verdict["allowed_skips"]:
    print("allowed to skip (each with its reason):")
  for case, why in verdict["allowed_skips"].items():
    print(textwrap.fill(f"{case}: {why}", width, initial_indent="  ",
                        subsequent_indent="    "))


def _set_x64(enabled: bool) -> None:
  import jax  # pylint: disable=g-import-not-at-top
  config: Any = jax.config  # Its methods carry no annotations.
  config.update("jax_enable_x64", enabled)


def _requirements(require_gpu: bool, require_accelerator: bool) -> list[str]:
  return [device for device, asked in (("gpu", require_gpu),
                                       ("accelerator", require_accelerator))
          if asked]


def _check_in_this_mode(as_json: bool, requirements: list[str]) -> int:
  with _interrupts_kept():
    return _check_cases(as_json, requirements)


# Set by Ctrl-C during a check, until the check ends.
_interrupt_seen = [False]


@contextlib.contextmanager
def _interrupts_kept() -> Iterator[None]:
  """Makes Ctrl-C stop a check even where Python loses its interrupt.

  SIGINT raises ``KeyboardInterrupt`` wherever the main thread is, and in a
  garbage-collection callback (JAX registers one) Python reports it as
  unraisable and goes on. Here the interrupt is noted as well: that report
  is dropped, and the next case raises it again. An ignored SIGINT (a
  background job's) stays ignored.
  """
  if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
    yield
    return

  def note_and_raise(signum: int, frame: Any) -> None:
    _interrupt_seen[0] = True
    signal.default_int_handler(signum, frame)

  def drop_lost_interrupts(unraisable: Any) -> None:
    if not issubclass(unraisable.exc_type, KeyboardInterrupt):
      report(unraisable)

  report = sys.unraisablehook
  _interrupt_seen[0] = False
  signal.signal(signal.SIGINT, note_and_raise)
  sys.unraisablehook = drop_lost_interrupts
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.unraisablehook = report


def _raise_a_lost_interrupt() -> None:
  """Raises the Ctrl-C that :func:`_interrupts_kept` saw Python lose."""
  if _interrupt_seen[0]:
    raise KeyboardInterrupt


def _check_cases(as_json: bool, requirements: list[str]) -> int:
  import jax  # pylint: disable=g-import-not-at-top
  from jax_patch._src import install  # pylint: disable=g-import-not-at-top
  from jax_patch.testing import conformance  # pylint: disable=g-import-not-at-top

  untested = _untested_note()
  devices = len(jax.devices("cpu"))
  mode = conformance.x64_mode()
  width = max(60, shutil.get_terminal_size().columns - 1)
  if not as_json:
    if untested is not None:
      # The first line says it, before anything else.
      print(textwrap.fill(f"UNTESTED: {untested}", width))
    print(f"jax {jax.__version__}, {devices} CPU devices, {mode}; "
          f"{len(conformance.CASES)} cases")
  if as_json:
    records = _run_cases()
  else:
    _print_table_head(width)
    records = _run_cases(lambda record: _print_row(record, width))
  _raise_a_lost_interrupt()
  survey = _survey_numpy_input()
  _raise_a_lost_interrupt()
  summary = {column: _summary(records, column)
             for column in ("upstream", "patched")}
  verdicts = {device: requirement_verdict(records, device)
              for device in requirements}
  if as_json:
    report: dict[str, Any] = {
        "jax": jax.__version__, "cpu_devices": devices,
        "x64": mode.split()[-1], "untested": untested, "cases": records,
        "numpy_input": _survey_json(survey), "summary": summary}
    for device, verdict in verdicts.items():
      report[f"require_{device}"] = verdict
    if untested is not None:
      report["worse_than_upstream"] = worse_than_upstream(records, survey)
    json.dump(report, sys.stdout, indent=2)
    print()
  else:
    _print_table_end(records, width)
    _print_survey(survey, width)
    for column in ("upstream", "patched"):
      print(_summary_line(column, summary[column]))
    if untested is not None:
      _print_against_upstream(records, survey, width)
    for device, verdict in verdicts.items():
      _print_verdict(verdict, device, width)
  unmet = any(not verdict["met"] for verdict in verdicts.values())
  if untested is not None:
    # Past the tested range the patch promises only never to be worse.
    return 1 if worse_than_upstream(records, survey) or unmet else 0
  return (1 if summary["patched"]["failed"] or unmet
          or not _survey_met(survey) else 0)


def _untested_note() -> str | None:
  """What the header says of a JAX past the tested range; None within it."""
  from jax_patch._src import dlpack_compat  # pylint: disable=g-import-not-at-top
  from jax_patch._src import install  # pylint: disable=g-import-not-at-top
  untested = install.untested_jax_message()
  if untested is None:
    return None
  if dlpack_compat.BINDING_SHAPE_PROBLEM is not None:
    untested += (" The patch steps aside for JAX's own functions: "
                 f"{dlpack_compat.BINDING_SHAPE_PROBLEM}")
  return (f"{untested} Here the patch must never be worse than upstream: "
          "the check fails only where it is.")


def worse_than_upstream(records: list[dict[str, Any]],
                        survey: dict[str, Any]) -> list[str]:
  """The cases upstream passes and the patch fails (the survey by name)."""
  from jax_patch.testing import numpy_input  # pylint: disable=g-import-not-at-top
  worse = [record["name"] for record in records
           if record["upstream"]["outcome"] == "passed"
           and record["patched"]["outcome"] == "failed"]
  upstream_rows = survey["upstream"]
  upstream_met = (not isinstance(upstream_rows, str)
                  and not numpy_input.broken(upstream_rows))
  if upstream_met and not _survey_met(survey):
    worse.append("numpy_input_survey")
  return worse


def _print_against_upstream(records: list[dict[str, Any]],
                            survey: dict[str, Any], width: int) -> None:
  """Names the cases worse than upstream, and those not yet better."""
  worse = worse_than_upstream(records, survey)
  not_better = [record["name"] for record in records
                if record["upstream"]["outcome"] != "passed"
                and record["patched"]["outcome"] == "failed"]
  for label, names in (("WORSE than upstream", worse),
                       ("not yet better than upstream", not_better)):
    print(textwrap.fill(f"{label}: {', '.join(names) or 'none'}", width,
                        subsequent_indent="  "))


def check_both(as_json: bool = False, require_gpu: bool = False,
               require_accelerator: bool = False) -> int:
  """Runs ``check`` with x64 off, then on, each in a child process.

  Each child starts with ``JAX_ENABLE_X64`` set, so JAX is in that mode
  from its first use. Text output is each child's in turn, then one line
  per mode; JSON is one object, ``{"x64": "both", "runs": {"off": ...,
  "on": ...}}``, each run as ``check --json`` prints it.

  Returns:
    0 when the patch passes every case in both modes (and, with
    ``require_gpu`` or ``require_accelerator``, meets each requirement in
    both), 1 otherwise.
  """
  outcomes = {}
  runs = {}
  done: subprocess.CompletedProcess[Any]
  for mode in ("off", "on"):
    env = dict(os.environ, JAX_ENABLE_X64="1" if mode == "on" else "0")
    command = [sys.executable, "-m", "jax_patch", "check", "--x64", mode]
    command += [f"--require-{device}" for device in
                _requirements(require_gpu, require_accelerator)]
    # Each child in a session of its own: a terminal's Ctrl-C reaches this
    # process alone, which stops the child (subprocess.run) and says so once.
    if as_json:
      done = subprocess.run(command + ["--json"], env=env, text=True,
                            stdout=subprocess.PIPE, check=False,
                            start_new_session=True)
      try:
        runs[mode] = json.loads(done.stdout)
      except json.JSONDecodeError:
        runs[mode] = {"error": f"exit status {done.returncode}, no JSON",
                      "output": done.stdout[-3000:]}
    else:
      sys.stdout.flush()  # The child writes to the same stream.
      done = subprocess.run(command, env=env, check=False,
                            start_new_session=True)
      print()
    if done.returncode in (130, -signal.SIGINT):
      raise KeyboardInterrupt  # The child was interrupted on its own.
    outcomes[mode] = done.returncode
  if as_json:
    json.dump({"x64": "both", "runs": runs}, sys.stdout, indent=2)
    print()
  else:
    for mode, code in outcomes.items():
      print(f"x64 {mode}: {'passed' if code == 0 else 'FAILED'} "
            f"(exit status {code})")
  return 1 if any(outcomes.values()) else 0
