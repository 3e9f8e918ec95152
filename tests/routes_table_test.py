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

"""docs/behaviour.md's table of what happens to an array holds, cell by cell.

The table under ``## What happens to my array`` says, for each kind of
source and ``device`` target, what each ``copy`` does: shared, copied,
moved or refused. Each row is a test here, with real producers; sharing is
proved by writing into the source. Float32 sources: the table holds in
either x64 mode.
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

import pathlib  # pylint: disable=g-import-not-at-top
import re  # pylint: disable=g-import-not-at-top
from collections.abc import Callable  # pylint: disable=g-import-not-at-top
import importlib.util  # pylint: disable=g-import-not-at-top
from typing import Any  # pylint: disable=g-import-not-at-top

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

import jax_patch
from jax_patch._src import dlpack_compat
from jax_patch.testing import conformance

_TABLE = (pathlib.Path(__file__).resolve().parent.parent / "docs"
          / "behaviour.md")
_SECTION = "## What happens to my array"
_COPIES = (None, True, False)
_OUTCOMES = ("shared", "copied", "moved", "refused")
_SENTINEL = -7.0

# A source: what from_dlpack gets, and a writable array over its memory.
_Source = tuple[Any, Any]


def _numpy_aligned() -> _Source:
  array = conformance.aligned_array((4, 8))
  return array, array


def _numpy_read_only() -> _Source:
  array = conformance.aligned_array((4, 8))
  view = array.view()
  view.flags.writeable = False
  return view, array


def _numpy_unaligned() -> _Source:
  array = conformance.aligned_array((4, 8), misalign_bytes=4)
  return array, array


def _numpy_strided() -> _Source:
  array = conformance.aligned_array((4, 16))[:, ::2]
  return array, array


def _jax_array() -> _Source:
  array = jax.device_put(np.arange(32, dtype=np.float32).reshape(4, 8),
                         jax.devices("cpu")[0])
  return array, None  # Immutable: shared means the same buffer.


def _torch_tensor() -> _Source:
  if importlib.util.find_spec("torch") is None:
    raise absltest.SkipTest(
        "torch is not installed: the test extra pins torch 2.13.0 (CPU) on "
        "Python 3.11 only, the one Python with a CPU wheel here")
  import torch  # pylint: disable=g-import-not-at-top

  array = conformance.aligned_array((4, 8))
  return torch.from_numpy(array), array


def _producer() -> _Source:
  array = conformance.aligned_array((4, 8))
  return conformance.RecordingProducer(array), array


_SOURCES: dict[str, Callable[[], _Source]] = {
    "NumPy, 64-byte aligned": _numpy_aligned,
    "NumPy, read-only, 64-byte aligned": _numpy_read_only,
    "NumPy, not 64-byte aligned": _numpy_unaligned,
    "NumPy, strided (`x[:, ::2]`)": _numpy_strided,
    "`jax.Array`": _jax_array,
    "torch tensor, 64-byte aligned": _torch_tensor,
    "another DLPack producer, aligned": _producer,
}


def _cpu(index: int) -> Any:
  return cpu_devices.require(index + 1)[index]


def _rows_over_cpu_1_and_2() -> Any:
  mesh = jax.sharding.Mesh(np.array([_cpu(1), _cpu(2)]), ("rows",))
  return jax.sharding.NamedSharding(mesh,
                                    jax.sharding.PartitionSpec("rows"))


def _format(layout: Any) -> Any:
  return dlpack_compat.FORMAT_TYPE(
      layout, conformance.single_device_sharding(_cpu(0)))


_TARGETS: dict[str, Callable[[], Any]] = {
    "`None`": lambda: None,
    "`cpu:0`": lambda: _cpu(0),
    "`cpu:1`": lambda: _cpu(1),
    "a sharding over `cpu:1`, `cpu:2`": _rows_over_cpu_1_and_2,
    "`Format(None, cpu:0)`": lambda: _format(None),
    "`Format(Layout((1, 0)), cpu:0)`": lambda: _format(
        conformance.layout((1, 0))),
}


def _cells(line: str) -> list[str]:
  return [cell.strip() for cell in line.strip().strip("|").split("|")]


def read_table(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
  """(source, target, outcome per copy) for each row of the table."""
  section = text.split(_SECTION, 1)[1].split("\n## ", 1)[0]
  rows = []
  for line in section.splitlines():
    if not line.startswith("| ") or line.startswith("| source"):
      continue
    source, target, *outcomes = _cells(line)
    rows.append((source, target, tuple(outcomes)))
  return rows


def _parameters() -> list[tuple[str, str, str, tuple[str, ...]]]:
  def words(cell: str) -> str:
    return re.sub(r"\W+", "_", cell).strip("_")
  return [(f"{words(source)}_to_{words(target)}", source, target, outcomes)
          for source, target, outcomes in read_table(_TABLE.read_text())]


class TableTest(absltest.TestCase):

  def test_has_a_row_for_each_source_and_target(self) -> None:
    rows = read_table(_TABLE.read_text())
    self.assertCountEqual([(source, target) for source, target, _ in rows],
                          [(source, target) for source in _SOURCES
                           for target in _TARGETS])
    for _, _, outcomes in rows:
      self.assertLen(outcomes, len(_COPIES))
      self.assertContainsSubset(outcomes, _OUTCOMES)


class RouteTest(cpu_devices.CpuDefaultTestCase):
  """One row of the table: its three ``copy`` values, each from fresh."""

  @parameterized.named_parameters(*_parameters())
  def test_row(self, source_name: str, target_name: str,
               outcomes: tuple[str, ...]) -> None:
    make_source = _SOURCES[source_name]
    make_target = _TARGETS[target_name]
    for copy, outcome in zip(_COPIES, outcomes):
      with self.subTest(copy=copy):
        source, writable = make_source()
        self._check(source, writable, make_target(), copy,
                    self._expected(target_name, outcome))

  def _expected(self, target_name: str, outcome: str) -> str:
    if "Layout" in target_name and not dlpack_compat.JAX_HOLDS_CPU_LAYOUTS:
      return "ValueError"  # The note under the table.
    return outcome

  def _check(self, source: Any, writable: Any, target: Any,
             copy: bool | None, expected: str) -> None:
    if expected in ("refused", "ValueError"):
      error = (jax_patch.CopyRequiredError if expected == "refused"
               else ValueError)
      with self.assertRaises(error):
        jax_patch.from_dlpack(source, device=target, copy=copy)
      return
    result = jax_patch.from_dlpack(source, device=target, copy=copy)
    on_source_device = result.devices() == {_cpu(0)}
    self.assertEqual(on_source_device, expected != "moved",
                     f"on {result.devices()}")
    if not on_source_device:
      self.assertEqual(result.devices(), _devices_of(target))
    self.assertEqual(_shares(result, source, writable), expected == "shared")
    if isinstance(target, dlpack_compat.FORMAT_TYPE):
      layout = dlpack_compat.format_parts(target)[0]
      self.assertTrue(layout is None or dlpack_compat.layout_matches(
          layout, dlpack_compat.layout_of(result)))


def _devices_of(target: Any) -> set[Any]:
  if isinstance(target, jax.sharding.Sharding):
    return set(target.device_set)
  return {target}


def _shares(result: Any, source: Any, writable: Any) -> bool:
  """Whether ``result`` aliases the source's memory, written to see."""
  if writable is None:  # A jax.Array: the same buffer.
    return bool(result.devices() == source.devices()
                and result.unsafe_buffer_pointer()
                == source.unsafe_buffer_pointer())
  writable[0, 0] = _SENTINEL
  first = result.addressable_shards[0].data
  return bool(np.asarray(first)[0, 0] == _SENTINEL)


class ReadTableTest(absltest.TestCase):

  def test_reads_the_cells_of_a_row(self) -> None:
    text = (f"{_SECTION}\n\n| source | `device=` | a | b | c |\n"
            "|---|---|---|---|---|\n"
            "| `jax.Array` | `None` | shared | copied | refused |\n\n"
            "## Next\n\n| x | y | z |\n")
    self.assertEqual(read_table(text),
                     [("`jax.Array`", "`None`",
                       ("shared", "copied", "refused"))])


if __name__ == "__main__":
  absltest.main()
