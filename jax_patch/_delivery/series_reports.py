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

"""The jaxlib defects the upstream series reports instead of working around.

A defect that lives in jaxlib's C++ (``jaxlib/dlpack.cc``) gets no Python
workaround in the series: it becomes a bug report for JAX's issue tracker,
with a standalone reproducer. ``jax-patch series`` writes each report that
affects the target's jaxlib range (``for_range``) as ``NNNN-slug.issue.md``
(``issue_text``) with its reproducer beside it, and ``--check`` runs the
reproducer against the installed jaxlib (``outcome``) and checks the result
against the jaxlib versions the report names (``verdict``).

The reproducer protocol: a reproducer checks the correct behaviour and
prints, as its last line on stdout, ``reproduces: <what it saw>`` or
``fixed: <what it saw>``, exiting 0 either way. For a report of a crash,
being killed by a signal is a reproduction. Anything else (another exit
status, no such line, a traceback) is an error: the script is broken, or
the jaxlib fails in a way the report does not describe. Reproducers import
only jax, jax.numpy, numpy, the standard library's os (to set XLA_FLAGS),
sys and gc and, to build a capsule no real producer makes, ctypes; never
jax_patch.

Every figure in a report was measured on Linux x86_64, CPU only, with
NumPy 2.4.6 and x64 off, with the jax and jaxlib pairs of ``MEASURED``.
jaxlib 0.12's C++ is not in JAX's main branch as checked out here
(``cec06d116c``, version 0.11.1, whose jaxlib/dlpack.cc reads no DLPack
1.x capsule); the C++ function names cited for jaxlib 0.12 are those of
that source and of jaxlib 0.12.0.1's own symbols (``libjax_common.so``).
jaxlib 0.11.2's C++ is not there either: what a report says 0.11.2 fixed
was measured, not read.
"""

from __future__ import annotations

import dataclasses
import signal
import textwrap

_VERDICTS = ("reproduces", "fixed")


@dataclasses.dataclass(frozen=True)
class JaxlibReport:
  """One jaxlib defect, as a bug report for JAX's issue tracker.

  Attributes:
    slug: the file name's stem, e.g. ``copy-false-ignores-is-copied``.
    title: the issue's title (at most 72 characters).
    what_happens: the measured behaviour, in plain prose.
    what_should: the expected behaviour.
    clause: the Array API standard's or DLPack's clause, quoted, with its
      URL.
    where: where in jaxlib's C++ the defect lives.
    affected: the jaxlib versions it affects: from (inclusive) to
      (exclusive; None where no jaxlib fixes it yet).
    crash: whether the defect kills the process (by a signal).
    reproducer: a standalone script following the reproducer protocol.
    cases: the conformance cases (``conformance.CASES``) that fail upstream
      because of it, with the jaxlibs it affects.
  """
  slug: str
  title: str
  what_happens: str
  what_should: str
  clause: str
  where: str
  affected: tuple[tuple[int, ...], tuple[int, ...] | None]
  crash: bool
  reproducer: str
  cases: tuple[str, ...]


# Where each report was measured: (jax, jaxlib, Python), each with NumPy
# 2.4.6 on Linux x86_64, CPU only, JAX_PLATFORMS=cpu and JAX_ENABLE_X64=0.
# Every report's reproducer was run on each, and reproduced exactly where
# its ``affected`` range says.
MEASURED: tuple[tuple[str, tuple[int, ...], str], ...] = (
    ("0.4.35", (0, 4, 35), "3.11.7"),
    ("0.10.2", (0, 10, 2), "3.11.7"),
    ("0.11.1", (0, 11, 1), "3.12.1"),
    ("0.12.0.1", (0, 11, 2), "3.12.1"),
    ("0.12.0.1", (0, 12, 0, 1), "3.12.1"),
)
MEASURED_ON = ("Linux x86_64, CPU only (`JAX_PLATFORMS=cpu`, "
               "`JAX_ENABLE_X64=0`), NumPy 2.4.6")


