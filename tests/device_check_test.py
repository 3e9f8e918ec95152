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

"""Tests for the GPU check (tools/device_check.sh), most of them on a CPU.

What a CPU shows: the side-stream case's own logic, with a thread standing
in for the CUDA stream (it fails when JAX reads before the producer's last
write, passes when the producer orders that write first, and does not pass
when it saw no busy work); the kDLCUDAManaged decision, with a stand-in
producer; that every test ID the script runs exists; that the wheels it
installs offline cover what the tests import.

What it cannot show: that torch's streams, jaxlib's ready events and a real
GPU behave as the stand-in does. ``SideStreamOnGpuTest`` shows the real case
failing against an importer that asks torch for no synchronisation; it runs
in the device check's GPU tests and skips elsewhere.
"""

# First: the CPU devices every test module runs with, before JAX starts.
from tests import cpu_devices  # pylint: disable=g-import-not-at-top

import ast  # pylint: disable=g-import-not-at-top
import contextlib  # pylint: disable=g-import-not-at-top
import importlib.metadata  # pylint: disable=g-import-not-at-top
import pathlib  # pylint: disable=g-import-not-at-top
import platform  # pylint: disable=g-import-not-at-top
import re  # pylint: disable=g-import-not-at-top
import subprocess  # pylint: disable=g-import-not-at-top
import sys  # pylint: disable=g-import-not-at-top
import tempfile  # pylint: disable=g-import-not-at-top
import threading  # pylint: disable=g-import-not-at-top
import time  # pylint: disable=g-import-not-at-top
from typing import Any  # pylint: disable=g-import-not-at-top
from unittest import mock  # pylint: disable=g-import-not-at-top
import zipfile  # pylint: disable=g-import-not-at-top

from absl.testing import absltest
import jax
import numpy as np

import jax_patch
from jax_patch._src import dlpack_compat
from jax_patch._src import dlpack_device
from jax_patch.testing import conformance
from tests import fresh_process

# The checkout (under Bazel, through the runfiles' link to this file).
_ROOT = pathlib.Path(__file__).resolve().parent.parent
_SCRIPT = _ROOT / "tools" / "device_check.sh"

# conformance_test's entry points (DeviceCheckScriptTest checks them).
_ENTRY_POINTS = ("jax_patch", "installed_jnp", "installed_jax_dlpack")

# The tests of accelerator code that run on a CPU, which the device check
# runs by these IDs on the GPU machine's JAX too.
_CPU_TEST_IDS = (
    "tests/dlpack_export_device_test.py::DLDeviceTypeTest",
    "tests/dlpack_import_test.py::GatherOnDeviceTest",
    "tests/device_check_test.py::SideStreamCaseTest",
    "tests/device_check_test.py::ManagedMemoryTest",
)


_CONFORMANCE = "tests/conformance_test.py::ConformanceTest"


def node_ids(label: str) -> list[str]:
  """The pytest node IDs the device check runs as ``label`` (cpu or gpu).

  The GPU ones: every GPU conformance case through each patched entry
  point, and the side-stream case against an unsynchronised importer.
  """
  if label == "cpu":
    return list(_CPU_TEST_IDS)
  if label != "gpu":
    raise ValueError(f"label must be 'cpu' or 'gpu', not {label!r}")
  return [f"{_CONFORMANCE}::test_case_{name}__{entry}"
          for name in sorted(conformance.GPU_CASES)
          for entry in _ENTRY_POINTS] + [
              "tests/device_check_test.py::SideStreamOnGpuTest::"
              "test_case_fails_against_an_unsynchronised_importer"]


class ThreadSideStream:
  """A stand-in for a CUDA side stream: a thread that works, then writes.

  Its array is aligned host memory, which the patch imports without a copy,
  so a read through JAX sees what the memory holds at that moment: stale
  values until the thread's last step writes the final ones (seeded, so
  unlike any stale ones). Its producer orders that write before the
  consumer, as DLPack asks, by waiting for the thread in ``__dlpack__``,
  unless asked with ``stream=-1``. Work of fewer than ``idle_below`` rounds
  is over before ``start`` returns.
  """

  def __init__(self, seconds_per_round: float = 0.02,
               idle_below: int = 0):
    self.seconds_per_round = seconds_per_round
    self.idle_below = idle_below
    self.streams_asked: list[Any] = []
    self.buffer = conformance.aligned_array((16,))
    self._thread = threading.Thread()

  def current(self) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()

  def start(self, rounds: int) -> Any:
    self.buffer = conformance.aligned_array((16,))
    self.buffer[...] = -1  # What the memory held before.
    final = np.random.default_rng().standard_normal(16).astype(np.float32)
    self._thread = threading.Thread(
        target=self._work, args=(rounds * self.seconds_per_round, final))
    self._thread.start()
    if rounds < self.idle_below:
      self._thread.join()
    return _StandInProducer(self)

  def _work(self, seconds: float, final: np.ndarray[Any, Any]) -> None:
    time.sleep(seconds)
    self.buffer[...] = final

  def busy(self) -> bool:
    return self._thread.is_alive()

  def finish(self) -> np.ndarray[Any, Any]:
    self._thread.join()
    return np.array(self.buffer)


