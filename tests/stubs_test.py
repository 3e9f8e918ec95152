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

"""Tests for `jax-patch stubs`: what it writes, what it installs (--install),
--check, and what it refuses. tests/typing_test.py runs the type checkers over
what it writes and installs."""

import base64
import contextlib
import csv
import hashlib
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import jax

from jax_patch._delivery import cli
from jax_patch._delivery import source_patch
from jax_patch._delivery import stubs
from jax_patch._delivery import vendor

_INSTALLED = pathlib.Path(jax.__file__).parent.parent
# Not resolve(): under Bazel the runfiles tree is the project.
_ROOT = pathlib.Path(__file__).absolute().parents[1]
_BASEARRAY = "jax/_src/basearray.pyi"


def _installed_stub_files() -> list[str]:
  return sorted(path.relative_to(_INSTALLED).as_posix()
                for path in (_INSTALLED / "jax").rglob("*.pyi"))


def _run(*argv: str) -> tuple[int, str, str]:
  """Runs the command line; returns its exit status, stdout and stderr."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    status = cli.main(list(argv))
  return status, out.getvalue(), err.getvalue()


class _ScratchTest(absltest.TestCase):

  def setUp(self) -> None:
    super().setUp()
    # Not create_tempdir(): absl's flags are unparsed under pytest.
    self.scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-stubs-"))
    self.addCleanup(shutil.rmtree, self.scratch, ignore_errors=True)

  def fake_jax(self, **replaced: str) -> pathlib.Path:
    """A copy of the installed JAX's stubs, ``__init__.py`` and version,
    with the files named (``jax/...`` -> text) replaced."""
    root = self.scratch / "site"
    for path in [*_installed_stub_files(), "jax/__init__.py",
                 "jax/version.py"]:
      (root / path).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy(_INSTALLED / path, root / path)
    for path, text in replaced.items():
      (root / path).write_text(text)
    return root


class BuildTest(_ScratchTest):
  """What the stub package holds for the installed JAX."""

  def setUp(self) -> None:
    super().setUp()
    self.package = stubs.build(_INSTALLED, jax.__version__)

  def test_holds_every_stub_jax_ships_and_nothing_else_but_two(self) -> None:
    expected = {stubs.STUB_PACKAGE + path[len("jax"):]
                for path in _installed_stub_files()}
    expected |= {"jax-stubs/py.typed", "jax-stubs/__init__.py"}
    self.assertEqual(set(self.package.files), expected)

  def test_marks_the_package_partial(self) -> None:
    self.assertEqual(self.package.files["jax-stubs/py.typed"], b"partial\n")

  def test_init_is_jaxs_own_byte_for_byte(self) -> None:
    self.assertEqual(self.package.files["jax-stubs/__init__.py"],
                     (_INSTALLED / "jax/__init__.py").read_bytes())

  def test_corrects_array_dlpack_methods(self) -> None:
    basearray = self.package.files["jax-stubs/_src/basearray.pyi"].decode()
    original = (_INSTALLED / _BASEARRAY).read_text()
    self.assertNotEqual(basearray, original)
    self.assertRegex(basearray, r"def __dlpack__\(self, \*, stream")
    self.assertIn("def __dlpack_device__(self)", basearray)
    spans = source_patch.spans(basearray)
    self.assertIn(("Array", "__dlpack_device__"), spans)

  def test_keeps_the_rest_of_each_stub_as_jax_has_it(self) -> None:
    for path in _installed_stub_files():
      original = (_INSTALLED / path).read_text()
      ours = self.package.files[stubs.STUB_PACKAGE + path[len("jax"):]]
      corrections = dict(source_patch.CORRECTIONS).get(path)
      expected = (original if corrections is None else
                  source_patch.corrected(original, corrections.read_text(),
                                         keep_same_shape=True))
      self.assertEqual(ours.decode(), expected, path)

  def test_nothing_when_jax_already_declares_the_corrections(self) -> None:
    corrected = {path: source_patch.corrected(
        (_INSTALLED / path).read_text(), corrections.read_text(),
        keep_same_shape=True)
                 for path, corrections in source_patch.CORRECTIONS
                 if path.endswith(".pyi")}
    root = self.fake_jax(**corrected)
    self.assertEqual(stubs.build(root, "9.9").files, {})


class SameShapeTest(absltest.TestCase):
  """A stub JAX already declares with our parameters keeps its own types."""

  _OURS = ("def from_dlpack(x: Any, /, *, device: _Device | _Sharding | None "
           "= None,\n                copy: builtins.bool | None = None) -> "
           "Array: ...\n")
  # JAX 0.12.1's, which names Format as a device too.
  _WITH_FORMAT = ("def before() -> None: ...\n"
                  "def from_dlpack(x: Any, /, *, device: _Device | _Sharding "
                  "| _Format | None = None,\n                copy: "
                  "builtins.bool | None = None) -> _Array: ...\n")

  def test_jax_own_declaration_with_the_same_parameters_is_kept(
      self) -> None:
    self.assertEqual(source_patch.corrected(self._WITH_FORMAT, self._OURS,
                                            keep_same_shape=True),
                     self._WITH_FORMAT)

  def test_other_parameters_are_replaced(self) -> None:
    older = ("def before() -> None: ...\n"
             "def from_dlpack(x: Any, device: Any = None) -> Array: ...\n")
    self.assertEqual(source_patch.corrected(older, self._OURS,
                                            keep_same_shape=True),
                     "def before() -> None: ...\n" + self._OURS)

  def test_code_is_replaced_whatever_its_parameters(self) -> None:
    # Vendored code: the bodies differ, so the rule is for stubs only.
    self.assertEqual(source_patch.corrected(self._WITH_FORMAT, self._OURS),
                     "def before() -> None: ...\n" + self._OURS)

  def test_installed_jax_numpy_stub_keeps_what_jax_declares(self) -> None:
    # Where JAX names Format (0.12.1 on), the stub package keeps it.
    path = "jax/numpy/__init__.pyi"
    original = (_INSTALLED / path).read_text()
    package = stubs.build(_INSTALLED, jax.__version__)
    ours = package.files.get(stubs.STUB_PACKAGE + path[len("jax"):])
    if ours is not None:
      self.assertEqual(ours.decode(), original)
    if "_Format" in original:
      self.assertIsNotNone(ours, "a stub package without jax.numpy")


class RefusalTest(_ScratchTest):
  """A JAX whose stubs lack what the corrections need is refused by name."""

  def test_refuses_stubs_without_array_dlpack(self) -> None:
    original = (_INSTALLED / _BASEARRAY).read_text()
    without = re.sub(r"\n  def __dlpack__\(self[^\n]*\n", "\n", original)
    self.assertNotEqual(without, original)
    root = self.fake_jax(**{_BASEARRAY: without})
    with self.assertRaisesRegex(
        stubs.StubsError,
        r"JAX 9\.9's jax/_src/basearray\.pyi declares no Array\.__dlpack__"):
      stubs.build(root, "9.9")

  def test_refuses_jax_without_a_corrected_stub(self) -> None:
    root = self.fake_jax()
    (root / _BASEARRAY).unlink()
    with self.assertRaisesRegex(stubs.StubsError,
                                r"JAX 9\.9 has no jax/_src/basearray\.pyi"):
      stubs.build(root, "9.9")

  def test_command_says_which_and_fails(self) -> None:
    root = self.fake_jax(**{"jax/numpy/__init__.pyi": "import builtins\n"})
    with mock.patch.object(cli, "_installed_jax_root", return_value=root):
      status, _, err = _run("stubs", "--out", str(self.scratch / "out"))
    self.assertEqual(status, 1)
    self.assertIn(f"JAX {vendor.jax_version(root)}'s jax/numpy/__init__.pyi "
                  "declares no from_dlpack", err)
    self.assertFalse((self.scratch / "out").exists())


class CommandTest(_ScratchTest):
  """`jax-patch stubs [--out DIR] [--check]` against the installed JAX."""

  def setUp(self) -> None:
    super().setUp()
    self.out = self.scratch / "out"
    self.package = stubs.build(_INSTALLED, jax.__version__)

  def written(self) -> dict[str, bytes]:
    return {path.relative_to(self.out).as_posix(): path.read_bytes()
            for path in self.out.rglob("*") if path.is_file()}

  def test_writes_the_package_under_out(self) -> None:
    status, out, _ = _run("stubs", "--out", str(self.out))
    self.assertEqual(status, 0)
    self.assertEqual(self.written(), self.package.files)
    self.assertIn(f"JAX {jax.__version__}", out)

  def test_default_out_is_typings(self) -> None:
    previous = os.getcwd()
    os.chdir(self.scratch)
    self.addCleanup(os.chdir, previous)
    status, _, _ = _run("stubs")
    self.assertEqual(status, 0)
    self.assertTrue((self.scratch / "typings/jax-stubs/py.typed").is_file())

  def test_rewriting_removes_what_another_jax_needed(self) -> None:
    stale = self.out / "jax-stubs/stale/__init__.pyi"
    stale.parent.mkdir(parents=True)
    stale.write_text("x: int\n")
    _run("stubs", "--out", str(self.out))
    self.assertEqual(self.written(), self.package.files)

  def test_check_passes_on_what_it_wrote(self) -> None:
    _run("stubs", "--out", str(self.out))
    status, out, _ = _run("stubs", "--out", str(self.out), "--check")
    self.assertEqual(status, 0)
    self.assertIn("matches", out)

  def test_check_writes_nothing_and_fails_where_nothing_was_written(
      self) -> None:
    status, _, err = _run("stubs", "--out", str(self.out), "--check")
    self.assertEqual(status, 1)
    self.assertIn("missing: jax-stubs/_src/basearray.pyi", err)
    self.assertFalse(self.out.exists())

  def test_check_fails_on_a_changed_file(self) -> None:
    _run("stubs", "--out", str(self.out))
    (self.out / "jax-stubs/_src/basearray.pyi").write_text("class Array: ...\n")
    status, _, err = _run("stubs", "--out", str(self.out), "--check")
    self.assertEqual(status, 1)
    self.assertIn("differs: jax-stubs/_src/basearray.pyi", err)

  def test_check_fails_on_a_file_another_jax_needed(self) -> None:
    _run("stubs", "--out", str(self.out))
    (self.out / "jax-stubs/old.pyi").write_text("x: int\n")
    status, _, err = _run("stubs", "--out", str(self.out), "--check")
    self.assertEqual(status, 1)
    self.assertIn("not expected: jax-stubs/old.pyi", err)

  def test_check_fails_after_a_jax_upgrade(self) -> None:
    # The stubs written for another JAX: its __init__ differs.
    _run("stubs", "--out", str(self.out))
    init = self.out / "jax-stubs/__init__.py"
    init.write_bytes(init.read_bytes() + b"\n# another JAX\n")
    status, _, err = _run("stubs", "--out", str(self.out), "--check")
    self.assertEqual(status, 1)
    self.assertIn("differs: jax-stubs/__init__.py", err)


class InstallTest(_ScratchTest):
  """`jax-patch stubs --install [--check]`, into a scratch venv's
  site-packages (the one ``stubs.site_packages`` names in the command)."""

  def setUp(self) -> None:
    super().setUp()
    venv = self.scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    str(venv)], check=True, capture_output=True, timeout=600)
    self.python = venv / "bin" / "python"
    self.site = pathlib.Path(subprocess.run(
        [str(self.python), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=600).stdout.strip())
    self.before = self.listing()
    self.package = stubs.build(_INSTALLED, jax.__version__)
    self.dist_info = (f"jax_patch_jax_stubs-{jax.__version__}.dist-info")

  def listing(self) -> set[str]:
    return {path.relative_to(self.site).as_posix()
            for path in self.site.rglob("*")}

  def install(self, *extra: str) -> tuple[int, str, str]:
    with mock.patch.object(stubs, "site_packages", return_value=self.site):
      return _run("stubs", "--install", *extra)

  def pip(self, *argv: str) -> subprocess.CompletedProcess[str]:
    """pip, acting on the scratch venv."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check",
         "--python", str(self.python), *argv], capture_output=True,
        text=True, timeout=600, check=False)

  def test_installs_the_package_and_a_record_of_it(self) -> None:
    status, out, err = self.install()
    self.assertEqual(status, 0, err)
    self.assertIn(f"installed jax-patch-jax-stubs {jax.__version__}", out)
    for path, contents in self.package.files.items():
      self.assertEqual((self.site / path).read_bytes(), contents, path)
    metadata = (self.site / self.dist_info / "METADATA").read_text()
    self.assertIn("Name: jax-patch-jax-stubs\n", metadata)
    self.assertIn(f"Version: {jax.__version__}\n", metadata)
    self.assertIn(f"Requires-Dist: jax=={jax.__version__}\n", metadata)
    # RECORD lists every file installed, each with pip's hash and size.
    with (self.site / self.dist_info / "RECORD").open(newline="") as record:
      rows = list(csv.reader(record))
    self.assertEqual({path for path, _, _ in rows},
                     self.listing() - self.before
                     - {self.dist_info, stubs.STUB_PACKAGE}
                     - {path for path in self.listing()
                        if (self.site / path).is_dir()})
    for path, digest, size in rows:
      if path.endswith("/RECORD"):
        self.assertEqual((digest, size), ("", ""))
        continue
      contents = (self.site / path).read_bytes()
      expected = base64.urlsafe_b64encode(
          hashlib.sha256(contents).digest()).rstrip(b"=").decode()
      self.assertEqual((digest, size), (f"sha256={expected}",
                                        str(len(contents))), path)

  def test_pip_lists_it_and_uninstall_removes_every_file(self) -> None:
    self.install()
    listed = self.pip("list", "--format=json")
    self.assertEqual(listed.returncode, 0, listed.stderr)
    self.assertIn({"name": "jax-patch-jax-stubs",
                   "version": jax.__version__},
                  [{"name": each["name"], "version": each["version"]}
                   for each in json.loads(listed.stdout)])
    removed = self.pip("uninstall", "-y", "jax-patch-jax-stubs")
    self.assertEqual(removed.returncode, 0, removed.stderr)
    self.assertEqual(self.listing(), self.before)

  def test_check_passes_on_what_it_installed(self) -> None:
    self.install()
    status, out, _ = self.install("--check")
    self.assertEqual(status, 0)
    self.assertIn("matches", out)

  def test_check_fails_where_nothing_is_installed(self) -> None:
    status, _, err = self.install("--check")
    self.assertEqual(status, 1)
    self.assertIn(f"missing: {self.dist_info}", err)
    self.assertEqual(self.listing(), self.before)

  def test_check_fails_on_a_changed_file(self) -> None:
    self.install()
    (self.site / "jax-stubs/_src/basearray.pyi").write_text("class Array: ...\n")
    status, _, err = self.install("--check")
    self.assertEqual(status, 1)
    self.assertIn("differs: jax-stubs/_src/basearray.pyi", err)

  def test_check_fails_on_another_jaxs_install_and_install_replaces_it(
      self) -> None:
    files = dict(self.package.files)
    files["jax-stubs/old.pyi"] = b"x: int\n"
    stubs.install(self.site, stubs.StubPackage("0.0.1", files))
    status, _, err = self.install("--check")
    self.assertEqual(status, 1)
    self.assertIn(f"missing: {self.dist_info}", err)
    self.assertIn("not expected: jax_patch_jax_stubs-0.0.1.dist-info", err)
    self.assertIn("not expected: jax-stubs/old.pyi", err)
    status, _, err = self.install()
    self.assertEqual(status, 0, err)
    self.assertEqual(self.listing() - self.before,
                     {path for path in self.listing() - self.before
                      if path.startswith((self.dist_info,
                                          stubs.STUB_PACKAGE))})
    self.assertFalse((self.site / "jax-stubs/old.pyi").exists())
    self.assertEqual(self.install("--check")[0], 0)

  def test_refuses_a_jax_stubs_it_did_not_install(self) -> None:
    foreign = self.site / "jax-stubs/__init__.pyi"
    foreign.parent.mkdir()
    foreign.write_text("x: int\n")
    status, _, err = self.install()
    self.assertEqual(status, 1)
    self.assertIn(f"{self.site / 'jax-stubs'} is already there and "
                  "jax-patch did not install it", err)
    self.assertEqual(foreign.read_text(), "x: int\n")
    self.assertFalse((self.site / self.dist_info).exists())
    status, _, err = self.install("--check")
    self.assertEqual(status, 1)
    self.assertIn("not ours: jax-stubs", err)

  def test_refuses_a_site_packages_it_cannot_write(self) -> None:
    # As root, a read-only folder is still writable: ask as a user would.
    with mock.patch.object(os, "access", return_value=False):
      status, _, err = self.install()
    self.assertEqual(status, 1)
    self.assertIn(f"cannot write to {self.site}", err)
    self.assertEqual(self.listing(), self.before)

  def test_out_is_not_for_install(self) -> None:
    status, _, err = self.install("--out", str(self.scratch / "out"))
    self.assertEqual(status, 2)
    self.assertIn("--out DIR: not with --install", err)
    self.assertEqual(self.listing(), self.before)

  def test_uses_the_running_interpreters_site_packages(self) -> None:
    import sysconfig  # pylint: disable=g-import-not-at-top
    self.assertEqual(stubs.site_packages(),
                     pathlib.Path(sysconfig.get_paths()["purelib"]))


