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

"""The command line as a new user meets it: paths that do not exist or
cannot be made, usage errors, Ctrl-C, ``--version``, ``series --help``, the
README's test command, and the pull requests' numbers, which the queue
table of docs/upstream.md gives."""

import contextlib
import errno
import importlib.metadata
import importlib.util
import io
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax

import jax_patch
from jax_patch._delivery import cli
from jax_patch._delivery import upstream_set
from jax_patch._delivery import stubs
from tests import fresh_process

# Not resolve(): under Bazel the runfiles tree is the project.
_ROOT = pathlib.Path(__file__).absolute().parents[1]
_INSTALLED = pathlib.Path(jax.__file__).parent.parent


def _run(*argv: str) -> tuple[int, str, str]:
  """Runs the command line; returns its exit status, stdout and stderr."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    status = cli.main(list(argv))
  return status, out.getvalue(), err.getvalue()


def _fake_jax(root: pathlib.Path, version: str, minimum_jaxlib: str,
              dlpack_source: str = "") -> pathlib.Path:
  """A tree with only what ``series_tree.read_target`` reads."""
  (root / "jax" / "_src").mkdir(parents=True)
  (root / "jax" / "version.py").write_text(textwrap.dedent(f"""\
      _version = "{version}"
      _minimum_jaxlib_version = '{minimum_jaxlib}'
      """))
  (root / "jax/_src/dlpack.py").write_text(dlpack_source)
  return root


class _ScratchTest(parameterized.TestCase):

  def setUp(self) -> None:
    super().setUp()
    # Not create_tempdir(): absl's flags are unparsed under pytest.
    self.scratch = pathlib.Path(tempfile.mkdtemp(prefix="jax-patch-cli-"))
    self.addCleanup(shutil.rmtree, self.scratch, ignore_errors=True)
    self.file = self.scratch / "a-file"
    self.file.write_text("not a folder\n")

  def assert_one_error_line(self, command: str, err: str,
                            says: str) -> None:
    self.assertEqual(err.count("\n"), 1, err)
    self.assertStartsWith(err, f"jax-patch {command}: error: ")
    self.assertIn(says, err)
    self.assertNotIn("Traceback", err)


class PathTest(_ScratchTest):
  """A path that does not exist, or cannot be made, is said as such."""

  @parameterized.named_parameters(
      ("vendor_into", "vendor", "--into"),
      ("vendor_revert", "vendor", "--revert"),
      ("diff_against", "diff", "--against"),
      ("series_against", "series", "--against"))
  def test_a_missing_tree_is_a_usage_error(self, command: str,
                                           option: str) -> None:
    for path, says in ((self.scratch / "nonexistent", "no such directory"),
                       (self.scratch / "nonexistent" / "jax",
                        "no such directory"),
                       (self.file, "not a directory")):
      with self.subTest(str(path)):
        status, out, err = _run(command, option, str(path))
        self.assertEqual((status, out), (2, ""), err)
        self.assert_one_error_line(command, err, f"{option} {path}: {says}")

  @parameterized.parameters("vendor", "diff")
  def test_a_folder_without_jax_is_no_jax_tree(self, command: str) -> None:
    option = "--into" if command == "vendor" else "--against"
    status, out, err = _run(command, option, str(self.scratch))
    self.assertEqual((status, out), (1, ""), err)
    self.assert_one_error_line(
        command, err, f"{self.scratch} is not a JAX tree: it has no "
        "jax/version.py")
    self.assertEqual(sorted(self.scratch.iterdir()), [self.file])

  def test_stubs_out_under_a_file_writes_nothing(self) -> None:
    for out in (self.file, self.file / "typings", self.file / "a" / "b"):
      with self.subTest(str(out)):
        status, stdout, err = _run("stubs", "--out", str(out))
        self.assertEqual((status, stdout), (2, ""), err)
        self.assert_one_error_line("stubs", err,
                                   f"--out {out}: not a directory")
    self.assertEqual(sorted(self.scratch.iterdir()), [self.file])

  @absltest.skipIf(not pathlib.Path("/proc/self").is_dir(),
                   "needs Linux's /proc, a folder that takes no new one")
  def test_stubs_out_that_cannot_be_made_is_a_usage_error(self) -> None:
    # /proc takes no new folder, even for root, whom permissions never stop.
    status, stdout, err = _run("stubs", "--out", "/proc/nope")
    self.assertEqual((status, stdout), (2, ""), err)
    self.assert_one_error_line("stubs", err,
                               "--out /proc/nope: cannot be made: /proc")
    self.assertFalse(pathlib.Path("/proc/nope").exists())

  def test_stubs_out_under_a_file_from_the_shell(self) -> None:
    # The installed command, as a user runs it: one line, no traceback.
    run = subprocess.run(
        [sys.executable, "-m", "jax_patch", "stubs", "--out",
         str(self.file / "typings")], capture_output=True, text=True,
        timeout=300, check=False, env=fresh_process.environment())
    self.assertEqual((run.returncode, run.stdout), (2, ""), run.stderr)
    self.assert_one_error_line("stubs", run.stderr, "not a directory")

  def test_file_commands_start_without_jax(self) -> None:
    # JAX prints warnings at import on some hosts (a TPU's): a command that
    # reads files must not import it, so its error stays one line.
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "jax_patch", "stubs",
         "--out", str(self.file / "typings")], capture_output=True,
        text=True, timeout=300, check=False, env=fresh_process.environment())
    imported = [line.rsplit("|", 1)[-1].strip()
                for line in run.stderr.splitlines()
                if line.startswith("import time:")]
    self.assertIn("jax_patch._delivery.cli", imported)
    self.assertNotIn("jax", imported)
    self.assertEqual(run.returncode, 2, run.stderr)

  def test_stubs_failing_midway_leaves_nothing_half_written(self) -> None:
    out = self.scratch / "new" / "typings"
    status, _, err = self._stubs_failing_at_third_file(out)
    self.assertEqual(status, 1, err)
    self.assert_one_error_line("stubs", err, "No space left on device")
    self.assertFalse((self.scratch / "new").exists())

  def test_stubs_failing_midway_keeps_the_package_there(self) -> None:
    out = self.scratch / "typings"
    status, _, err = _run("stubs", "--out", str(out))
    self.assertEqual(status, 0, err)
    before = {path: path.read_bytes() for path in out.rglob("*")
              if path.is_file()}
    status, _, err = self._stubs_failing_at_third_file(out)
    self.assertEqual(status, 1, err)
    self.assertEqual({path: path.read_bytes() for path in out.rglob("*")
                      if path.is_file()}, before)

  def _stubs_failing_at_third_file(
      self, out: pathlib.Path) -> tuple[int, str, str]:
    package = stubs.build(_INSTALLED, jax.__version__)
    if not package.files:
      self.skipTest(f"JAX {jax.__version__}'s stubs need no correction")
    written: list[pathlib.Path] = []
    write_bytes = pathlib.Path.write_bytes

    def disk_fills(path: pathlib.Path, data: bytes) -> int:
      written.append(path)
      if len(written) == 3:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
      return write_bytes(path, data)

    with mock.patch.object(pathlib.Path, "write_bytes", disk_fills):
      return _run("stubs", "--out", str(out))

  def test_series_patches_not_a_folder_is_a_usage_error(self) -> None:
    tree = _fake_jax(self.scratch / "jax-src", "0.11.1", "0.11.0")
    status, out, err = _run("series", "--against", str(tree), "--patches",
                            str(self.file))
    self.assertEqual((status, out), (2, ""), err)
    self.assert_one_error_line("series", err,
                               f"--patches {self.file}: not a directory")

  def test_series_patches_without_a_queue_is_said_in_one_line(self) -> None:
    tree = _fake_jax(self.scratch / "jax-src", "0.11.1", "0.11.0")
    status, out, err = _run("series", "--against", str(tree), "--patches",
                            str(self.scratch))
    self.assertEqual((status, out), (1, ""), err)
    self.assert_one_error_line("series", err, "not a patch set")


class UsageTest(_ScratchTest):
  """A usage error is said with the usage of the command given."""

  def _usage_error(self, *argv: str) -> str:
    """Runs argv, where argparse exits 2; returns what it said."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), \
        contextlib.redirect_stderr(err), \
        self.assertRaises(SystemExit) as raised:
      cli.main(list(argv))
    self.assertEqual(raised.exception.code, 2)
    return err.getvalue()

  @parameterized.parameters("check", "vendor", "diff", "stubs")
  def test_an_unknown_option_is_said_with_the_commands_usage(
      self, command: str) -> None:
    err = self._usage_error(command, "--bogus")
    self.assertStartsWith(err, f"usage: jax-patch {command} [-h]")
    self.assertEndsWith(
        err, f"jax-patch {command}: error: unrecognized arguments: --bogus\n")

  def test_vendor_into_and_revert_together_is_a_usage_error(self) -> None:
    tree = str(self.scratch)
    err = self._usage_error("vendor", "--into", tree, "--revert", tree)
    self.assertStartsWith(err, "usage: jax-patch vendor [-h]")
    self.assertEndsWith(err, "jax-patch vendor: error: argument --revert: "
                        "not allowed with argument --into\n")
    self.assertEqual(sorted(self.scratch.iterdir()), [self.file])


