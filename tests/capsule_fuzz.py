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

"""Structure fuzzing of ``from_dlpack``'s capsule path: the worker process.

Hypothesis builds DLPack 0.x (``"dltensor"``) and 1.x
(``"dltensor_versioned"``) managed tensors field by field with ctypes: a
valid tensor over a NumPy buffer the case owns, plus at most one adversarial
corruption (see ``CORRUPTIONS``). Each case is imported with
``from_dlpack(producer, copy=..., device=...)`` and held to this contract:

* The import returns an array equal to the tensor's elements (read with
  NumPy, in the dtype JAX holds them in the worker's x64 mode: 64-bit
  types kept with ``jax_enable_x64`` on, narrowed to 32 bits with it off,
  the worker taking its mode from ``JAX_ENABLE_X64``), or raises
  ``BufferError`` (``CopyRequiredError`` and ``UnsupportedDeviceError`` are
  ones). Any other exception fails. A returned array is on ``device`` (the
  producer's device if ``None``), and keeps ``copy``'s promise: under
  ``copy=True`` it shares no memory with the producer (unless the capsule
  says IS_COPIED: the producer's copy is already independent), under
  ``copy=False`` it does (unless it has no elements).
* A corrupt tensor raises ``BufferError``: returning fails. The one
  corruption that can leave a valid tensor is a huge dimension beside a 0
  one: the tensor has no elements and describes no memory, so a zero-size
  array of exactly the described shape is accepted too.
* Once the result is deleted and ``gc.collect()`` has run, nothing holds
  the capsules ``__dlpack__`` made (but the producer, which then drops
  them), and the producer's deleter has run exactly once for each (never
  where it is NULL), and never while a result still aliases the producer's
  memory. The deleter poisons that memory, as a producer freeing it would,
  so that a result still reading it shows.

Every case is written to the ``--log`` file, flushed, before it runs: if the
process crashes (a segfault, an abort) the test that spawned it reports the
last case logged. A contract violation makes Hypothesis shrink the case and
the process exit nonzero. The last line printed is a JSON summary of the
batch, after ``SUMMARY_PREFIX``.

Usage, from the repository root::

  python -m tests.capsule_fuzz --seed 0 --examples 500 --log cases.jsonl
  python -m tests.capsule_fuzz --case '{"corruption": null, ...}'
"""

from __future__ import annotations

import os

if __name__ == "__main__":
  # Two CPU devices, for device=jax.devices("cpu")[1]; and no accelerator
  # backend, so that a capsule claiming CUDA memory (host memory here) can
  # never be handed to one. Set before JAX is imported, and only in a
  # worker: imported into a test process, this module changes nothing.
  if "--xla_force_host_platform_device_count" not in os.environ.get(
      "XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=2")
  os.environ["JAX_PLATFORMS"] = "cpu"

# pylint: disable=g-import-not-at-top
import argparse
import collections
import ctypes
import dataclasses
import gc
import json
import math
import sys
import time
import traceback
from typing import Any, Callable, Sequence
import weakref

import hypothesis
from hypothesis import strategies as st
import jax
import numpy as np

from jax_patch._src import dlpack
from jax_patch._src import dlpack_capsule
from jax_patch._src import dlpack_compat
from jax_patch._src import dlpack_errors
# pylint: enable=g-import-not-at-top

SUMMARY_PREFIX = "CAPSULE_FUZZ_SUMMARY "

# The adversarial corruptions, each applied to a valid tensor where it makes
# the tensor invalid (a corrupt stride where the dimension is at least 2, a
# corrupt data pointer where there are elements, ...).
CORRUPTIONS = (
    "null_data",                 # NULL data, nonzero size.
    "huge_ndim",                 # 65, 1000, 2**31-1.
    "negative_ndim",             # -1, -2**31.
    "null_shape",                # NULL shape, ndim > 0.
    "negative_dim",              # -1, -2, -2**63.
    "huge_dim",                  # 2**62, 2**63-1: more than any memory.
    "huge_dim_beside_zero",      # The same beside a 0 dimension.
    "huge_stride",               # +-2**62, 2**63-1, -2**63 on a dim >= 2,
                                 # or overflowing in bytes on a dim of 1.
    "huge_byte_offset",          # 2**63, 2**64-64, 2**64-1: data wraps.
    "unknown_dtype_code",        # 3 (opaque handle), 15..255.
    "bad_dtype_bits",            # 0, 7, 24, 255.
    "bad_lanes",                 # 0, 2, 65535.
    "bad_major",                 # 1.x capsule saying major 0, 2 or 255.
    "capsule_device_disagrees",  # Capsule on 2 or 99; producer says 1.
    "unknown_reported_device",   # __dlpack_device__ says (99, 0).
    "device_without_backend",    # Both say CUDA, which this JAX lacks.
)

