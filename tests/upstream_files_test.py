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

"""The upstream patch set's files hold together (``upstream/``).

What CI can check without fetching JAX: the queue names every patch file
once, in order, each after what it depends on; each patch is a
``git format-patch`` file whose subject is its queue title, carrying its
CHANGELOG.md entry and, where it changes JAX's Python, its tests;
``stack.patch`` touches what the queue touches; each report has its
reproducer, quoted whole. Applying them to JAX main runs in a session with
JAX's repository (upstream/README.md).
"""

from __future__ import annotations

import email
import email.policy
import json
import pathlib
import re
from typing import Any

from absl.testing import absltest
from absl.testing import parameterized

from jax_patch._delivery import upstream_set

_UPSTREAM = pathlib.Path(__file__).resolve().parent.parent / "upstream"
_QUEUE = json.loads((_UPSTREAM / "queue.json").read_text())
_INTEROP_TEST = "tests/array_interoperability_test.py"


def _subject(patch: pathlib.Path) -> str:
  message = email.message_from_string(patch.read_text(),
                                      policy=email.policy.default)
  return re.sub(r"^\[PATCH[^]]*\]\s*", "", str(message["Subject"]))


def _touched(patch: pathlib.Path) -> list[str]:
  """The files a diff touches, as git reads it (``git apply --numstat``)."""
  done = upstream_set.git_outside_any_repository("apply", "--numstat",
                                                 str(patch.resolve()))
  assert not done.returncode, done.stderr
  return [line.split("\t")[2] for line in done.stdout.splitlines()]


class QueueTest(absltest.TestCase):

  def test_entries_have_exactly_the_documented_keys(self) -> None:
    for entry in _QUEUE:
      self.assertEqual(set(entry), {"patch", "title", "depends_on"}, entry)

  def test_names_every_patch_file_once_in_number_order(self) -> None:
    names = [entry["patch"] for entry in _QUEUE]
    files = sorted(path.name for path in _UPSTREAM.glob("[0-9]*.patch"))
    self.assertEqual(names, files)

  def test_dependencies_come_earlier_in_the_queue(self) -> None:
    seen: set[str] = set()
    for entry in _QUEUE:
      self.assertLessEqual(set(entry["depends_on"]), seen, entry["patch"])
      seen.add(entry["patch"])


class PatchTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (entry["patch"][:4], entry) for entry in _QUEUE)
  def test_is_a_format_patch_titled_as_queued(self, entry: dict[str, Any]
                                              ) -> None:
    patch = _UPSTREAM / entry["patch"]
    self.assertTrue(patch.read_text().startswith("From 0000000000000000000"))
    self.assertEqual(_subject(patch), entry["title"])

  @parameterized.named_parameters(
      (entry["patch"][:4], entry) for entry in _QUEUE)
  def test_carries_its_changelog_entry_and_tests(self, entry: dict[str, Any]
                                                 ) -> None:
    touched = _touched(_UPSTREAM / entry["patch"])
    self.assertIn("CHANGELOG.md", touched)
    if any(path.startswith("jax/") and path.endswith(".py")
           for path in touched):
      self.assertIn(_INTEROP_TEST, touched)

  @parameterized.named_parameters(
      (entry["patch"][:4], entry) for entry in _QUEUE)
  def test_description_says_how_to_test(self, entry: dict[str, Any]) -> None:
    self.assertIn("\nHow to test:\n", (_UPSTREAM / entry["patch"]).read_text())

  def test_stack_touches_what_the_queue_touches(self) -> None:
    queued = {path for entry in _QUEUE
              for path in _touched(_UPSTREAM / entry["patch"])}
    self.assertEqual(set(_touched(_UPSTREAM / "stack.patch")), queued)


class ReportTest(absltest.TestCase):

  def test_each_report_quotes_its_reproducer_whole(self) -> None:
    reports = sorted((_UPSTREAM / "reports").glob("*.md"))
    self.assertNotEmpty(reports)
    for report in reports:
      reproducer = report.with_suffix(".reproducer.py")
      self.assertTrue(reproducer.is_file(), reproducer)
      self.assertIn(reproducer.read_text().strip(), report.read_text())


if __name__ == "__main__":
  absltest.main()
