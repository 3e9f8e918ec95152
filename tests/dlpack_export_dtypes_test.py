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

"""Every dtype JAX has, exported through DLPack: a capsule, or BufferError.

The Array API standard asks ``__dlpack__`` to raise ``BufferError`` when it
cannot export the array's dtype. Upstream jaxlib raises ``JaxRuntimeError:
UNIMPLEMENTED`` instead for int4 and the other sub-byte integers (and
float6, where JAX has arrays of it).

Either x64 mode: with x64 off (JAX's default) an array made from int64,
uint64, float64 or complex128 holds the 32-bit type, and exports as that;
with x64 on it exports as itself. Which dtypes export and which raise is the
same in both modes.
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

from collections.abc import Callable  # pylint: disable=g-import-not-at-top
import ctypes
import re
from typing import Any

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import dtypes as jax_dtypes
import ml_dtypes
import numpy as np

import jax_patch
from jax_patch import dlpack as jax_patch_dlpack
from jax_patch._src import dlpack_capsule
from jax_patch._src import dlpack_compat
from jax_patch.testing import conformance

# Nine elements: packed sub-byte types end halfway through a byte.
_VALUES = (1, 0, 1, 1, 0, 1, 0, 1, 1)

# The dtypes with a DLPack type (1.1's codes for float8 and float4) that
# every supported jaxlib exports, where JAX has them: these must export.
_EXPORTED = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
    "uint64", "float16", "float32", "float64", "bfloat16", "complex64",
    "complex128", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "float8_e8m0fnu", "float4_e2m1fn"})

# Each export a consumer can ask for, through the installed
# jax.Array.__dlpack__ or to_dlpack: the unversioned (0.x) and versioned
# (1.x) capsule paths, aliasing and copying.
_EXPORTS: dict[str, Callable[[Any], Any]] = {
    "__dlpack__()": lambda x: x.__dlpack__(),
    "__dlpack__(max_version=(0, 8))":
        lambda x: x.__dlpack__(max_version=(0, 8)),
    "__dlpack__(max_version=(1, 0))":
        lambda x: x.__dlpack__(max_version=(1, 0)),
    "__dlpack__(max_version=(1, 1))":
        lambda x: x.__dlpack__(max_version=(1, 1)),
    "__dlpack__(copy=True)": lambda x: x.__dlpack__(copy=True),
    "__dlpack__(max_version=(1, 1), copy=True)":
        lambda x: x.__dlpack__(max_version=(1, 1), copy=True),
    "to_dlpack(x)": jax_patch_dlpack.to_dlpack,
    "to_dlpack(x, max_version=(1, 1))":
        lambda x: jax_patch_dlpack.to_dlpack(x, max_version=(1, 1)),
}


def _all_dtypes() -> dict[str, np.dtype[Any]]:
  """Every dtype JAX might hold, by a name fit for a test: NumPy's numeric
  types, every scalar type of ml_dtypes, and JAX's own set."""
  found = [np.dtype(code) for code in
           "?" + np.typecodes["AllInteger"] + np.typecodes["AllFloat"]]
  found += [np.dtype(t) for t in vars(ml_dtypes).values()
            if isinstance(t, type) and issubclass(t, np.generic)]
  jax_set = jax_dtypes._jax_dtype_set  # pylint: disable=protected-access
  found += [np.dtype(dtype) for dtype in jax_set]
  return {_name(dtype): dtype for dtype in found}


def _name(dtype: np.dtype[Any]) -> str:
  if dtype == jax_dtypes.float0:
    return "float0"
  return re.sub(r"\W+", "_", str(dtype)).strip("_")


def _array_or_why_not(dtype: np.dtype[Any]) -> jax.Array | str:
  """A CPU array of ``dtype`` holding ``_VALUES``, or why there is none."""
  if not dlpack_compat.jax_has_dtype(dtype):
    return f"JAX {jax.__version__} has no arrays of {dtype}"
  try:
    # device_put, not jnp.zeros: JAX caches jnp.zeros's bool, int1 and uint1
    # arrays as one, and returns the first made for all three. String
    # arrays need a device named.
    x = jax.device_put(np.array(_VALUES).astype(dtype), cpu_devices.cpu())
  except (TypeError, ValueError, dlpack_compat.RuntimeErrorType) as e:
    return f"JAX {jax.__version__} cannot make a CPU array of {dtype}: {e}"
  if not isinstance(x, jax.Array):
    return (f"JAX keeps {_name(dtype)} values in NumPy arrays, never in a "
            "jax.Array")
  return x


def _naming(dtype: np.dtype[Any]) -> str:
  """A pattern for ``dtype``'s name as a word of its own (int4, not uint4)."""
  return rf"(?<!\w){re.escape(str(dtype))}(?!\w)"


# What NumPy reads through DLPack. Not ml_dtypes' types, float8_e5m2 among
# them, though ml_dtypes gives it NumPy's kind for floats.
_NUMPY_READS = frozenset(np.dtype(code) for code in
                         "?" + np.typecodes["AllInteger"] + "efdFD")


