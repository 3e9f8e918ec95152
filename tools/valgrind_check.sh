#!/usr/bin/env bash
# Runs tools/valgrind_lifetimes.py under valgrind's memcheck:
#   tools/valgrind_check.sh PYTHON
#
# Fails if the script fails or if memcheck reports any read or write of a
# freed block ("inside a block of size N free'd"), wherever it happens.
# Other memcheck reports are printed as a count and not judged: CPython and
# jaxlib carry no valgrind suppressions here, and the dynamic loader's SSE
# string functions and Python's own use of uninitialised words show up on
# every run, with or without the patch. Reverting issue 25's fix makes this
# fail (2 freed blocks read: the 0.x and 1.x NULL-deleter structures).
set -uo pipefail
cd "$(dirname "$0")/.."

python="$1"
if ! command -v valgrind >/dev/null; then
  apt-get update -qq >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind \
      >/dev/null || { echo "valgrind: cannot install it"; exit 1; }
fi
log="$(mktemp)"
PYTHONMALLOC=malloc valgrind --tool=memcheck --num-callers=30 \
  "${python}" tools/valgrind_lifetimes.py >"${log}" 2>&1
status=$?
grep '^ok ' "${log}"
freed="$(grep -c "inside a block of size [0-9,]* free'd" "${log}")"
errors="$(grep -oE 'ERROR SUMMARY: [0-9,]+ errors' "${log}" | tail -n 1)"
echo "valgrind: exit status ${status}, ${freed} reads of freed blocks" \
  "(${errors:-no summary}, the rest not judged)"
if [ "${status}" -ne 0 ] || [ "${freed}" -ne 0 ]; then
  grep -B2 -A40 "free'd" "${log}" | head -n 120
  tail -n 30 "${log}"
  exit 1
fi
