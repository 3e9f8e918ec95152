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

"""The share-or-copy decision: its table, and that nothing else makes it.

The import and export tests prove by mutation that each path carries the
decision out; these pin the decision itself, whatever the x64 mode (it reads
no dtype).
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

import ast  # pylint: disable=g-import-not-at-top
import pathlib
import re
from typing import Any

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp

from jax_patch._src import dlpack
from jax_patch._src import dlpack_export
from jax_patch._src import dlpack_plan
from jax_patch.testing import conformance

_SHARE = dlpack_plan.SHARE
_SHARE_OR_COPY = dlpack_plan.SHARE_OR_COPY
_COPY = dlpack_plan.COPY
# The import and the export.
_SOURCES = (pathlib.Path(dlpack.__file__),
            pathlib.Path(dlpack_export.__file__))

# The functions of those that may read ``copy`` itself: they check its type,
# or pass it on to the producer (``__dlpack__(copy=...)``) and to plan, or
# are the export's fast path (see ExportGuardTest).
_READS_COPY = {"_negotiate_capsule", "_request_capsule", "array_dlpack",
               "to_dlpack"}


def _cpu() -> Any:
  return jax.devices("cpu")[0]


class CopyNoneTest(parameterized.TestCase):

  def test_nothing_in_the_way_shares_or_copies(self) -> None:
    self.assertIs(dlpack_plan.plan(None), _SHARE_OR_COPY)

  @parameterized.named_parameters(
      ("same_device", lambda: _cpu()),
      ("its_sharding", lambda: conformance.single_device_sharding(_cpu())),
      ("another_device", lambda: cpu_devices.require(2)[1]))
  def test_any_target_shares_or_copies(self, target: Any) -> None:
    # A move is allowed: placing the shared import copies it there.
    self.assertIs(dlpack_plan.plan(None, target(), _cpu()), _SHARE_OR_COPY)

  def test_an_obstacle_copies(self) -> None:
    self.assertIs(dlpack_plan.plan(None, None, _cpu(), "unaligned"), _COPY)

  def test_read_only_memory_is_shared(self) -> None:
    # JAX never writes into an imported buffer.
    self.assertIs(dlpack_plan.plan(None, None, _cpu(), read_only=True),
                  _SHARE_OR_COPY)

  def test_a_producer_copy_is_shared(self) -> None:
    self.assertIs(dlpack_plan.plan(None, None, _cpu(), producer_copied=True),
                  _SHARE_OR_COPY)


class CopyTrueTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("alone", {}), ("read_only", {"read_only": True}),
      ("with_obstacle", {"obstacle": "unaligned"}),
      ("to_another_device",
       {"target": lambda: cpu_devices.require(2)[1]}))
  def test_copies(self, facts: dict[str, Any]) -> None:
    if callable(facts.get("target")):
      facts = dict(facts, target=facts["target"]())
    self.assertIs(dlpack_plan.plan(True, source=_cpu(), **facts), _COPY)

  def test_the_producers_copy_is_already_independent(self) -> None:
    self.assertIs(dlpack_plan.plan(True, None, _cpu(), producer_copied=True),
                  _SHARE_OR_COPY)

  def test_an_obstacle_copies_a_producers_copy_again(self) -> None:
    self.assertIs(dlpack_plan.plan(True, None, _cpu(), "unaligned",
                                   producer_copied=True), _COPY)


class CopyFalseTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("no_target", lambda: None),
      ("same_device", lambda: _cpu()),
      ("its_sharding", lambda: conformance.single_device_sharding(_cpu())))
  def test_shares_where_the_data_stays(self, target: Any) -> None:
    self.assertIs(dlpack_plan.plan(False, target(), _cpu()), _SHARE)

  def test_read_only_memory_is_shared(self) -> None:
    self.assertIs(dlpack_plan.plan(False, None, _cpu(), read_only=True),
                  _SHARE)

  def test_an_obstacle_raises_naming_it_and_what_asked(self) -> None:
    with self.assertRaisesRegex(
        dlpack.CopyRequiredError,
        r"^Specified max_version=\(0, 8\) which requires a copy since it is "
        r"odd, however copy=False\. to_dlpack never copies"):
      dlpack_plan.plan(False, None, _cpu(), "it is odd", caller="to_dlpack",
                       specified="max_version=(0, 8)")

  def test_a_producer_copy_raises(self) -> None:
    with self.assertRaisesRegex(dlpack.CopyRequiredError, "IS_COPIED"):
      dlpack_plan.plan(False, None, _cpu(), producer_copied=True)

  def test_a_move_raises_naming_both_devices(self) -> None:
    source, other = cpu_devices.require(2)
    with self.assertRaisesRegex(
        dlpack.CopyRequiredError,
        f"^Specified device={re.escape(repr(other))} which requires a copy "
        f"since the source device is {re.escape(repr(source))}"):
      dlpack_plan.plan(False, other, source)

  def test_a_jax_array_elsewhere_raises_naming_its_sharding(self) -> None:
    source, other = cpu_devices.require(2)
    x = jax.device_put(jnp.zeros(2), source)
    with self.assertRaisesRegex(dlpack.CopyRequiredError,
                                "since the source device is "
                                "SingleDeviceSharding"):
      dlpack_plan.plan(False, other, x)
    self.assertIs(dlpack_plan.plan(False, source, x), _SHARE)

  def test_a_jax_array_on_a_superset_of_its_devices_raises(self) -> None:
    source, other = cpu_devices.require(2)
    x = jax.device_put(jnp.zeros(2), source)
    both = jax.sharding.NamedSharding(
        jax.sharding.Mesh([source, other], ("d",)),
        jax.sharding.PartitionSpec())
    with self.assertRaises(dlpack.CopyRequiredError):
      dlpack_plan.plan(False, both, x)


class ReplanTest(parameterized.TestCase):

  def test_share_raises_saying_why(self) -> None:
    with self.assertRaisesRegex(dlpack.CopyRequiredError,
                                "since jaxlib refused, however copy=False"):
      dlpack_plan.sharing_failed(_SHARE, "jaxlib refused")

  @parameterized.named_parameters(("share_or_copy", _SHARE_OR_COPY),
                                  ("copy", _COPY))
  def test_otherwise_copies(self, decision: dlpack_plan.Decision) -> None:
    self.assertIs(dlpack_plan.sharing_failed(decision, "jaxlib refused"), _COPY)


class ExportGuardTest(parameterized.TestCase):
  """``array_dlpack`` spells out plan's answer for its commonest requests."""

  @parameterized.named_parameters(("copy_none", None), ("copy_false", False))
  def test_the_guards_copy_values_share(self, copy: bool | None) -> None:
    self.assertIsNot(dlpack_plan.plan(copy, None, _cpu()), _COPY)

  def test_copy_true_is_left_to_to_dlpack(self) -> None:
    self.assertIs(dlpack_plan.plan(True, None, _cpu()), _COPY)