def _tensor_fields(capsule: Any) -> tuple[int, tuple[Any, ...]]:
  """An unconsumed capsule's 1.x flags and DLTensor fields, read unchecked.

  The import's reader refuses sub-byte types, which NumPy cannot hold.
  """
  # pylint: disable=protected-access
  versioned, address = dlpack_capsule._managed_tensor_address(capsule)
  _, _, flags, tensor = dlpack_capsule._read_structure(address, versioned)
  return flags, dlpack_capsule._TENSOR_FIELDS.unpack(tensor)


def _unpacked_nibbles(capsule: Any, count: int) -> np.ndarray[Any, Any]:
  """The ``count`` 4-bit elements a packed capsule holds, first in the low
  nibble of each byte, one a byte."""
  _, fields = _tensor_fields(capsule)
  data, byte_offset = fields[0], fields[9]
  packed = np.frombuffer(
      ctypes.string_at(data + byte_offset, (count + 1) // 2), np.uint8)
  return np.stack([packed & 0xF, packed >> 4], axis=-1).ravel()[:count]


def _read_back(capsule: Any, x: jax.Array) -> np.ndarray[Any, Any] | None:
  """What a consumer reads from ``capsule``, as ``x``'s dtype; ``None``
  where no consumer here reads it.

  NumPy, where it reads the dtype; else jax_patch's import (bfloat16,
  float8); float4_e2m1fn, which neither reads, nibble by nibble.
  """
  if x.dtype in _NUMPY_READS:
    return np.from_dlpack(conformance.PreparedCapsule(capsule))
  if x.dtype == np.dtype(ml_dtypes.float4_e2m1fn):
    return _unpacked_nibbles(capsule, x.size).view(x.dtype)
  _, fields = _tensor_fields(capsule)
  if dlpack_capsule.numpy_dtype(fields[4:7]) is None:
    return None
  return np.asarray(
      jax_patch.from_dlpack(conformance.PreparedCapsule(capsule)))


class ExportDTypesTest(parameterized.TestCase):
  """Each dtype through each export from the CPU, in the x64 mode the
  environment gives."""

  def setUp(self) -> None:
    super().setUp()
    self.enter_context(jax_patch.patched())

  def _array(self, dtype: np.dtype[Any]) -> jax.Array:
    made = _array_or_why_not(dtype)
    if isinstance(made, str):
      self.skipTest(made)
    assert not isinstance(made, str)  # For the type checkers.
    return made

  @parameterized.named_parameters(sorted(_all_dtypes().items()))
  def test_exports_with_its_values_or_raises_buffer_error_naming_it(
      self, dtype: np.dtype[Any]) -> None:
    """Either x64 mode: a capsule that reads back as the array, or
    BufferError naming its dtype; the types in ``_EXPORTED`` export.

    With x64 off, a 64-bit type is held, and exported, as its 32-bit twin;
    with x64 on, as itself.
    """
    x = self._array(dtype)
    self.assertEqual(x.dtype, jax_dtypes.canonicalize_dtype(dtype))
    for call, export in _EXPORTS.items():
      with self.subTest(call=call):
        try:
          capsule = export(x)
        except BufferError as e:
          self.assertNotIn(x.dtype.name, _EXPORTED, f"{call} raised {e!r}")
          self.assertRegex(str(e), _naming(x.dtype))
          continue
        self.assertIn(dlpack_capsule.capsule_name(capsule),
                      (dlpack_capsule.LEGACY_NAME,
                       dlpack_capsule.VERSIONED_NAME))
        back = _read_back(capsule, x)
        if back is not None:
          self.assertEqual(back.dtype, x.dtype)
          # Byte for byte: NumPy before numpy/numpy#30879 compares ml_dtypes'
          # NaNs (0 as float8_e8m0fnu) as unequal.
          np.testing.assert_array_equal(
              np.ascontiguousarray(back).view(np.uint8),
              np.ascontiguousarray(x).view(np.uint8))

  @parameterized.named_parameters(
      (name, name) for name in ("int4", "uint4", "int2", "uint2"))
  def test_sub_byte_integer_raises_buffer_error_not_jaxlibs_error(
      self, name: str) -> None:
    x = self._array(np.dtype(getattr(ml_dtypes, name)))
    for call, export in _EXPORTS.items():
      with self.subTest(call=call):
        with self.assertRaisesRegex(BufferError, _naming(x.dtype)):
          export(x)

  @parameterized.named_parameters(
      ("unversioned", None), ("versioned", (1, 1)))
  def test_float4_e2m1fn_exports_packed_two_to_a_byte(
      self, max_version: tuple[int, int] | None) -> None:
    float4 = np.dtype(ml_dtypes.float4_e2m1fn)
    self._array(float4)  # Skips where JAX lacks it.
    # Every 4-bit pattern, and one more to end halfway through a byte.
    patterns = np.arange(17, dtype=np.uint8) % 16
    x = jax.device_put(patterns.view(float4), cpu_devices.cpu())
    capsule = x.__dlpack__(max_version=max_version)
    flags, fields = _tensor_fields(capsule)
    self.assertEqual(fields[4:7], (17, 4, 1))  # kDLFloat4_e2m1fn, 4 bits.
    self.assertFalse(flags & dlpack_capsule.FLAG_IS_SUBBYTE_TYPE_PADDED)
    np.testing.assert_array_equal(_unpacked_nibbles(capsule, 17), patterns)


if __name__ == "__main__":
  absltest.main()
