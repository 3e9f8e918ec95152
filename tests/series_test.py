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


"""The series applies the patch files with git and checks what it applied.

What runs here holds without JAX's repository: the patch set's own files
(``upstream/``), CHANGELOG.md placement on a file shaped as JAX's, git
applying pull requests to small trees made here, conflicts reported by
patch, file and hunk, JAX's pre-commit gates, the reproducers' outcomes and
the speed targets. CI's `series` session applies the queue to the newest
JAX's sdist and checks it whole; the check on JAX main runs where its
repository can be fetched (upstream/README.md).
"""

from __future__ import annotations

import collections
import importlib.util
import io
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from typing import Any
import unittest
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized

from jax_patch._delivery import series
from jax_patch._delivery import series_changelog
from jax_patch._delivery import series_check
from jax_patch._delivery import series_gates
from jax_patch._delivery import series_runs
from jax_patch._delivery import series_speed
from jax_patch._delivery import series_tree
from jax_patch._delivery import upstream_set
from jax_patch.testing import conformance

_PATCH_SET = upstream_set.read(upstream_set.default_root())
_CASE_NAMES = {case.name for case in conformance.CASES}

# A CHANGELOG.md shaped as JAX's: a title, a release in progress with
# sections, an earlier release.
_CHANGELOG = textwrap.dedent("""\
    # Change log

    Notes for maintainers.

    ## Unreleased

    * New features
      * A feature.

    * Changes
      * A change,
        on two lines.

    * Bug fixes
      * A fix.

    ## JAX 0.11.0

    * Bug fixes
      * An old fix.
    """)

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


def _fake_tree(root: pathlib.Path, minimum_jaxlib: str,
               dlpack_source: str = "") -> pathlib.Path:
  (root / "jax" / "_src").mkdir(parents=True)
  (root / "jax" / "version.py").write_text(textwrap.dedent(f"""\
      _version = "0.99.0"
      _minimum_jaxlib_version = '{minimum_jaxlib}'
      """))
  (root / "jax" / "_src" / "dlpack.py").write_text(dlpack_source)
  return root


def _git(repo: pathlib.Path, *args: str) -> str:
  return series_tree.git(repo, *args)


class PatchSetTest(absltest.TestCase):
  """What the series reads from upstream/."""

  def test_reads_the_queue_in_order_with_its_dependencies(self) -> None:
    numbers = [pr.number for pr in _PATCH_SET.pull_requests]
    self.assertEqual(numbers, sorted(numbers))
    for pr in _PATCH_SET.pull_requests:
      self.assertContainsSubset(pr.depends_on,
                                [n for n in numbers if n < pr.number])

  def test_left_undone_names_real_cases_each_with_a_reason(self) -> None:
    self.assertEmpty(set(_PATCH_SET.left_undone) - _CASE_NAMES)
    self.assertTrue(all(reason.strip()
                        for reason in _PATCH_SET.left_undone.values()))

  def test_added_tests_are_the_test_methods_a_patch_adds(self) -> None:
    first = _PATCH_SET.pull_requests[0]
    added = upstream_set.added_tests(first.text())
    self.assertNotEmpty(added)
    for name in added:
      self.assertIn(f"+  def {name}(", first.text())

  def test_readme_names_the_base_exactly(self) -> None:
    readme = (_PATCH_SET.root / "README.md").read_text()
    said = " ".join(readme.split())
    # The sdist whose jax/ the queue is cut on, and the main commit under it.
    self.assertIn("jax==0.12.1", said)
    self.assertRegex(said, r"sha256 `[0-9a-f]{64}`")
    self.assertRegex(said, r"`[0-9a-f]{40}`")

  def test_a_folder_without_a_queue_is_refused(self) -> None:
    with tempfile.TemporaryDirectory() as empty:
      with self.assertRaisesRegex(upstream_set.PatchSetError,
                                  "not a patch set"):
        upstream_set.read(pathlib.Path(empty))


