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

"""The public ``from_dlpack`` signatures, as ``inspect``, ``help()`` and the
docs read them.

The Array API standard spells it ``from_dlpack(x, /, *, device=None,
copy=None)``: ``jax_patch.from_dlpack``, ``jax_patch.numpy.from_dlpack`` and
the ``jax.numpy.from_dlpack`` that ``install()`` sets are exactly that.
``jax.dlpack.from_dlpack`` is JAX's own older spelling, with ``device`` and
``copy`` positional too; ``jax_patch.dlpack.from_dlpack`` (which
``install()`` sets there) keeps upstream's signature, so no call to it
breaks, and takes every call the standard's spelling takes.
"""

import ast
import inspect
import pathlib
from typing import Any, Callable

from absl.testing import absltest
from absl.testing import parameterized
import jax.dlpack
import jax.numpy as jnp
import numpy as np

import jax_patch
import jax_patch.dlpack
import jax_patch.numpy
from jax_patch._src import dlpack

_P = inspect.Parameter
STANDARD = inspect.Signature([
    _P("x", _P.POSITIONAL_ONLY),
    _P("device", _P.KEYWORD_ONLY, default=None),
    _P("copy", _P.KEYWORD_ONLY, default=None),
])
# What the standard's signature accepts: x alone, and each keyword.
STANDARD_CALLS: tuple[tuple[tuple[Any, ...], dict[str, Any]], ...] = (
    ((object(),), {}),
    ((object(),), {"device": None}),
    ((object(),), {"copy": False}),
    ((object(),), {"device": None, "copy": True}))

Shape = list[tuple[str, Any, Any]]


def shape(signature: inspect.Signature) -> Shape:
  """Each parameter's name, kind and default: what callers and ``help()``
  see of a signature, annotations aside (the standard states none)."""
  return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def shape_of(function: Callable[..., Any]) -> Shape:
  return shape(inspect.signature(function))


def _installed(read: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
  with jax_patch.patched():
    return read()


class StandardSignatureTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("jax_patch", lambda: jax_patch.from_dlpack),
      ("jax_patch_numpy", lambda: jax_patch.numpy.from_dlpack),
      ("installed_jnp", lambda: _installed(lambda: jnp.from_dlpack)),
  )
  def test_is_the_standards(self, read: Callable[[],
                                                 Callable[..., Any]]) -> None:
    self.assertEqual(shape_of(read()), shape(STANDARD))

  @parameterized.named_parameters(
      ("jax_patch", lambda: jax_patch.from_dlpack),
      ("jax_patch_numpy", lambda: jax_patch.numpy.from_dlpack),
  )
  def test_is_ours_not_upstreams(
      self, read: Callable[[], Callable[..., Any]]) -> None:
    # Upstream's has the same signature: only what it does tells them apart.
    function = read()
    self.assertIs(function, dlpack.array_api_from_dlpack)
    with self.assertRaises(jax_patch.CopyRequiredError):
      function(np.arange(8.0)[::2], copy=False)

  def test_installed_jnp_is_ours(self) -> None:
    # The case above reads what install() sets, not upstream's own.
    self.assertIs(_installed(lambda: jnp.from_dlpack), jax_patch.from_dlpack)


class JaxDlpackSignatureTest(parameterized.TestCase):

  def setUp(self) -> None:
    super().setUp()
    jax_patch.uninstall()
    self.upstream = jax.dlpack.from_dlpack

  @parameterized.named_parameters(
      ("jax_patch_dlpack", lambda: jax_patch.dlpack.from_dlpack),
      ("installed_jax_dlpack", lambda: _installed(
          lambda: jax.dlpack.from_dlpack)),
  )
  def test_is_upstreams(self, read: Callable[[], Callable[..., Any]]) -> None:
    function = read()
    self.assertIsNot(function, self.upstream)
    self.assertEqual(shape_of(function), shape_of(self.upstream))

  @parameterized.named_parameters(
      ("jax_patch_dlpack", lambda: jax_patch.dlpack.from_dlpack),
      ("installed_jax_dlpack", lambda: _installed(
          lambda: jax.dlpack.from_dlpack)),
  )
  def test_takes_every_call_the_standards_takes(
      self, read: Callable[[], Callable[..., Any]]) -> None:
    signature = inspect.signature(read())
    for args, kwargs in STANDARD_CALLS:
      STANDARD.bind(*args, **kwargs)
      bound = signature.bind(*args, **kwargs)
      self.assertEqual(
          {name: bound.arguments.get(name) for name in ("device", "copy")},
          {name: kwargs.get(name) for name in ("device", "copy")})



def _declared_parameters() -> list[tuple[str, str, bool]]:
  """(name, kind, has a default) of the declaration type checkers read."""
  source = pathlib.Path(inspect.getfile(jax_patch.numpy)).parents[1] / (
      "_src/numpy/lax_numpy.py")
  declared = next(node for node in ast.walk(ast.parse(source.read_text()))
                  if isinstance(node, ast.FunctionDef)
                  and node.name == "from_dlpack")
  args = declared.args
  kinds = ([(a.arg, "POSITIONAL_ONLY", False) for a in args.posonlyargs]
           + [(a.arg, "POSITIONAL_OR_KEYWORD", False) for a in args.args]
           + [(a.arg, "KEYWORD_ONLY", d is not None)
              for a, d in zip(args.kwonlyargs, args.kw_defaults)])
  return kinds


class PublicNameTest(absltest.TestCase):
  """Users call it ``from_dlpack``; so do its errors and type checkers."""

  def test_argument_errors_name_from_dlpack(self) -> None:
    from_dlpack: Any = jax_patch.from_dlpack  # A wrong call, on purpose.
    with self.assertRaisesRegex(
        TypeError, r"^from_dlpack\(\) takes 1 positional argument"):
      from_dlpack(np.arange(4.0), None)

  def test_function_is_named_from_dlpack(self) -> None:
    self.assertEqual(jax_patch.from_dlpack.__name__, "from_dlpack")
    self.assertEqual(jax_patch.from_dlpack.__qualname__, "from_dlpack")

  def test_declaration_for_type_checkers_matches_the_function(self) -> None:
    runtime = [(p.name, p.kind.name, p.default is not p.empty)
               for p in inspect.signature(jax_patch.from_dlpack).parameters
               .values()]
    self.assertEqual(_declared_parameters(), runtime)


if __name__ == "__main__":
  absltest.main()