def _operands(node: ast.AST) -> set[str]:
  """The names a test uses as operands, not those it passes to a call."""
  if isinstance(node, ast.Call):
    return set()
  if isinstance(node, ast.Name):
    return {node.id}
  names: set[str] = set()
  for child in ast.iter_child_nodes(node):
    names |= _operands(child)
  return names


def _functions_testing_copy(source: str) -> set[str]:
  """The functions with a condition or comparison that reads ``copy``."""
  found: set[str] = set()
  for function in ast.walk(ast.parse(source)):
    if not isinstance(function, ast.FunctionDef):
      continue
    for node in ast.walk(function):
      if isinstance(node, (ast.If, ast.IfExp, ast.While)):
        condition = node.test
      elif isinstance(node, (ast.Compare, ast.BoolOp, ast.UnaryOp)):
        condition = node
      else:
        continue
      if "copy" in _operands(condition):
        found.add(function.name)
  return found


class OnePlaceTest(absltest.TestCase):

  def test_no_function_but_plan_tests_copy(self) -> None:
    testing = set().union(*(_functions_testing_copy(source.read_text())
                            for source in _SOURCES))
    self.assertContainsSubset({"_request_capsule", "array_dlpack"}, testing)
    self.assertEqual(
        testing - _READS_COPY, set(),
        "these functions decide on copy; pass it to dlpack_plan.plan instead")

  def test_a_decision_outside_plan_is_found(self) -> None:
    self.assertEqual(
        _functions_testing_copy(
            "def _import(copy):\n  return 1 if copy is True else 2\n"
            "def _place(copy):\n  plan(copy is None)\n"
            "def _passes(copy):\n  return plan(copy)\n"),
        {"_import", "_place"})


if __name__ == "__main__":
  absltest.main()
