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

"""Tests for what ``jax-patch check`` prints, for people and for CI."""

import contextlib
import io
import json
import os
import subprocess
import sys
from typing import Any
import unittest
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax

from jax_patch._delivery import check
from jax_patch._delivery import cli
from jax_patch.testing import conformance
from jax_patch.testing import numpy_input
from tests import fresh_process

_LONG_REASON = ("the result aliases the source although every one of the "
                "conditions that the standard sets for a copy holds, " * 3)


def _fails_at_length(from_dlpack: Any) -> str:
  del from_dlpack
  raise AssertionError(_LONG_REASON)


# A case whose name and failure are both far wider than a terminal.
_FAILING_CASE = conformance.Case(
    "fails_at_length",
    "a case with a behaviour long enough that no column of any table could "
    "hold it without cutting it, which the check must still print whole",
    _fails_at_length)


def _reports_x64(from_dlpack: Any) -> str:
  del from_dlpack
  return f"ran with {conformance.x64_mode()}"


# A case that says which x64 mode it ran in.
_MODE_CASE = conformance.Case("reports_x64", "reports the x64 mode",
                              _reports_x64)


def _run_check(*argv: str, cases: list[conformance.Case]) -> tuple[int, str]:
  output = io.StringIO()
  # One array per route and size: the survey's own test runs it in full.
  with mock.patch.object(conformance, "CASES", cases), \
      mock.patch.object(check, "_SURVEY_COUNT", 1), \
      mock.patch.dict(os.environ, {"COLUMNS": "72"}), \
      contextlib.redirect_stdout(output):
    code = cli.main(["check", *argv])
  return code, output.getvalue()


def _words(text: str) -> str:
  return " ".join(text.split())


class CheckOutputTest(absltest.TestCase):

  def test_every_behaviour_is_printed_whole(self) -> None:
    cases = conformance.CASES[:6] + [_FAILING_CASE]
    _, output = _run_check(cases=cases)
    for case in cases:
      self.assertIn(_words(case.behaviour), _words(output))
    self.assertNotIn("...", output)

  def test_lines_fit_the_terminal(self) -> None:
    _, output = _run_check(cases=conformance.CASES[:6] + [_FAILING_CASE])
    self.assertLessEqual(max(map(len, output.splitlines())), 72)

  def test_a_failure_is_printed_in_full_and_fails_the_check(self) -> None:
    code, output = _run_check(cases=[_FAILING_CASE])
    self.assertEqual(code, 1)
    self.assertIn(_words(_LONG_REASON), _words(output))
    self.assertIn("[fails_at_length]", output)

  def test_summary_line_per_column(self) -> None:
    _, output = _run_check(cases=conformance.CASES[:3] + [_FAILING_CASE])
    self.assertRegex(output, r"\nupstream: \d+ passed, \d+ failed, \d+ "
                     r"skipped\n")
    self.assertTrue(output.rstrip().endswith(
        "patched: 3 passed, 1 failed, 0 skipped"), output[-200:])

  def test_json_has_every_case_and_a_summary_per_column(self) -> None:
    cases = conformance.CASES[:3] + [_FAILING_CASE]
    code, output = _run_check("--json", cases=cases)
    self.assertEqual(code, 1)
    report = json.loads(output)
    self.assertEqual([c["name"] for c in report["cases"]],
                     [c.name for c in cases])
    failing = report["cases"][-1]
    self.assertEqual(failing["patched"]["outcome"], "failed")
    self.assertIn(_LONG_REASON.strip(), failing["patched"]["detail"])
    self.assertEqual(report["summary"]["patched"],
                     {"passed": 3, "failed": 1, "skipped": 0})
    self.assertEqual(set(report["summary"]), {"upstream", "patched"})


class NumpyInputTest(absltest.TestCase):
  """check reports NumPy input as users make it, beside the cases."""

  def test_text_names_each_route_for_each_column(self) -> None:
    code, output = _run_check(cases=conformance.CASES[:1])
    self.assertEqual(code, 0, output)
    # Upstream 0.4.35 copies under copy=False, which the line says.
    for column in ("upstream", "patched"):
      self.assertIn(f"  {column}, np.arange (default allocation): ", output)
      self.assertIn(f"  {column}, aligned_copy of np.arange: 16 B ", output)
    self.assertIn("  patched, aligned_copy of np.arange: 16 B 1/1,", output)

  def test_json_reports_rows_and_whether_aligned_input_shared(self) -> None:
    code, output = _run_check("--json", cases=conformance.CASES[:1])
    self.assertEqual(code, 0, output)
    survey = json.loads(output)["numpy_input"]
    self.assertTrue(survey["met"])
    routes = {row["route"] for row in survey["patched"]}
    self.assertIn("np.arange (default allocation)", routes)

  def test_an_aligned_array_that_did_not_share_fails_the_check(self) -> None:
    unshared = {"upstream": [], "patched": [numpy_input.Row(
        "aligned_copy of np.arange", 4, 1, 0)]}
    with mock.patch.object(check, "_survey_numpy_input",
                           return_value=unshared):
      code, output = _run_check(cases=conformance.CASES[:1])
    self.assertEqual(code, 1)
    self.assertIn("FAIL: patched, an array made to share", output)


