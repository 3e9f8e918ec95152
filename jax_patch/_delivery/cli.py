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

"""The ``jax-patch`` command line."""

from __future__ import annotations

import argparse
from concurrent import futures
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
from typing import Any
import warnings
from collections.abc import Sequence

_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def _ensure_cpu_devices(count: int) -> None:
  # Read when JAX first creates its CPU backend, which has not happened yet.
  flags = os.environ.get("XLA_FLAGS", "")
  if _DEVICE_COUNT_FLAG not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_COUNT_FLAG}={count}".strip()


_OUTCOMES = {True: "passed", False: "failed", None: "skipped"}
_SHOWN = {"passed": "ok", "failed": "FAIL", "skipped": "skipped"}
_COLUMN = 9  # "upstream" and "patched", padded


def _run_cases() -> list[dict[str, Any]]:
  """Runs every case upstream, then patched; one record per case."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import jax_patch  # pylint: disable=g-import-not-at-top
  from jax_patch._src import conformance  # pylint: disable=g-import-not-at-top
  from jax_patch._src import install  # pylint: disable=g-import-not-at-top

  if jax_patch.is_installed():
    jax_patch.uninstall()
  upstream = jnp.from_dlpack
  records = []
  for case in conformance.CASES:
    before, upstream_passed = conformance.run_case(case, upstream)
    with warnings.catch_warnings():
      # The header says it; install()'s warning would split the table.
      warnings.simplefilter("ignore", install.UntestedJaxWarning)
      with jax_patch.patched():
        after, passed = conformance.run_case(case, jax_patch.from_dlpack)
    records.append({
        "name": case.name, "behaviour": case.behaviour,
        "upstream": {"outcome": _OUTCOMES[upstream_passed],
                     "detail": before},
        "patched": {"outcome": _OUTCOMES[passed], "detail": after}})
  return records


def _summary(records: list[dict[str, Any]], column: str) -> dict[str, int]:
  counts = {outcome: 0 for outcome in _OUTCOMES.values()}
  for record in records:
    counts[record[column]["outcome"]] += 1
  return counts


def _summary_line(column: str, counts: dict[str, int]) -> str:
  return (f"{column}: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped")


def _print_table(records: list[dict[str, Any]], width: int) -> None:
  """One row per case, its behaviour wrapped whole; then, in full, what
  failed or was skipped in either column."""
  header = f"{'upstream':<{_COLUMN}}{'patched':<{_COLUMN}}case"
  print(header)
  rule = "-" * width
  print(rule)
  indent = " " * (2 * _COLUMN)
  for record in records:
    cells = "".join(f"{_SHOWN[record[column]['outcome']]:<{_COLUMN}}"
                    for column in ("upstream", "patched"))
    print(textwrap.fill(record["behaviour"], width, initial_indent=cells,
                        subsequent_indent=indent))
  print(rule)
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
          require_gpu: bool = False) -> int:
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
      no other case skips but those ``gpu_verdict`` allows; the verdict
      names each case that fails it (``"require_gpu"`` in JSON).

  Returns:
    0 when every case passes (or is skipped) for the patch, and with
    ``require_gpu`` the GPU requirement is met; 1 otherwise.
  """
  if x64 == "both":
    return check_both(as_json, require_gpu)
  _ensure_cpu_devices(4)
  if x64 is None:
    return _check_in_this_mode(as_json, require_gpu)
  if x64 not in X64_MODES:
    raise ValueError(f"x64 must be 'on', 'off', 'both' or None, not {x64!r}")
  from jax_patch._src import conformance  # pylint: disable=g-import-not-at-top
  previous = conformance.x64_enabled()
  _set_x64(x64 == "on")
  try:
    return _check_in_this_mode(as_json, require_gpu)
  finally:
    _set_x64(previous)


# A skip for the x64 mode, as conformance.require_x64 words it.
_X64_SKIP = "skipped: holds with x64 "


