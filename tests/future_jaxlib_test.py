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

"""A JAX past the tested range is never made worse by the patch.

No released jaxlib shows the future, so a test double stands in for one:
jaxlib's DLPack import function, wrapped so that it documents another shape
(nanobind's docstring is what the patch reads) and counted, with the
extension version raised past every tested one. The double forwards every
call to the real function, as a future jaxlib's JAX would call it. Each
case runs in a fresh process, where the patch is first imported over the
double.

- A binding that only gained parameters with defaults: the patch calls it as
  before, shares as before, and ``install()`` patches JAX, warning once
  that the JAX is untested.
- One whose shape is unknown: the patch steps aside. Its entry points are
  JAX's own, ``install()`` leaves JAX as it is and warns once with the
  version, what it found and ``jax-patch check``, and every call works as
  JAX's own does.
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top,unused-import

import contextlib  # pylint: disable=g-import-not-at-top
import io
import json
import shutil
import textwrap
from typing import Any
from unittest import mock
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp

import jax_patch
from jax_patch._delivery import check
from jax_patch._src import dlpack_compat
from jax_patch._src import install
from jax_patch._src.numpy import lax_numpy
from jax_patch.testing import conformance
from tests import fresh_process


def _documented(doc: str) -> Any:
  """A stand-in binding function documenting ``doc``, as nanobind would."""
  def binding(*args: Any, **kwargs: Any) -> None:
    del args, kwargs
  binding.__name__ = "dlpack_managed_tensor_to_buffer"
  binding.__doc__ = doc
  return binding


# The script's prologue: jaxlib's import function becomes a double
# documenting `gained` after its last parameter, or `inserted` after
# `stream`, and counting calls. Where the real jaxlib is the newest tested
# one, the extension version then passes every tested one: a future jaxlib
# runs on the newest gates. (An older jaxlib keeps its version: its gates
# call functions the newest gates would not; there the double shows the
# shape rule alone.) Then the patch is imported over it.
_FUTURE_JAXLIB = textwrap.dedent("""
    import json, re, sys, warnings
    import numpy as np
    import jax, jax.numpy as jnp
    from jax._src import lib
    from jax._src.lib import xla_client

    binding = xla_client._xla
    real = binding.dlpack_managed_tensor_to_buffer
    calls = []

    def future(*args, **kwargs):
      calls.append(len(args) + len(kwargs))
      return real(*args, **kwargs)

    future.__name__ = real.__name__
    doc = real.__doc__
    if GAINED:
      doc = doc.replace(") ->", ", " + GAINED + ") ->")
    if INSERTED:
      doc = re.sub(r"(\\bstream: [^,)]*)", r"\\1, " + INSERTED, doc)
    future.__doc__ = doc
    binding.dlpack_managed_tensor_to_buffer = future
    name = ("jaxlib_extension_version"
            if hasattr(lib, "jaxlib_extension_version")
            else "xla_extension_version")
    if getattr(lib, name) >= NEWEST_GATE:
      # Past the range, where the newest gates are this jaxlib's own.
      setattr(lib, name, getattr(lib, name) + 1000)

    import jax_patch
    from jax_patch._src import dlpack_compat
    from jax_patch.testing import conformance
    seen = {"untested": dlpack_compat.IS_UNTESTED_JAXLIB,
            "problem": dlpack_compat.BINDING_SHAPE_PROBLEM}
""")

# What the script then does, as a user would; it prints `seen` as JSON.
_USE = textwrap.dedent("""
    source = conformance.aligned_array((16,))
    direct = jax_patch.from_dlpack(source)
    source[0] = 7
    seen["direct_shares"] = float(np.asarray(direct)[0]) == 7.0
    seen["direct_is_jax_own"] = jax_patch.from_dlpack is jnp.from_dlpack
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      jax_patch.install()
      jax_patch.uninstall()
      jax_patch.install()
    seen["warnings"] = [str(w.message) for w in caught
                        if issubclass(w.category, jax_patch.UntestedJaxWarning)]
    seen["installed"] = jax_patch.is_installed()
    aligned = conformance.aligned_array((4,))
    imported = jnp.from_dlpack(aligned)
    aligned[1] = 5
    seen["installed_shares"] = float(np.asarray(imported)[1]) == 5.0
    seen["exported"] = np.from_dlpack(jnp.arange(3.0)).tolist()
    seen["copied"] = float(jnp.from_dlpack(imported, copy=True)[1])
    seen["calls"] = len(calls)
    print(json.dumps(seen))
