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
import contextlib
import importlib.metadata
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from typing import Any
from collections.abc import Iterator, Sequence

from jax_patch._delivery import check


class _UsageError(Exception):
  """A path given on the command line is no directory, or cannot be made one.

  (The latter where the command writes there.) The command says so in one
  line and exits 2, as argparse does for its own usage errors, writing
  nothing.
  """


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
  """``path``, given as ``option``, where it is or can be made a directory.

  It can where its nearest existing parent is a directory that takes a new
  one. Leaves nothing made.

  Raises:
    _UsageError: it, or that parent, is no directory; or that parent takes
      no new directory.
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
  if existing != directory:
    _check_can_make_directory_in(existing, f"{option} {path}")
  return directory


def _check_can_make_directory_in(parent: pathlib.Path, given: str) -> None:
  """Raises _UsageError unless a directory can be made in ``parent``.

  Tried, then removed: permissions alone do not tell (root may write
  anywhere, yet /proc takes nothing; a read-only mount).
  """
  try:
    os.rmdir(tempfile.mkdtemp(prefix=".jax-patch-", dir=parent))
  except OSError as err:
    raise _UsageError(f"{given}: cannot be made: {parent} takes no new "
                      f"directory ({err.strerror})") from err


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
    prepared = vendor.prepare_diff(root, force=args.force)
  except vendor.VendorError as err:
    _error("diff", err)
    return 1
  _print_notes("diff", prepared.notes)
  sys.stdout.write(vendor.git_diff(prepared.changes))
  return 0


def _series_command(args: argparse.Namespace) -> int:
  from jax_patch._delivery import series  # pylint: disable=g-import-not-at-top
  from jax_patch._delivery import series_tree  # pylint: disable=g-import-not-at-top
  from jax_patch._delivery import upstream_set  # pylint: disable=g-import-not-at-top
  root = _directory(args.against, "--against")
  patches = (_directory(args.patches, "--patches") if args.patches
             else upstream_set.default_root())
  try:
    patch_set = upstream_set.read(patches)
    return series.check(root, patch_set, python=args.python,
                        interop_test=args.interop_test, alone=args.alone,
                        speed=args.speed, gates=not args.runtime_only,
                        one_step=args.one_step)
  except (series_tree.SeriesError, upstream_set.PatchSetError,
          OSError) as err:
    _error("series", err)
    return 1


def _add_stubs_parser(commands: Any) -> argparse.ArgumentParser:
  from jax_patch._delivery import stubs  # pylint: disable=g-import-not-at-top
  parser: argparse.ArgumentParser = commands.add_parser(
      "stubs", help="write the installed JAX's .pyi files, with the "
      "declarations the patch corrects, as a partial stub package jax-stubs "
      "that mypy, pyright and pyrefly read over the installed JAX: with "
      "--install, into this interpreter's site-packages (where every checker "
      "finds it, however run); else into DIR/jax-stubs")
  parser.add_argument(
      "--install", action="store_true",
      help=f"install it as the distribution {stubs.DISTRIBUTION} into "
      "this interpreter's site-packages (pip uninstall removes it), "
      "replacing one installed so before")
  parser.add_argument(
      "--out", metavar="DIR", default=None,
      help=f"where jax-stubs goes without --install (default: "
      f"{stubs.DEFAULT_DIR}, pyright's default stubPath)")
  parser.add_argument(
      "--check", action="store_true",
      help="write nothing; exit 1 when the stubs installed (--install) or "
      "in DIR do not match the installed JAX (after a JAX upgrade: run "
      "without --check)")
  return parser


def _build_stubs(root: pathlib.Path) -> Any:
  """The installed JAX's corrected stubs, or ``None`` when they cannot be.

  The result is a ``stubs.StubPackage``; why it could not be built is said.
  """
  from jax_patch._delivery import stubs  # pylint: disable=g-import-not-at-top
  from jax_patch._delivery import vendor  # pylint: disable=g-import-not-at-top
  try:
    return stubs.build(root, vendor.jax_version(root))
  except (stubs.StubsError, vendor.VendorError) as err:
    _error("stubs", err)
    return None


def _print_mismatch(header: str, found: list[str]) -> None:
  """Says on stderr that stubs do not match, and each difference."""
  print(f"jax-patch stubs: {header}", file=sys.stderr)
  for difference in found:
    print(f"  {difference}", file=sys.stderr)


def _stubs_command(args: argparse.Namespace) -> int:
  from jax_patch._delivery import stubs  # pylint: disable=g-import-not-at-top
  if args.install and args.out is not None:
    raise _UsageError("--out DIR: not with --install, which installs into "
                      "this interpreter's site-packages")
  if args.install:
    return _stubs_install(args, stubs.site_packages())
  out_arg = stubs.DEFAULT_DIR if args.out is None else args.out
  root = _installed_jax_root()
  out = (pathlib.Path(out_arg) if args.check
         else _output_directory(out_arg, "--out"))
  package = _build_stubs(root)
  if package is None:
    return 1
  where = out / stubs.STUB_PACKAGE
  if args.check:
    found = stubs.differences(out, package)
    if found:
      _print_mismatch(f"{where} does not match JAX {package.jax_version}; "
                      f"run `jax-patch stubs --out {out}`:", found)
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


def _stubs_install(args: argparse.Namespace, site: pathlib.Path) -> int:
  """``jax-patch stubs --install [--check]`` into ``site``."""
  from jax_patch._delivery import stubs  # pylint: disable=g-import-not-at-top
  root = _installed_jax_root()
  package = _build_stubs(root)
  if package is None:
    return 1
  name = f"{stubs.DISTRIBUTION} {package.jax_version}"
  if args.check:
    found = stubs.installed_differences(site, package)
    if found:
      _print_mismatch(f"{stubs.DISTRIBUTION} in {site} does not match JAX "
                      f"{package.jax_version}; run `jax-patch stubs "
                      "--install`:", found)
      return 1
    print(f"{name} in {site} matches JAX {package.jax_version}"
          if package.files else
          f"JAX {package.jax_version}'s stubs need no correction, and "
          f"{stubs.DISTRIBUTION} is not installed in {site}")
    return 0
  try:
    installed = stubs.install(site, package)
  except stubs.StubsError as err:
    _error("stubs", err)
    return 1
  except OSError as err:
    _error("stubs", f"cannot install into {site}: {err}")
    return 1
  if not installed:
    print(f"JAX {package.jax_version}'s stubs already declare what the "
          f"patch corrects: nothing to install ({stubs.DISTRIBUTION} "
          "uninstalled if it was there)")
    return 0
  print(f"installed {name} into {site} ({len(installed)} files; "
        f"`pip uninstall {stubs.DISTRIBUTION}` removes it)")
  return 0


def version() -> str:
  """This jax-patch's version, as installed (else as its source says)."""
  try:
    return importlib.metadata.version("jax-patch")
  except importlib.metadata.PackageNotFoundError:  # Run from a source tree.
    import jax_patch  # pylint: disable=g-import-not-at-top
    return jax_patch.__version__