# `python -m jax_patch`, with SIGINT handled as in a terminal's foreground
# job: started from a background job (nohup, `&` in a script), the suite
# inherits SIGINT ignored, and Python keeps an ignored SIGINT ignored. (Not
# preexec_fn: it forks a process JAX's threads already run in.)
_JAX_PATCH_AS_IN_A_TERMINAL = (
    "import runpy, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "sys.argv[0] = 'jax-patch'\n"
    "runpy.run_module('jax_patch', run_name='__main__', alter_sys=True)\n")


class InterruptTest(parameterized.TestCase):
  """Ctrl-C stops ``check`` with one line and status 130, no traceback."""

  @parameterized.named_parameters(
      ("this_process", ()),
      # Each mode runs in a child process, which Ctrl-C reaches too.
      ("both_modes", ("--x64", "both")))
  def test_ctrl_c_during_check_says_one_line(self, mode: tuple[str, ...]
                                             ) -> None:
    # In a session of its own, as a terminal's foreground job: Ctrl-C sends
    # SIGINT to the whole process group.
    check_run = subprocess.Popen(
        [sys.executable, "-c", _JAX_PATCH_AS_IN_A_TERMINAL, "check", *mode],
        env=fresh_process.environment(dict(os.environ, PYTHONUNBUFFERED="1")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    self.addCleanup(check_run.kill)
    assert check_run.stdout is not None
    header = check_run.stdout.readline()  # JAX is imported: the cases run.
    self.assertStartsWith(header, "jax ")
    os.killpg(check_run.pid, signal.SIGINT)
    _, err = check_run.communicate(timeout=300)
    self.assertEqual(check_run.returncode, 130, err)
    self.assertNotIn("Traceback", err)
    self.assertNotIn("KeyboardInterrupt", err)
    self.assertEqual(err.count("interrupted"), 1, err)
    self.assertEndsWith(err, "jax-patch check: interrupted\n")

  def test_ctrl_c_that_python_loses_in_a_gc_callback_still_stops_check(
      self) -> None:
    # SIGINT arrives while a garbage-collection callback runs, as JAX's may:
    # Python reports the KeyboardInterrupt as unraisable and goes on.
    check_run = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_IN_A_GC_CALLBACK, "check"],
        env=fresh_process.environment(), capture_output=True, text=True,
        timeout=300, check=False)
    self.assertIn("interrupt raised in a gc callback", check_run.stdout)
    self.assertEqual(check_run.returncode, 130, check_run.stderr)
    self.assertNotIn("Traceback", check_run.stderr)
    self.assertEqual(check_run.stderr, "jax-patch check: interrupted\n")


