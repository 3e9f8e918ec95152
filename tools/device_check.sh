#!/usr/bin/env bash
# The main job on a GPU: for a machine with an NVIDIA GPU whose Python (3.12)
# already has CUDA builds of jax/jaxlib, torch and CuPy, and no network.
#
#   bash tools/device_check.sh                 # on the GPU machine
#   bash tools/device_check.sh --rehearse      # the same, on a CPU machine
#   bash tools/device_check.sh --fetch-wheels  # here, where PyPI answers
#   bash tools/device_check.sh --list-wheels   # the pinned test wheels
#   bash tools/device_check.sh --source-hash   # the hash the log prints
#
# Stages; every command runs under `timeout`, all within
# DEVICE_CHECK_SECONDS (280 s). [GPU] marks those that need a GPU.
#   1. gpu [GPU]: JAX has a GPU device, torch sees a CUDA device and CuPy
#      reaches one; each that does not is named with its error (a CuPy or
#      torch installation problem reads as one, not as a missing GPU).
#   2. install: the working tree goes on PYTHONPATH (nothing is installed
#      into the interpreter); the test wheels in build/device-wheels are
#      installed with `pip install --no-index --no-deps --target
#      build/device-test-deps` (unpacked with zipfile where pip cannot: no
#      pip, an externally managed Python), also on PYTHONPATH; every test
#      dependency must then import, and jax_patch from this tree.
#   3. `jax-patch check --require-gpu --require-accelerator --x64 both`
#      (on a GPU machine the GPU is also JAX's accelerator), run once, read
#      twice:
#      jax-patch check: no patched case fails, in either x64 mode;
#      GPU cases [GPU]: --require-gpu is met in both modes (every GPU case
#      passes; a skip counts as a failure).
#   4. CPU tests: the tests of the accelerator code paths that run on the
#      CPU (stand-in devices, the CPU gather, the side-stream case against a
#      stand-in stream), by node ID: none may fail or skip.
#   5. GPU tests [GPU]: by node ID, every GPU conformance case through each
#      entry point, and the side-stream case failing against an importer
#      that asks for no synchronisation: each ID must run and pass, none
#      skip.
# The node IDs come from tests/device_check_test.py (node_ids), which checks
# that each of them exists; pytest fails on an ID it cannot find, and a
# stage whose tests ran fewer than it named fails.
#
# On a GPU machine every stage must pass. On a CPU machine the [GPU] stages
# fail, saying why; --rehearse (CI) runs the same commands and passes when
# exactly that happens: each [GPU] stage failed in the way it must without a
# GPU (no GPU seen; every GPU case named by --require-gpu; every GPU test
# skipped) and every other stage passed. Nothing is faked.
#
# The last line counts the stages, `device check: N passed, N failed`; the
# exit status is non-zero if any failed. PYTHON names the interpreter
# (default: the first of python3.12, python3, python that imports jax). The
# log goes to $OUT/device_check.log when OUT is set, with the check's output
# and the tests' JUnit XML beside it.
set -uo pipefail
cd "$(dirname "$0")/.."

readonly WHEELS="build/device-wheels"
readonly DEPS="build/device-test-deps"
# Every test dependency jax, jaxlib, NumPy and ml_dtypes do not bring, with
# each one's own requirements, pinned as installed by setup.cfg's test extra
# (tests/device_check_test.py checks that they cover every test module's
# imports). Pure Python but for hypothesis, whose wheels are compiled, one
# per Python version and platform.
readonly TEST_WHEELS=(absl-py==2.5.1 pytest==9.2.0 iniconfig==2.3.1
                      packaging==26.4 pluggy==1.7.0 pygments==2.21.0
                      hypothesis==6.170.17 sortedcontainers==2.4.0
                      array-api-strict==2.6.1)
# What the tests import from them.
readonly TEST_IMPORTS="absl pytest hypothesis array_api_strict"
# The files whose hash the log prints (a copy without .git has no commit).
readonly SOURCES=(jax_patch tests tools stubs setup.cfg pyproject.toml)

