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

"""The version gates agree with the running jaxlib, and what they drive.

Each gate test asks the jaxlib binding itself, without the patch, what the
gate claims about it; run on every JAX of the matrix (noxfile.py), they
pin each extension-version boundary to the behaviour it stands for.
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

import gc  # pylint: disable=g-import-not-at-top
import threading
from typing import Any
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax._src import core
from jax._src.lib import xla_client

from jax_patch._src import dlpack
from jax_patch._src import dlpack_capsule
from jax_patch._src import dlpack_compat
from jax_patch._src import dlpack_errors
from jax_patch.testing import conformance
from tests import producers

_FLOAT8 = np.dtype(ml_dtypes.float8_e4m3fn)
_FLOAT8_CODE = 10


def _binding() -> Any:
  return getattr(xla_client, "_xla")


def _jaxlib_import(source: np.ndarray[Any, Any]) -> Any:
  """Imports ``source`` through jaxlib's binding alone, asking for no copy."""
  capsule = dlpack_capsule.capsule_for_host_array(source)
  return dlpack_compat.import_capsule(capsule, jax.devices("cpu")[0],
                                             None, 1)


def _alias_is_right_everywhere(source: np.ndarray[Any, Any]) -> bool:
  """Whether jaxlib's alias of ``source`` reads, computes and moves right."""
  try:
    alias = _jaxlib_import(source)
  except dlpack_compat.RuntimeErrorType:
    return False  # jaxlib 0.7.2 refuses a transposed layout.
  try:
    return not conformance.wrong_uses(alias, source, cpu_devices.require(2)[1])
  except AssertionError:
    return False  # JAX before 0.5.1 refuses to compute with it.