class X64ModeTest(parameterized.TestCase):
  """``check`` runs in, and says, one x64 mode, or both in turn."""

  def test_header_and_json_name_the_mode_the_environment_gives(self) -> None:
    mode = conformance.x64_mode()
    _, output = _run_check(cases=[_MODE_CASE])
    self.assertRegex(output.splitlines()[0],
                     rf"^jax \S+, \d+ CPU devices, {mode}; 1 cases$")
    _, output = _run_check("--json", cases=[_MODE_CASE])
    report = json.loads(output)
    self.assertEqual(report["x64"], mode.split()[-1])
    self.assertEqual(report["cases"][0]["patched"]["detail"],
                     f"ran with {mode}")

  @parameterized.parameters("on", "off")
  def test_flag_sets_the_mode_for_the_run_then_restores_it(
      self, mode: str) -> None:
    before = conformance.x64_enabled()
    code, output = _run_check("--json", "--x64", mode, cases=[_MODE_CASE])
    report = json.loads(output)
    self.assertEqual(code, 0)
    self.assertEqual(report["x64"], mode)
    self.assertEqual(report["cases"][0]["upstream"]["detail"],
                     f"ran with x64 {mode}")
    self.assertEqual(conformance.x64_enabled(), before)

  def test_both_runs_each_mode_in_its_own_process(self) -> None:
    # The real cases, in two child processes: JAX reads the flag at start.
    # They inherit the CPU alone from the environment.
    run = subprocess.run(
        [sys.executable, "-m", "jax_patch", "check", "--x64", "both",
         "--json"], capture_output=True, text=True, timeout=600,
        check=False, env=fresh_process.environment())
    self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr)
    report = json.loads(run.stdout)
    self.assertEqual(report["x64"], "both")
    self.assertEqual(sorted(report["runs"]), ["off", "on"])
    for mode, result in report["runs"].items():
      self.assertEqual(result["x64"], mode)
      self.assertEqual(result["summary"]["patched"]["failed"], 0)
      outcomes = {case["name"]: case["patched"]["outcome"]
                  for case in result["cases"]}
      shares, raises = (("passed", "skipped") if mode == "on"
                        else ("skipped", "passed"))
      self.assertEqual(outcomes["copy_false_int64_shares_with_x64_on"],
                       shares)
      self.assertEqual(outcomes["copy_false_int64_raises"], raises)

  def test_both_fails_when_one_mode_fails_and_sets_each_childs_flag(
      self) -> None:
    calls = []

    def child(command: list[str], env: dict[str, str],
              **kwargs: Any) -> subprocess.CompletedProcess[str]:
      del kwargs
      calls.append((command[command.index("--x64") + 1],
                    env["JAX_ENABLE_X64"]))
      return subprocess.CompletedProcess(command, 1 if len(calls) == 2 else 0)

    output = io.StringIO()
    with mock.patch.object(subprocess, "run", child), \
        contextlib.redirect_stdout(output):
      code = cli.main(["check", "--x64", "both"])
    self.assertEqual(code, 1)
    self.assertEqual(calls, [("off", "0"), ("on", "1")])
    self.assertIn("x64 off: passed", output.getvalue())
    self.assertIn("x64 on: FAILED", output.getvalue())


def _passes(from_dlpack: Any) -> str:
  del from_dlpack
  return "passed"


def _skips(reason: str) -> Any:
  def run(from_dlpack: Any) -> str:
    del from_dlpack
    raise unittest.SkipTest(reason)
  return run


def _in_the_other_x64_mode_only(from_dlpack: Any) -> str:
  del from_dlpack
  conformance.require_x64(not conformance.x64_enabled(), "a stand-in")
  return "ran"


def _stand_in(name: str, run: Any) -> conformance.Case:
  return conformance.Case(name, f"stand-in {name}", run)


