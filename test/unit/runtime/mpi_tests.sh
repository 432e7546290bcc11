#!/usr/bin/env bash
# End-to-end tests of dtc-run under mpirun (and alone, as an MPI singleton).
#   mpi_tests.sh CASE BIN_DIR ARTIFACT_DIR MPIEXEC
# Each case runs in its own scratch directory. Every mpirun is bounded by a
# timeout, so a hang fails the test instead of blocking ctest. (mpirun takes
# 1-2 s to return when its ranks exit non-zero, so most error cases run
# dtc-run alone, as a one-rank MPI singleton.)
set -u
case_name=$1 bin=$2 art=$3 mpiexec=$4
run=$bin/dtc-run
work=$(mktemp -d "${TMPDIR:-/tmp}/dtc-mpi-$case_name-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
export OPENBLAS_NUM_THREADS=1
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
mpi() { local np=$1; shift; timeout 60 "$mpiexec" -np "$np" "${root[@]}" --oversubscribe --quiet "$@"; }

fail() { echo "FAIL: $*" >&2; exit 1; }
# losses FILE: the X of every "step K loss X" line
losses() { awk '$1=="step" && $3=="loss" {print $4}' "$1"; }
# close A B TOL: two loss files agree within a relative tolerance
close() {
  paste "$1" "$2" | awk -v tol="$3" '
    { n++; d = $1 - $2; if (d < 0) d = -d; m = ($2 < 0 ? -$2 : $2);
      if (d > tol * (1 + m)) { printf "line %d: %s vs %s\n", n, $1, $2; bad = 1 } }
    END { if (n == 0) { print "no losses"; bad = 1 } exit bad }' || fail "losses differ: $1 $2"
}
# one_error FILE WANT: exactly one line, a dtc-run error containing WANT
one_error() {
  [ "$(wc -l < "$1")" = 1 ] || { cat "$1"; fail "expected exactly one stderr line"; }
  grep -q '^dtc-run: error: ' "$1" || { cat "$1"; fail "not a dtc-run error line"; }
  grep -qF -- "$2" "$1" || { cat "$1"; fail "missing '$2'"; }
}

case $case_name in
data-parallel)
  mpi 1 "$run" "$art/mlp1.dtc" --steps 5 --seed 4 > one.out || fail "np 1"
  losses one.out > one.l
  [ "$(wc -l < one.l)" = 5 ] || fail "expected 5 steps"
  for a in mlp_dp2:2 mlp_dp4:4 mlp_tp:4; do
    mpi "${a#*:}" "$run" "$art/${a%:*}.dtc" --steps 5 --seed 4 > "${a%:*}.out" || fail "${a%:*}"
    losses "${a%:*}.out" > "${a%:*}.l"
    close "${a%:*}.l" one.l 2e-5
  done
  # Alone (MPI singleton) = one rank.
  "$run" "$art/mlp1.dtc" --steps 5 --seed 4 > alone.out || fail "singleton"
  cmp -s alone.out one.out || fail "singleton differs from mpirun -np 1"
  ;;
collectives)
  mpi 4 "$run" "$art/coll.dtc" --steps 1 --seed 8 --save coll.safetensors > coll.out || fail "coll run"
  "$bin/dtc-rt-testgen" check-coll coll.safetensors 8 || fail "collective results"
  ;;
