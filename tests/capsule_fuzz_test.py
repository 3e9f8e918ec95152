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

"""A standing structure fuzz of ``from_dlpack``'s capsule path.

Hypothesis builds valid and corrupt DLPack 0.x and 1.x managed tensors field
by field (tests/capsule_fuzz.py, which states the contract) and imports each
with every ``copy`` and ``device``. The cases run in worker processes, a few
batches of them, so that a crash is reported with the case that caused it
instead of taking the test run down.

By default 4 batches of 600 cases, a few seconds each; JAX_PATCH_SOAK
multiplies the cases (JAX_PATCH_SOAK=20 for a soak), JAX_PATCH_FUZZ_SEED
picks other seeds than 0 to 3. The batches' outcomes by case kind are
printed as a table at the end, and written as JSON to the file
JAX_PATCH_FUZZ_SUMMARY names, if set. The workers run in this process's x64
mode, so the contract is checked for 64-bit values as JAX holds them in it.
"""

import os

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

# pylint: disable=g-import-not-at-top
import json
import pathlib
import signal
import subprocess
import sys
import tempfile
from typing import Any

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp

from jax_patch._src import dlpack
from jax_patch.testing import conformance
from tests import capsule_fuzz
from tests import fresh_process
# pylint: enable=g-import-not-at-top

_SOAK = float(os.environ.get("JAX_PATCH_SOAK", "1"))
_BATCHES = 4
_EXAMPLES = max(1, int(600 * _SOAK))  # Per batch.
_FIRST_SEED = int(os.environ.get("JAX_PATCH_FUZZ_SEED", "0"))
# A batch takes a few seconds; a failure's shrinking, some more. A batch
# that runs out of time has hung, and fails.
_TIMEOUT_S = 300 * max(_SOAK, 1.0)
_REPO = pathlib.Path(__file__).parents[1]

# Each batch's summary (capsule_fuzz.Stats.summary), for the table.
SUMMARIES: list[dict[str, Any]] = []


def _exit_description(returncode: int) -> str:
  if returncode < 0:
    name = signal.Signals(-returncode).name
    return f"was killed by {name} (exit status {128 - returncode} in a shell)"
  return f"exited with status {returncode}"


def _last_line(path: pathlib.Path) -> str:
  lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
  return lines[-1] if lines else "(none: it failed before the first case)"


def run_batch(seed: int, examples: int,
              log: pathlib.Path) -> tuple[str | None, dict[str, Any] | None]:
  """Runs one batch of cases in a worker process.

  Returns:
    ``(failure, summary)``: what went wrong (``None`` if nothing did), and
    the batch's summary (``None`` if the worker died before printing it).
  """
  # The worker runs in this process's x64 mode, whether the environment or
  # JAX's config set it here.
  env = dict(fresh_process.environment(),
             XLA_FLAGS="--xla_force_host_platform_device_count=2",
             JAX_ENABLE_X64="1" if conformance.x64_enabled() else "0")
  command = [sys.executable, "-m", "tests.capsule_fuzz", "--seed", str(seed),
             "--examples", str(examples), "--log", str(log)]
  try:
    run = subprocess.run(command, capture_output=True, text=True, env=env,
                         cwd=_REPO, timeout=_TIMEOUT_S, check=False)
  except subprocess.TimeoutExpired as timeout:
    return (f"batch seed={seed} ran past {_TIMEOUT_S:.0f} s, in the case:\n"
            f"  {_last_line(log)}\nstderr tail:\n"
            f"{(timeout.stderr or b'')[-3000:]!r}"), None
  summary = None
  for line in run.stdout.splitlines():
    if line.startswith(capsule_fuzz.SUMMARY_PREFIX):
      summary = json.loads(line[len(capsule_fuzz.SUMMARY_PREFIX):])
  if run.returncode == 0:
    return None, summary
  # The worker logs each case before running it: after a crash, the last
  # one logged is the culprit. A contract violation exits with status 1
  # after Hypothesis shrank it: the stderr tail holds the shrunk case(s),
  # each with a replay command, and the last case logged is only the last
  # one tried.
  what = ("found contract violations (shrunk cases in the stderr tail); "
          "the last case it tried" if run.returncode == 1 else
          f"{_exit_description(run.returncode)} in the case")
  return (f"batch seed={seed} {what}:\n  {_last_line(log)}\n  replay: "
          f"{sys.executable} -m tests.capsule_fuzz --case "
          f"'{_last_line(log)}'\nstdout tail:\n{run.stdout[-1500:]}\n"
          f"stderr tail:\n{run.stderr[-6000:]}"), summary