_COPY_FALSE_REPRODUCER = """\
# jnp.from_dlpack(x, copy=False) must refuse a DLPack 1.x capsule flagged
# IS_COPIED: the producer copied, so nothing can be imported without a copy.
import ctypes

import jax.numpy as jnp
import numpy as np

IS_COPIED = 1 << 1  # DLPACK_FLAG_BITMASK_IS_COPIED
# DLManagedTensorVersioned: version (2 x uint32), manager_ctx, deleter, flags.
FLAGS_OFFSET = 24
get_pointer = ctypes.PYFUNCTYPE(
    ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))


def aligned_arange(n):
  # 64-byte aligned: jaxlib's CPU client shares only such memory (otherwise
  # copy=False raises "... is not aligned to 64 bytes", hiding the bug).
  raw = np.empty(n * 4 + 64, np.uint8)
  out = np.ndarray((n,), np.float32, buffer=raw, offset=-raw.ctypes.data % 64)
  out[...] = np.arange(n)
  return out


class CopyingProducer:
  # Exports a fresh copy of its data and says so (IS_COPIED), as DLPack 1.x
  # has a producer do that cannot share its memory.

  def __init__(self, read_only):
    self.read_only = read_only  # As jaxlib 0.12 flags the copies it exports.
    self.copies = []

  def __dlpack__(self, **kwargs):
    del kwargs
    copy = aligned_arange(8)
    self.copies.append(copy)
    view = copy.view()
    view.flags.writeable = not self.read_only  # NumPy then sets READ_ONLY.
    capsule = view.__dlpack__(max_version=(1, 0))
    flags = ctypes.c_uint64.from_address(
        get_pointer(capsule, b"dltensor_versioned") + FLAGS_OFFSET)
    flags.value |= IS_COPIED
    return capsule

  def __dlpack_device__(self):
    return (1, 0)  # kDLCPU, device 0


imported, refused = [], []
for read_only in (False, True):
  kind = "READ_ONLY copy" if read_only else "copy"
  producer = CopyingProducer(read_only)
  try:
    y = jnp.from_dlpack(producer, copy=False)
  except Exception as err:  # pylint: disable=broad-except
    if "aligned" in str(err):
      raise  # Not this bug: the copy must be 64-byte aligned.
    refused.append(f"{kind}: {type(err).__name__}: "
                   f"{str(err).split('. ')[0]}")
  else:
    producer.copies[0][0] = 42.0
    aliases = float(np.asarray(y)[0]) == 42.0
    imported.append(f"{kind}: imported, {'' if aliases else 'not '}aliasing "
                    "the producer's copy")

if imported:
  print("reproduces: copy=False imported capsules flagged IS_COPIED ("
        + "; ".join(imported + refused) + ")")
else:
  print("fixed: copy=False raised (" + "; ".join(refused) + ")")
"""

_NULL_DELETER_REPRODUCER = """\
# A DLPack capsule whose deleter is NULL (DLPack allows one) must import,
# and the import must be freed, without killing the process.
import ctypes
import gc
import sys

import jax.numpy as jnp
import numpy as np

capsule_function = ctypes.PYFUNCTYPE(
    ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
get_pointer = capsule_function(("PyCapsule_GetPointer", ctypes.pythonapi))
is_valid = capsule_function(("PyCapsule_IsValid", ctypes.pythonapi))
# Where the deleter lies: DLManagedTensorVersioned is {version (2 x uint32),
# manager_ctx, deleter, flags, dl_tensor}; DLManagedTensor is {dl_tensor
# (48 bytes), manager_ctx, deleter}.
DELETER_OFFSET = {b"dltensor_versioned": 16, b"dltensor": 56}


class NullDeleterProducer:
  # NumPy's capsule, of the DLPack version the consumer asks for, with its
  # deleter set to NULL. It keeps NumPy's deleter, to call it itself once
  # the consumer is done, so that nothing leaks.

  def __init__(self, array):
    self.array = array
    self.to_release = []
    self.kind = None

  def __dlpack__(self, **kwargs):
    capsule = self.array.__dlpack__(**kwargs)
    name = next(n for n in DELETER_OFFSET if is_valid(capsule, n))
    managed = get_pointer(capsule, name)
    deleter = ctypes.c_void_p.from_address(managed + DELETER_OFFSET[name])
    self.to_release.append((managed, deleter.value))
    deleter.value = None
    self.kind = name.decode()
    print(f"importing a {self.kind!r} capsule whose deleter is NULL",
          file=sys.stderr, flush=True)
    return capsule

  def __dlpack_device__(self):
    return (1, 0)  # kDLCPU, device 0


# 64-byte aligned, so that jaxlib's CPU client imports it as a view.
raw = np.empty(16 * 4 + 64, np.uint8)
x = np.ndarray((16,), np.float32, buffer=raw, offset=-raw.ctypes.data % 64)
x[...] = np.arange(16)
producer = NullDeleterProducer(x)
try:
  y = jnp.from_dlpack(producer)
except RuntimeError as err:
  if "bad_function_call" not in str(err):
    raise
  result = (f"reproduces: from_dlpack of a {producer.kind!r} capsule raised "
            f"{type(err).__name__}: {err}")
else:
  assert np.asarray(y).tolist() == list(range(16)), np.asarray(y)
  y.delete()  # Frees the imported buffer: the process aborts here.
  del y
  gc.collect()
  result = (f"fixed: imported a {producer.kind!r} capsule whose deleter is "
            "NULL, read it and deleted it")
# The producer's own clean-up, now that JAX is done with its memory.
for managed, deleter in producer.to_release:
  ctypes.CFUNCTYPE(None, ctypes.c_void_p)(deleter)(managed)
print(result)
"""


