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

"""The jaxlib bug reports of the upstream series, and their reproducers.

The reproducers run here with the installed JAX and jaxlib, each in a
process of its own (one of them kills its process), and must agree with
the jaxlib versions their report names as affected.
"""

import ast
import dataclasses
import os
import re
import signal
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jaxlib.version

from jax_patch._delivery import series_reports
from jax_patch.testing import conformance

_REPORTS = {report.slug: report for report in series_reports.REPORTS}
_BY_SLUG = [(slug, slug) for slug in _REPORTS]
_COPY_FALSE = series_reports.COPY_FALSE_IGNORES_IS_COPIED
_NULL_DELETER = series_reports.NULL_DELETER_ABORTS
_COPY_TRUE = series_reports.COPY_TRUE_ALIASES
_NON_COMPACT = series_reports.NON_COMPACT_STRIDES_UNIMPLEMENTED
_UNALIGNED = series_reports.UNALIGNED_IMPORT_UNFINISHED
_NON_ROW_MAJOR = series_reports.NON_ROW_MAJOR_MOVED_WRONGLY


def _installed_jaxlib() -> tuple[int, ...]:
  """The installed jaxlib's release, e.g. (0, 12, 0, 1) for 0.12.0.1."""
  parts: list[int] = []
  for part in jaxlib.version.__version__.split("."):
    digits = re.match(r"\d+", part)
    if digits is None:
      break
    parts.append(int(digits.group()))
    if digits.group() != part:  # 0.12.0rc1, 0.13.0.dev20260101
      break
  return tuple(parts)


class OutcomeTest(parameterized.TestCase):

  def test_reproduces_line(self) -> None:
    self.assertEqual(
        series_reports.outcome(0, "noise\nreproduces: imported it\n", "",
                               crash=False),
        ("reproduces", "imported it"))

  def test_fixed_line(self) -> None:
    self.assertEqual(
        series_reports.outcome(0, "fixed: raised BufferError\n\n",
                               "W0000 a warning from XLA\n", crash=False),
        ("fixed", "raised BufferError"))

  def test_signal_is_a_reproduction_of_a_crash(self) -> None:
    result, detail = series_reports.outcome(
        -signal.SIGABRT, "", "terminate called\n  what():  bad_function_call\n",
        crash=True)
    self.assertEqual(result, "reproduces")
    self.assertIn("SIGABRT", detail)
    self.assertIn("bad_function_call", detail)

  def test_signal_is_an_error_where_no_crash_is_reported(self) -> None:
    result, detail = series_reports.outcome(
        -signal.SIGSEGV, "fixed: not yet\n", "", crash=False)
    self.assertEqual(result, "error")
    self.assertIn("SIGSEGV", detail)

  @parameterized.named_parameters(
      ("failing", 1, "reproduces: half of it\n"),
      ("exit_zero", 0, "fixed: but a traceback\n"))
  def test_traceback_is_an_error(self, returncode: int, stdout: str) -> None:
    result, detail = series_reports.outcome(
        returncode, stdout,
        "Traceback (most recent call last):\n  ...\nNameError: name 'x'\n",
        crash=True)
    self.assertEqual(result, "error")
    self.assertIn("NameError", detail)

  @parameterized.named_parameters(
      ("nothing", ""),
      ("other_line", "imported it\n"),
      ("verdict_not_last", "reproduces: it did\ndone\n"),
      ("unknown_verdict", "maybe: it did\n"))
  def test_missing_line_is_an_error(self, stdout: str) -> None:
    result, _ = series_reports.outcome(0, stdout, "", crash=True)
    self.assertEqual(result, "error")


class VerdictTest(parameterized.TestCase):

  _REPORT = dataclasses.replace(_COPY_FALSE, affected=((0, 12), (0, 13)))

  @parameterized.named_parameters(
      ("in_range", (0, 12, 0, 1), "reproduces"),
      ("out_of_range_below", (0, 11, 2), "fixed"),
      ("out_of_range_after_the_fix", (0, 13, 0), "fixed"))
  def test_consistent(self, version: tuple[int, ...], result: str) -> None:
    self.assertEqual(series_reports.verdict(self._REPORT, version, result), "")

  def test_in_range_but_fixed(self) -> None:
    problem = series_reports.verdict(self._REPORT, (0, 12, 0), "fixed")
    self.assertIn("does not reproduce with jaxlib 0.12.0", problem)

  def test_out_of_range_but_reproduces(self) -> None:
    problem = series_reports.verdict(self._REPORT, (0, 11, 2), "reproduces")
    self.assertIn("reproduces with jaxlib 0.11.2", problem)
    self.assertIn("not name as affected", problem)

  @parameterized.named_parameters(
      ("in_range", (0, 12, 0)), ("out_of_range", (0, 11, 2)))
  def test_error(self, version: tuple[int, ...]) -> None:
    self.assertIn("no verdict",
                  series_reports.verdict(self._REPORT, version, "error"))


class RangeTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("copy_false_0_12_0_1", _COPY_FALSE, (0, 12, 0, 1), True),
      ("copy_false_0_12", _COPY_FALSE, (0, 12, 0), True),
      ("copy_false_0_11_2", _COPY_FALSE, (0, 11, 2), False),
      ("copy_false_0_10_2", _COPY_FALSE, (0, 10, 2), False),
      ("null_deleter_0_12_0_1", _NULL_DELETER, (0, 12, 0, 1), True),
      ("null_deleter_0_11_2", _NULL_DELETER, (0, 11, 2), True),
      ("null_deleter_0_4_35", _NULL_DELETER, (0, 4, 35), True),
      ("null_deleter_0_4_34", _NULL_DELETER, (0, 4, 34), False),
      ("copy_true_0_12_0_1", _COPY_TRUE, (0, 12, 0, 1), True),
      ("copy_true_0_8_1", _COPY_TRUE, (0, 8, 1), True),
      ("copy_true_0_8_0", _COPY_TRUE, (0, 8, 0), False),
      ("copy_true_0_4_35", _COPY_TRUE, (0, 4, 35), False),
      ("non_compact_0_12_0_1", _NON_COMPACT, (0, 12, 0, 1), True),
      ("non_compact_0_4_35", _NON_COMPACT, (0, 4, 35), True),
      ("unaligned_0_4_35", _UNALIGNED, (0, 4, 35), True),
      ("unaligned_0_11_1", _UNALIGNED, (0, 11, 1), True),
      ("unaligned_0_11_2", _UNALIGNED, (0, 11, 2), False),
      ("non_row_major_0_4_35", _NON_ROW_MAJOR, (0, 4, 35), False),
      ("non_row_major_0_8_0", _NON_ROW_MAJOR, (0, 8, 0), True),
      ("non_row_major_0_11_1", _NON_ROW_MAJOR, (0, 11, 1), True),
      ("non_row_major_0_11_2", _NON_ROW_MAJOR, (0, 11, 2), False))
  def test_affects(self, report: series_reports.JaxlibReport,
                   version: tuple[int, ...], expected: bool) -> None:
    self.assertEqual(series_reports.affects(report, version), expected)

  @parameterized.named_parameters(
      ("jax_main", (0, 11, 0), (0, 11, 1),
       (_NULL_DELETER, _COPY_TRUE, _NON_COMPACT, _UNALIGNED, _NON_ROW_MAJOR)),
      ("jax_0_12_0_1", (0, 11, 2), (0, 12, 0),
       (_COPY_FALSE, _NULL_DELETER, _COPY_TRUE, _NON_COMPACT)),
      ("jaxlib_0_12_on", (0, 12, 0), (0, 13, 0),
       (_COPY_FALSE, _NULL_DELETER, _COPY_TRUE, _NON_COMPACT)),
      ("jax_0_4_35", (0, 4, 35), (0, 4, 35),
       (_NULL_DELETER, _NON_COMPACT, _UNALIGNED)),
      ("before_any", (0, 4, 0), (0, 4, 30), ()))
  def test_for_range(self, min_jaxlib: tuple[int, ...],
                     max_jaxlib: tuple[int, ...],
                     expected: tuple[series_reports.JaxlibReport, ...]
                     ) -> None:
    self.assertEqual(series_reports.for_range(min_jaxlib, max_jaxlib),
                     expected)

  def test_for_range_of_one_jaxlib_is_affects(self) -> None:
    for _, version, _ in series_reports.MEASURED:
      with self.subTest(jaxlib=version):
        self.assertEqual(
            series_reports.for_range(version, version),
            tuple(report for report in series_reports.REPORTS
                  if series_reports.affects(report, version)))

  def test_for_range_excludes_a_fixed_release(self) -> None:
    fixed = dataclasses.replace(_COPY_FALSE, affected=((0, 12), (0, 13)))
    with mock.patch.object(series_reports, "REPORTS", (fixed,)):
      self.assertEqual(series_reports.for_range((0, 12, 9), (0, 14)),
                       (fixed,))
      self.assertEqual(series_reports.for_range((0, 13), (0, 14)), ())