# In a checkout, the files the device tool sends (tracked, or untracked but
# not ignored); in the copy it made, every file but Python's caches.
source_hash() {
  local files
  if ! files="$(timeout -k 5 30 git ls-files --cached --others \
      --exclude-standard -- "${SOURCES[@]}" 2>/dev/null)"; then
    files="$(find "${SOURCES[@]}" -type f -not -path '*/__pycache__/*' \
      -not -name '*.pyc')"
  fi
  files="$(LC_ALL=C sort -u <<<"${files}")"
  printf '%s (%d files in %s)\n' \
    "$(xargs -d '\n' sha256sum <<<"${files}" | sha256sum | cut -c1-16)" \
    "$(wc -l <<<"${files}")" "${SOURCES[*]}"
}

# The wheels for the GPU machine's Python (DEVICE_PYTHON_VERSION, 3.12, on
# x86-64 Linux), and for this machine's, which a rehearsal here installs.
fetch_wheels() {
  local py=python3
  if [ -x .venv/bin/python ]; then py=.venv/bin/python; fi
  local device="${DEVICE_PYTHON_VERSION:-3.12}" here
  here="$(timeout -k 5 60 "${py}" -c \
    'import sys; print("%d.%d" % sys.version_info[:2])')" || return 1
  rm -rf "${WHEELS}" && mkdir -p "${WHEELS}" || return 1
  # --no-deps: the list is the whole closure; resolving would fetch NumPy,
  # which must stay the GPU machine's own.
  local where
  for where in "--python-version ${device} --platform manylinux_2_17_x86_64" \
      "--python-version ${here}"; do
    # shellcheck disable=SC2086  # $where is several options.
    timeout -k 5 300 "${py}" -m pip download --quiet --no-deps \
      --only-binary=:all: ${where} -d "${WHEELS}" "${TEST_WHEELS[@]}" \
      || return 1
  done
  echo "$(find "${WHEELS}" -name '*.whl' | wc -l) wheels in ${WHEELS}, for" \
    "Python ${device} on x86-64 and ${here} here; the device run must carry" \
    "that folder"
}

# Unpacks into $1 the wheel of each pin ($3...) in $2 that suits this Python:
# a wheel's files as they lie are its install, where pip cannot run.
unpack_wheels() {
  "${PYTHON:-python3}" - "$@" <<'EOF'
import pathlib, platform, re, sys, zipfile
target, folder = sys.argv[1], pathlib.Path(sys.argv[2])
python = "-cp%d%d-" % sys.version_info[:2]
for pin in sys.argv[3:]:
  name, version = pin.split("==")
  prefix = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
  usable = [wheel for wheel in sorted(folder.glob("*.whl"))
            if wheel.name.lower().startswith(prefix)
            and (wheel.name.endswith("-none-any.whl")
                 or python in wheel.name and platform.machine() in wheel.name)]
  if not usable:
    sys.exit(f"no wheel of {pin} for this Python in {folder}")
  zipfile.ZipFile(usable[0]).extractall(target)  # A wheel's files as they lie.
EOF
}

rehearse=0
case "${1:-}" in
  --rehearse) rehearse=1 ;;
  --fetch-wheels) fetch_wheels; exit ;;
  --list-wheels) printf '%s\n' "${TEST_WHEELS[@]}"; exit 0 ;;
  --source-hash) source_hash; exit ;;
  --unpack-wheels) shift; unpack_wheels "$@"; exit ;;
  "") ;;
  *)
    echo "usage: $0 [--rehearse | --fetch-wheels | --list-wheels |" \
      "--source-hash | --unpack-wheels TARGET FOLDER PIN...]" >&2
    exit 64 ;;
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

# Seconds left for a command: at most $1, never past the deadline.
seconds_for() {
  local left=$((DEADLINE - SECONDS - 5))
  if [ "${left}" -lt 1 ]; then left=1; fi
  if [ "$1" -lt "${left}" ]; then echo "$1"; else echo "${left}"; fi
}

# Runs "$@" under timeout, capped at $1 seconds; says so when it times out.
bounded() {
  local cap
  cap="$(seconds_for "$1")"
  shift
  timeout -k 5 "${cap}" "$@"
  local status=$?
  if [ "${status}" -eq 124 ] || [ "${status}" -eq 137 ]; then
    echo "(timed out after ${cap} s: $1)" >&2
  fi
  return "${status}"
}

# Joins lines with "; ".
joined() {
  awk 'NR > 1 { printf "; " } { printf "%s", $0 }'
}

# Lines of `check --x64 both`, one per mode, named by their mode.
per_mode() {
  awk '{ print (NR == 1 ? "x64 off: " : "x64 on: ") $0 }' | joined
}