class GateTest(absltest.TestCase):

  def test_extension_version_is_the_one_jaxlib_reports(self) -> None:
    self.assertEqual(dlpack_compat.EXTENSION_VERSION,
                     getattr(xla_client, "_version"))
    self.assertGreaterEqual(dlpack_compat.EXTENSION_VERSION,
                            dlpack_compat.JAXLIB_0_4_35)

  def test_binding_gates_match_the_binding_signature(self) -> None:
    self.assertIsNone(dlpack_compat.binding_shape_problem())
    expected = dlpack_compat.expected_binding_parameters()
    self.assertEqual("copy" in expected["dlpack_managed_tensor_to_buffer"],
                     dlpack_compat.JAXLIB_COPIES_UNALIGNED)
    self.assertEqual(
        "dl_device_type" in expected["dlpack_managed_tensor_to_buffer"],
        dlpack_compat.EXTENSION_VERSION >= dlpack_compat.JAXLIB_0_10_2)
    self.assertEqual(
        "max_version" in expected["buffer_to_dlpack_managed_tensor"],
        dlpack_compat.JAXLIB_EXPORTS_VERSIONED_CAPSULES)

  def test_an_unknown_binding_shape_is_reported(self) -> None:
    with mock.patch.object(dlpack_compat, "expected_binding_parameters",
                           return_value={"dlpack_managed_tensor_to_buffer":
                                         ("dlpack", "device", "new")}):
      problem = dlpack_compat.binding_shape_problem()
    assert problem is not None
    self.assertIn("dlpack_managed_tensor_to_buffer", problem)
    self.assertIn(dlpack_compat.TESTED_RANGE, problem)

  def test_versioned_import_gate_matches_jaxlib(self) -> None:
    # Any: pytype's NumPy stubs lack the DLPack methods.
    source: Any = conformance.aligned_array((16,))
    capsule = source.__dlpack__(max_version=(1, 0))
    if not dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES:
      with self.assertRaisesRegex(dlpack_compat.RuntimeErrorType,
                                  "dltensor_versioned"):
        dlpack_compat.import_capsule(capsule, jax.devices("cpu")[0], None, 1)
      return
    result = dlpack_compat.import_capsule(capsule, jax.devices("cpu")[0],
                                          None, 1)
    self.assertEqual(dlpack_capsule.capsule_name(capsule),
                     dlpack_capsule.USED_VERSIONED_NAME)
    source[0] = 7
    self.assertEqual(float(np.asarray(result)[0]), 7.0)

  def test_jaxlib_reading_versioned_capsules_ignores_their_flags(
      self) -> None:
    # So the patch reads READ_ONLY and IS_COPIED itself.
    if not dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES:
      self.skipTest("this jaxlib reads no 1.x capsules")
    source = conformance.aligned_array((16,))
    capsule = dlpack_capsule.as_versioned_capsule(
        dlpack_capsule.capsule_for_host_array(source), (1, 0),
        dlpack_capsule.FLAG_IS_COPIED | dlpack_capsule.FLAG_READ_ONLY)
    result = dlpack_compat.import_capsule(capsule, jax.devices("cpu")[0],
                                          None, 1)
    self.assertEqual(result.unsafe_buffer_pointer(), source.ctypes.data)

  def test_versioned_export_gate_matches_jaxlib(self) -> None:
    buffer = jax.device_put(np.arange(4.0),
                            cpu_devices.cpu()).addressable_data(0)
    if not dlpack_compat.JAXLIB_EXPORTS_VERSIONED_CAPSULES:
      self.assertIsNone(dlpack_compat.JAXLIB_DLPACK_VERSION)
      self.assertFalse(dlpack_capsule.inspect(
          dlpack_compat.export_legacy_capsule(buffer, None)).versioned)
      return
    info = dlpack_capsule.inspect(
        dlpack_compat.export_versioned_capsule(buffer, None, (1, 0)))
    self.assertTrue(info.versioned)
    self.assertEqual(info.flags, dlpack_capsule.FLAG_READ_ONLY)
    self.assertEqual(info.version, dlpack_compat.JAXLIB_DLPACK_VERSION)
    self.assertEqual(info.version, tuple(_binding().dlpack_version))
    # Why copies are not exported through jaxlib: it marks them READ_ONLY.
    copied = dlpack_capsule.inspect(_binding().buffer_to_dlpack_managed_tensor(
        buffer, stream=None, max_version=(1, 0), copied=True))
    self.assertEqual(copied.flags, dlpack_capsule.FLAG_READ_ONLY
                     | dlpack_capsule.FLAG_IS_COPIED)

  def test_numpy_view_gate_matches_jax(self) -> None:
    # The gate is of CPU buffers: an accelerator's are never NumPy's views.
    for dtype in (jnp.bool_, jnp.int8, jnp.uint32, jnp.float16, jnp.float32,
                  jnp.complex64):
      x = jax.device_put(np.zeros((3, 4), dtype), cpu_devices.cpu())
      view = np.asarray(x)
      self.assertEqual(
          view.ctypes.data == x.unsafe_buffer_pointer()
          and not view.flags.writeable,
          dlpack_compat.NUMPY_VIEW_ALIASES_CPU_BUFFERS, dtype)

  def test_jax_dtype_gate_matches_jax_numpy(self) -> None:
    for dtype in set(dlpack_capsule._DTYPES.values()):
      name = "bool_" if dtype == np.bool_ else dtype.name
      self.assertEqual(dlpack_compat.jax_has_dtype(dtype),
                       hasattr(jnp, name), dtype)

  def test_dtype_this_jax_lacks_is_refused_with_buffer_error(self) -> None:
    for dtype in set(dlpack_capsule._DTYPES.values()):
      producer = producers.CraftedProducer(
          conformance.aligned_array((4,), dtype))
      if dlpack_compat.jax_has_dtype(dtype):
        self.assertEqual(dlpack.from_dlpack(producer).dtype,
                         jax.dtypes.canonicalize_dtype(dtype))
      else:
        with self.assertRaisesRegex(
            BufferError, f"dtype is {dtype.name}, which this JAX does not"):
          dlpack.from_dlpack(producer)
      del producer
      gc.collect()

  def test_float8_gate_matches_jaxlib_import(self) -> None:
    source = conformance.aligned_array((64,), _FLOAT8)
    knows = dlpack_compat.jaxlib_knows_type_code(_FLOAT8_CODE)
    if knows:
      self.assertEqual(_jaxlib_import(source).dtype, _FLOAT8)
    else:
      with self.assertRaisesRegex(dlpack_compat.RuntimeErrorType,
                                  "type code"):
        _jaxlib_import(source)

  def test_float8_gate_matches_jaxlib_export(self) -> None:
    x = jax.device_put(np.arange(8).astype(_FLOAT8), cpu_devices.cpu())
    if dlpack_compat.jaxlib_knows_type_code(_FLOAT8_CODE):
      dlpack_compat.export_legacy_capsule(x.addressable_data(0), None)
    else:
      with self.assertRaisesRegex(dlpack_compat.RuntimeErrorType,
                                  "no DLPack equivalent"):
        dlpack_compat.export_legacy_capsule(x.addressable_data(0), None)

  def test_layout_gate_matches_jaxlib(self) -> None:
    source = conformance.aligned_array((4, 4)).T
    self.assertEqual(_alias_is_right_everywhere(source),
                     dlpack_compat.JAXLIB_ALIASES_ANY_COMPACT_LAYOUT)
    self.assertTrue(_alias_is_right_everywhere(source.T))  # Row-major.

  def test_size_one_dimension_gate_matches_jaxlib(self) -> None:
    # Row-major but for the stride of the size-1 dimension: (3, 1) with
    # strides (1, 3).
    source = conformance.aligned_array((1, 3)).T
    self.assertEqual(_alias_is_right_everywhere(source),
                     not dlpack_compat.JAXLIB_ORDERS_SIZE_ONE_DIMENSIONS)
    self.assertTrue(_alias_is_right_everywhere(
        conformance.aligned_array((3, 1))))  # The same, with C strides.

  def test_scalar_types_are_jax_numpys(self) -> None:
    self.assertIs(dlpack_compat.scalar_types.bfloat16, jnp.bfloat16)
    self.assertIs(dlpack_compat.scalar_types.int8, jnp.int8)

  def test_trace_state_is_clean_only_outside_a_transformation(self) -> None:
    seen: list[bool] = []

    def traced(x: Any) -> Any:
      seen.append(dlpack_compat.trace_state_clean())
      return x

    jax.jit(traced)(1.0)
    jax.vmap(traced)(jnp.ones(2))
    self.assertEqual(seen, [False, False])
    self.assertTrue(dlpack_compat.trace_state_clean())

  def test_trace_context_gate_matches_jax(self) -> None:
    # The context variables came with JAX 0.10.0 (measured on the wheels:
    # 0.9.0.1 and 0.9.2 have none, 0.10.0 has them); 0.4.36 to 0.9 keep the
    # trace in a thread-local TracingContext.
    version = tuple(int(part) for part in jax.__version__.split(".")[:3])
    self.assertEqual(dlpack_compat.JAX_HAS_TRACE_CONTEXT,
                     version >= (0, 10, 0))

  def test_trace_check_agrees_with_jax_in_and_out_of_transformations(
      self) -> None:
    seen: list[tuple[bool, bool]] = []

    def check(x: Any) -> Any:
      seen.append((dlpack_compat.trace_state_clean(),
                   core.trace_state_clean()))
      return x

    check(1.0)
    jax.jit(check)(1.0)
    jax.vmap(check, axis_name="i")(jnp.ones(2))
    jax.grad(check)(1.0)
    thread = threading.Thread(target=check, args=(1.0,))
    thread.start()
    thread.join()
    check(1.0)
    self.assertEqual(seen, [(True, True), (False, False), (False, False),
                            (False, False), (True, True), (True, True)])

  def test_trace_check_reads_the_context_without_calling_jax(self) -> None:
    if not dlpack_compat.JAX_HAS_TRACE_CONTEXT:
      self.skipTest("before JAX 0.4.36 only core.trace_state_clean knows")
    calls: list[int] = []

    def traced(x: Any) -> Any:
      before = clean.call_count
      self.assertFalse(dlpack_compat.trace_state_clean())
      calls.append(clean.call_count - before)
      return x

    clean = mock.Mock(wraps=core.trace_state_clean)
    with mock.patch.object(core, "trace_state_clean", clean):
      self.assertTrue(dlpack_compat.trace_state_clean())
      self.assertEqual(clean.call_count, 0)
      jax.jit(traced)(1.0)
    self.assertEqual(calls, [1])  # Not the top level: JAX judges.


