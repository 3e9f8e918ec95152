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

"""Prints the sha256 of the files `jax-patch vendor` replaces, per JAX release.

`vendor` refuses to overwrite a file unless it is byte for byte as a known
JAX release ships it. This reads the released `jax` wheels (pure Python: the
same bytes as the tagged source tree) and prints the table vendoring reads,
jax_patch/_delivery/vendor_pristine.json:

  .venv/bin/python tools/pristine_hashes.py 0.4.35 0.4.36 ... > \
      jax_patch/_delivery/vendor_pristine.json

With --wheels DIR it reads jax-*.whl files already in DIR instead of asking
pip to download them.
"""

import argparse
import hashlib
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import zipfile

from jax_patch._delivery import source_patch
from jax_patch._delivery import vendor

# The JAX files vendoring writes; those a release ships are what it replaces.
WRITTEN = tuple(f"jax/_src/{name}" for name in vendor.VENDORED_MODULES.values())
WRITTEN += tuple(path for path, _ in source_patch.CORRECTIONS)
_WHEEL = re.compile(r"^jax-(?P<version>[0-9][^-]*)-py3-none-any\.whl$")


def hashes_of(wheel: pathlib.Path) -> dict[str, str]:
  with zipfile.ZipFile(wheel) as archive:
    shipped = set(archive.namelist())
    return {path: hashlib.sha256(archive.read(path)).hexdigest()
            for path in WRITTEN if path in shipped}


def download(versions: list[str], folder: pathlib.Path) -> None:
  """Fetches the wheel of each version ``folder`` lacks, one at a time."""
  present = {m["version"] for m in map(_WHEEL.match, _names(folder)) if m}
  for version in versions:
    if version in present:
      continue
    # One pip call per version: pip takes several pins of one package in a
    # call as a conflict. JAX 0.11 on requires Python 3.12, whichever Python
    # runs this; pip wants --only-binary with --python-version.
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--only-binary=:all:", "--python-version", "3.12",
         "--dest", str(folder), f"jax=={version}"], check=True)


def _names(folder: pathlib.Path) -> list[str]:
  return [path.name for path in folder.iterdir()]


def _version_key(version: str) -> tuple[int, ...]:
  return tuple(int(part) for part in version.split("."))


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("versions", nargs="*", help="JAX releases to download")
  parser.add_argument("--wheels", type=pathlib.Path,
                      help="a folder of jax-*.whl files to read instead")
  args = parser.parse_args(argv[1:])
  with tempfile.TemporaryDirectory() as scratch:
    folder = args.wheels or pathlib.Path(scratch)
    if args.versions:
      download(args.versions, folder)
    table = {}
    for wheel in folder.iterdir():
      match = _WHEEL.match(wheel.name)
      if match and (not args.versions
                    or match["version"] in args.versions):
        table[match["version"]] = hashes_of(wheel)
  ordered = {v: table[v] for v in sorted(table, key=_version_key)}
  json.dump(ordered, sys.stdout, indent=2)
  sys.stdout.write("\n")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
