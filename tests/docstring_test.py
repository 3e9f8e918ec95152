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

"""Every docstring under jax_patch/ opens with one plain sentence, as JAX's do.

The first paragraph of a module, class or function docstring (up to its
first blank line) is one line that ends with a period and fits in 80
columns with its indentation and quotes: the line that ``help()``, pydoc
and an editor's hover show alone. What follows it is free.
"""

import ast
import dataclasses
import pathlib

from absl.testing import absltest

_ROOT = pathlib.Path(__file__).absolute().parents[1]
_PACKAGE = _ROOT / "jax_patch"
_COLUMNS = 80

_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


@dataclasses.dataclass(frozen=True)
class Violation:
  """A docstring whose opening is not one plain sentence."""
  line: int  # The docstring's first line in its file.
  name: str  # The function's or class's name; ``<module>`` for the module.
  why: str

  def __str__(self) -> str:
    return f"{self.line}: {self.name}: {self.why}"


def violations(source: str) -> list[Violation]:
  """The docstrings in ``source`` whose first paragraph breaks the rule."""
  lines = source.splitlines()
  found = []
  for node in ast.walk(ast.parse(source)):
    if not isinstance(node, _DOCUMENTED) or not node.body:
      continue
    first = node.body[0]
    if not (isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
      continue
    paragraph = []
    for line in first.value.value.split("\n"):
      if not line.strip():
        break
      paragraph.append(line)
    why = ""
    if not paragraph:
      why = "does not open on the quotes' line"
    elif len(paragraph) > 1:
      why = f"its first paragraph has {len(paragraph)} lines"
    elif not paragraph[0].rstrip().endswith("."):
      why = "its first line does not end with a period"
    elif len(lines[first.lineno - 1]) > _COLUMNS:
      why = f"its first line is over {_COLUMNS} columns"
    if why:
      name = node.name if not isinstance(node, ast.Module) else "<module>"
      found.append(Violation(first.lineno, name, why))
  return sorted(found, key=lambda violation: violation.line)


class DocstringTest(absltest.TestCase):

  def test_every_docstring_opens_with_one_line_ending_in_a_period(
      self) -> None:
    sources = sorted(_PACKAGE.rglob("*.py"))
    self.assertNotEmpty(sources)
    for path in sources:
      relative = pathlib.PurePosixPath(path.relative_to(_ROOT).as_posix())
      with self.subTest(str(relative)):
        found = violations(path.read_text(encoding="utf-8"))
        if found:
          self.fail("\n".join(map(str, found)))


class RuleTest(absltest.TestCase):
  """The rule rejects each way an opening can go wrong, and only those."""

  def test_accepts_one_line_then_more(self) -> None:
    source = ('"""A module."""\n\n\n'
              'class A:\n  """A class.\n\n  More, over\n  two lines.\n  """\n\n'
              'def f():\n  """Returns one.\n\n  Args: none.\n  """\n')
    self.assertEmpty(violations(source))

  def test_rejects_a_first_paragraph_over_two_lines(self) -> None:
    source = 'def f():\n  """Returns one, which is\n  a number."""\n'
    self.assertEqual(
        violations(source),
        [Violation(2, "f", "its first paragraph has 2 lines")])

  def test_rejects_a_first_line_without_a_period(self) -> None:
    source = '"""A module"""\n'
    self.assertEqual(
        violations(source),
        [Violation(1, "<module>",
                   "its first line does not end with a period")])

  def test_rejects_a_first_line_over_80_columns(self) -> None:
    summary = "A" * 70 + "."
    self.assertEmpty(violations(f'"""{summary}"""\n'))  # 77 columns.
    source = f'class A:\n  async def f(self):\n    """{summary}"""\n'
    self.assertEqual(
        violations(source),
        [Violation(3, "f", "its first line is over 80 columns")])

  def test_rejects_an_opening_below_the_quotes(self) -> None:
    source = 'class A:\n  """\n  A class.\n  """\n'
    self.assertEqual(
        violations(source),
        [Violation(2, "A", "does not open on the quotes' line")])


if __name__ == "__main__":
  absltest.main()