""")


def _run_future(gained: str = "", inserted: str = "") -> dict[str, Any]:
  script = (f"GAINED = {gained!r}\nINSERTED = {inserted!r}\n"
            f"NEWEST_GATE = {dlpack_compat.JAXLIB_0_12_1}\n"
            + _FUTURE_JAXLIB + _USE)
  done = fresh_process.run(script)
  if done.returncode:
    raise AssertionError(f"exit status {done.returncode}:\n{done.stderr}")
  seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
  return seen


class ShapeRuleTest(parameterized.TestCase):
  """How the patch reads a binding's documented shape."""

  def test_nanobind_signature_is_read_with_its_defaults(self) -> None:
    binding = _documented(
        "dlpack_managed_tensor_to_buffer(dlpack: types.CapsuleType, device: "
        "Device, stream: int | None, copy: bool | None = ..., shape: "
        "tuple[int, int] | None = None, *, order: dict[str, int] = {}) "
        "-> ArrayImpl")
    self.assertEqual(
        dlpack_compat.documented_signatures(binding),
        [(("dlpack", False), ("device", False), ("stream", False),
          ("copy", True), ("shape", True), ("order", True))])

  def test_each_numbered_overload_is_read(self) -> None:
    binding = _documented(
        "dlpack_managed_tensor_to_buffer(*args, **kwargs)\n"
        "Overloaded function.\n"
        "1. dlpack_managed_tensor_to_buffer(dlpack: object, device: Device, "
        "stream: int | None) -> ArrayImpl\n"
        "2. dlpack_managed_tensor_to_buffer(dlpack: object, cpu_backend: "
        "Client | None = None) -> ArrayImpl")
    self.assertEqual(
        [tuple(name for name, _ in shape)
         for shape in dlpack_compat.documented_signatures(binding)],
        [(), ("dlpack", "device", "stream"), ("dlpack", "cpu_backend")])

  @parameterized.named_parameters(
      ("same", "c: int = ...", True),
      ("gained_with_default", "c: int = ..., d: object = ...", True),
      ("gained_without_default", "c: int = ..., d: object", False),
      ("renamed", "other: int = ...", False),
      ("inserted_before", "x: int, c: int = ...", False),
      ("lost", "", False))
  def test_a_call_fits_where_only_defaulted_parameters_follow(
      self, rest: str, fits: bool) -> None:
    doc = ("dlpack_managed_tensor_to_buffer(a: object, b: object"
           + (f", {rest}" if rest else "") + ") -> object")
    shape, = dlpack_compat.documented_signatures(_documented(doc))
    self.assertEqual(dlpack_compat.takes(shape, ("a", "b", "c")), fits)

  def test_unknown_shape_names_the_function_what_it_found_and_the_range(
      self) -> None:
    fake = mock.Mock(spec=["dlpack_managed_tensor_to_buffer",
                           "buffer_to_dlpack_managed_tensor"])
    fake.dlpack_managed_tensor_to_buffer = _documented(
        "dlpack_managed_tensor_to_buffer(dlpack: object, order: int) -> "
        "object")
    problem = dlpack_compat.binding_shape_problem(fake)
    assert problem is not None
    self.assertIn("dlpack_managed_tensor_to_buffer", problem)
    self.assertIn("('dlpack', 'order')", problem)
    self.assertIn(dlpack_compat.TESTED_RANGE, problem)

  def test_the_running_jaxlib_has_a_shape_the_patch_knows(self) -> None:
    self.assertIsNone(dlpack_compat.BINDING_SHAPE_PROBLEM)


def _runs_past_the_range() -> bool:
  """Whether the double's process runs past the tested range (see above)."""
  return dlpack_compat.EXTENSION_VERSION >= dlpack_compat.JAXLIB_0_12_1


class FutureJaxlibTest(absltest.TestCase):
  """A fresh process over a double of a future jaxlib (the module doc)."""

  def assert_every_call_works(self, seen: dict[str, Any]) -> None:
    """Import (sharing), export and copy, all through the double."""
    self.assertTrue(seen["installed_shares"])
    self.assertEqual(seen["exported"], [0.0, 1.0, 2.0])
    self.assertEqual(seen["copied"], 5.0)
    self.assertGreater(seen["calls"], 0, "the double was not called")

  def test_gained_defaulted_parameter_is_called_as_before(self) -> None:
    seen = _run_future(gained="future: int = ...")
    self.assertEqual(seen["untested"], _runs_past_the_range())
    self.assertIsNone(seen["problem"])
    self.assertTrue(seen["direct_shares"], "the patch did not share")
    self.assertFalse(seen["direct_is_jax_own"])
    self.assertTrue(seen["installed"])
    self.assert_every_call_works(seen)
    if not _runs_past_the_range():
      self.assertEmpty(seen["warnings"])
      return
    warned, = seen["warnings"]
    self.assertIn("is untested", warned)
    self.assertIn(dlpack_compat.TESTED_RANGE, warned)

  def test_unknown_shape_steps_aside_for_jax_own_functions(self) -> None:
    seen = _run_future(inserted="order: int")
    self.assertEqual(seen["untested"], _runs_past_the_range())
    self.assertIn("dlpack_managed_tensor_to_buffer", seen["problem"])
    self.assertIn("'order'", seen["problem"])
    self.assertTrue(seen["direct_is_jax_own"])
    self.assertTrue(seen["direct_shares"])
    self.assertFalse(seen["installed"])
    self.assert_every_call_works(seen)
    warned, = seen["warnings"]
    self.assertIn(f"JAX {jax.__version__}", warned)
    self.assertIn("leaves JAX", warned)
    self.assertIn("'order'", warned)
    self.assertIn("jax-patch check", warned)


