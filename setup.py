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

"""Builds jax-patch; setup.cfg holds everything but what follows.

`jax-patch stubs` and `jax-patch vendor` read our declarations from
`stubs/jax` and `patches/` (jax_patch/_delivery/source_patch.py), which lie
outside the package. An editable install reads them in the checkout; a
wheel carries a copy in `jax_patch/_delivery/declarations/`.
"""

import pathlib
import shutil

import setuptools
from setuptools.command import build_py

_DECLARATIONS = ("stubs/jax", "patches")


class BuildPy(build_py.build_py):
  """Copies the declaration trees into the built package."""

  def run(self) -> None:
    super().run()
    if getattr(self, "editable_mode", False):
      return  # source_patch reads the checkout's own.
    target = pathlib.Path(self.build_lib, "jax_patch", "_delivery",
                          "declarations")
    for tree in _DECLARATIONS:
      shutil.copytree(tree, target / tree, dirs_exist_ok=True,
                      ignore=shutil.ignore_patterns("__pycache__"))


setuptools.setup(cmdclass={"build_py": BuildPy})
