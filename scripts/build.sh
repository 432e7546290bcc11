#!/usr/bin/env bash
# Configures and builds dtc (Release, Ninja, ccache when present) into
# ${DTC_BUILD_DIR:-build}. Run scripts/setup.sh first on a fresh machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DTC_BUILD_DIR:-$root/build}
jobs=${DTC_JOBS:-2}
# Paths relative to the checkout, so a fresh clone elsewhere still hits the
# cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}

if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
fi
ninja -C "$build" -j"$jobs"
