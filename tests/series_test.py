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

"""The upstream patch series: its claims, its target checks, and its steps.

The end-to-end cases apply the series to the installed JAX, where that is a
JAX the series is written for (jaxlib 0.11 on): the version matrix runs them
on 0.12.0.1, and `.ci/run` also checks the series on that release's sdist.
"""

import ast
import collections
from concurrent import futures
import dataclasses
import importlib.util
import os

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # noqa: F401  # pylint: disable=unused-import

import pathlib  # pylint: disable=g-import-not-at-top
import subprocess  # pylint: disable=g-import-not-at-top
import sys  # pylint: disable=g-import-not-at-top
import tempfile  # pylint: disable=g-import-not-at-top
import textwrap  # pylint: disable=g-import-not-at-top
from typing import Any  # pylint: disable=g-import-not-at-top
import unittest  # pylint: disable=g-import-not-at-top
from unittest import mock  # pylint: disable=g-import-not-at-top

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import jaxlib.version

import jax_patch
from jax_patch._delivery import series_check
from jax_patch._delivery import series_gates
from jax_patch._delivery import series_merge_queue
from jax_patch._delivery import series_patches
from jax_patch._delivery import series_plan
from jax_patch._delivery import series_reports
from jax_patch._delivery import series_runs
from jax_patch._delivery import series_speed
from jax_patch._delivery import series_tree
from jax_patch._delivery import series_write
from jax_patch.testing import conformance
from tests import fresh_process

_CASE_NAMES = {case.name for case in conformance.CASES}
_AUTHOR = ("A Contributor", "contributor@example.com")
# Not resolve(): under Bazel the runfiles tree is the project.
_ROOT = pathlib.Path(__file__).absolute().parents[1]
_INSTALLED_ROOT = pathlib.Path(jax.__file__).parent.parent
_INSTALLED_JAXLIB = tuple(
    int(part) for part in jaxlib.version.__version__.split(".")[:3])


def _installed_target() -> series_tree.Target | None:
  try:
    return series_tree.read_target(_INSTALLED_ROOT)
  except series_tree.SeriesError:
    return None


# JAX's pre-commit gates that the series checks run: the `series` extra's
# (the `typecheck` extra has them too).
_GATE_TOOLS = ("pyrefly", "ruff")


def _missing_gate_tools() -> str | None:
  """Why the gates cannot run here, naming the extra; ``None`` if they can."""
  missing = [name for name in _GATE_TOOLS
             if importlib.util.find_spec(name) is None]
  if not missing:
    return None
  return (f"needs {' and '.join(missing)}, JAX's pre-commit gates: install "
          "the 'series' extra (pip install -e '.[series]'; 'typecheck' has "
          "them too)")


def _installed_series() -> tuple[series_patches.SeriesPatch, ...]:
  target = _installed_target()
  assert target is not None
  return series_plan.patches_for(target)


def _fake_tree(root: pathlib.Path, minimum_jaxlib: str,
               dlpack_source: str = "") -> pathlib.Path:
  (root / "jax" / "_src").mkdir(parents=True)
  (root / "jax" / "version.py").write_text(textwrap.dedent(f"""\
      _version = "0.99.0"
      _minimum_jaxlib_version = '{minimum_jaxlib}'
      """))
  (root / "jax" / "_src" / "dlpack.py").write_text(dlpack_source)
  return root


# A module a patch could add to JAX.
_NEW_MODULE = "jax/_src/dlpack_new_module.py"


class SeriesClaimsTest(parameterized.TestCase):
  """The series names real cases, each once, and tests each patch."""

  def test_claims_and_pending_cases_are_conformance_cases(self) -> None:
    claimed = [name for patch in series_patches.SERIES
               for name in patch.claims]
    self.assertEmpty(set(claimed) - _CASE_NAMES)
    self.assertEmpty(series_patches.NOT_YET_IN_SERIES - _CASE_NAMES)

  @parameterized.named_parameters(
      ("main", (0, 11, 0), (0, 11, 1)),
      ("release_0_11_2", (0, 11, 0), (0, 11, 2)),
      ("release_0_12", (0, 11, 2), (0, 12, 0)),
      ("jaxlib_0_12_on", (0, 12, 0), (0, 13, 0)))
  def test_no_case_is_claimed_twice_or_also_pending(
      self, min_jaxlib: tuple[int, ...], max_jaxlib: tuple[int, ...]) -> None:
    claimed = [name for patch in series_patches.for_target(
        min_jaxlib, max_jaxlib) for name in patch.claims]
    self.assertEqual(len(claimed), len(set(claimed)))
    self.assertEmpty(set(claimed) & series_patches.NOT_YET_IN_SERIES)
    self.assertEmpty(set(claimed) & series_patches.IN_DEPRECATION)
    # Only a gated workaround for a reported defect claims its cases, on
    # the jaxlibs the report's fix is not in.
    stand_ins = {patch.stands_in_for: set(patch.claims)
                 for patch in series_patches.SERIES if patch.stands_in_for}
    for report in series_reports.REPORTS:
      with self.subTest(report.slug):
        self.assertEmpty(set(claimed) & set(report.cases)
                         - stand_ins.get(report.slug, set()))

  def test_cases_left_to_jaxlib_are_conformance_cases(self) -> None:
    self.assertEmpty(set(series_patches.NEEDS_JAXLIB) - _CASE_NAMES)
    self.assertEmpty(series_patches.IN_DEPRECATION - _CASE_NAMES)
    for report in series_reports.REPORTS:
      with self.subTest(report.slug):
        self.assertEmpty(set(report.cases) - _CASE_NAMES)

  def test_left_undone_depends_on_the_jaxlib(self) -> None:
    old, new = (series_patches.left_undone((0, 11, 2)),
                series_patches.left_undone((0, 12, 0)))
    self.assertContainsSubset(series_patches.NOT_YET_IN_SERIES, new)
    self.assertContainsSubset(series_patches.NEEDS_JAXLIB, old)
    self.assertEmpty(set(series_patches.NEEDS_JAXLIB) - old
                     - series_patches.NOT_YET_IN_SERIES)
    self.assertNotIn("read_only_imports_without_copy", new)
    self.assertIn("read_only_imports_without_copy", old)

  def test_no_patch_carries_ctypes(self) -> None:
    # What jaxlib does in C++ stays in jaxlib: no patch re-implements it.
    for patch in series_patches.SERIES:
      for edit in patch.edits + patch.test_edits:
        with self.subTest(patch.slug, path=edit.path):
          self.assertNotIn("ctypes", edit.new)
          self.assertNotIn("pythonapi", edit.new)

  def test_every_patch_claims_cases_and_is_tested(self) -> None:
    for patch in series_patches.SERIES:
      with self.subTest(patch.slug):
        self.assertTrue(
            patch.claims or patch.typing_probe or patch.runtime_probe)
        # A typing patch is tested by its probe, under the target's checker.
        self.assertTrue(patch.typing_probe or any(
            edit.path == series_patches.INTEROP_TEST
            for edit in patch.test_edits))
    for patch in series_patches.SERIES:
      with self.subTest(patch.slug):
        self.assertLessEqual(len(patch.subject), 72)
        self.assertLessEqual(  # git's own commit-body width.
            max(len(line) for line in patch.body.splitlines()), 75)
    slugs = [patch.slug for patch in series_patches.SERIES]
    self.assertEqual(len(slugs), len(set(slugs)))