class _StandInProducer:
  """The array ``ThreadSideStream`` writes, as a DLPack producer."""

  def __init__(self, stream: ThreadSideStream):
    self._stream = stream

  def __dlpack_device__(self) -> tuple[int, int]:
    return (dlpack_device.KDL_CPU, 0)

  def __dlpack__(self, *, stream: Any = None, max_version: Any = None,
                 dl_device: Any = None, copy: Any = None) -> Any:
    self._stream.streams_asked.append(stream)
    if stream != -1:
      self._stream.finish()  # Its work, ordered before the consumer's.
    buffer: Any = self._stream.buffer
    return buffer.__dlpack__(max_version=max_version, dl_device=dl_device,
                             copy=copy)


def _unsynchronised(x: Any, **kwargs: Any) -> Any:
  """An importer that asks the producer for no synchronisation."""
  return jax_patch.from_dlpack(conformance.Unsynchronised(x), **kwargs)


def _case(name: str) -> conformance.Case:
  case, = (case for case in conformance.CASES if case.name == name)
  return case


class SideStreamCaseTest(absltest.TestCase):
  """``torch_cuda_side_stream_is_ordered`` can fail, shown on a CPU."""

  def _run_the_case(self, stream: ThreadSideStream,
                    from_dlpack: Any) -> tuple[str, bool | None]:
    # The registered case itself, with the stand-in stream for torch's.
    with mock.patch.object(conformance, "_require_gpu", lambda: None), \
        mock.patch.object(conformance, "_require_torch_cuda", lambda: None), \
        mock.patch.object(conformance, "TorchSideStream",
                          lambda torch: stream):
      return conformance.run_case(_case("torch_cuda_side_stream_is_ordered"),
                                  from_dlpack)

  def test_fails_against_an_unsynchronised_importer(self) -> None:
    stream = ThreadSideStream()
    detail, passed = self._run_the_case(stream, _unsynchronised)
    self.assertIs(passed, False, detail)
    self.assertIn("had not written yet", detail)
    self.assertEqual(stream.streams_asked, [-1])

  def test_passes_when_the_producer_orders_its_work_first(self) -> None:
    stream = ThreadSideStream()
    detail, passed = self._run_the_case(stream, jax_patch.from_dlpack)
    self.assertIs(passed, True, detail)
    # A CPU producer is asked with stream=None: it must finish first.
    self.assertEqual(stream.streams_asked, [None])
    self.assertIn("from_dlpack returned once the stream was done", detail)

  def test_tries_more_work_until_the_stream_is_busy_at_the_import(
      self) -> None:
    stream = ThreadSideStream(seconds_per_round=0.002, idle_below=128)
    detail, passed = self._run_the_case(stream, _unsynchronised)
    self.assertIs(passed, False, detail)
    self.assertIn("(128 rounds)", detail)

  def test_does_not_pass_when_the_stream_was_never_busy(self) -> None:
    stream = ThreadSideStream(seconds_per_round=0, idle_below=1 << 20)
    detail, passed = self._run_the_case(stream, jax_patch.from_dlpack)
    self.assertIs(passed, False, detail)
    self.assertIn("inconclusive", detail)
    self.assertEqual(stream.streams_asked, [])


class SideStreamOnGpuTest(absltest.TestCase):
  """The real side-stream case against torch on a GPU: it must fail when the
  importer asks torch for no synchronisation. Skips without a GPU; the
  device check runs it and counts a skip as a failure."""

  def test_case_fails_against_an_unsynchronised_importer(self) -> None:
    conformance._require_gpu()  # pylint: disable=protected-access
    conformance._require_torch_cuda()  # pylint: disable=protected-access
    case = _case("torch_cuda_side_stream_is_ordered")
    detail, passed = conformance.run_case(case, _unsynchronised)
    self.assertIs(passed, False, detail)
    self.assertIn("had not written yet", detail)


