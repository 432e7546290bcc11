#!/usr/bin/env bash
# Mutation check: does the test suite catch wrong numbers?
#
#   scripts/mutation-check.sh [--only REGEX] [--list] [--first-catch]
#
# Applies each deliberate bug of test/mutations/*.patch (one at a time) to
# the working tree, rebuilds incrementally (scripts/build.sh), runs the
# whole suite (ctest; lit suites are split into their test files), and
# prints a table: mutation -> the tests that failed. A mutation no test
# catches, or that only a loss-only end-to-end check catches
# (e2e/training/train-real-text.test), "survives", and the script exits 1.
#
# --first-catch answers only "does some test catch it?", at a few minutes
# per mutation instead of the suite's quarter hour: it first runs the tests
# test/mutations/catchers.txt names for the mutation (a ctest name, lit:FILE
# under test/, or matrix:REGEX for the feature matrix's plans whose
# description matches) and stops at the first that fails; when none does,
# it runs the whole suite, cheapest tests first, until a test fails. The
# table then names the catching test (or the tests of the first part of the
# suite that failed).
#
# First the unmutated suite must pass (else every mutation would look
# caught); under --first-catch, each named test must pass, and the whole
# suite the first time a mutation falls through to it. The tree is restored
# after each mutation and on any exit (Ctrl-C included); the build is then
# rebuilt clean. Not part of CI. Run it before closing a numerics issue and
# whenever a numeric path changes; add a patch (a description line, a blank
# line, then `git diff` output) and its catchers.txt line for each new
# capability.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${DTC_BUILD_DIR:-$root/build}
only=""
list=0
first_catch=0
catchers=$root/test/mutations/catchers.txt
while [ $# -gt 0 ]; do
  case $1 in
    --only) only=$2; shift 2 ;;
    --list) list=1; shift ;;
    --first-catch) first_catch=1; shift ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

build_tree() {
  "$root/scripts/build.sh" > "$1.build" 2>&1
}

run_suite() {
  # The lint tests judge the tree's shape, not its numbers: a patch that
  # grows an allow-listed function or is not clang-formatted must not count
  # as caught.
  TMPDIR=$tmp ctest --test-dir "$build" -j"${DTC_JOBS:-2}" --output-on-failure -E '^lint\.' > "$1" 2>&1
}

# The whole suite in three parts, cheapest first (unit, reference, MPI and
# the lit suites of passes and the CLI; the end-to-end suites; the feature
# matrix), stopping at the first part with a failing test.
run_suite_until_caught() {
  local log=$1
  : > "$log"
  TMPDIR=$tmp ctest --test-dir "$build" -j"${DTC_JOBS:-2}" --output-on-failure --stop-on-failure \
    -E '^(lint\.|lit\.e2e\.)' >> "$log" 2>&1 && [ -z "$(failures "$log")" ] || return 0
  TMPDIR=$tmp ctest --test-dir "$build" -j"${DTC_JOBS:-2}" --output-on-failure --stop-on-failure \
    -R '^lit\.e2e\.' -E '^lit\.e2e\.matrix$' >> "$log" 2>&1 && [ -z "$(failures "$log")" ] || return 0
  TMPDIR=$tmp ctest --test-dir "$build" --output-on-failure -R '^lit\.e2e\.matrix$' >> "$log" 2>&1
}

suite_passes() {
  local log=$1
  build_tree "$log" || { echo "mutation-check: the unmutated tree does not build (see $log.build)" >&2; exit 1; }
  run_suite "$log"
  if [ -n "$(failures "$log")" ]; then
    echo "mutation-check: the suite fails without any mutation; fix that first:" >&2
    failures "$log" >&2
    exit 1
  fi
}

