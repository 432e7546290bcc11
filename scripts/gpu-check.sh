#!/usr/bin/env bash
# The GPU checks of the CUDA backend, in two halves so that the GPU machine
# needs neither MLIR nor the build's packages:
#
#   scripts/gpu-check.sh prepare [DIR]   here: build, compile the plans and the
#                                        benchmark model, pack binaries, their
#                                        shared libraries and artifacts into
#                                        DIR/bundle.tar.xz (default .gpu/)
#   scripts/gpu-check.sh run [DIR] [OUT] on the GPU machine: unpack, then run
#                                        1. the CUDA kernel tests (every kernel
#                                           against the CPU kernel),
#                                        2. the float64 reference on the CUDA
#                                           kernels,
#                                        3. the end-to-end plans (test/gpu/
#                                           gpu_plans.py) and a traced DP run,
#                                        4. the bf16 GPT step benchmark;
#                                        logs and a summary land in OUT
#                                        (default DIR/out)
#   scripts/gpu-check.sh local           both on a machine with a GPU and the
#                                        build (what ctest's gpu.check runs)
#
# DTC_GPU_TORCH=0 leaves PyTorch out of the benchmark. DTC_GPU_MUTANTS=0
# leaves the CUDA mutants out of both halves (their rebuilds of the CUDA
# tests are most of `prepare`'s time); DTC_GPU_MUTANTS=c4,c12 takes only
# those patches (c4-*.patch, c12-*.patch).
#
# The CUDA libraries (cudart, cuBLASLt, NCCL) are the GPU machine's own.
# Every stage runs even if an earlier one failed; the exit status is 1 if
# any failed. docs/backends.md "The CUDA backend" records results.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
dir=${2:-$root/.gpu}
build=${DTC_BUILD_DIR:-$root/build}

prepare() {
  set -e
  "$root/scripts/setup.sh"
  if [ ! -f "$build/build.ninja" ]; then "$root/scripts/build.sh"; fi
  ninja -C "$build" -j"${DTC_JOBS:-2}" dtc dtc-run dtc-kernel-eval dtc_cuda_tests dtc-cuda-gemm-rate
  for t in dtc-run dtc-kernel-eval dtc_cuda_tests dtc-cuda-gemm-rate; do
    [ -x "$build/bin/$t" ] || { echo "gpu-check: $build/bin/$t missing (is the CUDA backend built?)" >&2; exit 1; }
  done
  local stage=$dir/stage
  rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/plans" "$stage/bench"
  cp "$build"/bin/{dtc-run,dtc-kernel-eval,dtc_cuda_tests,dtc-cuda-gemm-rate} "$stage/bin/"
  strip --strip-unneeded "$stage"/bin/* 2>/dev/null || true
  # Shared libraries the binaries need, except the C library, the C++
  # runtime and CUDA's (the GPU machine has its own, matching its driver).
  for b in "$stage"/bin/*; do
    ldd "$b" | awk '/=> \//{print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|libcuda|libcudart|libcublas|libnccl' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  python3 "$root/test/gpu/gpu_plans.py" prepare --dtc "$build/bin/dtc" --out "$stage/plans"
  if [ "${DTC_GPU_MUTANTS:-1}" != 0 ]; then build_mutants "$stage/mutants"; fi
  python3 "$root/bench/gpu_step_bench.py" prepare "$stage/bench"
  # One xz stream with a dictionary larger than a binary: the mutants' test
  # binaries differ from each other in a few bytes, so they cost ~nothing.
  tar -C "$stage" -cf - . | xz -T1 --lzma2=preset=6,dict=256MiB >"$dir/bundle.tar.xz"
  rm -rf "$stage"
  ls -la "$dir/bundle.tar.xz"
}

# The CUDA mutations (test/mutations/cuda): each deliberate bug built into
# its own copy of the CUDA tests, which must fail on the kernels (or the
# communicator) its "filter:" line names. The tree is restored whatever
# happens.
build_mutants() {
  local into=$1 p name
  mkdir -p "$into"
  for p in "$root"/test/mutations/cuda/*.patch; do
    name=$(basename "$p" .patch)
    if [ "${DTC_GPU_MUTANTS:-1}" != 1 ]; then
      local want= prefix
      for prefix in ${DTC_GPU_MUTANTS//,/ }; do [[ $name == "$prefix"-* ]] && want=1; done
      [ -n "$want" ] || continue
    fi
    git -C "$root" apply "$p" || { echo "gpu-check: $name does not apply" >&2; return 1; }
    if ninja -C "$build" -j"${DTC_JOBS:-2}" dtc_cuda_tests >/dev/null; then
      mkdir -p "$into/$name" && cp "$build/bin/dtc_cuda_tests" "$into/$name/"
      strip --strip-unneeded "$into/$name/dtc_cuda_tests" 2>/dev/null || true
      sed -n 's/^filter: //p' "$p" >"$into/$name/filter"
    fi
    git -C "$root" apply -R "$p"
  done
  ninja -C "$build" -j"${DTC_JOBS:-2}" dtc_cuda_tests >/dev/null
}

check_mutants() {
  local dir=$1 m name caught=0 total=0
  for m in "$dir"/*/; do
    name=$(basename "$m")
    total=$((total + 1))
    if ! "$m/dtc_cuda_tests" --gtest_brief=1 --gtest_filter="$(cat "$m/filter")" \
      >"$out/mutant-$name.log" 2>&1; then
      caught=$((caught + 1))
      echo "$name: caught by $(grep -c '^\[  FAILED  \] .*MatchesCpu\|^\[  FAILED  \] Cuda' "$out/mutant-$name.log") tests"
    else
      echo "$name: SURVIVED"
    fi
  done
  echo "mutants: $caught of $total caught"
  [ "$caught" -eq "$total" ]
}