def gpu_verdict(records: list[dict[str, Any]]) -> dict[str, Any]:
  """What ``check --require-gpu`` finds in one run's records.

  Every GPU case (``conformance.GPU_CASES``) must pass for the patch; a skip
  counts as a failure. So does any other case's skip, except where the case
  never runs with JAX on CUDA (``conformance.SKIPS_WHERE_JAX_HAS_CUDA``) or
  holds in the other x64 mode only (``--x64 both`` runs it there).

  Returns:
    ``{"met": bool, "not_passed": {case: what it said}, "allowed_skips":
    {case: why it may skip}}``; a GPU case missing from the run is not
    passed either.
  """
  from jax_patch._src import conformance  # pylint: disable=g-import-not-at-top
  not_passed: dict[str, str] = {}
  allowed: dict[str, str] = {}
  for record in records:
    name, outcome = record["name"], record["patched"]["outcome"]
    detail = record["patched"]["detail"]
    if name in conformance.GPU_CASES:
      if outcome != "passed":
        not_passed[name] = detail
    elif outcome == "skipped":
      if name in conformance.SKIPS_WHERE_JAX_HAS_CUDA:
        allowed[name] = conformance.SKIPS_WHERE_JAX_HAS_CUDA[name]
      elif detail.startswith(_X64_SKIP):
        allowed[name] = ("holds in the other x64 mode only; a run in that "
                         "mode (--x64 both) covers it")
      else:
        not_passed[name] = detail
  ran = {record["name"] for record in records}
  for name in sorted(conformance.GPU_CASES - ran):
    not_passed[name] = "not run"
  return {"met": not not_passed, "not_passed": not_passed,
          "allowed_skips": allowed}


def _print_gpu_verdict(verdict: dict[str, Any], width: int) -> None:
  from jax_patch._src import conformance  # pylint: disable=g-import-not-at-top
  not_passed = verdict["not_passed"]
  if verdict["met"]:
    print(f"--require-gpu: met: all {len(conformance.GPU_CASES)} GPU cases "
          "passed, and no other case skipped without leave")
  else:
    gpu = sum(name in conformance.GPU_CASES for name in not_passed)
    print(f"--require-gpu: FAILED: {len(not_passed)} cases did not pass "
          f"({gpu} of the {len(conformance.GPU_CASES)} GPU cases; a skip "
          "counts as a failure):")
  for name, detail in not_passed.items():
    print(textwrap.fill(f"{name}: {detail}", width, initial_indent="  ",
                        subsequent_indent="    "))
  if verdict["allowed_skips"]:
    print("allowed to skip (never run with JAX on CUDA, or in this x64 "
          "mode):")
  for name, why in verdict["allowed_skips"].items():
    print(textwrap.fill(f"{name}: {why}", width, initial_indent="  ",
                        subsequent_indent="    "))


def _set_x64(enabled: bool) -> None:
  import jax  # pylint: disable=g-import-not-at-top
  config: Any = jax.config  # Its methods carry no annotations.
  config.update("jax_enable_x64", enabled)


def _check_in_this_mode(as_json: bool, require_gpu: bool = False) -> int:
  import jax  # pylint: disable=g-import-not-at-top
  from jax_patch._src import conformance  # pylint: disable=g-import-not-at-top
  from jax_patch._src import install  # pylint: disable=g-import-not-at-top

  untested = install.untested_jax_message()
  devices = len(jax.devices("cpu"))
  mode = conformance.x64_mode()
  if not as_json:
    print(f"jax {jax.__version__}, {devices} CPU devices, {mode}; "
          f"{len(conformance.CASES)} cases")
    if untested is not None:
      print(f"UNTESTED: {untested}")
  records = _run_cases()
  summary = {column: _summary(records, column)
             for column in ("upstream", "patched")}
  verdict = gpu_verdict(records) if require_gpu else None
  width = max(60, shutil.get_terminal_size().columns - 1)
  if as_json:
    report = {"jax": jax.__version__, "cpu_devices": devices,
              "x64": mode.split()[-1], "untested": untested,
              "cases": records, "summary": summary}
    if verdict is not None:
      report["require_gpu"] = verdict
    json.dump(report, sys.stdout, indent=2)
    print()
  else:
    _print_table(records, width)
    for column in ("upstream", "patched"):
      print(_summary_line(column, summary[column]))
    if verdict is not None:
      _print_gpu_verdict(verdict, width)
  gpu_unmet = verdict is not None and not verdict["met"]
  return 1 if summary["patched"]["failed"] or gpu_unmet else 0


