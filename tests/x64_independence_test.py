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

"""The modules the x64-on pass leaves out cannot depend on the mode.

tests/conftest.py lists them (``X64_INDEPENDENT_MODULES``); the version
matrix runs them with x64 off only. Each must reach jax_enable_x64 by no
route:

* in its own process it uses JAX only for where it is installed and its
  version (``jax.__file__``, ``jax.__version__``), which no flag changes,
  and imports nothing of jax_patch's runtime;
* every process it starts, it starts through its ``run_checker``, which
  drops JAX_ENABLE_X64 from the child's environment.

This module is not among them: it runs in both modes, and its last case
checks ``run_checker`` in the mode it runs in.
"""

import ast
import importlib
import os
import pathlib
import sys
from types import ModuleType
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized

from tests import conftest

_TESTS = pathlib.Path(__file__).resolve().parent
# What starts a process; the modules start theirs in run_checker alone.
_PROCESS_STARTERS = {
    "subprocess": {"run", "call", "check_call", "check_output", "Popen",
                   "getoutput", "getstatusoutput"},
    "os": {"system", "popen", "execv", "execve", "execvp", "execvpe",
           "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn",
           "posix_spawnp"},
}
# What of JAX's a module may read in its own process.
_JAX_ATTRIBUTES = {"__file__", "__version__"}
_MODULES = sorted(conftest.X64_INDEPENDENT_MODULES)


def _tree(module: str) -> ast.Module:
  return ast.parse((_TESTS / f"{module}.py").read_text())


def _enclosing_functions(tree: ast.Module) -> dict[ast.AST, str]:
  """Each node of ``tree`` and the name of the function it is in ("")."""
  owners: dict[ast.AST, str] = {}

  def visit(node: ast.AST, owner: str) -> None:
    for child in ast.iter_child_nodes(node):
      inner = (child.name if isinstance(
          child, (ast.FunctionDef, ast.AsyncFunctionDef)) else owner)
      owners[child] = inner
      visit(child, inner)

  visit(tree, "")
  return owners


def _process_starts(tree: ast.Module) -> list[tuple[int, str, str]]:
  """(line, call, enclosing function) of each call that starts a process."""
  owners = _enclosing_functions(tree)
  starts = []
  for node in ast.walk(tree):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.attr in _PROCESS_STARTERS.get(node.func.value.id, ())):
      starts.append((node.lineno, f"{node.func.value.id}.{node.func.attr}",
                     owners[node]))
  return starts


class X64IndependentModulesTest(parameterized.TestCase):

  def test_the_list_names_existing_modules(self) -> None:
    self.assertNotEmpty(_MODULES)
    for module in _MODULES:
      self.assertTrue((_TESTS / f"{module}.py").is_file(), module)
    self.assertNotIn("x64_independence_test", _MODULES)

  @parameterized.named_parameters(*[(module, module) for module in _MODULES])
  def test_starts_processes_only_through_run_checker(self, module: str) -> None:
    tree = _tree(module)
    starts = _process_starts(tree)
    self.assertNotEmpty(starts, f"{module} starts no process: the finder "
                        "above has missed how it runs its checkers")
    self.assertEqual(
        [start for start in starts if start[2] != "run_checker"], [],
        f"{module} starts a process outside run_checker")
    # From imports would hide a starter from the check above.
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom):
        self.assertNotIn(node.module, _PROCESS_STARTERS, node.lineno)

  @parameterized.named_parameters(*[(module, module) for module in _MODULES])
  def test_reads_only_jaxs_location_and_version(self, module: str) -> None:
    tree = _tree(module)
    jax_names = [node for node in ast.walk(tree)
                 if isinstance(node, ast.Name) and node.id == "jax"]
    read = {node for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "jax"}
    self.assertLessEqual({node.attr for node in read}, _JAX_ATTRIBUTES)
    # Every use of the name is one of those reads: none passes jax along.
    self.assertLen(jax_names, len(read))
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        for alias in node.names:
          self.assertTrue(alias.name == "jax" or not alias.name.startswith(
              ("jax", "jaxlib")), alias.name)
      if isinstance(node, ast.ImportFrom) and node.module:
        # jax_patch's delivery code reads and writes files; its runtime
        # (jax_patch, jax_patch.numpy, jax_patch._src) is what the mode moves.
        self.assertTrue(node.module.startswith("jax_patch._delivery") or
                        not node.module.startswith(("jax", "jaxlib")),
                        node.module)

  @parameterized.named_parameters(*[(module, module) for module in _MODULES])
  def test_run_checker_keeps_the_flag_from_the_child(self, module: str) -> None:
    checked: ModuleType = importlib.import_module(f"tests.{module}")
    show = [sys.executable, "-c",
            ("import os; print(os.environ.get('JAX_ENABLE_X64'), "
             "os.environ.get('JAX_PATCH_PROBE'))")]
    for mode in ("0", "1"):
      with mock.patch.dict(os.environ, {"JAX_ENABLE_X64": mode}):
        run = checked.run_checker(show, _TESTS, {"JAX_PATCH_PROBE": "seen"})
      self.assertEqual(run.returncode, 0, run.stderr)
      self.assertEqual(run.stdout.split(), ["None", "seen"], mode)


if __name__ == "__main__":
  absltest.main()
