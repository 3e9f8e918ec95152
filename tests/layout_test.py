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

"""The layout's promises: what runs inside JAX apart from what checks it and
what delivers it, and one module per upstream pull request."""

import ast
from collections.abc import Callable
import pathlib
import re
import tempfile

from absl.testing import absltest

from jax_patch._delivery import upstream_set
from jax_patch._delivery import vendor

_PACKAGE = pathlib.Path(__file__).absolute().parents[1] / "jax_patch"
# What only test code imports: ours, and the frameworks it runs on.
_TEST_CODE = ("jax_patch.testing", "tests", "unittest", "absl.testing",
              "pytest", "hypothesis")


def _imported_modules(path: pathlib.Path) -> set[str]:
  """The modules ``path`` imports, anywhere in it (lazy imports too)."""
  modules: set[str] = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      modules.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      modules.add(node.module)
      modules.update(f"{node.module}.{alias.name}" for alias in node.names)
  return modules


def _is_in(module: str, packages: tuple[str, ...]) -> bool:
  return any(module == package or module.startswith(package + ".")
             for package in packages)


def _top_level_names(path: pathlib.Path) -> set[str]:
  """The names ``path`` binds at its top level: assigned, defined."""
  names: set[str] = set()
  for node in ast.parse(path.read_text()).body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      names.update(target.id for target in targets
                   if isinstance(target, ast.Name))
  return names


class PackagesTest(absltest.TestCase):

  def _assert_runtime_imports_none(
      self, forbidden: Callable[[str], bool]) -> None:
    sources = sorted((_PACKAGE / "_src").rglob("*.py"))
    self.assertNotEmpty(sources)
    for path in sources:
      with self.subTest(path.relative_to(_PACKAGE).as_posix()):
        self.assertEmpty(sorted(name for name in _imported_modules(path)
                                if forbidden(name)))

  def test_nothing_that_runs_inside_jax_imports_the_delivery_package(self) -> None:
    self._assert_runtime_imports_none(
        lambda name: name.startswith("jax_patch._delivery"))

  def test_nothing_that_runs_inside_jax_imports_test_code(self) -> None:
    self._assert_runtime_imports_none(lambda name: _is_in(name, _TEST_CODE))

  def test_nothing_that_runs_inside_jax_defines_conformance_cases(
      self) -> None:
    for path in sorted((_PACKAGE / "_src").rglob("*.py")):
      with self.subTest(path.relative_to(_PACKAGE).as_posix()):
        self.assertNotIn("CASES", _top_level_names(path))
    self.assertIn("CASES",
                  _top_level_names(_PACKAGE / "testing" / "conformance.py"))

  def test_vendoring_copies_only_modules_of_src(self) -> None:
    for ours in vendor.VENDORED_MODULES:
      with self.subTest(ours):
        self.assertTrue((_PACKAGE / "_src" / ours).is_file())
        self.assertFalse((_PACKAGE / "_delivery" / ours).exists())
        self.assertFalse((_PACKAGE / "testing" / ours).exists())

  def test_vendoring_writes_test_code_beside_jax_tests_only(self) -> None:
    written_to_src = set(vendor.VENDORED_MODULES.values())
    for ours, theirs in vendor.VENDORED_TEST_MODULES.items():
      with self.subTest(ours):
        self.assertTrue((_PACKAGE / "testing" / ours).is_file())
        self.assertFalse((_PACKAGE / "_src" / ours).exists())
        self.assertNotIn(theirs, written_to_src)


def _structures_defined(path: pathlib.Path) -> set[str]:
  """The ``ctypes.Structure`` subclasses ``path`` defines."""
  found = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ClassDef) and any(
        ast.unparse(base) in ("ctypes.Structure", "Structure")
        for base in node.bases):
      found.add(node.name)
  return found


class CapsuleCoreTest(absltest.TestCase):

  def test_one_module_defines_the_dlpack_structures(self) -> None:
    defining = {}
    for folder in ("jax_patch", "tests", "tools", "benchmarks"):
      for path in sorted((_PACKAGE.parent / folder).rglob("*.py")):
        if structures := _structures_defined(path):
          defining[path.relative_to(_PACKAGE.parent).as_posix()] = structures
    self.assertEqual(list(defining), ["jax_patch/_src/dlpack_capsule.py"])
    self.assertContainsSubset(
        {"_DLTensor", "_DLManagedTensor", "_DLManagedTensorVersioned"},
        defining["jax_patch/_src/dlpack_capsule.py"])

  def test_a_second_definition_is_found(self) -> None:
    folder = tempfile.TemporaryDirectory()
    self.addCleanup(folder.cleanup)
    path = pathlib.Path(folder.name) / "probe.py"
    path.write_text("import ctypes\nclass _DLTensor(ctypes.Structure):\n"
                    "  _fields_ = []\n")
    self.assertEqual(_structures_defined(path), {"_DLTensor"})


class BazelTest(absltest.TestCase):

  def test_every_test_module_is_a_bazel_test(self) -> None:
    build = (_PACKAGE.parent / "BUILD.bazel").read_text()
    listed = re.search(r"^_TESTS = \[(.*?)\]", build, re.M | re.S)
    assert listed is not None, "BUILD.bazel has no _TESTS list"
    self.assertEqual(
        sorted(re.findall(r'"(\w+)"', listed.group(1))),
        sorted(path.stem for path in (_PACKAGE.parent / "tests").glob(
            "*_test.py")))


def _string_constants(path: pathlib.Path) -> list[str]:
  return [node.value for node in ast.walk(ast.parse(path.read_text()))
          if isinstance(node, ast.Constant) and isinstance(node.value, str)]


class PatchFilesTest(absltest.TestCase):
  """The upstream pull requests are files (upstream/), not generated."""

  def test_no_python_string_carries_the_queues_code(self) -> None:
    patch_set = upstream_set.read(upstream_set.default_root())
    added = {line[1:].strip() for pr in patch_set.pull_requests
             for file, lines in upstream_set.file_diffs(pr.text()).items()
             if file.startswith(("jax/", "jaxlib/"))
             for line in lines
             if line.startswith("+") and not line.startswith("+++")
             and len(line.strip()) > 30}
    self.assertNotEmpty(added)
    for path in sorted(_PACKAGE.rglob("*.py")):
      for text in _string_constants(path):
        found = [line for line in added if line in text]
        self.assertEmpty(found, f"{path.relative_to(_PACKAGE.parent)} "
                         "holds code of an upstream pull request")


if __name__ == "__main__":
  absltest.main()