def check_both(as_json: bool = False, require_gpu: bool = False) -> int:
  """Runs ``check`` with x64 off, then on, each in a child process.

  Each child starts with ``JAX_ENABLE_X64`` set, so JAX is in that mode
  from its first use. Text output is each child's in turn, then one line
  per mode; JSON is one object, ``{"x64": "both", "runs": {"off": ...,
  "on": ...}}``, each run as ``check --json`` prints it.

  Returns:
    0 when the patch passes every case in both modes (and, with
    ``require_gpu``, meets the GPU requirement in both), 1 otherwise.
  """
  outcomes = {}
  runs = {}
  done: subprocess.CompletedProcess[Any]
  for mode in ("off", "on"):
    env = dict(os.environ, JAX_ENABLE_X64="1" if mode == "on" else "0")
    command = [sys.executable, "-m", "jax_patch", "check", "--x64", mode]
    if require_gpu:
      command.append("--require-gpu")
    if as_json:
      done = subprocess.run(command + ["--json"], env=env, text=True,
                            stdout=subprocess.PIPE, check=False)
      try:
        runs[mode] = json.loads(done.stdout)
      except json.JSONDecodeError:
        runs[mode] = {"error": f"exit status {done.returncode}, no JSON",
                      "output": done.stdout[-3000:]}
    else:
      sys.stdout.flush()  # The child writes to the same stream.
      done = subprocess.run(command, env=env, check=False)
      print()
    outcomes[mode] = done.returncode
  if as_json:
    json.dump({"x64": "both", "runs": runs}, sys.stdout, indent=2)
    print()
  else:
    for mode, code in outcomes.items():
      print(f"x64 {mode}: {'passed' if code == 0 else 'FAILED'} "
            f"(exit status {code})")
  return 1 if any(outcomes.values()) else 0


class _UsageError(Exception):
  """A path given on the command line is no directory, or (where the
  command writes there) cannot be made one: the command says so in one line
  and exits 2, as argparse does for its own usage errors, writing nothing."""


def _directory(path: str, option: str) -> pathlib.Path:
  """``path``, given as ``option``, where it is a directory.

  Raises:
    _UsageError: it does not exist, or is no directory: said as such,
      rather than as what the command then misses inside it.
  """
  directory = pathlib.Path(path)
  if not directory.is_dir():
    raise _UsageError(f"{option} {path}: " + (
        "not a directory" if directory.exists() else "no such directory"))
  return directory


def _output_directory(path: str, option: str) -> pathlib.Path:
  """``path``, given as ``option``, where it is a directory or can be made
  one (its nearest existing parent is a directory). Makes nothing.

  Raises:
    _UsageError: it, or that parent, is no directory.
  """
  directory = pathlib.Path(path)
  try:
    existing = next(each for each in (directory, *directory.parents)
                    if each.exists())
  except OSError as err:  # A parent that cannot be searched, say.
    raise _UsageError(f"{option} {path}: {err.strerror}") from err
  if not existing.is_dir():
    where = "" if existing == directory else f" ({existing} is a file)"
    raise _UsageError(f"{option} {path}: not a directory{where}")
  return directory


def _jax_tree(path: str, option: str) -> pathlib.Path:
  """``path`` as :func:`_directory` checks it, and as a JAX tree.

  Raises:
    _UsageError: see :func:`_directory`.
    VendorError: it is no JAX tree (it has no ``jax/version.py``): said
      as such, rather than as the first file vendoring misses there.
  """
  from jax_patch._delivery import vendor  # pylint: disable=g-import-not-at-top
  root = _directory(path, option)
  vendor.jax_version(root)
  return root


def _error(command: str, message: object) -> None:
  print(f"jax-patch {command}: error: {message}", file=sys.stderr)