# A zero-size array of the described shape is as correct as BufferError:
# see the module docstring.
_MAY_RETURN_EMPTY = frozenset({"huge_dim_beside_zero"})

_ALIGNMENT = 64
# How long a release may trail the result's deletion: see _await_release.
_RELEASE_GRACE_S = 0.25
_POISON = 0xA5
_KDL_CPU = dlpack_capsule.KDL_CPU

_CopyRequiredError = dlpack_errors.CopyRequiredError
_UnsupportedDeviceError = dlpack_errors.UnsupportedDeviceError
OUTCOMES = ("returned", "CopyRequiredError", "UnsupportedDeviceError",
            "BufferError", "other")


@dataclasses.dataclass(frozen=True)
class Case:
  """One managed tensor and one ``from_dlpack`` call, as plain data.

  Offsets are relative to the 64-byte aligned start of the case's buffer,
  so that a logged case replays exactly in another process.

  Attributes:
    corruption: one of ``CORRUPTIONS``, or ``None`` for a valid tensor.
    versioned: a 1.x ``"dltensor_versioned"`` capsule, else 0.x.
    major: the 1.x version (ignored for 0.x).
    minor: the 1.x version (ignored for 0.x).
    flags: the 1.x flags (ignored for 0.x).
    code: the DLDataType ``code`` field.
    bits: the DLDataType ``bits`` field.
    lanes: the DLDataType ``lanes`` field.
    ndim: the ``ndim`` field.
    shape: the values in the shape array.
    shape_null: the shape pointer is NULL.
    strides: the values in the strides array; ``None`` for a NULL pointer.
    base_dtype: ``(code, bits)`` of the valid tensor the buffer holds.
    region_offset: where the elements' region starts, in bytes.
    region_elements: how many elements the region holds.
    first_element: the index in the region of the tensor's first element.
    data_null: the data pointer is NULL.
    data_offset: where the data pointer points, in bytes.
    byte_offset: the ``byte_offset`` field.
    device_type: the capsule's device type (its device id is 0).
    reported_device: what ``__dlpack_device__`` returns.
    deleter: the managed tensor has a deleter; else it is NULL.
    copy: ``from_dlpack``'s ``copy``.
    device: the index in ``jax.devices("cpu")`` of ``from_dlpack``'s
      ``device``, or ``None``.
  """
  corruption: str | None
  versioned: bool
  major: int
  minor: int
  flags: int
  code: int
  bits: int
  lanes: int
  ndim: int
  shape: tuple[int, ...]
  shape_null: bool
  strides: tuple[int, ...] | None
  base_dtype: tuple[int, int]
  region_offset: int
  region_elements: int
  first_element: int
  data_null: bool
  data_offset: int
  byte_offset: int
  device_type: int
  reported_device: tuple[int, int]
  deleter: bool
  copy: bool | None
  device: int | None

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> Case:
    fields = json.loads(text)
    for name in ("shape", "base_dtype", "reported_device"):
      fields[name] = tuple(fields[name])
    if fields["strides"] is not None:
      fields["strides"] = tuple(fields["strides"])
    return cls(**fields)

  @property
  def kind(self) -> str:
    return self.corruption or "valid"


def _row_major(shape: Sequence[int]) -> tuple[int, ...]:
  # A dimension of 0 counts as 1, as dlpack_capsule computes NULL strides.
  strides, step = [], 1
  for dim in reversed(shape):
    strides.append(step)
    step *= max(dim, 1)
  return tuple(reversed(strides))


def _span(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, int]:
  """``(low, count)``: the lowest element offset reached, elements spanned."""
  if not math.prod(shape):
    return 0, 0
  extents = [stride * (dim - 1) for stride, dim in zip(strides, shape)]
  low = sum(e for e in extents if e < 0)
  return low, sum(e for e in extents if e > 0) - low + 1