class DependencyTest(parameterized.TestCase):
  """Which pull requests go on the base alone, and which after which."""

  def test_dependencies_are_earlier_behaviours(self) -> None:
    for index, patch in enumerate(series_patches.SERIES):
      earlier = {each.behaviour for each in series_patches.SERIES[:index]}
      with self.subTest(patch.slug):
        self.assertEmpty(set(patch.depends_on) - earlier)

  @parameterized.named_parameters(
      ("main", (0, 11, 0), (0, 11, 1)),
      ("release_0_12", (0, 11, 2), (0, 12, 0)))
  def test_dependencies_are_transitive_and_in_series_order(
      self, min_jaxlib: tuple[int, ...], max_jaxlib: tuple[int, ...]) -> None:
    patches = series_patches.for_target(min_jaxlib, max_jaxlib)
    by_slug = {patch.slug: patch for patch in patches}
    chain = series_patches.with_dependencies(
        by_slug["fast-cpu-import"], patches)
    self.assertEqual([patch.behaviour for patch in chain], [
        "copy-true-copies", "finished-at-return", "fast-cpu-import"])
    self.assertEqual(series_patches.with_dependencies(
        by_slug["exception-classes"], patches), (by_slug["exception-classes"],))

  def test_a_behaviour_the_target_lacks_is_no_dependency(self) -> None:
    # From jaxlib 0.11.2 on, jaxlib moves non-row-major layouts right.
    patches = series_patches.for_target((0, 11, 2), (0, 13, 0))
    self.assertNotIn("non-row-major-layouts",
                     [patch.behaviour for patch in patches])
    after = dataclasses.replace(patches[-1],
                                depends_on=("non-row-major-layouts",))
    self.assertEqual(
        series_patches.with_dependencies(after, patches[:-1] + (after,)),
        (after,))

  def test_most_pull_requests_need_at_most_the_exception_classes(
      self) -> None:
    # Once the first merges, they go to main in any order.
    patches = series_patches.for_target((0, 11, 0), (0, 11, 1))
    after_first = [patch.slug for patch in patches
                   if set(patch.depends_on) <= {"exception-classes"}]
    self.assertGreaterEqual(len(after_first), 11)


class SpeedTest(absltest.TestCase):
  """What --check --speed holds a pull request's timings against."""

  def _patch(self, **fields: Any) -> series_patches.SeriesPatch:
    # A real slug: the description names its changelog entry.
    return series_patches.SeriesPatch(slug="finished-at-return", subject="s",
                                      body="b", claims=(), edits=(), **fields)

  def _speed(self, import_us: float, export_us: float) -> dict[str, float]:
    return {"base import": 20.0, "import": import_us,
            "base export": 2.0, "export": export_us}

  def test_within_the_tolerance_passes(self) -> None:
    self.assertEqual(series_speed._too_slow(self._patch(), self._speed(24.0, 2.4)),  # pylint: disable=protected-access
                     "")

  def test_a_slower_import_or_export_fails(self) -> None:
    slow = series_speed._too_slow(self._patch(), self._speed(26.0, 2.6))  # pylint: disable=protected-access
    self.assertIn("import takes 1.30x", slow)
    self.assertIn("export takes 1.30x", slow)

  def test_a_stated_cost_is_not_held_against_the_tolerance(self) -> None:
    patch = self._patch(speed_cost="Waiting for the copy costs 1 us.\n")
    self.assertEqual(series_speed._too_slow(patch, self._speed(30.0, 2.0)), "")  # pylint: disable=protected-access
    self.assertIn("## What it costs\n\nWaiting for the copy costs 1 us.",
                  series_patches.description(patch))

  def test_a_jaxlib_workaround_is_gated_and_stands_in_for_a_report(
      self) -> None:
    # Ungated, every import would pay for it: the target gets the report.
    workarounds = [patch for patch in series_patches.SERIES
                   if patch.only_below_jaxlib is not None]
    self.assertNotEmpty(workarounds)
    reports = {report.slug: report for report in series_reports.REPORTS}
    for patch in workarounds:
      with self.subTest(patch.slug):
        self.assertIs(patch.gated, True)
        self.assertIn("jaxlib_extension_version",
                      " ".join(edit.new for edit in patch.edits))
        self.assertEqual(reports[patch.stands_in_for].affected[1],
                         patch.only_below_jaxlib)

  def _timed(self, first: dict[str, float],
             *again: dict[str, float]) -> tuple[str, int]:
    """What _timed says of a patch read ``first``, then ``again``: its
    verdict and how many times it measured again."""
    with mock.patch.object(series_speed, "_speed",
                           side_effect=list(again)) as speed:
      _, slow = series_speed._timed(  # pylint: disable=protected-access
          self._patch(), first, pathlib.Path("base"), pathlib.Path("repo"),
          sys.executable)
    return slow, speed.call_count

  def test_a_reading_within_the_tolerance_is_not_measured_again(
      self) -> None:
    self.assertEqual(self._timed(self._speed(24.0, 2.0)), ("", 0))

  def test_a_slow_reading_that_does_not_repeat_passes(self) -> None:
    # A lucky fast base round: again, both trees read alike, and each keeps
    # its fastest round (20 and 22 us, 1.10x).
    lucky_base = self._speed(26.0, 2.0)
    alike = dict(self._speed(22.0, 2.0), **{"base import": 22.0})
    self.assertEqual(self._timed(lucky_base, alike), ("", 1))

  def test_a_slowdown_that_repeats_fails(self) -> None:
    slow, readings = self._timed(self._speed(26.0, 2.0),
                                 self._speed(27.0, 2.0))
    self.assertIn("import takes 1.30x", slow)
    self.assertEqual(readings, 1)

  def test_each_round_times_every_tree_once_and_each_keeps_its_fastest(
      self) -> None:
    trees = [pathlib.Path("base"), pathlib.Path("first"),
             pathlib.Path("second")]
    # Import times by tree, round by round: each tree is fastest in
    # another round.
    readings = {trees[0]: [22.0, 20.0, 21.0], trees[1]: [21.0, 30.0, 30.0],
                trees[2]: [23.0, 24.0, 22.0]}
    order: list[pathlib.Path] = []

    def fake_run(tree: pathlib.Path, python: str,
                 *args: str) -> subprocess.CompletedProcess[str]:
      del python, args
      order.append(tree)
      reading = readings[tree].pop(0)
      return subprocess.CompletedProcess(
          [], 0, f'{{"import": {reading}, "export": 2.0}}\n', "")

    with mock.patch.object(series_tree, "run", fake_run):
      times = series_speed._time_trees(trees, sys.executable, rounds=3)  # pylint: disable=protected-access
    self.assertEqual(order, trees * 3)
    self.assertEqual([each["import"] for each in times], [20.0, 21.0, 22.0])
    self.assertEqual([each["export"] for each in times], [2.0] * 3)

  def test_a_speed_patch_must_reach_its_target(self) -> None:
    patch = self._patch(speed_target=0.35)
    self.assertEqual(series_speed._too_slow(patch, self._speed(6.0, 2.0)), "")  # pylint: disable=protected-access
    self.assertIn("target is 0.35x",
                  series_speed._too_slow(patch, self._speed(8.0, 2.0)))  # pylint: disable=protected-access


