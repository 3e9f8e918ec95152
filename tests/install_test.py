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

"""Tests for install(), uninstall() and patched(), and the untested-JAX notes
of install() and `jax-patch check`."""

import contextlib
import io
import types
from typing import Any
from unittest import mock
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.dlpack
import jax.numpy as jnp
import numpy as np
from jax._src import array
from jax._src import dlpack as jax_src_dlpack
from jax._src import lib

import jax_patch
from jax_patch._delivery import check
from jax_patch._src import dlpack
from jax_patch._src import dlpack_compat
from jax_patch._src import dlpack_device
from jax_patch._src import install
from jax_patch.testing import conformance
from tests import cpu_devices


def _public_to_dlpack(module_name: str) -> Any:
  """``to_dlpack`` as the JAX module serves it; ``None`` where it has none.

  jax.dlpack has it up to JAX 0.5, jax.dlpack and jax.util as deprecated
  aliases in 0.6; 0.7 removed them.
  """
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    return getattr(getattr(jax, module_name, None), "to_dlpack", None)


def _entry_points() -> list[Any]:
  return [jax.dlpack.from_dlpack, jnp.from_dlpack,
          jax_src_dlpack.from_dlpack, jax_src_dlpack.to_dlpack,
          array.ArrayImpl.__dlpack_device__, array.ArrayImpl.__dlpack__,
          _public_to_dlpack("dlpack"), _public_to_dlpack("util")]


class _RefusingModule(types.ModuleType):
  """A module whose attribute ``locked`` cannot be set."""

  def __setattr__(self, name: str, value: Any) -> None:
    if name == "locked":
      raise RuntimeError("locked")
    super().__setattr__(name, value)


class InstallTest(parameterized.TestCase):

  def setUp(self) -> None:
    super().setUp()
    jax_patch.uninstall()
    self.originals = _entry_points()
    self.addCleanup(jax_patch.uninstall)

  def test_install_routes_every_entry_point(self) -> None:
    jax_patch.install()
    self.assertIs(jnp.from_dlpack, jax_patch.from_dlpack)
    self.assertIs(jax.dlpack.from_dlpack, dlpack.from_dlpack)
    self.assertIs(jax_src_dlpack.from_dlpack, dlpack.from_dlpack)
    self.assertIs(jax_src_dlpack.to_dlpack, dlpack.to_dlpack)
    self.assertIs(array.ArrayImpl.__dlpack_device__,
                  dlpack_device.dlpack_device_of_array)
    self.assertIs(array.ArrayImpl.__dlpack__, dlpack.array_dlpack)

  @parameterized.parameters("dlpack", "util")
  def test_install_routes_public_to_dlpack_where_jax_has_it(
      self, module_name: str) -> None:
    if _public_to_dlpack(module_name) is None:
      self.skipTest(f"this JAX has no jax.{module_name}.to_dlpack")
    jax_patch.install()
    self.assertIs(_public_to_dlpack(module_name), dlpack.to_dlpack)
    jax_patch.uninstall()
    self.assertIsNot(_public_to_dlpack(module_name), dlpack.to_dlpack)

  def test_installed_jnp_from_dlpack_has_patched_behaviour(self) -> None:
    jax_patch.install()
    # Strided input needs a copy in both x64 modes; upstream raises
    # UNIMPLEMENTED for it.
    with self.assertRaises(jax_patch.CopyRequiredError):
      jnp.from_dlpack(conformance.aligned_array((8,))[::2], copy=False)

  def test_installed_array_dlpack_uses_patched_export(self) -> None:
    jax_patch.install()
    # Any: jax/_src/basearray.pyi declares __dlpack__ without keywords.
    x: Any = jax.device_put(np.arange(4.0), cpu_devices.cpu())
    with self.assertRaisesRegex(BufferError, "no backend"):
      x.__dlpack__(dl_device=(2, 0))

  def test_installed_numpy_import_of_a_cpu_array_is_read_only(self) -> None:
    jax_patch.install()
    # Any: jax/_src/basearray.pyi declares __dlpack__ without keywords.
    x: Any = jax.device_put(np.arange(4.0), cpu_devices.cpu())
    imported = np.from_dlpack(x)
    self.assertEqual(imported.ctypes.data, x.unsafe_buffer_pointer())
    self.assertFalse(imported.flags.writeable)
    with self.assertRaises(ValueError):
      imported[0] = 1.0

  def test_install_twice_then_uninstall_restores_originals(self) -> None:
    jax_patch.install()
    jax_patch.install()
    self.assertTrue(jax_patch.is_installed())
    jax_patch.uninstall()
    for original, now in zip(self.originals, _entry_points()):
      self.assertIs(now, original)

  def test_uninstall_without_install_changes_nothing(self) -> None:
    jax_patch.uninstall()
    for original, now in zip(self.originals, _entry_points()):
      self.assertIs(now, original)

  def test_patched_restores_on_exit(self) -> None:
    with jax_patch.patched():
      self.assertIs(jnp.from_dlpack, jax_patch.from_dlpack)
    for original, now in zip(self.originals, _entry_points()):
      self.assertIs(now, original)

  def test_patched_restores_when_the_block_raises(self) -> None:
    with self.assertRaises(ValueError):
      with jax_patch.patched():
        raise ValueError("inside")
    self.assertIs(jnp.from_dlpack, self.originals[1])

  def test_patched_inside_install_keeps_the_install(self) -> None:
    jax_patch.install()
    with jax_patch.patched():
      pass
    self.assertIs(jnp.from_dlpack, jax_patch.from_dlpack)

  def test_failing_step_leaves_nothing_patched(self) -> None:
    first = types.ModuleType("first")
    setattr(first, "entry", "original")
    second = _RefusingModule("second")
    second.__dict__["locked"] = "original"
    with self.assertRaisesRegex(RuntimeError, "locked"):
      install.apply_patches([(first, "entry", "patched"),
                             (second, "locked", "patched")])
    self.assertEqual(getattr(first, "entry"), "original")
    self.assertEqual(second.locked, "original")

  def test_missing_target_changes_nothing(self) -> None:
    first = types.ModuleType("first")
    setattr(first, "entry", "original")
    with self.assertRaises(AttributeError):
      install.apply_patches([(first, "entry", "patched"),
                             (types.ModuleType("empty"), "absent", "x")])
    self.assertEqual(getattr(first, "entry"), "original")