class ManagedMemoryTest(absltest.TestCase):
  """kDLCUDAManaged (13): imported through a host export, never handed to
  jaxlib as device memory (see dlpack_device.HOST_EXPORT_ONLY). No
  producer here has managed memory: a stand-in reports it."""

  def _producer(self) -> conformance.ForeignDeviceProducer:
    return conformance.ForeignDeviceProducer(
        conformance.aligned_array((8,)),
        device_type=dlpack_device.KDL_CUDA_MANAGED)

  def test_imports_a_host_export_onto_the_cpu_device_asked_for(self) -> None:
    producer = self._producer()
    cpu = jax.devices("cpu")[0]
    result = jax_patch.from_dlpack(producer, device=cpu)
    self.assertEqual(result.devices(), {cpu})
    np.testing.assert_array_equal(np.asarray(result), np.arange(8))
    self.assertEqual(producer.calls[-1]["dl_device"], (1, 0))
    self.assertIsNone(producer.calls[-1]["stream"])

  def test_without_a_cpu_device_raises_buffer_error_saying_what_to_pass(
      self) -> None:
    with self.assertRaisesRegex(BufferError,
                                "CUDA managed memory.*device=") as raised:
      jax_patch.from_dlpack(self._producer())
    self.assertNotIsInstance(raised.exception,
                             jax_patch.UnsupportedDeviceError)

  def test_copy_false_raises_copy_required(self) -> None:
    with self.assertRaises(jax_patch.CopyRequiredError):
      jax_patch.from_dlpack(self._producer(), device=jax.devices("cpu")[0],
                            copy=False)

  def test_no_jax_device_holds_it_even_with_a_cuda_backend(self) -> None:
    cuda_device = object()

    class CudaBackend:
      platform = "cuda"

      def device_from_local_hardware_id(self, hardware_id: int) -> Any:
        del hardware_id
        return cuda_device

    backends = {**dlpack_compat.backends(), "cuda": CudaBackend()}
    with mock.patch.object(dlpack_compat, "backends", lambda: backends):
      self.assertIsNone(dlpack_device.jax_device_for(
          (dlpack_device.KDL_CUDA_MANAGED, 0)))
      # The same backend, for device memory.
      self.assertIs(dlpack_device.jax_device_for((dlpack_device.KDL_CUDA, 0)),
                    cuda_device)

  def test_export_to_it_raises_buffer_error(self) -> None:
    # From CPU memory: what is refused is the target, not the source.
    x: Any = jax.device_put(np.arange(4.0), cpu_devices.cpu())
    with jax_patch.patched():
      with self.assertRaises(BufferError):
        x.__dlpack__(dl_device=(dlpack_device.KDL_CUDA_MANAGED, 0))


def _pinned_wheels() -> dict[str, str]:
  """The script's pinned test wheels: normalised name -> version."""
  listed = subprocess.run(["bash", str(_SCRIPT), "--list-wheels"],
                          capture_output=True, text=True, check=True,
                          timeout=60).stdout.split()
  pins = (line.split("==") for line in listed)
  return {_normalise(name): version for name, version in pins}


def _normalise(name: str) -> str:
  return re.sub(r"[-_.]+", "-", name).lower()


# What the GPU machine brings: JAX and what it needs, and the producers.
_RUNTIME = frozenset({"jax", "jaxlib", "numpy", "ml-dtypes", "torch",
                      "cupy"})


