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

"""Named mutations of the promise-keeping and memory-safety code.

  python tools/mutation_check.py [--fast] [--only NAME ...] [--list]
                                 [--jobs N]

Each mutation breaks one behaviour of ``jax_patch/_src/dlpack.py``,
``dlpack_export.py``, ``dlpack_request.py``, ``dlpack_plan.py``,
``dlpack_capsule.py``, ``dlpack_device.py`` or the public layer
(``jax_patch/numpy``) in a copy of the tree, by
replacing a text that must occur exactly once there, and runs the tests
named as the ones that must catch it; they must fail (a crash counts). A
mutation whose text is gone fails the check too, so the list follows the
code. ``--fast`` runs the mutations ``.ci/run`` keeps from reopening: the
gaps that issues 25, 30 and 36 found. The last line is ``mutations: N killed,
N survived``; the exit status is non-zero unless every one was killed.

The tests run against the mutated copy (first on ``sys.path``), with this
interpreter and its environment, ``JAX_ENABLE_X64`` included.
"""

from __future__ import annotations

import argparse
from concurrent import futures
import dataclasses
import os
import pathlib
import queue
import shutil
import subprocess
import sys
import tempfile
import time

_ROOT = pathlib.Path(__file__).absolute().parents[1]
_DLPACK = "jax_patch/_src/dlpack.py"
_EXPORT = "jax_patch/_src/dlpack_export.py"
_CAPSULE = "jax_patch/_src/dlpack_capsule.py"
_DEVICE = "jax_patch/_src/dlpack_device.py"
_PLAN = "jax_patch/_src/dlpack_plan.py"
_REQUEST = "jax_patch/_src/dlpack_request.py"
_ALIGNMENT = "jax_patch/_src/numpy_alignment.py"
_ALIGNMENT_TEST = "tests/numpy_alignment_test.py"
_IMPORT_TEST = "tests/dlpack_import_test.py"
_CAPSULE_TEST = "tests/dlpack_capsule_test.py"
_EXPORT_TEST = "tests/dlpack_export_test.py"
_EXPORT_DEVICE_TEST = "tests/dlpack_export_device_test.py"
_RELIABILITY_TEST = "tests/reliability_test.py"
_CONFORMANCE_TEST = "tests/conformance_test.py::ConformanceTest"


@dataclasses.dataclass(frozen=True)
class Mutation:
  """One break, and the tests that must catch it.

  Attributes:
    name: what breaks.
    path: the file it edits.
    old: a text that occurs exactly once in ``path``.
    new: what replaces it.
    tests: pytest node ids.
    keyword: where given, only the tests it selects (pytest's ``-k``); the
      unmutated run before the mutations runs all of ``tests``.
    fast: one of the gaps ``.ci/run`` keeps closed.
  """
  name: str
  path: str
  old: str
  new: str
  tests: tuple[str, ...]
  fast: bool = False
  keyword: str | None = None