class StackSpeedTest(absltest.TestCase):
  """What --check --speed holds the whole stack against."""

  def _speed(self, import_us: float, export_us: float) -> dict[str, float]:
    return {"base import": 20.0, "import": import_us,
            "base export": 2.0, "export": export_us}

  def test_within_the_targets_passes(self) -> None:
    self.assertEqual(series_speed._stack_too_slow(self._speed(7.0, 2.0)), "")  # pylint: disable=protected-access
    # The export's target allows the noise of whole processes.
    self.assertEqual(series_speed._stack_too_slow(self._speed(7.0, 2.08)), "")  # pylint: disable=protected-access

  def test_an_import_over_its_target_fails(self) -> None:
    self.assertEqual(series_speed._stack_too_slow(self._speed(7.2, 2.0)),  # pylint: disable=protected-access
                     "import takes 0.36x the base's time; the target is "
                     "0.35x")

  def test_a_slower_export_fails(self) -> None:
    self.assertIn("export takes 1.10x",
                  series_speed._stack_too_slow(self._speed(7.0, 2.2)))  # pylint: disable=protected-access


class NewTestsFailOnTheirBaseTest(absltest.TestCase):
  """A pull request's new JAX tests must fail on the tree it is cut on."""

  def test_names_the_new_tests_that_do_not_fail_before_the_change(
      self) -> None:
    anchor = "  def testUpstream(self):\n    pass\n"
    patch = series_patches.SeriesPatch(
        slug="finished-at-return", subject="s", body="b", claims=(),
        edits=(series_patches.Edit("jax/fixed.py", "", "FIXED = True\n"),),
        test_edits=(series_patches.Edit(series_patches.INTEROP_TEST, anchor,
                                        anchor + """
  def testShowsTheFix(self):
    from jax import fixed  # Only with the change.

  def testShowsNothing(self):
    pass

  @unittest.skip("needs a GPU")
  def testSkippedHere(self):
    pass
"""),))
    with tempfile.TemporaryDirectory() as scratch:
      repo = pathlib.Path(scratch)
      (repo / "jax").mkdir()
      (repo / "tests").mkdir()
      (repo / series_patches.INTEROP_TEST).write_text(
          "import unittest\n\n\nclass DLPackTest(unittest.TestCase):\n\n"
          + anchor)
      self.assertEqual(
          series_runs.tests_pass_before(repo, sys.executable, patch),
          {"testShowsNothing": "passed", "testSkippedHere": "skipped"})


class PullRequestFilesTest(parameterized.TestCase):
  """What goes beside each patch: its description and changelog entry."""

  @parameterized.named_parameters(
      (patch.slug, patch) for patch in series_patches.SERIES)
  def test_changelog_entry_is_an_item_under_unreleased(
      self, patch: series_patches.SeriesPatch) -> None:
    entry = series_patches.changelog(patch)
    lines = entry.splitlines()
    self.assertEqual(lines[:2], ["## Unreleased", ""])
    self.assertIn(lines[2], {"* New features", "* Changes", "* Bug fixes",
                             "* Breaking changes", "* Deprecations"})
    self.assertTrue(lines[3].startswith("  * "), lines[3])
    for line in lines[4:]:  # JAX aligns an item's lines with its first.
      self.assertTrue(line.startswith("    ") and line[4] != " ", line)
    for line in lines:
      self.assertLessEqual(len(line), 80, line)

  @parameterized.named_parameters(
      (patch.slug, patch) for patch in series_patches.SERIES)
  def test_description_says_what_was_wrong_and_how_to_test(
      self, patch: series_patches.SeriesPatch) -> None:
    text = series_patches.description(patch)
    self.assertTrue(text.startswith(f"# {patch.subject}\n"))
    self.assertIn(patch.body, text)  # What was wrong, measured, the clause.
    self.assertIn("Measured", patch.body)
    how = text[text.index("## How to test"):text.index("## Changelog")]
    # A test to run, or a probe that fails before the change.
    self.assertTrue(
        series_patches.added_tests(patch) and "pytest" in how
        or patch.typing_probe and patch.typing_probe in how
        or patch.runtime_probe and patch.runtime_probe in how, how)
    for test in series_patches.added_tests(patch):
      self.assertIn(test, how)
    self.assertIn(series_patches.changelog(patch), text)