_SERIES_DESCRIPTION = """\
Applies the upstream patch set (PATCHES: queue.json, NNNN-*.patch from git
format-patch, stack.patch, reports/) to a scratch copy of JAX_SRC with git,
never to JAX_SRC itself, and checks it. Each pull request is a step (git am
-3, its CHANGELOG.md entry placed last in its section); on the tree it was
cut on (a release's sdist with that jax/ too) it also applies as a reviewer
takes it; a patch that does not apply is reported by file and hunk.
After each step: JAX imports and JAX's pre-commit gates pass (ruff, pyrefly,
the hooks); then the merge queue (the pull requests in order give
stack.patch's tree), the conformance cases (but those in
left-undone.json) and the reports' reproducers on the unpatched tree. The
last line is `N passed, N failed`.
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
      "--x64", choices=(*check.X64_MODES, "both"),
      help="run with jax_enable_x64 on or off, or both (each in a process "
      "of its own); default: the mode the environment gives "
      "(JAX_ENABLE_X64)")
  check_parser.add_argument(
      "--require-gpu", action="store_true",
      help="also fail unless every GPU case passes for the patch; skips "
      "count as failures, but for cases that never run with JAX on CUDA or "
      "in this x64 mode, each named with why")
  check_parser.add_argument(
      "--require-accelerator", action="store_true",
      help="also fail unless every accelerator case passes for the patch, "
      "on JAX's default device (a GPU or TPU); skips count as failures, but "
      "for those named with why")
  vendor_parser = commands.add_parser(
      "vendor", help="write the patch set into a JAX tree; with no --into, "
      "into a scratch copy of the installed JAX, then run the cases there")
  vendor_target = vendor_parser.add_mutually_exclusive_group()
  vendor_target.add_argument("--into", metavar="ROOT",
                             help="the folder holding jax/")
  vendor_parser.add_argument(
      "--force", action="store_true",
      help="vendor anyway: into a JAX outside the tested range, over files "
      "with local changes")
  vendor_target.add_argument("--revert", metavar="ROOT",
                             help="restore what vendoring changed in ROOT")
  diff_parser = commands.add_parser(
      "diff", help="print what vendor would change, as a git diff (in a "
      "tree vendored into already: what it changed there)")
  diff_parser.add_argument("--against", metavar="ROOT",
                           help="a JAX tree (default: the installed JAX)")
  diff_parser.add_argument(
      "--force", action="store_true",
      help="diff anyway: against a JAX outside the tested range, or files "
      "with local changes")
  series_parser = commands.add_parser(
      "series", help="apply the upstream patch set (upstream/) to a JAX "
      "tree's scratch copy with git and check it: step by step, as a merge "
      "queue, each pull request alone, and its cases",
      description=_SERIES_DESCRIPTION)
  series_parser.add_argument("--against", metavar="JAX_SRC", required=True,
                             help="the JAX tree: a checkout or an sdist")
  series_parser.add_argument(
      "--patches", metavar="PATCHES",
      help="the patch set (default: upstream/ in jax-patch's checkout)")
  series_parser.add_argument(
      "--python", default=sys.executable,
      help="the interpreter to check with: one with a jaxlib JAX_SRC "
      "accepts, ruff and pyrefly (default: this one)")
  series_parser.add_argument(
      "--interop-test", action="store_true",
      help="also run JAX_SRC's DLPack test after each step")
  series_parser.add_argument(
      "--alone", action="store_true",
      help="also check each pull request on JAX_SRC plus its dependencies "
      "only: plain git am applies it, the DLPack test passes, its new tests "
      "fail without its change (a tree with JAX's tests)")
  series_parser.add_argument(
      "--runtime-only", action="store_true",
      help="leave out JAX's pre-commit gates, which read the text alone: "
      "for a second check at another jaxlib, once the first passed")
  series_parser.add_argument(
      "--one-step", action="store_true",
      help="check JAX's gates and imports once, on the whole stack, not "
      "after each pull request (a minute each): each still applies as a "
      "reviewer takes it and to the stack")
  series_parser.add_argument(
      "--speed", action="store_true",
      help="also time the import and export of small arrays with the whole "
      "queue against JAX_SRC, back to back (minutes; wants a quiet machine)")
  stubs_parser = _add_stubs_parser(commands)
  args = _parse(argv, parser, {
      "check": check_parser, "vendor": vendor_parser, "diff": diff_parser,
      "series": series_parser, "stubs": stubs_parser})
  try:
    return _run_command(args)
  except _UsageError as err:
    _error(args.command, err)
    return 2
  except KeyboardInterrupt:
    return _interrupted(args.command)


def _parse(argv: Sequence[str] | None, parser: argparse.ArgumentParser,
           command_parsers: dict[str, argparse.ArgumentParser]
           ) -> argparse.Namespace:
  """Parses ``argv``; an argument the command lacks is said with its usage.

  (argparse's own parse_args says it with the top-level usage.) Exits 2 on
  a usage error, as argparse does.
  """
  args, unknown = parser.parse_known_args(argv)
  if unknown:
    command_parsers[args.command].error(
        f"unrecognized arguments: {' '.join(unknown)}")
  return args


# Set in the environment of the processes `check --x64 both` starts: Ctrl-C
# reaches them too, and their parent says it was interrupted, once.
_PARENT_SAYS_INTERRUPTED = "JAX_PATCH_PARENT_SAYS_INTERRUPTED"


def _interrupted(command: str) -> int:
  """Says Ctrl-C stopped ``command`` in one line, not a traceback.

  Returns:
    130, the status a shell gives a command SIGINT stopped.
  """
  if not os.environ.get(_PARENT_SAYS_INTERRUPTED):
    print(f"jax-patch {command}: interrupted", file=sys.stderr)
  return 130


@contextlib.contextmanager
def _children_leave_interrupts_to_us() -> Iterator[None]:
  """Has the jax-patch processes started within leave Ctrl-C to this one.

  They stop quietly, with status 130; this one says it was interrupted.
  """
  before = os.environ.get(_PARENT_SAYS_INTERRUPTED)
  os.environ[_PARENT_SAYS_INTERRUPTED] = "1"
  try:
    yield
  finally:
    if before is None:
      del os.environ[_PARENT_SAYS_INTERRUPTED]
    else:
      os.environ[_PARENT_SAYS_INTERRUPTED] = before


def _run_command(args: argparse.Namespace) -> int:
  if args.command == "stubs":
    return _stubs_command(args)
  if args.command == "series":
    return _series_command(args)
  if args.command == "check":
    with _children_leave_interrupts_to_us():
      return check.check(as_json=args.json, x64=args.x64,
                         require_gpu=args.require_gpu,
                         require_accelerator=args.require_accelerator)
  if args.command == "vendor":
    return _vendor_command(args)
  return _diff_command(args)


if __name__ == "__main__":
  sys.exit(main())