MUTATIONS = (
    # Issue 39: aligned_allocation's C-library calls.
    Mutation(
        "aligned_calloc_leaves_memory_dirty", _ALIGNMENT,
        "    _libc().memset(address, 0, count * itemsize)", "    pass",
        (f"{_ALIGNMENT_TEST}::AlignedAllocationTest",), fast=True,
        keyword="zeros_are_zero"),
    Mutation(
        "aligned_realloc_keeps_what_realloc_gives", _ALIGNMENT,
        "  if moved is None or not moved % ALIGNMENT:", "  if True:",
        (f"{_ALIGNMENT_TEST}::AlignedAllocationTest",), fast=True,
        keyword="resize"),
    # Issue 25: the use-after-free of a NULL-deleter producer's structure.
    Mutation(
        "null_deleter_structure_read_after_return", _CAPSULE,
        "      return _self_contained_structure(tensor, info, keep_alive), info",
        "      return _new_structure(_LEGACY_SIZE, _after(tensor), own,\n"
        "                            versioned=False), info",
        ("tests/lifetime_test.py::ProducerStructureLifetimeTest",), fast=True),
    Mutation(
        "null_deleter_import_holds_nothing", _DLPACK,
        "fresh=fresh, keep_alive=producer)", "fresh=fresh, keep_alive=None)",
        ("tests/lifetime_test.py::NullDeleterOwnerTest",)),
    # Issue 30's eight gaps.
    Mutation(
        "jax_array_ignores_device", _DLPACK,
        "  return _finished(dlpack_device.place_in_format(imported, layout, "
        "target))",
        "  return imported",
        (f"{_IMPORT_TEST}::JaxArrayInputTest",), fast=True),
    Mutation(
        "jax_array_copy_true_not_copied_before_placing", _DLPACK,
        "  if decision is _COPY:\n    return _array_copy(x)\n  return x",
        "  return x",
        (f"{_IMPORT_TEST}::JaxArrayInputTest",), fast=True),
    Mutation(
        "stride_overflow_ignores_the_sign", _CAPSULE,
        "if any(abs(stride) * dtype.itemsize > _INT64_MAX for stride in strides)",
        "if any(stride * dtype.itemsize > _INT64_MAX for stride in strides)",
        (f"{_RELIABILITY_TEST}::HostileProducerTest",), fast=True),
    Mutation(
        "device_import_raises", _DLPACK,
        "  capsule, info, canonical, dl_device_type, stream, narrowing, layout "
        "= held\n",
        "  raise NotImplementedError\n",
        (f"{_IMPORT_TEST}::ImportDeviceTest",), fast=True),
    Mutation(
        "foreign_platform_copies_under_copy_false", _DLPACK,
        "  return (_import_foreign, dlpack_device.host_device(), obstacle, "
        "False,",
        "  return (_import_foreign, dlpack_device.host_device(), None, False,",
        (f"{_IMPORT_TEST}::ProducerRequestTest",), fast=True),
    Mutation(
        "copy_false_not_asked_of_the_producer", _DLPACK,
        "  if copy is False or (dl_device is not None and copy is not None):",
        "  if dl_device is not None and copy is not None:",
        (f"{_IMPORT_TEST}::ProducerRequestTest",), fast=True),
    Mutation(
        "claim_lock_not_renewed_after_fork", _CAPSULE,
        "os.register_at_fork(after_in_child=_renew_lock_after_fork)",
        "del _renew_lock_after_fork",
        (f"{_RELIABILITY_TEST}::ProcessTest",), fast=True),
    Mutation(
        "inspect_reissues_without_consuming", _CAPSULE,
        "    _capsule_set_name(capsule, _USED_VERSIONED_NAME_PTR)\n"
        "    _reissue(address, True)",
        "    _reissue(address, True)",
        (f"{_CAPSULE_TEST}::DeleterTest",), fast=True),
    # The promises of the standard.
    Mutation(
        "copy_true_may_alias", _PLAN,
        "  if obstacle is not None or (copy and not producer_copied):",
        "  if obstacle is not None:",
        (_CONFORMANCE_TEST,)),
    Mutation(
        "copy_false_copies_despite_an_obstacle", _PLAN,
        "    if obstacle is not None:\n      raise",
        "    if False:\n      raise",
        (_CONFORMANCE_TEST,)),
    Mutation(
        "copy_false_accepts_a_producer_copy", _PLAN,
        "    if producer_copied:\n      raise",
        "    if False:\n      raise",
        (f"{_CAPSULE_TEST}::DeleterTest",)),
    Mutation(
        "copy_false_keeps_what_jaxlib_copied", _PLAN,
        "  if decision is SHARE:\n    raise", "  if False:\n    raise",
        (f"{_IMPORT_TEST}::JaxlibRefusalTest",), fast=True),
    Mutation(
        "copy_false_moves_to_another_device", _PLAN,
        "    if not dlpack_device.stays(target, source):",
        "    if False:",
        (_CONFORMANCE_TEST,)),
    Mutation(
        "imports_inside_a_transformation", _DLPACK,
        "  if not dlpack_compat.trace_state_clean():\n"
        "    raise dlpack_request.transformation_error()",
        "  pass",
        (_CONFORMANCE_TEST,)),
    Mutation(
        "returns_before_the_copy_finished", _DLPACK,
        "  return copied.block_until_ready()", "  return copied",
        (f"{_IMPORT_TEST}::SnapshotTest",)),
    Mutation(
        "host_device_kept_past_cleared_backends", _DEVICE,
        "  if backends is _device_cache_backends[0]:",
        "  if True:",
        (f"{_IMPORT_TEST}::NumpyFastPathTest",)),
    Mutation(
        "device_asked_is_ignored", _DEVICE,
        "  return target is None or devices_of(target) == {device}",
        "  return True",
        (_CONFORMANCE_TEST,)),
    Mutation(
        "cpu_export_loses_its_device_id", _DEVICE,
        "                                     device.local_hardware_id or 0)",
        "                                     0)",
        (_CONFORMANCE_TEST,)),
    # Reading a producer's structures.
    Mutation(
        "claims_without_the_lock", _CAPSULE,
        "  with _claim_lock:\n    versioned, name, used_name = _names(capsule)",
        "  if True:\n    versioned, name, used_name = _names(capsule)",
        (f"{_CAPSULE_TEST}::SharedCapsuleTest",)),
    Mutation(
        "unknown_major_version_imported", _CAPSULE,
        "    if versioned and version[0] != MAX_VERSION[0]:\n"
        "      raise _version_error(*version)",
        "    pass",
        (f"{_CAPSULE_TEST}::DeleterTest",)),
    Mutation(
        "ndim_unbounded", _CAPSULE,
        "  if not 0 <= ndim <= _MAX_NDIM:", "  if not 0 <= ndim:",
        (f"{_RELIABILITY_TEST}::HostileProducerTest",)),
    Mutation(
        "span_unchecked", _CAPSULE,
        "  low, count = element_span(shape, strides)\n  if not count:\n"
        "    return  # No element, no memory.",
        "  return",
        (f"{_RELIABILITY_TEST}::HostileProducerTest",)),
    Mutation(
        "byte_offset_may_wrap", _CAPSULE,
        "  if address > _ADDRESS_MAX:", "  if False:",
        (f"{_RELIABILITY_TEST}::HostileProducerTest",)),
    Mutation(
        "capsule_device_unchecked", _DLPACK,
        "  if info.device[0] != dl_device_type:", "  if False:",
        (f"{_RELIABILITY_TEST}::HostileProducerTest",)),
    Mutation(
        "pinned_host_capsule_refused", _DLPACK,
        "    if not _is_pinned_host_as_cpu(info.device[0], dl_device_type):",
        "    if True:",
        (f"{_IMPORT_TEST}::PinnedHostTest",)),
    Mutation(
        "export_alias_not_read_only", _EXPORT,
        "  flags = (dlpack_capsule.FLAG_IS_COPIED if copied\n"
        "           else dlpack_capsule.FLAG_READ_ONLY)",
        "  flags = dlpack_capsule.FLAG_IS_COPIED if copied else 0",
        ("tests/dlpack_export_test.py",)),
    # Issue 36: eight breaks a review made that no test caught.
    Mutation(
        "is_copied_missed_beside_other_flags", _CAPSULE,
        "    return bool(self.flags & FLAG_IS_COPIED)",
        "    return self.flags == FLAG_IS_COPIED",
        (f"{_CAPSULE_TEST}::DeleterTest",), keyword="is_copied", fast=True),
    Mutation(
        "export_stamped_with_the_requested_version", _EXPORT,
        "      capsule, min(requested, dlpack_capsule.MAX_VERSION), flags)",
        "      capsule, requested, flags)",
        (f"{_EXPORT_TEST}::MaxVersionNegotiationTest",), fast=True),
    Mutation(
        "cpu_export_takes_any_stream", _DEVICE,
        "  if stream is None or stream == -1:",
        "  if stream is None or stream == -1 or dl_type == KDL_CPU:",
        (f"{_EXPORT_TEST}::CpuStreamTest",), fast=True),
    Mutation(
        "device_in_the_sharding_counts_as_placed", _DEVICE,
        "  return set(array.sharding.device_set) == {target}",
        "  return target in array.sharding.device_set",
        (f"{_IMPORT_TEST}::JaxArrayInputTest",), fast=True),
    Mutation(
        "copy_takes_ints", _REQUEST,
        "  if copy is None or isinstance(copy, bool):",
        "  if copy is None or isinstance(copy, int):",
        (f"{_IMPORT_TEST}::CopyArgumentTest",), fast=True),
    Mutation(
        "jax_patch_numpy_from_dlpack_is_upstreams",
        "jax_patch/numpy/__init__.py",
        "from jax_patch._src.numpy.lax_numpy import from_dlpack as from_dlpack",
        "from jax.numpy import from_dlpack as from_dlpack",
        ("tests/signature_test.py::StandardSignatureTest",), fast=True),
    Mutation(
        "one_device_named_sharding_read_as_single_device", _DEVICE,
        "  if type(sharding) is SingleDeviceSharding:  # pylint: "
        "disable=unidiomatic-typecheck",
        "  if isinstance(sharding, Sharding):",
        (f"{_EXPORT_TEST}::OneDeviceNamedShardingExportTest",), fast=True),
    Mutation(
        "is_supported_dtype_compares_spellings", _DLPACK,
        "  return np.dtype(dtype) in SUPPORTED_DTYPES_SET",
        "  return dtype in SUPPORTED_DTYPES",
        ("tests/dlpack_dropin_test.py::DropInTest",),
        keyword="is_supported_dtype",
        fast=True),
    # Issue 36's exports DLPack cannot carry: jaxlib's own error, not ours.
    Mutation(
        "unexportable_dtype_reaches_jaxlib", _EXPORT,
        "  code = dlpack_capsule.buffer_type_code(dtype)\n",
        "  code = dlpack_capsule.dl_type_code(dtype) or 0\n",
        ("tests/dlpack_export_dtypes_test.py::ExportDTypesTest",),
        keyword="sub_byte_integer", fast=True),
    # Issue 45: three behaviours no test pinned.
    Mutation(
        "unexportable_dtype_loses_its_hint", _EXPORT,
        'f"for it that JAX exports{_conversion_hint(dtype)}.")',
        'f"for it that JAX exports.")',
        (f"{_EXPORT_DEVICE_TEST}::UnexportableDTypeTest",), fast=True),
    Mutation(
        "cpu_dl_device_id_moves_the_export", _EXPORT,
        '  if requested[0] == _KDL_CPU and src_device.platform == "cpu":',
        "  if requested == dlpack_device.host_dl_device(src_device):",
        (f"{_EXPORT_DEVICE_TEST}::CpuDeviceIdTest",), fast=True),
    Mutation(
        "series_exit_ignores_failed_checks", "jax_patch/_delivery/series.py",
        "  failed = sum(not each.ok for each in checks)\n",
        "  failed = 0\n",
        ("tests/series_test.py::SummaryTest",), fast=True),
    # Issue 46: memory DLPack cannot name, and streams by device type.
    Mutation(
        "unnameable_memory_reaches_jaxlib", _EXPORT,
        "  code = dlpack_device.dl_device_type_of(device, memory_kind)\n"
        "  if code is None:",
        "  code = dlpack_device.dl_device_type_of(device, memory_kind)\n"
        "  if False:",
        (f"{_EXPORT_DEVICE_TEST}::UnnameableMemoryExportTest",), fast=True),
    Mutation(
        "moved_import_returns_before_the_transfer_finishes", _DLPACK,
        "  return copied.block_until_ready()", "  return copied",
        ("tests/dlpack_tear_test.py::NoTornImportTest",), fast=True,
        keyword="copy_none"),
    Mutation(
        "host_copy_export_shares_the_cached_host_value", _EXPORT,
        "  host = np.array(x)  # One transfer", "  host = np.asarray(x)  # One transfer",
        (f"{_EXPORT_DEVICE_TEST}::HostCopyExportTest",), fast=True),
    Mutation(
        "misaligned_device_data_aliased", _DLPACK,
        "  if not info.address % alignment or not math.prod(info.shape):",
        "  if True:",
        (f"{_IMPORT_TEST}::MisalignedDeviceDataTest",), fast=True),
    Mutation(
        "device_span_starts_off_the_boundary", _CAPSULE,
        "  if count:  # A zero-size tensor spans nothing to read, aligned or not.",
        "  if False:",
        (f"{_IMPORT_TEST}::MisalignedDeviceDataTest",), fast=True),
    Mutation(
        "cuda_export_takes_any_stream", _DEVICE,
        "  if dl_type == KDL_CUDA and stream >= 1:",
        "  if dl_type == KDL_CUDA:",
        (f"{_EXPORT_DEVICE_TEST}::ExportStreamTest",), fast=True),
)