# JAX's CHANGELOG.md as it reads between releases, in brief.
_JAX_CHANGELOG = """\
# Change log

<!--
Remember to align the itemized text with the first line of an item within a list.
-->

## Unreleased

* New features
  * Added a thing.

* Bug fixes
  * Fixed a thing.

## JAX 0.11.0 (July 16, 2026)

* Bug fixes
  * Fixed an older thing.
"""


class ChangelogEntryTest(parameterized.TestCase):
  """Each pull request's entry goes into JAX's CHANGELOG.md, in its commit."""

  def _by_section(self, section: str) -> series_patches.SeriesPatch:
    return next(patch for patch in series_patches.SERIES
                if series_patches.CHANGELOG_ENTRIES[patch.slug][0] == section)

  def _unreleased(self, text: str) -> str:
    return text[text.index("## Unreleased"):text.index("## JAX 0.11.0")]

  def _item(self, patch: series_patches.SeriesPatch) -> str:
    return series_patches.changelog(patch).split("\n", 3)[3].rstrip("\n")

  def test_goes_last_in_its_section_of_unreleased(self) -> None:
    patch = self._by_section("Bug fixes")
    text = series_patches.with_changelog_entry(_JAX_CHANGELOG, patch)
    self.assertEqual(
        self._unreleased(text),
        "## Unreleased\n\n* New features\n  * Added a thing.\n\n"
        "* Bug fixes\n  * Fixed a thing.\n" + self._item(patch) + "\n\n")
    # The released sections are untouched.
    self.assertEqual(text[text.index("## JAX 0.11.0"):],
                     _JAX_CHANGELOG[_JAX_CHANGELOG.index("## JAX 0.11.0"):])

  def test_makes_its_section_in_jax_order(self) -> None:
    patch = self._by_section("Changes")
    text = series_patches.with_changelog_entry(_JAX_CHANGELOG, patch)
    self.assertEqual(
        self._unreleased(text),
        "## Unreleased\n\n* New features\n  * Added a thing.\n\n"
        "* Changes\n" + self._item(patch) + "\n\n"
        "* Bug fixes\n  * Fixed a thing.\n\n")

  @parameterized.named_parameters(
      ("empty_unreleased", "# Change log\n\n## Unreleased\n\n"
       "## JAX 0.11.0 (July 16, 2026)\n"),
      ("no_unreleased", "# Change log\n\n## JAX 0.11.0 (July 16, 2026)\n"))
  def test_an_empty_release_gets_the_section(self, text: str) -> None:
    patch = self._by_section("Deprecations")
    self.assertEqual(
        series_patches.with_changelog_entry(text, patch),
        "# Change log\n\n## Unreleased\n\n* Deprecations\n"
        + self._item(patch) + "\n\n## JAX 0.11.0 (July 16, 2026)\n")

  def test_a_section_spelled_with_a_colon_is_the_same(self) -> None:
    patch = self._by_section("Bug fixes")
    text = series_patches.with_changelog_entry(
        _JAX_CHANGELOG.replace("* Bug fixes\n  * Fixed a thing.",
                               "* Bug Fixes:\n  * Fixed a thing."), patch)
    self.assertIn("* Bug Fixes:\n  * Fixed a thing.\n" + self._item(patch),
                  text)
    self.assertEqual(text.count("Bug"), 2)  # Its own and the release's.

  def test_twice_is_once(self) -> None:
    patch = self._by_section("Bug fixes")
    once = series_patches.with_changelog_entry(_JAX_CHANGELOG, patch)
    self.assertEqual(series_patches.with_changelog_entry(once, patch), once)

  @parameterized.named_parameters(
      (patch.slug, patch) for patch in series_patches.SERIES)
  def test_every_entry_lands_in_the_stand_in(
      self, patch: series_patches.SeriesPatch) -> None:
    target = series_tree.Target(pathlib.Path("/nonexistent"), "0.12.0.1",
                                (0, 11), (0, 12), False, False)
    stand_in = series_tree.changelog_stand_in(target)
    text = series_patches.with_changelog_entry(stand_in, patch)
    self.assertTrue(text.endswith(self._item(patch) + "\n\n## JAX 0.12.0.1\n"),
                    text)
    self.assertTrue(text.startswith(stand_in[:stand_in.index("## Unreleased")]))