def _module_level_imports(path: pathlib.Path) -> set[str]:
  """Top-level module names a file imports when it is imported."""
  names = set()
  pending: list[ast.AST] = list(ast.parse(path.read_text()).body)
  while pending:
    node = pending.pop()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
      continue  # Runs later, if at all.
    if isinstance(node, ast.Import):
      names |= {alias.name.split(".")[0] for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
      names.add(node.module.split(".")[0])
    pending.extend(ast.iter_child_nodes(node))
  return names


class DeviceCheckScriptTest(absltest.TestCase):
  """What tools/device_check.sh runs and installs exists and suffices."""

  def test_every_test_id_collects(self) -> None:
    # All of conformance_test too: to see that no entry point is left out.
    ids = node_ids("gpu") + node_ids("cpu")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q",
         "-p", "no:cacheprovider", "tests/conformance_test.py", *ids],
        capture_output=True, text=True, timeout=300, cwd=_ROOT, check=False,
        env=fresh_process.environment())
    self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr)
    collected = {line for line in run.stdout.splitlines() if "::" in line}
    gpu_cases = {line for line in collected
                 if line.startswith(_CONFORMANCE) and any(
                     f"::test_case_{name}__" in line
                     for name in conformance.GPU_CASES)}
    self.assertLen(gpu_cases,
                   len(conformance.GPU_CASES) * len(_ENTRY_POINTS))
    self.assertSameElements(
        [i for i in node_ids("gpu") if i.startswith(_CONFORMANCE)],
        gpu_cases)
    self.assertContainsSubset(node_ids("gpu"), collected)
    for class_id in node_ids("cpu"):
      self.assertTrue(any(line.startswith(class_id + "::")
                          for line in collected), class_id)

  def test_wheels_provide_every_third_party_import_of_the_tests(
      self) -> None:
    provided = importlib.metadata.packages_distributions()
    wheels = _pinned_wheels()
    for path in sorted((_ROOT / "tests").glob("*.py")):
      for module in _module_level_imports(path):
        if module in sys.stdlib_module_names or module in ("jax_patch",
                                                           "tests"):
          continue
        dists = {_normalise(d) for d in provided.get(module, [module])}
        self.assertTrue(dists & (wheels.keys() | _RUNTIME),
                        f"{path.name} imports {module} ({dists}), which no "
                        "wheel brings")

  def test_wheels_bring_their_own_requirements(self) -> None:
    from packaging.requirements import Requirement  # pylint: disable=g-import-not-at-top
    wheels = _pinned_wheels()
    # The GPU machine's Python, on Linux, without extras.
    environment = {"python_version": "3.12", "python_full_version": "3.12.0",
                   "sys_platform": "linux", "platform_system": "Linux",
                   "extra": ""}
    for dist in wheels:
      for text in importlib.metadata.requires(dist) or []:
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate(
            environment):
          continue
        self.assertIn(_normalise(requirement.name),
                      wheels.keys() | _RUNTIME, f"{dist} needs {text}")

  def test_wheels_are_the_versions_the_tests_run_with_here(self) -> None:
    pinned = _pinned_wheels()
    here = importlib.metadata.version("pytest")
    if here != pinned["pytest"]:
      # An accelerator machine's own Python, say: no pins to hold it to.
      self.skipTest(f"this interpreter's test stack is not setup.cfg's "
                    f"(pytest {here}, pinned {pinned['pytest']})")
    for dist, version in pinned.items():
      self.assertEqual(importlib.metadata.version(dist), version, dist)


def _write_wheel(folder: pathlib.Path, filename: str, module: str,
                 value: str) -> None:
  with zipfile.ZipFile(folder / filename, "w") as wheel:
    wheel.writestr(f"{module}/__init__.py", f"VALUE = {value!r}\n")


class UnpackWheelsTest(absltest.TestCase):
  """The install where pip cannot run (``--unpack-wheels``): each pin's
  wheel for this Python, unpacked as it lies."""

  def _folder(self) -> pathlib.Path:
    folder = tempfile.TemporaryDirectory()  # pylint: disable=consider-using-with
    self.addCleanup(folder.cleanup)
    return pathlib.Path(folder.name)

  def _unpack(self, folder: pathlib.Path, *pins: str) -> tuple[
      subprocess.CompletedProcess[str], pathlib.Path]:
    target = self._folder()
    run = subprocess.run(
        ["bash", str(_SCRIPT), "--unpack-wheels", str(target), str(folder),
         *pins], env={**fresh_process.environment(), "PYTHON": sys.executable},
        capture_output=True, text=True, timeout=60, check=False)
    return run, target

  def test_takes_each_pins_wheel_for_this_python(self) -> None:
    folder = self._folder()
    here = "cp%d%d" % sys.version_info[:2]
    machine = platform.machine()
    _write_wheel(folder, "fake_pure-1.0-py3-none-any.whl", "fake_pure",
                 "pinned")
    _write_wheel(folder, "fake_pure-0.9-py3-none-any.whl", "fake_pure",
                 "another version")
    _write_wheel(folder, f"fake_native-2.0-cp39-cp39-manylinux_2_17_"
                 f"{machine}.whl", "fake_native", "another Python")
    _write_wheel(folder, f"fake_native-2.0-{here}-{here}-manylinux_2_17_"
                 f"{machine}.whl", "fake_native", "this Python")
    run, target = self._unpack(folder, "fake-pure==1.0", "fake_native==2.0")
    self.assertEqual(run.returncode, 0, run.stderr)
    self.assertEqual((target / "fake_pure" / "__init__.py").read_text(),
                     "VALUE = 'pinned'\n")
    self.assertEqual((target / "fake_native" / "__init__.py").read_text(),
                     "VALUE = 'this Python'\n")

  def test_a_pin_without_a_wheel_for_this_python_fails_naming_it(
      self) -> None:
    folder = self._folder()
    _write_wheel(folder, f"fake_native-2.0-cp39-cp39-manylinux_2_17_"
                 f"{platform.machine()}.whl", "fake_native", "another Python")
    run, _ = self._unpack(folder, "fake_native==2.0")
    self.assertNotEqual(run.returncode, 0)
    self.assertIn("no wheel of fake_native==2.0 for this Python",
                  run.stderr)


if __name__ == "__main__":
  absltest.main()
