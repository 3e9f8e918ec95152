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

"""Runs JAX's own DLPack test file against upstream and against the patch.

The test file is read from a JAX git repository (a clone or a bare mirror) at
the tag of the JAX installed in ``--python``'s environment, written to a
scratch directory outside this project, and run four times: upstream and
with ``jax_patch.install()``, each with ``jax_enable_x64`` off and on, every
parameter combination, four CPU devices. Needs a fetched JAX repository, so
CI does not run it; sessions do, and report the counts.

  python tools/jax_own_tests.py --jax-git /path/to/jax/.git \
      --python .nox/matrix-0-4-35-py3-11/bin/python [--ref jax-v0.4.35]

Prints one line per run, then the cases that pass upstream but fail with the
patch, grouped by reason, and exits 1 if one of them is not a standard
contradiction (``STANDARD_CONTRADICTIONS``).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

TEST_PATH = "tests/array_interoperability_test.py"

_CONFTEST = """\
import os
if os.environ.get("JAX_PATCH") == "1":
  import jax_patch
  jax_patch.install()
if os.environ.get("JAX_SOURCE_ROOT"):
  import jax
  assert jax.__file__.startswith(os.environ["JAX_SOURCE_ROOT"]), jax.__file__


def pytest_collection_modifyitems(items):
  # absl numbers parameterized cases; keep their parameters in the report.
  for item in items:
    params = getattr(getattr(item, "obj", None), "__x_params_repr__", "")
    item.user_properties.append(("params", params))
