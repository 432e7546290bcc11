#!/usr/bin/env bash
# Every test, from a fresh Debian 12 machine: install what dtc needs, build
# it, then run the GoogleTest units, the float64 reference checks and the
# lit suites (dialect, passes, command line, end to end, lint) and the
# lint checks (format, sizes) through ctest.
# The tests run with TMPDIR set to a fresh directory that must be empty
# afterwards: tests clean up after themselves.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build=${DTC_BUILD_DIR:-$root/build}
# A short path: Open MPI puts Unix sockets under TMPDIR.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/dtc-check-XXXXXX")
TMPDIR=$scratch ctest --test-dir "$build" --output-on-failure -j"${DTC_JOBS:-2}"
left=$(find "$scratch" -mindepth 1 -maxdepth 1)
if [ -n "$left" ]; then
  echo "check: the tests left files in TMPDIR:" >&2
  echo "$left" >&2
  exit 1
fi
rmdir "$scratch"
