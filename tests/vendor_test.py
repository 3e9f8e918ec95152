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

"""Tests for vendoring into a scratch copy of the installed JAX."""

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
import jax

from jax_patch._src import vendor

_INSTALLED_JAX = pathlib.Path(jax.__file__).parent


def _snapshot(root: pathlib.Path) -> dict[str, str]:
  return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(root.rglob("*")) if p.is_file()}


class VendorTest(absltest.TestCase):

  def setUp(self) -> None:
    super().setUp()
    self.scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-test-"))
    self.addCleanup(shutil.rmtree, self.scratch, ignore_errors=True)

  def _jax_tree(self, name: str, checkout: bool = False) -> pathlib.Path:
    """A real copy (never links: vendoring writes) of the installed JAX."""
    root = self.scratch / name
    shutil.copytree(_INSTALLED_JAX, root / "jax",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if checkout:
      (root / "tests").mkdir()
      (root / "pyproject.toml").write_text("[project]\nname = 'jax'\n")
    return root

  def test_vendored_checkout_passes_the_conformance_tests(self) -> None:
    root = self._jax_tree("checkout", checkout=True)
    vendor.vendor(root)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root)] + [p for p in sys.path if p]))
    env.pop("XLA_FLAGS", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(root / "tests" / "dlpack_conformance_test.py")],
        cwd=root, env=env, capture_output=True, text=True, timeout=600,
        check=False)
    self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr)
    self.assertRegex(run.stdout, r"\d+ passed")

  def test_dry_run_imports_the_vendored_copy(self) -> None:
    root = self._jax_tree("installed")
    vendor.vendor(root)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root)] + [p for p in sys.path if p]))
    run = subprocess.run(
        [sys.executable, "-m", "jax_patch._src.vendor_dry_run", str(root)],
        env=env, capture_output=True, text=True, timeout=600, check=False)
    self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
    self.assertIn(f"at {root.resolve() / 'jax'}", run.stdout)
    self.assertRegex(run.stdout, r"vendored: \d+ passed, 0 failed")

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

  def test_diff_edits_jax_files_in_one_hunk_each(self) -> None:
    patch = vendor.diff(self._jax_tree("pristine"))
    for path in ("jax/_src/array.py", "jax/_src/basearray.pyi"):
      section = patch.split(f"diff --git a/{path}")[1].split("diff --git")[0]
      self.assertEqual(section.count("\n@@ "), 1, section)

  def test_unsupported_version_is_refused(self) -> None:
    root = self._jax_tree("old")
    version_file = root / "jax" / "version.py"
    version_file.write_text(version_file.read_text().replace(
        f'_version = "{jax.__version__}"', '_version = "0.3.0"'))
    with self.assertRaisesRegex(vendor.VendorError, "0.3.0 .* not supported"):
      vendor.vendor(root)

  def test_local_changes_are_refused_and_named(self) -> None:
    root = self._jax_tree("forked")
    dlpack_file = root / "jax" / "_src" / "dlpack.py"
    dlpack_file.write_text(dlpack_file.read_text() + "# a fork's change\n")
    before = _snapshot(root)
    with self.assertRaisesRegex(vendor.VendorError, "jax/_src/dlpack.py"):
      vendor.vendor(root)
    self.assertEqual(_snapshot(root), before)
    self.assertNotEmpty(vendor.vendor(root, force=True))

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
    self.assertEqual(vendor.vendor(root), [])
    vendor.revert(root)
    self.assertEqual(_snapshot(root), before)

  def test_revert_without_vendoring_is_refused(self) -> None:
    with self.assertRaises(vendor.VendorError):
      vendor.revert(self._jax_tree("untouched"))

  def test_cli_diff_defaults_to_the_installed_jax(self) -> None:
    run = subprocess.run([sys.executable, "-m", "jax_patch", "diff"],
                         capture_output=True, text=True, timeout=300,
                         check=False)
    self.assertEqual(run.returncode, 0, run.stderr)
    self.assertEqual(run.stdout, vendor.diff(_INSTALLED_JAX.parent))


if __name__ == "__main__":
  absltest.main()