_COPY_TRUE_REPRODUCER = """\
# jnp.from_dlpack(x, copy=True) must always copy: writing to x afterwards
# must leave the result as it was.
import jax.numpy as jnp
import numpy as np


def aligned_arange(n):
  # 64-byte aligned: jaxlib's CPU client shares only such host memory.
  raw = np.empty(n * 4 + 64, np.uint8)
  out = np.ndarray((n,), np.float32, buffer=raw, offset=-raw.ctypes.data % 64)
  out[...] = np.arange(n)
  return out


x = aligned_arange(1024)
y = jnp.from_dlpack(x, copy=True)
same_address = y.unsafe_buffer_pointer() == x.ctypes.data
x[...] = -1.0
changed = int((np.asarray(y) == -1.0).sum())
if changed:
  print(f"reproduces: after x[...] = -1, {changed} of {x.size} elements of "
        "jnp.from_dlpack(x, copy=True) read -1 (its buffer is "
        f"{'' if same_address else 'not '}at x's address)")
else:
  print("fixed: x[...] = -1 left jnp.from_dlpack(x, copy=True) unchanged")
"""

_NON_COMPACT_REPRODUCER = """\
# from_dlpack must import a host tensor with non-compact strides under
# copy=None or copy=True: it cannot share the memory, so it copies it.
import jax.numpy as jnp
import numpy as np

x = np.arange(16, dtype=np.float32)
sources = {
    "x[::2]": x[::2],
    "x[::-1]": x[::-1],
    "x.reshape(4, 4)[:, :2]": x.reshape(4, 4)[:, :2],
    "np.broadcast_to(x[:4], (3, 4))": np.broadcast_to(x[:4], (3, 4)),
}
refused, imported, not_exported = [], [], []
for name, source in sources.items():
  for copy in (None, True):
    try:
      y = jnp.from_dlpack(source, copy=copy)
    except BufferError as err:
      # NumPy exports no read-only array (a broadcast is one) as DLPack 0.x,
      # the only version jaxlib before 0.12 reads: jaxlib never sees it.
      if "readonly" not in str(err):
        raise
      not_exported.append(f"{name}, copy={copy}")
    except Exception as err:  # pylint: disable=broad-except
      if "compact" not in str(err):
        raise
      message = str(err).split(";")[0]
      refused.append(f"{name}, copy={copy}")
    else:
      assert np.array_equal(np.asarray(y), source), (name, copy, y)
      imported.append(f"{name}, copy={copy}")

skipped = (f"; NumPy did not export {len(not_exported)} (read-only)"
           if not_exported else "")
if refused:
  print(f"reproduces: {len(refused)} of {len(refused) + len(imported)} "
        f"imports raised {message!r} ({'; '.join(refused)}){skipped}")
else:
  print(f"fixed: all {len(imported)} imports copied the strided tensor "
        f"right{skipped}")
"""

_UNALIGNED_UNFINISHED_REPRODUCER = """\
# Once jnp.from_dlpack(x) returns, it must be done reading x. Here x is not
# 64-byte aligned, so jaxlib copies it (its CPU client shares only aligned
# host memory): writing to x right after the return must not reach the copy.
import jax.numpy as jnp
import numpy as np

SIZE = 1 << 23  # 32 MiB of float32: a copy that takes a while.
TRIES = 20
not_ready = changed = torn = 0
for _ in range(TRIES):
  x = np.ones(SIZE + 1, np.float32)[1:]  # 4 bytes into its allocation.
  assert x.ctypes.data % 64, "x must not be 64-byte aligned"
  y = jnp.from_dlpack(x)
  ready = y.is_ready()
  x[-1] = 2.0  # First where a front-to-back copy reads last.
  x[...] = 2.0
  # float32: no dtype conversion (float64 with x64 off would be converted
  # in Python, another copy), so the copy is jaxlib's.
  assert y.dtype == np.float32, y.dtype
  values = np.unique(np.asarray(y)).tolist()
  not_ready += not ready
  changed += values != [1.0]
  torn += len(values) > 1

if changed:
  print(f"reproduces: of {TRIES} imports of 32 MiB of unaligned 1.0s, "
        f"{not_ready} were not ready when from_dlpack returned, and in "
        f"{changed} the write of 2.0 to x after the return reached the "
        f"result ({torn} torn: part 1.0, part 2.0)")
else:
  print(f"fixed: of {TRIES} imports of 32 MiB of unaligned 1.0s, none "
        f"changed when x was written after the return ({not_ready} were not "
        "ready when from_dlpack returned)")
"""

