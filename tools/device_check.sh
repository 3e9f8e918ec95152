#!/usr/bin/env bash
# The main job on a GPU: for a machine with an NVIDIA GPU whose Python (3.12)
# already has CUDA builds of jax/jaxlib, torch and CuPy, and no network.
#
#   bash tools/device_check.sh              # on the GPU machine
#   bash tools/device_check.sh --rehearse   # the same stages on a CPU machine
#   bash tools/device_check.sh --fetch-wheels   # here, with PyPI: see below
#
# Stages, each under `timeout`, all within DEVICE_CHECK_SECONDS (280 s):
#   1. gpu: nvidia-smi lists a GPU and this jaxlib has a GPU device.
#   2. install: the working tree with `pip install --no-deps -e .` (no index,
#      no build isolation: there is no network); where pip cannot (no
#      setuptools, an externally managed Python), PYTHONPATH instead.
#   3. jax-patch check: every conformance case, the CUDA producers' included
#      (torch CUDA tensors, CuPy arrays, JAX's own GPU arrays), upstream and
#      patched side by side.
#   4. gpu tests: the test modules that use a GPU, whole, and every other test
#      named for one or for the on-device gather (`-k "gpu or cuda or ..."`).
# The last line counts the stages, `device check: N passed, N failed`; the
# exit status is non-zero if any failed. Without a GPU it says so and exits 2
# (--rehearse runs the stages anyway, to test this script).
#
# The tests need pytest and absl-py. If the GPU machine's Python lacks them,
# `--fetch-wheels` (run here, where PyPI answers) puts pure-Python wheels in
# build/device-wheels; carry that folder along and this script installs them
# from it, offline.
#
# PYTHON names the interpreter (default: the first of python3.12, python3,
# python that imports jax). The log goes to $OUT/device_check.log when OUT is
# set, with the JUnit XML of the tests beside it.
set -uo pipefail
cd "$(dirname "$0")/.."

readonly WHEELS="build/device-wheels"
# Pure-Python test requirements, pinned as in setup.cfg's test extra.
readonly TEST_WHEELS=(pytest==9.2.0 absl-py==2.5.1 hypothesis==6.170.17
                      array-api-strict==2.6.1)

rehearse=0
case "${1:-}" in
  --rehearse) rehearse=1 ;;
  --fetch-wheels)
    exec python3 -m pip download --only-binary=:all: --python-version 3.12 \
      -d "${WHEELS}" "${TEST_WHEELS[@]}" ;;
  "") ;;
  *) echo "usage: $0 [--rehearse | --fetch-wheels]" >&2; exit 64 ;;
esac

readonly DEADLINE=$((SECONDS + ${DEVICE_CHECK_SECONDS:-280}))
OUT_DIR="${OUT:-}"
if [ -z "${OUT_DIR}" ]; then OUT_DIR="$(mktemp -d)"; fi
mkdir -p "${OUT_DIR}"
readonly LOG="${OUT_DIR}/device_check.log"

# JAX takes 75% of GPU memory up front by default; torch and CuPy share it.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
# Several CPU devices beside the GPU, for the multi-device cases (as Bazel).
export XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=4"
export PYTHONUNBUFFERED=1

passed=0
failed=0
summary=()

# Seconds left for a stage: at most $1, never past the deadline.
seconds_for() {
  local left=$((DEADLINE - SECONDS - 5))
  if [ "${left}" -lt 1 ]; then left=1; fi
  if [ "$1" -lt "${left}" ]; then echo "$1"; else echo "${left}"; fi
}

# Runs "$@" under timeout, capped at $1 seconds; notes a timeout.
bounded() {
  local cap
  cap="$(seconds_for "$1")"
  shift
  timeout -k 5 "${cap}" "$@"
  local status=$?
  if [ "${status}" -eq 124 ] || [ "${status}" -eq 137 ]; then
    echo "(timed out after ${cap} s)"
  fi
  return "${status}"
}

# Records one stage: name, whether it passed (0), and what it found.
record() {
  if [ "$2" -eq 0 ]; then
    passed=$((passed + 1))
    summary+=("$1: ok${3:+ ($3)}")
  else
    failed=$((failed + 1))
    summary+=("$1: FAILED${3:+ ($3)}")
  fi
}

pick_python() {
  local candidate
  for candidate in ${PYTHON:-python3.12 python3 python}; do
    if "${candidate}" -c "import jax" >/dev/null 2>&1; then
      command -v "${candidate}"
      return 0
    fi
  done
  return 1
}

gpu_names() {
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -i gpu
}

stage_gpu() {
  echo "== gpu"
  bounded 60 "${PY}" - <<'EOF'
import jax, jaxlib, sys
print("python", sys.version.split()[0], "jax", jax.__version__,
      "jaxlib", jaxlib.__version__, "backend", jax.default_backend())
for name in ("torch", "cupy"):
  try:
    module = __import__(name)
  except ImportError as err:
    print(f"{name}: not importable ({err})")
    continue
  if name == "torch":
    gpu = module.cuda.is_available() and module.version.cuda
  else:
    gpu = module.cuda.runtime.getDeviceCount()
  print(f"{name} {module.__version__}: CUDA {gpu}")
print("devices:", jax.devices())
jax.devices("gpu")  # Raises where this jaxlib has no GPU.
EOF
}

