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

"""Corrections to JAX's own DLPack tests where they contradict the standard.

JAX's ``tests/array_interoperability_test.py`` pins a few upstream
behaviours the Python Array API standard rules out. Vendoring into a JAX
source checkout corrects those assertions, declaration by declaration: each
correction knows the declaration as every JAX release (and main) has it, by
sha256, and the smallest edit that makes it assert the standard. A
declaration in any other form is refused by name, so that nothing is edited
blind.
"""

from __future__ import annotations

import dataclasses
import hashlib

from jax_patch._delivery import source_patch

TEST_FILE = "tests/array_interoperability_test.py"


class UnknownDeclarationError(Exception):
  """A declaration to correct is not in a form jax-patch knows."""


@dataclasses.dataclass(frozen=True)
class Correction:
  declaration: tuple[str, str]  # (class, method)
  # sha256 of the declaration, as JAX has it -> (old, new) text edits in it.
  edits: dict[str, tuple[tuple[str, str], ...]]


# What the standard requires of copy=False, in the x64 mode the test runs in.
_COPY_FALSE_RULE = (
    "    # jax-patch: copy=False never copies (Array API standard). Input JAX\n"
    "    # cannot alias raises: unaligned, or 64-bit with x64 off (narrowed to\n"
    "    # 32 bits, a copy). What it returns shares the source, 64-bit input\n"
    "    # with x64 on too: writing to the source shows through.\n"
    "    narrowed = jax.dtypes.canonicalize_dtype(dtype) != x_np.dtype\n")


def _shares_when(condition: str) -> str:
  """Lines that prove, where ``condition`` holds, that the import shares."""
  return (f"    if {condition}:\n"
          "      x_jax = _from_dlpack()\n"
          "      np.copyto(x_np, x_np == 0, casting=\"unsafe\")  # Every element"
          " changes.\n"
          "      self.assertArraysEqual(x_np, x_jax)\n")


# testNumpyToJax before an `aligned` parameter (0.4.35 to 0.8.0): upstream
# copied unaligned and narrowed input silently under copy=False.
_COPY_FALSE_WITHOUT_ALIGNED = (
    "    if jax.default_backend() == 'gpu' and not copy:\n",
    _COPY_FALSE_RULE
    + _shares_when("(copy is False and jax.default_backend() == 'cpu'\n"
                   "        and not x_np.ctypes.data % 64 and not narrowed\n"
                   "        and x_np.size)")
    + "    if not copy and (jax.default_backend() == 'gpu'\n"
      "                     or x_np.ctypes.data % 64 or narrowed):\n")

# From 0.8.1 upstream refuses unaligned input, still not narrowed input.
_COPY_FALSE_WITH_ALIGNED = (
    '    if copy is not None and not copy and (jax.default_backend() != "cpu"\n'
    "                                          or not aligned):\n",
    _COPY_FALSE_RULE
    + _shares_when('(copy is False and jax.default_backend() == "cpu"\n'
                   "        and aligned and not narrowed and x_np.size)")
    + "    if copy is not None and not copy and (\n"
      '        jax.default_backend() != "cpu" or not aligned or narrowed):\n')

_RAW_CAPSULE_REFUSED = (
    "    with self.assertRaisesRegex(\n"
    "        RuntimeError,\n"
    '        r"from_dlpack got array with non-default layout with '
    'minor-to-major "\n'
    '        r"dimensions \\(0,1\\), expected \\(1,0\\)"):\n'
    "      b_jax = jax.dlpack.from_dlpack(b.__dlpack__())\n",
    "    # jax-patch: from_dlpack takes arrays, not capsules (Array API\n"
    "    # standard), and copies a layout JAX cannot alias.\n"
    "    with self.assertRaises(AttributeError):\n"
    "      jax.dlpack.from_dlpack(b.__dlpack__())\n"
    "    self.assertAllClose(b, jax.dlpack.from_dlpack(b))\n")