_NON_ROW_MAJOR_REPRODUCER = """\
# A host array in a compact but not row-major layout (x.T, a permutation)
# imported by from_dlpack must keep its values when jax.device_put moves it
# to another device.
import os

# Two CPU devices; read when JAX starts its CPU backend.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2")

import jax
import jax.numpy as jnp
import numpy as np


def aligned_arange(shape):
  # 64-byte aligned: jaxlib's CPU client shares only such host memory.
  n = int(np.prod(shape))
  raw = np.empty(n * 4 + 64, np.uint8)
  out = np.ndarray(shape, np.float32, buffer=raw,
                   offset=-raw.ctypes.data % 64)
  out[...] = np.arange(n).reshape(shape)
  return out


other = jax.devices()[1]
wrong, right, cannot_compute = [], [], []
for shape, axes in (((4, 6), (1, 0)), ((2, 3, 4), (1, 2, 0)),
                    ((2, 3, 4), (2, 1, 0))):
  x = aligned_arange(shape).transpose(axes)
  name = f"arange{shape}.transpose{axes}"
  y = jnp.from_dlpack(x)
  aliased = y.unsafe_buffer_pointer() == x.ctypes.data
  try:
    here = np.asarray(y * 1)
  except AssertionError as err:
    # JAX before 0.5.1 computes with no such alias, moved or not ("Unexpected
    # XLA layout override"): a failure other than this one.
    if "layout" not in str(err):
      raise
    assert np.array_equal(np.asarray(jax.device_put(y, other)), x), name
    cannot_compute.append(f"{name}: {str(err).split(':')[0]}")
    continue
  # The import itself must be right, or this is another bug.
  assert np.array_equal(here, x), f"{name} imports wrong values"
  moved = np.asarray(jax.device_put(y, other) * 1)
  bad = int((moved != x).sum())
  (wrong if bad else right).append(
      f"{name}{' (aliased)' if aliased else ''}: "
      + (f"{bad} of {x.size} wrong" if bad else "right"))

if wrong:
  print("reproduces: jax.device_put(jnp.from_dlpack(x), jax.devices()[1]) "
        "* 1 differs from x: " + "; ".join(wrong + right))
else:
  seen = right + [f"{c}, computing on either device" for c in cannot_compute]
  print("fixed: no move computed wrong values: " + "; ".join(seen))
"""


COPY_FALSE_IGNORES_IS_COPIED = JaxlibReport(
    slug="copy-false-ignores-is-copied",
    title=("jnp.from_dlpack(copy=False) imports a DLPack capsule flagged "
           "IS_COPIED"),
    what_happens="""\
With jaxlib 0.12.0.1, jnp.from_dlpack(x, copy=False) imports a DLPack 1.x
capsule whose flags set IS_COPIED, instead of raising. The producer says
it made a copy, so the import cannot be the copy-free one that copy=False
asks for. The reproducer's producer exports a fresh 64-byte-aligned copy
of its data and sets IS_COPIED on the capsule, once writable and once
READ_ONLY (as jaxlib 0.12 flags the copies it exports itself): both import
under copy=False, and the results alias the producer's copies.

NumPy's own x.__dlpack__(max_version=(1, 0), copy=True) sets IS_COPIED
too. Of 50 such capsules of np.arange(8.0), the 25 whose copy happened to
be 64-byte aligned imported under copy=False; the other 25 raised
ValueError (the buffer "is not aligned to 64 bytes"), so whether
copy=False holds depends on where the producer's allocator put the copy.
Of np.arange(8, dtype=np.float32), 50 of 50 copies were unaligned.

jaxlib 0.4.35, 0.10.2, 0.11.1 and 0.11.2 read no DLPack 1.x capsule: they
refuse the capsule ('DLPack tensor must be a capsule with name
"dltensor", got "dltensor_versioned"'), so the flag is never ignored
there.
""",
    what_should="""\
Under copy=False, from_dlpack should refuse a capsule whose flags set
IS_COPIED (with BufferError, as for any import that needs a copy), and
import it as before under copy=None or copy=True.
""",
    clause="""\
Array API standard, from_dlpack, copy: "If False, the function must never
copy, and raise BufferError in case a copy is deemed necessary"
(https://data-apis.org/array-api/latest/API_specification/generated/array_api.from_dlpack.html).
DLPack, dlpack.h, DLPACK_FLAG_BITMASK_IS_COPIED: "bit mask to indicate
that the tensor is a copy made by the producer"
(https://github.com/dmlc/dlpack/blob/main/include/dlpack/dlpack.h).
""",
    where=("jaxlib/dlpack.cc, DLPackManagedTensorToBuffer (Python: "
           "_jax.dlpack_managed_tensor_to_buffer), which makes a view of a "
           "dltensor_versioned capsule's data under copy=False without "
           "reading its flags"),
    # jaxlib reads DLPack 1.x capsules from 0.12 on; before, it refuses
    # them by name, and the reproducer prints "fixed" (measured: 0.4.35,
    # 0.10.2, 0.11.1, 0.11.2). 0.12.0 itself was not measured, only
    # 0.12.0.1.
    affected=((0, 12), None),
    crash=False,
    reproducer=_COPY_FALSE_REPRODUCER,
    # copy_false_read_only_copy_raises fails upstream because of it with
    # every capsule. copy_false_producer_copied_raises uses NumPy's own
    # copy (copy=True), which is 64-byte aligned only by chance (never, for
    # its 8 float32s, in 50 tries): unaligned, the case fails on the
    # alignment error's class instead, and passes once that is a
    # BufferError; aligned, it fails because of this defect.
    cases=("copy_false_producer_copied_raises",
           "copy_false_read_only_copy_raises"),
)