@st.composite
def _strides(draw: Any, shape: list[int], explicit: bool) -> list[int] | None:
  """NULL, row-major, permuted, with gaps, reversed and/or broadcast."""
  if not explicit:
    return None
  ndim = len(shape)
  order = list(range(ndim))
  if draw(st.booleans()):
    order = draw(st.permutations(order))
  gaps = [1] * ndim
  if draw(st.booleans()):
    gaps = [draw(st.integers(1, 3)) for _ in range(ndim)]
  strides, step = [0] * ndim, 1
  for axis in reversed(order):  # order runs from outermost to innermost.
    step *= gaps[axis]
    strides[axis] = step
    step *= max(shape[axis], 1)
  for axis in range(ndim):
    if draw(st.integers(0, 3)) == 0:
      strides[axis] = -strides[axis]
    elif draw(st.integers(0, 7)) == 0:
      strides[axis] = 0  # Broadcast, as NumPy exports np.broadcast_to.
  return strides


@st.composite
def cases(draw: Any, corruptions: Sequence[str] = CORRUPTIONS) -> Case:
  """A valid tensor and at most one corruption (``None`` half the time)."""
  corruption = draw(st.one_of(st.none(), st.sampled_from(corruptions)))
  needs_elements = corruption in ("null_data", "huge_dim", "huge_stride",
                                  "huge_byte_offset")
  min_ndim = {"null_shape": 1, "negative_dim": 1, "huge_dim": 1,
              "huge_stride": 1, "huge_dim_beside_zero": 2}.get(corruption, 0)
  versioned = corruption == "bad_major" or draw(st.booleans())
  code, bits = draw(st.sampled_from(sorted(dlpack_capsule._DTYPES)))
  itemsize = dlpack_capsule._DTYPES[code, bits].itemsize
  ndim = draw(st.integers(min_ndim, 4))
  shape = [draw(st.integers(1 if needs_elements else 0, 5))
           for _ in range(ndim)]
  stride_axis = 0
  if corruption == "huge_stride":
    stride_axis = draw(st.integers(0, ndim - 1))
    # On a dimension of 1 the stride reaches nothing, and only its size in
    # bytes can overflow: jaxlib computes it all the same.
    shape[stride_axis] = (1 if draw(st.booleans())
                          else max(shape[stride_axis], 2))
  explicit = corruption == "huge_stride" or draw(st.booleans())
  strides = draw(_strides(shape, explicit))
  if corruption == "huge_stride":
    assert strides is not None
    strides[stride_axis] = strides[stride_axis] or 1  # Not broadcast.
  low, count = _span(shape, strides or _row_major(shape))
  misalign = draw(st.sampled_from([0, itemsize, 3 * itemsize, _ALIGNMENT]))
  first_byte = misalign + -low * itemsize
  byte_offset = draw(st.one_of(st.just(0), st.just(first_byte),
                               st.integers(0, first_byte)))
  flags = 0
  if versioned:
    flags = (draw(st.sampled_from([0, dlpack_capsule.FLAG_READ_ONLY]))
             | draw(st.sampled_from([0, dlpack_capsule.FLAG_IS_COPIED]))
             | draw(st.sampled_from([0, 1 << 3, 1 << 31, 1 << 63])))
  fields: dict[str, Any] = dict(
      corruption=corruption, versioned=versioned, major=1,
      minor=draw(st.integers(0, 3)) if versioned else 0, flags=flags,
      code=code, bits=bits, lanes=1, ndim=ndim, shape=shape,
      shape_null=ndim == 0 and draw(st.booleans()), strides=strides,
      base_dtype=(code, bits), region_offset=misalign,
      region_elements=count, first_element=-low,
      data_null=count == 0 and draw(st.booleans()),
      data_offset=first_byte - byte_offset, byte_offset=byte_offset,
      device_type=_KDL_CPU, reported_device=(_KDL_CPU, 0),
      deleter=draw(st.booleans()),
      copy=draw(st.sampled_from([None, True, False])),
      device=draw(st.sampled_from([None, 0, 1])))
  if fields["data_null"]:
    fields["byte_offset"] = fields["data_offset"] = 0
  _corrupt(draw, corruption, fields, stride_axis)
  fields["shape"] = tuple(fields["shape"])
  if fields["strides"] is not None:
    fields["strides"] = tuple(fields["strides"])
  return Case(**fields)