class RequireGpuTest(parameterized.TestCase):
  """``check --require-gpu``: every GPU case passes, or the check fails
  naming each case that did not."""

  def test_on_this_cpu_it_fails_naming_every_gpu_case(self) -> None:
    # The real check, every case, as the command line runs it.
    if jax.devices()[0].platform != "cpu":
      self.skipTest("shows the CPU outcome; the device check runs it on a "
                    "GPU")
    run = subprocess.run(
        [sys.executable, "-m", "jax_patch", "check", "--require-gpu"],
        capture_output=True, text=True, timeout=600, check=False,
        env=fresh_process.environment())
    self.assertEqual(run.returncode, 1, run.stdout[-3000:] + run.stderr)
    self.assertIn("\npatched: ", run.stdout)
    self.assertRegex(run.stdout, r"\npatched: \d+ passed, 0 failed, ")
    verdict = run.stdout[run.stdout.index("--require-gpu: FAILED"):]
    for name in conformance.GPU_CASES:
      self.assertRegex(verdict, rf"\n  {name}: skipped: needs a GPU")
    self.assertIn(f"{len(conformance.GPU_CASES)} of the "
                  f"{len(conformance.GPU_CASES)} GPU cases", verdict)

  def test_without_the_flag_gpu_skips_do_not_fail_the_check(self) -> None:
    cases = [_stand_in("gpu_case", _skips("needs a GPU"))]
    with mock.patch.object(conformance, "GPU_CASES",
                           frozenset({"gpu_case"})):
      code, output = _run_check(cases=cases)
    self.assertEqual(code, 0, output)
    self.assertNotIn("--require-gpu", output)

  @parameterized.named_parameters(
      ("gpu_case_skipped", "skipped", "passed", 1),
      ("gpu_case_failed", "failed", "passed", 1),
      ("other_case_skipped", "passed", "skipped", 1),
      ("all_passed", "passed", "passed", 0),
  )
  def test_gpu_and_other_outcomes(self, gpu: str, other: str,
                                  expected_code: int) -> None:
    runs = {"passed": _passes, "skipped": _skips("no torch here"),
            "failed": _fails_at_length}
    cases = [_stand_in("gpu_case", runs[gpu]),
             _stand_in("other_case", runs[other])]
    with mock.patch.object(conformance, "GPU_CASES",
                           frozenset({"gpu_case"})):
      code, output = _run_check("--require-gpu", cases=cases)
    self.assertEqual(code, expected_code, output)
    verdict = output[output.index("--require-gpu: "):]
    for name, outcome in (("gpu_case", gpu), ("other_case", other)):
      if outcome == "passed":
        self.assertNotIn(name, verdict)
      else:
        self.assertIn(f"  {name}: ", verdict)
    if not expected_code:
      self.assertTrue(verdict.startswith("--require-gpu: met"), verdict)

  def test_a_gpu_case_missing_from_the_run_fails_it(self) -> None:
    with mock.patch.object(conformance, "GPU_CASES",
                           frozenset({"gpu_case", "vanished"})):
      code, output = _run_check("--require-gpu",
                                cases=[_stand_in("gpu_case", _passes)])
    self.assertEqual(code, 1)
    self.assertIn("  vanished: not run", output)

  def test_skips_allowed_where_jax_has_cuda_are_named_with_why(self) -> None:
    cases = [_stand_in("gpu_case", _passes),
             _stand_in("cpu_only_case", _skips("this JAX has CUDA")),
             _stand_in("x64_case", _in_the_other_x64_mode_only)]
    with mock.patch.object(conformance, "GPU_CASES",
                           frozenset({"gpu_case"})), \
        mock.patch.object(conformance, "SKIPS_WHERE_JAX_HAS_CUDA",
                          {"cpu_only_case": "needs a JAX without CUDA"}):
      code, output = _run_check("--require-gpu", "--json", cases=cases)
    self.assertEqual(code, 0, output)
    verdict = json.loads(output)["require_gpu"]
    self.assertEqual(verdict["not_passed"], {})
    self.assertEqual(verdict["allowed_skips"]["cpu_only_case"],
                     "needs a JAX without CUDA")
    self.assertIn("other x64 mode", verdict["allowed_skips"]["x64_case"])

  def test_a_gpu_case_skipped_for_the_x64_mode_still_fails_it(self) -> None:
    case = _stand_in("gpu_case", _in_the_other_x64_mode_only)
    with mock.patch.object(conformance, "GPU_CASES",
                           frozenset({"gpu_case"})):
      code, output = _run_check("--require-gpu", cases=[case])
    self.assertEqual(code, 1)
    self.assertIn("  gpu_case: skipped: holds with x64", output)

  def test_both_modes_pass_the_flag_to_each_child(self) -> None:
    commands = []

    def child(command: list[str], **kwargs: Any) -> Any:
      del kwargs
      commands.append(command)
      return subprocess.CompletedProcess(command, 1)

    output = io.StringIO()
    with mock.patch.object(subprocess, "run", child), \
        contextlib.redirect_stdout(output):
      code = cli.main(["check", "--x64", "both", "--require-gpu"])
    self.assertEqual(code, 1)
    self.assertLen(commands, 2)
    for command in commands:
      self.assertIn("--require-gpu", command)


if __name__ == "__main__":
  absltest.main()
