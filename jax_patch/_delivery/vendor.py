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

"""Vendoring: writes the patch set into a JAX tree, and takes it back out.

It also shows what it would write, as a diff.

A JAX tree is a folder holding ``jax/``: a source checkout (with ``tests/``)
or the folder an installed ``jax`` package lies in. Vendoring copies our
``_src`` modules, and only those, into ``jax/_src/`` with their imports
rewritten, applies our declarations to JAX's own files (``source_patch``),
and in a checkout adds our conformance test and the catalogue it runs
(``jax_patch/testing``, its imports rewritten alike) to ``tests/`` and
corrects the assertions of JAX's own DLPack test that contradict the
standard (``jax_test_corrections``). A module written over one of JAX's
keeps JAX's copyright lines, ours beside them. What it replaced is kept
under ``.jax_patch_vendor/`` in the tree (which git ignores), so ``revert``
can restore it byte for byte, and ``diff`` can still say what vendoring
changed once the tree holds it.

Only files as upstream JAX has them are replaced. In a git checkout (any
commit, JAX's main branch included) those are the files git reports
unmodified against ``HEAD``; elsewhere, those whose sha256 is a known
release's (``vendor_pristine.json``), except JAX's DLPack test, whose
corrected declarations must each be as a known JAX has it.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess

from jax_patch._delivery import jax_test_corrections
from jax_patch._delivery import jax_tree
from jax_patch._delivery import source_patch
from jax_patch._src import dlpack_compat

_HERE = pathlib.Path(__file__).absolute().parent
# What runs inside JAX: the modules vendoring copies.
_SRC = _HERE.parent / "_src"
# What checks it: test code, which goes beside JAX's tests, never in jax/_src.
_TESTING = _HERE.parent / "testing"

# Our module of _src -> its name in jax/_src/.
VENDORED_MODULES = {
    "dlpack.py": "dlpack.py",
    "dlpack_capsule.py": "dlpack_capsule.py",
    "dlpack_compat.py": "dlpack_compat.py",
    "dlpack_device.py": "dlpack_device.py",
    "dlpack_errors.py": "dlpack_errors.py",
    "dlpack_export.py": "dlpack_export.py",
    "dlpack_plan.py": "dlpack_plan.py",
    "dlpack_request.py": "dlpack_request.py",
}
# Our module of testing -> its name in a checkout's tests/, beside the
# vendored tests that load it.
VENDORED_TEST_MODULES = {
    "conformance.py": "dlpack_conformance.py",
}
# The tests of patches/tests/ vendoring adds to a checkout's tests/.
VENDORED_TESTS = ("dlpack_conformance_test.py",)

# sha256 of the files vendoring replaces, as each JAX release of the tested
# range ships them (tools/pristine_hashes.py writes the table).
PRISTINE: dict[str, dict[str, str]] = json.loads(
    (_HERE / "vendor_pristine.json").read_text())
SUPPORTED_VERSIONS = tuple(PRISTINE)  # Oldest first, as the table lists them.

BACKUP_DIR = ".jax_patch_vendor"
_MANIFEST = "manifest.json"
# Inside BACKUP_DIR: git ignores the record (this file included) without the
# fork's own .gitignore being touched, so `git add -A` leaves it out.
_IGNORE_ALL = ("# jax-patch's record of what vendoring replaced, for "
               "`jax-patch vendor --revert`.\n*\n")
_IMPORT = re.compile(r"\bjax_patch\._src\b")
_NOTICE = re.compile(rb"#\s*Copyright\b")


class VendorError(Exception):
  """The tree cannot be vendored into (or reverted) as asked."""


@dataclasses.dataclass(frozen=True)
class FileChange:
  path: str  # relative to the tree's root, with "/" separators
  before: bytes | None  # None: vendoring creates the file
  after: bytes


@dataclasses.dataclass(frozen=True)
class Prepared:
  """What vendoring into a tree writes, once :func:`check` has allowed it."""
  changes: list[FileChange]
  # What the user should know: an untested version, overwritten changes.
  notes: list[str]


def jax_version(root: pathlib.Path) -> str:
  """The version of the JAX tree at ``root``, from ``jax/version.py``.

  Raises:
    VendorError: ``root`` is no JAX tree (see ``jax_tree.read_version``).
  """
  try:
    return jax_tree.read_version(root)
  except jax_tree.JaxTreeError as err:
    raise VendorError(str(err)) from err


def _vendored_module(source: str) -> str:
  # The modules of _src keep their names in jax/_src: only the package
  # changes. (The catalogue is renamed, but no module imports it.)
  return _IMPORT.sub("jax._src", source)


def vendored_test_module(ours: str) -> str:
  """Our module ``ours`` of ``jax_patch/testing``, as vendoring writes it.

  Its ``jax_patch._src`` imports become ``jax._src`` ones: beside a vendored
  tree's tests it runs against that tree's modules.
  """
  return _vendored_module((_TESTING / ours).read_text())


def _read(path: pathlib.Path) -> bytes | None:
  return path.read_bytes() if path.is_file() else None


# A tree's files as vendoring found them: path -> content (None: absent),
# for the paths a vendor record lists; the others are read from the tree.
Originals = dict[str, bytes | None]


def _original(root: pathlib.Path, path: str,
              originals: Originals | None) -> bytes | None:
  """``path`` in ``root`` as it was before vendoring, where that is known."""
  if originals is not None and path in originals:
    return originals[path]
  return _read(root / path)


def _notices(source: bytes) -> list[bytes]:
  """The copyright lines of ``source``'s leading comment block."""
  notices = []
  for line in source.splitlines():
    if not line.startswith(b"#"):
      break
    if _NOTICE.match(line):
      notices.append(line)
  return notices


