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

It runs in the x64 mode the environment gives (JAX_ENABLE_X64=1 for x64 on),
and says which in its header and in every JSON row (``"x64"``). The NumPy,
torch and copy cases import float32 in either mode; the jax.Array and export
cases time ``jnp.arange(16.0)``, which is float64 with x64 on.
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
from jax_patch._src import dlpack_compat
from jax_patch.testing import conformance
from jax_patch.testing import numpy_input

_MB = 1 << 20

_VERSIONED_FLOOR = dlpack_compat.JAXLIB_READS_VERSIONED_CAPSULES

# case: (what is compared, target, lower is better). The targets of
# jax-patch issue 15, each a ratio of medians measured side by side.
TARGETS: dict[str, tuple[str, float, bool]] = {
    "numpy_zero_copy_vs_upstream": ("patch / upstream time", 0.2, True),
    "numpy_zero_copy_vs_floor": ("patch / floor time", 1.6, True),
    "numpy_copy_false_vs_copy_none": ("copy=False / copy=None time", 1.1,
                                      True),
    "jax_array": ("patch / upstream time", 0.05, True),
    "export_numpy": ("patch / upstream time", 0.7, True),
    "export_torch": ("patch / upstream time", 0.7, True),
    "copy_unaligned_64MB": ("patch / (np.empty + np.copyto) bandwidth", 0.9,
                            False),
    "copy_unaligned_256MB": ("patch / (np.empty + np.copyto) bandwidth", 0.9,
                             False),
    "zero_copy_size_independence": ("patch 256 MB / 4 KB time", 1.5, True),
    # NumPy input as users make it (jax_patch.testing.numpy_input).
    "numpy_100MB_shared_vs_copied": ("aligned copy=False / typical time",
                                     0.01, True),
    "numpy_shared_fraction": ("aligning routes: shared / made", 1.0, False),
}
# 1.x capsules: against the floor where jaxlib reads them, else upstream
# (for read-only NumPy, which upstream before 0.11 cannot import, upstream
# importing a writable array of the same bytes).
for _case in ("numpy_read_only", "torch"):
  TARGETS[_case] = (("patch / floor time", 1.6, True) if _VERSIONED_FLOOR
                    else ("patch / upstream time", 0.55, True))
# On an accelerator (--accelerator), issue 46's targets: results ready, each
# against JAX's own way of doing the same move.
ACCELERATOR_SIZES = {"4KB": 4 << 10, "1MB": _MB, "64MB": 64 * _MB}
for _size in ACCELERATOR_SIZES:
  TARGETS[f"numpy_to_accelerator_{_size}"] = (
      "patch / device_put time", 1.1, True)
  TARGETS[f"accelerator_to_numpy_{_size}"] = (
      "np.from_dlpack(cpu) / np.asarray time", 1.1, True)


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


def _floor(capsule: Callable[[], Any]) -> Callable[[], Any]:
  """The bare jaxlib binding on the producer's own capsule: no front end."""
  cpu = jax.devices("cpu")[0]
  return lambda: dlpack_compat.import_capsule(capsule(), cpu, None, 1)


def _torch() -> Any:
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return torch


