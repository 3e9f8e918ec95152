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

"""The jax-patch conformance cases, against this tree's own DLPack API.

Added by `jax-patch vendor`, with the cases beside it (dlpack_conformance.py):
it runs them against jax.numpy.from_dlpack, jax.dlpack.from_dlpack and
jax.Array.__dlpack__ as this tree defines them.
Run it with jax_enable_x64 off and on (JAX_ENABLE_X64=1), as JAX's CI runs
its tests: each case checks what the standard requires in the mode it runs
in (with x64 on, copy=False shares 64-bit input; with it off, that input is
narrowed, a copy, and copy=False raises), and a case that holds in one mode
only skips in the other, saying so.
"""

import importlib.util
import os
import sys

# Several CPU devices, before JAX creates its CPU backend.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=4")

from typing import Any  # pylint: disable=g-import-not-at-top

from absl.testing import absltest
from absl.testing import parameterized
import jax.dlpack
import jax.numpy as jnp


def _load_cases() -> Any:
  """The cases' module, dlpack_conformance.py beside this file.

  Loaded by its path: JAX's pytest configuration imports tests with
  --import-mode=importlib, which puts no test folder on sys.path, and
  tests/ is no package.
  """
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "dlpack_conformance.py")
  spec = importlib.util.spec_from_file_location("dlpack_conformance", path)
  assert spec is not None and spec.loader is not None, path
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # Where its dataclasses look it up.
  spec.loader.exec_module(module)
  return module


conformance = _load_cases()


def _through_jnp(x: Any, **kwargs: Any) -> Any:
  return jnp.from_dlpack(x, **kwargs)


def _through_jax_dlpack(x: Any, **kwargs: Any) -> Any:
  return jax.dlpack.from_dlpack(x, **kwargs)


_ENTRY_POINTS = {"jnp": _through_jnp, "jax_dlpack": _through_jax_dlpack}


class DLPackConformanceTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{case.name}__{entry}", case, entry)
      for case in conformance.CASES for entry in _ENTRY_POINTS)
  def test_case(self, case: Any, entry: str) -> None:
    case.run(_ENTRY_POINTS[entry])


if __name__ == "__main__":
  absltest.main()