# As _JAX_PATCH_AS_IN_A_TERMINAL, with SIGINT raised in the first garbage
# collection once the cases have begun.
_INTERRUPTED_IN_A_GC_CALLBACK = _JAX_PATCH_AS_IN_A_TERMINAL.replace(
    "sys.argv[0] = 'jax-patch'\n",
    "import gc\n"
    "def interrupt(phase, info):\n"
    "  if 'jax_patch.testing.conformance' in sys.modules:\n"
    "    gc.callbacks.remove(interrupt)\n"
    "    print('interrupt raised in a gc callback', flush=True)\n"
    "    signal.raise_signal(signal.SIGINT)\n"
    "gc.callbacks.append(interrupt)\n"
    "sys.argv[0] = 'jax-patch'\n")


class TestCommandTest(_ScratchTest):
  """The README's test command, ``python -m pytest -n auto tests``."""

  def test_it_says_why_each_test_skipped(self) -> None:
    # The project's pytest configuration, on a test that skips, on
    # pytest-xdist's workers as -n auto runs it.
    shutil.copy(_ROOT / "setup.cfg", self.scratch)
    (self.scratch / "tests").mkdir()
    (self.scratch / "tests" / "skips_test.py").write_text(textwrap.dedent("""\
        import unittest

        class SkipsTest(unittest.TestCase):

          def test_skips(self):
            self.skipTest("needs what this machine lacks")
        """))
    if importlib.util.find_spec("xdist") is None:
      self.skipTest("pytest-xdist is not installed: the README's command "
                    "(-n auto) needs it")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "1", "tests"],
        cwd=self.scratch, capture_output=True, text=True, timeout=300,
        check=False, env=fresh_process.environment())
    self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr)
    self.assertRegex(
        run.stdout, r"SKIPPED \[1\] tests/skips_test\.py:\d+: needs what this "
        r"machine lacks")