def run(quick: bool) -> list[dict[str, Any]]:
  upstream = jnp.from_dlpack
  repeats = 5 if quick else 9
  calls = 200 if quick else 1000
  rows: list[dict[str, Any]] = []
  torch = _torch()

  def add(case: str, seconds: dict[str, float], ratio: float,
          **extra: Any) -> None:
    what, target, lower = TARGETS[case]
    met = ratio <= target if lower else ratio >= target
    rows.append(dict(case=case, seconds=seconds, ratio=ratio, compares=what,
                     target=target, met=met, x64=_x64_mode(), **extra))

  small = conformance.aligned_array((16,))
  fns = {"patch": lambda: jax_patch.from_dlpack(small),
         "patch copy=False": lambda: jax_patch.from_dlpack(small, copy=False),
         "upstream": lambda: upstream(small),
         "floor": _floor(small.__dlpack__),
         "np.from_dlpack": lambda: np.from_dlpack(small)}
  if torch is not None:
    fns["torch.from_dlpack"] = lambda: torch.from_dlpack(small)
  t = _median_seconds(fns, calls, repeats)
  add("numpy_zero_copy_vs_upstream", t, t["patch"] / t["upstream"])
  add("numpy_zero_copy_vs_floor", t, t["patch"] / t["floor"])
  add("numpy_copy_false_vs_copy_none", t, t["patch copy=False"] / t["patch"])

  read_only = conformance.aligned_array((16,))
  read_only.flags.writeable = False
  fns = {"patch": lambda: jax_patch.from_dlpack(read_only),
         "upstream (writable twin)": lambda: upstream(small)}
  if _VERSIONED_FLOOR:
    fns["floor"] = _floor(lambda: read_only.__dlpack__(max_version=(1, 0)))
  t = _median_seconds(fns, calls, repeats)
  add("numpy_read_only", t,
      t["patch"] / (t["floor"] if _VERSIONED_FLOOR
                    else t["upstream (writable twin)"]))

  if torch is not None:
    tensor = torch.arange(16, dtype=torch.float32)
    fns = {"patch": lambda: jax_patch.from_dlpack(tensor),
           "upstream": lambda: upstream(tensor)}
    if _VERSIONED_FLOOR:
      fns["floor"] = _floor(lambda: tensor.__dlpack__(max_version=(1, 0)))
    t = _median_seconds(fns, calls, repeats)
    add("torch", t, t["patch"] / t["floor" if _VERSIONED_FLOOR
                                    else "upstream"])

  x = jnp.arange(16.0)
  t = _median_seconds({"patch": lambda: jax_patch.from_dlpack(x),
                       "upstream": lambda: upstream(x)}, calls, repeats)
  add("jax_array", t, t["patch"] / t["upstream"])

  _add_exports(add, quick, torch)
  _add_copies(add, quick)

  tiny = conformance.aligned_array((1024,))
  huge = conformance.aligned_array(((64 if quick else 256) * _MB // 4,))
  t = _median_seconds({"4KB": lambda: jax_patch.from_dlpack(tiny),
                       "large": lambda: jax_patch.from_dlpack(huge)},
                      calls, repeats)
  add("zero_copy_size_independence", t, t["large"] / t["4KB"])
  del tiny, huge
  _add_numpy_input(add, quick)
  return rows


def _add_exports(add: Callable[..., None], quick: bool, torch: Any) -> None:
  """``np.from_dlpack`` and ``torch.from_dlpack`` of a ``jax.Array``."""
  exported = jnp.arange(16.0)
  consumers = {"export_numpy": np.from_dlpack}
  if torch is not None:
    consumers["export_torch"] = torch.from_dlpack
  calls = 200 if quick else 1000
  for case, consume in consumers.items():

    def patched(consume: Callable[[Any], Any] = consume) -> None:
      with jax_patch.patched():
        for _ in range(calls):
          consume(exported)

    def upstream(consume: Callable[[Any], Any] = consume) -> None:
      for _ in range(calls):
        consume(exported)

    t = _median_seconds({"patch": patched, "upstream": upstream}, 1,
                        5 if quick else 9)
    t = {k: v / calls for k, v in t.items()}
    add(case, t, t["patch"] / t["upstream"])


def _add_copies(add: Callable[..., None], quick: bool) -> None:
  """Unaligned ``copy=True`` imports against NumPy copying the same bytes.

  Into fresh memory the kernel zeroes every page it faults in, which costs
  about as much as the copy: ``np.empty`` + ``np.copyto`` is the limit an
  import (whose result is fresh memory) can reach. ``np.copyto`` into memory
  already touched is reported beside it.
  """
  for mb in (64,) if quick else (64, 256):
    nbytes = mb * _MB
    source = conformance.aligned_array((nbytes // 4,), misalign_bytes=16)
    touched = np.empty_like(source)
    fns = {
        "patch": lambda s=source: _ready(jax_patch.from_dlpack(s, copy=True)),
        "upstream": lambda s=source: _ready(jnp.from_dlpack(s, copy=True)),
        "np.empty + np.copyto": lambda s=source: np.copyto(np.empty_like(s),
                                                           s),
        "np.copyto (touched)": lambda s=source, d=touched: np.copyto(d, s),
    }
    t = _median_seconds(fns, 1, 3 if quick else 9)
    bandwidth = {k: nbytes / v / 1e9 for k, v in t.items()}
    add(f"copy_unaligned_{mb}MB", t, t["np.empty + np.copyto"] / t["patch"],
        gb_per_s=bandwidth)
    del source, touched


def _add_numpy_input(add: Callable[..., None], quick: bool) -> None:
  """Typical NumPy input (default allocation) beside aligned input.

  A 100 MB ``np.arange`` is almost never 64-byte aligned (glibc maps it 16
  bytes past a page boundary), so ``copy=None`` copies it; the same array
  through ``aligned_copy`` shares. The fraction row counts the fresh arrays
  of each route (``numpy_input.routes``) that ``copy=False`` shares.
  """
  elements = 100 * _MB // 4
  typical = np.arange(elements, dtype=np.float32)
  if not typical.ctypes.data % 64:  # Seldom: then as glibc maps it.
    typical = conformance.aligned_array((elements,), misalign_bytes=16)
  aligned = jax_patch.aligned_copy(typical)
  repeats = 3 if quick else 9
  # Sharing costs microseconds: many calls per batch, as the other rows.
  t = _median_seconds({"aligned, copy=False": lambda: _ready(
      jax_patch.from_dlpack(aligned, copy=False))}, 200, repeats)
  t |= _median_seconds({"typical, copy=None": lambda: _ready(
      jax_patch.from_dlpack(typical))}, 1, repeats)
  add("numpy_100MB_shared_vs_copied", t,
      t["aligned, copy=False"] / t["typical, copy=None"])
  del typical, aligned
  rows = numpy_input.survey(jax_patch.from_dlpack, count=20 if quick else 50)
  fractions: dict[str, float] = {}
  for route in numpy_input.routes():
    mine = [row for row in rows if row.route == route]
    fractions[route] = (sum(row.shared for row in mine)
                        / sum(row.made for row in mine))
  aligning = [f for route, f in fractions.items()
              if route != numpy_input.DEFAULT_ROUTE]
  add("numpy_shared_fraction", {}, min(aligning), fractions=fractions,
      sizes=[row.elements * 4 for row in rows
             if row.route == numpy_input.DEFAULT_ROUTE])


def _fresh_median(make: Callable[[], Any],
                  fns: dict[str, Callable[[Any], Any]],
                  repeats: int) -> dict[str, float]:
  """Seconds per call on an input ``make`` gives anew for every call.

  For what caches its answer on the input (``np.asarray`` of a jax.Array
  keeps the host copy), interleaved, the median of ``repeats`` calls.
  """
  samples: dict[str, list[float]] = {name: [] for name in fns}
  for fn in fns.values():
    fn(make())  # Warm up.
  for _ in range(repeats):
    for name, fn in fns.items():
      x = make()
      gc.collect()
      start = time.perf_counter()
      fn(x)
      samples[name].append(time.perf_counter() - start)
  return {name: statistics.median(s) for name, s in samples.items()}


def _transfer_row(case: str, seconds: dict[str, float], against: str,
                  nbytes: int) -> dict[str, Any]:
  """A row for a transfer of ``nbytes``: the patch against ``against``."""
  what, target, _ = TARGETS[case]
  ratio = seconds["patch"] / seconds[against]
  return dict(case=case, seconds=seconds, ratio=ratio, compares=what,
              target=target, met=ratio <= target, x64=_x64_mode(),
              gb_per_s={k: nbytes / v / 1e9 for k, v in seconds.items()})


def run_accelerator(quick: bool, accelerator: Any) -> list[dict[str, Any]]:
  """Moves between the host and ``accelerator``.

  NumPy input as users make it (``np.arange``: not 64-byte aligned) and
  aligned; every result ready (``block_until_ready``) before the clock
  stops; GB/s beside each size.
  """
  upstream = jnp.from_dlpack
  repeats = 7 if quick else 21
  rows: list[dict[str, Any]] = []
  for size, nbytes in ACCELERATOR_SIZES.items():
    typical = np.arange(nbytes // 4, dtype=np.float32)
    aligned = conformance.aligned_array((nbytes // 4,))
    calls = max(1, min(100, (4 * _MB) // nbytes))
    t = _median_seconds({
        "patch": lambda: _ready(jax_patch.from_dlpack(
            typical, device=accelerator)),
        "device_put": lambda: _ready(jax.device_put(typical, accelerator)),
        "upstream": lambda: _ready(upstream(typical, device=accelerator)),
        "patch, aligned": lambda: _ready(jax_patch.from_dlpack(
            aligned, device=accelerator)),
        "device_put, aligned": lambda: _ready(
            jax.device_put(aligned, accelerator)),
    }, calls, repeats)
    rows.append(_transfer_row(f"numpy_to_accelerator_{size}", t,
                              "device_put", nbytes))

    def fresh(n: int = nbytes) -> Any:
      return jax.device_put(np.ones(n // 4, np.float32),
                            accelerator).block_until_ready()
    t = _fresh_median(fresh, {
        "patch": lambda x: np.from_dlpack(x, device="cpu"),
        "np.asarray": np.asarray,
    }, repeats)
    rows.append(_transfer_row(f"accelerator_to_numpy_{size}", t,
                              "np.asarray", nbytes))
  return rows


def _x64_mode() -> str:
  """``"on"`` or ``"off"``: whether JAX keeps 64-bit types in this run."""
  return "on" if conformance.x64_enabled() else "off"


def _format_seconds(seconds: float) -> str:
  if seconds < 1e-3:
    return f"{seconds * 1e6:.1f} us"
  return f"{seconds * 1e3:.1f} ms"


def print_table(rows: list[dict[str, Any]]) -> None:
  print(f"jax {jax.__version__}, numpy {np.__version__}, x64 {_x64_mode()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, medians")
  print(f"{'case':<30} {'timings':<66} {'ratio':>6}  {'target':<34} met")
  for row in rows:
    timings = ", ".join(f"{k} {_format_seconds(v)}"
                        for k, v in row["seconds"].items())
    if "gb_per_s" in row and row["case"].startswith(("numpy_to_acc",
                                                     "accelerator_to")):
      timings = ", ".join(f"{k} {_format_seconds(row['seconds'][k])} "
                          f"({v:.2f} GB/s)"
                          for k, v in row["gb_per_s"].items())
    elif "gb_per_s" in row:
      timings = ", ".join(f"{k} {v:.1f} GB/s"
                          for k, v in row["gb_per_s"].items())
    if "fractions" in row:
      timings = ", ".join(f"{k} {v:.0%}" for k, v in row["fractions"].items())
    sense = "<=" if TARGETS[row["case"]][2] else ">="
    print(f"{row['case']:<30} {timings:<66} {row['ratio']:>6.3f}  "
          f"{row['compares'] + ' ' + sense + ' ' + str(row['target']):<34} "
          f"{'yes' if row['met'] else 'NO'}")


def plot(path: str) -> None:
  """Time per import against size: the patch, upstream, the floor and peers.

  Aligned (zero-copy) and unaligned (the patch and upstream copy) NumPy
  input; the floor is the bare jaxlib binding on NumPy's own capsule.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  torch = _torch()
  sizes = [64, 4 << 10, 256 << 10, 4 * _MB, 64 * _MB]
  series: dict[str, list[float]] = {}
  for nbytes in sizes:
    aligned = conformance.aligned_array((nbytes // 4,))
    unaligned = conformance.aligned_array((nbytes // 4,), misalign_bytes=16)
    sharing = {
        "patch, aligned": lambda a=aligned: _ready(jax_patch.from_dlpack(a)),
        "upstream, aligned": lambda a=aligned: _ready(jnp.from_dlpack(a)),
        "floor (bare binding), aligned": _floor(aligned.__dlpack__),
        "np.from_dlpack": lambda a=aligned: np.from_dlpack(a),
    }
    if torch is not None:
      sharing["torch.from_dlpack"] = lambda a=aligned: torch.from_dlpack(a)
    copying = {
        "patch, unaligned (copies)":
            lambda u=unaligned: _ready(jax_patch.from_dlpack(u)),
        "upstream, unaligned (copies)":
            lambda u=unaligned: _ready(jnp.from_dlpack(u)),
    }
    # Sharing costs the same at any size; a copy's calls are fewer as it
    # grows, so that each size takes about as long.
    timed = {**_median_seconds(sharing, 200, 5),
             **_median_seconds(copying, max(1, min(200, (4 * _MB) // nbytes)),
                               5)}
    for label, seconds in timed.items():
      series.setdefault(label, []).append(seconds)
  figure, axes = plt.subplots(figsize=(8, 5))
  for label, seconds in series.items():
    axes.loglog(sizes, seconds, marker="o", label=label)
  axes.set_xlabel("array size (bytes)")
  axes.set_ylabel("seconds per from_dlpack call (median)")
  axes.set_title(f"jax {jax.__version__}, numpy {np.__version__}, "
                 f"{os.cpu_count()} CPUs")
  axes.legend(fontsize="small")
  figure.tight_layout()
  figure.savefig(path, dpi=110)


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true",
                      help="fewer repetitions and sizes: under a minute")
  parser.add_argument("--check", action="store_true",
                      help="exit 1 if a ratio misses its target")
  parser.add_argument("--json", action="store_true",
                      help="print the results as JSON")
  parser.add_argument("--accelerator", action="store_true",
                      help="time moves between the host and JAX's default "
                      "device, an accelerator, instead (with jax_patch "
                      "installed: np.from_dlpack runs the patch's export)")
  parser.add_argument("--plot", metavar="FILE.png",
                      help="also plot time against size (needs matplotlib)")
  args = parser.parse_args(argv)
  if args.accelerator:
    accelerator = jax.devices()[0]
    if accelerator.platform == "cpu":
      parser.error("--accelerator: JAX's default device here is the CPU")
    jax_patch.install()
    rows = run_accelerator(args.quick, accelerator)
  else:
    with jax.default_device(jax.devices("cpu")[0]):
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