# lit and the reference Python, as the build configured them: read when a
# test first needs them, since a fresh tree has no build until the
# baseline's.
lit= refpython=
read_build_config() {
  [ -n "$lit" ] && return
  lit=$(sed -n 's/^LLVM_EXTERNAL_LIT:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
  refpython=$(sed -n 's/^config.reference_python = "\(.*\)"$/\1/p' "$build/test/lit.site.cfg.py" 2>/dev/null)
}
loss_only='lit:e2e/training/train-real-text.test'

# The tests catchers.txt names for a mutation, one per line.
named_tests() {
  awk -v name="$1" '$1 == name { for (i = 2; i <= NF; i++) print $i }' "$catchers" | grep -vx "$loss_only"
}

# Runs one named test (as catchers.txt writes it; a parameterised gtest's
# ctest name goes on with "  # GetParam() = ...") on the built tree, its
# output appended to $2; succeeds when the test passes. A matrix entry runs
# the feature matrix's plans whose description matches, in lit's
# environment (test/lit.cfg.py).
run_named() {
  local test=$1 log=$2
  read_build_config
  echo "=== $test" >> "$log"
  case $test in
    lit:*) TMPDIR=$tmp "$lit" -v "$build/test/${test#lit:}" >> "$log" 2>&1 ;;
    matrix:*)
      local work=$tmp/matrix code
      rm -rf "$work" && mkdir -p "$work"
      (
        export TMPDIR=$tmp PATH="$build/bin:$PATH" PYTHONDONTWRITEBYTECODE=1 DTC_CACHE_DIR="$build/test/no-calibration"
        case $(uname -m) in x86_64 | AMD64) export OPENBLAS_CORETYPE=Haswell ;; esac
        python3 "$root/test/e2e/lib/feature_matrix.py" run --work "$work" --refpython "$refpython" \
          --only "${test#matrix:}" --dtc "$build/bin/dtc"
      ) > "$work.out" 2>&1
      code=$?
      cat "$work.out" >> "$log"
      [ $code = 0 ] && grep -q ': ok' "$work.out" && ! grep -q FAIL "$work.out" ;;
    *) TMPDIR=$tmp ctest --test-dir "$build" --no-tests=error --output-on-failure -R "^${test//./\\.}( |\$)" >> "$log" 2>&1 ;;
  esac
}

suite_checked=0
if [ $first_catch = 1 ]; then
  [ -f "$catchers" ] || { echo "mutation-check: --first-catch needs $catchers" >&2; exit 2; }
  mapfile -t named < <(for p in "${patches[@]}"; do named_tests "$(basename "$p" .patch)"; done | sort -u)
  echo "mutation-check: the ${#named[@]} named tests, unmutated, first"
  build_tree "$scratch/baseline.log" || { echo "mutation-check: the unmutated tree does not build" >&2; exit 1; }
  : > "$scratch/baseline.log"
  for t in "${named[@]}"; do
    run_named "$t" "$scratch/baseline.log" || {
      echo "mutation-check: $t fails without any mutation; fix that first (see $scratch/baseline.log)" >&2; exit 1; }
  done
else
  echo "mutation-check: the unmutated suite first"
  suite_passes "$scratch/baseline.log"
  suite_checked=1
fi

declare -a rows
survivors=0
for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  echo "mutation-check: $name: $(head -1 "$p")"
  git apply "$p" || exit 2
  applied=$p
  log="$scratch/$name.log"
  if ! build_tree "$log"; then
    restore
    # A patch that does not compile tests nothing: fix the patch.
    rows+=("$(printf '%-45s DOES NOT BUILD (see the patch)' "$name")")
    survivors=$((survivors + 1))
    echo "  does not build"
    continue
  fi
  caught=""
  strong=0
  : > "$log"
  if [ $first_catch = 1 ]; then
    for t in $(named_tests "$name"); do
      if ! run_named "$t" "$log"; then
        caught="$t (named)"
        strong=1
        break
      fi
    done
  fi
  if [ -z "$caught" ]; then
    if [ $suite_checked = 0 ]; then
      restore
      echo "  (the whole suite, unmutated, first)"
      suite_passes "$scratch/baseline-suite.log"
      suite_checked=1
      git apply "$p" || exit 2
      applied=$p
      build_tree "$log" || exit 2
    fi
    if [ $first_catch = 1 ]; then
      run_suite_until_caught "$log.suite"
    else
      run_suite "$log.suite"
    fi
    caught=$(failures "$log.suite" | paste -sd' ' -)
    strong=$(failures "$log.suite" | grep -cvx "$loss_only")
  fi
  restore
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