class LintTest(absltest.TestCase):
  """JAX's pre-commit gates, as --check runs them after each step."""

  def setUp(self) -> None:
    super().setUp()
    why = _missing_gate_tools()
    if why is not None:
      self.skipTest(why)
    scratch = tempfile.TemporaryDirectory()
    self.addCleanup(scratch.cleanup)
    # In a hidden, ignored folder, as nox's TMPDIR (.nox/) puts a scratch
    # tree.
    ignoring = pathlib.Path(scratch.name)
    (ignoring / ".gitignore").write_text("*\n")
    self.repo = ignoring / ".nox" / "tree"
    self.repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(self.repo)], check=True)
    (self.repo / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.pyrefly]
        project-includes = ["jax/**/*.py*"]
        project-excludes = ["jax/excluded/*.py"]

        [tool.ruff]
        line-length = 80
        indent-width = 2

        [tool.ruff.lint]
        select = ["F", "W"]
        """))
    (self.repo / "jax").mkdir()
    self._write("x: int = 1\n")

  def _write(self, text: str) -> None:
    (self.repo / "jax/m.py").write_text(text)

  def _lint(self, base: Any = None,
            ruff_before: Any = None) -> dict[str, str]:
    return series_gates.lint(self.repo, sys.executable, ["jax/m.py"],
                             ruff_before or collections.Counter(), base)

  def _ruff_findings(self) -> Any:
    return series_gates.ruff_findings(self.repo, sys.executable, ["jax/m.py"])

  def test_clean_code_passes_every_gate(self) -> None:
    base = series_gates.pyrefly_errors(self.repo, sys.executable)
    self.assertEqual(self._lint(base), {})

  def test_hooks_find_whitespace_end_of_file_debuggers_and_syntax(
      self) -> None:
    self._write("import pdb\nx = 1 \n\n")
    hooks = self._lint()["pre-commit hooks"]
    self.assertIn("jax/m.py:2: trailing-whitespace", hooks)
    self.assertIn("jax/m.py: end-of-file-fixer", hooks)
    self.assertIn("jax/m.py:1: debug-statements", hooks)
    self._write("def f(:\n")
    self.assertIn("check-ast", self._lint()["pre-commit hooks"])

  def test_ruff_runs_with_the_tree_configuration(self) -> None:
    self._write("import os\nx: int = 1\n")  # F401, in the tree's selection.
    self.assertIn("jax/m.py: F401", self._lint()["ruff"])
    self._write("x: int = 1  # " + "a" * 80 + "\n")  # E501 is not selected.
    self.assertNotIn("ruff", self._lint())

  def test_ruff_reports_only_findings_the_step_adds(self) -> None:
    # A release's tree may already fail the pinned ruff.
    self._write("import os\nx: int = 1\n")
    before = self._ruff_findings()
    self.assertLen(before, 1)
    self._write("\n\nimport os\nx: int = 1\n")  # The same finding, moved.
    self.assertNotIn("ruff", self._lint(ruff_before=before))
    self._write("import os\nimport sys\nx: int = 1\n")
    ruff = self._lint(ruff_before=before)["ruff"]
    self.assertIn("`sys` imported but unused", ruff)
    self.assertNotIn("`os`", ruff)

  def test_pyrefly_checks_a_tree_in_a_hidden_ignored_folder(self) -> None:
    self._write("x: int = 'a'\n")
    (self.repo / "jax/excluded").mkdir()
    (self.repo / "jax/excluded/e.py").write_text("y: int = 'a'\n")
    errors = series_gates.pyrefly_errors(self.repo, sys.executable)
    # The tree's own excludes still hold.
    self.assertEqual([path for path, _, _ in errors], ["jax/m.py"])

  def test_pyrefly_reports_only_errors_the_base_lacks(self) -> None:
    self._write("x: int = 'a'\n")
    base = series_gates.pyrefly_errors(self.repo, sys.executable)
    self.assertLen(base, 1)
    self._write("\n\nx: int = 'a'\n")  # The same error, moved down.
    self.assertNotIn("pyrefly (whole tree)", self._lint(base))
    self._write("x: int = 'a'\ny: str = 1\n")
    self.assertIn("jax/m.py: [bad-assignment]",
                  self._lint(base)["pyrefly (whole tree)"])


class AuthorTest(absltest.TestCase):
  """Who the patches say wrote them: --author, or git's configuration."""

  def setUp(self) -> None:
    super().setUp()
    scratch = tempfile.TemporaryDirectory()
    self.addCleanup(scratch.cleanup)
    self.root = pathlib.Path(scratch.name)
    # No global or system configuration: only what a test sets.
    self.enter_context(mock.patch.dict(os.environ, {
        "HOME": str(self.root), "XDG_CONFIG_HOME": str(self.root),
        "GIT_CONFIG_NOSYSTEM": "1"}))

  def test_author_argument_is_parsed(self) -> None:
    self.assertEqual(
        series_tree.author_from(" Ada Lovelace <ada@example.com> ", self.root),
        ("Ada Lovelace", "ada@example.com"))

  def test_malformed_author_is_refused(self) -> None:
    for author in ("Ada", "<ada@example.com>", "Ada <ada>", "Ada ada@x.y"):
      with self.subTest(author):
        with self.assertRaisesRegex(series_tree.SeriesError, "Name <email>"):
          series_tree.author_from(author, self.root)

  def test_git_config_of_the_target_is_the_default(self) -> None:
    subprocess.run(["git", "init", "-q", str(self.root)], check=True)
    for key, value in (("user.name", "Grace Hopper"),
                       ("user.email", "grace@example.com")):
      subprocess.run(["git", "-C", str(self.root), "config", key, value],
                     check=True)
    self.assertEqual(series_tree.author_from(None, self.root),
                     ("Grace Hopper", "grace@example.com"))

  def test_no_author_anywhere_is_refused(self) -> None:
    with self.assertRaisesRegex(series_tree.SeriesError, "--author"):
      series_tree.author_from(None, self.root)


class RuntimeProbeTest(absltest.TestCase):
  """What a runtime probe checks, install() does on every JAX."""

  def test_runtime_probes_pass_under_install(self) -> None:
    probed = [patch for patch in series_patches.SERIES if patch.runtime_probe]
    self.assertNotEmpty(probed)
    for patch in probed:
      with self.subTest(patch.slug):
        # In a process of its own, as the series runs it: a probe may
        # replace JAX's functions (fast-cpu-import's replaces
        # jnp.asarray) and never put them back.
        run = fresh_process.run("import jax_patch\njax_patch.install()\n"
                                + patch.runtime_probe)
        self.assertEqual(run.returncode, 0, run.stderr[-3000:])