NULL_DELETER_ABORTS = JaxlibReport(
    slug="null-deleter-aborts",
    title=("from_dlpack aborts the process on a DLPack capsule whose deleter "
           "is NULL"),
    what_happens="""\
Importing a DLPack capsule whose deleter is NULL aborts the process once
the imported array is freed: "terminate called after throwing an instance
of 'std::bad_function_call'", then SIGABRT. DLPack allows a NULL deleter.
The reproducer's producer hands out NumPy's capsule with its deleter set
to NULL (and calls NumPy's deleter itself afterwards): the array imports
and reads back right, and y.delete() aborts the process.

Measured with jaxlib 0.12.0.1, importing a DLPack 1.x capsule (the version
jax 0.12.0.1 asks for), and with jaxlib 0.4.35, 0.10.2, 0.11.1 and
0.11.2, importing a 0.x capsule (the version they read): each aborts.
Where the data is not 64-byte aligned and jaxlib copies it, from_dlpack
raises RuntimeError: bad_function_call instead, with each of these
jaxlibs.

In JAX's main branch (cec06d116c), MakePjrtBuffer sets its
std::function<void()> on_delete_callback only "if (dlmt->deleter)", and
hands it, empty for a NULL deleter, to PjRtClient's
CreateViewOfDeviceBuffer (a view) or BufferFromHostBuffer (a copy), which
call it. The same code was in jaxlib/xla/dlpack.cc before. In jaxlib
0.12.0.1's symbols, the std::function<void()> lambdas of the import are
DLPackManagedTensorToBuffer's (two of them).
""",
    what_should="""\
A NULL deleter means the producer needs no word when the consumer is
done. jaxlib should import such a capsule like any other and, when it
frees the buffer, call nothing: for example, hand PjRt a callback that
does nothing when the deleter is NULL.
""",
    clause="""\
DLPack, dlpack.h, DLManagedTensorVersioned.deleter (and, alike,
DLManagedTensor.deleter): "It can be NULL if there is no way for the
caller to provide a reasonable destructor."
(https://github.com/dmlc/dlpack/blob/main/include/dlpack/dlpack.h).
""",
    where=("jaxlib/dlpack.cc, DLPackManagedTensorToBuffer (jaxlib 0.12; "
           "before 0.12, its helper MakePjrtBuffer), whose on-delete "
           "std::function is left empty for a NULL deleter and then "
           "called"),
    # The oldest jaxlib measured (and jax_patch's oldest); the code is
    # older. 0.x capsules abort there, 1.x ones from 0.12 on.
    affected=((0, 4, 35), None),
    crash=True,
    reproducer=_NULL_DELETER_REPRODUCER,
    # No conformance case imports a capsule with a NULL deleter.
    cases=(),
)

COPY_TRUE_ALIASES = JaxlibReport(
    slug="copy-true-aliases",
    title="jnp.from_dlpack(x, copy=True) aliases 64-byte-aligned host memory",
    what_happens="""\
jnp.from_dlpack(x, copy=True) of a NumPy array whose data is 64-byte
aligned returns a view of x, not a copy: the result's buffer is at x's
address (unsafe_buffer_pointer()), and writing to x afterwards changes
the result. The reproducer imports 1024 float32s with copy=True, writes
-1 to x, and reads -1 from all 1024 elements of the result. Unaligned
data is copied (jaxlib's CPU client shares only 64-byte-aligned host
memory), so whether copy=True copies depends on where the producer's
allocator put the data.

Measured with jaxlib 0.10.2, 0.11.1, 0.11.2 and 0.12.0.1 (a DLPack 1.x
capsule with 0.12.0.1, a 0.x one before). jax 0.4.35 passes no copy to
jaxlib, and copies the import in Python (jnp.array(..., copy=True)), so
the result is independent there. jax passes copy to jaxlib, and stops
copying in Python, from 0.8.1 on (pull request #29963).
""",
    what_should="""\
Under copy=True, jaxlib should always make a copy of its own, whatever
the alignment: for example, make it with BufferFromHostBuffer's
HostBufferSemantics::kImmutableOnlyDuringCall, which never aliases the
host buffer, instead of kMutableZeroCopy, which lets the CPU client
alias it.
""",
    clause="""\
Array API standard, from_dlpack, copy: "If True, the function must
always copy."
(https://data-apis.org/array-api/latest/API_specification/generated/array_api.from_dlpack.html).
""",
    where=("jaxlib/dlpack.cc, MakePjrtBuffer (called by "
           "DLPackManagedTensorToBuffer; Python: "
           "_jax.dlpack_managed_tensor_to_buffer): under copy=True it skips "
           "CreateViewOfDeviceBuffer, but makes its copy with "
           "BufferFromHostBuffer and HostBufferSemantics::kMutableZeroCopy, "
           "under which the CPU client aliases 64-byte-aligned host memory "
           "instead of copying it"),
    # copy reached jaxlib in 0.8.1 (dlpack_compat.JAXLIB_0_8_1; JAX's
    # jax-v0.8.1 tag is the first with pull request #29963, whose copy
    # already used kMutableZeroCopy). Before, jax copies in Python and the
    # reproducer prints "fixed" (measured: 0.4.35). 0.8.1 to 0.10.1 were not
    # measured; 0.10.2, 0.11.1, 0.11.2 and 0.12.0.1 reproduce.
    affected=((0, 8, 1), None),
    crash=False,
    reproducer=_COPY_TRUE_REPRODUCER,
    # copy_true_aligned_is_independent fails upstream because of it, but the
    # series' copy-true-copies pull request copies in Python, so no case is
    # held back.
    cases=(),
)