def _corrupt(draw: Any, corruption: str | None, fields: dict[str, Any],
             stride_axis: int) -> None:
  """Applies ``corruption`` to the valid tensor's ``fields``."""
  shape = fields["shape"]
  huge_dims = st.sampled_from([2**62, 2**63 - 1])
  if corruption in ("negative_dim", "huge_dim", "huge_dim_beside_zero"):
    axis = draw(st.integers(0, len(shape) - 1))
  if corruption is None:
    return
  elif corruption == "null_data":
    fields["data_null"] = True
  elif corruption == "huge_ndim":
    fields["ndim"] = draw(st.sampled_from([65, 1000, 2**31 - 1]))
  elif corruption == "negative_ndim":
    fields["ndim"] = draw(st.sampled_from([-1, -2**31]))
  elif corruption == "null_shape":
    fields["shape_null"] = True
  elif corruption == "negative_dim":
    shape[axis] = draw(st.sampled_from([-1, -2, -2**63]))
  elif corruption == "huge_dim":
    shape[axis] = draw(huge_dims)
  elif corruption == "huge_dim_beside_zero":
    zero = draw(st.integers(0, len(shape) - 2))
    zero += zero >= axis  # Another axis than the huge one.
    shape[axis], shape[zero] = draw(huge_dims), 0
  elif corruption == "huge_stride":
    huge = [2**62, -2**62, 2**63 - 1, -2**63]
    if shape[stride_axis] == 1:
      itemsize = dlpack_capsule._DTYPES[fields["base_dtype"]].itemsize
      huge = [s for s in huge if abs(s) * itemsize > 2**63 - 1]
    fields["strides"][stride_axis] = draw(st.sampled_from(huge))
  elif corruption == "huge_byte_offset":
    fields["byte_offset"] = draw(st.sampled_from([2**63, 2**64 - 64,
                                                  2**64 - 1]))
  elif corruption == "unknown_dtype_code":
    fields["code"] = draw(st.one_of(st.just(3), st.integers(15, 255)))
  elif corruption == "bad_dtype_bits":
    fields["bits"] = draw(st.sampled_from([0, 7, 24, 255]))
  elif corruption == "bad_lanes":
    fields["lanes"] = draw(st.sampled_from([0, 2, 65535]))
  elif corruption == "bad_major":
    fields["major"] = draw(st.sampled_from([0, 2, 255]))
  elif corruption == "capsule_device_disagrees":
    fields["device_type"] = draw(st.sampled_from([2, 99]))
  elif corruption == "unknown_reported_device":
    fields["reported_device"] = (99, 0)
  elif corruption == "device_without_backend":
    fields["device_type"], fields["reported_device"] = 2, (2, 0)
  else:
    raise ValueError(f"unknown corruption {corruption!r}")


class _TensorState:
  """What happened to one case's managed tensor; kept for the whole batch.

  Its managed tensor, shape and strides stay allocated for the batch too, so
  that no later case reuses their addresses: a deleter call arriving after
  its case ended is still charged to that case, and caught.
  """

  def __init__(self, case: Case, managed: Any, arrays: tuple[Any, ...],
               buffer: np.ndarray[Any, Any]):
    self.case = case
    self.managed = managed
    self.arrays = arrays
    self.name = (dlpack_capsule.VERSIONED_NAME if case.versioned
                 else dlpack_capsule.LEGACY_NAME)
    self.buffer = weakref.ref(buffer)
    self.dlpack_calls = 0
    self.deleter_calls = 0
    self.settled: int | None = None  # deleter_calls, once the case ended.

  def on_delete(self) -> None:
    self.deleter_calls += 1
    buffer = self.buffer()
    if buffer is not None:
      buffer[...] = _POISON  # As a producer freeing the memory would.


_states: dict[int, _TensorState] = {}
_stray_calls = [0]  # Deleter or destructor calls for no tensor of ours.


def _immortal(obj: Any) -> Any:
  """Returns ``obj``, with a reference that is never dropped."""
  ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
  return obj


