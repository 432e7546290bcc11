#!/usr/bin/env bash
# Every test, from a fresh Debian 12 machine: install what dtc needs, build
# it, then run the GoogleTest units and the lit suites (dialect, passes,
# command line, end to end) through ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build=${DTC_BUILD_DIR:-$root/build}
ctest --test-dir "$build" --output-on-failure -j"${DTC_JOBS:-2}"