class ChangelogTest(parameterized.TestCase):
  """CHANGELOG.md entries placed as a maintainer merges them."""

  def _patch(self, added: str, context: str = "  * A fix.\n") -> str:
    lines = ["diff --git a/CHANGELOG.md b/CHANGELOG.md",
             "--- a/CHANGELOG.md", "+++ b/CHANGELOG.md", "@@ -1,1 +1,2 @@"]
    lines += [" " + line for line in context.splitlines()]
    lines += ["+" + line for line in added.splitlines()]
    lines += [" ", " ## JAX 0.11.0"]
    return "\n".join(lines) + "\n"

  def _placed(self, text: str, patch: str) -> str:
    entry = series_changelog.entry_of(patch)
    assert entry is not None
    return series_changelog.place(text, entry)

  def test_an_entry_goes_last_in_the_section_its_context_is_in(self) -> None:
    text = self._placed(_CHANGELOG, self._patch("  * Another fix.\n"))
    self.assertIn("* Bug fixes\n  * A fix.\n  * Another fix.\n\n## JAX 0.11.0",
                  text)

  def test_entries_of_one_section_keep_their_merge_order(self) -> None:
    text = _CHANGELOG
    for fix in ("  * Second.\n", "  * Third.\n"):
      text = self._placed(text, self._patch(fix))
    self.assertIn("  * A fix.\n  * Second.\n  * Third.\n", text)

  def test_an_entry_under_a_context_elsewhere_finds_its_section(self) -> None:
    text = self._placed(_CHANGELOG, self._patch(
        "  * More.\n", context="    on two lines.\n"))
    self.assertIn("  * A change,\n    on two lines.\n  * More.\n\n* Bug",
                  text)

  def test_a_missing_section_is_made_after_its_context(self) -> None:
    patch = self._patch("* Deprecations\n  * Deprecated.\n\n",
                        context="    on two lines.\n")
    entry = series_changelog.entry_of(patch)
    assert entry is not None
    self.assertEqual(entry.section, "* Deprecations")
    self.assertIn("on two lines.\n\n* Deprecations\n  * Deprecated.\n\n"
                  "* Bug fixes", self._placed(_CHANGELOG, patch))

  def test_an_existing_section_takes_a_heading_entry_without_the_heading(
      self) -> None:
    text = self._placed(_CHANGELOG, self._patch(
        "* Bug fixes\n  * Fixed.\n\n", context="    on two lines.\n"))
    self.assertEqual(text.count("* Bug fixes"), 2)  # And the old release's.
    self.assertIn("  * A fix.\n  * Fixed.\n\n## JAX", text)

  def test_other_lines_are_left_as_they_are(self) -> None:
    original = _CHANGELOG + "\n\n## JAX 0.10.0\n"
    text = self._placed(original, self._patch("  * Another fix.\n"))
    self.assertEqual(text.replace("  * Another fix.\n", ""), original)

  def test_a_hunk_that_removes_lines_is_refused(self) -> None:
    patch = self._patch("  * New.\n").replace("@@ -1,1 +1,2 @@",
                                             "@@ -1,1 +1,2 @@\n-  * Old.")
    with self.assertRaises(series_changelog.ChangelogError):
      series_changelog.entry_of(patch)

  def test_a_patch_without_a_changelog_hunk_has_no_entry(self) -> None:
    self.assertIsNone(series_changelog.entry_of(
        "diff --git a/jax/x.py b/jax/x.py\n@@ -1 +1 @@\n-a\n+b\n"))

  @parameterized.named_parameters(
      (pr.patch.name[:4], pr) for pr in _PATCH_SET.pull_requests)
  def test_each_pull_request_adds_one_entry_and_removes_nothing(
      self, pr: upstream_set.PullRequest) -> None:
    entry = series_changelog.entry_of(pr.text())
    self.assertIsNotNone(entry)
    assert entry is not None
    self.assertNotEmpty(entry.lines)
    self.assertTrue(all(line.startswith("  ") for line in entry.lines))