_TRANSPOSED_IMPORTS = (
    "    with self.assertRaisesRegex(\n"
    "        RuntimeError,\n"
    '        "from_dlpack got array with non-default layout with '
    'minor-to-major "\n'
    '        r"dimensions \\(0,1\\), expected \\(1,0\\)",\n'
    "    ):\n"
    "      jax.dlpack.from_dlpack(b)\n",
    "    # jax-patch: copy=None copies a layout JAX cannot alias (Array API\n"
    "    # standard).\n"
    "    self.assertAllClose(b, jax.dlpack.from_dlpack(b))\n")

CORRECTIONS = (
    # The standard, from_dlpack, copy: "If False, the function must never
    # copy, and raise BufferError in case a copy is deemed necessary". In
    # either x64 mode: 64-bit input is narrowed, a copy, with x64 off, and
    # kept, so shared when aligned, with x64 on.
    Correction(
        ("DLPackTest", "testNumpyToJax"),
        {
            # 0.4.35 to 0.7.1
            "77d7fa2f4804b1526680256543217363da44868f4bf323b5c67b87809a7ba88f":
                (_COPY_FALSE_WITHOUT_ALIGNED,),
            # 0.7.2 and 0.8.0
            "38246be3ec50bfaee4a59cbcb441da53d13cd67919598cc401198c386e72e27c":
                (_COPY_FALSE_WITHOUT_ALIGNED,),
            # 0.8.1
            "408bb0d4b6fe2fcd393195d393f076092e454bf81e4350b4441de60d55acfacc":
                (_COPY_FALSE_WITH_ALIGNED,),
            # 0.8.2 to 0.11.0 and main (August 2026)
            "d25307c1773e3aab2c8c9a308b0cfaf0919291201621b18d929601e83436bed0":
                (_COPY_FALSE_WITH_ALIGNED,),
        }),
    # The standard, from_dlpack: "Raises AttributeError if the __dlpack__
    # and __dlpack_device__ methods are not present"; copy: "If None, the
    # function must reuse existing memory buffer if possible and copy
    # otherwise".
    Correction(
        ("DLPackTest", "testNondefaultLayout"),
        {
            # 0.4.35 to 0.7.1: a raw capsule of x.T must raise RuntimeError.
            "4e67ef0bbb83e76aed90d1d25d2cd68983b79b244a7ac6d884d33ae6ee70d3b6":
                (_RAW_CAPSULE_REFUSED,),
            # 0.7.2: x.T itself must raise RuntimeError (renamed, and
            # expected to import, from 0.8.0).
            "d8953f1c51cb1699edf982c59110d506934e2e3d3e9e6caeb54fc136b4c7e5c1":
                (_TRANSPOSED_IMPORTS,),
        }),
)


def _sha256(text: str) -> str:
  return hashlib.sha256(text.encode()).hexdigest()


def corrected(source: str) -> str:
  """Returns JAX's test file ``source`` with every correction applied.

  A declaration the file lacks needs no correction. Applying to an already
  corrected file changes nothing.

  Raises:
    UnknownDeclarationError: a declaration to correct is in a form no
      correction knows (named, with its sha256).
  """
  lines = source.splitlines(keepends=True)
  declared = source_patch.spans(source)
  edits: list[tuple[int, int, str]] = []
  for correction in CORRECTIONS:
    if correction.declaration not in declared:
      continue
    start, end = declared[correction.declaration]
    text = "".join(lines[start:end])
    fixed = _apply(correction, text)
    if fixed != text:
      edits.append((start, end, fixed))
  for start, end, fixed in sorted(edits, reverse=True):
    lines[start:end] = [fixed]
  return "".join(lines)


def _apply(correction: Correction, text: str) -> str:
  digest = _sha256(text)
  if digest in correction.edits:
    for old, new in correction.edits[digest]:
      if text.count(old) != 1:
        raise AssertionError(f"{correction.declaration}: edit does not apply")
      text = text.replace(old, new)
    return text
  if any(text.count(new) == 1 and old not in text
         for known in correction.edits.values() for old, new in known):
    return text  # Already corrected.
  name = ".".join(correction.declaration)
  raise UnknownDeclarationError(
      f"{TEST_FILE}: {name} (sha256 {digest[:12]}) is not as any JAX "
      "jax-patch knows has it, so its assertions that contradict the "
      "standard cannot be corrected safely.")