class CapsuleFuzzTest(parameterized.TestCase):

  @classmethod
  def tearDownClass(cls) -> None:
    super().tearDownClass()
    if not SUMMARIES:
      return
    print("\nfrom_dlpack capsule fuzz, outcomes by case kind:\n"
          + capsule_fuzz.format_table(SUMMARIES), file=sys.stderr)
    path = os.environ.get("JAX_PATCH_FUZZ_SUMMARY")
    if path:
      pathlib.Path(path).write_text(json.dumps(SUMMARIES, indent=1),
                                    encoding="utf-8")

  @parameterized.named_parameters(
      (f"batch_{i}", _FIRST_SEED + i) for i in range(_BATCHES))
  def test_batch_keeps_the_contract(self, seed: int) -> None:
    with tempfile.TemporaryDirectory(prefix="jax-patch-fuzz-") as folder:
      failure, summary = run_batch(seed, _EXAMPLES,
                                   pathlib.Path(folder) / "cases.jsonl")
    if summary is not None:
      SUMMARIES.append(summary)
      print(f"capsule fuzz batch: {json.dumps(summary)}", file=sys.stderr)
    self.assertIsNone(failure, failure)
    assert summary is not None
    self.assertGreaterEqual(summary["cases"], _EXAMPLES // 2)
    self.assertEqual(summary["x64"], conformance.x64_enabled())
    self.assertEqual(summary["deleter_calls"],
                     summary["expected_deleter_calls"])


def _valid_case(**overrides: Any) -> capsule_fuzz.Case:
  """A valid 2x3 float32 0.x tensor, compact and aligned."""
  fields: dict[str, Any] = dict(
      corruption=None, versioned=False, major=1, minor=0, flags=0, code=2,
      bits=32, lanes=1, ndim=2, shape=(2, 3), shape_null=False,
      strides=None, base_dtype=(2, 32), region_offset=0, region_elements=6,
      first_element=0, data_null=False, data_offset=0, byte_offset=0,
      device_type=1, reported_device=(1, 0), deleter=True, copy=None,
      device=None)
  fields.update(overrides)
  return capsule_fuzz.Case(**fields)


class ContractCheckTest(parameterized.TestCase):
  """The checks the batches rely on fail where they should.

  In this process (``run_case`` imports in the caller's process) with a
  stand-in for ``from_dlpack`` that breaks one rule each.
  """

  def _assert_violation(self, case: capsule_fuzz.Case, importer: Any,
                        message: str) -> None:
    with self.assertRaisesRegex(capsule_fuzz.ContractViolation, message):
      capsule_fuzz.run_case(case, capsule_fuzz.Stats(), importer=importer)

  def test_the_real_import_of_a_valid_case_passes(self) -> None:
    for versioned in (False, True):
      for copy in (None, True, False):
        capsule_fuzz.run_case(_valid_case(versioned=versioned, copy=copy),
                              capsule_fuzz.Stats())

  @parameterized.named_parameters(
      ("int64", 0, 64), ("uint64", 1, 64), ("float64", 2, 64),
      ("complex128", 5, 128))
  def test_the_real_import_of_a_valid_64_bit_case_passes(
      self, code: int, bits: int) -> None:
    # In either mode: with x64 off copy=False is refused (a narrowing copy),
    # which the contract allows, and what returns is narrowed.
    for copy in (None, True, False):
      capsule_fuzz.run_case(
          _valid_case(code=code, bits=bits, base_dtype=(code, bits),
                      copy=copy), capsule_fuzz.Stats())

  def test_a_narrowed_64_bit_result_fails_with_x64_on(self) -> None:
    conformance.require_x64(True, "with x64 off narrowing is what the "
                            "contract expects of float64")

    def narrows(producer: Any, **kwargs: Any) -> Any:
      return dlpack.from_dlpack(producer, **kwargs).astype(jnp.float32)
    self._assert_violation(_valid_case(code=2, bits=64, base_dtype=(2, 64)),
                           narrows, r"float32; expected \(2, 3\) float64")

  def test_a_64_bit_copy_false_import_is_refused_with_x64_off(self) -> None:
    conformance.require_x64(False, "with x64 on float64 is kept, and "
                            "copy=False shares it")
    stats = capsule_fuzz.Stats()
    capsule_fuzz.run_case(_valid_case(code=2, bits=64, base_dtype=(2, 64),
                                      copy=False), stats)
    self.assertEqual(stats.outcomes["CopyRequiredError"], 1)

  def test_a_64_bit_copy_false_import_returns_shared_with_x64_on(
      self) -> None:
    conformance.require_x64(True, "with x64 off float64 is narrowed, a "
                            "copy, which copy=False refuses")
    stats = capsule_fuzz.Stats()
    # run_case holds a returned copy=False import to sharing the memory.
    capsule_fuzz.run_case(_valid_case(code=2, bits=64, base_dtype=(2, 64),
                                      copy=False), stats)
    self.assertEqual(stats.outcomes["returned"], 1)

  def test_case_round_trips_through_json(self) -> None:
    case = _valid_case(strides=(3, 1), byte_offset=2**64 - 1,
                       corruption="huge_byte_offset")
    self.assertEqual(capsule_fuzz.Case.from_json(case.to_json()), case)

  def test_wrong_values_fail(self) -> None:
    def wrong(producer: Any, **kwargs: Any) -> Any:
      return dlpack.from_dlpack(producer, **kwargs)[::-1]
    self._assert_violation(_valid_case(), wrong,
                           r"(?s)returned array\(.*; expected array\(")

  def test_a_second_deleter_call_fails(self) -> None:
    def releases_twice(producer: Any, **kwargs: Any) -> Any:
      result = dlpack.from_dlpack(producer, **kwargs)
      producer.state.on_delete()  # As a double release would.
      return jnp.array(result)  # A copy, on the device result is on.
    self._assert_violation(_valid_case(copy=True), releases_twice,
                           "deleter ran 2 times")

  def test_a_release_while_aliased_fails(self) -> None:
    def releases_early(producer: Any, **kwargs: Any) -> Any:
      result = dlpack.from_dlpack(producer, **kwargs)
      producer.state.on_delete()
      return result
    self._assert_violation(_valid_case(copy=False), releases_early,
                           "while the result still aliases")

  def test_a_leaked_capsule_fails(self) -> None:
    leaked: list[Any] = []

    def leaks(producer: Any, **kwargs: Any) -> Any:
      leaked.append(producer.__dlpack__())
      raise dlpack.CopyRequiredError("refused")
    self._assert_violation(_valid_case(copy=False), leaks,
                           "1 references to the producer's capsules remain")

  @parameterized.named_parameters(
      ("buffer_error", None, BufferError("refused")),
      ("copy_required_without_copy_false", None,
       dlpack.CopyRequiredError("refused")),
  )
  def test_a_refused_valid_tensor_fails(self, copy: bool | None,
                                        error: Exception) -> None:
    def refuses(producer: Any, **kwargs: Any) -> Any:
      del producer, kwargs
      raise error
    self._assert_violation(_valid_case(copy=copy), refuses,
                           "refused a valid tensor")

  @parameterized.named_parameters(
      ("copy_true_shares", True, False, "copy=True returned an array sharing"),
      ("copy_false_copies", False, True, "copy=False returned a copy"),
  )
  def test_a_broken_copy_promise_fails(self, asked: bool, done: bool,
                                       message: str) -> None:
    def breaks_the_promise(producer: Any, **kwargs: Any) -> Any:
      return dlpack.from_dlpack(producer, **dict(kwargs, copy=done))
    self._assert_violation(_valid_case(copy=asked), breaks_the_promise,
                           message)

  def test_a_result_on_another_device_fails(self) -> None:
    def moves(producer: Any, **kwargs: Any) -> Any:
      del kwargs
      return jax.device_put(dlpack.from_dlpack(producer, copy=True),
                            jax.devices("cpu")[-1])
    cpu_devices.require(2)
    self._assert_violation(_valid_case(device=0), moves,
                           "returned an array on")

  def test_an_undocumented_exception_fails(self) -> None:
    def raises(producer: Any, **kwargs: Any) -> Any:
      raise OverflowError("shape")
    self._assert_violation(_valid_case(), raises, "raised OverflowError")

  @parameterized.named_parameters(
      ("null_data", dict(corruption="null_data", data_null=True)),
      ("huge_dim", dict(corruption="huge_dim", shape=(2, 2**62))),
  )
  def test_a_value_for_a_corrupt_tensor_fails(
      self, overrides: dict[str, Any]) -> None:
    def accepts(producer: Any, **kwargs: Any) -> Any:
      del producer, kwargs
      return jnp.zeros((2, 3))
    self._assert_violation(_valid_case(**overrides), accepts,
                           "expected BufferError")


if __name__ == "__main__":
  absltest.main()
