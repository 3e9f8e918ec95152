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

"""jax_patch/_src/dlpack.py is a drop-in for jax/_src/dlpack.py."""

import ast
import inspect
import pathlib
import sys

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np
from jax._src import dlpack as upstream

from jax_patch._src import dlpack

# Every public name jax/_src/dlpack.py has had from JAX 0.4.35 to 0.10.2.
_PUBLIC_NAMES = ("from_dlpack", "to_dlpack", "SUPPORTED_DTYPES",
                 "DLPACK_VERSION", "MIN_DLPACK_VERSION", "DLDeviceType",
                 # From JAX 0.7.
                 "is_supported_dtype", "SUPPORTED_DTYPES_SET")


class DropInTest(parameterized.TestCase):

  @parameterized.parameters(*_PUBLIC_NAMES)
  def test_defines_public_name_of_every_version(self, name: str) -> None:
    self.assertTrue(hasattr(dlpack, name), f"the patch lacks {name}")

  def test_defines_every_public_name_upstream_has(self) -> None:
    tree = ast.parse(pathlib.Path(upstream.__file__).read_text())
    defined = set()
    for node in tree.body:
      if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        defined.add(node.name)
      elif isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target])
        defined |= {t.id for t in targets if isinstance(t, ast.Name)}
    # jax/_src/array.py imports DLDeviceType from it.
    public = {name for name in defined if not name.startswith("_")}
    self.assertContainsSubset(public | {"DLDeviceType"}, set(_PUBLIC_NAMES))

  def test_device_type_enum_is_upstreams(self) -> None:
    self.assertIs(dlpack.DLDeviceType, getattr(upstream, "DLDeviceType"))

  def test_supported_dtypes_are_upstreams_objects(self) -> None:
    self.assertEqual(dlpack.SUPPORTED_DTYPES, upstream.SUPPORTED_DTYPES)
    self.assertEqual(dlpack.SUPPORTED_DTYPES_SET,
                     {np.dtype(t) for t in upstream.SUPPORTED_DTYPES})

  @parameterized.parameters(
      "bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
      "uint32", "uint64", "float16", "bfloat16", "float32", "float64",
      "complex64", "complex128")
  def test_is_supported_dtype_accepts_every_spelling_of_a_supported_type(
      self, name: str) -> None:
    scalar_type = getattr(jnp, name if name != "bool" else "bool_")
    # A dtype, its name, its scalar type: the forms users pass.
    for spelling in (np.dtype(scalar_type), name, scalar_type):
      with self.subTest(spelling=repr(spelling)):
        self.assertTrue(dlpack.is_supported_dtype(spelling))

  @parameterized.parameters("float8_e4m3fn", "int4", "object",
                            "U4", "datetime64[s]")
  def test_is_supported_dtype_refuses_what_upstream_refuses(
      self, name: str) -> None:
    dtype = np.dtype(getattr(jnp, name, name))
    self.assertFalse(dlpack.is_supported_dtype(dtype))
    if hasattr(upstream, "is_supported_dtype"):  # From JAX 0.7.
      self.assertFalse(upstream.is_supported_dtype(dtype))

  @parameterized.parameters("from_dlpack", "to_dlpack")
  def test_accepts_every_upstream_parameter_in_order(self, name: str) -> None:
    theirs = list(inspect.signature(getattr(upstream, name)).parameters.values())
    ours = list(inspect.signature(getattr(dlpack, name)).parameters.values())
    self.assertEqual([(p.name, p.kind) for p in ours[:len(theirs)]],
                     [(p.name, p.kind) for p in theirs])
    for extra in ours[len(theirs):]:
      self.assertIsNot(extra.default, inspect.Parameter.empty)

  def test_imports_only_jax_src_siblings_stdlib_and_numpy(self) -> None:
    source = pathlib.Path(dlpack.__file__).read_text()
    for node in ast.walk(ast.parse(source)):
      if isinstance(node, ast.ImportFrom):
        modules = [node.module or ""]
      elif isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
      else:
        continue
      for module in modules:
        top = module.split(".")[0]
        allowed = (module.startswith(("jax._src", "jax_patch._src"))
                   or top in sys.stdlib_module_names or top == "numpy"
                   or module == "__future__")
        self.assertTrue(allowed, f"dlpack.py imports {module}")


if __name__ == "__main__":
  absltest.main()