class VersionAndHelpTest(absltest.TestCase):

  def _exit(self, *argv: str) -> tuple[object, str]:
    """Runs argv where argparse exits (--help, --version): its exit code
    and stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), \
        contextlib.redirect_stderr(io.StringIO()), \
        self.assertRaises(SystemExit) as raised:
      cli.main(list(argv))
    return raised.exception.code, out.getvalue()

  def test_version_is_the_installed_packages(self) -> None:
    try:
      installed = importlib.metadata.version("jax-patch")
    except importlib.metadata.PackageNotFoundError:  # Run from the source.
      installed = jax_patch.__version__
    code, out = self._exit("--version")
    self.assertEqual(code, 0)
    self.assertEqual(out, f"jax-patch {installed}\n")

  def test_series_help_describes_the_queue(self) -> None:
    code, out = self._exit("series", "--help")
    self.assertEqual(code, 0)
    text = " ".join(out.split())
    for says in ("queue.json", "git format-patch", "stack.patch",
                 "never to JAX_SRC itself", "git am -3", "as a reviewer takes it",
                 "by file and hunk", "merge queue", "left-undone.json",
                 "--alone"):
      self.assertIn(says, text)


def _readme_queue() -> dict[int, list[int]]:
  """The queue table in docs/upstream.md: each row's number and "after"."""
  readme = (_ROOT / "docs" / "upstream.md").read_text()
  section = readme[readme.index("## The upstream queue"):]
  section = section[:section.index("\n## ", 1)]
  section = section[:section.index("\n| report |")]  # The bug reports' table.
  rows = {}
  for line in section.splitlines():
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    if re.fullmatch(r"\d{4}", cells[0]):
      rows[int(cells[0])] = [int(each) for each in re.findall(r"\d{4}",
                                                              cells[1])]
  return rows


class QueueTableTest(absltest.TestCase):
  """docs/upstream.md's table is upstream/queue.json, numbers and "after"."""

  def test_the_table_is_the_queue(self) -> None:
    patch_set = upstream_set.read(upstream_set.default_root())
    self.assertEqual(_readme_queue(),
                     {pr.number: list(pr.depends_on)
                      for pr in patch_set.pull_requests})

  def test_the_table_lists_every_report(self) -> None:
    readme = (_ROOT / "docs" / "upstream.md").read_text()
    rows = re.findall(r"^\| (\d{4}) \| ", readme[readme.index(
        "\n| report |"):], re.MULTILINE)
    reports = sorted(path.name[:4] for path in (
        upstream_set.default_root() / "reports").glob("*.md"))
    self.assertEqual(rows, reports)


if __name__ == "__main__":
  absltest.main()
