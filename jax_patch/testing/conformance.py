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

"""Conformance cases: the behaviours the patch promises, for any importer.

The cases run against any ``from_dlpack``.

Each case takes a ``from_dlpack(x, *, device=None, copy=None)`` and returns a
short description of what it saw, raises ``AssertionError`` when the
behaviour is wrong, and ``unittest.SkipTest`` when this machine cannot show
it (too few devices, an optional producer not installed). ``jax-patch check``
runs them against upstream JAX and against the patch; the tests run them
against every patched entry point. Vendoring writes this module beside a JAX
checkout's tests, as ``tests/dlpack_conformance.py``, with its
``jax_patch._src`` imports made ``jax._src`` ones.

Aliasing is always proved by writing to the source after the import, never
by comparing values.

Each case tests one device, which :func:`device_of` names: ``"cpu"``
(most), ``"gpu"`` (``GPU_CASES``) or ``"accelerator"`` (``ACCELERATOR_CASES``,
whichever GPU or TPU is JAX's default backend). A CPU case runs with the CPU
as JAX's default device, so it tests CPU behaviour whatever the machine's
default device is.

The cases run with ``jax_enable_x64`` off or on, and each states what the
standard requires in the mode it runs in. The mode changes one thing here:
with x64 off JAX narrows 64-bit input to 32 bits, which is a copy; with x64
on it keeps it. A case that means something in one mode only skips in the
other, saying so (``require_x64``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import tempfile
import unittest
from collections.abc import Callable
from typing import Any, Protocol

import ml_dtypes
import numpy as np

import jax
from jax import lax
from jax._src import config
from jax._src import layout as jax_layout
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jax_patch._src import dlpack_capsule
from jax_patch._src import dlpack_compat
from jax_patch._src import dlpack_device

FromDLPack = Callable[..., Any]

_SENTINEL = 99
_ALIGNMENT = 64


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  behaviour: str
  run: Callable[[FromDLPack], str]


CASES: list[Case] = []


def _case(behaviour: str) -> Callable[[Callable[[FromDLPack], str]],
                                      Callable[[FromDLPack], str]]:
  def register(fn: Callable[[FromDLPack], str]) -> Callable[[FromDLPack], str]:
    CASES.append(Case(fn.__name__, behaviour, fn))
    return fn
  return register


def device_of(name: str) -> str:
  """The device the case ``name`` tests: "cpu", "gpu" or "accelerator"."""
  if name in GPU_CASES:
    return "gpu"
  if name in ACCELERATOR_CASES:
    return "accelerator"
  return "cpu"


def on_its_device(case: Case) -> Any:
  """A context that runs ``case`` on the device it tests.

  For a CPU case, the CPU is JAX's default device in it, so that the case's
  arrays are host arrays whatever the machine's default device is.
  """
  if device_of(case.name) == "cpu":
    return jax.default_device(jax.devices("cpu")[0])
  return contextlib.nullcontext()


def run_case(case: Case, from_dlpack: FromDLPack) -> tuple[str, bool | None]:
  """Runs one case: returns (what it saw, passed); passed is None if skipped."""
  try:
    with on_its_device(case):
      return case.run(from_dlpack), True
  except unittest.SkipTest as skip:
    return f"skipped: {skip}", None
  except AssertionError as err:
    return f"FAIL: {err}", False
  except Exception as err:  # pylint: disable=broad-except
    return f"FAIL: {type(err).__name__}: {err}", False


def aligned_array(shape: tuple[int, ...], dtype: Any = np.float32,
                  misalign_bytes: int = 0) -> np.ndarray[Any, Any]:
  """A writable array filled with 0, 1, 2, ... at a chosen alignment."""
  dtype = np.dtype(dtype)
  count = int(np.prod(shape))
  raw = np.empty(count * dtype.itemsize + 2 * _ALIGNMENT, np.uint8)
  start = -raw.ctypes.data % _ALIGNMENT + misalign_bytes
  out: np.ndarray[Any, Any] = np.ndarray(shape, dtype, buffer=raw,
                                         offset=start)
  out[...] = np.arange(count).reshape(shape).astype(dtype)
  return out


def _shares(result: Any, source: np.ndarray[Any, Any],
            writable_source: np.ndarray[Any, Any] | None = None) -> bool:
  """Writes a sentinel into the source and reports whether result sees it.

  ``result`` must not have been read before: a read may cache a copy.
  """
  target = source if writable_source is None else writable_source
  index = (0,) * target.ndim
  target[index] = _SENTINEL
  seen = np.asarray(result)[(0,) * result.ndim]
  return bool(seen == _SENTINEL)


def _expect_raises(fn: Callable[[], Any], *types: type[BaseException],
                   mentions: str | None = None) -> str:
  try:
    result = fn()
  except AssertionError:
    raise
  except Exception as err:  # pylint: disable=broad-except
    missing = [t.__name__ for t in types if not isinstance(err, t)]
    assert not missing, (
        f"raised {type(err).__name__} ({err}), which is not a "
        f"{' or '.join(missing)}")
    # In any case: a message may name a thing as a type does (PyCapsule).
    assert mentions is None or mentions.lower() in str(err).lower(), (
        f"{type(err).__name__} does not mention {mentions!r}: {err}")
    return f"raises {type(err).__name__}"
  raise AssertionError(f"no error; returned {type(result).__name__}")


def _require_devices(count: int) -> list[Any]:
  devices = jax.devices("cpu")
  if len(devices) < count:
    raise unittest.SkipTest(
        f"needs {count} CPU devices; this process has {len(devices)} (set "
        f"XLA_FLAGS=--xla_force_host_platform_device_count={count} or more "
        "before JAX starts)")
  return devices


def x64_enabled() -> bool:
  """Whether JAX keeps 64-bit types (``jax_enable_x64``), here and now."""
  return bool(config.enable_x64.value)


def x64_mode() -> str:
  """The mode, as the cases and ``jax-patch check`` name it."""
  return f"x64 {'on' if x64_enabled() else 'off'}"


def require_x64(enabled: bool, why: str) -> None:
  """Skips, saying ``why``, unless ``jax_enable_x64`` is ``enabled``.

  Raises:
    unittest.SkipTest: JAX runs in the other mode.
  """
  if x64_enabled() != enabled:
    raise unittest.SkipTest(
        f"holds with x64 {'on' if enabled else 'off'} only (this run: "
        f"{x64_mode()}): {why}")


def _require(module: str) -> Any:
  if importlib.util.find_spec(module) is None:
    raise unittest.SkipTest(f"{module} is not installed")
  return importlib.import_module(module)


class RecordingProducer:
  """Wraps a real NumPy array and records how ``__dlpack__`` was called."""

  def __init__(self, array: np.ndarray[Any, Any]):
    # Any: pytype's NumPy stubs lack the DLPack methods.
    self.array: Any = array
    self.calls: list[dict[str, Any]] = []

  def __dlpack_device__(self) -> tuple[int, int]:
    device: tuple[int, int] = self.array.__dlpack_device__()
    return device

  def __dlpack__(self, **kwargs: Any) -> Any:
    self.calls.append(kwargs)
    return self.array.__dlpack__(**kwargs)


class OldProducer:
  """A producer from before the 2023.12 standard: ``__dlpack__(stream)``."""

  def __init__(self, array: np.ndarray[Any, Any]):
    self.array: Any = array

  def __dlpack_device__(self) -> tuple[int, int]:
    device: tuple[int, int] = self.array.__dlpack_device__()
    return device

  def __dlpack__(self, stream: Any = None) -> Any:
    del stream
    return self.array.__dlpack__()


def absent_gpu_device_type() -> int:
  """A GPU DLPack device type this JAX has no backend for: CUDA, else ROCm."""
  for device_type in (dlpack_device.KDL_CUDA, dlpack_device.KDL_ROCM):
    if dlpack_device.jax_device_for((device_type, 0)) is None:
      return device_type
  raise unittest.SkipTest("this JAX has both CUDA and ROCm backends")


class ForeignDeviceProducer:
  """Claims to live on a device type this jaxlib lacks.

  By default a GPU platform JAX has no backend for (CUDA on a CPU-only
  jaxlib). No real producer can show this. Like a GPU tensor, it exports
  only a host copy, and only when asked with ``dl_device``.
  """

  def __init__(self, host_array: np.ndarray[Any, Any],
               device_type: int | None = None):
    self.host_array: Any = host_array
    self.device_type = (absent_gpu_device_type() if device_type is None
                        else device_type)
    self.calls: list[dict[str, Any]] = []

  def __dlpack_device__(self) -> tuple[int, int]:
    return (self.device_type, 0)

  def __dlpack__(self, *, stream: Any = None, max_version: Any = None,
                 dl_device: Any = None, copy: Any = None) -> Any:
    self.calls.append(dict(stream=stream, max_version=max_version,
                           dl_device=dl_device, copy=copy))
    if dl_device is None or tuple(dl_device) != (1, 0):
      raise BufferError("this producer only exports host copies")
    if copy is False:
      raise BufferError("a device-to-host transfer always copies")
    return self.host_array.__dlpack__(max_version=max_version, copy=True)


class PreparedCapsule:
  """Hands out one capsule made beforehand, to whichever consumer asks.

  ``capsule`` and ``device`` (what ``__dlpack_device__`` says) need not be
  valid: hostile-producer tests hand out garbage through it.
  """

  def __init__(self, capsule: Any, device: Any = (1, 0)):
    self.capsule = capsule
    self.device = device

  def __dlpack_device__(self) -> Any:
    return self.device

  def __dlpack__(self, **kwargs: Any) -> Any:
    del kwargs
    return self.capsule


class DLPackOnly:
  """Hides everything but DLPack, so a ``jax.Array`` takes the DLPack path."""

  def __init__(self, array: Any):
    self.array = array

  def __dlpack_device__(self) -> Any:
    return self.array.__dlpack_device__()

  def __dlpack__(self, **kwargs: Any) -> Any:
    return self.array.__dlpack__(**kwargs)


# copy=True


@_case("copy=True on 64-byte-aligned input returns an independent buffer")
def copy_true_aligned_is_independent(from_dlpack: FromDLPack) -> str:
  source = aligned_array((16,))
  result = from_dlpack(source, copy=True)
  assert not _shares(result, source), "the result changed with the source"
  return "independent"


@_case("copy=True on unaligned input returns an independent buffer")
def copy_true_unaligned_is_independent(from_dlpack: FromDLPack) -> str:
  source = aligned_array((16,), misalign_bytes=16)
  result = from_dlpack(source, copy=True)
  assert not _shares(result, source), "the result changed with the source"
  return "independent"


@_case("copy=True on a jax.Array returns an independent buffer")
def copy_true_jax_array_is_independent(from_dlpack: FromDLPack) -> str:
  source = jax.numpy.arange(8.0)
  result = from_dlpack(source, copy=True)
  source.delete()
  np.testing.assert_array_equal(np.asarray(result), np.arange(8.0))
  return "survives deleting the source"


# copy=False


@_case("copy=False on aligned input shares memory with the source")
def copy_false_aligned_shares(from_dlpack: FromDLPack) -> str:
  source = aligned_array((16,))
  result = from_dlpack(source, copy=False)
  assert _shares(result, source), "the result did not see the source change"
  return "shares"


@_case("copy=False on transposed input shares memory with the source "
       "(raises where jaxlib cannot alias it soundly)")
def copy_false_transposed_shares(from_dlpack: FromDLPack) -> str:
  return _transposed_shares(from_dlpack)


def _transposed_shares(from_dlpack: FromDLPack,
                       check: Callable[[Any], None] = lambda result: None,
                       **kwargs: Any) -> str:
  """``copy=False`` on ``x.T`` shares, or raises where jaxlib cannot.

  ``check`` looks at the result before the source is written to.
  """
  base = aligned_array((4, 4))
  if not dlpack_compat.JAXLIB_ALIASES_ANY_COMPACT_LAYOUT:
    return _copy_false_refuses(from_dlpack, base.T, **kwargs)
  result = from_dlpack(base.T, copy=False, **kwargs)
  check(result)
  base[0, 0] = _SENTINEL
  assert np.asarray(result)[0, 0] == _SENTINEL, "the result did not share"
  return "shares"


@_case("transposed and permuted input imports with the right values, in a "
       "computation and after a move to another device too")
def transposed_values_are_right(from_dlpack: FromDLPack) -> str:
  other_device = _require_devices(2)[1]
  # The column is row-major but for the stride of its size-1 dimension.
  for source in (aligned_array((4, 4)).T,
                 aligned_array((2, 3, 4)).transpose(1, 2, 0),
                 aligned_array((1, 3)).T):
    wrong = wrong_uses(from_dlpack(source), np.array(source), other_device)
    if wrong:
      raise AssertionError(
          f"strides {source.strides}: wrong values when {', '.join(wrong)}")
  return "x.T, a 3-d permutation and a column with a size-1 stride of 3"


def wrong_uses(result: jax.Array, expected: np.ndarray[Any, Any],
               other_device: Any) -> list[str]:
  """The uses of ``result`` that do not see ``expected``, by name.

  The uses: read, computed with and raveled, and the same after a move to
  ``other_device``. Each ravel is compiled afresh, since a cached
  computation skips the layout check that JAX before 0.5.1 fails (with an
  ``AssertionError``, which propagates).
  """
  moved = jax.device_put(result, other_device)
  wrong = []
  for prefix, value in (("", result), ("moved, then ", moved)):
    uses = {"read": (value, expected),
            "computed with": (value + 0, expected),
            "raveled": (jax.jit(lambda y: y.ravel())(value), expected.ravel())}
    wrong += [prefix + use for use, (seen, want) in uses.items()
              if not np.array_equal(np.asarray(seen), want)]
  return wrong


def _copy_false_refuses(from_dlpack: FromDLPack,
                        source: np.ndarray[Any, Any], **kwargs: Any) -> str:
  return _expect_raises(lambda: from_dlpack(source, copy=False, **kwargs),
                        BufferError, ValueError, mentions="copy=False")


@_case("copy=False on int64 input, x64 off (narrowed to int32: a copy), "
       "raises instead of copying")
def copy_false_int64_raises(from_dlpack: FromDLPack) -> str:
  require_x64(False, "with x64 on int64 is kept, so nothing needs a copy "
              "(copy_false_int64_shares_with_x64_on)")
  return _copy_false_refuses(from_dlpack, aligned_array((8,), np.int64))


@_case("copy=False on float64 input, x64 off (narrowed to float32: a copy), "
       "raises instead of copying")
def copy_false_float64_raises(from_dlpack: FromDLPack) -> str:
  require_x64(False, "with x64 on float64 is kept, so nothing needs a copy "
              "(copy_false_float64_shares_with_x64_on)")
  return _copy_false_refuses(from_dlpack, aligned_array((8,), np.float64))


def _copy_false_keeps_and_shares(from_dlpack: FromDLPack,
                                 dtype: Any) -> str:
  source = aligned_array((8,), dtype)
  result = from_dlpack(source, copy=False)
  assert result.dtype == source.dtype, f"came back as {result.dtype}"
  assert _shares(result, source), "the result did not see the source change"
  return f"shares, {result.dtype}"


@_case("copy=False on int64 input, x64 on (kept as int64), shares memory "
       "with the source")
def copy_false_int64_shares_with_x64_on(from_dlpack: FromDLPack) -> str:
  require_x64(True, "with x64 off int64 becomes int32, a copy, which "
              "copy=False refuses (copy_false_int64_raises)")
  return _copy_false_keeps_and_shares(from_dlpack, np.int64)


@_case("copy=False on float64 input, x64 on (kept as float64), shares "
       "memory with the source")
def copy_false_float64_shares_with_x64_on(from_dlpack: FromDLPack) -> str:
  require_x64(True, "with x64 off float64 becomes float32, a copy, which "
              "copy=False refuses (copy_false_float64_raises)")
  return _copy_false_keeps_and_shares(from_dlpack, np.float64)


@_case("copy=False on unaligned input raises BufferError and ValueError")
def copy_false_unaligned_raises(from_dlpack: FromDLPack) -> str:
  return _copy_false_refuses(
      from_dlpack, aligned_array((8,), misalign_bytes=16))


@_case("copy=False on strided input (x[::2]) raises instead of copying")
def copy_false_strided_raises(from_dlpack: FromDLPack) -> str:
  return _copy_false_refuses(from_dlpack, aligned_array((16,))[::2])


@_case("copy=False to another device raises instead of copying")
def copy_false_other_device_raises(from_dlpack: FromDLPack) -> str:
  devices = _require_devices(2)
  return _expect_raises(
      lambda: from_dlpack(aligned_array((8,)), device=devices[1],
                          copy=False),
      BufferError, ValueError, mentions="copy=False")


@_case("copy=False when the producer reports it copied raises")
def copy_false_producer_copied_raises(from_dlpack: FromDLPack) -> str:
  class CopyingProducer(RecordingProducer):
    def __dlpack__(self, **kwargs: Any) -> Any:
      kwargs.update(copy=True, max_version=(1, 0))
      return self.array.__dlpack__(**kwargs)
  return _expect_raises(
      lambda: from_dlpack(CopyingProducer(aligned_array((8,))), copy=False),
      BufferError, ValueError)


@_case("copy=False refuses a capsule flagged IS_COPIED and READ_ONLY, as "
       "jaxlib 0.12 marks its own copies")
def copy_false_read_only_copy_raises(from_dlpack: FromDLPack) -> str:
  class ReadOnlyCopyProducer(RecordingProducer):
    def __dlpack__(self, **kwargs: Any) -> Any:
      del kwargs
      # An aligned copy (nothing else forbids sharing it), flagged as
      # jaxlib 0.12 flags the copies it exports.
      # Any: pytype's NumPy stubs lack the DLPack methods.
      copied: Any = aligned_array(self.array.shape, self.array.dtype)
      copied[...] = self.array
      return dlpack_capsule.as_versioned_capsule(
          copied.__dlpack__(), (1, 0),
          dlpack_capsule.FLAG_IS_COPIED | dlpack_capsule.FLAG_READ_ONLY)
  return _expect_raises(
      lambda: from_dlpack(ReadOnlyCopyProducer(aligned_array((8,))),
                          copy=False),
      BufferError, ValueError, mentions="IS_COPIED")


@_case("copy accepts NumPy bools")
def copy_accepts_numpy_bool(from_dlpack: FromDLPack) -> str:
  source = aligned_array((8,))
  result = from_dlpack(source, copy=np.bool_(False))
  assert _shares(result, source), "np.False_ did not mean copy=False"
  return "np.False_ shares"


# copy=None


def _imports_a_copy(from_dlpack: FromDLPack, base: np.ndarray[Any, Any],
                    view: Any) -> str:
  """Imports ``view(base)`` and checks that the result is a copy.

  After the import it writes all of ``base``: the result keeps the values
  it had, so it is a copy, not an alias of the strided memory.
  """
  source = view(base)
  expected = np.array(source)
  result = from_dlpack(source)
  base[...] = _SENTINEL
  np.testing.assert_array_equal(np.asarray(result), expected)
  return f"imports {source.shape}, a copy"


@_case("copy=None imports x[::2] (non-compact strides) by copying")
def copy_none_step_slice_imports(from_dlpack: FromDLPack) -> str:
  return _imports_a_copy(from_dlpack, aligned_array((16,)),
                         lambda base: base[::2])


@_case("copy=None imports x[::-1] (negative strides) by copying")
def copy_none_reversed_imports(from_dlpack: FromDLPack) -> str:
  return _imports_a_copy(from_dlpack, aligned_array((16,)),
                         lambda base: base[::-1])


@_case("copy=None imports np.broadcast_to output (zero strides) by copying")
def copy_none_broadcast_imports(from_dlpack: FromDLPack) -> str:
  return _imports_a_copy(from_dlpack, aligned_array((4,)),
                         lambda base: np.broadcast_to(base, (3, 4)))


@_case("copy=None shares aligned input")
def copy_none_aligned_shares(from_dlpack: FromDLPack) -> str:
  source = aligned_array((16,))
  assert _shares(from_dlpack(source), source), "copy=None copied"
  return "shares"


@_case("a read-only NumPy array imports without a copy")
def read_only_imports_without_copy(from_dlpack: FromDLPack) -> str:
  writable = aligned_array((8,))
  read_only = writable.view()
  read_only.flags.writeable = False
  result = from_dlpack(read_only, copy=False)
  assert _shares(result, read_only, writable), "the import copied"
  return "shares"


@_case("a read-only memory-mapped .npy file imports with copy=False")
def memory_mapped_file_imports_without_copy(from_dlpack: FromDLPack) -> str:
  with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "weights.npy")
    writer = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                       shape=(1024, 1024))
    writer[0, 0] = 7.0
    del writer
    weights = np.load(path, mmap_mode="r")
    result = from_dlpack(weights, copy=False)
    assert result.unsafe_buffer_pointer() == weights.ctypes.data, "copied"
    assert float(np.asarray(result)[0, 0]) == 7.0
    del result, weights
  return "same address"


@_case("donating an imported read-only array never writes into the source")
def donation_leaves_read_only_source_unchanged(
    from_dlpack: FromDLPack) -> str:
  with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "weights.npy")
    np.save(path, np.arange(4096, dtype=np.float32))
    with open(path, "rb") as f:
      before = f.read()
    weights = np.load(path, mmap_mode="r")
    imported = from_dlpack(weights, copy=False)
    doubled = jax.jit(lambda x: x * 2, donate_argnums=0)(imported)
    np.testing.assert_array_equal(np.asarray(doubled),
                                  2 * np.arange(4096, dtype=np.float32))
    del imported, doubled, weights
    with open(path, "rb") as f:
      assert f.read() == before, "the file changed"
  return "file unchanged"


@_case("a producer that ignores max_version (returns 0.x) imports")
def producer_ignoring_max_version_imports(from_dlpack: FromDLPack) -> str:
  class LegacyOnlyProducer(RecordingProducer):
    def __dlpack__(self, **kwargs: Any) -> Any:
      self.calls.append(kwargs)
      return self.array.__dlpack__(stream=kwargs.get("stream"))
  source = aligned_array((8,))
  assert _shares(from_dlpack(LegacyOnlyProducer(source)), source), "copied"
  return "shares"


@_case("a producer that knows max_version but not copy imports, copy=False")
def producer_without_copy_keyword_imports(from_dlpack: FromDLPack) -> str:
  class NoCopyKeywordProducer:
    def __init__(self, array: np.ndarray[Any, Any]):
      self.array: Any = array
      self.calls: list[dict[str, Any]] = []

    def __dlpack_device__(self) -> tuple[int, int]:
      return (1, 0)

    def __dlpack__(self, **kwargs: Any) -> Any:
      # Recorded first, so that a call this producer refuses shows too.
      self.calls.append(kwargs)
      unknown = set(kwargs) - {"stream", "max_version"}
      if unknown:
        raise TypeError(f"__dlpack__() got unexpected keywords {unknown}")
      return self.array.__dlpack__(**kwargs)

  writable = aligned_array((8,))
  read_only = writable.view()
  read_only.flags.writeable = False  # Importable only as DLPack 1.x.
  producer = NoCopyKeywordProducer(read_only)
  result = from_dlpack(producer, copy=False)
  assert _shares(result, read_only, writable), "copied"
  # Whether copy=False is asked first is the consumer's choice (the patch
  # asks: dlpack_import_test); the import must come from a call without it.
  assert "copy" not in producer.calls[-1], producer.calls
  assert producer.calls[-1].get("max_version") is not None, producer.calls
  return f"shares, after {len(producer.calls)} call(s) of __dlpack__"


@_case("a producer that exports only versioned (1.x) capsules imports")
def versioned_only_producer_imports(from_dlpack: FromDLPack) -> str:
  class VersionedOnlyProducer(RecordingProducer):
    def __dlpack__(self, **kwargs: Any) -> Any:
      if kwargs.get("max_version") is None:
        raise BufferError("this producer exports DLPack 1.x only")
      return self.array.__dlpack__(**kwargs)
  source = aligned_array((8,))
  assert _shares(from_dlpack(VersionedOnlyProducer(source)), source), (
      "copied")
  return "shares"


# device


@_case("device=<jax.Device> places the result on that device")
def device_places_result(from_dlpack: FromDLPack) -> str:
  devices = _require_devices(2)
  result = from_dlpack(aligned_array((8,)), device=devices[1])
  assert result.devices() == {devices[1]}, f"on {result.devices()}"
  np.testing.assert_array_equal(np.asarray(result), np.arange(8))
  return f"on {devices[1]}"


def single_device_sharding(device: Any) -> Any:
  """A ``SingleDeviceSharding`` of ``device``, as this JAX spells one.

  JAX 0.12.1 deprecates constructing the class from ``jax.sharding`` in
  favour of ``make_single_device_sharding``, which older JAXs lack.
  """
  make = getattr(jax.sharding, "make_single_device_sharding", None)
  if make is None:
    return jax.sharding.SingleDeviceSharding(device)
  return make(device)


def layout(major_to_minor: tuple[int, ...]) -> Any:
  """A device-local layout of that dimension order, as this JAX names it."""
  return _layout_type()(major_to_minor)


def _layout_type() -> Any:
  """``DeviceLocalLayout`` up to JAX 0.6, ``Layout`` from 0.7.

  (When the ``Format`` beside it stopped being called ``Layout``.)
  """
  return vars(jax_layout).get("DeviceLocalLayout", jax_layout.Layout)


def _cpu_format(device_local_layout: Any) -> Any:
  """A ``Format`` of that layout on the first CPU device."""
  return dlpack_compat.FORMAT_TYPE(
      device_local_layout, single_device_sharding(jax.devices("cpu")[0]))


def _assert_in_layout(result: Any, major_to_minor: tuple[int, ...]) -> None:
  assert dlpack_compat.layout_matches(layout(major_to_minor),
                                      dlpack_compat.layout_of(result)), (
                                          "not in the Format's layout")


@_case("device=<single-device Sharding> places the result on its device")
def single_device_sharding_places_result(from_dlpack: FromDLPack) -> str:
  devices = _require_devices(2)
  sharding = single_device_sharding(devices[1])
  result = from_dlpack(aligned_array((8,)), device=sharding)
  assert result.devices() == {devices[1]}, f"on {result.devices()}"
  return f"on {devices[1]}"


@_case("device=Format(None, <single-device Sharding>) places the result on "
       "the sharding's device")
def format_places_result(from_dlpack: FromDLPack) -> str:
  devices = _require_devices(2)
  target = dlpack_compat.FORMAT_TYPE(None, single_device_sharding(devices[1]))
  result = from_dlpack(aligned_array((8,)), device=target)
  assert result.devices() == {devices[1]}, f"on {result.devices()}"
  np.testing.assert_array_equal(np.asarray(result), np.arange(8))
  return f"on {devices[1]}"


@_case("copy=False with a Format whose layout the source already has "
       "(x.T, dimension order (1, 0)) shares memory with it (raises where "
       "jaxlib cannot alias it soundly)")
def format_in_source_layout_shares(from_dlpack: FromDLPack) -> str:
  return _transposed_shares(from_dlpack,
                            lambda result: _assert_in_layout(result, (1, 0)),
                            device=_cpu_format(layout((1, 0))))


@_case("copy=False with a Format whose layout the source lacks raises "
       "BufferError (and ValueError); copy=None copies into that layout "
       "(before JAX 0.5.1, which holds CPU arrays in their default layout "
       "only, a ValueError says so)")
def format_in_other_layout_copies(from_dlpack: FromDLPack) -> str:
  target = _cpu_format(layout((1, 0)))
  source = aligned_array((4, 4))
  if not dlpack_compat.JAX_HOLDS_CPU_LAYOUTS:
    # No copy can be in that layout: the request itself is refused.
    return _expect_raises(lambda: from_dlpack(source, device=target),
                          ValueError, mentions="0.5.1")
  refused = _copy_false_refuses(from_dlpack, source, device=target)
  result = from_dlpack(source, device=target)
  _assert_in_layout(result, (1, 0))
  assert not _shares(result, source), "the copy changed with the source"
  return f"copy=False {refused}; copy=None copies"


@_case("device=Format(Layout.AUTO, ...) raises ValueError: only jit "
       "chooses that layout")
def format_auto_layout_raises(from_dlpack: FromDLPack) -> str:
  target = _cpu_format(_layout_type().AUTO)
  return _expect_raises(lambda: from_dlpack(aligned_array((8,)),
                                            device=target),
                        ValueError, mentions="AUTO")


@_case("copy=True with a sharding that includes the source device copies")
def copy_true_replicated_is_independent(from_dlpack: FromDLPack) -> str:
  devices = _require_devices(2)
  sharding = NamedSharding(Mesh(np.array(devices[:2]), ("x",)),
                           PartitionSpec())  # type: ignore[no-untyped-call]
  source = aligned_array((8,))
  result = from_dlpack(source, device=sharding, copy=True)
  source[0] = _SENTINEL
  seen = [np.asarray(shard.data)[0] for shard in result.addressable_shards]
  assert _SENTINEL not in seen, f"a shard shares the source: {seen}"
  return "no shard shares the source"


@_case("device=<multi-device Sharding> shards the imported data")
def multi_device_sharding_shards(from_dlpack: FromDLPack) -> str:
  devices = _require_devices(4)
  sharding = NamedSharding(Mesh(np.array(devices[:4]), ("x",)),
                           PartitionSpec("x"))  # type: ignore[no-untyped-call]
  result = from_dlpack(aligned_array((8,)), device=sharding)
  assert result.sharding.is_equivalent_to(sharding, 1), result.sharding
  np.testing.assert_array_equal(np.asarray(result), np.arange(8))
  return "sharded over 4 devices"


@_case("device=<multi-device Sharding> with copy=False raises")
def multi_device_sharding_copy_false_raises(from_dlpack: FromDLPack) -> str:
  devices = _require_devices(4)
  sharding = NamedSharding(Mesh(np.array(devices[:4]), ("x",)),
                           PartitionSpec())  # type: ignore[no-untyped-call]
  return _expect_raises(
      lambda: from_dlpack(aligned_array((8,)), device=sharding, copy=False),
      BufferError, ValueError)


@_case("a source on a platform JAX lacks imports as a host copy to the CPU")
def foreign_platform_imports_host_copy(from_dlpack: FromDLPack) -> str:
  producer = ForeignDeviceProducer(aligned_array((8,)))
  cpu = jax.devices("cpu")[0]
  result = from_dlpack(producer, device=cpu)
  assert producer.calls and producer.calls[-1]["dl_device"] == (1, 0), (
      producer.calls)
  assert producer.calls[-1]["stream"] is None, producer.calls
  np.testing.assert_array_equal(np.asarray(result), np.arange(8))
  return "asked for dl_device=(kDLCPU, 0)"


@_case("a source on a platform JAX lacks, without a CPU device, raises "
       "BufferError")
def foreign_platform_without_device_raises(from_dlpack: FromDLPack) -> str:
  producer = ForeignDeviceProducer(aligned_array((8,)))
  return _expect_raises(lambda: from_dlpack(producer), BufferError,
                        mentions="device=")


@_case("a pinned-host (kDLCUDAHost) source is asked with stream=None")
def cuda_host_source_gets_no_stream(from_dlpack: FromDLPack) -> str:
  if dlpack_device.jax_device_for((dlpack_device.KDL_CUDA_HOST, 0)):
    raise unittest.SkipTest(
        "this JAX has CUDA: the stand-in producer is for a JAX without it")
  producer = ForeignDeviceProducer(aligned_array((8,)), device_type=3)
  result = from_dlpack(producer, device=jax.devices("cpu")[0])
  assert all(call["stream"] is None for call in producer.calls), (
      producer.calls)
  np.testing.assert_array_equal(np.asarray(result), np.arange(8))
  return "stream=None"


@_case("an unsupported device type raises BufferError and TypeError")
def unsupported_device_type_raises(from_dlpack: FromDLPack) -> str:
  producer = ForeignDeviceProducer(aligned_array((8,)), device_type=4)
  return _expect_raises(lambda: from_dlpack(producer), BufferError,
                        TypeError)


# jax.Array input


@_case("a jax.Array keeps its own device")
def jax_array_keeps_device(from_dlpack: FromDLPack) -> str:
  devices = _require_devices(2)
  source = jax.device_put(jax.numpy.arange(4.0), devices[1])
  result = from_dlpack(source)
  assert result.devices() == {devices[1]}, f"came back on {result.devices()}"
  return f"stays on {devices[1]}"


@_case("a jax.Array on cpu:0 and cpu:1, with device=cpu:0, lands on cpu:0 "
       "alone; with copy=False too, it raises")
def jax_array_sharded_onto_one_device(from_dlpack: FromDLPack) -> str:
  devices = _require_devices(2)
  sharding = NamedSharding(Mesh(np.array(devices[:2]), ("x",)),
                           PartitionSpec("x"))  # type: ignore[no-untyped-call]
  source = jax.device_put(jax.numpy.arange(8.0), sharding)
  result = from_dlpack(source, device=devices[0])
  assert result.devices() == {devices[0]}, f"on {result.devices()}"
  np.testing.assert_array_equal(np.asarray(result), np.arange(8.0))
  _expect_raises(lambda: from_dlpack(source, device=devices[0], copy=False),
                 BufferError, ValueError)
  return f"on {devices[0]}; copy=False raises"


@_case("a jax.Array with copy=False returns the same buffer")
def jax_array_copy_false_shares(from_dlpack: FromDLPack) -> str:
  source = jax.numpy.arange(4.0)
  result = from_dlpack(source, copy=False)
  assert (result.unsafe_buffer_pointer()
          == source.unsafe_buffer_pointer()), "copied"
  return "same buffer"


# Transformations


def _traced_raises(transform: Callable[[Callable[..., Any]], Callable[..., Any]],
                   from_dlpack: FromDLPack) -> str:
  source = aligned_array((4,))

  def read(x: Any) -> Any:
    return x + from_dlpack(source)[0]

  return _expect_raises(lambda: transform(read)(jax.numpy.ones(4)),
                        Exception, mentions="transformation")


@_case("from_dlpack inside jax.jit raises")
def inside_jit_raises(from_dlpack: FromDLPack) -> str:
  return _traced_raises(jax.jit, from_dlpack)


@_case("from_dlpack inside jax.vmap raises")
def inside_vmap_raises(from_dlpack: FromDLPack) -> str:
  return _traced_raises(jax.vmap, from_dlpack)


@_case("from_dlpack inside jax.grad raises")
def inside_grad_raises(from_dlpack: FromDLPack) -> str:
  return _traced_raises(
      lambda f: jax.grad(lambda x: f(x).sum()), from_dlpack)


@_case("from_dlpack inside lax.scan raises")
def inside_scan_raises(from_dlpack: FromDLPack) -> str:
  return _traced_raises(
      lambda f: lambda x: lax.scan(lambda c, _: (f(c), None), x, None,
                                   length=2)[0], from_dlpack)


# Bad arguments


@_case("copy='yes' raises a TypeError naming from_dlpack")
def copy_string_raises(from_dlpack: FromDLPack) -> str:
  return _expect_raises(lambda: from_dlpack(aligned_array((4,)), copy="yes"),
                        TypeError, mentions="from_dlpack")


@_case("copy=1, 0 or 2 raises a TypeError naming from_dlpack (not read as "
       "a bool)")
def copy_int_raises(from_dlpack: FromDLPack) -> str:
  for copy in (1, 0, 2):
    _expect_raises(lambda: from_dlpack(aligned_array((4,)), copy=copy),
                   TypeError, mentions="from_dlpack")
  return "raises TypeError for 1, 0 and 2"


@_case("device='cpu' raises a TypeError and ValueError naming from_dlpack "
       "(upstream: a ValueError)")
def device_string_raises(from_dlpack: FromDLPack) -> str:
  return _expect_raises(
      lambda: from_dlpack(aligned_array((4,)), device="cpu"), TypeError,
      ValueError, mentions="from_dlpack")


@_case("an object without __dlpack__ raises AttributeError and TypeError")
def missing_dlpack_methods_raises(from_dlpack: FromDLPack) -> str:
  return _expect_raises(lambda: from_dlpack([1.0, 2.0]), AttributeError,
                        TypeError)


@_case("a raw DLPack capsule is refused, naming the capsule (JAX up to "
       "0.7.1 imported it, deprecated)")
def raw_capsule_refused(from_dlpack: FromDLPack) -> str:
  source: Any = aligned_array((4,))
  capsule = source.__dlpack__()
  return _expect_raises(lambda: from_dlpack(capsule), AttributeError,
                        TypeError, mentions="capsule")


@_case("a BufferError from the producer propagates unchanged")
def producer_buffer_error_propagates(from_dlpack: FromDLPack) -> str:
  error = BufferError("the producer says no")

  class RefusingProducer(RecordingProducer):
    def __dlpack__(self, **kwargs: Any) -> Any:
      raise error

  try:
    from_dlpack(RefusingProducer(aligned_array((4,))))
  except BufferError as err:
    assert err is error, f"got a different BufferError: {err}"
    return "propagates"
  raise AssertionError("no error")


# Negotiation and streams


@_case("a CPU producer is asked with stream=None and max_version")
def cpu_producer_gets_stream_none(from_dlpack: FromDLPack) -> str:
  producer = RecordingProducer(aligned_array((4,)))
  from_dlpack(producer)
  call = producer.calls[-1]
  assert call.get("stream", None) is None, call
  assert call.get("max_version") is not None, f"no max_version: {call}"
  return f"called with {sorted(call)}"


@_case("a producer that only knows __dlpack__(stream) still imports")
def old_producer_imports(from_dlpack: FromDLPack) -> str:
  source = aligned_array((8,))
  assert _shares(from_dlpack(OldProducer(source)), source), "copied"
  return "shares"


# Producers and dtypes


@_case("zero-size and 0-d NumPy arrays round-trip")
def zero_size_and_scalar_round_trip(from_dlpack: FromDLPack) -> str:
  for source in (np.empty((0, 3), np.float32), np.array(2.5, np.float32)):
    result = from_dlpack(source)
    assert result.shape == source.shape and result.dtype == source.dtype, (
        result.shape, result.dtype)
    np.testing.assert_array_equal(np.asarray(result), source)
  return "(0, 3) and ()"


@_case("bool, complex64 and float16 NumPy arrays round-trip")
def numpy_dtypes_round_trip(from_dlpack: FromDLPack) -> str:
  for dtype in (np.bool_, np.complex64, np.float16):
    source = aligned_array((2, 3), dtype)
    result = from_dlpack(source)
    assert result.dtype == source.dtype, (result.dtype, source.dtype)
    np.testing.assert_array_equal(np.asarray(result), source)
  return "bool, complex64, float16"


@_case("torch bfloat16 and float8 tensors round-trip, strided too")
def torch_dtypes_round_trip(from_dlpack: FromDLPack) -> str:
  torch = _require("torch")
  for dtype, np_dtype in ((torch.bfloat16, ml_dtypes.bfloat16),
                          (torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn)):
    tensor = torch.arange(8, dtype=torch.float32).to(dtype)
    for source in (tensor, tensor[::2]):
      result = from_dlpack(source)
      assert result.dtype == np_dtype, result.dtype
      np.testing.assert_array_equal(
          np.asarray(result).astype(np.float32),
          source.to(torch.float32).numpy())
  return "bfloat16, float8_e4m3fn"


@_case("a torch tensor imports without a copy")
def torch_tensor_shares(from_dlpack: FromDLPack) -> str:
  torch = _require("torch")
  source = torch.arange(64, dtype=torch.float32)
  result = from_dlpack(source, copy=False)
  source[0] = _SENTINEL
  assert np.asarray(result)[0] == _SENTINEL, "the result did not share"
  return "shares"


@_case("a JAX producer's float8 array round-trips through DLPack")
def jax_producer_float8_round_trips(from_dlpack: FromDLPack) -> str:
  source = jax.numpy.arange(8, dtype=jax.numpy.float8_e4m3fn)
  result = from_dlpack(DLPackOnly(source))
  assert result.dtype == source.dtype, result.dtype
  np.testing.assert_array_equal(np.asarray(result), np.asarray(source))
  return "float8_e4m3fn"


@_case("an array-api-strict array imports")
def array_api_strict_imports(from_dlpack: FromDLPack) -> str:
  xp = _require("array_api_strict")
  source = xp.asarray([[1.0, 2.0], [3.0, 4.0]], dtype=xp.float32)
  result = from_dlpack(source)
  np.testing.assert_array_equal(np.asarray(result), [[1, 2], [3, 4]])
  return "imports"


# CUDA: real GPU producers (torch, CuPy, JAX itself). Each case skips where
# this jaxlib has no GPU or the producer cannot reach one, saying why;
# `jax-patch check --require-gpu` (tools/device_check.sh) counts each such
# skip as a failure. Each case's docstring says how it fails when the
# behaviour it names is wrong.


def _require_gpu() -> Any:
  """The first GPU device of this jaxlib."""
  try:
    return jax.devices("gpu")[0]
  except RuntimeError:
    raise unittest.SkipTest(
        "needs a GPU and a CUDA build of jaxlib") from None


def _import_gpu_producer(module: str) -> Any:
  """Imports torch or CuPy for a GPU case, or skips saying why.

  An installed producer that does not import (a CUDA library missing, say)
  is its installation's fault, not the import's under test: the case skips
  with the error instead of failing in the patched column.
  """
  if importlib.util.find_spec(module) is None:
    raise unittest.SkipTest(f"{module} is not installed")
  try:
    return importlib.import_module(module)
  except Exception as err:  # pylint: disable=broad-except
    raise unittest.SkipTest(
        f"{module} is installed but does not import "
        f"({type(err).__name__}: {err})") from None


def _require_torch_cuda() -> Any:
  torch = _import_gpu_producer("torch")
  if not torch.cuda.is_available():
    raise unittest.SkipTest(
        f"torch {torch.__version__} sees no CUDA device (torch.version.cuda "
        f"is {torch.version.cuda}; None for a CPU build)")
  return torch


def _require_cupy() -> Any:
  cupy = _import_gpu_producer("cupy")
  try:
    count = cupy.cuda.runtime.getDeviceCount()
  except Exception as err:  # pylint: disable=broad-except
    raise unittest.SkipTest(
        f"CuPy {cupy.__version__} cannot reach a GPU "
        f"({type(err).__name__}: {err})") from None
  if not count:
    raise unittest.SkipTest(f"CuPy {cupy.__version__} finds no GPU")
  return cupy


@_case("a torch CUDA tensor imports without a copy, on its GPU")
def torch_cuda_tensor_shares(from_dlpack: FromDLPack) -> str:
  """Fails if the result lies elsewhere, or misses a write to the source."""
  gpu = _require_gpu()
  torch = _require_torch_cuda()
  source = torch.arange(64, dtype=torch.float32, device="cuda")
  result = from_dlpack(source, copy=False)
  assert result.devices() == {gpu}, f"on {result.devices()}"
  source[0] = _SENTINEL
  torch.cuda.synchronize()
  assert np.asarray(result)[0] == _SENTINEL, "the result did not share"
  return f"shares, on {gpu}"


class SideStream(Protocol):
  """Work a producer queues on a stream of its own, for the ordering case.

  ``start`` queues long work whose last step writes a fresh array, and
  returns that array (the DLPack producer); ``busy`` says whether the work
  still runs; ``current`` is the context in which the producer's stream is
  its current one (torch orders its current stream before the stream a
  consumer names in ``__dlpack__``); ``finish`` waits for the work and
  returns the array's final values, read by the producer's own means.
  """

  def start(self, rounds: int) -> Any: ...
  def busy(self) -> bool: ...
  def current(self) -> contextlib.AbstractContextManager[Any]: ...
  def finish(self) -> np.ndarray[Any, Any]: ...


# Rounds of work tried in turn, until the stream is still busy at the import.
SIDE_STREAM_ROUNDS = (16, 128, 1024)


def side_stream_import_is_ordered(
    from_dlpack: FromDLPack, stream: SideStream,
    rounds: tuple[int, ...] = SIDE_STREAM_ROUNDS) -> str:
  """Imports an array while the producer's stream is still writing it.

  The import, and the read through JAX, happen before anything waits for
  the producer's stream: only the ordering DLPack asks of producer and
  consumer makes JAX see the final values. Those depend on the whole seeded
  computation, so no stale memory holds them.

  Raises:
    AssertionError: JAX read other values than the producer's own read
      after its work finished (the read came first); or the work had always
      finished before the import began, so nothing was shown.
  """
  for count in rounds:
    with stream.current():
      source = stream.start(count)
      if not stream.busy():
        stream.finish()
        continue  # Finished too soon to show anything: more work.
      result = from_dlpack(source)
      busy_at_read = stream.busy()
      # A copy: on a CPU, np.asarray would be a view of the memory being
      # written, and compare whatever it holds later.
      seen = np.array(result)
    expected = stream.finish()
    if not np.array_equal(seen, expected):
      raise AssertionError(
          f"JAX read values the side stream had not written yet ({count} "
          f"rounds): {seen[:4]}... where the producer reads {expected[:4]}...")
    how = ("the stream was still busy when JAX read: ordered on the device"
           if busy_at_read else "from_dlpack returned once the stream was done")
    return f"{how} ({count} rounds)"
  raise AssertionError(
      f"inconclusive: the side stream had finished before every import, even "
      f"after {rounds[-1]} rounds of work, so nothing showed the ordering")


class TorchSideStream:
  """A torch CUDA stream of its own, running chained matrix products."""

  _SIZE = 4096

  def __init__(self, torch: Any):
    self._torch = torch
    self._stream = torch.cuda.Stream()
    self._source: Any = None

  def current(self) -> contextlib.AbstractContextManager[Any]:
    context: contextlib.AbstractContextManager[Any] = self._torch.cuda.stream(
        self._stream)
    return context

  def start(self, rounds: int) -> Any:
    torch = self._torch
    generator = torch.Generator(device="cuda")
    generator.manual_seed(int.from_bytes(os.urandom(7), "little"))
    with torch.cuda.stream(self._stream):
      x = torch.randn((self._SIZE, self._SIZE), device="cuda",
                      generator=generator)
      # A gain of 2 keeps sin(x @ mix) from settling on any fixed values.
      mix = torch.randn((self._SIZE, self._SIZE), device="cuda",
                        generator=generator) * (2 / self._SIZE ** 0.5)
      for _ in range(rounds):
        x = torch.sin(x @ mix)
      self._source = x[0, :16].clone()  # A fresh array, written last.
    return self._source

  def busy(self) -> bool:
    return not self._stream.query()

  def finish(self) -> np.ndarray[Any, Any]:
    self._stream.synchronize()
    values: np.ndarray[Any, Any] = self._source.cpu().numpy()
    return values


class Unsynchronised:
  """Asks its producer for capsules with ``stream=-1``: no synchronisation.

  DLPack's -1 tells the producer to order nothing before the consumer's
  stream, so a consumer reading at once races the producer's work. The
  side-stream case must fail through it (tests/device_check_test.py).
  """

  def __init__(self, producer: Any):
    self.producer = producer

  def __dlpack_device__(self) -> Any:
    return self.producer.__dlpack_device__()

  def __dlpack__(self, **kwargs: Any) -> Any:
    return self.producer.__dlpack__(**{**kwargs, "stream": -1})


@_case("a torch CUDA tensor written last on a busy side stream reads right "
       "through JAX (the producer orders its stream before JAX's)")
def torch_cuda_side_stream_is_ordered(from_dlpack: FromDLPack) -> str:
  """Fails if JAX reads before the side stream wrote the tensor.

  It also fails if the stream never was busy at the import
  (side_stream_import_is_ordered).
  """
  _require_gpu()
  torch = _require_torch_cuda()
  return side_stream_import_is_ordered(from_dlpack, TorchSideStream(torch))


@_case("a torch CUDA tensor with copy=True comes back independent")
def torch_cuda_copy_true_is_independent(from_dlpack: FromDLPack) -> str:
  """Fails if the result sees a write to the source made after the import."""
  _require_gpu()
  torch = _require_torch_cuda()
  source = torch.arange(64, dtype=torch.float32, device="cuda")
  result = from_dlpack(source, copy=True)
  source[0] = _SENTINEL
  torch.cuda.synchronize()
  assert np.asarray(result)[0] == 0, "the copy changed with its source"
  return "independent"


@_case("a torch CUDA tensor 4 bytes into its allocation (t[1:]) imports by "
       "an aligned copy XLA computes on; copy=False raises")
def torch_cuda_misaligned_imports(from_dlpack: FromDLPack) -> str:
  """Fails if a computation on the import fails, or copy=False aliases.

  XLA's GPU executables read parameters only at 16-byte multiples: an alias
  of ``t[1:]`` imports, then fails its first computation (or faults the
  GPU for every later launch).
  """
  gpu = _require_gpu()
  torch = _require_torch_cuda()
  base = torch.arange(65, dtype=torch.float32, device="cuda")
  source = base[1:]
  for copy in (None, True):
    result = from_dlpack(source, copy=copy)
    assert result.devices() == {gpu}, f"on {result.devices()}"
    total = float(jax.numpy.sum(result + 1))
    assert total == sum(range(2, 66)), f"computed {total}"
  _expect_raises(lambda: from_dlpack(source, copy=False), BufferError,
                 ValueError, mentions="16 bytes")
  return f"copied to aligned memory on {gpu}; copy=False raises"


@_case("strided and reversed torch CUDA tensors import by a copy on the "
       "GPU; copy=False raises")
def torch_cuda_strided_imports(from_dlpack: FromDLPack) -> str:
  """Fails on wrong values, a result off the GPU, or copy=False importing.

  Wrong values are a layout read as row-major; copy=False must raise
  instead of importing.
  """
  gpu = _require_gpu()
  torch = _require_torch_cuda()
  base = torch.arange(64, dtype=torch.float32, device="cuda").reshape(8, 8)
  # torch has no negative strides; a zero stride stands in for them.
  for source in (base[::2, ::3], base[:, 1::2].T, base[:1].expand(4, 8)):
    result = from_dlpack(source)
    assert result.devices() == {gpu}, f"on {result.devices()}"
    np.testing.assert_array_equal(np.asarray(result), source.cpu().numpy())
  return _expect_raises(lambda: from_dlpack(base[::2], copy=False),
                        BufferError, ValueError)


@_case("a torch CUDA tensor with device=<CPU> imports a host copy; "
       "copy=False raises")
def torch_cuda_to_cpu_copies(from_dlpack: FromDLPack) -> str:
  """Fails if the result is off the CPU or wrong, or copy=False imports.

  The result must be on the CPU device and hold the right values;
  copy=False must raise.
  """
  _require_gpu()
  torch = _require_torch_cuda()
  cpu = jax.devices("cpu")[0]
  source = torch.arange(16, dtype=torch.float32, device="cuda")
  result = from_dlpack(source, device=cpu)
  assert result.devices() == {cpu}, f"on {result.devices()}"
  np.testing.assert_array_equal(np.asarray(result), np.arange(16))
  return _expect_raises(lambda: from_dlpack(source, device=cpu, copy=False),
                        BufferError, ValueError, mentions="copy=False")


def _pinned(torch: Any, tensor: Any) -> Any:
  """``tensor`` in pinned host memory, which torch reports as kDLCUDAHost."""
  pinned = tensor.pin_memory()
  device_type = int(pinned.__dlpack_device__()[0])
  if device_type != dlpack_device.KDL_CUDA_HOST:
    raise unittest.SkipTest(
        f"torch {torch.__version__} reports pinned memory as DLPack device "
        f"type {device_type}, not kDLCUDAHost (3)")
  return pinned


def _pinned_result_device(result: Any, gpu: Any) -> str:
  """Where a pinned-host import lies: its GPU or a CPU device.

  Both can address that memory. The standard's "the same device" has no
  single JAX reading for pinned host memory: this is reported, not judged.
  """
  device, = result.devices()
  assert device == gpu or device.platform == "cpu", f"on {device}"
  return f"{device} ({result.sharding.memory_kind})"


@_case("a pinned-host torch tensor (kDLCUDAHost) imports with its values, "
       "on its GPU or a CPU device")
def torch_pinned_host_imports(from_dlpack: FromDLPack) -> str:
  """Fails if the import raises, reads wrong values, or lands on another GPU.

  It could raise since torch's host __dlpack__ refuses a CUDA stream, and
  its capsule says kDLCPU where __dlpack_device__ says kDLCUDAHost.
  """
  gpu = _require_gpu()
  torch = _require_torch_cuda()
  source = _pinned(torch, torch.arange(16, dtype=torch.float32))
  result = from_dlpack(source)
  where = _pinned_result_device(result, gpu)
  source[0] = _SENTINEL  # Written in host memory: no stream to wait for.
  seen = np.asarray(result)
  np.testing.assert_array_equal(seen[1:], np.arange(1, 16))
  assert seen[0] in (0, _SENTINEL), seen
  return f"on {where}, {'shares' if seen[0] == _SENTINEL else 'a copy'}"


@_case("a pinned-host torch tensor with copy=True comes back independent")
def torch_pinned_host_copy_true_is_independent(from_dlpack: FromDLPack) -> str:
  """Fails if the result sees a write to the source made after the import.

  It would see one if shared, or if copied by a transfer still running when
  from_dlpack returned.
  """
  gpu = _require_gpu()
  torch = _require_torch_cuda()
  source = _pinned(torch, torch.arange(16, dtype=torch.float32))
  result = from_dlpack(source, copy=True)
  where = _pinned_result_device(result, gpu)
  source[0] = _SENTINEL
  np.testing.assert_array_equal(np.asarray(result), np.arange(16))
  return f"independent, on {where}"


@_case("a strided view of a pinned-host torch tensor imports by a copy; "
       "copy=False raises")
def torch_pinned_host_strided_imports(from_dlpack: FromDLPack) -> str:
  """Fails on wrong values, a shared result, or copy=False importing.

  Wrong values are the view read as row-major; a shared result sees later
  writes to the source; copy=False must raise instead of importing.
  """
  gpu = _require_gpu()
  torch = _require_torch_cuda()
  base = _pinned(torch, torch.arange(32, dtype=torch.float32))
  source = base[::2]
  result = from_dlpack(source)
  where = _pinned_result_device(result, gpu)
  base.fill_(_SENTINEL)
  np.testing.assert_array_equal(np.asarray(result), np.arange(0, 32, 2))
  refusal = _expect_raises(lambda: from_dlpack(base[::2], copy=False),
                           BufferError, ValueError)
  return f"a copy on {where}; copy=False {refusal}"


@_case("a NumPy array with device=<GPU> moves there; copy=False raises")
def numpy_to_gpu_moves(from_dlpack: FromDLPack) -> str:
  """Fails if the result is off the GPU or still copying, or copy=False imports.

  A result still copying sees a write made to the source after the import
  (a transfer still reading it); copy=False must raise.
  """
  gpu = _require_gpu()
  source = aligned_array((16,))
  result = from_dlpack(source, device=gpu)
  assert result.devices() == {gpu}, f"on {result.devices()}"
  source[0] = _SENTINEL
  assert np.asarray(result)[0] == 0, "the moved array changed with its source"
  return _expect_raises(lambda: from_dlpack(source, device=gpu, copy=False),
                        BufferError, ValueError, mentions="copy=False")


@_case("a CuPy array imports without a copy, on its GPU")
def cupy_array_shares(from_dlpack: FromDLPack) -> str:
  """Fails if the result lies elsewhere, or misses a write to the source."""
  gpu = _require_gpu()
  cupy = _require_cupy()
  source = cupy.arange(64, dtype=cupy.float32)
  result = from_dlpack(source, copy=False)
  assert result.devices() == {gpu}, f"on {result.devices()}"
  source[0] = _SENTINEL
  cupy.cuda.Device().synchronize()
  assert np.asarray(result)[0] == _SENTINEL, "the result did not share"
  return f"shares, on {gpu}"


@_case("a strided CuPy array imports by a copy on the GPU")
def cupy_strided_imports(from_dlpack: FromDLPack) -> str:
  """Fails on wrong values or a result off the GPU.

  Wrong values are negative strides read as positive, say; a result off the
  GPU was copied through the host.
  """
  gpu = _require_gpu()
  cupy = _require_cupy()
  source = cupy.arange(64, dtype=cupy.float32).reshape(8, 8)[::3, ::-2]
  result = from_dlpack(source)
  assert result.devices() == {gpu}, f"on {result.devices()}"
  np.testing.assert_array_equal(np.asarray(result), cupy.asnumpy(source))
  return f"copied on {gpu}"


@_case("a JAX CUDA array's DLPack round trip stays on its GPU, unshared "
       "only when asked")
def jax_cuda_round_trip(from_dlpack: FromDLPack) -> str:
  """Fails if the result leaves the GPU, copy=False copies or copy=True shares.

  A copy has another buffer address; a shared buffer, the same address.
  """
  gpu = _require_gpu()
  source = jax.device_put(jax.numpy.arange(16.0), gpu)
  shared = from_dlpack(DLPackOnly(source), copy=False)
  assert shared.devices() == {gpu}, f"on {shared.devices()}"
  assert shared.unsafe_buffer_pointer() == source.unsafe_buffer_pointer(), (
      "copy=False copied")
  copied = from_dlpack(DLPackOnly(source), copy=True)
  assert copied.unsafe_buffer_pointer() != source.unsafe_buffer_pointer(), (
      "copy=True shared")
  return f"on {gpu}"


@_case("a JAX CUDA array exports to torch without a copy, READ_ONLY")
def jax_cuda_exports_to_torch(from_dlpack: FromDLPack) -> str:
  """Fails on a wrong 1.x capsule, or a wrong tensor in torch.

  The capsule must be READ_ONLY and on kDLCUDA; torch must get the same
  address (not a copy) and a tensor on the GPU.
  """
  del from_dlpack
  gpu = _require_gpu()
  torch = _require_torch_cuda()
  x: Any = jax.device_put(jax.numpy.arange(16.0), gpu)
  info = dlpack_capsule.inspect(x.__dlpack__(max_version=(1, 0)))
  assert info.read_only and info.device[0] == dlpack_device.KDL_CUDA, info
  tensor = torch.from_dlpack(x)
  assert tensor.data_ptr() == x.unsafe_buffer_pointer(), "exported a copy"
  assert tensor.device.type == "cuda", tensor.device
  return "shares"


@_case("jax.Array.__dlpack__(stream=0 or -2) on a GPU raises BufferError")
def jax_cuda_export_stream_zero_raises(from_dlpack: FromDLPack) -> str:
  """Fails if stream=0 or -2, which DLPack forbids for CUDA, exports.

  0 is ambiguous and -2 no stream at all; neither may reach jaxlib.
  """
  del from_dlpack
  gpu = _require_gpu()
  x: Any = jax.device_put(jax.numpy.arange(4.0), gpu)
  for stream in (0, -2):
    _expect_raises(lambda: x.__dlpack__(stream=stream), BufferError)
  return "raises BufferError for 0 and -2"


# The cases that need a GPU: jax-patch's baseline of upstream's results was
# measured on CPUs only. `--require-gpu` fails unless each passes.
GPU_CASES = frozenset({
    "torch_cuda_tensor_shares", "torch_cuda_side_stream_is_ordered",
    "torch_cuda_misaligned_imports",
    "torch_cuda_copy_true_is_independent", "torch_cuda_strided_imports",
    "torch_cuda_to_cpu_copies", "torch_pinned_host_imports",
    "torch_pinned_host_copy_true_is_independent",
    "torch_pinned_host_strided_imports", "numpy_to_gpu_moves",
    "cupy_array_shares", "cupy_strided_imports", "jax_cuda_round_trip",
    "jax_cuda_exports_to_torch", "jax_cuda_export_stream_zero_raises"})

# The cases that never run where JAX has CUDA, with why: `--require-gpu`
# lets them skip there.
SKIPS_WHERE_JAX_HAS_CUDA = {
    "cuda_host_source_gets_no_stream":
        "its stand-in producer needs a JAX without CUDA; with CUDA, the "
        "torch_pinned_host_* cases import real pinned tensors instead",
}


# Export: jax.Array.__dlpack__ and __dlpack_device__, as the running JAX has
# them (patched by install(), or vendored).


@_case("jax.Array.__dlpack__(max_version=(1, 0)) returns a READ_ONLY 1.x "
       "capsule")
def export_versioned_read_only(from_dlpack: FromDLPack) -> str:
  del from_dlpack
  x: Any = jax.numpy.arange(4.0)
  info = dlpack_capsule.inspect(x.__dlpack__(max_version=(1, 0)))
  assert info.versioned, "a 0.x capsule"
  assert info.read_only, "READ_ONLY is not set"
  return f"DLPack {info.version[0]}.{info.version[1]}, READ_ONLY"


@_case("jax.Array.__dlpack__(copy=True) exports a copy marked IS_COPIED")
def export_copy_true_is_copied(from_dlpack: FromDLPack) -> str:
  del from_dlpack
  x: Any = jax.numpy.arange(4.0)
  info = dlpack_capsule.inspect(x.__dlpack__(max_version=(1, 0), copy=True))
  assert info.address != x.unsafe_buffer_pointer(), "exported the original"
  assert info.is_copied, "IS_COPIED is not set"
  return "IS_COPIED"


@_case("jax.Array.__dlpack__ to a platform JAX lacks raises BufferError")
def export_missing_platform_raises(from_dlpack: FromDLPack) -> str:
  del from_dlpack
  x: Any = jax.numpy.arange(4.0)
  return _expect_raises(
      lambda: x.__dlpack__(dl_device=(absent_gpu_device_type(), 0)),
      BufferError)


@_case("jax.Array.__dlpack__(stream=<not an int>) raises TypeError")
def export_stream_of_wrong_type_raises(from_dlpack: FromDLPack) -> str:
  del from_dlpack
  x: Any = jax.numpy.arange(4.0)
  return _expect_raises(lambda: x.__dlpack__(stream=object()), TypeError)


@_case("jax.Array.__dlpack__(stream=0 or -2) on the CPU raises BufferError "
       "(host memory has no streams)")
def export_cpu_stream_raises(from_dlpack: FromDLPack) -> str:
  del from_dlpack
  x: Any = jax.numpy.arange(4.0)
  for stream in (0, -2):
    for max_version in (None, (1, 0)):
      _expect_raises(
          lambda: x.__dlpack__(stream=stream, max_version=max_version),
          BufferError)
  return "raises BufferError for 0 and -2, 0.x and 1.x"


@_case("a jax.Array on a one-device NamedSharding exports, reporting its "
       "device")
def export_one_device_named_sharding(from_dlpack: FromDLPack) -> str:
  del from_dlpack
  device = jax.devices("cpu")[0]
  one_device = NamedSharding(Mesh(np.array([device]), ("x",)),
                             PartitionSpec())  # type: ignore[no-untyped-call]
  x: Any = jax.device_put(jax.numpy.arange(4.0), one_device)
  reported = tuple(x.__dlpack_device__())
  assert reported == (dlpack_device.KDL_CPU, 0), f"reports {reported}"
  for max_version in (None, (1, 0)):
    exported = np.from_dlpack(
        PreparedCapsule(x.__dlpack__(max_version=max_version)))
    np.testing.assert_array_equal(exported, np.arange(4.0))
  return f"exports from {device}"


@_case("jax.Array.__dlpack__(max_version=(0, 8)) returns a 0.x capsule "
       "holding a copy (0.x cannot say READ_ONLY)")
def export_legacy_max_version_is_a_copy(from_dlpack: FromDLPack) -> str:
  del from_dlpack
  x: Any = jax.numpy.arange(4.0)
  info = dlpack_capsule.inspect(x.__dlpack__(max_version=(0, 8)))
  assert not info.versioned, f"a {info.version} capsule"
  assert info.address != x.unsafe_buffer_pointer(), (
      "a writable alias of the JAX buffer")
  return "0.x copy"


@_case("a DLPack round trip of a jax.Array on cpu:1 stays on cpu:1")
def dlpack_round_trip_keeps_device(from_dlpack: FromDLPack) -> str:
  devices = _require_devices(2)
  source = jax.device_put(jax.numpy.arange(4.0), devices[1])
  result = from_dlpack(DLPackOnly(source))
  assert result.devices() == {devices[1]}, f"came back on {result.devices()}"
  return f"stays on {devices[1]}"


@_case("jax.Array.__dlpack__(dl_device=(kDLCPU, 0 or 1)) from cpu:0 or cpu:1 "
       "exports an alias, copy=False too (host memory is one)")
def export_cpu_dl_device_any_id_aliases(from_dlpack: FromDLPack) -> str:
  """Fails if a CPU array asked for kDLCPU with another id is copied.

  Or moved, or refused under copy=False: the CPU id rule of
  docs/behaviour.md.
  """
  del from_dlpack
  devices = _require_devices(2)
  for source in devices:
    x: Any = jax.device_put(jax.numpy.arange(4.0), source)
    for device_id in (0, 1):
      for copy in (None, False):
        info = dlpack_capsule.inspect(x.__dlpack__(
            max_version=(1, 0), dl_device=(dlpack_device.KDL_CPU, device_id),
            copy=copy))
        assert info.address == x.unsafe_buffer_pointer(), (
            f"dl_device=(1, {device_id}), copy={copy} from {source} "
            "exported a copy")
  return "aliases from cpu:0 and cpu:1, for ids 0 and 1"


@_case("jax.Array.__dlpack__ of an int4 array raises BufferError naming the "
       "dtype and the type to convert to")
def export_int4_raises_with_conversion_hint(from_dlpack: FromDLPack) -> str:
  """Fails if jaxlib's own error escapes, or the message gives no route."""
  del from_dlpack
  int4 = np.dtype(ml_dtypes.int4)
  if not dlpack_compat.jax_has_dtype(int4):
    raise unittest.SkipTest(f"JAX {jax.__version__} has no int4 arrays")
  x: Any = jax.device_put(np.zeros(4, int4))
  for max_version in (None, (1, 0)):
    _expect_raises(lambda: x.__dlpack__(max_version=max_version),
                   BufferError, mentions="x.astype(jnp.int8)")
  return _expect_raises(lambda: x.__dlpack__(), BufferError,
                        mentions="int4")