class TargetTest(absltest.TestCase):
  """What the series reads from a JAX tree, and what it refuses."""

  def setUp(self) -> None:
    super().setUp()
    scratch = tempfile.TemporaryDirectory()
    self.addCleanup(scratch.cleanup)
    self.root = pathlib.Path(scratch.name)

  def test_reads_version_and_jaxlib_range(self) -> None:
    target = series_tree.read_target(_fake_tree(self.root, "0.11.2"))
    self.assertEqual(target.jax_version, "0.99.0")
    self.assertEqual(target.min_jaxlib, (0, 11, 2))
    self.assertEqual(target.max_jaxlib, (0, 99, 0))
    self.assertFalse(target.has_interop_test)

  def test_refuses_a_jax_supporting_jaxlib_older_than_0_11(self) -> None:
    with self.assertRaisesRegex(series_tree.SeriesError, "jax-patch vendor"):
      series_tree.read_target(_fake_tree(self.root, "0.10.2"))

  def test_refuses_a_folder_without_jax(self) -> None:
    with self.assertRaisesRegex(series_tree.SeriesError, "not a JAX tree"):
      series_tree.read_target(self.root)

  def test_a_jaxlib_fix_comes_gated_only_where_the_range_straddles_it(
      self) -> None:
    slugs = lambda min_jaxlib, max_jaxlib: [
        patch.slug for patch
        in series_patches.for_target(min_jaxlib, max_jaxlib)]
    # Every jaxlib before 0.11.2 (JAX main at 0.11.1): the report instead.
    self.assertEmpty([slug for slug in slugs((0, 11, 0), (0, 11, 1))
                      if slug.startswith("non-row-major")])
    self.assertIn(series_reports.NON_ROW_MAJOR_MOVED_WRONGLY,
                  series_reports.for_range((0, 11, 0), (0, 11, 1)))
    # A range reaching 0.11.2: gated on jaxlib_extension_version.
    self.assertIn("non-row-major-layouts-before-jaxlib-0.11.2",
                  slugs((0, 11, 0), (0, 11, 2)))
    # None of it where every jaxlib has the fix.
    self.assertEmpty([slug for slug in slugs((0, 11, 2), (0, 12, 0))
                      if slug.startswith("non-row-major")])

  def test_creates_a_new_module_and_refuses_to_overwrite_one(self) -> None:
    tree = _fake_tree(self.root / "jax-src", "0.11.0", "")
    (tree / _NEW_MODULE).write_text("# taken\n")
    creating = series_patches.SeriesPatch(
        slug="creates", subject="s", body="b", claims=(),
        edits=(series_patches.Edit(_NEW_MODULE, "", "x\n"),))
    with self.assertRaisesRegex(series_tree.SeriesError,
                                "which it creates, exists"):
      series_tree.apply(creating, tree, with_tests=False)
    (tree / _NEW_MODULE).unlink()
    self.assertEqual(series_tree.apply(creating, tree, with_tests=False),
                     [_NEW_MODULE])
    self.assertEqual((tree / _NEW_MODULE).read_text(), "x\n")

  def test_names_the_patch_whose_text_is_missing(self) -> None:
    tree = _fake_tree(self.root / "jax-src", "0.11.0", "# no from_dlpack\n")
    with self.assertRaisesRegex(series_tree.SeriesError,
                                "patch 'exception-classes'.*0 copies"):
      series_write.write_series(series_tree.read_target(tree),
                                self.root / "out", _AUTHOR)


class VersionMatrixTest(absltest.TestCase):
  """What the version matrix leaves to the series session (noxfile.py)."""

  def test_the_cases_it_leaves_to_the_series_session_exist(self) -> None:
    tree = ast.parse((_ROOT / "noxfile.py").read_text())
    left, = (node.value for node in ast.walk(tree)
             if isinstance(node, ast.Assign)
             and any(isinstance(target, ast.Name)
                     and target.id == "SERIES_SESSION_CHECKS"
                     for target in node.targets))
    names = ast.literal_eval(left)
    self.assertNotEmpty(names)
    for name in names:
      self.assertTrue(callable(getattr(InstalledJaxSeriesTest, name, None)),
                      name)


class ExtrasTest(parameterized.TestCase):
  """Without the extra a test needs, it skips, saying which extra."""

  @parameterized.parameters("pyrefly", "ruff")
  def test_lint_tests_skip_naming_the_series_extra(self, tool: str) -> None:
    find_spec = importlib.util.find_spec
    with mock.patch.object(
        importlib.util, "find_spec",
        side_effect=lambda name, *args: (
            None if name == tool else find_spec(name, *args))):
      result = unittest.TestResult()
      LintTest("test_clean_code_passes_every_gate").run(result)
    self.assertEmpty(result.errors + result.failures)
    (_, reason), = result.skipped
    # Where the other tool is missing too, the reason names both.
    self.assertRegex(reason, rf"^needs (\w+ and )?{tool}\b")
    self.assertIn("'series' extra", reason)


@absltest.skipIf(
    _installed_target() is None,
    f"the series is for JAX on jaxlib 0.11 or later; JAX {jax.__version__} "
    "supports older jaxlib (the version matrix runs these on 0.12.0.1)")
@absltest.skipIf(
    conformance.x64_enabled(),
    "the series states its claims and probes with jax_enable_x64 off and "
    "its checks run them in that mode whatever this process's, so the "
    "x64-off run of this suite checks the same (JAX's own DLPack test runs "
    "at each step in both modes on JAX main, outside CI)")
