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

"""Tests for reading a JAX tree's ``jax/version.py``.

``vendor`` and ``series_tree`` read a tree's version through it alone: each
raises its own error, with the reader's message.
"""

import pathlib
import re
import tempfile
import textwrap

from absl.testing import absltest
import jax

from jax_patch._delivery import jax_tree
from jax_patch._delivery import series_tree
from jax_patch._delivery import vendor

# As JAX's own version.py sets them: the version in double quotes, the
# jaxlib minimum in single, each among other code.
_VERSION_PY = textwrap.dedent("""\
    import os

    _version = "0.12.0.1"

    def _version_as_tuple(version_str):
      return tuple(int(i) for i in version_str.split(".") if i.isdigit())

    _minimum_jaxlib_version = '0.11.2'
    _minimum_jaxlib_version_info = _version_as_tuple(_minimum_jaxlib_version)
    """)


class ReadVersionTest(absltest.TestCase):

  def setUp(self) -> None:
    super().setUp()
    scratch = tempfile.TemporaryDirectory()
    self.addCleanup(scratch.cleanup)
    self.root = pathlib.Path(scratch.name)

  def _tree(self, version_py: str) -> pathlib.Path:
    (self.root / "jax").mkdir()
    (self.root / "jax" / "version.py").write_text(version_py)
    return self.root

  def test_reads_the_version_and_the_minimum_jaxlib(self) -> None:
    tree = self._tree(_VERSION_PY)
    self.assertEqual(jax_tree.read_version(tree), "0.12.0.1")
    self.assertEqual(jax_tree.read_minimum_jaxlib(tree), "0.11.2")

  def test_either_quote_is_read(self) -> None:
    tree = self._tree("_version = '0.11.1'\n"
                      '_minimum_jaxlib_version = "0.11.0"\n')
    self.assertEqual(jax_tree.read_version(tree), "0.11.1")
    self.assertEqual(jax_tree.read_minimum_jaxlib(tree), "0.11.0")

  def test_reads_the_installed_jax(self) -> None:
    installed = pathlib.Path(jax.__file__).parent.parent
    self.assertEqual(jax_tree.read_version(installed), jax.__version__)

  def test_a_folder_without_version_py_is_no_jax_tree(self) -> None:
    with self.assertRaisesRegex(
        jax_tree.JaxTreeError,
        f"^{re.escape(str(self.root))} is not a JAX tree: it has no "
        r"jax/version\.py\.$"):
      jax_tree.read_version(self.root)

  def test_a_version_py_without_the_setting_names_it(self) -> None:
    tree = self._tree("_version = compute_version()\n")
    version_file = re.escape(str(tree / "jax" / "version.py"))
    with self.assertRaisesRegex(
        jax_tree.JaxTreeError, f"^{version_file} does not set _version\\.$"):
      jax_tree.read_version(tree)
    with self.assertRaisesRegex(
        jax_tree.JaxTreeError,
        f"^{version_file} does not set _minimum_jaxlib_version\\.$"):
      jax_tree.read_minimum_jaxlib(tree)

  def test_a_setting_inside_other_code_is_not_read(self) -> None:
    tree = self._tree('if True:\n  _version = "0.12.0"\n')
    with self.assertRaisesRegex(jax_tree.JaxTreeError, "does not set"):
      jax_tree.read_version(tree)

  def test_vendor_and_series_raise_their_own_error_with_its_message(
      self) -> None:
    with self.assertRaisesRegex(vendor.VendorError, "not a JAX tree"):
      vendor.jax_version(self.root)
    tree = self._tree(_VERSION_PY.replace("_minimum_jaxlib_version =",
                                          "_minimum = "))
    with self.assertRaisesRegex(series_tree.SeriesError,
                                "does not set _minimum_jaxlib_version"):
      series_tree.read_target(tree)
    self.assertEqual(vendor.jax_version(tree), "0.12.0.1")


if __name__ == "__main__":
  absltest.main()
