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

"""pytest's set-up for the suite: the memory-safety mark, and a heap that
each test collects alone.

The memory-safety tests are those that read or release DLPack structures
(the capsule module, its fuzz, and the reliability and lifetime tests), and
those of the allocator aligned_allocation gives NumPy.
tools/hostile_allocator.sh runs them (``-m memory_safety``) under an
allocator that poisons freed memory, which the version matrix's x64-off
pass leaves them to (``-m "not memory_safety"``). The leak loops are not
among them: their bounds are the default allocator's (under
PYTHONMALLOC=malloc the traced heap settles tens of KB higher, not per
call), and they find leaks, not reads after free.

The x64-independent modules are those whose outcome the mode cannot change
(tests/x64_independence_test.py proves it of each); the matrix's x64-on
pass leaves them out (``-m "not x64_independent"``).

The tests that check when a deleter runs call ``gc.collect()`` after each
round, hundreds of times a test. With NumPy, JAX, torch and hypothesis
loaded, a full collection walks millions of objects and takes about 50 ms,
most of several tests' time. Each test here runs with the heap as it found
it frozen (``gc.freeze``): a collection then walks only what the test made,
and collects that exactly as before, cycles included; what was alive before
the test stays alive, as it would have. After the test the heap is unfrozen,
so its older garbage is collected as usual.

absltest's own runner (Bazel) does not read this file: there the same tests
walk the whole heap, slower and with the same results.
"""

from collections.abc import Iterator
import gc

import pytest

_MEMORY_SAFETY_MODULES = frozenset({
    "capsule_fuzz_test", "dlpack_capsule_test", "lifetime_test",
    "numpy_alignment_test", "reliability_test"})
_LEAK_LOOPS = frozenset({"LeakTest", "LeakCheckTest"})
# Modules whose outcome cannot depend on jax_enable_x64, as
# tests/x64_independence_test.py proves of each: the version matrix's x64-on
# pass leaves them out (``-m "not x64_independent"``), having run them with
# x64 off.
X64_INDEPENDENT_MODULES = frozenset({"typing_test"})


def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line(
      "markers", "memory_safety: reads or releases DLPack structures, or "
      "allocates NumPy memory itself "
      "(tools/hostile_allocator.sh runs these)")
  config.addinivalue_line(
      "markers", "x64_independent: its outcome is the same in both x64 "
      "modes (tests/x64_independence_test.py)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
  for item in items:
    module = item.nodeid.split("::")[0].rsplit("/", 1)[-1][:-len(".py")]
    test_class = item.nodeid.split("::")[1] if "::" in item.nodeid else ""
    if module in _MEMORY_SAFETY_MODULES and test_class not in _LEAK_LOOPS:
      item.add_marker(pytest.mark.memory_safety)
    if module in X64_INDEPENDENT_MODULES:
      item.add_marker(pytest.mark.x64_independent)


@pytest.fixture(autouse=True)
def _collect_only_what_the_test_makes() -> Iterator[None]:
  gc.freeze()
  try:
    yield
  finally:
    gc.unfreeze()
