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

"""The ``jax-patch`` command line."""

from __future__ import annotations

import argparse
import os
import sys
import unittest
from collections.abc import Sequence

_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def _ensure_cpu_devices(count: int) -> None:
  # Read when JAX first creates its CPU backend, which has not happened yet.
  flags = os.environ.get("XLA_FLAGS", "")
  if _DEVICE_COUNT_FLAG not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_COUNT_FLAG}={count}".strip()


def _outcome(run: object, from_dlpack: object) -> tuple[str, bool | None]:
  """Runs one case: returns (what it saw, passed), passed None if skipped."""
  try:
    return run(from_dlpack), True  # type: ignore[operator]
  except unittest.SkipTest as skip:
    return f"skipped: {skip}", None
  except AssertionError as err:
    return f"FAIL: {err}", False
  except Exception as err:  # pylint: disable=broad-except
    return f"FAIL: {type(err).__name__}: {err}", False


def _shorten(text: str, width: int) -> str:
  text = " ".join(text.split())
  return text if len(text) <= width else text[:width - 3] + "..."


def check(width: int = 44) -> int:
  """Runs every conformance case against upstream JAX and the patch.

  Returns:
    0 when every case passes (or is skipped) for the patch, 1 otherwise.
  """
  _ensure_cpu_devices(4)
  import jax
  import jax.numpy as jnp
  import jax_patch
  from jax_patch._src import conformance

  if jax_patch.is_installed():
    jax_patch.uninstall()
  upstream = jnp.from_dlpack
  print(f"jax {jax.__version__}, {len(jax.devices('cpu'))} CPU devices; "
        f"{len(conformance.CASES)} cases")
  header = f"{'case':<{width}}  {'upstream jax':<{width}}  patched"
  print(header)
  print("-" * len(header))
  counts = {True: 0, False: 0, None: 0}
  for case in conformance.CASES:
    before, _ = _outcome(case.run, upstream)
    after, passed = _outcome(case.run, jax_patch.from_dlpack)
    counts[passed] += 1
    before_text = "ok" if not before.startswith(("FAIL", "skipped")) else before
    after_text = "ok" if passed else after
    print(f"{_shorten(case.behaviour, width):<{width}}  "
          f"{_shorten(before_text, width):<{width}}  "
          f"{_shorten(after_text, 2 * width)}")
  print(f"patched: {counts[True]} passed, {counts[False]} failed, "
        f"{counts[None]} skipped")
  return 1 if counts[False] else 0


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      prog="jax-patch",
      description="Array API standard DLPack for JAX.")
  commands = parser.add_subparsers(dest="command", required=True)
  commands.add_parser(
      "check", help="run the conformance cases against upstream JAX and the "
      "patch, side by side")
  args = parser.parse_args(argv)
  if args.command == "check":
    return check()
  parser.error(f"unknown command {args.command}")
  return 2


if __name__ == "__main__":
  sys.exit(main())
