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

"""Keeps docs/behaviour.md's map of where each behaviour lives true.

A behaviour lives in up to five forms: runtime functions, conformance cases,
tests, an upstream pull request (its number in ``upstream/queue.json``), a
jaxlib defect reported upstream (``upstream/reports/``). The map
(its table under ``## Where each behaviour lives``) names them, one row per
behaviour; each test here fails, listing what is wrong, when a name there no
longer exists or when a case, pull request or report is missing from it.
``BrokenMapTest`` shows that each check fails on a map broken its way.
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # noqa: F401  # pylint: disable=unused-import

import ast  # pylint: disable=g-import-not-at-top
import dataclasses  # pylint: disable=g-import-not-at-top
import functools  # pylint: disable=g-import-not-at-top
import importlib  # pylint: disable=g-import-not-at-top
import pathlib  # pylint: disable=g-import-not-at-top
import re  # pylint: disable=g-import-not-at-top
from collections.abc import Callable  # pylint: disable=g-import-not-at-top
from typing import Any  # pylint: disable=g-import-not-at-top

from absl.testing import absltest
from absl.testing import parameterized

from jax_patch._delivery import upstream_set
from jax_patch.testing import conformance

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_MAP = _ROOT / "docs" / "behaviour.md"
_SECTION = "## Where each behaviour lives"
# Where runtime functions live: what runs inside JAX.
_RUNTIME = "jax_patch._src."
# A word of each column's heading, and the _Row field the column fills.
_COLUMNS = {"behaviour": "behaviour", "runtime": "functions",
            "case": "cases", "test": "tests", "upstream": "upstream"}
# The columns whose backticks hold names, and which may name nothing only
# where the cell says why, after a dash.
_NAME_COLUMNS = ("functions", "cases", "tests", "upstream")
_MUST_NAME = ("functions", "tests")
_NOTHING = "—"
# tests/file_test.py::Class.test_method, ::Class::test_method, or
# file_test.Class.test_method.
_TEST_NAME = re.compile(
    r"(?:tests/)?(?P<file>\w+)(?:\.py::|\.)(?P<cls>\w+)(?:\.|::)"
    r"(?P<method>test\w*)")


@dataclasses.dataclass(frozen=True)
class _Row:
  """One behaviour of the map: the names in its cells, and where it is."""
  line: int
  behaviour: str
  functions: tuple[str, ...]
  cases: tuple[str, ...]
  tests: tuple[str, ...]
  upstream: tuple[str, ...]
  # The text of each name column that names nothing, by field.
  reasons: tuple[tuple[str, str], ...] = ()

  def where(self) -> str:
    return f"{_MAP.relative_to(_ROOT)}:{self.line} ({self.behaviour[:40]})"


def _cells(line: str) -> list[str]:
  """A Markdown table line's cells, stripped."""
  return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _parse(text: str) -> list[_Row]:
  """The rows of the map's table in ``text`` (a docs/behaviour.md).

  Raises:
    AssertionError: the section or its table is missing, a heading names no
      known column, or a row has another number of cells than the heading.
  """
  lines = text.splitlines()
  try:
    start = lines.index(_SECTION)
  except ValueError:
    raise AssertionError(f"no line {_SECTION!r} in the map") from None
  table: list[tuple[int, str]] = []
  for number, line in enumerate(lines[start + 1:], start + 2):
    if line.startswith("|"):
      table.append((number, line))
    elif table or line.startswith("#"):
      break
  if len(table) < 3:
    raise AssertionError(f"no table with rows under {_SECTION!r}")
  fields: list[str] = []
  for heading in _cells(table[0][1]):
    field = next((field for word, field in _COLUMNS.items()
                  if word in heading.lower()), None)
    if field is None:
      raise AssertionError(f"line {table[0][0]}: the heading {heading!r} "
                           f"names none of {sorted(_COLUMNS)}")
    fields.append(field)
  if sorted(fields) != sorted(_COLUMNS.values()):
    raise AssertionError(f"line {table[0][0]}: the columns are {fields}, not "
                         f"one each of {sorted(_COLUMNS.values())}")
  rows = []
  for number, line in table[2:]:
    cells = _cells(line)
    if len(cells) != len(fields):
      raise AssertionError(f"line {number}: {len(cells)} cells, where the "
                           f"heading has {len(fields)}")
    by_field: dict[str, str] = dict(zip(fields, cells))
    names = {field: tuple(name.strip() for name in
                          re.findall(r"`([^`]+)`", by_field[field]))
             for field in _NAME_COLUMNS}
    rows.append(_Row(
        line=number, behaviour=by_field["behaviour"],
        reasons=tuple((field, by_field[field]) for field in _NAME_COLUMNS
                      if not names[field]),
        **names))
  return rows


