#!/usr/bin/env bash
# Runs the memory-safety tests under a hostile allocator:
#   tools/hostile_allocator.sh PYTHON [PYTEST_ARGS...]
#
# PYTHONMALLOC=malloc sends Python's own allocations to glibc, and glibc
# fills every freed block with MALLOC_PERTURB_'s byte (and every new one
# with its complement), so that a read after free finds garbage at once
# instead of in a few runs in a hundred. MALLOC_CHECK_=3 makes glibc check
# the heap on every call and abort on corruption; from glibc 2.34 it needs
# libc_malloc_debug.so preloaded, which this script finds. The tests are
# those that read or release DLPack structures, which tests/conftest.py
# marks memory_safety (and says why the leak loops are not among them).
# PYTEST_ARGS go to pytest: `-n auto` runs them on every core.
set -euo pipefail
cd "$(dirname "$0")/.."

python="$1"
shift
debug_malloc=""
for candidate in /lib/x86_64-linux-gnu/libc_malloc_debug.so.0 \
    /lib/aarch64-linux-gnu/libc_malloc_debug.so.0 \
    /usr/lib64/libc_malloc_debug.so.0 /lib64/libc_malloc_debug.so.0; do
  if [ -e "${candidate}" ]; then
    debug_malloc="${candidate}"
    break
  fi
done
if [ -z "${debug_malloc}" ]; then
  echo "hostile allocator: no libc_malloc_debug.so: MALLOC_CHECK_ is inert" \
    "on this glibc; MALLOC_PERTURB_ still applies" >&2
fi
echo "hostile allocator: PYTHONMALLOC=malloc MALLOC_PERTURB_=165" \
  "MALLOC_CHECK_=3 LD_PRELOAD=${debug_malloc:-none}"
export PYTHONMALLOC=malloc MALLOC_PERTURB_=165 MALLOC_CHECK_=3
export LD_PRELOAD="${debug_malloc}${LD_PRELOAD:+:${LD_PRELOAD}}"
exec "${python}" -m pytest -q -p no:cacheprovider -m memory_safety tests "$@"
