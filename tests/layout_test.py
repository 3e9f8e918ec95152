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

"""The layout's promises: what runs inside JAX apart from what delivers it,
and one module per upstream pull request."""

import ast
import pathlib
import pkgutil

from absl.testing import absltest

from jax_patch._delivery import series_patches
from jax_patch._delivery import vendor

_PACKAGE = pathlib.Path(__file__).absolute().parents[1] / "jax_patch"
_SERIES_PACKAGE = _PACKAGE / "_delivery" / "series_patches"
# The modules of series_patches that are not a pull request.
_SHARED = {"base"}


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


class PackagesTest(absltest.TestCase):

  def test_nothing_that_runs_inside_jax_imports_the_delivery_package(self) -> None:
    sources = sorted((_PACKAGE / "_src").rglob("*.py"))
    self.assertNotEmpty(sources)
    for path in sources:
      with self.subTest(path.relative_to(_PACKAGE).as_posix()):
        delivery = sorted(name for name in _imported_modules(path)
                          if name.startswith("jax_patch._delivery"))
        self.assertEmpty(delivery)

  def test_vendoring_copies_only_modules_of_src(self) -> None:
    for ours in vendor.VENDORED_MODULES:
      with self.subTest(ours):
        self.assertTrue((_PACKAGE / "_src" / ours).is_file())
        self.assertFalse((_PACKAGE / "_delivery" / ours).exists())


class PullRequestModulesTest(absltest.TestCase):

  def _pull_request_modules(self) -> dict[str, object]:
    names = sorted(info.name for info in pkgutil.iter_modules(
        [str(_SERIES_PACKAGE)]) if info.name not in _SHARED)
    self.assertNotEmpty(names)
    return {name: getattr(series_patches, name) for name in names}

  def test_each_pull_request_is_one_module(self) -> None:
    owners: dict[str, list[str]] = {}
    for name, module in self._pull_request_modules().items():
      forms = getattr(module, "FORMS")
      self.assertNotEmpty(forms, name)
      self.assertLen({form.behaviour for form in forms}, 1, name)
      owners.setdefault(forms[0].behaviour, []).append(name)
    self.assertEqual(
        owners, {patch.behaviour: owners.get(patch.behaviour, ["(none)"])[:1]
                 for patch in series_patches.SERIES})

  def test_the_series_is_every_form_of_every_module(self) -> None:
    forms = [form for module in self._pull_request_modules().values()
             for form in getattr(module, "FORMS")]
    self.assertCountEqual(series_patches.SERIES, forms)

  def test_each_module_states_its_changelog_entry(self) -> None:
    for name, module in self._pull_request_modules().items():
      with self.subTest(name):
        section, item = getattr(module, "CHANGELOG")
        # JAX's CHANGELOG.md sections.
        self.assertIn(section, ("Changes", "Bug fixes", "New features",
                                "Deprecations", "Breaking changes"))
        self.assertTrue(item.strip())
        for form in getattr(module, "FORMS"):
          self.assertIn(" ".join(item.split()[:6]),
                        " ".join(series_patches.changelog(form).split()))


if __name__ == "__main__":
  absltest.main()