@_case("jax.Array.__dlpack__ answers max_version 1.0, 1.1, 1.99 and 2.0 with "
       "a 1.x capsule; a copy is stamped no newer than asked")
def export_max_version_negotiated(from_dlpack: FromDLPack) -> str:
  """Fails on a 0.x capsule, a 2.x stamp, or a copy stamped newer than asked.

  A 1.x consumer asked; a 2.x consumer would misread a 1.x capsule stamped 2.

  Minor versions of one major share the ABI, so an alias may carry its
  exporter's own 1.x minor (jaxlib 0.12 stamps 1.3 whatever was asked).
  """
  del from_dlpack
  x: Any = jax.numpy.arange(4.0)
  stamped = []
  for asked in ((1, 0), (1, 1), (1, 99), (2, 0)):
    for copy in (None, True):
      info = dlpack_capsule.inspect(x.__dlpack__(max_version=asked,
                                                 copy=copy))
      assert info.versioned, f"a 0.x capsule for max_version={asked}"
      assert info.version[0] == 1, (
          f"stamped {info.version} for max_version={asked}")
      assert not copy or info.version <= asked, (
          f"a copy stamped {info.version} for max_version={asked}")
      stamped.append(info.version)
  return f"stamps {sorted(set(stamped))}"


@_case("jax.Array.__dlpack__(stream=-1) (no synchronisation) on the CPU "
       "exports, 0.x and 1.x")
