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

"""Tests for vendoring into copies of the installed JAX, plain and in git."""

import contextlib
import hashlib
import io
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
import jax

from jax_patch._delivery import cli
from jax_patch._delivery import source_patch
from jax_patch._delivery import vendor
from jax_patch._src import dlpack_compat
from jax_patch.testing import conformance
from tests import fresh_process

_INSTALLED_JAX = pathlib.Path(jax.__file__).parent
# Past any release the pristine table can hold.
_UNRELEASED = "99.0.0.dev20991231"
_DLPACK = "jax/_src/dlpack.py"
# The conformance catalogue, where vendoring writes it: beside JAX's tests.
_CASES = "tests/dlpack_conformance.py"
_CASES_TEST = "tests/dlpack_conformance_test.py"
_OUR_NOTICE = "# Copyright 2026 The jax-patch Authors."
_LICENSE = "# Licensed under the Apache License, Version 2.0"


def _snapshot(root: pathlib.Path) -> dict[str, str]:
  return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(root.rglob("*"))
          if p.is_file() and ".git" not in p.relative_to(root).parts}


def _notices(data: bytes) -> list[str]:
  """The copyright lines of a file's leading comment block."""
  header = []
  for line in data.decode().splitlines():
    if not line.startswith("#"):
      break
    header.append(line)
  return [line for line in header if re.match(r"#\s*Copyright\b", line)]


def _copy_installed_jax(root: pathlib.Path, checkout: bool,
                        sdist: bool = False) -> pathlib.Path:
  """A real copy (never links: vendoring writes) of the installed JAX.

  As a source checkout, with ``checkout``; as a source distribution, which
  has no ``tests/``, with ``sdist``.
  """
  shutil.copytree(_INSTALLED_JAX, root / "jax",
                  ignore=shutil.ignore_patterns("__pycache__"))
  if checkout:
    (root / "tests").mkdir()
    (root / "tests" / "BUILD").write_text("# As JAX's tests/ has.\n")
  if checkout or sdist:
    (root / "pyproject.toml").write_text("[project]\nname = 'jax'\n")
  return root


def _set_version(root: pathlib.Path, version: str) -> None:
  version_file = root / "jax" / "version.py"
  text, count = re.subn(r'^_version = "[^"]+"', f'_version = "{version}"',
                        version_file.read_text(), count=1, flags=re.M)
  assert count == 1, f"{version_file} sets no _version"
  version_file.write_text(text)


def _git(root: pathlib.Path, *args: str) -> str:
  """Runs git in ``root`` with a fixed identity; fails the test on error."""
  run = subprocess.run(
      ["git", "-c", "user.name=jax-patch test",
       "-c", "user.email=test@jax-patch.invalid", "-c", "commit.gpgsign=false",
       *args], cwd=root, capture_output=True, text=True, check=False)
  if run.returncode:
    raise AssertionError(f"git {' '.join(args)}: {run.stderr}")
  return run.stdout


def _run_cli(*argv: str) -> tuple[int, str, str]:
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = cli.main(list(argv))
  return code, out.getvalue(), err.getvalue()