class InstalledJaxSeriesTest(absltest.TestCase):
  """The series written for, and applied to, the installed JAX."""

  scratch: Any
  patches: list[pathlib.Path]
  stack: list[pathlib.Path]
  _checked: tuple[list[series_check.StepResult],
                 list[series_check.StepResult]] | None

  @classmethod
  def setUpClass(cls) -> None:
    super().setUpClass()
    why = _missing_gate_tools()
    if why is not None:
      raise unittest.SkipTest(why)
    cls.scratch = tempfile.TemporaryDirectory()
    out = pathlib.Path(cls.scratch.name) / "patches"
    target = series_tree.read_target(_INSTALLED_ROOT)
    cls.patches = series_write.write_series(target, out, _AUTHOR)
    cls.stack = series_write.stack_files(out)
    cls._checked = None

  @classmethod
  def _check(cls) -> tuple[list[series_check.StepResult],
                          list[series_check.StepResult]]:
    """The stack's steps and the pull requests alone, checked once (minutes:
    the version matrix's run on JAX 0.12.0.1 leaves these cases to the
    series session, which checks the same files; noxfile.py)."""
    checked = cls._checked
    if checked is None:
      target = series_tree.read_target(_INSTALLED_ROOT)
      # Each check waits on processes of its own, in a scratch tree of its
      # own: side by side, they take half the time on two cores.
      with futures.ThreadPoolExecutor(max_workers=2) as pool:
        steps = pool.submit(series_check.check_series, target, cls.stack,
                            python=sys.executable)
        alone = pool.submit(series_check.check_alone, target, cls.patches,
                            python=sys.executable)
        checked = cls._checked = steps.result(), alone.result()
    return checked

  def test_every_pull_request_applies_on_its_dependencies_alone(
      self) -> None:
    alone = self._check()[1]
    self.assertLen(alone, len(_installed_series()))
    for step in alone:
      with self.subTest(step.subject):
        self.assertTrue(step.applied, step.type_check)
        self.assertTrue(step.imports)
        self.assertEqual(step.type_check, "ok")
        self.assertEqual(step.lint, {})
        self.assertEmpty(step.failed_claims)
        self.assertEmpty(step.failed_probes)

  def test_speed_is_timed_against_the_tree_the_pull_request_is_cut_on(
      self) -> None:
    # The first pull request goes on the base; the first that needs it goes
    # after it, whose cost must not be counted again in the dependent's;
    # those between go on the base too. The stand-in clock reads a tree
    # holding the first's change 4 us slower.
    target = series_tree.read_target(_INSTALLED_ROOT)
    first = _installed_series()[0]
    count = 1 + next(
        index for index, patch in enumerate(_installed_series())
        if patch.depends_on == (first.behaviour,))
    # Those between go on the base alone: one tree each.
    self.assertEqual([patch.depends_on
                      for patch in _installed_series()[1:count - 1]],
                     [()] * (count - 2))
    first_class = "class _CopyRequiredError("
    self.assertIn(first_class, "".join(edit.new for edit in first.edits))
    timed: list[str] = []

    def fake_time_trees(trees: list[pathlib.Path],
                        python: str) -> list[dict[str, float]]:
      del python
      texts = [(tree / series_patches.DLPACK).read_text() for tree in trees]
      timed.extend(texts)
      return [{"import": 24.0 if first_class in text else 20.0,
               "export": 2.0} for text in texts]

    with mock.patch.object(series_speed, "_time_trees", fake_time_trees), \
        mock.patch.object(series_speed, "_speed", side_effect=AssertionError(
            "measured again: a reading was over the tolerance")):
      steps = series_check.check_alone(target, self.patches[:count],
                                       python=sys.executable, speed=True)
    self.assertEqual([step.slow for step in steps], [""] * count)
    # Only the dependent is cut on the first's tree.
    self.assertEqual([step.speed["base import"] for step in steps],
                     [20.0] * (count - 1) + [24.0])
    self.assertEqual([step.speed["import"] for step in steps],
                     [24.0] + [20.0] * (count - 2) + [24.0])
    # Each tree timed once: the base and each pull request's (the first's
    # is also the one the dependent is cut on).
    self.assertLen(timed, count + 1)
    self.assertLen(set(timed), count + 1)

  def test_a_pull_request_without_dependencies_applies_to_the_base(
      self) -> None:
    target = series_tree.read_target(_INSTALLED_ROOT)
    numbers = series_plan.dependency_numbers(target)
    alone = [patch_file for patch_file, patch
             in zip(self.patches, _installed_series())
             if not numbers[series_plan.pull_request_number(patch)]]
    self.assertGreaterEqual(len(alone), 5)
    with tempfile.TemporaryDirectory() as scratch:
      repo = series_tree.scratch_repo(target, pathlib.Path(scratch))
      for patch_file in alone:
        with self.subTest(patch_file.name):
          done = subprocess.run(
              ["git", "-C", str(repo), "apply", "--check", str(patch_file)],
              capture_output=True, text=True, check=False)
          self.assertEqual(done.returncode, 0, done.stderr)

  def test_a_merged_pull_request_drops_out_and_frees_those_after_it(
      self) -> None:
    target = series_tree.read_target(_INSTALLED_ROOT)
    first, *_ = _installed_series()
    with tempfile.TemporaryDirectory() as scratch:
      main = series_tree.scratch_repo(target, pathlib.Path(scratch))
      series_tree.apply(first, main, with_tests=False)
      merged = series_tree.read_target(main)
      self.assertEqual(series_plan.merged_in(merged), [first.subject])
      rest = series_plan.patches_for(merged)
      self.assertEqual(rest, _installed_series()[1:])
      # One that raises the first's class: only the first went before it.
      raising = rest.index(next(patch for patch in rest
                                if patch.depends_on == (first.behaviour,)))
      self.assertEqual(series_plan.dependency_numbers(merged)[
          series_plan.pull_request_number(rest[raising])], [])
      out = pathlib.Path(scratch) / "out"
      written = series_write.write_series(merged, out, _AUTHOR)
      self.assertLen(written, len(rest))
      done = subprocess.run(
          ["git", "-C", str(main), "apply", "--check", str(written[raising])],
          capture_output=True, text=True, check=False)
      self.assertEqual(done.returncode, 0, done.stderr)

  def test_the_queue_merges_in_order_rebasing_changelog_conflicts(
      self) -> None:
    queue = series_merge_queue.merge_queue(
        series_tree.read_target(_INSTALLED_ROOT))
    self.assertEqual(queue.conflicts, {})
    # Pull requests that add to the same section conflict in CHANGELOG.md,
    # and merge once rebased: without the rebase, these were conflicts.
    self.assertNotEmpty(queue.rebased)
    self.assertContainsSubset(queue.rebased,
                              [patch.subject for patch in _installed_series()])
    self.assertIn([series_patches.CHANGELOG], queue.rebased.values())

  def test_the_stack_holds_the_same_commits(self) -> None:
    self.assertLen(self.stack, len(self.patches))
    for stacked, pull_request in zip(self.stack, self.patches):
      self.assertEqual(stacked.name, pull_request.name)

  @classmethod
  def tearDownClass(cls) -> None:
    cls.scratch.cleanup()
    super().tearDownClass()

  def test_writes_one_format_patch_per_behaviour(self) -> None:
    self.assertLen(self.patches, len(_installed_series()))
    for patch_file, patch in zip(self.patches, _installed_series()):
      text = patch_file.read_text().replace("\n ", " ")  # Unfolded.
      self.assertTrue(text.startswith("From "))
      self.assertIn("From: A Contributor <contributor@example.com>\n", text)
      self.assertIn(f"Subject: [PATCH] {patch.subject}\n", text)
      # Not with_suffix: a subject's "jax.Array" puts a dot in the name.
      stem = str(patch_file)[:-len(".patch")]
      dependencies = series_patches.with_dependencies(
          patch, _installed_series())[:-1]
      self.assertEqual(pathlib.Path(f"{stem}.description.md").read_text(),
                       series_patches.description(patch, dependencies))
      self.assertFalse(pathlib.Path(f"{stem}.changelog.md").exists())
      # Its entry is in the commit, as JAX's fixes carry theirs.
      changelog_diff = text[text.index("diff --git a/CHANGELOG.md"):]
      changelog_diff = changelog_diff[:changelog_diff.find("\ndiff --git",
                                                           1) % len(text)]
      added = "\n".join(line[1:] for line in changelog_diff.splitlines()
                        if line.startswith("+") and not line.startswith("+++"))
      item = series_patches.changelog(patch).split("\n", 3)[3]
      self.assertIn(" ".join(item.split()), " ".join(added.split()))
      self.assertIn(patch.body.splitlines()[0], text)
      self.assertIn("diff --git a/jax/_src/", text)
      for path in (edit.path for edit in patch.edits if not edit.old):
        self.assertIn(f"diff --git a/{path} b/{path}\nnew file mode", text)

  def test_the_queue_file_names_each_pull_request_and_its_dependencies(
      self) -> None:
    queue = series_write.read_queue(self.patches[0].parent)
    self.assertEqual([entry["patch"] for entry in queue],
                     [patch_file.name for patch_file in self.patches])
    self.assertEqual([entry["title"] for entry in queue],
                     [patch.subject for patch in _installed_series()])
    by_number = {int(patch_file.name[:4]): patch_file.name
                 for patch_file in self.patches}
    dependencies = series_plan.dependency_numbers(
        series_tree.read_target(_INSTALLED_ROOT))
    titles = {entry["patch"]: entry["title"] for entry in queue}
    for entry in queue:
      with self.subTest(entry["patch"]):
        self.assertEqual(entry["depends_on"], [
            by_number[number]
            for number in dependencies[int(entry["patch"][:4])]])
        # The description names each by title, as a reviewer reads it.
        stem = entry["patch"][:-len(".patch")]
        description = (self.patches[0].parent
                       / f"{stem}.description.md").read_text()
        for name in entry["depends_on"]:
          self.assertIn(f"- {titles[name]}\n", description)
        self.assertEqual("## Depends on" in description,
                         bool(entry["depends_on"]))

  def test_every_step_applies_imports_and_passes_its_claims(self) -> None:
    steps = self._check()[0]
    self.assertLen(steps, len(_installed_series()))
    for step in steps:
      with self.subTest(step.subject):
        self.assertTrue(step.applied)
        self.assertTrue(step.imports)
        self.assertEqual(step.type_check, "ok")
        self.assertEqual(step.lint, {})
        self.assertEmpty(step.failed_claims)
        self.assertEmpty(step.failed_probes)
        self.assertEmpty(step.failed_after_series)

  def test_upstream_fails_every_claimed_case(self) -> None:
    # A patch for jaxlib before X claims what jaxlib X on does itself.
    showing = [patch for patch in _installed_series()
               if patch.shows_on_jaxlib(_INSTALLED_JAXLIB)]
    self.assertNotEmpty(showing)
    passing = []
    for case in conformance.CASES:
      claimed = any(case.name in patch.claims for patch in showing)
      if claimed and conformance.run_case(case, jnp.from_dlpack)[1]:
        passing.append(case.name)
    self.assertEmpty(passing, "claimed, but upstream passes already")

  def test_install_fails_no_case(self) -> None:
    # What the fully applied series is held to (the next test).
    with jax_patch.patched():
      failed_by_install = {
          case.name for case in conformance.CASES
          if conformance.run_case(case, jax_patch.from_dlpack)[1] is False}
    self.assertEmpty(failed_by_install)

  def test_fully_applied_series_fails_no_case_but_those_left_undone(
      self) -> None:
    # After the last step every case ran on the full series: none failed,
    # and the run itself did not fail either, but those left undone.
    self.assertEmpty(self._check()[0][-1].failed_after_series)


