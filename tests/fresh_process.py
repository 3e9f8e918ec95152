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

"""Runs a script in a new interpreter, for what may crash the process.

An abort or a segfault there fails the test that ran it instead of taking the
whole run down, and its exit status says which it was.
"""

import pathlib
import subprocess
import sys
from typing import Mapping

_ROOT = pathlib.Path(__file__).parents[1]


def run(script: str, timeout: float = 300,
        env: Mapping[str, str] | None = None,
       ) -> "subprocess.CompletedProcess[str]":
  """Runs ``script`` with ``python -c`` from the repository root.

  The environment is ``env``, or else this process's, ``XLA_FLAGS``
  included.
  """
  return subprocess.run([sys.executable, "-c", script], capture_output=True,
                        text=True, timeout=timeout, check=False, cwd=_ROOT,
                        env=env)
