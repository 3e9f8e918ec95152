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

"""Runs the vendored conformance cases in a vendored JAX tree.

``jax-patch vendor`` with no ``--into`` starts this in a subprocess whose
``sys.path`` begins with the scratch tree, so ``import jax`` finds the
vendored copy. Nothing is installed: the cases run against the tree's own
``jax.numpy.from_dlpack`` and ``jax.Array.__dlpack__``. The tree is an
installed JAX's, with no ``tests/`` for the cases to lie beside: they are
loaded here as vendoring writes them into a checkout's ``tests/``, importing
the tree's ``jax._src`` modules.

Usage: python -m jax_patch._delivery.vendor_dry_run TREE
"""

import os
import pathlib
import sys
import types

os.environ.setdefault("XLA_FLAGS",
                      "--xla_force_host_platform_device_count=4")


def _vendored_cases() -> types.ModuleType:
  """The conformance catalogue, as vendoring writes it beside JAX's tests."""
  from jax_patch._delivery import vendor  # pylint: disable=g-import-not-at-top
  theirs = vendor.VENDORED_TEST_MODULES["conformance.py"]
  name = theirs.removesuffix(".py")
  module = types.ModuleType(name)
  sys.modules[name] = module  # Where its dataclasses look it up.
  code = compile(vendor.vendored_test_module("conformance.py"), theirs,
                 "exec")
  exec(code, module.__dict__)  # pylint: disable=exec-used
  return module


def main(argv: list[str]) -> int:
  tree = pathlib.Path(argv[1]).resolve()
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if tree not in pathlib.Path(jax.__file__).resolve().parents:
    print(f"jax came from {jax.__file__}, not from {tree}")
    return 1
  conformance = _vendored_cases()
  runtime = pathlib.Path(conformance.dlpack_capsule.__file__).resolve()
  if tree not in runtime.parents:
    print(f"the cases imported {runtime}, not the vendored copy in {tree}")
    return 1
  print(f"vendored jax {jax.__version__} at {tree / 'jax'}, "
        f"{conformance.x64_mode()}")
  counts = {True: 0, False: 0, None: 0}
  for case in conformance.CASES:
    outcome, passed = conformance.run_case(case, jnp.from_dlpack)
    counts[passed] += 1
    mark = {True: "ok", False: "FAIL", None: "skip"}[passed]
    print(f"  {mark:<4}  {case.behaviour}"
          + ("" if passed else f": {outcome}"))
  print(f"vendored: {counts[True]} passed, {counts[False]} failed, "
        f"{counts[None]} skipped")
  return 1 if counts[False] else 0


if __name__ == "__main__":
  try:
    sys.exit(main(sys.argv))
  except KeyboardInterrupt:
    # Ctrl-C reaches `jax-patch vendor`, this process's parent, too: it says
    # so, in one line.
    sys.exit(130)