# Installs the working tree; PYTHONPATH where pip cannot.
stage_install() {
  echo "== install"
  if bounded 90 "${PY}" -m pip install --no-index --no-deps \
      --no-build-isolation --quiet -e . >"${OUT_DIR}/pip-install.txt" 2>&1; then
    install_how="pip install --no-deps -e ."
  else
    tail -n 3 "${OUT_DIR}/pip-install.txt"
    echo "pip could not install the working tree here; using PYTHONPATH"
    export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}"
    install_how="PYTHONPATH"
  fi
  if ! "${PY}" -c "import pytest, absl" 2>/dev/null && [ -d "${WHEELS}" ]; then
    echo "installing the test wheels from ${WHEELS}"
    bounded 60 "${PY}" -m pip install --no-index --quiet \
      --find-links "${WHEELS}" "${TEST_WHEELS[@]}"
  fi
  "${PY}" -c "import jax_patch; print('jax_patch from', jax_patch.__file__)"
}

stage_check() {
  echo "== jax-patch check"
  # The console script's entry point, through the chosen interpreter (pip may
  # not have put `jax-patch` on PATH, and PYTHONPATH installs none).
  bounded 120 "${PY}" -c \
    "import sys; from jax_patch._src.cli import main; sys.exit(main(['check']))" \
    | tee "${OUT_DIR}/check.txt"
  local status="${PIPESTATUS[0]}"
  check_counts="$(grep '^patched:' "${OUT_DIR}/check.txt" 2>/dev/null | tail -n 1)"
  return "${status}"
}

# The test modules that use a GPU or a CUDA producer.
gpu_test_modules() {
  grep -l -i -E 'cupy|torch\.cuda|devices\(.(gpu|cuda).\)|GPU_CASES' \
    tests/*_test.py
}

# pytest's counts from JUnit XML files: "N passed, N failed, N skipped".
junit_counts() {
  "${PY}" - "$@" <<'EOF'
import sys, xml.etree.ElementTree as ElementTree
counts = [0, 0, 0]
for path in sys.argv[1:]:
  try:
    root = ElementTree.parse(path).getroot()
  except (OSError, ElementTree.ParseError):
    continue
  for suite in root.iter("testsuite"):
    total, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
    bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    counts[0] += total - bad - skipped
    counts[1] += bad
    counts[2] += skipped
print("%d passed, %d failed, %d skipped" % tuple(counts))
EOF
}

stage_tests() {
  echo "== gpu tests"
  if ! "${PY}" -c "import pytest, absl" 2>/dev/null; then
    echo "pytest or absl-py is not installed, and ${WHEELS} is not here"
    echo "(run tools/device_check.sh --fetch-wheels where PyPI answers)"
    tests_counts="not run"
    return 1
  fi
  local modules status=0 code ignores=()
  mapfile -t modules < <(gpu_test_modules)
  echo "modules using a GPU: ${modules[*]:-none}"
  rm -f "${OUT_DIR}"/gpu-tests-*.xml
  if [ "${#modules[@]}" -gt 0 ]; then
    bounded 150 "${PY}" -m pytest -q -p no:cacheprovider "${modules[@]}" \
      --junitxml="${OUT_DIR}/gpu-tests-modules.xml"
    status=$?
  fi
  for module in "${modules[@]}"; do ignores+=("--ignore=${module}"); done
  # By name: GPU producers, and the on-device gather of strided accelerator
  # tensors (GatherOnDeviceTest).
  bounded 150 "${PY}" -m pytest -q -p no:cacheprovider tests "${ignores[@]}" \
    -k "gpu or cuda or cupy or accelerator or gather" \
    --junitxml="${OUT_DIR}/gpu-tests-named.xml"
  code=$?
  # pytest exits 5 when no test has such a name: not a failure here.
  if [ "${code}" -ne 0 ] && [ "${code}" -ne 5 ]; then status="${code}"; fi
  tests_counts="$(junit_counts "${OUT_DIR}"/gpu-tests-*.xml)"
  return "${status}"
}

main() {
  echo "device check: $(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null)"
  local gpus
  gpus="$(gpu_names)"
  if [ -z "${gpus}" ] && [ "${rehearse}" -eq 0 ]; then
    echo "device check skipped: no NVIDIA GPU here (nvidia-smi lists none)."
    echo "Run it on a GPU machine, or with --rehearse to try the stages here."
    return 2
  fi
  echo "${gpus:-no GPU: a rehearsal on the CPU; the gpu stage fails}"
  if ! PY="$(pick_python)"; then
    echo "no Python here imports jax (set PYTHON)"
    return 1
  fi
  echo "python: ${PY}"
  install_how="" check_counts="" tests_counts=""
  stage_gpu
  record gpu $? "${gpus:-none}"
  stage_install
  record install $? "${install_how}"
  stage_check
  record "jax-patch check" $? "${check_counts}"
  stage_tests
  record "gpu tests" $? "${tests_counts}"

  echo "== summary ($((SECONDS)) s)"
  printf '%s\n' "${summary[@]}"
  if [ "${rehearse}" -eq 1 ]; then echo "(a rehearsal without a GPU)"; fi
  echo "device check: ${passed} passed, ${failed} failed"
  [ "${failed}" -eq 0 ]
}

main 2>&1 | tee "${LOG}"
status="${PIPESTATUS[0]}"
echo "log: ${LOG}"
exit "${status}"