class ReportTest(parameterized.TestCase):

  def test_slugs_are_unique(self) -> None:
    self.assertLen(_REPORTS, len(series_reports.REPORTS))

  @parameterized.named_parameters(*_BY_SLUG)
  def test_form(self, slug: str) -> None:
    report = _REPORTS[slug]
    self.assertRegex(report.slug, r"^[a-z0-9]+(-[a-z0-9]+)*$")
    self.assertLessEqual(len(report.title), 72)
    self.assertNotIn("\n", report.title)
    self.assertIn("jaxlib/dlpack.cc", report.where)
    self.assertIn("https://", report.clause)
    first, fixed = report.affected
    self.assertTrue(fixed is None or first < fixed)
    for text in (report.what_happens, report.what_should, report.clause):
      for line in text.splitlines():
        if "https://" not in line:
          self.assertLessEqual(len(line), 75, line)

  @parameterized.named_parameters(*_BY_SLUG)
  def test_cases_are_conformance_cases(self, slug: str) -> None:
    names = {case.name for case in conformance.CASES}
    self.assertEmpty(set(_REPORTS[slug].cases) - names)

  @parameterized.named_parameters(*_BY_SLUG)
  def test_reproducer_compiles_and_imports_no_jax_patch(self,
                                                        slug: str) -> None:
    reproducer = _REPORTS[slug].reproducer
    compile(reproducer, f"<{slug}>", "exec")
    tree = ast.parse(reproducer)
    imported: set[str] = set()
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        imported.update(alias.name.split(".")[0] for alias in node.names)
      elif isinstance(node, ast.ImportFrom):
        imported.add((node.module or "").split(".")[0])
    self.assertContainsSubset(imported,
                              {"ctypes", "gc", "jax", "numpy", "os", "sys"})
    self.assertNotIn("jax_patch", reproducer)
    for line in reproducer.splitlines():
      self.assertLessEqual(len(line), 80, line)

  @parameterized.named_parameters(*_BY_SLUG)
  def test_issue_text(self, slug: str) -> None:
    report = _REPORTS[slug]
    text = series_reports.issue_text(report, "0.12.0.1")
    self.assertTrue(text.startswith(f"# {report.title}\n"))
    # The sections of JAX's bug-report template.
    self.assertIn("\n### Description\n", text)
    self.assertIn(
        "\n### System info (python version, jaxlib version, accelerator, "
        "etc.)\n", text)
    self.assertIn("jax.print_environment_info()", text)
    self.assertIn("with jax 0.12.0.1", text)
    self.assertIn(f"```python\n{report.reproducer.strip()}\n```", text)
    self.assertIn(series_reports.affected_text(report), text)
    self.assertIn(f"jaxlib {series_reports.dotted(report.affected[0])}",
                  text)
    self.assertIn(report.clause.strip(), text)
    self.assertIn(" ".join(report.where.split()), " ".join(text.split()))
    self.assertIn(report.what_happens.strip(), text)
    self.assertIn(report.what_should.strip(), text)
    for _, version, _ in series_reports.MEASURED:
      self.assertIn(f"jaxlib {series_reports.dotted(version)}, ", text)

  def test_affected_text(self) -> None:
    self.assertEqual(series_reports.affected_text(_COPY_FALSE),
                     "jaxlib 0.12.0 and later (no jaxlib fixes it yet)")
    self.assertEqual(
        series_reports.affected_text(
            dataclasses.replace(_COPY_FALSE, affected=((0, 12), (0, 13, 1)))),
        "jaxlib 0.12.0 up to, not including, 0.13.1")


class ReproducerTest(parameterized.TestCase):
  """Each reproducer, run with this interpreter's JAX and jaxlib."""

  @parameterized.named_parameters(*_BY_SLUG)
  def test_agrees_with_the_affected_range(self, slug: str) -> None:
    report = _REPORTS[slug]
    installed = _installed_jaxlib()
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_ENABLE_X64="0")
    with tempfile.TemporaryDirectory() as scratch:
      done = subprocess.run([sys.executable, "-c", report.reproducer],
                            cwd=scratch, env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    result, detail = series_reports.outcome(
        done.returncode, done.stdout, done.stderr, report.crash)
    self.assertEqual(
        series_reports.verdict(report, installed, result), "",
        f"{result}: {detail}\nstdout:\n{done.stdout[-2000:]}\n"
        f"stderr:\n{done.stderr[-2000:]}")


if __name__ == "__main__":
  absltest.main()
