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

"""Lifetimes: what is read of a producer's structures, and until when.

Each row of docs/reliability.md's lifetime table has a case here. A
producer's managed tensor, shape and strides are overwritten as freed memory
(``CraftedProducer.poison``) as soon as the producer may free them: when its
deleter runs, or, for a NULL deleter, which tells the producer nothing, once
``from_dlpack`` returns. jaxlib then releases the import, on whichever
thread it chooses. A read of the poisoned memory faults, so every case runs
in a process of its own, whose exit status says whether it survived.
"""

import gc
import textwrap
from typing import Iterator
import weakref

from absl.testing import absltest
from absl.testing import parameterized

from jax_patch._src import dlpack
from jax_patch.testing import conformance
from tests import cpu_devices
from tests import fresh_process
from tests import producers


# One import, then its release. ``{import_kwargs}`` says what the import
# does: alias, copy, or move to cpu:1; ``released_by_a_worker`` starts a
# long transfer from the alias and drops it while that still reads it, so
# that a jaxlib worker thread releases it (as in the crash that issue 25
# reported).
_IMPORT_THEN_RELEASE = """
import gc, time
import jax
import numpy as np
from jax_patch._src import dlpack
from jax_patch.testing import conformance
from tests import producers

cpu = jax.devices("cpu")
source = conformance.aligned_array({shape})
producer = producers.CraftedProducer(
    source, versioned={versioned}, poison_on_delete=True,
    **({{"deleter": 0}} if {null_deleter} else {{}}))
result = dlpack.from_dlpack(producer, **{import_kwargs})
if {null_deleter}:
  producer.poison()  # Nothing tells it the import is done: it may free now.
elif {aliased}:
  assert producer.deletes == 0, "released while the import aliases it"
expected = source.copy()
if {by_worker}:
  moved = jax.device_put(result, cpu[1])  # Reads `result` for a while.
  del result
  moved.block_until_ready()
  result = moved
np.testing.assert_array_equal(np.asarray(result), expected)
del result
gc.collect()
time.sleep(0.2)  # A release left to a jaxlib worker thread.
gc.collect()
print("deletes", producer.deletes, flush=True)
"""

_MODES = {
    "aliased": ("{}", False),
    "copied": ('{"copy": True}', False),
    "moved": ('{"device": cpu[1]}', False),
    "released_by_a_worker": ("{}", True),
}


def _import_cases() -> Iterator[tuple[str, bool, bool, str]]:
  for versioned in (False, True):
    for null_deleter in (True, False):
      for mode in _MODES:
        name = "_".join(("1x" if versioned else "0x",
                         "null_deleter" if null_deleter else "deleter", mode))
        yield name, versioned, null_deleter, mode


class ProducerStructureLifetimeTest(parameterized.TestCase):
  """Nothing of a producer's structure is read once the producer may free it.

  The NULL-deleter cases that alias (directly or until a worker releases the
  alias) crashed before take() made its own copy of the shape and strides:
  the owner capsule it kept read the freed structure's deleter field at
  release and called it.
  """

  @parameterized.named_parameters(*_import_cases())
  def test_release_reads_nothing_the_producer_freed(
      self, versioned: bool, null_deleter: bool, mode: str) -> None:
    import_kwargs, by_worker = _MODES[mode]
    if mode in ("moved", "released_by_a_worker"):
      cpu_devices.require(2)  # The script's cpu[1]: it runs with our flags.
    script = textwrap.dedent(_IMPORT_THEN_RELEASE).format(
        shape=(2048, 2048) if by_worker else (64, 64),
        versioned=versioned, null_deleter=null_deleter,
        import_kwargs=import_kwargs, aliased=mode == "aliased",
        by_worker=by_worker)
    run = fresh_process.run(script)
    self.assertEqual(run.returncode, 0,
                     f"exit status {run.returncode}: {run.stderr[-3000:]}")
    # A NULL deleter is never called; a real one exactly once.
    self.assertIn(f"deletes {0 if null_deleter else 1}", run.stdout)


_EXPORT_THEN_RELEASE = """
import gc
import jax, jax.numpy as jnp
import numpy as np
from jax_patch._src import dlpack
from jax_patch.testing import conformance

x = jax.device_put(jnp.arange(4096), jax.devices("cpu")[{device}])
expected = np.arange(4096)
imported = np.from_dlpack(conformance.PreparedCapsule(
    dlpack.array_dlpack(x, **{export_kwargs})))
del x  # The export keeps what it aliases alive.
gc.collect()
np.testing.assert_array_equal(imported, expected)
del imported
gc.collect()
print("released", flush=True)
"""


class ExportLifetimeTest(parameterized.TestCase):
  """An export outlives the array it was made from, and is released once."""

  @parameterized.named_parameters(
      ("1x_of_cpu0", 0, '{"max_version": (1, 0)}'),
      ("1x_of_cpu1", 1, '{"max_version": (1, 0)}'),
      ("1x_copy", 0, '{"max_version": (1, 0), "copy": True}'),
      ("0x_copy", 1, '{"max_version": (0, 8)}'),
      ("unversioned_alias", 0, "{}"),
  )
  def test_consumer_reads_the_export_after_the_array_is_gone(
      self, device: int, export_kwargs: str) -> None:
    cpu_devices.require(device + 1)  # The script's: it runs with our flags.
    script = textwrap.dedent(_EXPORT_THEN_RELEASE).format(
        device=device, export_kwargs=export_kwargs)
    run = fresh_process.run(script)
    self.assertEqual(run.returncode, 0,
                     f"exit status {run.returncode}: {run.stderr[-3000:]}")
    self.assertIn("released", run.stdout)


class NullDeleterOwnerTest(absltest.TestCase):
  """With a NULL deleter, the import holds the producer object instead.

  The object is all that may own the tensor's memory. The tests keep the
  producer's structure apart from it, so that a patch that does not hold the
  object fails here rather than crashing the test process.
  """

  def _producer(self) -> producers.CraftedProducer:
    producer = producers.CraftedProducer(conformance.aligned_array((16,)),
                                         deleter=0)
    self.structures = (producer._managed, producer._shape, producer._strides)
    return producer

  def test_producer_lives_until_the_aliasing_import_is_released(
      self) -> None:
    producer = self._producer()
    alive = weakref.ref(producer)
    result = dlpack.from_dlpack(producer, copy=False)
    del producer
    gc.collect()
    self.assertIsNotNone(alive())
    result.delete()
    gc.collect()
    self.assertIsNone(alive())

  def test_a_copy_holds_nothing_of_the_producer(self) -> None:
    producer = self._producer()
    alive = weakref.ref(producer)
    result = dlpack.from_dlpack(producer, device=cpu_devices.require(2)[1],
                                copy=True)
    del producer
    gc.collect()
    self.assertIsNone(alive())
    self.assertEqual(result.devices(), {cpu_devices.require(2)[1]})


if __name__ == "__main__":
  absltest.main()
