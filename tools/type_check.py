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

"""Runs mypy or pytype over the project as a test: Bazel's mypy_test and
pytype_test.

Usage: type_check.py mypy|pytype
"""

import os
import pathlib
import subprocess
import sys
import tempfile

# Not resolve(): under Bazel the runfiles tree is the project.
_ROOT = pathlib.Path(__file__).absolute().parents[1]


def _command(checker: str, scratch: str) -> list[str]:
  if checker == "mypy":
    return [sys.executable, "-m", "mypy", "--config-file", "setup.cfg",
            "--cache-dir", os.path.join(scratch, "mypy")]
  if checker == "pytype":
    return [sys.executable, "-m", "pytype.tools.analyze_project.main",
            "--config=setup.cfg", "--output", os.path.join(scratch, "pytype"),
            "--jobs=2"]
  raise SystemExit(f"usage: {sys.argv[0]} mypy|pytype")


def main(argv: list[str]) -> int:
  if len(argv) != 2:
    raise SystemExit(f"usage: {argv[0]} mypy|pytype")
  scratch = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
  return subprocess.run(_command(argv[1], scratch), cwd=_ROOT,
                        check=False).returncode


if __name__ == "__main__":
  sys.exit(main(sys.argv))