class VendorTest(absltest.TestCase):

  def setUp(self) -> None:
    super().setUp()
    self.scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-test-"))
    self.addCleanup(shutil.rmtree, self.scratch, ignore_errors=True)

  def _jax_tree(self, name: str, checkout: bool = False,
                sdist: bool = False) -> pathlib.Path:
    return _copy_installed_jax(self.scratch / name, checkout, sdist)

  def test_vendored_checkout_passes_the_conformance_tests(self) -> None:
    root = self._jax_tree("checkout", checkout=True)
    vendor.vendor(root)
    env = fresh_process.environment(dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(root)] + [p for p in sys.path if p])))
    env.pop("XLA_FLAGS", None)
    # With JAX's pytest configuration: --import-mode=importlib puts no test
    # folder on sys.path.
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "--import-mode=importlib", str(root / _CASES_TEST)],
        cwd=root, env=env, capture_output=True, text=True, timeout=600,
        check=False)
    self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr)
    self.assertRegex(run.stdout, r"\d+ passed")
    # In this run's x64 mode (the environment's): the other mode's cases
    # skip, saying so.
    other = "off" if conformance.x64_enabled() else "on"
    self.assertIn(f"holds with x64 {other} only (this run: "
                  f"{conformance.x64_mode()})", run.stdout)

  def test_vendored_checkout_has_test_code_beside_its_tests_only(
      self) -> None:
    root = self._jax_tree("test_code", checkout=True)
    written = [c.path for c in vendor.vendor(root).changes]
    # Into jax/_src: our modules of _src, and JAX's own files corrected.
    allowed = ({f"jax/_src/{name}" for name in vendor.VENDORED_MODULES.values()}
               | {path for path, _ in source_patch.CORRECTIONS})
    self.assertContainsSubset(
        [path for path in written if path.startswith("jax/")], allowed)
    self.assertFalse((root / "jax/_src/dlpack_conformance.py").exists())
    # The cases, beside the tests, run against the tree's own modules.
    self.assertIn(_CASES, written)
    cases = (root / _CASES).read_text()
    self.assertNotIn("jax_patch", cases)
    self.assertIn("from jax._src import dlpack_capsule\n", cases)

  def test_vendored_tree_without_tests_gets_no_test_code(self) -> None:
    root = self._jax_tree("test_code_installed")
    paths = [c.path for c in vendor.vendor(root).changes]
    self.assertEqual([path for path in paths if not path.startswith("jax/")],
                     [])
    self.assertFalse((root / "jax/_src/dlpack_conformance.py").exists())

  def test_source_tree_without_tests_names_the_test_files_left_out(
      self) -> None:
    root = self._jax_tree("sdist", sdist=True)
    code, out, err = _run_cli("vendor", "--into", str(root))
    self.assertEqual(code, 0, err)
    self.assertIn(f"vendor: note: {root} has no tests/ folder", err)
    self.assertIn(f"left out: {_CASES}, {_CASES_TEST}. To add them, make "
                  f"{root / 'tests'} and vendor again.", err)
    self.assertNotIn("tests/", out)
    self.assertFalse((root / "tests").exists())
    # As the note says: the test files, and nothing else, are then added.
    (root / "tests").mkdir()
    code, out, err = _run_cli("vendor", "--into", str(root))
    self.assertEqual((code, err), (0, ""))
    self.assertEqual(out, f"vendored 2 files into {root}: {_CASES}, "
                     f"{_CASES_TEST}\n")

  def test_installed_jax_gets_no_note_about_test_files(self) -> None:
    # No source tree: the test files have no place there.
    code, _, err = _run_cli("vendor", "--into",
                            str(self._jax_tree("installed_no_note")))
    self.assertEqual((code, err), (0, ""))

  def test_vendored_conformance_test_loads_the_cases_beside_it(self) -> None:
    root = self._jax_tree("cases_beside", checkout=True)
    vendor.vendor(root)
    env = fresh_process.environment(dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(root)] + [p for p in sys.path if p])))
    # Loaded by path from elsewhere, as JAX's pytest configuration loads it:
    # neither tests/ nor the working folder is on sys.path.
    show = ("import importlib.util, sys\n"
            "spec = importlib.util.spec_from_file_location('t', sys.argv[1])\n"
            "test = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(test)\n"
            "print(test.conformance.__file__)\n"
            "print(test.conformance.dlpack_capsule.__file__)\n")
    run = subprocess.run([sys.executable, "-c", show, str(root / _CASES_TEST)],
                         cwd=self.scratch, env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    self.assertEqual(run.returncode, 0, run.stderr)
    cases, capsule = map(pathlib.Path, run.stdout.split())
    self.assertEqual(cases.resolve(), (root / _CASES).resolve())
    self.assertEqual(capsule.resolve(),
                     (root / "jax/_src/dlpack_capsule.py").resolve())

  def test_dry_run_imports_the_vendored_copy(self) -> None:
    root = self._jax_tree("installed")
    vendor.vendor(root)
    env = fresh_process.environment(dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(root)] + [p for p in sys.path if p])))
    run = subprocess.run(
        [sys.executable, "-m", "jax_patch._delivery.vendor_dry_run", str(root)],
        env=env, capture_output=True, text=True, timeout=600, check=False)
    self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
    self.assertIn(f"at {root.resolve() / 'jax'}, {conformance.x64_mode()}",
                  run.stdout)
    self.assertRegex(run.stdout, r"vendored: \d+ passed, 0 failed, \d+ "
                     r"skipped")

  def test_diff_applies_to_a_pristine_tree_and_matches_vendor(self) -> None:
    patched = self._jax_tree("by_git_apply")
    vendored = self._jax_tree("by_vendor")
    patch = vendor.diff(patched)
    (self.scratch / "vendor.diff").write_text(patch)
    for command in (["git", "apply", "--check", "../vendor.diff"],
                    ["patch", "-p1", "--dry-run", "-i", "../vendor.diff"],
                    ["git", "apply", "../vendor.diff"]):
      run = subprocess.run(command, cwd=patched, capture_output=True,
                           text=True, check=False)
      self.assertEqual(run.returncode, 0, f"{command}: {run.stderr}")
    vendor.vendor(vendored)
    shutil.rmtree(vendored / vendor.BACKUP_DIR)
    self.assertEqual(_snapshot(patched), _snapshot(vendored))

  def test_cli_diff_after_vendoring_is_the_diff_vendoring_made(
      self) -> None:
    # The order docs/vendoring.md gives: vendor, then diff the same tree.
    root = self._jax_tree("vendored_then_diffed", checkout=True)
    pristine = vendor.diff(root)
    code, _, err = _run_cli("vendor", "--into", str(root))
    self.assertEqual(code, 0, err)
    code, out, err = _run_cli("diff", "--against", str(root))
    self.assertEqual(code, 0, err)
    self.assertEqual(out, pristine)
    self.assertEqual(err, f"jax-patch diff: note: {root} is vendored into "
                     "already: this is the diff against the files vendoring "
                     f"replaced there, as {vendor.BACKUP_DIR}/ kept them.\n")

  def test_cli_diff_names_files_changed_since_vendoring(self) -> None:
    root = self._jax_tree("changed_since")
    pristine = vendor.diff(root)
    vendor.vendor(root)
    with (root / _DLPACK).open("a") as dlpack_file:
      dlpack_file.write("# a change after vendoring\n")
    code, out, err = _run_cli("diff", "--against", str(root))
    self.assertEqual((code, out), (0, pristine), err)
    self.assertIn(f"differ from what this jax-patch vendors (changed since, "
                  f"or vendored by another version): {_DLPACK}.", err)

  def test_cli_diff_of_a_vendored_tree_without_its_record_is_refused(
      self) -> None:
    root = self._jax_tree("record_removed")
    vendor.vendor(root)
    shutil.rmtree(root / vendor.BACKUP_DIR)
    code, out, err = _run_cli("diff", "--against", str(root))
    self.assertEqual((code, out), (1, ""), err)
    self.assertEqual(err.count("\n"), 1, err)
    self.assertStartsWith(err, f"jax-patch diff: error: {root} already holds "
                          "every file as vendoring writes it, and no record")

  def test_diff_edits_jax_files_in_one_hunk_each(self) -> None:
    patch = vendor.diff(self._jax_tree("pristine"))
    for path in ("jax/_src/array.py", "jax/_src/basearray.pyi"):
      section = patch.split(f"diff --git a/{path}")[1].split("diff --git")[0]
      self.assertEqual(section.count("\n@@ "), 1, section)

  def test_replaced_jax_files_keep_jax_copyright_lines(self) -> None:
    # Apache-2.0 4(c): a file derived from JAX's keeps JAX's notices.
    changes = vendor.prepare(self._jax_tree("notices", checkout=True)).changes
    jax_notices = {c.path: _notices(c.before) for c in changes
                   if c.before is not None}
    self.assertNotEmpty(jax_notices[_DLPACK])
    for change in changes:
      with self.subTest(change.path):
        kept = _notices(change.after)
        for notice in jax_notices.get(change.path, []):
          self.assertIn(notice, kept)

  def test_diff_removes_no_copyright_line(self) -> None:
    patch = vendor.diff(self._jax_tree("notices_diff", checkout=True))
    self.assertIn(f"diff --git a/{_DLPACK}", patch)
    self.assertEqual(re.findall(r"^-#\s*Copyright.*$", patch, re.M), [])

  def test_replaced_module_adds_our_notice_after_jax_and_one_license(
      self) -> None:
    root = self._jax_tree("notices_order")
    jax_notices = _notices((root / _DLPACK).read_bytes())
    vendor.vendor(root)
    vendored = (root / _DLPACK).read_text()
    self.assertEqual(vendored.splitlines()[:len(jax_notices) + 2],
                     jax_notices + [_OUR_NOTICE, "#"])
    self.assertEqual(vendored.count(_LICENSE), 1)

  def test_files_vendoring_creates_carry_a_notice(self) -> None:
    changes = vendor.plan(self._jax_tree("created", checkout=True))
    created = [c for c in changes if c.before is None]
    self.assertContainsSubset([_CASES, _CASES_TEST],
                              [c.path for c in created])
    for change in created:
      with self.subTest(change.path):
        self.assertEqual(_notices(change.after), [_OUR_NOTICE])

  def test_version_older_than_the_tested_range_is_refused(self) -> None:
    root = self._jax_tree("old")
    _set_version(root, "0.3.0")
    before = _snapshot(root)
    with self.assertRaisesRegex(vendor.VendorError,
                                "0.3.0 .* older than the tested range"):
      vendor.vendor(root)
    self.assertEqual(_snapshot(root), before)

  def test_newer_version_is_refused_naming_the_tested_range(self) -> None:
    root = self._jax_tree("newer")
    _set_version(root, _UNRELEASED)
    before = _snapshot(root)
    with self.assertRaisesRegex(vendor.VendorError,
                                dlpack_compat.TESTED_RANGE + r".*--force"):
      vendor.vendor(root)
    with self.assertRaisesRegex(vendor.VendorError,
                                dlpack_compat.TESTED_RANGE):
      vendor.diff(root)
    self.assertEqual(_snapshot(root), before)

  def test_force_vendors_a_newer_version_with_a_note(self) -> None:
    root = self._jax_tree("newer_forced")
    _set_version(root, _UNRELEASED)
    vendored = vendor.vendor(root, force=True)
    self.assertNotEmpty(vendored.changes)
    self.assertLen(vendored.notes, 1)
    self.assertIn(dlpack_compat.TESTED_RANGE, vendored.notes[0])

  def test_unrecorded_version_inside_the_range_is_refused(self) -> None:
    # No hash record and no git: local changes cannot be told apart.
    root = self._jax_tree("unrecorded")
    _set_version(root, dlpack_compat.OLDEST_TESTED_JAX + ".99")
    with self.assertRaisesRegex(vendor.VendorError, "not a git checkout"):
      vendor.vendor(root)

  def test_local_changes_are_refused_and_named(self) -> None:
    root = self._jax_tree("forked")
    dlpack_file = root / "jax" / "_src" / "dlpack.py"
    dlpack_file.write_text(dlpack_file.read_text() + "# a fork's change\n")
    before = _snapshot(root)
    with self.assertRaisesRegex(vendor.VendorError, "jax/_src/dlpack.py"):
      vendor.vendor(root)
    self.assertEqual(_snapshot(root), before)
    forced = vendor.vendor(root, force=True)
    self.assertNotEmpty(forced.changes)
    self.assertIn("jax/_src/dlpack.py", " ".join(forced.notes))

  def test_pristine_table_spans_the_tested_range(self) -> None:
    self.assertEqual(
        (vendor.SUPPORTED_VERSIONS[0], vendor.SUPPORTED_VERSIONS[-1]),
        (dlpack_compat.OLDEST_TESTED_JAX, dlpack_compat.NEWEST_TESTED_JAX))

  def test_pristine_table_records_the_installed_release(self) -> None:
    if dlpack_compat.IS_UNTESTED_JAXLIB:
      self.skipTest(f"jax {jax.__version__} is past the tested range")
    self.assertEqual(
        vendor.PRISTINE[jax.__version__],
        {path: hashlib.sha256(
            (_INSTALLED_JAX.parent / path).read_bytes()).hexdigest()
         for path in vendor.PRISTINE[jax.__version__]})

  def test_revert_restores_the_tree_byte_for_byte(self) -> None:
    root = self._jax_tree("reverted", checkout=True)
    before = _snapshot(root)
    vendor.vendor(root)
    self.assertNotEqual(_snapshot(root), before)
    vendor.revert(root)
    self.assertEqual(_snapshot(root), before)

  def test_vendoring_twice_changes_nothing_and_still_reverts(self) -> None:
    root = self._jax_tree("twice")
    before = _snapshot(root)
    vendor.vendor(root)
    self.assertEqual(vendor.vendor(root).changes, [])
    vendor.revert(root)
    self.assertEqual(_snapshot(root), before)

  def test_revert_without_vendoring_is_refused(self) -> None:
    with self.assertRaises(vendor.VendorError):
      vendor.revert(self._jax_tree("untouched"))

  def test_cli_diff_defaults_to_the_installed_jax(self) -> None:
    run = subprocess.run([sys.executable, "-m", "jax_patch", "diff"],
                         capture_output=True, text=True, timeout=300,
                         check=False, env=fresh_process.environment())
    self.assertEqual(run.returncode, 0, run.stderr)
    self.assertEqual(run.stdout, vendor.diff(_INSTALLED_JAX.parent))

  def test_cli_refuses_a_newer_version_unless_forced(self) -> None:
    root = self._jax_tree("cli_newer")
    _set_version(root, _UNRELEASED)
    for command in (["vendor", "--into", str(root)],
                    ["diff", "--against", str(root)]):
      code, out, err = _run_cli(*command)
      self.assertEqual((code, out), (1, ""), err)
      self.assertIn(dlpack_compat.TESTED_RANGE, err)
    code, out, err = _run_cli("diff", "--against", str(root), "--force")
    self.assertEqual(code, 0, err)
    self.assertStartsWith(out, "diff --git ")
    self.assertIn("note:", err)
    code, out, err = _run_cli("vendor", "--into", str(root), "--force")
    self.assertEqual(code, 0, err)
    self.assertIn(dlpack_compat.TESTED_RANGE, err)


