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

"""What a JAX tree says of itself in its ``jax/version.py``.

The one reader of that file: ``vendor`` and ``series_tree`` both read a
tree's version through it, each raising its own error with its message.
"""

from __future__ import annotations

import pathlib
import re

VERSION_FILE = "jax/version.py"


class JaxTreeError(Exception):
  """The folder is no JAX tree, or its ``jax/version.py`` is malformed."""


def _setting(name: str) -> re.Pattern[str]:
  # A string literal in either quote, at the start of a line, as JAX's
  # version.py sets both (_version in double quotes, the jaxlib minimum in
  # single).
  return re.compile(rf"^{name}\s*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)


_VERSION = _setting("_version")
_MIN_JAXLIB = _setting("_minimum_jaxlib_version")


def read_version(tree: pathlib.Path) -> str:
  """Reads JAX's version, ``_version``, from ``tree``'s ``jax/version.py``.

  Raises:
    JaxTreeError: ``tree`` has no ``jax/version.py``, or it sets no
      ``_version``.
  """
  return _read(tree, "_version", _VERSION)


def read_minimum_jaxlib(tree: pathlib.Path) -> str:
  """Reads the oldest jaxlib ``tree``'s JAX accepts from its version.py.

  Raises:
    JaxTreeError: ``tree`` has no ``jax/version.py``, or it sets no
      ``_minimum_jaxlib_version``.
  """
  return _read(tree, "_minimum_jaxlib_version", _MIN_JAXLIB)


def _read(tree: pathlib.Path, name: str, setting: re.Pattern[str]) -> str:
  version_file = tree / VERSION_FILE
  if not version_file.is_file():
    raise JaxTreeError(
        f"{tree} is not a JAX tree: it has no {VERSION_FILE}.")
  match = setting.search(version_file.read_text())
  if match is None:
    raise JaxTreeError(f"{version_file} does not set {name}.")
  return match.group(1)