checkpoint)
  mpi 4 "$run" "$art/mlp_tp.dtc" --steps 8 --seed 2 > full.out || fail "full run"
  mpi 4 "$run" "$art/mlp_tp.dtc" --steps 4 --seed 2 --save half.st > a.out || fail "first half"
  [ -f half.st ] && [ -f half.st.optim ] || fail "checkpoint files missing"
  mpi 4 "$run" "$art/mlp_tp.dtc" --steps 4 --seed 2 --load half.st --save end.st > b.out 2> b.err || fail "second half"
  [ -s b.err ] && { cat b.err; fail "unexpected stderr"; }
  cat a.out b.out > resumed.out
  diff full.out resumed.out || fail "resumed losses differ from the 8-step run"
  # Load the 4-rank checkpoint on one device and on dp2: same parameters.
  mpi 1 "$run" "$art/mlp1.dtc" --steps 0 --load end.st --save one.st > /dev/null || fail "load on 1"
  mpi 2 "$run" "$art/mlp_dp2.dtc" --steps 0 --load end.st --save two.st > /dev/null || fail "load on 2"
  "$bin/dtc-rt-testgen" compare one.st end.st 0 || fail "1-rank reload"
  "$bin/dtc-rt-testgen" compare two.st end.st 0 || fail "2-rank reload"
  # ... and continue training there: same losses as the 4-rank run (within float noise).
  mpi 4 "$run" "$art/mlp_tp.dtc" --steps 3 --seed 2 --load end.st > c4.out || fail "continue 4"
  mpi 1 "$run" "$art/mlp1.dtc" --steps 3 --seed 2 --load end.st > c1.out || fail "continue 1"
  losses c4.out > c4.l; losses c1.out > c1.l
  close c1.l c4.l 2e-5
  grep -q '^step 8 loss' c1.out || fail "step numbering continues from the checkpoint"
  # No sidecar: one note, optimizer from zeros.
  rm end.st.optim
  mpi 4 "$run" "$art/mlp_tp.dtc" --steps 1 --load end.st > d.out 2> d.err || fail "no sidecar"
  [ "$(wc -l < d.err)" = 1 ] && grep -q '^dtc-run: note: end.st.optim not found' d.err || { cat d.err; fail "note"; }
  ;;
errors)
  # Wrong rank count: one line from rank 0, exit 1 on all ranks, no hang.
  mpi 3 "$run" "$art/mlp_tp.dtc" --steps 1 > o 2> e; rc=$?
  [ $rc = 1 ] || fail "rank count: exit $rc"
  one_error e "compiled for 4 devices (mesh 2x2) but 3 ranks are running"
  # A kernel failing on some ranks mid-step.
  mpi 4 "$run" "$art/lm_badids.dtc" --steps 2 > o 2> e; rc=$?
  [ $rc = 1 ] || fail "bad ids: exit $rc"
  one_error e "step 0: program 'spmd' instruction 0 (embedding): embedding: id"
  # Corrupt artifact.
  head -c 200 "$art/mlp_dp2.dtc" > cut.dtc
  "$run" cut.dtc --steps 1 2> e; [ $? = 1 ] || fail "truncated artifact"
  one_error e "cut.dtc: truncated artifact"
  # Flags.
  "$run" "$art/mlp_dp2.dtc" --steps -1 2> e; [ $? = 1 ] || fail "--steps -1"
  one_error e "--steps: expected a non-negative integer, got '-1'"
  "$run" "$art/mlp1.dtc" --steps 2x 2> e; [ $? = 1 ] || fail "--steps 2x"
  one_error e "--steps: expected a non-negative integer, got '2x'"
  "$run" "$art/mlp1.dtc" --steps 1 --seed=abc 2> e; [ $? = 1 ] || fail "--seed"
  one_error e "--seed: expected an integer"
  "$run" "$art/mlp1.dtc" 2> e; [ $? = 1 ] || fail "no --steps"
  one_error e "--steps N is required"
  "$run" "$art/mlp1.dtc" --steps 1 --frobnicate 2> e; [ $? = 1 ] || fail "unknown flag"
  one_error e "unknown flag --frobnicate"
  "$run" "$art/mlp1.dtc" --steps 1 --backend cuda 2> e; [ $? = 1 ] || fail "cuda"
  one_error e "no CUDA backend yet"
  "$run" "$art/mlp1.dtc" --steps 1 --load missing.st 2> e; [ $? = 1 ] || fail "missing ckpt"
  one_error e "missing.st: cannot open"
  "$run" "$art/mlp1.dtc" --steps 1 --data-dtype int8 2> e; [ $? = 1 ] || fail "data dtype"
  one_error e "--data-dtype: expected uint16 or uint32"
  "$run" "$art/mlp1.dtc" --steps 1 --threads 0 2> e; [ $? = 1 ] || fail "--threads 0"
  one_error e "--threads: expected an integer in [1, 4096], got '0'"
  "$run" "$art/mlp1.dtc" --steps 1 --threads=x 2> e; [ $? = 1 ] || fail "--threads x"
  one_error e "--threads: expected an integer in [1, 4096], got 'x'"
  "$run" --help > h || fail "--help"
  for f in --steps --seed --backend --data --data-dtype --log --save --load --launch --threads; do
    grep -q -- "$f" h || fail "--help lacks $f"
  done
  ;;
