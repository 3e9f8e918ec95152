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

Every process a test starts that may start JAX runs with :func:`environment`:
JAX on the CPU alone.
"""

import os
import pathlib
import subprocess
import sys
from typing import Mapping

_ROOT = pathlib.Path(__file__).parents[1]


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
  """``base`` (else this process's environment), with JAX on the CPU alone.

  ``JAX_PLATFORMS=cpu``: one process at a time may hold a TPU, and the test
  process may hold it already, so a child that opened it too would fail
  (libtpu's lock file). The rest passes through, ``XLA_FLAGS`` (the CPU
  device count) and ``JAX_ENABLE_X64`` among it.
  """
  return {**(os.environ if base is None else base), "JAX_PLATFORMS": "cpu"}


def run(script: str, timeout: float = 300,
        env: Mapping[str, str] | None = None,
       ) -> "subprocess.CompletedProcess[str]":
  """Runs ``script`` with ``python -c`` from the repository root.

  The environment is ``env``, or else :func:`environment`.
  """
  return subprocess.run([sys.executable, "-c", script], capture_output=True,
                        text=True, timeout=timeout, check=False, cwd=_ROOT,
                        env=environment() if env is None else env)
