#!/usr/bin/env python3
"""Signals that arrive while `dtc run` writes its checkpoint.

  interrupt-save.test.py --bin DIR --work DIR CASE

CASE is LAUNCH-COUNT[-sidecar]: LAUNCH `mpi` (dtc run's supervisor over
mpirun) or `local` (--local-ranks 2, the ranks' own handler); COUNT 2 or 3
signals. Every save of the interrupted run pauses 3 seconds (the test hook
DTC_TEST_CHECKPOINT_FAULT=pause:0:saving, or with `-sidecar` pause:0:sidecar:
once the optimizer state is written, before the parameters), so the
signals after the first land inside it:
  - 2 signals: the second waits for the save. Exit 128+SIGTERM, a notice,
    then the usual "interrupted ... holds the N steps done" line; the
    checkpoint resumes to the losses of an uninterrupted run.
  - 3 signals: the third stops at once. Exit 128+SIGTERM and one error
    line; the checkpoint on disk (parameters and optimizer state) is the
    previous one, of step 2, and resumes exactly; no temporary file is left.
In both, no process of the run's session is left. Prints "CASE: ok" or
what went wrong.
"""
import argparse
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time

# The soak's helpers (scripts/interrupt-soak.py): loss lines, a session's
# processes.
_SOAK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                     "interrupt-soak.py")
_spec = importlib.util.spec_from_file_location("interrupt_soak", _SOAK)
soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soak)


def saved_step(path):
    """The dtc.step of a safetensors file's metadata."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = f.read(n).decode()
    m = re.search(r'"dtc\.step"\s*:\s*"(\d+)"', header)
    return int(m.group(1)) if m else None


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("case", choices=["mpi-2", "mpi-3", "mpi-3-sidecar", "local-2", "local-3",
                                     "local-3-sidecar"])
    a = ap.parse_args(argv)
    launch, count = a.case.split("-")[:2]
    count = int(count)
    pause = "pause:0:sidecar" if a.case.endswith("-sidecar") else "pause:0:saving"
    dtc = os.path.join(a.bin, "dtc")
    d = os.path.join(a.work, a.case)
    os.makedirs(d)
    plan = os.path.join(a.work, "dp2.dtc")
    ranks = ["--local-ranks", "2"] if launch == "local" else []

    def run(args, env=None):
        r = subprocess.run([dtc, "run", plan, "--seed", "3"] + ranks + args, cwd=d,
                           capture_output=True, text=True, timeout=300, env=env)
        if r.returncode != 0:
            sys.exit(f"{a.case}: {' '.join(args)} failed: {r.stderr.strip()}")
        return r

    run(["--steps", "2", "--save", "ck.safetensors"])
    env = dict(os.environ, DTC_TEST_CHECKPOINT_FAULT=pause)
    # Output to files, read once the run ended: a pipe read partly by line
    # and then by communicate() loses what the line reader had buffered.
    out_path, err_path = os.path.join(d, "run.out"), os.path.join(d, "run.err")
    with open(out_path, "w") as out_file, open(err_path, "w") as err_file:
        proc = subprocess.Popen(
            [dtc, "run", plan, "--seed", "3", "--steps", "1000000", "--load", "ck.safetensors",
             "--save", "ck.safetensors"] + ranks,
            cwd=d, stdout=out_file, stderr=err_file, env=env, start_new_session=True)
    # Training, then the signals: the first asks for the save, the others
    # come while it pauses (each more than dtc's 0.5 s apart, or it would
    # take them for copies of one signal).
    deadline = time.monotonic() + 60
    while not re.search(r"^step ", open(out_path).read(), re.M):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit(f"{a.case}: no step before the signals: {open(err_path).read()!r}")
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    for _ in range(count - 1):
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        for pid in soak.session_processes(proc.pid):
            os.kill(pid, signal.SIGKILL)
        sys.exit(f"{a.case}: did not stop within 60 s of the signals")
    out, err = open(out_path).read(), open(err_path).read()
    left = soak.left_behind(proc.pid)
    if left:
        sys.exit(f"{a.case}: processes left behind: {left}")
    lines = [line for line in err.splitlines() if line.strip()]
    notice = ("dtc-run: saving the checkpoint, then stopping; a third signal stops at "
              "once and keeps the previous checkpoint")
    if proc.returncode != 128 + signal.SIGTERM:
        sys.exit(f"{a.case}: exit {proc.returncode}, stderr {err!r}")
    if not lines or lines[0] != notice:
        sys.exit(f"{a.case}: no notice at the second signal: {err!r}")
    if count == 2:
        m = re.match(r"^dtc-run: error: interrupted by SIGTERM after step (\d+): "
                     r"ck\.safetensors holds the (\d+) steps done; resume with --load",
                     lines[-1])
        if len(lines) != 2 or not m:
            sys.exit(f"{a.case}: stderr {err!r}")
        done = int(m.group(2))
        if len(soak.losses(out)) != done - 2:
            sys.exit(f"{a.case}: {len(soak.losses(out))} steps printed, {done - 2} expected")
    else:
        if lines[1:] != ["dtc-run: error: interrupted three times: stopped during the save; "
                         "the checkpoint on disk is the previous one"]:
            sys.exit(f"{a.case}: stderr {err!r}")
        done = 2
        litter = [f for f in os.listdir(d) if f.startswith(".") or "tmp" in f]
        if litter:
            sys.exit(f"{a.case}: temporary files left: {litter}")
    steps = (saved_step(os.path.join(d, "ck.safetensors")),
             saved_step(os.path.join(d, "ck.safetensors.optim")))
    if steps != (done, done):
        sys.exit(f"{a.case}: the checkpoint and its optimizer state are of steps {steps}, "
                 f"{done} expected")
    # Resumes to an uninterrupted run's losses.
    resumed = run(["--steps", "2", "--load", "ck.safetensors"])
    reference = run(["--steps", str(done + 2)])
    if soak.losses(resumed.stdout) != soak.losses(reference.stdout)[done:]:
        sys.exit(f"{a.case}: resumed {soak.losses(resumed.stdout)}, uninterrupted "
                 f"{soak.losses(reference.stdout)[done:]}")
    print(f"{a.case}: ok ({done} steps kept)")


if __name__ == "__main__":
    main(sys.argv[1:])