class SmokeCheckTest(cpu_devices.CpuDefaultTestCase):
  """install() keeps JAX's own where the patch fails and JAX's own works."""

  def setUp(self) -> None:
    super().setUp()
    jax_patch.uninstall()
    self.addCleanup(jax_patch.uninstall)
    self.enter_context(mock.patch.object(install, "_warned_untested", False))
    self.enter_context(
        mock.patch.object(dlpack_compat, "IS_UNTESTED_JAXLIB", True))

  def _install(self) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      jax_patch.install()
    return [str(w.message) for w in caught
            if issubclass(w.category, install.UntestedJaxWarning)]

  def test_failing_round_trip_keeps_jax_own_functions(self) -> None:
    jax_own = jnp.from_dlpack

    def broken(*args: Any, **kwargs: Any) -> Any:
      raise RuntimeError("a private JAX name the patch reads is gone")

    self.enter_context(mock.patch.object(lax_numpy, "from_dlpack", broken))
    warned, = self._install()
    self.assertFalse(jax_patch.is_installed())
    self.assertIs(jnp.from_dlpack, jax_own)
    self.assertIn("leaves JAX", warned)
    self.assertIn("a private JAX name the patch reads is gone", warned)
    self.assertIn("jax-patch check", warned)

  def test_passing_round_trip_installs_and_warns_untested(self) -> None:
    warned, = self._install()
    self.assertTrue(jax_patch.is_installed())
    self.assertIn("is untested", warned)

  def test_failure_jax_own_shares_keeps_the_patch(self) -> None:
    # Never worse: where JAX's own fails the round trip too, the patch stays.
    failing = mock.patch.object(install, "_smoke_error",
                                return_value=RuntimeError("no CPU"))
    with failing:
      warned, = self._install()
    self.assertTrue(jax_patch.is_installed())
    self.assertIn("is untested", warned)


def _case(name: str, upstream_passes: bool, patch_passes: bool) -> Any:
  """A conformance case whose outcome depends on the function it is given."""
  def run(from_dlpack: Any) -> str:
    passes = (patch_passes if from_dlpack is jax_patch.from_dlpack
              else upstream_passes)
    assert passes, "fails"
    return "passes"
  return conformance.Case(name, f"{name} behaves", run)


class UntestedCheckTest(absltest.TestCase):
  """`jax-patch check` past the tested range: never worse than upstream."""

  def setUp(self) -> None:
    super().setUp()
    self.enter_context(
        mock.patch.object(dlpack_compat, "IS_UNTESTED_JAXLIB", True))
    self.enter_context(mock.patch.object(install, "_warned_untested", False))
    self.addCleanup(jax_patch.uninstall)
    # The survey is the real one: the patch keeps its promises here.

  def _check(self, *cases: Any) -> tuple[int, list[str]]:
    output = io.StringIO()
    with mock.patch.object(conformance, "CASES", list(cases)), \
        contextlib.redirect_stdout(output), warnings.catch_warnings():
      warnings.simplefilter("ignore", install.UntestedJaxWarning)
      status = check.check()
    return status, output.getvalue().splitlines()

  def test_first_line_says_untested_within_the_width(self) -> None:
    _, lines = self._check(_case("a", True, True))
    self.assertTrue(lines[0].startswith(
        f"UNTESTED: JAX {jax.__version__}"), lines[0])
    width = max(60, shutil.get_terminal_size().columns - 1)
    self.assertLessEqual(max(map(len, lines[:4])), width)

  def test_a_case_upstream_fails_too_does_not_fail_the_check(self) -> None:
    status, lines = self._check(_case("a", True, True),
                                _case("both_fail", False, False))
    self.assertEqual(status, 0)
    self.assertIn("not yet better than upstream: both_fail", lines)
    self.assertIn("WORSE than upstream: none", lines)

  def test_a_case_worse_than_upstream_fails_the_check(self) -> None:
    status, lines = self._check(_case("a", True, True),
                                _case("regressed", True, False))
    self.assertEqual(status, 1)
    self.assertIn("WORSE than upstream: regressed", lines)

  def test_within_the_range_any_failure_fails_the_check(self) -> None:
    with mock.patch.object(dlpack_compat, "IS_UNTESTED_JAXLIB", False):
      status, lines = self._check(_case("both_fail", False, False))
    self.assertEqual(status, 1)
    self.assertFalse(lines[0].startswith("UNTESTED"))


if __name__ == "__main__":
  absltest.main()
