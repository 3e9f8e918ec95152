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

"""The CPU devices the tests run on: the one place that asks for them.

Importing this module (``tests/__init__.py`` does, so any ``from tests
import ...`` does) asks XLA for :data:`COUNT` CPU devices, unless
``XLA_FLAGS`` already names a count: the user's choice stands. It must run
before JAX creates its CPU backend, which is why every test module imports
it first. A test that needs more devices than the process has skips, saying
how many it needs and how many there are (:func:`require`), whatever the
modules run beside it or their order.

JAX's default device need not be a CPU: on a machine with a TPU or a GPU it
is the accelerator, whose memory exports otherwise (a TPU's has no DLPack
device type at all). A test of CPU behaviour says so: its arrays go to
:func:`cpu`, or its class is a :class:`CpuDefaultTestCase`.
"""

import os
from typing import Any

from absl.testing import parameterized

# The most any test uses (a mesh of four devices).
COUNT = 4
_FLAG = "--xla_force_host_platform_device_count"


def _ask_for_devices() -> None:
  flags = os.environ.get("XLA_FLAGS", "")
  if _FLAG not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={COUNT}".strip()


def require(count: int) -> list[Any]:
  """The first ``count`` CPU devices, for a test that needs that many.

  The conformance cases' own check, so a test and a case that need the same
  devices skip alike.

  Returns:
    ``jax.devices("cpu")[:count]``.

  Raises:
    unittest.SkipTest: there are fewer, saying how many and why.
  """
  # Imported here: this module runs before JAX starts, and must not start it.
  from jax_patch.testing import conformance  # pylint: disable=g-import-not-at-top

  return conformance._require_devices(count)[:count]  # pylint: disable=protected-access


def cpu() -> Any:
  """The CPU device that tests of CPU behaviour put their arrays on.

  ``jax.devices("cpu")[0]``, whatever JAX's default device is.
  """
  import jax  # pylint: disable=g-import-not-at-top  # After the flags.

  return jax.devices("cpu")[0]


class CpuDefaultTestCase(parameterized.TestCase):
  """A test case of CPU behaviour: JAX's default device is :func:`cpu`.

  So that ``jnp.arange(4.0)`` and the like make CPU arrays, on any machine,
  for the whole of each test. The default is the test thread's alone: an
  array made on a thread the test starts names its device.
  """

  def setUp(self) -> None:
    super().setUp()
    import jax  # pylint: disable=g-import-not-at-top  # After the flags.

    self.enter_context(jax.default_device(cpu()))


_ask_for_devices()