class GitCheckoutTest(absltest.TestCase):
  """In a git checkout, git, not the hash table, says what is upstream's.

  CI cannot fetch JAX's repository, so the checkout is made here: the
  installed JAX's files, committed to a new repository, with a version past
  the tested range (as JAX's main branch is) and a ``dlpack.py`` no release
  ships.
  """

  origin: pathlib.Path  # That repository, which each test clones.

  @classmethod
  def setUpClass(cls) -> None:
    super().setUpClass()
    cls.origin = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-git-"))
    _copy_installed_jax(cls.origin, checkout=True)
    _set_version(cls.origin, _UNRELEASED)
    with (cls.origin / _DLPACK).open("a") as dlpack_file:
      dlpack_file.write("# A commit after the release.\n")
    _git(cls.origin, "init", "--quiet")
    _git(cls.origin, "add", "--all")
    _git(cls.origin, "commit", "--quiet", "-m", "JAX, as upstream has it")

  @classmethod
  def tearDownClass(cls) -> None:
    shutil.rmtree(cls.origin, ignore_errors=True)
    super().tearDownClass()

  def setUp(self) -> None:
    super().setUp()
    self.scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-test-"))
    self.addCleanup(shutil.rmtree, self.scratch, ignore_errors=True)
    self.root = self._clone("jax-checkout")

  def _clone(self, name: str) -> pathlib.Path:
    _git(self.scratch, "clone", "--quiet", str(self.origin), name)
    return self.scratch / name

  def _append(self, path: str, text: str) -> None:
    with (self.root / path).open("a") as changed:
      changed.write(text)

  def test_unmodified_files_are_replaced_for_an_unrecorded_version(
      self) -> None:
    self.assertNotIn(vendor.jax_version(self.root), vendor.PRISTINE)
    vendored = vendor.vendor(self.root)
    self.assertIn(_DLPACK, [c.path for c in vendored.changes])
    self.assertContainsSubset([_CASES, _CASES_TEST],
                              [c.path for c in vendored.changes])

  def test_newer_version_goes_ahead_with_a_note_naming_the_range(
      self) -> None:
    notes = vendor.vendor(self.root).notes
    self.assertLen(notes, 1)
    self.assertIn(dlpack_compat.TESTED_RANGE, notes[0])
    self.assertIn("untested", notes[0])

  def test_uncommitted_change_is_refused_by_name(self) -> None:
    self._append(_DLPACK, "# a local change\n")
    before = _snapshot(self.root)
    with self.assertRaisesRegex(vendor.VendorError,
                                "modified against HEAD.*jax/_src/dlpack.py"):
      vendor.vendor(self.root)
    self.assertEqual(_snapshot(self.root), before)

  def test_staged_change_is_refused_by_name(self) -> None:
    self._append("jax/_src/array.py", "# a staged change\n")
    _git(self.root, "add", "jax/_src/array.py")
    with self.assertRaisesRegex(vendor.VendorError, "jax/_src/array.py"):
      vendor.vendor(self.root)

  def test_untracked_file_in_the_way_is_refused_by_name(self) -> None:
    # Vendoring creates dlpack_errors.py; an untracked one is not upstream's.
    (self.root / "jax/_src/dlpack_errors.py").write_text("# mine\n")
    with self.assertRaisesRegex(vendor.VendorError,
                                "jax/_src/dlpack_errors.py"):
      vendor.vendor(self.root)

  def test_change_hidden_by_skip_worktree_is_still_refused(self) -> None:
    _git(self.root, "update-index", "--skip-worktree", _DLPACK)
    self._append(_DLPACK, "# hidden from git status\n")
    with self.assertRaisesRegex(vendor.VendorError, _DLPACK):
      vendor.vendor(self.root)

  def test_force_overwrites_a_local_change_and_says_so(self) -> None:
    self._append(_DLPACK, "# a local change\n")
    notes = vendor.vendor(self.root, force=True).notes
    self.assertIn(_DLPACK, notes[-1])
    self.assertIn("--force", notes[-1])

  def test_revert_restores_the_checkout_byte_for_byte(self) -> None:
    before = _snapshot(self.root)
    vendor.vendor(self.root)
    self.assertNotEmpty(_git(self.root, "status", "--porcelain"))
    vendor.revert(self.root)
    self.assertEqual(_snapshot(self.root), before)
    self.assertEqual(_git(self.root, "status", "--porcelain",
                          "--untracked-files=all"), "")

  def test_vendor_record_is_ignored_by_git(self) -> None:
    vendor.vendor(self.root)
    self.assertTrue((self.root / vendor.BACKUP_DIR / "manifest.json").is_file())
    untracked = _git(self.root, "status", "--porcelain",
                     "--untracked-files=all", "--", vendor.BACKUP_DIR)
    self.assertEqual(untracked, "")
    _git(self.root, "add", "--all")
    staged = _git(self.root, "diff", "--cached", "--name-only").split()
    self.assertNotEmpty(staged)
    self.assertEqual(
        [path for path in staged if path.startswith(vendor.BACKUP_DIR)], [])
    # The fork's own .gitignore is not touched.
    self.assertFalse((self.root / ".gitignore").exists())

  def test_cli_diff_after_vendoring_applies_to_a_fresh_clone(self) -> None:
    code, _, err = _run_cli("vendor", "--into", str(self.root))
    self.assertEqual(code, 0, err)
    code, out, err = _run_cli("diff", "--against", str(self.root))
    self.assertEqual(code, 0, err)
    (self.scratch / "vendor.diff").write_text(out)
    fresh = self._clone("fresh")
    _git(fresh, "apply", "../vendor.diff")
    shutil.rmtree(self.root / vendor.BACKUP_DIR)
    self.assertEqual(_snapshot(fresh), _snapshot(self.root))

  def test_diff_applies_with_git_apply_and_matches_vendor(self) -> None:
    (self.scratch / "vendor.diff").write_text(vendor.diff(self.root))
    _git(self.root, "apply", "--check", "../vendor.diff")
    _git(self.root, "apply", "../vendor.diff")
    vendored = self._clone("vendored")
    vendor.vendor(vendored)
    shutil.rmtree(vendored / vendor.BACKUP_DIR)
    self.assertEqual(_snapshot(self.root), _snapshot(vendored))

  def test_tree_below_the_repository_top_is_judged_by_git(self) -> None:
    # A fork kept in a larger repository, as third_party/jax.
    repository = self.scratch / "monorepo"
    root = _copy_installed_jax(repository / "third_party" / "jax",
                               checkout=False)
    _set_version(root, _UNRELEASED)
    _git(repository, "init", "--quiet")
    _git(repository, "add", "--all")
    _git(repository, "commit", "--quiet", "-m", "JAX in third_party")
    (root / _DLPACK).write_text("# a local change\n")
    with self.assertRaisesRegex(vendor.VendorError, "modified against HEAD"):
      vendor.vendor(root)
    _git(repository, "checkout", "--quiet", "--", ".")
    self.assertNotEmpty(vendor.vendor(root).changes)

  def test_repository_git_cannot_read_is_refused_unless_forced(self) -> None:
    root = _copy_installed_jax(self.scratch / "no_commit", checkout=False)
    _git(root, "init", "--quiet")  # No HEAD to compare with.
    with self.assertRaisesRegex(vendor.VendorError,
                                "is a git checkout, but `git ls-tree`"):
      vendor.vendor(root)
    notes = vendor.vendor(root, force=True).notes
    self.assertIn("without git", notes[0])

  def test_installed_jax_in_another_repository_is_judged_by_hashes(
      self) -> None:
    # A virtualenv inside a project's repository: git tracks no jax/ there.
    project = self.scratch / "project"
    _copy_installed_jax(project / "venv", checkout=False)
    _git(project, "init", "--quiet")
    (project / "README").write_text("a project\n")
    _git(project, "add", "README")
    _git(project, "commit", "--quiet", "-m", "project")
    _set_version(project / "venv", _UNRELEASED)
    with self.assertRaisesRegex(vendor.VendorError, "newer than the tested"):
      vendor.vendor(project / "venv")


if __name__ == "__main__":
  absltest.main()
