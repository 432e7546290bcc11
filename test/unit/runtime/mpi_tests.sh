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
# Open MPI's session directories (a singleton leaves its own behind) go
# with the scratch directory.
export TMPDIR="$work"
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
# rank_pid R: the pid of rank R's dtc-run (not its --guard) of a job started
# from this case's scratch directory
rank_pid() {
  local p
  for p in $(pgrep -f -- "dtc-run .*$work/"); do
    tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q -- '--guard\|--launch' && continue
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo $p; return 0; }
  done
  return 1
}
# guard_pid R: the guard process of rank R under dtc run.
guard_pid() {
  local p
  for p in $(pgrep -f -- "dtc-run --guard .*$work/"); do
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo $p; return 0; }
  done
  return 1
}
# wait_for FILE PATTERN: until a line of FILE matches (60 s at most)
wait_for() {
  local i
  for i in $(seq 600); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  fail "no '$2' in $1"
}
# no_strays: no process of this case is left
no_strays() {
  sleep 0.2
  if pgrep -f -- "$work/" > /dev/null; then pgrep -af -- "$work/"; fail "processes left behind"; fi
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
  one_error e "; use --backend cpu"
  "$run" --launch "$art/mlp1.dtc" --steps 1 --backend cuda 2> e; [ $? = 1 ] || fail "cuda (launch)"
  one_error e "--backend cuda: "
  "$run" "$art/mlp1.dtc" --steps 1 --trace 2> e; [ $? = 1 ] || fail "--trace without a value"
  one_error e "--trace needs a value"
  # A trace file may not replace an input (rank 0's file is the artifact).
  mkdir -p tr && cp "$art/mlp1.dtc" tr/rank-0.json
  "$run" --launch tr/rank-0.json --steps 1 --trace tr 2> e; [ $? = 1 ] || fail "--trace over the artifact"
  one_error e "is the same file as the artifact tr/rank-0.json"
  "$run" "$art/mlp1.dtc" --steps 1 --load missing.st 2> e; [ $? = 1 ] || fail "missing ckpt"
  one_error e "missing.st: cannot open"
  "$run" "$art/mlp1.dtc" --steps 1 --data-dtype int8 2> e; [ $? = 1 ] || fail "data dtype"
  one_error e "--data-dtype: expected uint16 or uint32"
  "$run" "$art/mlp1.dtc" --steps 1 --threads 0 2> e; [ $? = 1 ] || fail "--threads 0"
  one_error e "--threads: expected an integer in [1, 4096], got '0'"
  "$run" "$art/mlp1.dtc" --steps 1 --threads=x 2> e; [ $? = 1 ] || fail "--threads x"
  one_error e "--threads: expected an integer in [1, 4096], got 'x'"
  "$run" --help > h || fail "--help"
  for f in --steps --seed --backend --data --data-dtype --log --save --save-every --load --timeout --launch --threads --trace; do
    grep -q -- "$f" h || fail "--help lacks $f"
  done
  grep -q -- '--timeout SECONDS .*(default 300; 0 = wait forever)' <(tr -s ' \n' ' ' < h) || fail "--help: --timeout default"
  # Programs that disagree on a collective: refused before any rank starts.
  "$run" --launch "$art/mismatch.dtc" --steps 1 2> e; [ $? = 1 ] || fail "mismatch (launch)"
  one_error e "programs 'p0' (rank 0) and 'p1' (rank 1) disagree on communicator 'a'"
  mpi 2 "$run" "$art/mismatch.dtc" --steps 1 2> e; [ $? = 1 ] || fail "mismatch (mpirun)"
  one_error e "its collective #1 is all_reduce (sum) of 8 f32"
  # More communicators than MPI allows: MPI's error, translated, with the limit.
  "$run" "$art/many_comms.dtc" --steps 1 2> e; [ $? = 1 ] || fail "communicator limit"
  one_error e "creating communicator 'c65531' (65532 of the artifact's 70000): MPI_Comm_split failed after this rank had created 65531 communicators: MPI_ERR_INTERN"
  grep -q "limit on communicators per process" e || fail "the limit is not named"
  # Inputs that are not regular files.
  "$run" /dev/zero --steps 1 2> e; [ $? = 1 ] || fail "/dev/zero artifact"
  one_error e "/dev/zero: cannot read: not a regular file"
  mkfifo fifo.dtc
  "$run" --launch fifo.dtc --steps 1 2> e; [ $? = 1 ] || fail "FIFO artifact"
  one_error e "fifo.dtc: cannot read: not a regular file"
  ;;
data)
  mpi 1 "$run" "$art/lm1.dtc" --steps 4 --data "$art/tokens.bin" --log one.jsonl > one.out || fail "np 1"
  mpi 2 "$run" "$art/lm2.dtc" --steps 4 --data "$art/tokens.bin" --data-dtype uint16 > two.out || fail "np 2"
  losses one.out > one.l; losses two.out > two.l
  close two.l one.l 2e-5
  [ "$(wc -l < one.jsonl)" = 4 ] || fail "log lines"
  grep -q '^{"step":0,"loss":[0-9.e+-]*,"step_time_s":[0-9.e+-]*,"tokens_per_s":[0-9.e+-]*,"lr":[0-9.e+-]*}$' one.jsonl || { cat one.jsonl; fail "log format"; }
  mpi 2 "$run" "$art/lm2.dtc" --steps 1 --data "$art/tokens_bad.bin" 2> e; [ $? = 1 ] || fail "bad token"
  one_error e "tokens_bad.bin: token 60 at byte offset 246 (token 123) is not below 50"
  "$run" "$art/mlp1.dtc" --steps 1 --data "$art/tokens.bin" 2> e; [ $? = 1 ] || fail "no token inputs"
  one_error e "token data (--data, --eval-data) needs two integer inputs of shape [B, S]"
  # The token file cut short during a run: an error naming it, not SIGBUS.
  cp "$art/tokens.bin" cut.bin
  "$run" "$art/lm1.dtc" --steps 100000000 --data cut.bin > t.out 2> t.err &
  job=$!
  wait_for t.out '^step 1 loss'
  truncate -s 40 cut.bin
  wait $job; rc=$?
  [ $rc = 1 ] || { cat t.err; fail "truncated token file: exit $rc"; }
  one_error t.err "cut.bin: the token file shrank during the run (it had 600 tokens"
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
liveness)
  # What `dtc run` (dtc-run --launch) says when a rank dies or stops; each
  # job runs from this directory so that its processes can be found (and
  # must all be gone afterwards).
  cp "$art/mlp_dp4.dtc" dp4.dtc
  cp "$art/mlp_dp2.dtc" dp2.dtc
  # SIGKILL (what the OOM killer sends) of one rank.
  timeout 120 "$run" --launch "$work/dp4.dtc" --steps 100000000 > k.out 2> k.err &
  job=$!
  wait_for k.out '^step 1 loss'
  victim=$(rank_pid 1) || fail "rank 1 not found"
  kill -KILL "$victim"
  wait $job; rc=$?
  [ $rc = 1 ] || { cat k.err; fail "SIGKILL: exit $rc"; }
  one_error k.err "rank 1 (pid $victim) was killed by SIGKILL in step"
  grep -q "likely out of memory" k.err || fail "SIGKILL: no out-of-memory hint"
  no_strays
  # SIGTERM to one rank, or to its guard (which passes it on), is not the
  # user's interrupt of dtc run: the ranks still stop and save, and the
  # line says where the signal went.
  for target in rank guard; do
    timeout 120 "$run" --launch "$work/dp4.dtc" --steps 100000000 --save "$work/t.safetensors" --overwrite > t.out 2> t.err &
    job=$!
    wait_for t.out '^step 1 loss'
    victim=$(${target}_pid 2) || fail "SIGTERM: $target 2 not found"
    kill -TERM "$victim"
    wait $job; rc=$?
    [ $rc = 1 ] || { cat t.err; fail "SIGTERM to the $target: exit $rc"; }
    one_error t.err "interrupted by SIGTERM sent to a rank, not to dtc run, after step"
    no_strays
  done
  # SIGSTOP of one rank: every other rank gives up after --timeout, the job
  # ends naming the stopped rank (the bound here is generous: a loaded
  # machine; the supervisor itself waits 5 s at most after the timeout).
  start=$(date +%s)
  timeout 120 "$run" --launch "$work/dp4.dtc" --steps 100000000 --timeout 4 > s.out 2> s.err &
  job=$!
  wait_for s.out '^step 1 loss'
  victim=$(rank_pid 2) || fail "rank 2 not found"
  kill -STOP "$victim"
  stopped=$(date +%s)
  wait $job; rc=$?
  [ $rc = 1 ] || { cat s.err; fail "SIGSTOP: exit $rc"; }
  [ $(( $(date +%s) - stopped )) -le 30 ] || fail "SIGSTOP: took $(( $(date +%s) - stopped )) s"
  one_error s.err "rank 2 (pid $victim) stopped making progress in step"
  grep -q "it is stopped" s.err || { cat s.err; fail "SIGSTOP: state"; }
  grep -q "ranks 0, 1, 3 gave up" s.err || { cat s.err; fail "SIGSTOP: the others"; }
  grep -q "timed out after 4 s in an exchange" s.err || { cat s.err; fail "SIGSTOP: collective"; }
  no_strays
  # A pipeline stage waits for its peer's messages no longer than --timeout
  # either (its receives are polled like the collectives).
  cp "$art/pp2.dtc" pp2.dtc
  timeout 120 "$run" --launch "$work/pp2.dtc" --steps 100000000 --timeout 4 > q.out 2> q.err &
  job=$!
  wait_for q.out '^step 1 loss'
  victim=$(rank_pid 1) || fail "rank 1 not found (pipeline)"
  kill -STOP "$victim"
  wait $job; rc=$?
  [ $rc = 1 ] || { cat q.err; fail "pipeline SIGSTOP: exit $rc"; }
  one_error q.err "rank 1 (pid $victim) stopped making progress in step"
  grep -q "rank 0 gave up" q.err || { cat q.err; fail "pipeline SIGSTOP: the other"; }
  grep -q "timed out after 4 s in" q.err || { cat q.err; fail "pipeline SIGSTOP: timeout"; }
  no_strays
  # Under a plain mpirun (no supervisor) the waiting rank leaves too.
  timeout 120 "$mpiexec" -np 2 "${root[@]}" --oversubscribe --quiet "$run" "$work/dp2.dtc" --steps 100000000 --timeout 4 > p.out 2> p.err &
  job=$!
  wait_for p.out '^step 1 loss'
  victim=$(rank_pid 1) || fail "rank 1 not found (mpirun)"
  kill -STOP "$victim"
  wait $job; rc=$?
  [ $rc != 0 ] && [ $rc != 124 ] || fail "plain mpirun: exit $rc"
  grep -q "dtc-run: error: rank 0: .*dp2.dtc: step .*timed out after 4 s" p.err || { cat p.err; fail "plain mpirun: message"; }
  kill -KILL "$victim" 2>/dev/null
  no_strays
  # A launcher that fails: its own words, in one line.
  DTC_MPIRUN_ARGS="--hostfile $work/no-such-hostfile" "$run" --launch "$work/dp2.dtc" --steps 1 2> e; rc=$?
  [ $rc = 1 ] || fail "hostfile: exit $rc"
  one_error e "mpirun failed (exit status"
  grep -q "no-such-hostfile" e || { cat e; fail "hostfile not named"; }
  no_strays
  ;;