class _CutOnATreeTest(absltest.TestCase):
  """A scratch JAX tree, and pull requests cut on it with git, as the real
  ones are."""

  def setUp(self) -> None:
    super().setUp()
    scratch = tempfile.TemporaryDirectory()
    self.addCleanup(scratch.cleanup)
    self.scratch = pathlib.Path(scratch.name)
    self.root = _fake_tree(self.scratch / "jax-src", "0.11.0",
                           "one\ntwo\nthree\n")
    (self.root / "CHANGELOG.md").write_text(_CHANGELOG)
    self.add_to_tree(self.root)
    self.author = self.scratch / "author"
    subprocess.run(["cp", "-r", str(self.root), str(self.author)], check=True)
    _git(self.author, "init", "-q")
    _git(self.author, "add", "-A")
    _git(self.author, "commit", "-q", "-m", "base")
    self.base = _git(self.author, "rev-parse", "HEAD").strip()

  def add_to_tree(self, root: pathlib.Path) -> None:
    """What a test's tree holds besides jax/ and CHANGELOG.md."""
    del root

  def cut(self, number: int, title: str,
          edit: Callable[[pathlib.Path], None]) -> upstream_set.PullRequest:
    """A pull request on the base: ``edit`` changes the author's tree."""
    _git(self.author, "checkout", "-q", "-B", f"pr{number}", self.base)
    edit(self.author)
    _git(self.author, "commit", "-q", "-am", title)
    out = _git(self.author, "format-patch", "-1", "--zero-commit",
               "--start-number", str(number), "-o", str(self.scratch))
    return upstream_set.PullRequest(number, pathlib.Path(out.strip()), title,
                                    ())


def _replace(path: str, old: str, new: str) -> Callable[[pathlib.Path], None]:
  """An edit of ``path`` (in the tree it is given) replacing ``old``."""
  def edit(tree: pathlib.Path) -> None:
    file = tree / path
    file.write_text(file.read_text().replace(old, new))
  return edit


class ApplyTest(_CutOnATreeTest):
  """git applies pull requests to a scratch copy; conflicts say where."""

  def setUp(self) -> None:
    super().setUp()
    # Two pull requests cut on the tree, each with its CHANGELOG entry
    # last in the same section.
    self.patches = []
    for number, (old, new) in enumerate((("one", "ONE"), ("three", "THREE")),
                                        start=1):
      def edit(tree: pathlib.Path, old: str = old, new: str = new,
               number: int = number) -> None:
        _replace("jax/_src/dlpack.py", old, new)(tree)
        _replace("CHANGELOG.md", "  * A fix.\n",
                 f"  * A fix.\n  * Fix {number}.\n")(tree)
      self.patches.append(self.cut(number, f"fix {number}", edit))
    self.target = series_tree.read_target(self.root)

  def _repo(self) -> pathlib.Path:
    return series_tree.scratch_repo(self.target, self.scratch / "s",
                                    ["CHANGELOG.md"])

  def test_independent_pull_requests_both_apply_with_both_entries(
      self) -> None:
    repo = self._repo()
    for pr in self.patches:
      self.assertEqual(series_tree.apply_pull_request(repo, pr), [])
    self.assertEqual((repo / "jax/_src/dlpack.py").read_text(),
                     "ONE\ntwo\nTHREE\n")
    self.assertIn("  * A fix.\n  * Fix 1.\n  * Fix 2.\n",
                  (repo / "CHANGELOG.md").read_text())
    self.assertEqual(_git(repo, "log", "--format=%s").splitlines(),
                     ["fix 2", "fix 1", "JAX 0.99.0"])

  def test_a_conflict_names_the_patch_file_and_hunk(self) -> None:
    (self.root / "jax/_src/dlpack.py").write_text("uno\ndos\ntres\n")
    repo = self._repo()
    conflicts = series_tree.apply_pull_request(repo, self.patches[0])
    self.assertLen(conflicts, 1)
    self.assertEqual(conflicts[0].patch, self.patches[0].patch.name)
    self.assertEqual(conflicts[0].file, "jax/_src/dlpack.py")
    self.assertTrue(conflicts[0].hunk.startswith("@@ -1,3 +1,3 @@"),
                    conflicts[0].hunk)
    # Nothing committed, nothing left in the work tree.
    self.assertEqual(_git(repo, "status", "--porcelain"), "")
    self.assertEqual(_git(repo, "rev-list", "--count", "HEAD").strip(), "1")

  def test_an_entry_without_a_place_is_a_changelog_conflict(self) -> None:
    # Another release's file: the entry's context is not in it.
    (self.root / "CHANGELOG.md").write_text(
        "# Change log\n\n## Unreleased\n\n## JAX 0.10.0\n")
    repo = self._repo()
    conflicts = series_tree.apply_pull_request(repo, self.patches[0])
    self.assertLen(conflicts, 1)
    self.assertEqual(conflicts[0].file, "CHANGELOG.md")
    self.assertIn("cannot tell which section", conflicts[0].hunk)
    self.assertEqual(_git(repo, "rev-list", "--count", "HEAD").strip(), "1")
    self.assertEqual(_git(repo, "status", "--porcelain"), "")

  def test_a_tree_is_on_the_base_only_with_the_files_cut_on(self) -> None:
    repo = self._repo()
    self.assertTrue(series_tree.holds_preimages(repo, self.patches))
    (self.root / "jax/_src/dlpack.py").write_text("one\ntwo\nthree\nfour\n")
    other = series_tree.scratch_repo(self.target, self.scratch / "o",
                                     ["CHANGELOG.md"])
    self.assertFalse(series_tree.holds_preimages(other, self.patches))

  def test_files_the_tree_lacks_are_left_out(self) -> None:
    (self.root / "CHANGELOG.md").unlink()
    repo = self._repo()
    touched = upstream_set.touched_files(self.patches[0].patch)
    left_out = series_tree.absent(repo, touched)
    self.assertEqual(left_out, ["CHANGELOG.md"])
    self.assertEqual(series_tree.apply_pull_request(
        repo, self.patches[0], left_out), [])
    self.assertFalse((repo / "CHANGELOG.md").exists())

  def test_plain_git_am_needs_the_tree_it_was_cut_on(self) -> None:
    repo = self._repo()
    self.assertEqual(series_tree.apply_plain(repo, self.patches[0]), [])
    # The second was cut on the base too: its CHANGELOG hunk's context
    # moved, so plain git am refuses it where -3 and placement take it.
    self.assertNotEmpty(series_tree.apply_plain(repo, self.patches[1]))
    self.assertEqual(series_tree.apply_pull_request(repo, self.patches[1]),
                     [])