class WheelTest(_ScratchTest):
  """A built (non-editable) jax-patch finds its declarations: setup.py puts
  a copy in the package, where source_patch looks first."""

  def test_built_package_carries_and_reads_the_declarations(self) -> None:
    source = self.scratch / "source"
    source.mkdir()
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "README.md"):
      shutil.copy(_ROOT / name, source / name)
    for tree in ("jax_patch", "stubs/jax", "patches"):
      shutil.copytree(_ROOT / tree, source / tree,
                      ignore=shutil.ignore_patterns("__pycache__"))
    built = self.scratch / "built"
    run = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib",
         str(built)], cwd=source, capture_output=True, text=True,
        timeout=600, check=False)
    self.assertEqual(run.returncode, 0, run.stderr)
    for path, declarations in source_patch.CORRECTIONS:
      relative = declarations.relative_to(_ROOT)
      copy = built / "jax_patch/_delivery/declarations" / relative
      self.assertEqual(copy.read_bytes(), declarations.read_bytes(), path)
    # The built package reads its own copy, not a checkout.
    where = subprocess.run(
        [sys.executable, "-c", "from jax_patch._delivery import source_patch; "
         "print(source_patch.STUBS_ROOT)"], cwd=built, capture_output=True,
        text=True, timeout=600, check=False)
    self.assertEqual(pathlib.Path(where.stdout.strip()),
                     built / "jax_patch/_delivery/declarations/stubs", where.stderr)


if __name__ == "__main__":
  absltest.main()