def _with_jax_notice(before: bytes | None, after: bytes) -> bytes:
  """Our module ``after``, to be written over ``before``, with its notices.

  Apache-2.0 4(c): a file derived from JAX's keeps JAX's copyright notice.
  Each copyright line ``before`` has and ``after`` lacks goes first, as JAX
  has it; ours (``after``'s first line) follows, then the license block,
  once, since both are under Apache-2.0. A file JAX lacks (``before`` None)
  gets ours alone. Vendoring again leaves the result as it is.
  """
  if before is None:
    return after
  ours = set(_notices(after))
  theirs = [line for line in _notices(before) if line not in ours]
  return b"".join(line + b"\n" for line in theirs) + after


def _ours_over(root: pathlib.Path, path: str, after: bytes,
               originals: Originals | None) -> FileChange:
  """Our file ``after`` written to ``path`` in ``root``, over JAX's if any."""
  before = _original(root, path, originals)
  return FileChange(path, before, _with_jax_notice(before, after))


def _is_source_tree(root: pathlib.Path) -> bool:
  return any((root / name).is_file() for name in ("setup.py", "pyproject.toml"))


def _is_checkout(root: pathlib.Path) -> bool:
  return (root / "tests").is_dir() and _is_source_tree(root)


def missing_tests_note(root: pathlib.Path) -> list[str]:
  """Says which test files vendoring into ``root`` leaves out, and why.

  Returns:
    That note, for a source tree without ``tests/`` (as JAX's source
    distribution is), where a user expects them; else none. An installed
    JAX's folder is no source tree: the test files have no place there.
  """
  if not _is_source_tree(root) or _is_checkout(root):
    return []
  left_out = ", ".join(
      f"tests/{name}" for name in [*VENDORED_TEST_MODULES.values(),
                                   *VENDORED_TESTS])
  return [f"{root} has no tests/ folder (as a JAX source distribution has "
          f"none), so the test files are left out: {left_out}. To add them, "
          f"make {root / 'tests'} and vendor again."]


def plan(root: pathlib.Path, skipped: list[str] | None = None,
         originals: Originals | None = None) -> list[FileChange]:
  """Returns what vendoring into ``root`` would write, file by file.

  Args:
    skipped: where given, a JAX test declaration too unfamiliar to correct
      is left as it is, and why is appended here; otherwise it raises.
    originals: where given, the files vendoring found in ``root`` (see
      :func:`recorded_originals`): the plan is for ``root`` as it was then.

  Raises:
    VendorError: ``root`` lacks a file to correct, or (``skipped`` not
      given) its DLPack test has a declaration jax-patch cannot correct.
  """
  changes = []
  for ours, theirs in VENDORED_MODULES.items():
    after = _vendored_module((_SRC / ours).read_text()).encode()
    changes.append(_ours_over(root, f"jax/_src/{theirs}", after, originals))
  for path, corrections in source_patch.CORRECTIONS:
    before = _original(root, path, originals)
    if before is None:
      raise VendorError(f"{root} has no {path} to correct.")
    corrected = source_patch.corrected(before.decode(),
                                       corrections.read_text(),
                                       keep_same_shape=path.endswith(".pyi"))
    changes.append(FileChange(path, before, corrected.encode()))
  if _is_checkout(root):
    for ours, theirs in VENDORED_TEST_MODULES.items():
      after = vendored_test_module(ours).encode()
      changes.append(_ours_over(root, f"tests/{theirs}", after, originals))
    for name in VENDORED_TESTS:
      after = (source_patch.PATCHES_ROOT / "tests" / name).read_bytes()
      changes.append(_ours_over(root, f"tests/{name}", after, originals))
    changes.extend(_corrected_jax_tests(root, skipped, originals))
  return [c for c in changes if c.before != c.after]


