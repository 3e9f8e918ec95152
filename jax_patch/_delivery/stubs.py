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
accepts. This builds a PEP 561 partial stub package ``jax-stubs`` that the
checkers merge over the installed ``jax``, and either installs it (``install``)
into the running interpreter's site-packages as the distribution
``jax-patch-jax-stubs``, where mypy, pyright and pyrefly each find it with no
configuration, however they are run (the route docs/typing.md documents), or
writes it under a folder ``DIR`` (``write``), which pyright (whose default
``stubPath`` is ``typings``), pyrefly (``site-package-path``, in project mode
only) and mypy (on ``PYTHONPATH``: it looks for no stub package on
``mypy_path``) read when configured to. The package holds:

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

import base64
import dataclasses
import hashlib
import os
import pathlib
import shutil
import sysconfig
import tempfile

from jax_patch._delivery import source_patch

STUB_PACKAGE = "jax-stubs"
# What `--install` installs jax-stubs as. Not "jax-stubs": that name on PyPI
# is anyone's to take, and pip would then take ours for theirs (upgrade it,
# uninstall it, report it as theirs). jax-patch's own name prefixes it.
DISTRIBUTION = "jax-patch-jax-stubs"
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
    corrected = source_patch.corrected(original, ours, keep_same_shape=True)
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


# `jax-patch stubs --install`: the stub package as an installed distribution.


def site_packages() -> pathlib.Path:
  """The running interpreter's ``site-packages`` (its ``purelib``)."""
  return pathlib.Path(sysconfig.get_paths()["purelib"])


def _dist_info(version: str) -> str:
  """The ``.dist-info`` folder name pip gives ``DISTRIBUTION`` ``version``."""
  return f"{DISTRIBUTION.replace('-', '_')}-{version}.dist-info"


def _hash(contents: bytes) -> str:
  """``RECORD``'s hash: ``sha256=`` and the unpadded urlsafe base64 digest."""
  digest = base64.urlsafe_b64encode(hashlib.sha256(contents).digest())
  return "sha256=" + digest.rstrip(b"=").decode("ascii")


def distribution(package: StubPackage) -> dict[str, bytes]:
  """``package`` as an installed distribution (site-packages path -> bytes).

  Its files, and a ``.dist-info`` folder as pip writes one (``METADATA``,
  ``INSTALLER``, ``RECORD`` with each file's hash and size), so that
  ``pip uninstall jax-patch-jax-stubs`` removes it whole and ``pip list``
  shows it. Its version is the JAX version it was built from; it requires
  that JAX, so ``pip check`` (and pip, when it upgrades JAX) says when it
  no longer matches. Empty when ``package`` is.
  """
  if not package.files:
    return {}
  version = package.jax_version
  dist_info = _dist_info(version)
  files = dict(package.files)
  files[f"{dist_info}/METADATA"] = (
      "Metadata-Version: 2.1\n"
      f"Name: {DISTRIBUTION}\n"
      f"Version: {version}\n"
      f"Summary: JAX {version}'s typing stubs with jax-patch's DLPack "
      "declarations, written by `jax-patch stubs --install`\n"
      f"Requires-Dist: jax=={version}\n").encode("utf-8")
  files[f"{dist_info}/INSTALLER"] = b"jax-patch\n"
  record = "".join(f"{path},{_hash(contents)},{len(contents)}\n"
                   for path, contents in files.items())
  files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode(
      "utf-8")
  return files


def _installed_dist_infos(site: pathlib.Path) -> list[pathlib.Path]:
  """Our ``.dist-info`` folders in ``site``, any version."""
  prefix = DISTRIBUTION.replace("-", "_") + "-"
  if not site.is_dir():
    return []
  return sorted(path for path in site.iterdir()
                if path.name.startswith(prefix)
                and path.name.endswith(".dist-info") and path.is_dir())


def _ours(site: pathlib.Path) -> bool:
  """Whether ``site``'s ``jax-stubs`` is one ``--install`` wrote.

  It is where one of our ``.dist-info`` folders' ``RECORD`` lists its
  ``py.typed``.
  """
  marker = f"{STUB_PACKAGE}/py.typed,"
  for dist_info in _installed_dist_infos(site):
    record = dist_info / "RECORD"
    if record.is_file() and any(
        line.startswith(marker)
        for line in record.read_text(encoding="utf-8").splitlines()):
      return True
  return False


def install(site: pathlib.Path, package: StubPackage) -> list[str]:
  """Installs ``package`` into ``site`` as ``DISTRIBUTION``.

  Replaces a ``jax-stubs`` we installed there before (for this JAX or
  another), ``.dist-info`` and all; writes nothing, and removes ours, when
  ``package`` is empty. Whole or not at all, as :func:`write`.

  Returns:
    The paths installed, relative to ``site``.

  Raises:
    StubsError: ``site`` is not a folder this process can write, or its
      ``jax-stubs`` is not ours (another distribution's, or written by
      hand): said so, naming it, and nothing is touched.
    OSError: writing failed; what was installed before stays.
  """
  if not site.is_dir() or not os.access(site, os.W_OK | os.X_OK):
    raise StubsError(
        f"cannot write to {site}, the site-packages the stubs go into: "
        "install them from a virtualenv you can write to, or write them to "
        "a folder with --out instead")
  target = site / STUB_PACKAGE
  if target.exists() and not _ours(site):
    raise StubsError(
        f"{target} is already there and jax-patch did not install it (no "
        f"{DISTRIBUTION} lists it): remove it, or the distribution that "
        "installed it, first; jax-patch replaces only its own")
  files = distribution(package)
  old = _installed_dist_infos(site)
  try:
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{STUB_PACKAGE}-",
                                            dir=site))
  except OSError as err:
    raise StubsError(f"cannot write to {site}: {err}") from err
  moved: list[tuple[pathlib.Path, pathlib.Path]] = []
  try:
    new = staging / "new"
    for path, contents in files.items():
      destination = new / path
      destination.parent.mkdir(parents=True, exist_ok=True)
      destination.write_bytes(contents)
    aside = staging / "replaced"
    aside.mkdir()
    try:
      for each in ([target] if target.exists() else []) + old:
        each.rename(aside / each.name)
        moved.append((aside / each.name, each))
      for each in sorted(new.iterdir()) if new.is_dir() else []:
        each.rename(site / each.name)
        moved.append((site / each.name, staging / "failed" / each.name))
    except OSError:
      (staging / "failed").mkdir(exist_ok=True)
      for now, was in reversed(moved):  # Put back as it was.
        now.rename(was)
      raise
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return list(files)


def installed_differences(site: pathlib.Path,
                          package: StubPackage) -> list[str]:
  """How ``site``'s ``DISTRIBUTION`` differs from ``package``, installed.

  As :func:`differences`, and a ``.dist-info`` of another version (another
  JAX's) or none; empty where it does not differ.
  """
  found = []
  expected = _dist_info(package.jax_version) if package.files else None
  names = [path.name for path in _installed_dist_infos(site)]
  if expected is not None and expected not in names:
    found.append(f"missing: {expected}")
  found.extend(f"not expected: {name}" for name in names if name != expected)
  if _ours(site) or not (site / STUB_PACKAGE).exists():
    found.extend(differences(site, package))
  else:
    found.append(f"not ours: {STUB_PACKAGE} (no {DISTRIBUTION} lists it)")
  return found