class Float8Test(cpu_devices.CpuDefaultTestCase):
  """float8 on the CPU on every jaxlib; before 0.5.3 jaxlib's DLPack lacks
  the types."""

  @producers.requires_torch
  def test_export_aliases_the_buffer_and_keeps_it_alive(self) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    x = jnp.arange(8, dtype=_FLOAT8)
    address = x.unsafe_buffer_pointer()
    capsule = dlpack.to_dlpack(x)
    self.assertEqual(dlpack_capsule.inspect(capsule).address, address)
    tensor = torch.utils.dlpack.from_dlpack(capsule)
    del x, capsule
    np.testing.assert_array_equal(tensor.to(torch.float32).numpy(),
                                  np.arange(8, dtype=np.float32))
    self.assertEqual(tensor.data_ptr(), address)

  def test_versioned_export_is_read_only(self) -> None:
    x = jnp.arange(8, dtype=_FLOAT8)
    info = dlpack_capsule.inspect(dlpack.to_dlpack(x, max_version=(1, 0)))
    self.assertTrue(info.read_only)
    self.assertEqual(info.dtype, _FLOAT8)

  @producers.requires_torch
  def test_copy_false_shares_or_says_which_jaxlib_cannot(self) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    source = torch.arange(64, dtype=torch.float32).to(torch.float8_e4m3fn)
    if dlpack_compat.jaxlib_knows_type_code(_FLOAT8_CODE):
      result = dlpack.from_dlpack(source, copy=False)
      source[0] = 3.0
      self.assertEqual(float(np.asarray(result)[0]), 3.0)
    else:
      with self.assertRaisesRegex(dlpack_errors.CopyRequiredError, "0.5.3"):
        dlpack.from_dlpack(source, copy=False)

  @producers.requires_torch
  def test_copy_none_imports_the_values(self) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    source = torch.arange(64, dtype=torch.float32).to(torch.float8_e5m2)
    result = dlpack.from_dlpack(source)
    self.assertEqual(result.dtype, np.dtype(ml_dtypes.float8_e5m2))
    np.testing.assert_array_equal(np.asarray(result).astype(np.float32),
                                  source.to(torch.float32).numpy())


