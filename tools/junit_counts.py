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

"""Counts the test cases in JUnit XML files, as pytest and absltest write
them:

  python tools/junit_counts.py LABEL FILE_OR_DIRECTORY...

prints ``LABEL: N passed, N failed, N skipped (N files)``; a directory
stands for every ``test.xml`` below it (Bazel's test logs). A case failed
where it holds a ``failure`` or ``error``, and skipped where it holds a
``skipped`` (pytest) or absltest marks it not run. The version matrix's
table reads the same counts (noxfile.py).
"""

import pathlib
import sys
import xml.etree.ElementTree as ElementTree


def case_counts(junit: pathlib.Path) -> tuple[int, int, int]:
  """(passed, failed, skipped) test cases in one JUnit XML file."""
  passed = failed = skipped = 0
  for case in ElementTree.parse(junit).getroot().iter("testcase"):
    if case.find("failure") is not None or case.find("error") is not None:
      failed += 1
    elif (case.find("skipped") is not None or case.get("status") == "notrun"
          or case.get("result") == "suppressed"):
      skipped += 1
    else:
      passed += 1
  return passed, failed, skipped


def summary(paths: list[pathlib.Path]) -> str:
  """``N passed, N failed, N skipped`` over ``paths``' files."""
  totals = [0, 0, 0]
  for path in paths:
    for index, count in enumerate(case_counts(path)):
      totals[index] += count
  passed, failed, skipped = totals
  return f"{passed} passed, {failed} failed, {skipped} skipped"


def main(argv: list[str]) -> int:
  if len(argv) < 3:
    print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
    return 2
  label, places = argv[1], [pathlib.Path(arg) for arg in argv[2:]]
  files = [found for place in places
           for found in (sorted(place.rglob("test.xml")) if place.is_dir()
                         else [place])]
  print(f"{label}: {summary(files)} ({len(files)} files)")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