data)
  mpi 1 "$run" "$art/lm1.dtc" --steps 4 --data "$art/tokens.bin" --log one.jsonl > one.out || fail "np 1"
  mpi 2 "$run" "$art/lm2.dtc" --steps 4 --data "$art/tokens.bin" --data-dtype uint16 > two.out || fail "np 2"
  losses one.out > one.l; losses two.out > two.l
  close two.l one.l 2e-5
  [ "$(wc -l < one.jsonl)" = 4 ] || fail "log lines"
  grep -q '^{"step":0,"loss":[0-9.e+-]*,"step_time_s":[0-9.e+-]*,"tokens_per_s":[0-9.e+-]*}$' one.jsonl || { cat one.jsonl; fail "log format"; }
  mpi 2 "$run" "$art/lm2.dtc" --steps 1 --data "$art/tokens_bad.bin" 2> e; [ $? = 1 ] || fail "bad token"
  one_error e "tokens_bad.bin: token 60 at byte offset 246 (token 123) is not below 50"
  "$run" "$art/mlp1.dtc" --steps 1 --data "$art/tokens.bin" 2> e; [ $? = 1 ] || fail "no token inputs"
  one_error e "--data needs two integer inputs of shape [B, S]"
  ;;
launch)
  "$run" --launch "$art/mlp_dp2.dtc" --steps 3 --seed 1 > l.out 2> l.err || { cat l.err; fail "launch"; }
  mpi 2 "$run" "$art/mlp_dp2.dtc" --steps 3 --seed 1 > m.out || fail "mpirun"
  diff l.out m.out || fail "launch output differs"
  "$run" --launch "$art/lm2.dtc" --steps 1 --data "$art/tokens_bad.bin" 2> e; [ $? = 1 ] || fail "launch bad data"
  one_error e "token 60 at byte offset 246"
  "$run" --launch "$art/mlp_dp2.dtc" --steps 1 --save /nonexistent/dir/x.st 2> e; [ $? = 1 ] || fail "launch save dir"
  one_error e "directory '/nonexistent/dir' does not exist"
  DTC_MPIRUN=/nonexistent/mpirun "$run" --launch "$art/mlp_dp2.dtc" --steps 1 2> e; [ $? = 1 ] || fail "DTC_MPIRUN"
  one_error e "cannot run /nonexistent/mpirun"
  DTC_MPIRUN=$mpiexec DTC_MPIRUN_ARGS="--bind-to none" "$run" --launch "$art/mlp_dp2.dtc" --steps 1 > x.out || fail "DTC_MPIRUN_ARGS"
  grep -q '^step 0 loss' x.out || fail "launch with args"
  # Threads per rank: bound to cores when they fit, shared otherwise; the
  # kernels give the same losses with any count (to rounding of the GEMMs).
  env -u OPENBLAS_NUM_THREADS "$run" --launch "$art/lm1.dtc" --steps 3 --threads 1 --stats s1.json > t1.out || fail "--threads 1"
  env -u OPENBLAS_NUM_THREADS "$run" --launch "$art/lm1.dtc" --steps 3 --threads 3 --stats s3.json > t3.out || fail "--threads 3"
  losses t1.out > t1.l; losses t3.out > t3.l
  close t3.l t1.l 1e-6
  grep -q '"threads": 3' s3.json || fail "stats threads"
  grep -q '"gflops"' s1.json || fail "stats gflops"
  # --stats prints the kernels that took longest, with their share of the step.
  grep -q '^kernels, rank 0, per step' t1.out || fail "stats table"
  grep -Eq '^ +[0-9.]+% +[0-9.]+ +[0-9.]+ +[0-9]+  matmul ' t1.out || { cat t1.out; fail "stats matmul row"; }
  ;;
*) fail "unknown case $case_name" ;;
esac
echo "ok: $case_name"