# Records a stage: its name, exit status, what it found, whether it needs a
# GPU (1) and, for those, whether it failed as it must without one (1); and
# the seconds since the stage began (stage_started).
record() {
  local name="$1" status="$2" needs_gpu="${4:-0}" cpu_shape="${5:-0}"
  local found="${3:+$3; }$((SECONDS - stage_started)) s"
  if [ "${rehearse}" -eq 1 ] && [ "${needs_gpu}" -eq 1 ]; then
    if [ "${status}" -ne 0 ] && [ "${cpu_shape}" -eq 1 ]; then
      passed=$((passed + 1))
      summary+=("${name}: FAILED, as it must without a GPU (${found})")
    else
      failed=$((failed + 1))
      local why="exit status ${status}: ${found}"
      summary+=("${name}: NOT AS EXPECTED on a CPU machine (${why})")
    fi
  elif [ "${status}" -eq 0 ]; then
    passed=$((passed + 1))
    summary+=("${name}: ok${found:+ (${found})}")
  else
    failed=$((failed + 1))
    summary+=("${name}: FAILED${found:+ (${found})}")
  fi
}

pick_python() {
  local candidate
  for candidate in ${PYTHON:-python3.12 python3 python}; do
    if timeout -k 5 60 "${candidate}" -c "import jax" >/dev/null 2>&1; then
      command -v "${candidate}"
      return 0
    fi
  done
  return 1
}

stage_gpu() {
  echo "== gpu"
  local probe status
  probe="$(bounded 120 "${PY}" - 2>&1 <<'EOF'
import platform, sys
import jax, jaxlib
print("python", platform.python_version(), "jax", jax.__version__,
      "jaxlib", jaxlib.__version__, "default backend", jax.default_backend())
try:
  gpus = jax.devices("gpu")
except RuntimeError as err:
  print(f"FAILED: JAX has no GPU device (jax.devices('gpu'): {err})")
else:
  print("JAX GPU devices:", gpus, gpus[0].client.platform_version)
try:
  import torch
except Exception as err:  # A CUDA library torch needs may be missing.
  print(f"FAILED: torch does not import ({type(err).__name__}: {err}): a "
        "torch installation problem; the torch cases cannot run")
else:
  if torch.cuda.is_available():
    print(f"torch {torch.__version__}: CUDA {torch.version.cuda},",
          torch.cuda.get_device_name(0))
  else:
    print(f"FAILED: torch {torch.__version__} sees no CUDA device "
          f"(torch.version.cuda: {torch.version.cuda}; None for a CPU build)")
try:
  import cupy
except ModuleNotFoundError:
  print("FAILED: CuPy is not installed: the CuPy cases cannot run")
except Exception as err:
  print(f"FAILED: CuPy does not import ({type(err).__name__}: {err}): a "
        "CuPy installation problem")
else:
  try:
    count = cupy.cuda.runtime.getDeviceCount()
  except Exception as err:
    count = None
    print(f"FAILED: CuPy {cupy.__version__} cannot reach the GPU "
          f"({type(err).__name__}: {err}): a CuPy or CUDA library problem")
  if count == 0:
    print(f"FAILED: CuPy {cupy.__version__} finds no GPU")
  elif count:
    print(f"CuPy {cupy.__version__}: {count} GPU(s)")
EOF
)"
  status=$?
  echo "${probe}"
  gpu_found="$(sed -n 's/^FAILED: //p' <<<"${probe}" | joined)"
  if [ "${status}" -ne 0 ]; then
    gpu_found="${gpu_found:+${gpu_found}; }the probe exited with ${status}"
  fi
  gpu_as_without=0
  if grep -q "JAX has no GPU device" <<<"${gpu_found}"; then
    gpu_as_without=1
  fi
  [ -z "${gpu_found}" ]
}