interrupt)
  # SIGTERM to `dtc run`: the step finishes, the checkpoint is saved, exit
  # 128+15; resuming gives the losses of an uninterrupted run, and the log
  # holds every step once.
  cp "$art/mlp_tp.dtc" tp.dtc
  timeout 120 "$run" --launch "$work/tp.dtc" --steps 100000000 --seed 3 --save ck.st --log run.jsonl > a.out 2> a.err &
  job=$!
  wait_for a.out '^step 2 loss'
  kill -TERM $(pgrep -f -- "^$run --launch $work/tp.dtc")
  wait $job; rc=$?
  [ $rc = 143 ] || { cat a.err; fail "SIGTERM: exit $rc"; }
  one_error a.err "interrupted by SIGTERM after step"
  done_steps=$(sed -n 's/.* holds the \([0-9]*\) steps done.*/\1/p' a.err)
  [ -n "$done_steps" ] && [ "$(wc -l < a.out)" = "$done_steps" ] || {
    cat a.err; tail -n 3 a.out
    fail "steps done: stdout has $(wc -l < a.out) lines, the checkpoint ${done_steps:-?} steps"; }
  [ -z "$(ls -A | grep '\.tmp\.')" ] || { ls -A; fail "temporary files left"; }
  no_strays
  timeout 120 "$run" --launch "$work/tp.dtc" --steps 4 --seed 3 --load ck.st --save ck.st --log run.jsonl > b.out 2> b.err || { cat b.err; fail "resume"; }
  [ -s b.err ] && { cat b.err; fail "resume: unexpected stderr"; }
  mpi 4 "$run" "$work/tp.dtc" --steps $((done_steps + 4)) --seed 3 --log full.jsonl > full.out || fail "uninterrupted run"
  cat a.out b.out > resumed.out
  diff full.out resumed.out || fail "resumed losses differ from the uninterrupted run"
  awk -F'[:,]' '{print $2}' run.jsonl > steps.txt
  seq 0 $((done_steps + 3)) | diff - steps.txt || fail "every step exactly once in the log"
  diff <(sed 's/,"step_time_s.*//' run.jsonl) <(sed 's/,"step_time_s.*//' full.jsonl) || fail "log losses"
  # A log that does not end where the checkpoint does is refused up front.
  head -n 2 run.jsonl > short.jsonl
  "$run" --launch "$work/tp.dtc" --steps 1 --load ck.st --log short.jsonl 2> e; [ $? = 1 ] || fail "log mismatch"
  one_error e "short.jsonl: the log ends at step 1 but the checkpoint continues from step $((done_steps + 4))"
  [ "$(wc -l < short.jsonl)" = 2 ] || fail "the refused log was changed"
  # dtc-run alone (no mpirun): SIGINT.
  cp "$art/mlp1.dtc" one.dtc
  "$run" "$work/one.dtc" --steps 100000000 --save one.st > c.out 2> c.err &
  job=$!
  wait_for c.out '^step 1 loss'
  kill -INT $job
  wait $job; rc=$?
  [ $rc = 130 ] || { cat c.err; fail "singleton SIGINT: exit $rc"; }
  one_error c.err "interrupted by SIGINT after step"
  [ -f one.st ] && [ -f one.st.optim ] || fail "singleton: no checkpoint"
  no_strays
  # Under the user's own mpirun, SIGTERM to one rank: every rank finishes
  # the step, the checkpoint is written, rank 0 says so (mpirun then adds
  # its own banner about the non-zero exits).
  cp "$art/mlp_dp2.dtc" udp2.dtc
  timeout 120 "$mpiexec" -np 2 "${root[@]}" --oversubscribe --quiet "$run" "$work/udp2.dtc" --steps 100000000 --save u.st > u.out 2> u.err &
  job=$!
  wait_for u.out '^step 1 loss'
  victim=$(rank_pid 1) || fail "own mpirun: rank 1 not found"
  kill -TERM "$victim"
  wait $job; rc=$?
  [ $rc != 0 ] && [ $rc != 124 ] || { cat u.err; fail "own mpirun SIGTERM: exit $rc"; }
  grep -q "^dtc-run: error: interrupted by SIGTERM after step [0-9]*: .*u.st holds the [0-9]* steps done" u.err || { cat u.err; fail "own mpirun SIGTERM: message"; }
  [ -f u.st ] && [ -f u.st.optim ] || fail "own mpirun SIGTERM: no checkpoint"
  no_strays
  ;;
*) fail "unknown case $case_name" ;;
esac
echo "ok: $case_name"