"""

# Assertions of JAX's test that contradict the standard, each as the clause,
# the test it is in and what the patch's failure says. docs/jax-own-tests.md
# lists them.
STANDARD_CONTRADICTIONS = (
    ("from_dlpack copy=False: 'must never copy'. The case expects upstream's "
     "silent copy (64-bit input with x64 off; unaligned input up to 0.8.0)",
     r"testNumpyToJax\d*\[",
     r"CopyRequiredError: Specified input which requires a copy since "
     r"(the source data buffer is not aligned|its dtype \w+ becomes)"),
    ("from_dlpack Raises: 'AttributeError if the __dlpack__ and "
     "__dlpack_device__ methods are not present'. The case passes a raw "
     "capsule (up to 0.7.1)",
     r"testNondefaultLayout\[", r"MissingDLPackMethodsError: "),
    ("from_dlpack copy=None: 'reuse existing memory buffer if possible and "
     "copy otherwise'. The case expects a transposed array to be refused",
     r"testNondefaultLayout\[", r"RuntimeError not raised"),
)


def contradiction(test_id: str, message: str) -> str | None:
  for clause, test, failure in STANDARD_CONTRADICTIONS:
    if re.search(test, test_id) and re.search(failure, message):
      return clause
  return None


def installed_jax_version(python: str) -> str:
  return subprocess.run(
      [python, "-c", "import jax; print(jax.__version__)"],
      check=True, capture_output=True, text=True).stdout.strip()


def write_test_tree(jax_git: str, ref: str, directory: str) -> str:
  source = subprocess.run(
      ["git", f"--git-dir={jax_git}", "show", f"{ref}:{TEST_PATH}"],
      check=True, capture_output=True, text=True).stdout
  path = os.path.join(directory, os.path.basename(TEST_PATH))
  with open(path, "w") as f:
    f.write(source)
  with open(os.path.join(directory, "conftest.py"), "w") as f:
    f.write(_CONFTEST)
  return path


def write_vendored_checkout(jax_git: str, ref: str, python: str,
                            directory: str) -> str:
  """Writes JAX's source at ``ref`` (a git repository), vendors into it.

  Returns:
    The checkout's copy of the test file, corrected by vendoring.
  """
  root = os.path.join(directory, "checkout")
  os.makedirs(root)
  listed = subprocess.run(
      ["git", f"--git-dir={jax_git}", "ls-tree", "--name-only", ref],
      check=True, capture_output=True, text=True).stdout.split()
  paths = ["jax", TEST_PATH] + [p for p in ("pyproject.toml", "setup.py")
                                if p in listed]
  archive = subprocess.run(
      ["git", f"--git-dir={jax_git}", "archive", ref, *paths],
      check=True, capture_output=True).stdout
  subprocess.run(["tar", "-x", "-C", root], input=archive, check=True)
  git = ["git", "-c", "user.name=jax-own-tests", "-c",
         "user.email=jax-own-tests@invalid", "-c", "commit.gpgsign=false"]
  for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", ref]):
    subprocess.run(git + args, cwd=root, check=True)
  subprocess.run([python, "-m", "jax_patch", "vendor", "--into", root],
                 check=True, stdout=subprocess.DEVNULL)
  with open(os.path.join(root, "tests", "conftest.py"), "w") as f:
    f.write(_CONFTEST)
  return os.path.join(root, TEST_PATH)


def run_once(python: str, test_file: str, patched: bool, x64: bool,
             directory: str,
             source_root: str | None = None) -> dict[str, tuple[str, str]]:
  """Runs the file once; returns each case's outcome and message by id.

  Args:
    source_root: a JAX source tree to import ``jax`` from.
  """
  report = os.path.join(
      directory, f"report-patch{int(patched)}-x64{int(x64)}-"
      f"{'vendored' if source_root else 'installed'}.xml")
  env = dict(os.environ,
             PYTHONPATH=source_root or os.environ.get("PYTHONPATH", ""),
             JAX_SOURCE_ROOT=source_root or "",
             JAX_PATCH="1" if patched else "0",
             JAX_ENABLE_X64="1" if x64 else "0",
             JAX_NUM_GENERATED_CASES="100000",
             XLA_FLAGS="--xla_force_host_platform_device_count=4",
             JAX_PLATFORMS="cpu")
  subprocess.run(
      [python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
       f"--junitxml={report}", "-o", "junit_family=xunit2", test_file],
      cwd=os.path.dirname(test_file), env=env, stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL, check=False)
  outcomes: dict[str, tuple[str, str]] = {}
  for case in ET.parse(report).getroot().iter("testcase"):
    params = "".join(p.get("value", "") for p in case.iter("property")
                     if p.get("name") == "params")
    test_class = (case.get("classname") or "").rsplit(".", 1)[-1]
    test_id = f"{test_class}::{case.get('name')}[{params}]"
    outcome, message = "passed", ""
    for child in case:
      if child.tag in ("failure", "error"):
        outcome, message = "failed", child.get("message", "")
      elif child.tag == "skipped":
        outcome = "skipped"
    outcomes[test_id] = outcome, message
  return outcomes


def count(outcomes: dict[str, tuple[str, str]]) -> str:
  totals = {k: 0 for k in ("passed", "failed", "skipped")}
  for outcome, _ in outcomes.values():
    totals[outcome] += 1
  return ", ".join(f"{n} {k}" for k, n in totals.items())


def _compare_vendored(args: argparse.Namespace, ref: str, x64: bool,
                      upstream: dict[str, tuple[str, str]],
                      directory: str) -> int:
  """Runs the vendored checkout's test file; returns its regressions."""
  checkout_test = os.path.join(directory, "checkout", TEST_PATH)
  if not os.path.exists(checkout_test):
    write_vendored_checkout(args.jax_git, ref, args.python, directory)
  vendored = run_once(args.python, checkout_test, False, x64, directory,
                      source_root=os.path.join(directory, "checkout"))
  print(f"  vendored checkout: {count(vendored)}")
  failed = sorted(t for t, (outcome, _) in vendored.items()
                  if outcome == "failed")
  for test_id in failed:
    print(f"  VENDORED FAILURE {test_id}: "
          f"{vendored[test_id][1].splitlines()[0][:200]}")
  lost = [t for t, (outcome, _) in upstream.items()
          if outcome == "passed" and t not in vendored]
  for test_id in lost:
    print(f"  VENDORED MISSING {test_id}")
  return len(failed) + len(lost)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--jax-git", required=True,
                      help="a JAX git directory (clone or bare mirror)")
  parser.add_argument("--python", default=sys.executable,
                      help="interpreter whose environment has JAX and "
                      "jax_patch")
  parser.add_argument("--ref", help="tag or commit; default jax-vVERSION")
  parser.add_argument(
      "--vendored", action="store_true",
      help="also vendor into JAX's source at REF and run the test file "
      "there, as vendoring corrected it, against the upstream results")
  args = parser.parse_args(argv)
  version = installed_jax_version(args.python)
  ref = args.ref or f"jax-v{version}"
  regressions = 0
  with tempfile.TemporaryDirectory(prefix="jax-own-tests-") as directory:
    test_file = write_test_tree(args.jax_git, ref, directory)
    for x64 in (False, True):
      upstream = run_once(args.python, test_file, False, x64, directory)
      patched = run_once(args.python, test_file, True, x64, directory)
      print(f"jax {version}, test at {ref}, x64={'on' if x64 else 'off'}: "
            f"upstream {count(upstream)}; patched {count(patched)}")
      broken = {t: message for t, (outcome, message) in patched.items()
                if outcome == "failed" and upstream[t][0] == "passed"}
      by_reason = collections.Counter(
          contradiction(t, message) or f"REGRESSION {t.split('[')[0]}: "
          f"{message.splitlines()[0][:200] if message else ''}"
          for t, message in broken.items())
      for reason, n in sorted(by_reason.items()):
        print(f"  {n} x {reason}")
        regressions += n if reason.startswith("REGRESSION") else 0
      if args.vendored:
        regressions += _compare_vendored(args, ref, x64, upstream, directory)
  print(f"{regressions} regressions")
  return 1 if regressions else 0


if __name__ == "__main__":
  sys.exit(main())
