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

"""No torn imports: a moved import has read its source when it returns.

JAX transfers asynchronously. The patch returns a moved import only once the
transfer has finished (``dlpack._finished``), so a write the producer makes
after ``from_dlpack`` returns never shows in the result. On the CPU the move
is to ``cpu:1``; ``jax-patch check``'s ``numpy_to_accelerator_is_never_torn``
makes the same writes on an accelerator. Holds in either x64 mode (float32).
"""

from tests import cpu_devices  # pylint: disable=g-import-not-at-top

from absl.testing import absltest  # pylint: disable=g-import-not-at-top
from absl.testing import parameterized

import jax_patch
from jax_patch.testing import conformance


class NoTornImportTest(parameterized.TestCase):

  @parameterized.named_parameters(("copy_none", None), ("copy_true", True))
  def test_writes_after_a_move_to_cpu1_returns_are_never_seen(
      self, copy: bool | None) -> None:
    other_cpu = cpu_devices.require(2)[1]
    # 16 MB: a transfer the CPU finishes within the write would hide a
    # missing wait; this size is torn every time without it.
    torn = conformance.torn_imports(jax_patch.from_dlpack, other_cpu, copy,
                                    nbytes=16 * 2**20)
    self.assertEqual(torn, 0, f"{torn} of {conformance.TEAR_ROUNDS} torn")


if __name__ == "__main__":
  absltest.main()