class ExtensionVersionTest(_CutOnATreeTest):
  """Two C++ changes each bump jaxlib's extension version: merged in order,
  the newer number stays, as a maintainer resolves the conflict."""

  def add_to_tree(self, root: pathlib.Path) -> None:
    versions = root / series_tree.EXTENSION_VERSION_FILE
    versions.parent.mkdir()
    versions.write_text("# Bump the number with a comment.\n\n"
                        "_version = 479  # A change already in.\n\nother = 1\n")

  def setUp(self) -> None:
    super().setUp()
    self.patches = {}
    for version, word in ((526, "one"), (527, "three")):
      def edit(tree: pathlib.Path, version: int = version,
               word: str = word) -> None:
        _replace("jax/_src/dlpack.py", word, word.upper())(tree)
        _replace(series_tree.EXTENSION_VERSION_FILE,
                 "_version = 479  # A change already in.",
                 f"_version = {version}  # Change {version}.")(tree)
      self.patches[version] = self.cut(version, f"change {version}", edit)
    self.target = series_tree.read_target(self.root)

  def _stacked(self, *order: int) -> str:
    repo = series_tree.scratch_repo(
        self.target, self.scratch / "-".join(map(str, order)),
        ["CHANGELOG.md", series_tree.EXTENSION_VERSION_FILE])
    for version in order:
      self.assertEqual(
          series_tree.apply_pull_request(repo, self.patches[version]), [])
    self.assertEqual((repo / "jax/_src/dlpack.py").read_text(),
                     "ONE\ntwo\nTHREE\n")
    return (repo / series_tree.EXTENSION_VERSION_FILE).read_text()

  def test_the_newer_number_stays_whatever_the_order(self) -> None:
    for order in ((526, 527), (527, 526)):
      versions = self._stacked(*order)
      self.assertIn("_version = 527  # Change 527.\n", versions)
      self.assertNotIn("526", versions)
      self.assertIn("other = 1\n", versions)

  def test_a_bump_alone_is_read_and_anything_more_is_not(self) -> None:
    self.assertEqual(series_tree.extension_version_bump(
        self.patches[526].text()), "_version = 526  # Change 526.")
    more = self.patches[526].text().replace(
        "+_version = 526  # Change 526.\n",
        "+_version = 526  # Change 526.\n+extra = 2\n")
    self.assertIsNone(series_tree.extension_version_bump(more))