def _corrected_jax_tests(root: pathlib.Path, skipped: list[str] | None,
                         originals: Originals | None) -> list[FileChange]:
  """JAX's own DLPack test, its standard-contradicting assertions corrected."""
  path = jax_test_corrections.TEST_FILE
  before = _original(root, path, originals)
  if before is None:
    return []
  try:
    after = jax_test_corrections.corrected(before.decode())
  except jax_test_corrections.UnknownDeclarationError as err:
    if skipped is None:
      raise VendorError(f"{err} Pass --force to vendor without correcting "
                        "it.") from err
    skipped.append(f"{err} Left as it is (--force).")
    return []
  return [FileChange(path, before, after.encode())]


def _sha256(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def release(version: str) -> tuple[int, ...]:
  """A JAX version as numbers: ``"0.12.0.1"`` -> ``(0, 12, 0, 1)``.

  A ``.dev`` or ``rc`` tail is dropped.
  """
  match = re.match(r"\d+(\.\d+)*", version)
  if match is None:
    raise VendorError(f"cannot read JAX version {version!r}.")
  return tuple(int(part) for part in match.group().split("."))


def _git(root: pathlib.Path, *args: str) -> str | None:
  """Runs git in ``root``; None when git is missing or fails.

  Raises:
    VendorError: git fails, or is missing, where ``root`` is a repository's
      top level: its files cannot then be judged.
  """
  env = dict(os.environ, GIT_LITERAL_PATHSPECS="1")
  try:
    run = subprocess.run(["git", *args], cwd=root, env=env,
                         capture_output=True, text=True, check=False)
  except FileNotFoundError:
    run = None
  if run is not None and run.returncode == 0:
    return run.stdout
  if (root / ".git").exists():
    why = run.stderr.strip() if run is not None else "git is not installed"
    raise VendorError(f"{root} is a git checkout, but `git {args[0]}` "
                      f"failed there: {why}")
  return None


def _git_unmodified(root: pathlib.Path,
                    paths: list[str]) -> dict[str, bool] | None:
  """Whether git has each of ``paths`` in ``root`` exactly as ``HEAD`` does.

  Returns:
    None unless ``root`` is a git checkout of JAX: git tracks its
    ``jax/version.py`` at ``HEAD``. (An installed JAX inside some other
    repository, such as a virtualenv in a project, is not one.)

  Raises:
    VendorError: see :func:`_git`.
  """
  listing = _git(root, "ls-tree", "-z", "HEAD", "--", "jax/version.py",
                 *paths)
  if listing is None:
    return None
  in_head = {}  # path, relative to root -> its blob at HEAD
  for entry in filter(None, listing.split("\0")):
    meta, path = entry.split("\t", 1)  # "<mode> <type> <blob>\t<path>"
    in_head[path] = meta.split()[2]
  if "jax/version.py" not in in_head:
    return None
  # hash-object applies the path's attributes (eol, filters) as git status
  # does, and sees changes that skip-worktree or assume-unchanged hide.
  hashed = _git(root, "hash-object", "--", *paths) if paths else ""
  if hashed is None:
    return None
  return {path: in_head.get(path) == sha
          for path, sha in zip(paths, hashed.split())}


def is_newer_than_tested(version: str) -> bool:
  """Whether JAX ``version`` is past the newest release the patch was run on."""
  return release(version) > release(dlpack_compat.NEWEST_TESTED_JAX)


def _version_refusal(root: pathlib.Path, version: str,
                     by_git: bool) -> str | None:
  """Why JAX ``version`` at ``root`` is not to be vendored into, if it is not.

  A release outside the tested range is refused. So is one inside it that the
  pristine table lacks, unless git vouches for the files.
  """
  if release(version) < release(dlpack_compat.OLDEST_TESTED_JAX):
    return (f"JAX {version} at {root} is older than the tested range "
            f"({dlpack_compat.TESTED_RANGE}); the patch does not run there.")
  if is_newer_than_tested(version):
    return (f"JAX {version} at {root} is newer than the tested range "
            f"({dlpack_compat.TESTED_RANGE}).")
  if not by_git and version not in PRISTINE:
    return (f"JAX {version} at {root} is not a release jax-patch has the "
            f"files of ({dlpack_compat.TESTED_RANGE}), and not a git "
            "checkout, so its local changes cannot be told apart.")
  return None


def check(root: pathlib.Path, changes: list[FileChange],
          force: bool = False) -> list[str]:
  """Decides whether vendoring ``changes`` into ``root`` may go ahead.

  A file to replace must be upstream's: in a git checkout of JAX, as ``HEAD``
  has it; elsewhere, as the tree's release ships it (``PRISTINE``). The
  version must be in the tested range, except in a git checkout, where a
  newer one (JAX's main branch) goes ahead with a note: git vouches for the
  files, and the vendored conformance test is there to run.

  Returns:
    Notes for the user: an untested version, what ``force`` overrode.

  Raises:
    VendorError: ``root`` is not a JAX tree; or, without ``force``, its
      version is refused or a file to replace has local changes (named).
  """
  version = jax_version(root)
  replaced = [c.path for c in changes if c.before is not None]
  notes = []
  try:
    in_git = _git_unmodified(root, replaced)
  except VendorError as err:
    if not force:
      raise VendorError(f"{err} Pass --force to vendor anyway.") from err
    notes.append(f"{err} Going ahead without git (--force).")
    in_git = None
  refusal = _version_refusal(root, version, by_git=in_git is not None)
  if refusal is None:
    pass
  elif in_git is not None and is_newer_than_tested(version):
    notes.append(f"{refusal} Vendoring is untested there; the files git "
                 "reports unmodified are upstream's. Run "
                 "tests/dlpack_conformance_test.py in the tree.")
  elif force:
    unchecked = in_git is None and version not in PRISTINE
    notes.append(f"{refusal} Going ahead (--force)"
                 + (", overwriting its files unchecked." if unchecked else "."))
  else:
    raise VendorError(f"{refusal} Pass --force to vendor anyway.")
  if in_git is not None:
    changed = [path for path in replaced if not in_git[path]]
    rule = "git reports them modified against HEAD"
  elif version in PRISTINE:
    changed = [c.path for c in changes if c.before is not None
               and c.path != jax_test_corrections.TEST_FILE
               and _sha256(c.before) != PRISTINE[version].get(c.path)]
    rule = f"they are not as JAX {version} ships them"
  else:  # Only with force: the refusal above said why nothing is known.
    return notes
  if changed and not force:
    raise VendorError(
        f"these files in {root} have local changes ({rule}): "
        f"{', '.join(changed)}. Pass --force to overwrite them.")
  if changed:
    notes.append(f"overwriting local changes (--force): {', '.join(changed)}")
  return notes


def prepare(root: pathlib.Path, force: bool = False) -> Prepared:
  """Plans vendoring into ``root`` and checks it (see :func:`check`)."""
  skipped: list[str] | None = [] if force else None
  changes = plan(root, skipped)
  return Prepared(changes, check(root, changes, force) + (skipped or [])
                  + missing_tests_note(root))


def vendor(root: pathlib.Path, force: bool = False) -> Prepared:
  """Vendors the patch set into the JAX tree at ``root``.

  Returns:
    The changes written (none if the tree is already vendored) and the notes
    of :func:`check`.

  Raises:
    VendorError: see :func:`check`.
  """
  prepared = prepare(root, force)
  _back_up(root, prepared.changes)
  for change in prepared.changes:
    target = root / change.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(change.after)
  return prepared


def _back_up(root: pathlib.Path, changes: list[FileChange]) -> None:
  """Keeps the first original of every file changed, across vendor runs."""
  backup = root / BACKUP_DIR
  manifest_path = backup / _MANIFEST
  manifest: dict[str, str] = (json.loads(manifest_path.read_text())
                              if manifest_path.is_file() else {})
  for change in changes:
    if change.path in manifest:
      continue
    if change.before is None:
      manifest[change.path] = "created"
    else:
      saved = backup / "files" / change.path
      saved.parent.mkdir(parents=True, exist_ok=True)
      saved.write_bytes(change.before)
      manifest[change.path] = "modified"
  if manifest:
    backup.mkdir(exist_ok=True)
    (backup / ".gitignore").write_text(_IGNORE_ALL)
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))