def export_cpu_stream_minus_one_exports(from_dlpack: FromDLPack) -> str:
  """Fails if the DLPack spec's "no synchronisation" is refused on a CPU."""
  del from_dlpack
  x: Any = jax.numpy.arange(4.0)
  for max_version in (None, (1, 0)):
    exported = np.from_dlpack(PreparedCapsule(
        x.__dlpack__(stream=-1, max_version=max_version)))
    np.testing.assert_array_equal(exported, np.arange(4.0))
  return "exports"


class RaisingDeviceProducer:
  """A producer whose ``__dlpack_device__`` raises ``error``."""

  def __init__(self, error: BaseException):
    self.error = error
    self.asked_for_capsule = False

  def __dlpack_device__(self) -> tuple[int, int]:
    raise self.error

  def __dlpack__(self, **kwargs: Any) -> Any:
    del kwargs
    self.asked_for_capsule = True
    raise AssertionError("__dlpack__ called after __dlpack_device__ raised")


@_case("a producer whose __dlpack_device__ raises: its BufferError, or any "
       "other error, propagates unchanged")
def producer_device_error_propagates(from_dlpack: FromDLPack) -> str:
  """Fails if the producer's error is replaced, wrapped, or swallowed."""
  for error in (BufferError("cannot say where"), RuntimeError("device lost")):
    producer = RaisingDeviceProducer(error)
    try:
      from_dlpack(producer)
    except Exception as err:  # pylint: disable=broad-except
      assert err is error, f"raised {type(err).__name__}({err}), not {error!r}"
    else:
      raise AssertionError(f"imported, though __dlpack_device__ raised "
                           f"{error!r}")
    assert not producer.asked_for_capsule
  return "propagates BufferError and RuntimeError"


