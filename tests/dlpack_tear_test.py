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

"""No torn imports: a moved import has read its source when it returns; a
NumPy array reaches an accelerator in one hop.

JAX transfers asynchronously. The patch returns a moved import only once the
transfer has finished (``dlpack._finished``), so a write the producer makes
after ``from_dlpack`` returns never shows in the result. On the CPU the move
is to ``cpu:1``; ``jax-patch check``'s ``numpy_to_accelerator_is_never_torn``
makes the same writes on an accelerator. Holds in either x64 mode (float32).
"""

from tests import cpu_devices  # pylint: disable=g-import-not-at-top

from typing import Any  # pylint: disable=g-import-not-at-top
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

import jax_patch
from jax_patch._src import dlpack
from jax_patch._src import dlpack_device
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



class NumpyToAcceleratorRouteTest(parameterized.TestCase):
  """A NumPy array goes to an accelerator in one hop, jaxlib's own transfer
  of the array as it lies, and comes back only once that has finished.

  No accelerator is here: cpu:1 stands in for one (``is_host`` says it is
  not host memory), and ``place`` and ``_finished`` are watched.
  """

  def _import_watched(self, source: np.ndarray[Any, Any],
                      copy: bool | None) -> tuple[mock.Mock, mock.Mock, Any]:
    stand_in = cpu_devices.require(2)[1]
    place = mock.Mock(wraps=dlpack_device.place)
    finished = mock.Mock(wraps=dlpack._finished)  # pylint: disable=protected-access
    with mock.patch.object(dlpack_device, "is_host", return_value=False), \
        mock.patch.object(dlpack_device, "place", place), \
        mock.patch.object(dlpack, "_finished", finished):
      result = jax_patch.from_dlpack(source, device=stand_in, copy=copy)
    self.assertEqual(result.devices(), {stand_in})
    np.testing.assert_array_equal(np.asarray(result), source)
    return place, finished, result

  @parameterized.product(
      layout=["aligned", "unaligned", "strided", "read_only"],
      copy=[None, True])
  def test_moves_the_numpy_array_itself_and_waits(
      self, layout: str, copy: bool | None) -> None:
    source = conformance.aligned_array(
        (64,), misalign_bytes=4 if layout == "unaligned" else 0)
    if layout == "strided":
      source = source[::2]
    if layout == "read_only":
      source.setflags(write=False)
    place, finished, result = self._import_watched(source, copy)
    place.assert_called_once()
    self.assertIs(place.call_args.args[0], source)
    finished.assert_called_once()
    self.assertIs(finished.call_args.args[0], result)

  def test_copy_false_takes_the_general_path_and_raises(self) -> None:
    stand_in = cpu_devices.require(2)[1]
    with mock.patch.object(dlpack_device, "is_host", return_value=False):
      with self.assertRaises(BufferError):
        jax_patch.from_dlpack(conformance.aligned_array((64,)),
                              device=stand_in, copy=False)

  def test_a_host_target_does_not_take_it(self) -> None:
    place = mock.Mock(wraps=dlpack_device.place)
    with mock.patch.object(dlpack_device, "place", place):
      result = jax_patch.from_dlpack(conformance.aligned_array((64,)),
                                     device=cpu_devices.require(2)[1])
    self.assertNotIsInstance(place.call_args.args[0], np.ndarray)
    self.assertIsInstance(result, jax.Array)


if __name__ == "__main__":
  absltest.main()