def recorded_originals(root: pathlib.Path) -> Originals | None:
  """What vendoring found in ``root``, as its record (``BACKUP_DIR``) kept it.

  Returns:
    Each file vendoring changed -> its content before (None: vendoring
    created it); None where ``root`` holds no record of a vendoring.
  """
  backup = root / BACKUP_DIR
  manifest_path = backup / _MANIFEST
  if not manifest_path.is_file():
    return None
  manifest: dict[str, str] = json.loads(manifest_path.read_text())
  return {path: None if kind == "created"
          else (backup / "files" / path).read_bytes()
          for path, kind in sorted(manifest.items())}


def revert(root: pathlib.Path) -> list[str]:
  """Restores every file vendoring changed in ``root``, byte for byte.

  Returns:
    The files restored or removed.

  Raises:
    VendorError: ``root`` holds no record of a vendoring.
  """
  originals = recorded_originals(root)
  if originals is None:
    raise VendorError(f"{root} was not vendored into (no {BACKUP_DIR}/).")
  for path, before in originals.items():
    target = root / path
    if before is None:
      target.unlink(missing_ok=True)
    else:
      target.write_bytes(before)
  shutil.rmtree(root / BACKUP_DIR)
  return list(originals)


def _diff_lines(data: bytes | None) -> list[str]:
  if data is None:
    return []
  lines = data.decode().splitlines(keepends=True)
  if lines and not lines[-1].endswith("\n"):
    lines[-1] += "\n\\ No newline at end of file\n"
  return lines