NON_COMPACT_STRIDES_UNIMPLEMENTED = JaxlibReport(
    slug="non-compact-strides-unimplemented",
    title="from_dlpack refuses non-compact strides even where it may copy",
    what_happens="""\
jnp.from_dlpack of a host tensor whose strides are not a permutation of
compact ones raises "UNIMPLEMENTED: Only DLPack tensors with trivial
(compact) striding are supported; i.e., tensors whose striding represents
a transposition of the underlying buffer but not broadcasting", under
copy=None and copy=True as under copy=False. The reproducer imports
x[::2], x[::-1] and x.reshape(4, 4)[:, :2] of a float32 NumPy array
with copy=None and with copy=True: all 6 imports raise. jaxlib has the
tensor's data and strides, and could copy it into a compact buffer; the
caller has to do that first instead (np.ascontiguousarray).

Measured with jaxlib 0.4.35, 0.10.2, 0.11.1, 0.11.2 and 0.12.0.1. With
jaxlib 0.12.0.1, np.broadcast_to(x[:4], (3, 4)) (zero strides) raises
the same, under both copy values. Before 0.12 NumPy cannot export it:
a broadcast is read-only, and NumPy exports no read-only array as
DLPack 0.x (BufferError), the only version those jaxlibs read.
""",
    what_should="""\
Under copy=None and copy=True, jaxlib should import such a tensor by
copying it, gathered by its strides, into a compact buffer. Only under
copy=False should it refuse (with BufferError, as for any import that
needs a copy).
""",
    clause="""\
Array API standard, from_dlpack, copy: "If True, the function must
always copy. [...] If None, the function must reuse the existing memory
buffer if possible and copy otherwise."
(https://data-apis.org/array-api/latest/API_specification/generated/array_api.from_dlpack.html).
DLPack's Python specification: "DLPack describes the memory layout of
dense, strided, n-dimensional arrays."
(https://dmlc.github.io/dlpack/latest/python_spec.html).
""",
    where=("jaxlib/dlpack.cc, StridesToLayout, which "
           "DLPackManagedTensorToBuffer calls on every strided tensor "
           "before MakePjrtBuffer, whatever copy is: it returns "
           "UNIMPLEMENTED for strides that are not a permutation of compact "
           "ones, though MakePjrtBuffer's copy passes the tensor's byte "
           "strides (GetByteStrides) to BufferFromHostBuffer"),
    # The oldest jaxlib measured (and jax_patch's oldest); every JAX tag
    # from 0.6.0 on (the first whose jaxlib/dlpack.cc is in JAX's
    # repository) has the same check, and no jaxlib relaxes it yet.
    affected=((0, 4, 35), None),
    crash=False,
    reproducer=_NON_COMPACT_REPRODUCER,
    # copy_none_step_slice_imports, copy_none_reversed_imports and
    # copy_none_broadcast_imports fail upstream because of it, but the
    # series' strided-input pull request copies in Python.
    cases=(),
)

UNALIGNED_IMPORT_UNFINISHED = JaxlibReport(
    slug="unaligned-import-unfinished-at-return",
    title=("from_dlpack returns while jaxlib's copy of unaligned host memory "
           "runs"),
    what_happens="""\
Importing host memory that is not 64-byte aligned, which jaxlib copies
(its CPU client shares only aligned memory), jnp.from_dlpack(x) returns
while that copy is still reading x: the result is not ready
(y.is_ready() is False) right after the return, and a write to x right
after the return reaches the result, in part. The reproducer imports
32 MiB of float32 1.0s, 4 bytes into their allocation, 20 times, and
writes 2.0 to x (its last element first) as soon as from_dlpack returns.

On a 2-core machine under load, with jaxlib 0.4.35, 0.10.2 and 0.11.1:
19 or 20 of 20 results were not ready at return and 19 or 20 of 20
changed, nearly all torn (part 1.0, part 2.0). With 16 MiB, fewer do:
5 to 34 of 50 changed. copy=True races alike (19 or 20 of 20, 32 MiB).
float32 keeps JAX from converting the result (as it converts float64
with x64 off), so the copy is jaxlib's own. jaxlib 0.11.2 and 0.12.0.1
return with the copy done: 0 of 20 not ready, none changed (and 0 of 100
with 16 MiB).
""",
    what_should="""\
from_dlpack should return only once jaxlib's copy has stopped reading the
producer's memory: for example, copy with BufferFromHostBuffer's
HostBufferSemantics::kImmutableOnlyDuringCall, or wait for the copy
(on_done_with_host_buffer) before DLPackManagedTensorToBuffer returns.
jaxlib 0.11.2 returns with the copy done.
""",
    clause="""\
DLPack's Python specification, Semantics: "If possible, this must be
zero-copy (i.e. y will be a view on x). If not possible, that library may
flag this and make a copy of the data. In both cases: The producer keeps
owning the memory of x [...] Both x and y may continue to be used just
like arrays created in other ways."
(https://dmlc.github.io/dlpack/latest/python_spec.html). A result that is
part old, part new is neither a view of x nor a copy of it.
""",
    where=("jaxlib/dlpack.cc, MakePjrtBuffer, whose copy (of unaligned "
           "host memory, and under copy=True) calls BufferFromHostBuffer "
           "with HostBufferSemantics::kMutableZeroCopy and the capsule's "
           "deleter as on_done_with_host_buffer, under which PjRt may read "
           "the host memory after the call returns; "
           "DLPackManagedTensorToBuffer returns without waiting for it"),
    # The oldest jaxlib measured (and jax_patch's oldest). jaxlib 0.11.2
    # fixed it (measured: 0.11.2 and 0.12.0.1, with jax 0.12.0.1, whose
    # from_dlpack waits for nothing either); its source is not in JAX main
    # here (0.11.1), which still copies with kMutableZeroCopy.
    affected=((0, 4, 35), (0, 11, 2)),
    crash=False,
    reproducer=_UNALIGNED_UNFINISHED_REPRODUCER,
    # No conformance case pins a race down; the series' finished-at-return
    # pull request waits for the copies and moves jax makes in Python.
    cases=(),
)