class ReproducerTest(absltest.TestCase):
  """What a report's reproducer says, as the series reads it."""

  def _run_reproducer(self, script: str) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as scratch:
      path = pathlib.Path(scratch) / "r.reproducer.py"
      path.write_text(script)
      return series_runs.reproducer(path, pathlib.Path(scratch),
                                    sys.executable)

  def test_its_last_line_is_the_verdict(self) -> None:
    self.assertEqual(self._run_reproducer("print('x')\nprint('reproduces: it')\n"),
                     ("reproduces", "reproduces: it"))
    self.assertEqual(self._run_reproducer("print('fixed: no longer')\n"),
                     ("fixed", "fixed: no longer"))

  def test_an_abort_reproduces(self) -> None:
    result, said = self._run_reproducer("import os\nos.abort()\n")
    self.assertEqual(result, "reproduces")
    self.assertIn("signal", said)

  def test_an_exception_or_no_verdict_is_an_error(self) -> None:
    self.assertEqual(self._run_reproducer("raise ValueError('boom')\n")[0], "error")
    self.assertEqual(self._run_reproducer("print('done')\n")[0], "error")

  def test_the_reports_each_have_a_reproducer(self) -> None:
    self.assertNotEmpty(_PATCH_SET.reproducers)
    for path in _PATCH_SET.reproducers:
      self.assertTrue(path.with_name(
          path.name.replace(".reproducer.py", ".md")).is_file())


class NewTestsTest(absltest.TestCase):
  """A pull request's tests must fail on the tree without its change."""

  def setUp(self) -> None:
    super().setUp()
    scratch = tempfile.TemporaryDirectory()
    self.addCleanup(scratch.cleanup)
    self.repo = pathlib.Path(scratch.name)
    (self.repo / "tests").mkdir()

  def _not_failing(self, body: str) -> dict[str, str]:
    (self.repo / upstream_set.INTEROP_TEST).write_text(
        "import unittest\n\n\nclass T(unittest.TestCase):\n\n"
        + textwrap.indent(textwrap.dedent(body), "  "))
    return series_runs.tests_not_failing(
        self.repo, sys.executable, ["testFails", "testPasses", "testSkips"])

  def test_passing_and_skipping_tests_show_nothing(self) -> None:
    self.assertEqual(self._not_failing("""\
        def testFails(self):
          self.fail()

        def testPasses(self):
          pass

        @unittest.skip("no")
        def testSkips(self):
          pass
        """), {"testPasses": "passed", "testSkips": "skipped"})

  def test_a_module_that_does_not_import_fails_every_test(self) -> None:
    (self.repo / upstream_set.INTEROP_TEST).write_text(
        "import no_such_module_here\n")
    self.assertEqual(series_runs.tests_not_failing(
        self.repo, sys.executable, ["testFails", "testPasses"]), {})


class GateToolsTest(absltest.TestCase):
  """`series --python PY` says in one line what PY lacks, and the extra."""

  def setUp(self) -> None:
    super().setUp()
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-bare-"))
    self.addCleanup(shutil.rmtree, scratch, ignore_errors=True)
    # A Python with nothing installed: the venv module, without pip.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    str(scratch / "venv")], check=True)
    self.bare = str(scratch / "venv" / "bin" / "python")

  def test_a_bare_python_lacks_both(self) -> None:
    self.assertEqual(series_gates.missing_gate_tools(self.bare),
                     ["ruff", "pyrefly"])

  def test_this_python_has_them_when_the_extra_is_installed(self) -> None:
    have = [name for name in series_gates.GATE_TOOLS
            if importlib.util.find_spec(name) is not None]
    self.assertEqual(series_gates.missing_gate_tools(sys.executable),
                     [name for name in series_gates.GATE_TOOLS
                      if name not in have])

  def test_the_command_fails_in_one_line_naming_the_extra(self) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jax_patch", "series", "--against",
         str(pathlib.Path(tempfile.gettempdir())), "--python", self.bare],
        capture_output=True, text=True, check=False)
    self.assertEqual(done.returncode, 1, done.stderr)
    self.assertEqual(done.stderr.count("\n"), 1, done.stderr)
    self.assertIn("lacks ruff and pyrefly", done.stderr)
    self.assertIn("pip install 'jax-patch[series]'", done.stderr)

  def test_runtime_only_needs_neither(self) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jax_patch", "series", "--against",
         str(pathlib.Path(tempfile.gettempdir())), "--python", self.bare,
         "--runtime-only"], capture_output=True, text=True, check=False)
    self.assertNotIn("lacks", done.stderr)