def _copy_tree(destination: pathlib.Path) -> None:
  """Copies the checkout's files, as git sees them, to ``destination``."""
  listed = subprocess.run(
      ["git", "ls-files", "-co", "--exclude-standard"], cwd=_ROOT,
      capture_output=True, text=True, check=True).stdout.split("\n")
  for name in filter(None, listed):
    source = _ROOT / name
    if source.is_file():
      target = destination / name
      target.parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(source, target)


def _pytest(tree: pathlib.Path, tests: tuple[str, ...],
            timeout: float) -> tuple[int, str]:
  """Runs ``tests`` on ``tree``; returns pytest's exit status and output."""
  env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
  try:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
         *tests], cwd=tree, env=env, capture_output=True, text=True,
        timeout=timeout, check=False)
  except subprocess.TimeoutExpired:
    return -1, "timed out: a hang counts as caught"
  return done.returncode, done.stdout + done.stderr


def _caught(status: int) -> bool:
  # 1: a test failed; negative or -1: a crash or a hang. 2 to 5 are pytest's
  # own errors (interrupted, internal, usage, no tests): nothing was shown.
  return status == 1 or status < 0


def _check(mutation: Mutation, tree: pathlib.Path, timeout: float) -> bool:
  """Breaks ``mutation`` in ``tree``, runs its tests, mends it: whether a
  test caught it. Prints what happened."""
  path = tree / mutation.path
  original = path.read_text()
  found = original.count(mutation.old)
  if found != 1:
    print(f"ERROR    {mutation.name}: its text occurs {found} times in "
          f"{mutation.path}; update the mutation", flush=True)
    return False
  path.write_text(original.replace(mutation.old, mutation.new))
  start = time.monotonic()
  try:
    selection = mutation.tests + (("-k", mutation.keyword) if mutation.keyword
                                  else ())
    status, output = _pytest(tree, selection, timeout)
  finally:
    path.write_text(original)
  seconds = time.monotonic() - start
  if _caught(status):
    print(f"killed   {mutation.name} ({seconds:.0f} s)", flush=True)
    return True
  print(f"SURVIVED {mutation.name}: pytest exit status {status} for "
        f"{' '.join(selection)}\n{output[-2000:]}", flush=True)
  return False