# Runs one stage with a time limit, logging to OUT/NAME.log; records the result.
status=0
summary=()
stage() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  echo "=== $name"
  if declare -F "$1" >/dev/null; then
    ("$@") >"$out/$name.log" 2>&1 # a function of this script: bounded by its own commands
  else
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
  fi
  local code=$?
  tail -n "${TAILS:-25}" "$out/$name.log"
  summary+=("$(printf '%-14s exit %3d  %4d s' "$name" "$code" $((SECONDS - t0)))")
  [ "$code" -eq 0 ] || status=1
}

run_checks() {
  local bundle=$1
  out=${2:-$dir/out}
  mkdir -p "$out"
  x=${DTC_GPU_UNPACK:-/tmp/dtc-gpu}
  if [ -n "$bundle" ]; then
    rm -rf "$x" && mkdir -p "$x" && tar -C "$x" -xJf "$bundle"
  fi
  # The machine's CUDA libraries: the toolkit's, and NCCL wherever it is.
  local libs=$x/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib
  for d in $(find / -xdev \( -name 'libnccl.so.2' -o -name 'libcublasLt.so.13' \) 2>/dev/null | xargs -r -n1 dirname | sort -u); do
    libs=$libs:$d
  done
  export LD_LIBRARY_PATH=$libs:${LD_LIBRARY_PATH:-}
  {
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ldd "$x/bin/dtc-run" | grep -E 'not found|cuda|cublas|nccl' || true
  } >"$out/env.log" 2>&1
  cat "$out/env.log"
  py=${PYTHON:-python3}
  stage kernels 180 "$x/bin/dtc_cuda_tests" --gtest_brief=1 --gtest_output=json:"$out/kernels.json"
  stage reference 90 "$py" "$root/test/reference/check_kernels.py" --kernel-eval "$x/bin/dtc-kernel-eval" --backend cuda
  stage plans 300 "$py" "$root/test/gpu/gpu_plans.py" run "$x/plans" --dtc-run "$x/bin/dtc-run" \
    --work "$out" --trace-dir "$out/trace"
  if [ -d "$x/mutants" ]; then stage mutants 150 check_mutants "$x/mutants"; fi
  local torch=--torch
  [ "${DTC_GPU_TORCH:-1}" = 0 ] && torch=
  stage bench 200 "$py" "$root/bench/gpu_step_bench.py" run "$x/bench" --dtc-run "$x/bin/dtc-run" \
    --gemm-rate "$x/bin/dtc-cuda-gemm-rate" $torch --json "$out/bench.json"
  echo "=== summary"
  printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
  return $status
}

case "$cmd" in
  prepare) prepare ;;
  run) run_checks "$dir/bundle.tar.xz" "${3:-}"; exit $? ;;
  local)
    "$root/scripts/build.sh" || exit 1
    prepare && run_checks "$dir/bundle.tar.xz" "${3:-}"
    exit $? ;;
  *) sed -n 2,24p "$0"; exit 2 ;;
esac
