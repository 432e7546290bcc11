#!/usr/bin/env bash
# Mutation check: does the test suite catch wrong numbers?
#
#   scripts/mutation-check.sh [--only REGEX] [--list]
#
# Applies each deliberate bug of test/mutations/*.patch (one at a time) to
# the working tree, rebuilds incrementally (scripts/build.sh), runs the
# whole suite (ctest; lit suites are split into their test files), and
# prints a table: mutation -> the tests that failed. A mutation no test
# catches, or that only a loss-only end-to-end check catches
# (e2e/training/train-real-text.test), "survives", and the script exits 1.
#
# First the unmutated suite must pass (else every mutation would look
# caught). The tree is restored after each mutation and on any exit
# (Ctrl-C included); the build is then rebuilt clean. Not part of CI: it
# runs the suite once per mutation (several minutes each). Run it before
# closing a numerics issue and whenever a numeric path changes; add a patch
# (a description line, a blank line, then `git diff` output) for each new
# capability.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${DTC_BUILD_DIR:-$root/build}
only=""
list=0
while [ $# -gt 0 ]; do
  case $1 in
    --only) only=$2; shift 2 ;;
    --list) list=1; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "mutation-check: unknown argument $1" >&2; exit 2 ;;
  esac
done

patches=()
for p in "$root"/test/mutations/*.patch; do
  name=$(basename "$p" .patch)
  if [ -n "$only" ] && ! [[ $name =~ $only ]]; then continue; fi
  patches+=("$p")
done
if [ $list = 1 ]; then
  for p in "${patches[@]}"; do printf '%-45s %s\n' "$(basename "$p" .patch)" "$(head -1 "$p")"; done
  exit 0
fi
[ ${#patches[@]} -gt 0 ] || { echo "mutation-check: no patch matches" >&2; exit 2; }

applied=""
# Build and test logs of every run stay here (in the build tree) for a look
# at why a test failed.
scratch=$build/mutation-logs
rm -rf "$scratch" && mkdir -p "$scratch"
# The suite's own TMPDIR (short: Open MPI puts Unix sockets there), away
# from other users of /tmp.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtc-mutation-XXXXXX")
restore() {
  if [ -n "$applied" ]; then
    git apply -R "$applied" && echo "mutation-check: restored the tree ($(basename "$applied" .patch))"
    applied=""
  fi
}
finish() {
  local code=$?
  restore
  rm -rf "$tmp"
  exit $code
}
trap finish EXIT
trap 'echo; echo "mutation-check: interrupted"; exit 130' INT TERM

for p in "${patches[@]}"; do
  git apply --check "$p" 2>/dev/null || {
    echo "mutation-check: $(basename "$p") does not apply to this tree (update the patch)" >&2; exit 2; }
done

# The tests that failed in a ctest run, lit suites split into test files.
failures() {
  local log=$1
  grep -E '^\s*FAIL: DTC :: ' "$log" | sed -E 's/^\s*FAIL: DTC :: (.*) \([0-9]+ of [0-9]+\)/lit:\1/' | sort -u
  sed -n '/The following tests FAILED:/,$p' "$log" | grep -E '^\s+[0-9]+ - ' |
    sed -E 's/^\s+[0-9]+ - ([^ ]+).*/\1/' | grep -v '^lit\.' | sort -u
}

run_suite() {
  local log=$1
  if ! "$root/scripts/build.sh" > "$log.build" 2>&1; then
    echo "build-failed" > "$log"
    return
  fi
  # The lint tests judge the tree's shape, not its numbers: a patch that
  # grows an allow-listed function or is not clang-formatted must not count
  # as caught.
  TMPDIR=$tmp ctest --test-dir "$build" -j"${DTC_JOBS:-2}" --output-on-failure -E '^lint\.' > "$log" 2>&1
}

echo "mutation-check: the unmutated suite first"
run_suite "$scratch/baseline.log"
if grep -q build-failed "$scratch/baseline.log" || [ -n "$(failures "$scratch/baseline.log")" ]; then
  echo "mutation-check: the suite fails without any mutation; fix that first:" >&2
  failures "$scratch/baseline.log" >&2
  exit 1
fi

loss_only='lit:e2e/training/train-real-text.test'
declare -a rows
survivors=0
for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  echo "mutation-check: $name: $(head -1 "$p")"
  git apply "$p" || exit 2
  applied=$p
  log="$scratch/$name.log"
  run_suite "$log"
  restore
  if grep -q build-failed "$log"; then
    # A patch that does not compile tests nothing: fix the patch.
    caught=""
    strong=0
    rows+=("$(printf '%-45s DOES NOT BUILD (see the patch)' "$name")")
    survivors=$((survivors + 1))
    echo "  does not build"
    continue
  else
    caught=$(failures "$log" | paste -sd' ' -)
    strong=$(failures "$log" | grep -cvx "$loss_only")
  fi
  if [ -z "$caught" ] || [ "$strong" = 0 ]; then
    survivors=$((survivors + 1))
    rows+=("$(printf '%-45s SURVIVES %s' "$name" "$caught")")
  else
    rows+=("$(printf '%-45s %s' "$name" "$caught")")
  fi
  echo "  caught by: ${caught:-nothing}"
done

echo
echo "mutation-check: rebuilding the unmutated tree"
"$root/scripts/build.sh" > /dev/null
echo
printf '%-45s %s\n' "mutation" "caught by (failing tests; lit: a lit test file)"
for row in "${rows[@]}"; do echo "$row"; done
echo
if [ $survivors -gt 0 ]; then
  echo "mutation-check: $survivors of ${#patches[@]} mutations survive"
  exit 1
fi
echo "mutation-check: all ${#patches[@]} mutations caught (logs: $scratch)"
