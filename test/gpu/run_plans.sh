#!/usr/bin/env bash
# ctest's gpu.plans: the end-to-end plans on the GPU (gpu_plans.py), or a
# skip (exit 77) with the CUDA backend's reason on a machine without one.
#   run_plans.sh DTC DTC_RUN
set -uo pipefail
dtc=$1 run=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dtc-gpu-plans-XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 "$here/../../examples/gen_model.py" mlp --layers 1 --hidden 8 --batch 4 -o "$work/probe.mlir" &&
  "$dtc" compile "$work/probe.mlir" --mesh 1 -o "$work/probe.dtc" || exit 1
if ! "$run" "$work/probe.dtc" --steps 1 --local-ranks 1 --backend cuda >"$work/probe.out" 2>&1; then
  if grep -q "use --backend cpu" "$work/probe.out"; then
    echo "SKIPPED: $(cat "$work/probe.out")"
    exit 77
  fi
  cat "$work/probe.out"
  exit 1
fi
python3 "$here/gpu_plans.py" prepare --dtc "$dtc" --out "$work/plans" &&
  python3 "$here/gpu_plans.py" run "$work/plans" --dtc-run "$run"
