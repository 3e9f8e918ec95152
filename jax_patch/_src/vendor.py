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

"""Vendoring: writes the patch set into a JAX tree, shows it as a diff, and
takes it back out.

A JAX tree is a folder holding ``jax/``: a source checkout (with ``tests/``)
or the folder an installed ``jax`` package lies in. Vendoring copies our
``_src`` modules into ``jax/_src/`` with their imports rewritten, applies our
declarations to JAX's own files (``source_patch``), and adds our conformance
test to ``tests/`` of a checkout. What it replaced is kept under
``.jax_patch_vendor/`` in the tree, so ``revert`` can restore it byte for byte.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import pathlib
import re
import shutil

from jax_patch._src import source_patch

_SRC = pathlib.Path(__file__).absolute().parent

# Our module -> its name in jax/_src/.
VENDORED_MODULES = {
    "dlpack.py": "dlpack.py",
    "dlpack_capsule.py": "dlpack_capsule.py",
    "dlpack_compat.py": "dlpack_compat.py",
    "dlpack_device.py": "dlpack_device.py",
    "dlpack_errors.py": "dlpack_errors.py",
    "conformance.py": "dlpack_conformance.py",
}
VENDORED_TESTS = ("dlpack_conformance_test.py",)

# sha256 of the files vendoring replaces, as each JAX release from 0.4.35 to
# 0.10.2 ships them (tools/pristine_hashes.py writes the table).
PRISTINE: dict[str, dict[str, str]] = json.loads(
    (_SRC / "vendor_pristine.json").read_text())
SUPPORTED_VERSIONS = tuple(PRISTINE)  # Oldest first, as the table lists them.

BACKUP_DIR = ".jax_patch_vendor"
_MANIFEST = "manifest.json"
_VERSION = re.compile(r'^_version\s*=\s*"([^"]+)"', re.MULTILINE)
_IMPORT = re.compile(r"\bjax_patch\._src\b")


class VendorError(Exception):
  """The tree cannot be vendored into (or reverted) as asked."""


@dataclasses.dataclass(frozen=True)
class FileChange:
  path: str  # relative to the tree's root, with "/" separators
  before: bytes | None  # None: vendoring creates the file
  after: bytes


def jax_version(root: pathlib.Path) -> str:
  """The version of the JAX tree at ``root``, from ``jax/version.py``."""
  version_file = root / "jax" / "version.py"
  if not version_file.is_file():
    raise VendorError(f"{root} is not a JAX tree: it has no jax/version.py.")
  match = _VERSION.search(version_file.read_text())
  if match is None:
    raise VendorError(f"{version_file} does not set _version.")
  return match.group(1)


def _vendored_module(source: str) -> str:
  # Only conformance.py is renamed, and no vendored module imports it.
  return _IMPORT.sub("jax._src", source)


def _read(path: pathlib.Path) -> bytes | None:
  return path.read_bytes() if path.is_file() else None


def _is_checkout(root: pathlib.Path) -> bool:
  return (root / "tests").is_dir() and any(
      (root / name).is_file() for name in ("setup.py", "pyproject.toml"))


def plan(root: pathlib.Path) -> list[FileChange]:
  """Returns what vendoring into ``root`` would write, file by file."""
  changes = []
  for ours, theirs in VENDORED_MODULES.items():
    path = f"jax/_src/{theirs}"
    after = _vendored_module((_SRC / ours).read_text()).encode()
    changes.append(FileChange(path, _read(root / path), after))
  for path, corrections in source_patch.CORRECTIONS:
    before = _read(root / path)
    if before is None:
      raise VendorError(f"{root} has no {path} to correct.")
    corrected = source_patch.corrected(before.decode(),
                                       corrections.read_text())
    changes.append(FileChange(path, before, corrected.encode()))
  if _is_checkout(root):
    for name in VENDORED_TESTS:
      path = f"tests/{name}"
      after = (source_patch.PATCHES_ROOT / "tests" / name).read_bytes()
      changes.append(FileChange(path, _read(root / path), after))
  return [c for c in changes if c.before != c.after]


def _sha256(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def check(root: pathlib.Path, changes: list[FileChange]) -> str:
  """Returns the tree's JAX version if vendoring may proceed.

  Raises:
    VendorError: the version is unsupported, or a file to replace has local
      changes (it is neither as JAX ships it nor as vendoring writes it).
  """
  version = jax_version(root)
  pristine = PRISTINE.get(version)
  if pristine is None:
    raise VendorError(
        f"JAX {version} at {root} is not supported; jax-patch vendors into "
        f"JAX {SUPPORTED_VERSIONS[0]} to {SUPPORTED_VERSIONS[-1]}.")
  changed = [c.path for c in changes if c.before is not None
             and _sha256(c.before) != pristine.get(c.path)]
  if changed:
    raise VendorError(
        f"these files in {root} have local changes jax-patch does not "
        f"recognise: {', '.join(changed)}. Pass --force to overwrite them.")
  return version


def vendor(root: pathlib.Path, force: bool = False) -> list[FileChange]:
  """Vendors the patch set into the JAX tree at ``root``.

  Returns:
    The changes written; none if the tree is already vendored.

  Raises:
    VendorError: see :func:`check`; with ``force``, only for an unknown
      version or a tree that is not JAX's.
  """
  changes = plan(root)
  if force:
    jax_version(root)
  else:
    check(root, changes)
  _back_up(root, changes)
  for change in changes:
    target = root / change.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(change.after)
  return changes


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
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))


def revert(root: pathlib.Path) -> list[str]:
  """Restores every file vendoring changed in ``root``, byte for byte.

  Returns:
    The files restored or removed.

  Raises:
    VendorError: ``root`` holds no record of a vendoring.
  """
  backup = root / BACKUP_DIR
  manifest_path = backup / _MANIFEST
  if not manifest_path.is_file():
    raise VendorError(f"{root} was not vendored into (no {BACKUP_DIR}/).")
  manifest: dict[str, str] = json.loads(manifest_path.read_text())
  for path, kind in sorted(manifest.items()):
    target = root / path
    if kind == "created":
      target.unlink(missing_ok=True)
    else:
      target.write_bytes((backup / "files" / path).read_bytes())
  shutil.rmtree(backup)
  return sorted(manifest)


def _diff_lines(data: bytes | None) -> list[str]:
  if data is None:
    return []
  lines = data.decode().splitlines(keepends=True)
  if lines and not lines[-1].endswith("\n"):
    lines[-1] += "\n\\ No newline at end of file\n"
  return lines


def diff(root: pathlib.Path) -> str:
  """What vendoring into ``root`` would change, as ``git diff`` prints it.

  Paths are relative to ``root``, under ``a/`` and ``b/``, so the output
  applies with ``git apply`` or ``patch -p1`` to a pristine tree of the same
  JAX version.
  """
  check(root, changes := plan(root))
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