# The working tree and the test wheels on PYTHONPATH.
stage_install() {
  echo "== install"
  export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}"
  install_how="the working tree on PYTHONPATH"
  local wheels=("${WHEELS}"/*.whl)
  if [ -e "${wheels[0]}" ]; then
    rm -rf "${DEPS}" && mkdir -p "${DEPS}" || return 1
    local how="pip install --no-index --no-deps --target"
    if ! bounded 120 "${PY}" -m pip install --quiet --no-index --no-deps \
        --find-links "${WHEELS}" --target "${DEPS}" "${TEST_WHEELS[@]}" \
        >"${OUT_DIR}/pip-install.txt" 2>&1; then
      tail -n 3 "${OUT_DIR}/pip-install.txt"
      echo "pip could not install the wheels here: unpacking them instead"
      how="unpacked (no usable pip)"
      rm -rf "${DEPS}" && mkdir -p "${DEPS}" || return 1
      PYTHON="${PY}" bounded 60 bash tools/device_check.sh --unpack-wheels \
        "${DEPS}" "${WHEELS}" "${TEST_WHEELS[@]}" || return 1
    fi
    export PYTHONPATH="${PYTHONPATH}:${PWD}/${DEPS}"
    install_how+=", ${#TEST_WHEELS[@]} test wheels into ${DEPS} (${how})"
  else
    echo "no wheels in ${WHEELS} (not carried?): the test dependencies must" \
      "already import"
    install_how+=", no test wheels"
  fi
  echo "PYTHONPATH=${PYTHONPATH}"
  bounded 90 "${PY}" - "${PWD}" ${TEST_IMPORTS} <<'EOF'
import importlib, os, sys
missing = []
for name in sys.argv[2:]:
  try:
    module = importlib.import_module(name)
  except Exception as err:
    missing.append(f"{name} ({type(err).__name__}: {err})")
  else:
    print(name, getattr(module, "__version__", ""), "from",
          os.path.dirname(module.__file__))
import jax_patch
print("jax_patch from", os.path.dirname(jax_patch.__file__))
if not jax_patch.__file__.startswith(os.path.join(sys.argv[1], "")):
  missing.append("jax_patch from this working tree")
if missing:
  print("cannot import:", "; ".join(missing))
  print("(carry build/device-wheels, made by tools/device_check.sh "
        "--fetch-wheels where PyPI answers)")
  sys.exit(1)
EOF
}

stage_check() {
  echo "== jax-patch check --require-gpu --require-accelerator --x64 both"
  # The console script's entry point, through the chosen interpreter (no
  # `jax-patch` is on PATH: nothing was installed).
  # Wide lines: each case the verdict names stays on one line.
  COLUMNS=200 bounded 200 "${PY}" -c "import sys; \
from jax_patch._delivery.cli import main; \
sys.exit(main(['check', '--require-gpu', '--require-accelerator', '--x64', \
'both']))" \
    | tee "${OUT_DIR}/check.txt"
  check_status="${PIPESTATUS[0]}"
  local lines
  lines="$(grep '^patched:' "${OUT_DIR}/check.txt")"
  check_counts="$(per_mode <<<"${lines}")"
  gpu_counts="$(sed -n 's/^--require-gpu: \([^(,]*[^(, ]\).*/\1/p' \
    "${OUT_DIR}/check.txt" | per_mode)"
  # One summary per x64 mode, with no patched failure.
  [ "$(grep -c ' 0 failed, ' <<<"${lines}")" -eq 2 ]
}

# The GPU cases, as the check names them: to tell in a rehearsal that each
# one was named.
gpu_case_names() {
  bounded 60 "${PY}" -c "from jax_patch.testing import conformance; \
print(*sorted(conformance.GPU_CASES), sep='\n')"
}

check_as_without_gpu() {
  local name verdicts
  verdicts="$(sed -n '/^--require-gpu: FAILED/,/^[^ ]/p' \
    "${OUT_DIR}/check.txt")"
  [ "$(grep -c '^--require-gpu: FAILED' "${OUT_DIR}/check.txt")" -eq 2 ] \
    || return 1
  while read -r name; do
    [ "$(grep -c "^  ${name}: skipped: needs a GPU" <<<"${verdicts}")" -eq 2 ] \
      || { echo "not named as skipped for want of a GPU: ${name}"; return 1; }
  done < <(gpu_case_names)
}

# The node IDs of the CPU or GPU tests (tests/device_check_test.py).
test_ids() {
  bounded 90 "${PY}" -c "import sys; from tests import device_check_test; \
print(*device_check_test.node_ids(sys.argv[1]), sep='\n')" "$1"
}

# JUnit XML counts: "N tests: N passed, N failed, N skipped".
junit_counts() {
  bounded 30 "${PY}" - "$1" <<'EOF'
import sys, xml.etree.ElementTree as ElementTree
counts = [0, 0, 0, 0]
try:
  root = ElementTree.parse(sys.argv[1]).getroot()
except (OSError, ElementTree.ParseError):
  root = ElementTree.Element("none")
for suite in root.iter("testsuite"):
  total, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
  bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
  counts = [counts[0] + total, counts[1] + total - bad - skipped,
            counts[2] + bad, counts[3] + skipped]
print("%d tests: %d passed, %d failed, %d skipped" % tuple(counts))
EOF
}