# The accelerator: JAX's default device where it is a GPU or TPU. Each case
# names what it tests there; `--require-accelerator` fails unless each
# passes.


def _require_accelerator() -> Any:
  """JAX's default device, when it is an accelerator (a GPU or a TPU)."""
  device = jax.devices()[0]
  if device.platform == "cpu":
    raise unittest.SkipTest(
        "needs an accelerator (a GPU or TPU) as JAX's default device; here "
        "it is the CPU")
  return device


# A tear is a write made to the source after from_dlpack returned, seen in
# the result: 64 MB, written whole at once, 20 times.
TEAR_ROUNDS = 20
TEAR_BYTES = 64 * 2**20


def torn_imports(from_dlpack: FromDLPack, device: Any, copy: bool | None,
                 nbytes: int = TEAR_BYTES) -> int:
  """How many of ``TEAR_ROUNDS`` imports onto ``device`` saw a later write."""
  source = aligned_array((nbytes // 4,), np.float32)
  torn = 0
  for _ in range(TEAR_ROUNDS):
    source[...] = 0
    result = from_dlpack(source, device=device, copy=copy)
    source[...] = 1  # At once: a transfer still reading would see it.
    torn += bool(np.asarray(result).any())
  return torn


@_case("a NumPy array with device=<accelerator> moves there with copy=None "
       "and copy=True, untorn; copy=False raises")
def numpy_to_accelerator_moves(from_dlpack: FromDLPack) -> str:
  """Fails if the result is off the accelerator, wrong, torn, or unrefused.

  Torn: it sees a write made after the import returned; unrefused:
  copy=False imports.
  """
  accelerator = _require_accelerator()
  for copy in (None, True):
    source = aligned_array((1024,))
    result = from_dlpack(source, device=accelerator, copy=copy)
    source[0] = _SENTINEL
    assert result.devices() == {accelerator}, f"on {result.devices()}"
    np.testing.assert_array_equal(np.asarray(result), np.arange(1024.0))
  source = aligned_array((1024,))
  _expect_raises(lambda: from_dlpack(source, device=accelerator, copy=False),
                 BufferError, ValueError, mentions="copy=False")
  return f"moves to {accelerator}; copy=False raises"


@_case(f"{TEAR_ROUNDS} imports of {TEAR_BYTES >> 20} MB NumPy arrays onto "
       "the accelerator never show a write made after from_dlpack returned")
def numpy_to_accelerator_is_never_torn(from_dlpack: FromDLPack) -> str:
  """Fails if any result shows the source as written after the import."""
  accelerator = _require_accelerator()
  torn = {copy: torn_imports(from_dlpack, accelerator, copy)
          for copy in (None, True)}
  assert not any(torn.values()), f"torn imports of {TEAR_ROUNDS}: {torn}"
  return f"0 of {TEAR_ROUNDS} torn, copy=None and copy=True"


def _is_deleted_with(result: Any, source: Any) -> bool:
  """Whether deleting ``source`` takes ``result``'s buffer too.

  The accelerator's memory cannot be written from here, so sharing is shown
  by deletion: an independent buffer outlives its source's.
  """
  source.delete()
  try:
    np.asarray(result)
  except RuntimeError:  # jaxlib's runtime error says the buffer is gone.
    return True
  return bool(result.is_deleted())


@_case("a jax.Array on the accelerator stays there: shared with copy=None "
       "and copy=False, copied there with copy=True")
def accelerator_array_stays(from_dlpack: FromDLPack) -> str:
  """Fails if the result leaves the accelerator, or shares or copies wrongly.

  copy=None and copy=False must share; copy=True must copy.
  """
  accelerator = _require_accelerator()
  for copy, shared in ((None, True), (False, True), (True, False)):
    source = jax.device_put(jax.numpy.arange(16.0), accelerator)
    result = from_dlpack(source, copy=copy)
    assert result.devices() == {accelerator}, f"on {result.devices()}"
    np.testing.assert_array_equal(np.asarray(result), np.arange(16.0))
    assert _is_deleted_with(result, source) == shared, (
        f"copy={copy} {'copied' if shared else 'shared'}")
  return f"stays on {accelerator}"


@_case("a jax.Array on the accelerator with device=<CPU> moves to the CPU; "
       "copy=False raises")
def accelerator_array_to_cpu_moves(from_dlpack: FromDLPack) -> str:
  """Fails if the result is off the CPU or wrong, or copy=False moves it."""
  accelerator = _require_accelerator()
  cpu = jax.devices("cpu")[0]
  source = jax.device_put(jax.numpy.arange(16.0), accelerator)
  result = from_dlpack(source, device=cpu)
  assert result.devices() == {cpu}, f"on {result.devices()}"
  np.testing.assert_array_equal(np.asarray(result), np.arange(16.0))
  _expect_raises(lambda: from_dlpack(source, device=cpu, copy=False),
                 BufferError, ValueError, mentions="copy=False")
  return f"moves from {accelerator} to {cpu}; copy=False raises"


def _torch_or_none() -> Any:
  if importlib.util.find_spec("torch") is None:
    return None
  return importlib.import_module("torch")


@_case("export from the accelerator: memory DLPack names (CUDA, ROCm) exports "
       "READ_ONLY; memory it cannot name (TPU) raises BufferError from every "
       "entry point, naming the route to the host")
def accelerator_export(from_dlpack: FromDLPack) -> str:
  """Fails if jaxlib's error escapes, or an export is wrong or misdescribed.

  Misdescribed: a consumer gets memory DLPack cannot name.
  """
  del from_dlpack
  accelerator = _require_accelerator()
  x: Any = jax.device_put(jax.numpy.arange(4.0), accelerator)
  if accelerator.platform == "gpu":
    info = dlpack_capsule.inspect(x.__dlpack__(max_version=(1, 0)))
    assert info.device[0] in (dlpack_device.KDL_CUDA,
                              dlpack_device.KDL_ROCM), info.device
    assert info.read_only, "READ_ONLY is not set"
    return f"exports {info.device}, READ_ONLY"
  entry_points: dict[str, Callable[[], Any]] = {
      "__dlpack__()": x.__dlpack__,
      "__dlpack__(max_version=(1, 0))":
          lambda: x.__dlpack__(max_version=(1, 0)),
      "__dlpack__(copy=True)": lambda: x.__dlpack__(copy=True),
      "__dlpack_device__()": x.__dlpack_device__,
      "np.from_dlpack(x)": lambda: np.from_dlpack(x),
  }
  torch = _torch_or_none()
  if torch is not None:
    entry_points["torch.from_dlpack(x)"] = lambda: torch.from_dlpack(x)
  for name, call in entry_points.items():
    try:
      _expect_raises(call, BufferError, mentions="dl_device=(1, 0)")
    except AssertionError as err:
      raise AssertionError(f"{name}: {err}") from None
  return f"BufferError from {len(entry_points)} entry points"


@_case("asked for the host (dl_device=(kDLCPU, 0)), an accelerator array "
       "exports a writable host copy: IS_COPIED in 1.x, plain 0.x; "
       "copy=False raises")
def accelerator_export_to_host(from_dlpack: FromDLPack) -> str:
  """Fails on a missing, read-only, unflagged or shared host copy.

  Shared: a write to it shows in the accelerator array. copy=False must
  raise.
  """
  del from_dlpack
  accelerator = _require_accelerator()
  x: Any = jax.device_put(jax.numpy.arange(4.0), accelerator)
  host = (dlpack_device.KDL_CPU, 0)
  info = dlpack_capsule.inspect(x.__dlpack__(max_version=(1, 0),
                                             dl_device=host))
  assert info.versioned and info.device == host, info
  assert info.is_copied and not info.read_only, f"flags {info.flags}"
  legacy = dlpack_capsule.inspect(x.__dlpack__(dl_device=host))
  assert not legacy.versioned and legacy.device == host, legacy
  copied: Any = np.from_dlpack(x, device="cpu")
  assert copied.flags.writeable, "NumPy got a read-only host copy"
  copied[0] = _SENTINEL
  np.testing.assert_array_equal(np.asarray(x), np.arange(4.0))
  _expect_raises(lambda: x.__dlpack__(max_version=(1, 0), dl_device=host,
                                      copy=False), BufferError)
  return "writable host copy; copy=False raises"


@_case("export streams the accelerator's memory cannot take raise "
       "BufferError, never jaxlib's error")
def accelerator_export_bad_stream_raises(from_dlpack: FromDLPack) -> str:
  """Fails if a stream DLPack rules out there reaches jaxlib or exports."""
  del from_dlpack
  accelerator = _require_accelerator()
  x: Any = jax.device_put(jax.numpy.arange(4.0), accelerator)
  version = accelerator.client.platform_version
  bad = {"cuda": (0, -2), "rocm": (1, 2, -2)}.get(
      next((name for name in ("cuda", "rocm") if name in version), ""),
      (0, 1, 2, 3, -2))
  host = (dlpack_device.KDL_CPU, 0)
  for stream in bad:
    for max_version in (None, (1, 0)):
      _expect_raises(lambda: x.__dlpack__(stream=stream,
                                          max_version=max_version),
                     BufferError)
  for stream in (0, 1, 2, -2):  # The host copy's memory has no streams.
    _expect_raises(lambda: x.__dlpack__(stream=stream, dl_device=host),
                   BufferError)
  return f"raises for streams {bad}, and for any but None/-1 to the host"


ACCELERATOR_CASES = frozenset({
    "numpy_to_accelerator_moves", "numpy_to_accelerator_is_never_torn",
    "accelerator_array_stays", "accelerator_array_to_cpu_moves",
    "accelerator_export", "accelerator_export_to_host",
    "accelerator_export_bad_stream_raises"})