@functools.cache
def _map_rows() -> tuple[_Row, ...]:
  """The rows of docs/behaviour.md's map."""
  return tuple(_parse(_MAP.read_text(encoding="utf-8")))


def _case_names() -> list[str]:
  return [case.name for case in conformance.CASES]


@functools.cache
def _pull_requests() -> dict[str, str]:
  """The queue's pull requests (upstream/queue.json), by number: titles."""
  patch_set = upstream_set.read(upstream_set.default_root())
  return {f"{pr.number:04d}": pr.title for pr in patch_set.pull_requests}


def _pull_request_names(number: str) -> set[str]:
  """What the map may call a pull request: its number."""
  return {number}


def _report_slugs() -> set[str]:
  """The reports in upstream/reports/, by number."""
  return {path.name[:4] for path in
          (upstream_set.default_root() / "reports").glob("*.md")}


def _resolve(dotted: str) -> object:
  """The object ``dotted`` names: a module's attribute, or an attribute's.

  Raises:
    LookupError: no module or attribute has that name; says which part.
  """
  parts = dotted.split(".")
  for cut in range(len(parts) - 1, 0, -1):
    module_name = ".".join(parts[:cut])
    try:
      found: object = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
      if err.name is None or not module_name.startswith(err.name):
        raise  # A module that exists failed to import something else.
      continue
    for depth, attribute in enumerate(parts[cut:], cut + 1):
      if not hasattr(found, attribute):
        raise LookupError(
            f"{'.'.join(parts[:depth - 1])} has no {attribute!r}")
      found = getattr(found, attribute)
    return found
  raise LookupError(f"no module {parts[0]!r}")


@functools.cache
def _test_tree(file: str) -> ast.Module | None:
  path = _ROOT / "tests" / f"{file}.py"
  return ast.parse(path.read_text(encoding="utf-8")) if path.is_file() else None


