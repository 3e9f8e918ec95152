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

"""CI's time budget adds up: the stage shares in ``.ci/run`` fit its total.

``.ci/run`` names a stage over its share at the end of a run; shares that add
up to more than the budget would let every stage keep within its own while
the whole run passes 45 minutes.
"""

from __future__ import annotations

import pathlib
import re

from absl.testing import absltest

_CI_RUN = pathlib.Path(__file__).resolve().parent.parent / ".ci" / "run"


def _logical_lines(text: str) -> list[str]:
  return text.replace("\\\n", " ").splitlines()


def _budget(lines: list[str]) -> int:
  budgets = [int(m.group(1)) for line in lines
             if (m := re.fullmatch(r"readonly BUDGET=(\d+)", line))]
  assert len(budgets) == 1, budgets
  return budgets[0]


def _shares(lines: list[str]) -> dict[str, int]:
  """Each top-level ``stage NAME SHARE COMMAND...`` line: NAME to SHARE."""
  stage_line = re.compile(r'stage ("[^"]+"|\S+) +(\d+) ')
  return {m.group(1).strip('"'): int(m.group(2)) for line in lines
          if (m := stage_line.match(line))}


class CiBudgetTest(absltest.TestCase):

  def setUp(self) -> None:
    super().setUp()
    self.lines = _logical_lines(_CI_RUN.read_text())

  def test_every_stage_has_a_share(self) -> None:
    calls = [line for line in self.lines if line.startswith("stage ")]
    self.assertLen(_shares(self.lines), len(calls))
    self.assertGreaterEqual(len(calls), 9)

  def test_shares_add_up_to_no_more_than_the_budget(self) -> None:
    shares = _shares(self.lines)
    self.assertLessEqual(sum(shares.values()), _budget(self.lines), shares)

  def test_budget_is_within_45_minutes(self) -> None:
    self.assertLessEqual(_budget(self.lines), 45 * 60)


if __name__ == "__main__":
  absltest.main()
