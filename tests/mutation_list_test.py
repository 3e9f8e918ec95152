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

"""The named mutations follow the code: each one's text and tests exist.

``tools/mutation_check.py`` reports a mutation whose text is gone only when
it runs (CI's mutation stage, minutes in). This reads the list in a second,
so a change that moves the text fails with the README's test command.
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import sys
import types
from typing import Any

from absl.testing import absltest
from absl.testing import parameterized

_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load_mutation_check() -> types.ModuleType:
  path = _ROOT / "tools" / "mutation_check.py"
  spec = importlib.util.spec_from_file_location("mutation_check", path)
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  # dataclasses reads the module's namespace through sys.modules.
  sys.modules.setdefault(spec.name, module)
  spec.loader.exec_module(module)
  return module


_MUTATIONS = _load_mutation_check().MUTATIONS


def _classes_in(path: pathlib.Path) -> set[str]:
  tree = ast.parse(path.read_text())
  return {node.name for node in ast.walk(tree)
          if isinstance(node, ast.ClassDef)}


class MutationListTest(parameterized.TestCase):

  def test_names_are_unique(self) -> None:
    names = [mutation.name for mutation in _MUTATIONS]
    self.assertCountEqual(names, set(names))

  @parameterized.named_parameters(
      (mutation.name, mutation) for mutation in _MUTATIONS)
  def test_text_occurs_exactly_once_and_changes(self, mutation: Any) -> None:
    source = (_ROOT / mutation.path).read_text()
    self.assertEqual(source.count(mutation.old), 1,
                     f"{mutation.name}: its text in {mutation.path}")
    self.assertNotEqual(mutation.old, mutation.new)

  @parameterized.named_parameters(
      (mutation.name, mutation) for mutation in _MUTATIONS)
  def test_named_tests_exist(self, mutation: Any) -> None:
    self.assertNotEmpty(mutation.tests)
    for node in mutation.tests:
      file, _, test_class = node.partition("::")
      path = _ROOT / file
      self.assertTrue(path.is_file(), f"{mutation.name}: {file}")
      if test_class:
        self.assertIn(test_class.split("::")[0], _classes_in(path),
                      f"{mutation.name}: {node}")


if __name__ == "__main__":
  absltest.main()