def _installed_jax_root() -> pathlib.Path:
  spec = importlib.util.find_spec("jax")
  if spec is None or spec.origin is None:
    raise SystemExit("jax-patch: error: JAX is not installed.")
  return pathlib.Path(spec.origin).parent.parent


def _print_notes(command: str, notes: list[str]) -> None:
  for note in notes:
    print(f"jax-patch {command}: note: {note}", file=sys.stderr)


def vendor_dry_run(force: bool = False) -> int:
  """Vendors into a scratch copy of the installed JAX and runs the cases.

  Raises:
    VendorError: the installed JAX is refused (see ``vendor.check``).
  """
  from jax_patch._delivery import vendor  # pylint: disable=g-import-not-at-top
  installed = _installed_jax_root()
  # Vetted where it lies: an editable install of a git checkout is judged by
  # git there; the scratch copy is no checkout.
  _print_notes("vendor", vendor.prepare(installed, force).notes)
  with tempfile.TemporaryDirectory(prefix="jax-patch-vendor-") as scratch:
    tree = pathlib.Path(scratch)
    shutil.copytree(installed / "jax", tree / "jax",
                    ignore=shutil.ignore_patterns("__pycache__"))
    changes = vendor.vendor(tree, force=True).changes
    print(f"vendored into a copy of {installed / 'jax'}: "
          f"{', '.join(c.path for c in changes)}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [scratch] + [p for p in sys.path if p]))
    return subprocess.run(
        [sys.executable, "-m", "jax_patch._delivery.vendor_dry_run", scratch],
        env=env, check=False).returncode


def _vendor_command(args: argparse.Namespace) -> int:
  from jax_patch._delivery import vendor  # pylint: disable=g-import-not-at-top
  try:
    if args.revert:
      restored = vendor.revert(_directory(args.revert, "--revert"))
      print(f"restored {len(restored)} files: {', '.join(restored)}")
      return 0
    if args.into is None:
      return vendor_dry_run(args.force)
    vendored = vendor.vendor(_jax_tree(args.into, "--into"),
                             force=args.force)
  except vendor.VendorError as err:
    _error("vendor", err)
    return 1
  _print_notes("vendor", vendored.notes)
  changes = vendored.changes
  print(f"vendored {len(changes)} files into {args.into}: "
        f"{', '.join(c.path for c in changes) or 'already up to date'}")
  return 0


def _diff_command(args: argparse.Namespace) -> int:
  from jax_patch._delivery import vendor  # pylint: disable=g-import-not-at-top
  try:
    root = (_jax_tree(args.against, "--against") if args.against
            else _installed_jax_root())
    prepared = vendor.prepare(root, force=args.force)
  except vendor.VendorError as err:
    _error("diff", err)
    return 1
  _print_notes("diff", prepared.notes)
  sys.stdout.write(vendor.git_diff(prepared.changes))
  return 0


def _series_command(args: argparse.Namespace) -> int:
  from jax_patch._delivery import series  # pylint: disable=g-import-not-at-top
  root = _directory(args.against, "--against")
  out = _output_directory(args.out, "--out")
  try:
    target = series.read_target(root)
    patches = _write_series(target, out,
                            series.author_from(args.author, root))
  except (series.SeriesError, OSError) as err:
    _error("series", err)
    return 1
  for number, subject, why in series.left_out(target):
    print(f"left out {number:04d} ({why}): {subject}")
  print(f"wrote {len(patches)} patches for JAX {target.jax_version} "
        f"(jaxlib >= {'.'.join(map(str, target.min_jaxlib))}) into {out}")
  for patch in patches:
    print(f"  {patch.name}")
  print(f"  {series.QUEUE} (the order to send them in, and what each "
        "goes on after)")
  for report in series.report_files(out):
    print(f"  {report.name} (a jaxlib defect, for JAX's issue tracker)")
  if not args.check:
    return 0
  conflicts: dict[str, list[str]] = {}
  alone: list[series.StepResult] = []
  stack = series.stack_files(out)
  # The stack and the pull requests alone are checked side by side, each
  # in a scratch tree of its own (their processes take both cores); the
  # pull requests are timed once the stack is done.
  with futures.ThreadPoolExecutor(max_workers=1) as beside:
    stacked = beside.submit(series.check_series, target, stack,
                            python=args.python,
                            interop_test=args.interop_test,
                            gates=not args.runtime_only)
    if not args.stack_only:
      queue = series.merge_queue(target)
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
      alone = series.check_alone(target, patches, python=args.python,
                                 interop_test=args.interop_test,
                                 speed=args.speed, quiet=stacked.result)
      _print_steps("pull request", alone, series.dependency_numbers(target))
    results = stacked.result()
  _print_steps("stack step", results, {})
  # With --speed, the whole stack against the base: one check more.
  speed_checks, stack_slow = 0, False
  if args.speed and not args.stack_only:
    whole = series.stack_speed(target, python=args.python)
    _print_stack_speed(whole)
    speed_checks, stack_slow = 1, bool(whole.slow)
  reports = series.check_reports(target, python=args.python)
  _print_reports(reports)
  queue_checks = 0 if args.stack_only else 1
  failed = (sum(not step.ok for step in alone + results) + bool(conflicts)
            + queue_checks * len(patches) - len(alone)
            + len(stack) - len(results)
            + sum(not report.ok for report in reports)
            + stack_slow)
  checks = (queue_checks + speed_checks + len(alone) + len(results)
            + len(reports))
  print(f"{checks - failed} passed, {failed} failed")
  return 1 if failed else 0


def _write_series(target: Any, out: pathlib.Path,
                  author: tuple[str, str]) -> list[pathlib.Path]:
  """``series.write_series``; where it fails, the folders it made for
  ``out`` go too."""
  from jax_patch._delivery import series  # pylint: disable=g-import-not-at-top
  made = next((each for each in reversed((out, *out.parents))
               if not each.exists()), None)
  try:
    return series.write_series(target, out, author)
  except BaseException:
    if made is not None:
      shutil.rmtree(made, ignore_errors=True)
    raise


def _print_reports(reports: list[Any]) -> None:
  """Each report's reproducer: whether the installed jaxlib has the defect,
  and whether that is what the report says of it."""
  for report in reports:
    said = {"reproduces": "reproduces",
            "fixed": "fixed in this jaxlib"}.get(report.result, "did not run")
    verdict = f"FAILED ({report.problem})" if report.problem else "ok"
    print(f"report {report.number:04d}: {verdict}: {said}: {report.title}")
    if report.problem:
      print(textwrap.indent(report.detail, "    "))


def _print_stack_speed(whole: Any) -> None:
  """The whole stack's times against its base's, and the targets."""
  from jax_patch._delivery import series  # pylint: disable=g-import-not-at-top
  readings = ", ".join(
      f"{name} {whole.speed['base ' + name]:.1f} -> {whole.speed[name]:.1f} "
      f"us ({whole.ratio(name):.2f}x, target {target}x)"
      for name, target in series.STACK_SPEED_TARGETS.items())
  verdict = f"FAILED ({whole.slow})" if whole.slow else "ok"
  print(f"stack speed: {verdict}: every pull request against the base: "
        f"{readings}")


def _print_steps(kind: str, results: list[Any],
                 dependencies: dict[int, list[int]]) -> None:
  for step in results:
    after = dependencies.get(step.index)
    on = (f" (after {', '.join(f'{each:04d}' for each in after)})"
          if after else "")
    interop = f" (DLPack test: {step.interop_test})" if step.interop_test else ""
    if step.speed:
      interop += " (speed: " + ", ".join(
          f"{name} {step.speed['base ' + name]:.1f} -> "
          f"{step.speed[name]:.1f} us" for name in ("import", "export")) + ")"
    print(f"{kind} {step.index:04d}{on}: {'ok' if step.ok else 'FAILED'}: "
          f"{step.subject}{interop}")
    if not step.ok:
      print(textwrap.indent(json.dumps(dataclasses.asdict(step), indent=1),
                            "    "))


def _add_stubs_parser(commands: Any) -> None:
  from jax_patch._delivery import stubs  # pylint: disable=g-import-not-at-top
  parser = commands.add_parser(
      "stubs", help="write the installed JAX's .pyi files that the patch "
      "corrects, as a partial stub package DIR/jax-stubs that pyright, "
      "pyrefly and mypy read over the installed JAX")
  parser.add_argument(
      "--out", metavar="DIR", default=stubs.DEFAULT_DIR,
      help=f"where jax-stubs goes (default: {stubs.DEFAULT_DIR}, pyright's "
      "default stubPath)")
  parser.add_argument(
      "--check", action="store_true",
      help="write nothing; exit 1 when DIR/jax-stubs does not match the "
      "installed JAX (after a JAX upgrade: run without --check)")


def _stubs_command(args: argparse.Namespace) -> int:
  from jax_patch._delivery import stubs  # pylint: disable=g-import-not-at-top
  from jax_patch._delivery import vendor  # pylint: disable=g-import-not-at-top
  root = _installed_jax_root()
  out = (pathlib.Path(args.out) if args.check
         else _output_directory(args.out, "--out"))
  try:
    package = stubs.build(root, vendor.jax_version(root))
  except (stubs.StubsError, vendor.VendorError) as err:
    _error("stubs", err)
    return 1
  where = out / stubs.STUB_PACKAGE
  if args.check:
    found = stubs.differences(out, package)
    if found:
      print(f"jax-patch stubs: {where} does not match JAX "
            f"{package.jax_version}; run `jax-patch stubs --out {out}`:",
            file=sys.stderr)
      for difference in found:
        print(f"  {difference}", file=sys.stderr)
      return 1
    print(f"{where} matches JAX {package.jax_version}")
    return 0
  try:
    written = stubs.write(out, package)
  except OSError as err:
    _error("stubs", f"cannot write {where}: {err}")
    return 1
  if not written:
    print(f"JAX {package.jax_version}'s stubs already declare what the "
          f"patch corrects: nothing to write ({where} removed if it was "
          "there)")
    return 0
  print(f"wrote {where} for JAX {package.jax_version}: "
        f"{', '.join(written)}")
  return 0


def version() -> str:
  """This jax-patch's version, as installed (else as its source says)."""
  try:
    return importlib.metadata.version("jax-patch")
  except importlib.metadata.PackageNotFoundError:  # Run from a source tree.
    import jax_patch  # pylint: disable=g-import-not-at-top
    return jax_patch.__version__


_SERIES_DESCRIPTION = """\
Writes the fix as a queue of single-commit pull requests for JAX itself
(a JAX tree whose minimum jaxlib is 0.11 or later), one behaviour each, to
send one at a time in their order: DIR/NNNN-*.patch (git format-patch),
each cut against JAX_SRC plus the pull requests it declares it needs and
nothing else, adding its entry to JAX's CHANGELOG.md (a stand-in where
JAX_SRC has none, as a release's sdist), with its description
(NNNN-*.description.md) beside it; DIR/stack/ holds the same commits
made one on another, what JAX_SRC becomes as they all merge. A pull
request keeps its number on every target: one the target already holds,
or whose jaxlib range does not need it, is reported as left out. With
--check, it then checks the merge queue (each pull request's branch
merged in order into JAX_SRC, the later of two rebased where they
conflict only in CHANGELOG.md, giving the stack's tree), each pull
request alone (on a copy of JAX_SRC after its dependencies' commits only:
it applies, JAX imports, its cases pass, the type check and JAX's
pre-commit gates pass; with --speed, timed), and the stack, step by step.
"""


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      prog="jax-patch",
      description="Array API standard DLPack for JAX.")
  parser.add_argument("--version", action="version",
                      version=f"%(prog)s {version()}")
  commands = parser.add_subparsers(dest="command", required=True)
  check_parser = commands.add_parser(
      "check", help="run the conformance cases against upstream JAX and the "
      "patch, side by side")
  check_parser.add_argument(
      "--json", action="store_true",
      help="print the results as one JSON object, for CI")
  check_parser.add_argument(
      "--x64", choices=(*X64_MODES, "both"),
      help="run with jax_enable_x64 on or off, or both (each in a process "
      "of its own); default: the mode the environment gives "
      "(JAX_ENABLE_X64)")
  check_parser.add_argument(
      "--require-gpu", action="store_true",
      help="also fail unless every GPU case passes for the patch; skips "
      "count as failures, but for cases that never run with JAX on CUDA or "
      "in this x64 mode, each named with why")
  vendor_parser = commands.add_parser(
      "vendor", help="write the patch set into a JAX tree; with no --into, "
      "into a scratch copy of the installed JAX, then run the cases there")
  vendor_parser.add_argument("--into", metavar="ROOT",
                             help="the folder holding jax/")
  vendor_parser.add_argument(
      "--force", action="store_true",
      help="vendor anyway: into a JAX outside the tested range, over files "
      "with local changes")
  vendor_parser.add_argument("--revert", metavar="ROOT",
                             help="restore what vendoring changed in ROOT")
  diff_parser = commands.add_parser(
      "diff", help="print what vendor would change, as a git diff")
  diff_parser.add_argument("--against", metavar="ROOT",
                           help="a JAX tree (default: the installed JAX)")
  diff_parser.add_argument(
      "--force", action="store_true",
      help="diff anyway: against a JAX outside the tested range, or files "
      "with local changes")
  series_parser = commands.add_parser(
      "series", help="write the fix as a queue of single-commit pull "
      "requests for JAX (jaxlib 0.11 on), one behaviour each; with --check, "
      "check them alone, as a merge queue and as a stack",
      description=_SERIES_DESCRIPTION)
  series_parser.add_argument("--against", metavar="JAX_SRC", required=True,
                             help="the JAX tree: a checkout or an sdist")
  series_parser.add_argument(
      "--out", metavar="DIR", default="series",
      help="where the pull requests go (default: series)")
  series_parser.add_argument(
      "--author", metavar="'NAME <EMAIL>'",
      help="the patches' author and committer (default: git config "
      "user.name and user.email, as read in JAX_SRC)")
  series_parser.add_argument(
      "--check", action="store_true",
      help="then check them in scratch copies of JAX_SRC: as a merge "
      "queue, each alone on its dependencies, and the stack step by step "
      "(each imports, type-checks, passes JAX's pre-commit gates and its "
      "cases)")
  series_parser.add_argument(
      "--python", default=sys.executable,
      help="with --check, the interpreter to check with: one with a jaxlib "
      "JAX_SRC accepts and its type checker (default: this one)")
  series_parser.add_argument(
      "--interop-test", action="store_true",
      help="with --check, also run JAX_SRC's DLPack test on each pull "
      "request alone and at every step of the stack")
  series_parser.add_argument(
      "--stack-only", action="store_true",
      help="with --check, check only the stack, not the merge queue or each "
      "pull request alone (as on a second jaxlib, once they were)")
  series_parser.add_argument(
      "--runtime-only", action="store_true",
      help="with --check, leave out JAX's pre-commit gates and the type "
      "check, which read the text alone (JAX runs them once per commit, in "
      "an environment of their own): for a second check at another jaxlib, "
      "once the first passed")
  series_parser.add_argument(
      "--speed", action="store_true",
      help="with --check, also time each pull request's import and export "
      "of small arrays against the tree it is cut on (JAX_SRC plus its "
      "dependencies), back to back (minutes; wants a quiet machine)")
  _add_stubs_parser(commands)
  args = parser.parse_args(argv)
  try:
    return _run_command(args)
  except _UsageError as err:
    _error(args.command, err)
    return 2


def _run_command(args: argparse.Namespace) -> int:
  if args.command == "stubs":
    return _stubs_command(args)
  if args.command == "series":
    return _series_command(args)
  if args.command == "check":
    return check(as_json=args.json, x64=args.x64,
                 require_gpu=args.require_gpu)
  if args.command == "vendor":
    return _vendor_command(args)
  return _diff_command(args)


if __name__ == "__main__":
  sys.exit(main())