NON_ROW_MAJOR_MOVED_WRONGLY = JaxlibReport(
    slug="non-row-major-moved-wrongly",
    title="device_put moves a non-row-major from_dlpack import to wrong values",
    what_happens="""\
jaxlib aliases a compact but non-row-major host tensor (x.T, any
permutation; 64-byte aligned) with a matching XLA layout. The import
reads and computes right on its own device, but once jax.device_put
moves it to another CPU device, computing with it gives wrong values:
jax.device_put(jnp.from_dlpack(x), jax.devices()[1]) * 1 differs from x
(reading the moved array with np.asarray is still right). The
reproducer, with 2 CPU devices, imports x.T of a (4, 6) float32 array
and two permutations of a (2, 3, 4) one: each is aliased, and 22 of its
24 elements come out wrong after the move, the values of x permuted.

Measured with jaxlib 0.10.2 and 0.11.1. jaxlib 0.11.2 and 0.12.0.1 alias
the same tensors and move them right. With jax 0.4.35, which aliases
them too, any computation with such an alias, moved or not, raises
AssertionError ("Unexpected XLA layout override"): another failure, so
this one does not show.
""",
    what_should="""\
Moving an import to another device should keep its values whatever its
layout, as it does for arrays JAX makes itself, and as it does with
jaxlib 0.11.2.
""",
    clause="""\
DLPack's Python specification, Semantics, on y = from_dlpack(x): "Both x
and y may continue to be used just like arrays created in other ways."
(https://dmlc.github.io/dlpack/latest/python_spec.html). Array API
standard, from_dlpack, returns: "an array containing the data in x"
(https://data-apis.org/array-api/latest/API_specification/generated/array_api.from_dlpack.html).
""",
    where=("jaxlib/dlpack.cc, DLPackManagedTensorToBuffer, which gives a "
           "view of a compact non-row-major tensor the minor_to_major "
           "layout of its strides (StridesToLayout, then MakePjrtBuffer's "
           "CreateViewOfDeviceBuffer) and marks it as a custom layout "
           "(CreatePjRtArray's has_custom_layout); the copy jax.device_put "
           "makes of that array on another device is computed with as if "
           "its layout were another. jaxlib 0.11.2 still aliases such "
           "tensors, and moves them right"),
    # From jaxlib 0.8.0, where import reads strides again
    # (dlpack_compat.JAXLIB_0_8_0, measured on the release wheels there:
    # 0.8 and 0.9 permute the moved values), to 0.11.2, which fixed the
    # move. This reproducer was run on 0.4.35 ("fixed": JAX cannot compute
    # with the alias at all), 0.10.2 and 0.11.1 (reproduce), 0.11.2 and
    # 0.12.0.1 ("fixed"); not on 0.8.0 to 0.10.1. 0.11.2's source is not in
    # JAX main here (0.11.1), so what fixed it was not read.
    affected=((0, 8, 0), (0, 11, 2)),
    crash=False,
    reproducer=_NON_ROW_MAJOR_REPRODUCER,
    # Both fail upstream because of it (measured: jax and jaxlib 0.10.2 and
    # 0.11.1, 2 CPU devices). A target whose jaxlib range reaches 0.11.2
    # gets the non-row-major-layouts pull request, gated to older jaxlibs,
    # which claims them; one whose every jaxlib is older gets this report.
    cases=("transposed_values_are_right", "copy_false_transposed_shares"),
)

REPORTS: tuple[JaxlibReport, ...] = (
    COPY_FALSE_IGNORES_IS_COPIED,
    NULL_DELETER_ABORTS,
    COPY_TRUE_ALIASES,
    NON_COMPACT_STRIDES_UNIMPLEMENTED,
    UNALIGNED_IMPORT_UNFINISHED,
    NON_ROW_MAJOR_MOVED_WRONGLY,
)