# Runs the tests of one label (cpu or gpu) by node ID. Passes only when
# pytest passes, nothing is skipped and at least as many tests ran as IDs
# were named (a class ID names several).
stage_tests() {
  local label="$1" cap="$2" ids status
  echo "== ${label^^} tests"
  mapfile -t ids < <(test_ids "${label}")
  tests_found=""
  tests_as_without=0
  if [ "${#ids[@]}" -eq 0 ]; then
    tests_found="no ${label} test IDs could be listed"
    return 1
  fi
  echo "${#ids[@]} ${label^^} test IDs:"
  printf '  %s\n' "${ids[@]}"
  local xml="${OUT_DIR}/tests-${label}.xml"
  rm -f "${xml}"
  bounded "${cap}" "${PY}" -m pytest -q -p no:cacheprovider -rs \
    --junitxml="${xml}" "${ids[@]}"
  status=$?
  tests_found="$(junit_counts "${xml}") for ${#ids[@]} IDs"
  local total skipped
  read -r total skipped < <(sed -E \
    's/^([0-9]+) tests: .* ([0-9]+) skipped.*/\1 \2/' <<<"${tests_found}")
  if [ "${status}" -eq 0 ] && [ "${total}" -ge "${#ids[@]}" ] \
      && [ "${skipped}" -eq 0 ]; then
    return 0
  fi
  # Without a GPU every GPU test must be there and skip.
  if [ "${total}" -eq "${#ids[@]}" ] && [ "${skipped}" -eq "${total}" ]; then
    tests_as_without=1
  fi
  return 1
}

main() {
  echo "device check: $(date -u +%FT%TZ)"
  local commit
  if commit="$(timeout -k 5 20 git rev-parse --short HEAD 2>/dev/null)"; then
    if [ -n "$(timeout -k 5 30 git status --porcelain --untracked-files=no \
        2>/dev/null)" ]; then
      commit+=" with local changes"
    fi
  else
    commit="none (no .git here)"
  fi
  echo "commit: ${commit}"
  echo "sources: $(timeout -k 5 60 bash tools/device_check.sh --source-hash)"
  if command -v nvidia-smi >/dev/null; then
    timeout -k 5 30 nvidia-smi -L || echo "nvidia-smi -L failed"
  else
    echo "nvidia-smi: not here (JAX, torch and CuPy say whether a GPU is)"
  fi
  if [ "${rehearse}" -eq 1 ]; then
    echo "a rehearsal: the [GPU] stages must fail as they do without a GPU"
  fi
  if ! PY="$(pick_python)"; then
    echo "no Python here imports jax (set PYTHON)"
    return 1
  fi
  echo "python: ${PY}"
  gpu_found="" gpu_as_without=0 install_how="" check_status=1
  check_counts="" gpu_counts="" tests_found="" tests_as_without=0
  stage_started="${SECONDS}"
  stage_gpu
  record gpu $? "${gpu_found}" 1 "${gpu_as_without}"
  stage_started="${SECONDS}"
  stage_install
  record install $? "${install_how}"
  stage_started="${SECONDS}"
  stage_check
  record "jax-patch check" $? "${check_counts}"
  local as_without=0
  if [ "${rehearse}" -eq 1 ] && check_as_without_gpu; then as_without=1; fi
  record "GPU cases (--require-gpu)" "${check_status}" "${gpu_counts}" 1 \
    "${as_without}"
  stage_started="${SECONDS}"
  stage_tests cpu 90
  record "CPU tests" $? "${tests_found}"
  stage_started="${SECONDS}"
  stage_tests gpu 150
  record "GPU tests" $? "${tests_found}" 1 "${tests_as_without}"

  echo "== summary (${SECONDS} s)"
  printf '%s\n' "${summary[@]}"
  if [ "${rehearse}" -eq 1 ]; then
    echo "(a rehearsal: a [GPU] stage counts as passed when it failed as it" \
      "must without a GPU)"
  fi
  echo "device check: ${passed} passed, ${failed} failed"
  [ "${failed}" -eq 0 ]
}

main 2>&1 | tee "${LOG}"
status="${PIPESTATUS[0]}"
echo "log: ${LOG}"
exit "${status}"