def _capsule_api(name: str, restype: Any, *argtypes: Any) -> Any:
  # PYFUNCTYPE keeps the GIL held across the call, as the capsule API needs.
  return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_capsule_new = _capsule_api("PyCapsule_New", ctypes.py_object,
                            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
# Called from a capsule destructor, where the capsule's refcount is already
# zero: it must be passed as a raw pointer, never as a Python object.
_raw_capsule_get_name = _capsule_api("PyCapsule_GetName", ctypes.c_char_p,
                                     ctypes.c_void_p)
_raw_capsule_get_pointer = _capsule_api(
    "PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)
# A capsule keeps a pointer to its name, not a copy.
_CAPSULE_NAMES = {
    versioned: _immortal(ctypes.create_string_buffer(name))
    for versioned, name in ((False, dlpack_capsule.LEGACY_NAME),
                            (True, dlpack_capsule.VERSIONED_NAME))}


def _on_delete(address: int | None) -> None:
  state = _states.get(address or 0)
  if state is None:
    _stray_calls[0] += 1
  else:
    state.on_delete()


def _on_capsule_death(capsule: int | None) -> None:
  # Like a real producer's: a capsule still under its own name was never
  # consumed, and its tensor is released here.
  name = _raw_capsule_get_name(capsule)
  address = _raw_capsule_get_pointer(capsule, name)
  state = _states.get(address or 0)
  if state is None:
    _stray_calls[0] += 1
    return
  if name == state.name and state.case.deleter:
    state.on_delete()


# A producer's C callbacks: ctypes takes the GIL when C calls them, from any
# thread, as a real producer's deleter must.
_Callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# One deleter and one capsule destructor for all cases, alive until the
# process ends: jaxlib may free a leaked import during interpreter shutdown.
_DELETER = _immortal(_Callback(_on_delete))
_DESTRUCTOR = _immortal(_Callback(_on_capsule_death))


def _address(function: Any) -> int:
  address: int = ctypes.cast(function, ctypes.c_void_p).value or 0
  return address


class FuzzProducer:
  """A producer whose ``__dlpack__`` returns the case's managed tensor."""

  def __init__(self, case: Case):
    self.case = case
    dtype = dlpack_capsule._DTYPES[case.base_dtype]
    region_bytes = case.region_elements * dtype.itemsize
    self.buffer = np.zeros(
        2 * _ALIGNMENT + case.region_offset + region_bytes, np.uint8)
    self.start = -self.buffer.ctypes.data % _ALIGNMENT
    region = np.ndarray((case.region_elements,), dtype, buffer=self.buffer,
                        offset=self.start + case.region_offset)
    values = np.arange(case.region_elements) % 97 + 1
    region[...] = (values % 2 if dtype == np.bool_ else values).astype(
        np.float32).astype(dtype)
    self.address = self.buffer.ctypes.data + self.start
    shape = (ctypes.c_int64 * max(len(case.shape), 1))(*case.shape)
    strides = (ctypes.c_int64 * max(len(case.strides or ()), 1))(
        *(case.strides or ()))
    if case.versioned:
      managed: Any = dlpack_capsule._DLManagedTensorVersioned()
      managed.version.major, managed.version.minor = case.major, case.minor
      managed.flags = case.flags
    else:
      managed = dlpack_capsule._DLManagedTensor()
    managed.deleter = _address(_DELETER) if case.deleter else None
    tensor = managed.dl_tensor
    tensor.data = None if case.data_null else self.address + case.data_offset
    tensor.byte_offset = case.byte_offset
    tensor.device.device_type, tensor.device.device_id = case.device_type, 0
    tensor.ndim = case.ndim
    tensor.dtype.code, tensor.dtype.bits = case.code, case.bits
    tensor.dtype.lanes = case.lanes
    int64_pointer = ctypes.POINTER(ctypes.c_int64)
    tensor.shape = (int64_pointer() if case.shape_null
                    else ctypes.cast(shape, int64_pointer))
    tensor.strides = (int64_pointer() if case.strides is None
                      else ctypes.cast(strides, int64_pointer))
    self.state = _TensorState(case, managed, (shape, strides), self.buffer)
    self.capsules: list[Any] = []
    _states[ctypes.addressof(managed)] = self.state

  def expected(self) -> np.ndarray[Any, Any] | None:
    """The tensor's elements, canonicalised; ``None`` for a corrupt one."""
    case = self.case
    if case.corruption is not None:
      return None
    dtype = dlpack_capsule._DTYPES[case.base_dtype]
    canonical = jax.dtypes.canonicalize_dtype(dtype)
    if case.region_elements == 0:
      return np.empty(case.shape, canonical)
    strides = case.strides or _row_major(case.shape)
    # Built on the buffer, which NumPy checks holds every element: a valid
    # case never describes memory outside it.
    elements: np.ndarray[Any, Any] = np.ndarray(
        case.shape, dtype, buffer=self.buffer,
        offset=(self.start + case.region_offset
                + case.first_element * dtype.itemsize),
        strides=tuple(s * dtype.itemsize for s in strides))
    return elements.astype(canonical)

  def aliases(self, result: Any) -> bool:
    """Whether ``result``'s buffer lies in this producer's memory."""
    pointer: int = result.unsafe_buffer_pointer()
    low = self.buffer.ctypes.data
    return low <= pointer < low + self.buffer.nbytes

  def __dlpack_device__(self) -> tuple[int, int]:
    return self.case.reported_device

  def __dlpack__(self, **kwargs: Any) -> Any:
    del kwargs  # Like a producer that ignores what it cannot honour.
    self.state.dlpack_calls += 1
    capsule = _capsule_new(ctypes.addressof(self.state.managed),
                           ctypes.cast(_CAPSULE_NAMES[self.case.versioned],
                                       ctypes.c_char_p),
                           _address(_DESTRUCTOR))
    self.capsules.append(capsule)  # To show a consumer still holding it.
    return capsule


class ContractViolation(AssertionError):
  """A case broke the contract in the module docstring."""


def _violation(case: Case, message: str) -> ContractViolation:
  return ContractViolation(
      f"{case.kind} case: {message}\n  case: {case.to_json()}\n  replay: "
      f"{sys.executable} -m tests.capsule_fuzz --case '{case.to_json()}'")


def _outcome(error: BaseException | None) -> str:
  if error is None:
    return "returned"
  for cls in (_CopyRequiredError, _UnsupportedDeviceError, BufferError):
    if isinstance(error, cls):
      return cls.__name__
  return "other"


@dataclasses.dataclass
class Stats:
  """What a batch's cases did, for its summary line."""
  seed: int | None = None
  cases: int = 0
  outcomes: collections.Counter[str] = dataclasses.field(
      default_factory=collections.Counter)
  by_kind: dict[str, collections.Counter[str]] = dataclasses.field(
      default_factory=lambda: collections.defaultdict(collections.Counter))
  deleter_calls: int = 0
  expected_deleter_calls: int = 0
  late_releases: int = 0
  violations: int = 0

  def summary(self) -> dict[str, Any]:
    return {
        "seed": self.seed, "cases": self.cases,
        "x64": bool(jax.config.read("jax_enable_x64")),
        "outcomes": {o: self.outcomes[o] for o in OUTCOMES},
        "by_kind": {kind: {o: counts[o] for o in OUTCOMES}
                    for kind, counts in sorted(self.by_kind.items())},
        "deleter_calls": self.deleter_calls,
        "expected_deleter_calls": self.expected_deleter_calls,
        "late_releases": self.late_releases,
        "stray_calls": _stray_calls[0],
        "violations": self.violations,
    }

  def line(self) -> str:
    raised = ", ".join(f"{o} {self.outcomes[o]}" for o in OUTCOMES[1:])
    mode = "on" if jax.config.read("jax_enable_x64") else "off"
    return (f"capsule_fuzz seed={self.seed}, x64 {mode}: {self.cases} cases, "
            f"{self.outcomes['returned']} returned, raised: {raised}; "
            f"deleter calls {self.deleter_calls} of "
            f"{self.expected_deleter_calls} expected ({self.late_releases} "
            f"a moment late), {_stray_calls[0]} stray; {self.violations} "
            "violations")


Importer = Callable[..., Any]


def run_case(case: Case, stats: Stats,
             log: Callable[[str], None] = lambda line: None,
             importer: Importer = dlpack.from_dlpack,
             freeze: bool = False) -> None:
  """Imports ``case`` and checks the contract.

  Args:
    case: the case.
    stats: where to count what happened.
    log: called with the case's JSON before anything else.
    importer: ``from_dlpack``, or a stand-in that shows the checks failing.
    freeze: ``gc.freeze()`` what survives a passing case, as a worker
      process does: it keeps the next case's ``gc.collect()`` cheap.

  Raises:
    ContractViolation: the import broke the contract.
  """
  log(case.to_json())
  stats.cases += 1
  producer = FuzzProducer(case)
  state = producer.state
  try:
    _import_and_check(case, producer, stats, importer)
    gc.collect()
    # The producer's own references and getrefcount's argument aside, none
    # may remain. (A consumer may clear a consumed capsule's destructor, so
    # the destructor cannot tell whether the capsule died.)
    held = sum(sys.getrefcount(producer.capsules[i]) - 2
               for i in range(len(producer.capsules)))
    if held:
      raise _violation(case, f"{held} references to the producer's "
                       "capsules remain once the result is gone")
    producer.capsules.clear()  # Unconsumed, they release their tensor now.
    expected_calls = state.dlpack_calls if case.deleter else 0
    if state.deleter_calls < expected_calls:
      stats.late_releases += _await_release(state, expected_calls)
    stats.deleter_calls += state.deleter_calls
    stats.expected_deleter_calls += expected_calls
    state.settled = state.deleter_calls
    if state.deleter_calls != expected_calls:
      raise _violation(
          case, f"the deleter ran {state.deleter_calls} times; expected "
          f"{expected_calls} ({state.dlpack_calls} capsules, deleter "
          f"{'set' if case.deleter else 'NULL'})")
    if freeze:
      # What survived is Hypothesis's and the batch's own bookkeeping:
      # frozen, it costs the next case's collection nothing.
      gc.freeze()
  except ContractViolation:
    stats.violations += 1
    # A failing case's tensor may still be in use: keep its memory alive.
    _immortal(producer)
    raise


def _await_release(state: _TensorState, expected_calls: int) -> bool:
  """Waits a moment for deleter calls still to come; whether they came.

  jaxlib may drop its last hold on an imported buffer from one of its own
  threads a moment after the last Python reference goes (seen on 0.10.2
  when the import was copied to another CPU device): the DLPack spec lets a
  consumer call the deleter from any thread, at any time after its last use.
  """
  deadline = time.monotonic() + _RELEASE_GRACE_S
  while state.deleter_calls < expected_calls and time.monotonic() < deadline:
    time.sleep(0.001)
  return state.deleter_calls >= expected_calls


def _may_refuse_valid(case: Case, err: Exception) -> bool:
  """Whether a valid tensor may be refused so: only as the standard says
  (``copy=False`` when a copy is needed), or for a dtype this JAX lacks."""
  if isinstance(err, dlpack_errors.CopyRequiredError):
    return case.copy is False
  dtype = dlpack_capsule.numpy_dtype((case.code, case.bits, case.lanes))
  return dtype is not None and not dlpack_compat.jax_has_dtype(dtype)


def _import_and_check(case: Case, producer: FuzzProducer, stats: Stats,
                      importer: Importer) -> None:
  """Imports and checks what came back; leaves nothing of it alive."""
  expected = producer.expected()  # Before the deleter can poison it.
  device = None if case.device is None else jax.devices("cpu")[case.device]
  try:
    result = importer(producer, copy=case.copy, device=device)
  except Exception as err:  # pylint: disable=broad-except
    outcome = _outcome(err)
    stats.outcomes[outcome] += 1
    stats.by_kind[case.kind][outcome] += 1
    if outcome == "other":
      raise _violation(case, f"raised {type(err).__name__}, not BufferError: "
                       f"{err}") from err
    if case.corruption is None and not _may_refuse_valid(case, err):
      raise _violation(case, f"refused a valid tensor: {type(err).__name__}: "
                       f"{err}") from err
    return
  stats.outcomes["returned"] += 1
  stats.by_kind[case.kind]["returned"] += 1
  if expected is None:
    if case.corruption not in _MAY_RETURN_EMPTY:
      raise _violation(case, f"returned {result.shape} {result.dtype} for a "
                       "corrupt tensor; expected BufferError")
    if result.shape != case.shape or result.size:
      raise _violation(case, f"returned shape {result.shape} for a tensor of "
                       f"shape {case.shape}")
    return
  if producer.state.deleter_calls and producer.aliases(result):
    raise _violation(case, "the deleter ran while the result still aliases "
                     "the producer's memory")
  if result.dtype != expected.dtype or result.shape != expected.shape:
    raise _violation(case, f"returned {result.shape} {result.dtype}; "
                     f"expected {expected.shape} {expected.dtype}")
  target = jax.devices("cpu")[case.device or 0]
  if result.devices() != {target}:
    raise _violation(case, f"returned an array on {result.devices()}; "
                     f"expected {target}")
  is_copied = case.versioned and case.flags & dlpack_capsule.FLAG_IS_COPIED
  if case.copy is True and not is_copied and producer.aliases(result):
    raise _violation(case, "copy=True returned an array sharing the "
                     "producer's memory")
  if case.copy is False and result.size and not producer.aliases(result):
    raise _violation(case, "copy=False returned a copy")
  seen = np.asarray(result)
  if seen.tobytes() != expected.tobytes():
    raise _violation(case, f"returned {seen!r}; expected {expected!r}")


def late_calls() -> list[str]:
  """Cases whose deleter ran again after the case ended."""
  return [state.case.to_json() for state in _states.values()
          if state.settled is not None
          and state.settled != state.deleter_calls]


def _warm_up() -> None:
  """Imports once, then freezes what exists in the oldest GC generation.

  JAX leaves hundreds of thousands of objects behind: a full collection
  costs ~50 ms with them, ~10 us once they are frozen (never collected),
  which is what lets every case afford its ``gc.collect()``.
  """
  dlpack.from_dlpack(np.arange(4.0))
  jax.devices("cpu")
  gc.collect()
  gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--examples", type=int, default=500)
  parser.add_argument("--log", help="file each case is appended to first")
  parser.add_argument("--case", help="replay one case, as JSON")
  parser.add_argument(
      "--skip", action="append", default=[], choices=CORRUPTIONS,
      help="leave a corruption out, to look past a known failure (triage "
      "only: the test runs them all)")
  args = parser.parse_args(argv)
  _warm_up()
  stats = Stats(seed=None if args.case else args.seed)
  status = 0
  with open(args.log or os.devnull, "a", encoding="utf-8") as log_file:

    def log(line: str) -> None:
      log_file.write(line + "\n")
      log_file.flush()  # Survives a crash of this process.

    @hypothesis.seed(args.seed)
    @hypothesis.settings(
        max_examples=args.examples, database=None, deadline=None,
        derandomize=False, print_blob=False,
        suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(case=cases(
        [c for c in CORRUPTIONS if c not in args.skip]))
    def fuzz(case: Case) -> None:
      run_case(case, stats, log, freeze=True)

    try:
      if args.case:
        run_case(Case.from_json(args.case), stats, log, freeze=True)
      else:
        fuzz()
    except Exception:  # pylint: disable=broad-except
      traceback.print_exc()
      status = 1
  gc.collect()
  late = late_calls()
  if late or _stray_calls[0]:
    print(f"{len(late)} cases' deleters ran again after the case ended, "
          f"{_stray_calls[0]} calls for no tensor of ours; first: {late[:1]}",
          file=sys.stderr)
    status = 1
  print(stats.line())
  print(SUMMARY_PREFIX + json.dumps(stats.summary(), sort_keys=True))
  return status


def format_table(summaries: Sequence[dict[str, Any]]) -> str:
  """A Markdown table of outcomes by case kind, over batch summaries."""
  totals: dict[str, collections.Counter[str]] = collections.defaultdict(
      collections.Counter)
  deleter, expected, late, stray = 0, 0, 0, 0
  for summary in summaries:
    for kind, counts in summary["by_kind"].items():
      totals[kind].update(counts)
    deleter += summary["deleter_calls"]
    expected += summary["expected_deleter_calls"]
    late += summary["late_releases"]
    stray += summary["stray_calls"]
  lines = ["| case | cases | " + " | ".join(OUTCOMES) + " |",
           "|---|---:|" + "---:|" * len(OUTCOMES)]
  kinds = ["valid"] + [c for c in CORRUPTIONS if c in totals]
  for kind in kinds + ["all"]:
    counts = (sum(totals.values(), collections.Counter()) if kind == "all"
              else totals[kind])
    lines.append(f"| {kind} | {sum(counts.values())} | "
                 + " | ".join(str(counts[o]) for o in OUTCOMES) + " |")
  lines.append(f"\nDeleter calls: {deleter} of {expected} expected ({late} "
               f"a moment after the result's deletion); {stray} stray.")
  return "\n".join(lines)


if __name__ == "__main__":
  sys.exit(main())
