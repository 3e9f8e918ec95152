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

"""DLPack import and export, timed side by side: jax-patch, upstream JAX,
NumPy and torch.

Every case runs its implementations in one process, interleaved batch by
batch, and reports medians over the repetitions; the ratios are what the
speed targets are stated in.

  python benchmarks/dlpack_bench.py            # the table
  python benchmarks/dlpack_bench.py --quick    # under a minute
  python benchmarks/dlpack_bench.py --check    # exit 1 if a target is missed
  python benchmarks/dlpack_bench.py --json     # machine-readable
  python benchmarks/dlpack_bench.py --plot time_vs_size.png   # matplotlib
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import jax
import jax.numpy as jnp
import jax_patch
from jax_patch._src import conformance

_MB = 1 << 20

# (name, what is compared, target, lower is better)
TARGETS = {
    "zero_copy_small": ("patch / upstream time", 0.25, True),
    "jax_array": ("patch / upstream time", 0.05, True),
    "copy_unaligned_64MB": ("patch / np.copyto bandwidth", 0.6, False),
    "copy_unaligned_256MB": ("patch / np.copyto bandwidth", 0.6, False),
    "copy_true_64MB": ("patch / np.copyto bandwidth", 0.6, False),
    "copy_true_256MB": ("patch / np.copyto bandwidth", 0.6, False),
    "zero_copy_size_independence": ("patch 256 MB / 4 KB time", 1.5, True),
    "export_numpy": ("patch / upstream time", 1.0, True),
}


def _median_seconds(fns: dict[str, Callable[[], Any]], calls: int,
                    repeats: int) -> dict[str, float]:
  """Seconds per call, the median of ``repeats`` interleaved batches."""
  samples: dict[str, list[float]] = {name: [] for name in fns}
  for fn in fns.values():
    fn()  # Warm up: first-call set-up is not what we measure.
  for _ in range(repeats):
    for name, fn in fns.items():
      gc.collect()
      start = time.perf_counter()
      for _ in range(calls):
        fn()
      samples[name].append((time.perf_counter() - start) / calls)
  return {name: statistics.median(s) for name, s in samples.items()}


def _ready(x: Any) -> None:
  x.block_until_ready()


def _imports(source: Any, upstream: Callable[..., Any],
             copy: bool | None = None,
             wait: bool = False) -> dict[str, Callable[[], Any]]:
  """The patch and upstream importing ``source``; ``wait`` for the result."""
  kwargs = {} if copy is None else {"copy": copy}
  finish = _ready if wait else (lambda x: None)
  return {
      "patch": lambda: finish(jax_patch.from_dlpack(source, **kwargs)),
      "upstream": lambda: finish(upstream(source, **kwargs)),
  }


def run(quick: bool) -> list[dict[str, Any]]:
  upstream = jnp.from_dlpack
  repeats = 5 if quick else 9
  rows: list[dict[str, Any]] = []

  def add(case: str, seconds: dict[str, float], ratio: float,
          **extra: Any) -> None:
    what, target, lower = TARGETS[case]
    met = ratio <= target if lower else ratio >= target
    rows.append(dict(case=case, seconds=seconds, ratio=ratio, compares=what,
                     target=target, met=met, **extra))

  small = conformance.aligned_array((16,))
  fns = _imports(small, upstream)
  fns["np.from_dlpack"] = lambda: np.from_dlpack(small)
  try:
    import torch  # pylint: disable=g-import-not-at-top
    fns["torch.from_dlpack"] = lambda: torch.from_dlpack(small)
  except ImportError:
    pass
  t = _median_seconds(fns, 200 if quick else 1000, repeats)
  add("zero_copy_small", t, t["patch"] / t["upstream"])

  x = jnp.arange(16.0)
  t = _median_seconds(_imports(x, upstream), 200 if quick else 1000, repeats)
  add("jax_array", t, t["patch"] / t["upstream"])

  for mb in (64,) if quick else (64, 256):
    nbytes = mb * _MB
    for kind, copy in (("unaligned", None), ("true", True)):
      source = conformance.aligned_array(
          (nbytes // 4,), misalign_bytes=16 if kind == "unaligned" else 0)
      destination = np.empty_like(source)
      fns = _imports(source, upstream, copy, wait=True)
      fns["np.copyto"] = lambda s=source, d=destination: np.copyto(d, s)
      t = _median_seconds(fns, 1, 3 if quick else repeats)
      bandwidth = {k: nbytes / v / 1e9 for k, v in t.items()}
      add(f"copy_{kind}_{mb}MB", t, t["np.copyto"] / t["patch"],
          gb_per_s=bandwidth)
      del source, destination

  tiny = conformance.aligned_array((1024,))
  huge = conformance.aligned_array(((64 if quick else 256) * _MB // 4,))
  t = _median_seconds({"4KB": lambda: jax_patch.from_dlpack(tiny),
                       "large": lambda: jax_patch.from_dlpack(huge)},
                      200 if quick else 1000, repeats)
  add("zero_copy_size_independence", t, t["large"] / t["4KB"])
  del huge

  exported = jnp.arange(16.0)

  def export_patched() -> None:
    with jax_patch.patched():
      for _ in range(200 if quick else 1000):
        np.from_dlpack(exported)

  def export_upstream() -> None:
    for _ in range(200 if quick else 1000):
      np.from_dlpack(exported)

  t = _median_seconds({"patch": export_patched, "upstream": export_upstream},
                      1, repeats)
  t = {k: v / (200 if quick else 1000) for k, v in t.items()}
  add("export_numpy", t, t["patch"] / t["upstream"])
  return rows


def _format_seconds(seconds: float) -> str:
  if seconds < 1e-3:
    return f"{seconds * 1e6:.1f} us"
  return f"{seconds * 1e3:.1f} ms"


def print_table(rows: list[dict[str, Any]]) -> None:
  print(f"jax {jax.__version__}, numpy {np.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, medians")
  print(f"{'case':<30} {'timings':<66} {'ratio':>6}  {'target':<34} met")
  for row in rows:
    timings = ", ".join(f"{k} {_format_seconds(v)}"
                        for k, v in row["seconds"].items())
    if "gb_per_s" in row:
      timings = ", ".join(f"{k} {v:.1f} GB/s"
                          for k, v in row["gb_per_s"].items())
    sense = "<=" if TARGETS[row["case"]][2] else ">="
    print(f"{row['case']:<30} {timings:<66} {row['ratio']:>6.3f}  "
          f"{row['compares'] + ' ' + sense + ' ' + str(row['target']):<34} "
          f"{'yes' if row['met'] else 'NO'}")


def plot(path: str) -> None:
  """Time per call against size, zero-copy and copying, patch and upstream."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  sizes = [4 << 10, 256 << 10, 4 * _MB, 64 * _MB]
  series: dict[str, list[float]] = {}
  for nbytes in sizes:
    for misalign in (0, 16):
      source = conformance.aligned_array((nbytes // 4,),
                                         misalign_bytes=misalign)
      calls = max(1, min(200, (4 * _MB) // nbytes))
      t = _median_seconds(_imports(source, jnp.from_dlpack, wait=True),
                          calls, 5)
      for impl, seconds in t.items():
        label = f"{impl}, {'unaligned (copies)' if misalign else 'aligned'}"
        series.setdefault(label, []).append(seconds)
  figure, axes = plt.subplots()
  for label, seconds in series.items():
    axes.loglog(sizes, seconds, marker="o", label=label)
  axes.set_xlabel("array size (bytes)")
  axes.set_ylabel("seconds per from_dlpack call (median)")
  axes.legend()
  figure.savefig(path, dpi=120)


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true",
                      help="fewer repetitions and sizes: under a minute")
  parser.add_argument("--check", action="store_true",
                      help="exit 1 if a ratio misses its target")
  parser.add_argument("--json", action="store_true",
                      help="print the results as JSON")
  parser.add_argument("--plot", metavar="FILE.png",
                      help="also plot time against size (needs matplotlib)")
  args = parser.parse_args(argv)
  rows = run(args.quick)
  if args.json:
    print(json.dumps(rows, indent=2))
  else:
    print_table(rows)
  if args.plot:
    plot(args.plot)
  missed = [row["case"] for row in rows if not row["met"]]
  if args.check and missed:
    print(f"missed: {', '.join(missed)}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
