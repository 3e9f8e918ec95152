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

"""``jax-patch stubs``: the installed JAX's typing stubs, corrected.

The stubs are for the type checkers in users' own CI.

JAX's ``.pyi`` files declare ``jax.Array.__dlpack__`` without the standard's
keywords and no ``__dlpack_device__``, so a checker rejects calls the patch
accepts. This writes, under a folder ``DIR``, a PEP 561 partial stub package
``DIR/jax-stubs`` that pyright (whose default ``stubPath`` is ``typings``),
pyrefly (``site-package-path``) and mypy (a stub package on ``PYTHONPATH``:
it looks for none on ``mypy_path``) each merge over the installed ``jax``:

- ``py.typed``, reading ``partial``: every module the package lacks is the
  installed JAX's own.
- every ``.pyi`` file the installed ``jax`` ships, as it ships it, but with
  our declarations set (``source_patch``) in those the patch corrects.
  pyright no longer reads a library's own ``.pyi`` files once a partial
  stub package covers it (measured with 1.1.414: ``jax.numpy``'s and
  ``jax.nn``'s names became unknown), so the uncorrected ones go in too.
- ``__init__.py``, the installed ``jax/__init__.py`` byte for byte: pyrefly
  1.1.1 takes a stub package without one for all of ``jax``, and JAX's own
  file (not a ``.pyi``, whose re-export rules differ) keeps ``jax``'s names
  as the installed package has them.

Nothing else: every ``.py`` module of JAX but ``__init__`` resolves to the
installed one. A regular package (``DIR/jax/``) would not do: pyright and
pyrefly then look for every ``jax`` submodule there, and mypy ignores a
package on its path whose parent lacks an ``__init__``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import tempfile

from jax_patch._delivery import source_patch

STUB_PACKAGE = "jax-stubs"
# pyright's default stubPath, which pyrefly 1.5 and later read too.
DEFAULT_DIR = "typings"
_PARTIAL = b"partial\n"
_INIT = "jax/__init__.py"


class StubsError(Exception):
  """The installed JAX's stubs lack what the patch corrects."""


@dataclasses.dataclass(frozen=True)
class StubPackage:
  """What ``write`` puts under ``DIR``, for one installed JAX."""
  jax_version: str
  # Path under DIR ("/"-separated) -> contents. Empty when JAX's own stubs
  # already declare everything the patch corrects.
  files: dict[str, bytes]


def _stub_path(jax_path: str) -> str:
  """``jax/_src/basearray.pyi`` -> ``jax-stubs/_src/basearray.pyi``."""
  return STUB_PACKAGE + jax_path[len("jax"):]


def _declared_name(key: tuple[str | None, str]) -> str:
  scope, name = key
  return name if scope is None else f"{scope}.{name}"


def _refusal(version: str, path: str, original: str,
             corrections: str) -> str | None:
  """Why ``corrections`` cannot be set in JAX's ``path``; None if it can.

  A declaration of ours replaces JAX's of the same name, or, where JAX has
  none, goes in after the one before it (``source_patch.corrected``); one
  with neither in JAX's file has nowhere to go.
  """
  declared = source_patch.spans(original)
  ours = list(source_patch.spans(corrections))
  for index, key in enumerate(ours):
    if key not in declared and (index == 0 or ours[index - 1] not in declared):
      return (f"JAX {version}'s {path} declares no {_declared_name(key)}, "
              "which jax-patch corrects there: these are not the stubs "
              "jax-patch knows (JAX 0.4.35 to 0.12.0.1).")
  return None