class UntestedJaxTest(absltest.TestCase):
  """install() and `jax-patch check` say when JAX is past the tested range.

  No untested JAX is installed here, so the tests pretend one is.
  """

  def setUp(self) -> None:
    super().setUp()
    jax_patch.uninstall()
    self.addCleanup(jax_patch.uninstall)
    # A fresh process: install() has not warned yet.
    self.enter_context(mock.patch.object(install, "_warned_untested", False))

  def _pretend_untested(self) -> None:
    self.enter_context(
        mock.patch.object(dlpack_compat, "IS_UNTESTED_JAXLIB", True))

  def _install_twice(self) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      jax_patch.install()
      jax_patch.uninstall()
      jax_patch.install()
    return [w for w in caught
            if issubclass(w.category, install.UntestedJaxWarning)]

  def test_install_warns_once_on_an_untested_jax(self) -> None:
    self._pretend_untested()
    caught = self._install_twice()
    self.assertLen(caught, 1)
    message = str(caught[0].message)
    self.assertIn(f"JAX {jax.__version__} (jaxlib {lib.version_str})",
                  message)
    self.assertIn(dlpack_compat.TESTED_RANGE, message)
    self.assertEqual(caught[0].filename, __file__)

  def test_install_is_silent_on_a_tested_jax(self) -> None:
    self.assertFalse(dlpack_compat.IS_UNTESTED_JAXLIB)
    self.assertEmpty(self._install_twice())

  def _check_header(self) -> str:
    output = io.StringIO()
    # One case: the header is what is checked.
    with mock.patch.object(conformance, "CASES", conformance.CASES[:1]), \
        contextlib.redirect_stdout(output):
      self.assertEqual(check.check(), 0)
    return output.getvalue().split("\n---", 1)[0]

  def test_check_header_names_an_untested_jax_and_the_tested_range(
      self) -> None:
    self._pretend_untested()
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      header = self._check_header()
    self.assertStartsWith(header, "UNTESTED: ")
    said = " ".join(header.split())  # Wrapped to the terminal's width.
    self.assertIn(f"UNTESTED: JAX {jax.__version__} (jaxlib "
                  f"{lib.version_str}) is untested", said)
    self.assertIn(dlpack_compat.TESTED_RANGE, said)
    # Said once, in the header, not again by install() amid the table.
    self.assertEmpty([w for w in caught
                      if issubclass(w.category, install.UntestedJaxWarning)])

  def test_check_header_is_plain_on_a_tested_jax(self) -> None:
    header = self._check_header()
    self.assertIn(f"jax {jax.__version__}", header)
    self.assertNotIn("UNTESTED", header)


if __name__ == "__main__":
  absltest.main()