def run(mutations: tuple[Mutation, ...], timeout: float,
        jobs: int = 1) -> int:
  """Checks ``mutations``, ``jobs`` at a time, each job in a copy of the
  tree of its own; returns how many were not caught."""
  with tempfile.TemporaryDirectory() as scratch:
    trees: queue.SimpleQueue[pathlib.Path] = queue.SimpleQueue()
    for job in range(max(1, min(jobs, len(mutations)))):
      tree = pathlib.Path(scratch) / f"tree-{job}"
      _copy_tree(tree)
      trees.put(tree)
    selected = tuple(dict.fromkeys(t for m in mutations for t in m.tests))
    first = trees.get()
    status, output = _pytest(first, selected, timeout)
    trees.put(first)
    if status:
      print(f"{output[-3000:]}\nmutations: the tests fail unmutated (exit "
            f"status {status}): nothing to compare with", flush=True)
      return len(mutations)

    def check(mutation: Mutation) -> bool:
      tree = trees.get()
      try:
        return _check(mutation, tree, timeout)
      finally:
        trees.put(tree)

    with futures.ThreadPoolExecutor(max_workers=trees.qsize()) as pool:
      survived = sum(not killed for killed in pool.map(check, mutations))
  print(f"mutations: {len(mutations) - survived} killed, {survived} "
        "survived", flush=True)
  return survived


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--fast", action="store_true",
                      help="only the gaps .ci/run keeps closed")
  parser.add_argument("--only", nargs="+", metavar="NAME",
                      help="only these mutations")
  parser.add_argument("--list", action="store_true",
                      help="list the mutations and the tests of each")
  parser.add_argument("--timeout", type=float, default=600,
                      help="seconds per mutation's tests")
  parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                      help="mutations checked at once, each in a copy of "
                      "the tree of its own (default: one per core)")
  args = parser.parse_args(argv)
  chosen = tuple(m for m in MUTATIONS
                 if (not args.fast or m.fast)
                 and (not args.only or m.name in args.only))
  unknown = set(args.only or ()) - {m.name for m in MUTATIONS}
  if unknown:
    parser.error(f"no mutation named {', '.join(sorted(unknown))}")
  if args.list:
    for mutation in chosen:
      print(f"{mutation.name}: {mutation.path} -> {' '.join(mutation.tests)}")
    return 0
  return 1 if run(chosen, args.timeout, args.jobs) else 0


if __name__ == "__main__":
  sys.exit(main())