class SummaryTest(absltest.TestCase):
  """The series' exit status: any failed check fails it."""

  def _status(self, *oks: bool) -> tuple[int, str]:
    out = io.StringIO()
    with mock.patch("sys.stdout", out):
      status = series._summary(  # pylint: disable=protected-access
          [series_check.Check(f"c{i}", ok, "s") for i, ok in enumerate(oks)])
    return status, out.getvalue().strip()

  def test_every_check_passing_exits_0(self) -> None:
    self.assertEqual(self._status(True, True), (0, "2 passed, 0 failed"))

  def test_one_failed_check_exits_1(self) -> None:
    self.assertEqual(self._status(True, False, True),
                     (1, "2 passed, 1 failed"))


class ConformanceCheckTest(absltest.TestCase):
  """The whole queue's cases: only those left undone may fail."""

  def _check(self, failed: dict[str, str]) -> series_check.Check:
    with mock.patch.object(series_runs, "conformance_failures",
                           return_value=(10, failed)):
      return series_check.check_conformance(pathlib.Path("."), "python",
                                            {"left": "why"})

  def test_a_case_left_undone_may_fail(self) -> None:
    self.assertTrue(self._check({"left": "FAIL"}).ok)

  def test_a_case_not_left_undone_fails_the_check(self) -> None:
    check = self._check({"left": "FAIL", "other": "FAIL: wrong"})
    self.assertFalse(check.ok)
    self.assertIn("other: FAIL: wrong", check.detail)


class StackSpeedTest(absltest.TestCase):
  """What --speed holds the whole stack against."""

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

  def test_each_round_times_every_tree_once_and_each_keeps_its_fastest(
      self) -> None:
    trees = [pathlib.Path("base"), pathlib.Path("stack")]
    readings = {trees[0]: [22.0, 20.0, 21.0], trees[1]: [7.0, 9.0, 6.0]}
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
    self.assertEqual([each["import"] for each in times], [20.0, 6.0])


class TargetTest(absltest.TestCase):
  """What the series reads from a JAX tree, and what it refuses."""

  def setUp(self) -> None:
    super().setUp()
    scratch = tempfile.TemporaryDirectory()
    self.addCleanup(scratch.cleanup)
    self.root = pathlib.Path(scratch.name)

  def test_reads_version_and_minimum_jaxlib(self) -> None:
    target = series_tree.read_target(_fake_tree(self.root, "0.11.2"))
    self.assertEqual(target.jax_version, "0.99.0")
    self.assertEqual(target.min_jaxlib, (0, 11, 2))

  def test_refuses_a_jax_supporting_jaxlib_older_than_0_11(self) -> None:
    with self.assertRaisesRegex(series_tree.SeriesError, "jax-patch vendor"):
      series_tree.read_target(_fake_tree(self.root, "0.10.2"))

  def test_refuses_a_folder_without_jax(self) -> None:
    with self.assertRaisesRegex(series_tree.SeriesError, "not a JAX tree"):
      series_tree.read_target(self.root)

  def test_runs_as_jax_ci_does_with_xla_flags_unset(self) -> None:
    with mock.patch.dict(os.environ, {"XLA_FLAGS": "--x"}):
      done = series_tree.run(self.root, sys.executable, "-c",
                             "import os; print(os.environ.get('XLA_FLAGS'))")
      self.assertEqual(done.stdout.strip(), "None")
      done = series_tree.run(self.root, sys.executable, "-c",
                             "import os; print(os.environ['XLA_FLAGS'])",
                             cpu_devices=4)
      self.assertIn("device_count=4", done.stdout)


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


if __name__ == "__main__":
  absltest.main()