def _test_problem(name: str) -> str | None:
  """Why ``name`` is no test method of tests/, if it is none."""
  match = _TEST_NAME.fullmatch(name)
  if match is None:
    return ("not a test name (tests/file_test.py::Class.test_method or "
            "file_test.Class.test_method)")
  tree = _test_tree(match["file"])
  if tree is None:
    return f"no file tests/{match['file']}.py"
  classes = {node.name: node for node in tree.body
             if isinstance(node, ast.ClassDef)}
  if match["cls"] not in classes:
    return f"tests/{match['file']}.py has no class {match['cls']}"
  methods = {node.name for node in classes[match["cls"]].body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
  if match["method"] not in methods:
    return f"{match['cls']} has no method {match['method']}"
  return None


# The checks: each returns what is wrong with ``rows``, one line each.


def unexplained_cells(rows: tuple[_Row, ...]) -> list[str]:
  """Rows without a runtime function or a test; cells that name nothing
  without saying why."""
  problems = []
  for row in rows:
    for field, text in row.reasons:
      if field in _MUST_NAME:
        problems.append(f"{row.where()}: names no {field} (in backticks)")
      elif not (text.startswith(_NOTHING) and text[1:].strip()):
        problems.append(f"{row.where()}: the {field} cell names nothing "
                        f"and does not say why after {_NOTHING!r}: {text!r}")
  return problems


def missing_functions(rows: tuple[_Row, ...]) -> list[str]:
  """Runtime functions the map names that do not exist, or are not the
  runtime's functions."""
  problems = []
  for row in rows:
    for name in row.functions:
      if not name.startswith(_RUNTIME):
        problems.append(f"{row.where()}: {name} is outside {_RUNTIME}")
        continue
      try:
        found = _resolve(name)
      except LookupError as err:
        problems.append(f"{row.where()}: {name}: {err}")
        continue
      if not callable(found):
        problems.append(f"{row.where()}: {name} is not a function, but "
                        f"a {type(found).__name__}")
  return problems


def unknown_cases(rows: tuple[_Row, ...]) -> list[str]:
  """Conformance cases the map names that do not exist."""
  known = set(_case_names())
  return [f"{row.where()}: no conformance case {name}"
          for row in rows for name in row.cases if name not in known]


def unmapped_cases(rows: tuple[_Row, ...]) -> list[str]:
  """Conformance cases in no row of the map."""
  mapped = {name for row in rows for name in row.cases}
  return [f"{name} is in no row: add it to its behaviour's"
          for name in _case_names() if name not in mapped]


def cases_mapped_twice(rows: tuple[_Row, ...]) -> list[str]:
  """Conformance cases in more than one row, or twice in one."""
  seen: dict[str, list[str]] = {}
  for row in rows:
    for name in row.cases:
      seen.setdefault(name, []).append(row.where())
  return [f"{name} is in {len(wheres)} rows: {'; '.join(wheres)}"
          for name, wheres in seen.items() if len(wheres) > 1]


def missing_tests(rows: tuple[_Row, ...]) -> list[str]:
  """Tests the map names that do not exist (read, not imported)."""
  problems = []
  for row in rows:
    for name in row.tests:
      problem = _test_problem(name)
      if problem is not None:
        problems.append(f"{row.where()}: {name}: {problem}")
  return problems


def unknown_upstream(rows: tuple[_Row, ...]) -> list[str]:
  """Upstream names that are neither a pull request of the series nor a
  report."""
  known = _report_slugs().union(
      *(_pull_request_names(module) for module in _pull_requests()))
  return [f"{row.where()}: {name} is no pull request in upstream/queue.json "
          "and no report in upstream/reports"
          for row in rows for name in row.upstream if name not in known]


def unmapped_upstream(rows: tuple[_Row, ...]) -> list[str]:
  """Pull requests and reports in no row of the map."""
  named = {name for row in rows for name in row.upstream}
  problems = [f"pull request {module} is in no row"
              for module in sorted(_pull_requests())
              if not named & _pull_request_names(module)]
  problems += [f"report {slug} is in no row"
               for slug in sorted(_report_slugs()) if slug not in named]
  return problems


def _report(problems: list[str]) -> str:
  return (f"{len(problems)} problem(s) in {_MAP.relative_to(_ROOT)}'s "
          "map:\n" + "\n".join(problems))


class BehaviourMapTest(absltest.TestCase):
  """The map in docs/behaviour.md names what exists, and all of it."""

  def test_every_row_names_a_runtime_function_and_a_test(self) -> None:
    problems = unexplained_cells(_map_rows())
    self.assertEmpty(problems, _report(problems))

  def test_named_runtime_functions_exist(self) -> None:
    problems = missing_functions(_map_rows())
    self.assertEmpty(problems, _report(problems))

  def test_named_cases_exist(self) -> None:
    problems = unknown_cases(_map_rows())
    self.assertEmpty(problems, _report(problems))

  def test_every_case_is_mapped(self) -> None:
    problems = unmapped_cases(_map_rows())
    self.assertEmpty(problems, _report(problems))

  def test_no_case_is_mapped_twice(self) -> None:
    problems = cases_mapped_twice(_map_rows())
    self.assertEmpty(problems, _report(problems))

  def test_named_tests_exist(self) -> None:
    problems = missing_tests(_map_rows())
    self.assertEmpty(problems, _report(problems))

  def test_named_pull_requests_and_reports_exist(self) -> None:
    problems = unknown_upstream(_map_rows())
    self.assertEmpty(problems, _report(problems))

  def test_every_pull_request_and_report_is_mapped(self) -> None:
    problems = unmapped_upstream(_map_rows())
    self.assertEmpty(problems, _report(problems))


def _first(rows: tuple[_Row, ...], test: Callable[[_Row], bool]) -> int:
  return next(index for index, row in enumerate(rows) if test(row))


def _changed(rows: tuple[_Row, ...], index: int,
             **changes: Any) -> tuple[_Row, ...]:
  return (rows[:index] + (dataclasses.replace(rows[index], **changes),)
          + rows[index + 1:])


def _rename_function(rows: tuple[_Row, ...]) -> tuple[tuple[_Row, ...], str]:
  name = rows[0].functions[0] + "_gone"
  return _changed(rows, 0, functions=(name,) + rows[0].functions[1:]), name


def _function_of_a_missing_module(
    rows: tuple[_Row, ...]) -> tuple[tuple[_Row, ...], str]:
  name = _RUNTIME + "no_such_module.plan"
  return _changed(rows, 0, functions=(name,)), name


def _function_outside_the_runtime(
    rows: tuple[_Row, ...]) -> tuple[tuple[_Row, ...], str]:
  name = "jax_patch.testing.conformance.run_case"
  return _changed(rows, 0, functions=(name,)), name


def _rename_case(rows: tuple[_Row, ...]) -> tuple[tuple[_Row, ...], str]:
  index = _first(rows, lambda row: bool(row.cases))
  name = rows[index].cases[0]
  return _changed(rows, index, cases=(name + "_gone",)
                  + rows[index].cases[1:]), name + "_gone"


def _drop_case(rows: tuple[_Row, ...]) -> tuple[tuple[_Row, ...], str]:
  index = _first(rows, lambda row: bool(row.cases))
  return (_changed(rows, index, cases=rows[index].cases[1:]),
          rows[index].cases[0])


def _case_twice(rows: tuple[_Row, ...]) -> tuple[tuple[_Row, ...], str]:
  index = _first(rows, lambda row: bool(row.cases))
  other = _first(rows[index + 1:], lambda row: bool(row.cases)) + index + 1
  name = rows[index].cases[0]
  return _changed(rows, other, cases=rows[other].cases + (name,)), name


def _rename_test(rows: tuple[_Row, ...], part: str
                 ) -> tuple[tuple[_Row, ...], str]:
  match = _TEST_NAME.fullmatch(rows[0].tests[0])
  assert match is not None
  parts = {"file": match["file"], "cls": match["cls"],
           "method": match["method"]}
  parts[part] += "_gone"
  name = f"tests/{parts['file']}.py::{parts['cls']}.{parts['method']}"
  return _changed(rows, 0, tests=(name,) + rows[0].tests[1:]), name


def _unknown_pull_request(
    rows: tuple[_Row, ...]) -> tuple[tuple[_Row, ...], str]:
  return _changed(rows, 0, upstream=("no_such_pull_request",)), (
      "no_such_pull_request")


def _unname_a_report(rows: tuple[_Row, ...]) -> tuple[tuple[_Row, ...], str]:
  slug = sorted(_report_slugs())[0]
  return tuple(dataclasses.replace(row, upstream=tuple(
      name for name in row.upstream if name != slug)) for row in rows), slug


def _drop_a_pull_request(
    rows: tuple[_Row, ...]) -> tuple[tuple[_Row, ...], str]:
  module = sorted(_pull_requests())[0]
  names = _pull_request_names(module)
  return tuple(dataclasses.replace(row, upstream=tuple(
      name for name in row.upstream if name not in names)) for row in rows), (
          module)


class BrokenMapTest(parameterized.TestCase):
  """Each check finds what a map broken its way gets wrong."""

  @parameterized.named_parameters(
      ("renamed_function", missing_functions, _rename_function),
      ("function_of_a_missing_module", missing_functions,
       _function_of_a_missing_module),
      ("function_outside_the_runtime", missing_functions,
       _function_outside_the_runtime),
      ("renamed_case", unknown_cases, _rename_case),
      ("dropped_case", unmapped_cases, _drop_case),
      ("case_in_two_rows", cases_mapped_twice, _case_twice),
      ("renamed_test_file", missing_tests,
       lambda rows: _rename_test(rows, "file")),
      ("renamed_test_class", missing_tests,
       lambda rows: _rename_test(rows, "cls")),
      ("renamed_test_method", missing_tests,
       lambda rows: _rename_test(rows, "method")),
      ("unknown_pull_request", unknown_upstream, _unknown_pull_request),
      ("report_named_nowhere", unmapped_upstream, _unname_a_report),
      ("pull_request_named_nowhere", unmapped_upstream, _drop_a_pull_request),
  )
  def test_check_names_what_is_wrong(
      self, check: Callable[[tuple[_Row, ...]], list[str]],
      break_map: Callable[[tuple[_Row, ...]], tuple[tuple[_Row, ...], str]]
  ) -> None:
    self.assertEmpty(check(_map_rows()))
    broken, name = break_map(_map_rows())
    problems = check(broken)
    self.assertTrue(any(name in problem for problem in problems),
                    f"no problem names {name}: {problems}")

  def test_cell_naming_nothing_must_say_why(self) -> None:
    rows = _parse(_table("| a | `f` | | `t` | — runtime only |"))
    self.assertEqual([field for field, _ in rows[0].reasons],
                     ["cases", "upstream"])
    problems = unexplained_cells(tuple(rows))
    self.assertLen(problems, 1)
    self.assertIn("the cases cell names nothing", problems[0])

  def test_row_without_a_function_or_test_fails(self) -> None:
    rows = _parse(_table("| a | — | `c` | — none | `p` |"))
    problems = unexplained_cells(tuple(rows))
    self.assertLen(problems, 2, problems)
    self.assertIn("names no functions", problems[0])
    self.assertIn("names no tests", problems[1])

  def test_columns_are_read_by_their_heading(self) -> None:
    text = (f"{_SECTION}\n\n| tests | upstream | conformance cases | "
            "behaviour | runtime functions |\n|---|---|---|---|---|\n"
            "| `t` | `p`, `r` | — none | a | `f`, `g` |\n\nprose\n")
    row, = _parse(text)
    self.assertEqual((row.tests, row.upstream, row.cases, row.functions),
                     (("t",), ("p", "r"), (), ("f", "g")))
    self.assertEqual(row.line, 5)

  def test_row_with_a_cell_too_few_fails_naming_its_line(self) -> None:
    with self.assertRaisesRegex(AssertionError, "line 5: 4 cells"):
      _parse(_table("| a | `f` | `c` | `t` |"))

  def test_missing_section_fails(self) -> None:
    with self.assertRaisesRegex(AssertionError, "no line"):
      _parse("# The rules\n\n| a | b |\n")


def _table(row: str) -> str:
  """A map holding one row."""
  return (f"{_SECTION}\n\n| behaviour | runtime functions | conformance "
          f"cases | tests | upstream |\n|---|---|---|---|---|\n{row}\n")


if __name__ == "__main__":
  absltest.main()