def build(jax_root: pathlib.Path, jax_version: str) -> StubPackage:
  """The stub package for the JAX installed at ``jax_root``.

  Args:
    jax_root: the folder holding the installed ``jax/`` package.
    jax_version: its version, for messages.

  Raises:
    StubsError: JAX lacks a file the patch corrects, or a declaration there
      that the corrections need (named in the message).
  """
  corrections = {path: declarations for path, declarations
                 in source_patch.CORRECTIONS if path.endswith(".pyi")}
  files: dict[str, bytes] = {}
  changed = False
  for path, declarations in corrections.items():
    target = jax_root / path
    if not target.is_file():
      raise StubsError(f"JAX {jax_version} has no {path}, whose "
                       "declarations jax-patch corrects.")
    original = target.read_text(encoding="utf-8")
    ours = declarations.read_text(encoding="utf-8")
    refusal = _refusal(jax_version, path, original, ours)
    if refusal is not None:
      raise StubsError(refusal)
    corrected = source_patch.corrected(original, ours)
    changed = changed or corrected != original
    files[_stub_path(path)] = corrected.encode("utf-8")
  if not changed:
    return StubPackage(jax_version, {})
  for stub in (jax_root / "jax").rglob("*.pyi"):
    path = stub.relative_to(jax_root).as_posix()
    if path not in corrections and "__pycache__" not in stub.parts:
      files[_stub_path(path)] = stub.read_bytes()
  files[f"{STUB_PACKAGE}/py.typed"] = _PARTIAL
  files[_stub_path(_INIT)] = (jax_root / _INIT).read_bytes()
  return StubPackage(jax_version, dict(sorted(files.items())))


def _present(out: pathlib.Path) -> dict[str, bytes]:
  """The files now under ``out/jax-stubs``, as ``StubPackage.files`` keys."""
  package = out / STUB_PACKAGE
  if not package.is_dir():
    return {}
  return {path.relative_to(out).as_posix(): path.read_bytes()
          for path in sorted(package.rglob("*"))
          if path.is_file() and "__pycache__" not in path.parts}


def write(out: pathlib.Path, package: StubPackage) -> list[str]:
  """Replaces ``out/jax-stubs`` with ``package``; returns the paths written.

  The stub package is the command's own: files left from another JAX's
  (a correction this one no longer needs) go with it. It is written whole
  or not at all: into a scratch folder in ``out``, then moved into place.

  Raises:
    OSError: ``out`` cannot be made, or the package cannot be written
      there. Nothing of the attempt is left: no part of the package, no
      folder made for ``out``, and the package that was there stays.
  """
  target = out / STUB_PACKAGE
  if not package.files:
    if target.is_dir():
      shutil.rmtree(target)
    return []
  made = _first_missing(out)
  try:
    out.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{STUB_PACKAGE}-",
                                            dir=out))
    try:
      for path, contents in package.files.items():
        destination = staging / path
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(contents)
      _replace(staging / STUB_PACKAGE, target, staging / "replaced")
    finally:
      shutil.rmtree(staging, ignore_errors=True)
  except OSError:
    if made is not None:
      shutil.rmtree(made, ignore_errors=True)
    raise
  return list(package.files)


def _first_missing(path: pathlib.Path) -> pathlib.Path | None:
  """The outermost of ``path`` and its parents that does not exist."""
  return next((each for each in reversed((path, *path.parents))
               if not each.exists()), None)


def _replace(new: pathlib.Path, target: pathlib.Path,
             aside: pathlib.Path) -> None:
  """Moves folder ``new`` to ``target``, the folder there to ``aside``."""
  if target.is_dir():
    target.rename(aside)
  try:
    new.rename(target)
  except OSError:
    if aside.is_dir():
      aside.rename(target)  # Put back as it was.
    raise


def differences(out: pathlib.Path, package: StubPackage) -> list[str]:
  """How ``out/jax-stubs`` differs from ``package``; empty if it does not.

  Each entry names a path under ``out``: missing, different, or not
  expected (left from another JAX).
  """
  present = _present(out)
  found = []
  for path, contents in package.files.items():
    if path not in present:
      found.append(f"missing: {path}")
    elif present[path] != contents:
      found.append(f"differs: {path}")
  found.extend(f"not expected: {path}" for path in present
               if path not in package.files)
  return found