class SeriesCheckExitStatusTest(parameterized.TestCase):
  """`jax-patch series --check` exits 1 when any check fails, a report whose
  reproducer contradicts its stated jaxlib range included.

  The stack and the reproducers are stand-ins: which reproducer contradicts
  its range depends on the jaxlib installed, which no one machine varies.
  """

  def _exit_status(self, reports: list[series_check.ReportResult]) -> int:
    target = mock.Mock(spec=series_tree.Target)
    with mock.patch.object(series_write, "stack_files", return_value=[]), \
        mock.patch.object(series_check, "check_series", return_value=[]), \
        mock.patch.object(series_check, "check_reports",
                          return_value=reports), \
        mock.patch("sys.stdout"):
      from jax_patch._delivery import series  # pylint: disable=g-import-not-at-top
      return series.check(target, pathlib.Path("unused"), [],
                          python=sys.executable, stack_only=True)

  @parameterized.named_parameters(
      ("reproduces_outside_its_range", "reproduces",
       "reproduced on jaxlib 0.12.0, outside its range"),
      ("fixed_inside_its_range", "fixed",
       "did not reproduce on jaxlib 0.10.2, inside its range"),
      ("reproducer_error", "error", "the reproducer failed to run"))
  def test_a_contradicting_report_fails_the_check(self, result: str,
                                                  problem: str) -> None:
    report = series_check.ReportResult(20, "a defect", result, "", problem)
    self.assertEqual(self._exit_status([report]), 1)

  def test_reports_that_agree_pass_the_check(self) -> None:
    reports = [series_check.ReportResult(20, "a defect", "reproduces", "", ""),
               series_check.ReportResult(21, "another", "fixed", "", "")]
    self.assertEqual(self._exit_status(reports), 0)

  def test_one_contradiction_among_agreeing_reports_fails(self) -> None:
    reports = [series_check.ReportResult(20, "a defect", "reproduces", "", ""),
               series_check.ReportResult(21, "another", "fixed", "",
                                         "did not reproduce, inside its range")]
    self.assertEqual(self._exit_status(reports), 1)


if __name__ == "__main__":
  absltest.main()