def dotted(version: tuple[int, ...]) -> str:
  """A version as jaxlib spells it: (0, 12) is "0.12.0"."""
  return ".".join(map(str, version + (0,) * (3 - len(version))))


def affects(report: JaxlibReport, jaxlib: tuple[int, ...]) -> bool:
  """Whether ``report``'s defect is in ``jaxlib``."""
  first, fixed = report.affected
  return first <= jaxlib and (fixed is None or jaxlib < fixed)


def for_range(min_jaxlib: tuple[int, ...],
              max_jaxlib: tuple[int, ...]) -> tuple[JaxlibReport, ...]:
  """The reports whose defect is in some jaxlib of [min_jaxlib, max_jaxlib]."""
  return tuple(
      report for report in REPORTS
      if report.affected[0] <= max_jaxlib
      and (report.affected[1] is None or min_jaxlib < report.affected[1]))


def affected_text(report: JaxlibReport) -> str:
  """The jaxlib versions ``report`` affects, in words."""
  first, fixed = report.affected
  if fixed is None:
    return f"jaxlib {dotted(first)} and later (no jaxlib fixes it yet)"
  return f"jaxlib {dotted(first)} up to, not including, {dotted(fixed)}"


def issue_text(report: JaxlibReport, jax_version: str) -> str:
  """The issue's markdown, in the form of JAX's bug-report template.

  Args:
    report: the defect.
    jax_version: the JAX release the issue is filed against.

  Returns:
    The title as a heading, then the template's two sections: Description
    (what happens, what should, the clause, where in jaxlib, the
    reproducer, the jaxlib versions affected) and System info.
  """
  measured = "\n".join(
      f"- jax {jax}, jaxlib {dotted(jaxlib)}, Python {python}: "
      + ("reproduces" if affects(report, jaxlib) else "does not reproduce")
      for jax, jaxlib, python in MEASURED)
  crash = ("; it kills the process, so run it in a process of its own"
           if report.crash else "")
  where = textwrap.fill(f"{report.where}.", 75)
  return f"""\
# {report.title}

### Description

{report.what_happens.strip()}

**Expected**

{report.what_should.strip()}

**The standard**

{report.clause.strip()}

**Where in jaxlib**

{where}

**Reproducer** (with `JAX_PLATFORMS=cpu` and `JAX_ENABLE_X64=0`; its last
line says `reproduces: ...` or `fixed: ...`{crash})

```python
{report.reproducer.strip()}
```

**Affected jaxlib versions**: {affected_text(report)}.

### System info (python version, jaxlib version, accelerator, etc.)

Output of `import jax; jax.print_environment_info()` with jax {jax_version}:

```
(paste it here)
```

Measured on {MEASURED_ON}:

{measured}
"""


def outcome(returncode: int, stdout: str, stderr: str,
            crash: bool) -> tuple[str, str]:
  """What a reproducer's run says, under the reproducer protocol.

  Args:
    returncode: its exit status (negative: killed by that signal).
    stdout: its standard output.
    stderr: its standard error.
    crash: whether its report is of a crash.

  Returns:
    ("reproduces" | "fixed" | "error", what it saw).
  """
  err_lines = [line for line in stderr.splitlines() if line.strip()]
  last_err = err_lines[-1].strip() if err_lines else ""
  if returncode < 0:
    try:
      name = signal.Signals(-returncode).name
    except ValueError:
      name = f"signal {-returncode}"
    killed = f"killed by {name}" + (f" ({last_err})" if last_err else "")
    if crash:
      return "reproduces", killed
    return "error", f"{killed}, but the report is not of a crash"
  if returncode:
    return "error", f"exit status {returncode}: {last_err or 'no stderr'}"
  if "Traceback (most recent call last)" in stderr:
    return "error", f"exit status 0 after a traceback: {last_err}"
  out_lines = [line for line in stdout.splitlines() if line.strip()]
  last = out_lines[-1].strip() if out_lines else ""
  for result in _VERDICTS:
    if last.startswith(f"{result}:"):
      return result, last[len(result) + 1:].strip()
  return "error", ("no 'reproduces: ...' or 'fixed: ...' line; its last "
                   f"line is {last!r}")


def verdict(report: JaxlibReport, jaxlib: tuple[int, ...],
            result: str) -> str:
  """Whether ``result`` on ``jaxlib`` agrees with the report's range.

  Returns:
    "" where it does; otherwise why not.
  """
  version = dotted(jaxlib)
  if result not in _VERDICTS:
    return (f"its reproducer gave no verdict ({result}) with jaxlib "
            f"{version}")
  expected = "reproduces" if affects(report, jaxlib) else "fixed"
  if result == expected:
    return ""
  if expected == "reproduces":
    return (f"it names {affected_text(report)} as affected, but its "
            f"reproducer does not reproduce with jaxlib {version}")
  return (f"its reproducer reproduces with jaxlib {version}, which it does "
          f"not name as affected ({affected_text(report)})")