def diff(root: pathlib.Path, force: bool = False) -> str:
  """What vendoring into ``root`` changes, as ``git diff`` prints it.

  Raises:
    VendorError: see :func:`prepare_diff`.
  """
  return git_diff(prepare_diff(root, force).changes)


def prepare_diff(root: pathlib.Path, force: bool = False) -> Prepared:
  """What vendoring changes in ``root`` as upstream has it: ``diff``'s changes.

  In a tree vendored into already, that is what vendoring writes into the
  files its record (``BACKUP_DIR``) kept, with a note saying so, and naming
  any file that now differs from that (edited since, or vendored by another
  jax-patch). The record's files were judged when they were vendored into.

  Raises:
    VendorError: see :func:`check`; or ``root`` already holds every file as
      vendoring writes it, and no record of what they replaced: the diff
      would be empty.
  """
  originals = recorded_originals(root)
  if originals is None:
    prepared = prepare(root, force)
    if not prepared.changes:
      raise VendorError(
          f"{root} already holds every file as vendoring writes it, and no "
          f"record of the files they replaced ({BACKUP_DIR}/), so there is "
          "no diff to print. Run it against a tree of the same JAX that "
          "is not vendored into.")
    return prepared
  skipped: list[str] | None = [] if force else None
  changes = plan(root, skipped, originals)
  notes = [f"{root} is vendored into already: this is the diff against the "
           f"files vendoring replaced there, as {BACKUP_DIR}/ kept them."]
  differ = _differ_from(root, changes, originals)
  if differ:
    notes.append(f"these files in {root} differ from what this jax-patch "
                 f"vendors (changed since, or vendored by another version): "
                 f"{', '.join(differ)}.")
  return Prepared(changes, notes + (skipped or []) + missing_tests_note(root))


def _differ_from(root: pathlib.Path, changes: list[FileChange],
                 originals: Originals) -> list[str]:
  """The files of ``root`` that differ from what vendoring left there.

  That is, from ``originals`` with ``changes`` applied.
  """
  expected = {**originals, **{c.path: c.after for c in changes}}
  return [path for path, data in sorted(expected.items())
          if _read(root / path) != data]


def git_diff(changes: list[FileChange]) -> str:
  """``changes`` as ``git diff`` prints them.

  Paths are relative to the tree's root, under ``a/`` and ``b/``, so the
  output applies with ``git apply`` or ``patch -p1`` to a pristine tree of
  the same JAX version (or commit).
  """
  out = []
  for change in changes:
    out.append(f"diff --git a/{change.path} b/{change.path}\n")
    if change.before is None:
      out.append("new file mode 100644\n")
    out.extend(difflib.unified_diff(
        _diff_lines(change.before), _diff_lines(change.after),
        fromfile="/dev/null" if change.before is None else f"a/{change.path}",
        tofile=f"b/{change.path}"))
  return "".join(out)
