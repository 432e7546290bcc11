#!/usr/bin/env bash
# Runs one libFuzzer target the way the suite does (ctest fuzz.*):
#   run_fuzzer.sh TARGET SECONDS WORKDIR SEEDS REGRESSIONS DICT
# first every committed regression input and seed once (each must pass), then
# SECONDS of fuzzing from the seeds. New inputs go to WORKDIR/corpus, crashes
# to WORKDIR/crashes (never into the source tree). Exit status non-zero on any
# crash, sanitizer report, leak or timeout.
set -euo pipefail
target=$1 seconds=$2 work=$3 seeds=$4 regressions=$5 dict=$6
mkdir -p "$work/corpus" "$work/crashes"
common=(-timeout=20 -rss_limit_mb=2048 -dict="$dict" -artifact_prefix="$work/crashes/")
"$target" "${common[@]}" -runs=0 "$regressions" "$seeds"
"$target" "${common[@]}" -max_total_time="$seconds" -print_final_stats=1 \
  "$work/corpus" "$seeds" 2>&1 | grep -v -E '^#[0-9]+\s+(NEW|REDUCE|pulse)' || {
  echo "run_fuzzer.sh: $(basename "$target") failed; the input is in $work/crashes/" >&2
  exit 1
}