class LayoutTest(parameterized.TestCase):
  """Transposed input on every jaxlib; some alias only row-major soundly."""

  def test_copy_false_transposed_shares_or_says_why_not(self) -> None:
    base = conformance.aligned_array((4, 4))
    if dlpack_compat.JAXLIB_ALIASES_ANY_COMPACT_LAYOUT:
      result = dlpack.from_dlpack(base.T, copy=False)
      base[0, 1] = 99
      self.assertEqual(float(np.asarray(result)[1, 0]), 99.0)
    else:
      with self.assertRaisesRegex(dlpack_errors.CopyRequiredError,
                                  "row-major"):
        dlpack.from_dlpack(base.T, copy=False)

  def test_copy_none_permuted_three_d_comes_back_right(self) -> None:
    source = conformance.aligned_array((2, 3, 4)).transpose(2, 0, 1)
    expected = np.array(source)
    np.testing.assert_array_equal(np.asarray(dlpack.from_dlpack(source)),
                                  expected)

  @parameterized.named_parameters(
      ("column", (1, 3), (1, 0)),
      ("size_one_between", (1, 4, 1, 3), (2, 1, 0, 3)),
  )
  def test_size_one_dimension_strides_share_where_jaxlib_reads_them_right(
      self, base_shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
    base = conformance.aligned_array(base_shape)
    source = base.transpose(axes)  # Row-major but for size-1 strides.
    if dlpack_compat.JAXLIB_ORDERS_SIZE_ONE_DIMENSIONS:
      with self.assertRaisesRegex(dlpack_errors.CopyRequiredError,
                                  "orders size-1 dimensions"):
        dlpack.from_dlpack(source, copy=False)
    else:
      result = dlpack.from_dlpack(source, copy=False)
      base.flat[0] = 99
      self.assertEqual(float(np.asarray(result).flat[0]), 99.0)

  @parameterized.named_parameters(
      ("column", (1, 3), (1, 0)),
      ("size_one_between", (1, 4, 1, 3), (2, 1, 0, 3)),
  )
  def test_size_one_dimension_strides_compute_and_move_right(
      self, base_shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
    source = conformance.aligned_array(base_shape).transpose(axes)
    result = dlpack.from_dlpack(source)
    self.assertEmpty(conformance.wrong_uses(result, source,
                                            cpu_devices.require(2)[1]))

if __name__ == "__main__":
  absltest.main()
