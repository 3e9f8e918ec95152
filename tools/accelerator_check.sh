#!/usr/bin/env bash
# The main job on an accelerator JAX can name as its default device (a TPU
# today; a GPU too), for a machine whose Python already has JAX for it and
# no network. tools/device_check.sh stays the GPU machine's own run.
#
#   bash tools/accelerator_check.sh --fetch-wheels  # here, where PyPI answers
#   bash tools/accelerator_check.sh cases           # there: check, speed, tears
#   bash tools/accelerator_check.sh suite           # there: the tests
#
# One machine holds the chip for one process at a time, so each stage runs
# alone, and the device tool's 10-minute limit per command splits the run in
# two calls. Each stage writes its log to $OUT (default build/accelerator) as
# it goes, so a crash or a time-out keeps what ran:
#   cases: the date, the source hash and the JAX (machine.log); `jax-patch check --require-accelerator --x64
#     both` (check.log); the speed table, `benchmarks/dlpack_bench.py
#     --accelerator` (bench.log); the tear counts of the patch, upstream and
#     a bare `device_put` left unwaited (tears.log); `jax-patch vendor`, the
#     vendored conformance test on this machine's own JAX (vendor.log).
#   suite: the tests, in one process, JAX's default device the accelerator,
#     each result as it finishes (suite.log), and JUnit XML (junit.xml).
# The last line counts the stages, `accelerator check: N passed, N failed`.
set -uo pipefail
cd "$(dirname "$0")/.."

readonly WHEELS="build/accelerator-wheels"
# What the tests import that the machine's image lacks (it has JAX, NumPy,
# pytest and hypothesis), for its Python (3.11) on x86-64 Linux.
readonly TEST_WHEELS=(absl-py==2.5.1 array-api-strict==2.6.1
                      numpy-allocator==1.2.1)
OUT="${OUT:-build/accelerator}"
mkdir -p "${OUT}"

fetch_wheels() {
  rm -rf "${WHEELS}" && mkdir -p "${WHEELS}" &&
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      --python-version 3.11 --implementation cp \
      --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
      --platform manylinux2014_x86_64 -d "${WHEELS}" "${TEST_WHEELS[@]}" &&
    echo "$(find "${WHEELS}" -name '*.whl' | wc -l) wheels in ${WHEELS}:" \
      "the device run carries that folder"
}

# The wheels, and torch's CPU build from the machine's own folder, under
# /tmp (commands run as an ordinary user), after the machine's own packages.
install_deps() {
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated --quiet \
    --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    "${WHEELS}"/*.whl || return 1
  if [ -d /opt/wheels ]; then
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated --quiet \
      --only-binary=:all: --no-index --find-links /opt/wheels --no-deps \
      --no-compile --target /tmp/torch torch==2.13.0 ||
      echo "torch did not install: its tests and cases skip, saying so"
  fi
  export PYTHONPATH="${PYTHONPATH:-}:/tmp/site:/tmp/torch:${PWD}"
}

passed=0
failed=0
stage() {
  local name="$1" start="${SECONDS}"
  shift
  echo "== ${name}"
  if "$@"; then
    passed=$((passed + 1)); echo "== ${name}: passed ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1)); echo "== ${name}: FAILED ($((SECONDS - start)) s)"
  fi
}

machine() {
  {
    date -u
    bash tools/device_check.sh --source-hash
    python3 -c 'import jax, sys; print(sys.version.split()[0], "jax",
jax.__version__, jax.devices())'
  } 2>&1 | tee "${OUT}/machine.log"
}

check_cases() {
  python3 -m jax_patch check --require-accelerator --x64 both 2>&1 |
    tee "${OUT}/check.log"
}

speed() {
  python3 benchmarks/dlpack_bench.py --accelerator 2>&1 |
    tee "${OUT}/bench.log"
}

# Of 20 imports of 64 MB written at once after each returns, how many showed
# the write: the patch must show none; upstream and an unwaited device_put
# are measured, not judged.
tears() {
  python3 - <<'EOF' 2>&1 | tee "${OUT}/tears.log"
import sys
import jax
import jax.numpy as jnp
import jax_patch
from jax_patch.testing import conformance as c
accelerator = jax.devices()[0]
jax_patch.uninstall()
importers = {
    "jax_patch.from_dlpack": jax_patch.from_dlpack,
    "upstream jnp.from_dlpack": jnp.from_dlpack,
    "jax.device_put, not waited": (
        lambda x, device, copy: jax.device_put(x, device)),
}
patch_torn = 0
for name, importer in importers.items():
  for copy in (None, True):
    torn = c.torn_imports(importer, accelerator, copy)
    print(f"{name}, copy={copy}: {torn} of {c.TEAR_ROUNDS} torn "
          f"({c.TEAR_BYTES >> 20} MB onto {accelerator})", flush=True)
    patch_torn += torn if name == "jax_patch.from_dlpack" else 0
sys.exit(1 if patch_torn else 0)
EOF
}

vendored() {
  python3 -m jax_patch vendor 2>&1 | tee "${OUT}/vendor.log"
}

suite() {
  # -o addopts= keeps xdist out (one process holds the chip); -v puts each
  # result in the log as it finishes. The typing tests build virtualenvs with
  # mypy, pyright and pyrefly, which this machine has not: left out here,
  # they run on every CPU run.
  python3 -m pytest -p no:cacheprovider -o addopts= -v -rs \
    --junitxml="${OUT}/junit.xml" --deselect tests/typing_test.py tests \
    > "${OUT}/suite.log" 2>&1
  local status=$?
  grep -E "^(SKIPPED|FAILED|ERROR)|passed|failed" "${OUT}/suite.log" | tail -60
  return "${status}"
}

case "${1:-}" in
  --fetch-wheels) fetch_wheels; exit ;;
  cases)
    stage "machine" machine
    stage "install" install_deps
    stage "check --require-accelerator --x64 both" check_cases
    stage "tears (64 MB, 20 rounds)" tears
    stage "speed (benchmarks --accelerator)" speed
    stage "vendored conformance test" vendored ;;
  suite)
    stage "machine" machine
    stage "install" install_deps
    stage "tests, one process, default device the accelerator" suite ;;
  *)
    echo "usage: $0 --fetch-wheels | cases | suite" >&2
    exit 2 ;;
esac
echo "accelerator check: ${passed} passed, ${failed} failed"
[ "${failed}" -eq 0 ]
