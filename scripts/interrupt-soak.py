#!/usr/bin/env python3
"""Interrupts `dtc run` the ways schedulers and people do, many times, and
checks that every interruption keeps the work (issue: interruptions never
lose work; docs/runtime.md "Interruption").

  scripts/interrupt-soak.py [--rounds N] [--seed S] [--bin DIR] [--work DIR]
                            [--max-delay SECONDS] [--reference-steps N]

Each round picks a plan (data, tensor or pipeline parallel, 2 ranks), a
signal (SIGTERM, SIGINT, SIGHUP), a way to send it (to dtc run's PID, to
its whole process group, or `timeout` sending SIGTERM), a moment (from
the launch itself to well into training) and, one round in three, a save
every 3 steps (so that signals also land during saves), and starts

  dtc run PLAN.dtc --steps 1000000 --seed 3 --save ck.safetensors --log log.jsonl

Then it checks that the run exited 128+signal (124 under timeout) with one
line, "interrupted by SIG... (before the first step|after step K): ...
holds the N steps done"; that no process of its session is left; that the
log holds steps 0..N-1 once each; and that resuming from the checkpoint
(`--load`, 2 more steps) prints exactly the losses of steps N and N+1 of an
uninterrupted run. A signal in dtc's first milliseconds (the dynamic
loader, before its main) ends it by the signal's default action, before
anything is started or written; such rounds are counted apart. Prints one
line per round and a summary; exits 1 if any round failed.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLANS = {
    "dp2": ["--mesh", "2", "--strategy", "dp=2"],
    "tp2": ["--mesh", "2", "--strategy", "tp=2"],
    "pp2": ["--mesh", "2", "--strategy", "pp=2", "--microbatches", "2", "--schedule", "1f1b"],
}
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT, "SIGHUP": signal.SIGHUP}


def losses(text):
    return [line for line in text.splitlines() if re.match(r"^step \d+ loss ", line)]


def session_processes(sid):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(pid))
        except (OSError, IndexError, ValueError):
            continue
    return found


def left_behind(sid):
    """The session's processes still there after a run ended, given 10 s to
    go (mpirun's last children may take a moment on a loaded machine)."""
    left = session_processes(sid)
    for _ in range(20):
        if not left:
            break
        time.sleep(0.5)
        left = session_processes(sid)
    return left


def run_round(a, work, plan, sig_name, how, delay, reference, save_every):
    """One interruption; returns "" or what went wrong."""
    d = tempfile.mkdtemp(dir=work)
    dtc = os.path.join(a.bin, "dtc")
    cmd = [dtc, "run", os.path.join(work, plan + ".dtc"), "--steps", "1000000", "--seed", "3",
           "--save", "ck.safetensors", "--log", "log.jsonl"]
    if save_every:
        cmd += ["--save-every", str(save_every)]
    if how == "timeout":
        cmd = ["timeout", "-s", "TERM", f"{delay:.3f}"] + cmd
        sig_name = "SIGTERM"
    # As a shell's foreground job gets them: the default actions (lit's
    # workers, for one, ignore SIGINT, and an ignored signal stays ignored
    # until dtc's main installs its handlers).
    def default_signals():
        for s in SIGNALS.values():
            signal.signal(s, signal.SIG_DFL)
    proc = subprocess.Popen(cmd, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=default_signals)
    if how != "timeout":
        time.sleep(delay)
        target = proc.pid if how == "pid" else -proc.pid
        os.kill(target, SIGNALS[sig_name])
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        for pid in session_processes(proc.pid):  # mpirun has a group of its own
            os.kill(pid, signal.SIGKILL)
        proc.communicate()
        return "did not stop within 90 s of the signal"
    left = left_behind(proc.pid)
    if left:
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        return f"processes left behind 10 s after the run ended: {left}"
    # A signal in dtc's first milliseconds (the dynamic loader, before
    # main) ends it by the default action, before it has started or written
    # anything: nothing to keep.
    if (proc.returncode in (-SIGNALS[sig_name], 128 + SIGNALS[sig_name], 124) and not err.strip()
            and not os.listdir(d)):
        shutil.rmtree(d)
        return "before-start"
    want = 124 if how == "timeout" else 128 + SIGNALS[sig_name]
    lines = [line for line in err.splitlines() if line.strip()]
    m = re.match(rf"^dtc-run: error: interrupted by {sig_name} (before the first step|after step \d+): "
                 r".*ck\.safetensors holds the (\d+) steps? done; resume with --load", lines[-1] if lines else "")
    if proc.returncode != want or len(lines) != 1 or not m:
        return f"exit {proc.returncode} (want {want}), stderr: {err.strip()[:300]!r}"
    done = int(m.group(2))
    if done + 2 > len(reference):
        return f"{done} steps done, past the {len(reference)} of the uninterrupted run (lower --max-delay)"
    if losses(out) != reference[:done]:
        return f"stdout's {len(losses(out))} loss lines differ from the first {done} of the uninterrupted run"
    steps = [json.loads(line)["step"] for line in open(os.path.join(d, "log.jsonl"))]
    if steps != list(range(done)):
        return f"the log holds steps {steps[:3]}...{steps[-3:]}, not 0..{done - 1}"
    resumed = subprocess.run([dtc, "run", os.path.join(work, plan + ".dtc"), "--steps", "2", "--seed", "3",
                              "--load", "ck.safetensors", "--save", "ck.safetensors", "--log", "log.jsonl"],
                             cwd=d, capture_output=True, text=True, timeout=120)
    if resumed.returncode != 0:
        return f"resume failed: {resumed.stderr.strip()[:300]}"
    if losses(resumed.stdout) != reference[done:done + 2]:
        return (f"resumed losses {losses(resumed.stdout)} differ from the uninterrupted run's "
                f"{reference[done:done + 2]}")
    shutil.rmtree(d)
    return ""


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--work", default="")
    p.add_argument("--max-delay", type=float, default=2.5,
                   help="latest moment of a signal after the start, seconds (default 2.5)")
    p.add_argument("--reference-steps", type=int, default=4000,
                   help="steps of the uninterrupted runs the resumed ones are held to (default 4000)")
    a = p.parse_args(argv)
    work = a.work or tempfile.mkdtemp(prefix="dtc-interrupt-soak-")
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "gpt.mlir")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gen_model.py"), "gpt", "--layers", "2",
                    "--hidden", "16", "--heads", "2", "--seq", "8", "--vocab", "32", "--batch", "8",
                    "-o", model], check=True)
    references = {}
    for plan, flags in PLANS.items():
        subprocess.run([os.path.join(a.bin, "dtc"), "compile", model, "-o", os.path.join(work, plan + ".dtc")]
                       + flags, check=True)
        out = subprocess.run([os.path.join(a.bin, "dtc"), "run", os.path.join(work, plan + ".dtc"), "--steps",
                              str(a.reference_steps), "--seed", "3"], capture_output=True, text=True, check=True)
        references[plan] = losses(out.stdout)
    rng = random.Random(a.seed)
    failures = before_start = 0
    for r in range(a.rounds):
        plan = rng.choice(sorted(PLANS))
        sig_name = rng.choice(sorted(SIGNALS))
        how = rng.choice(["pid", "group", "timeout"])
        # A third of the rounds during the launch (before any step).
        delay = rng.uniform(0.0, 0.4) if rng.random() < 1 / 3 else rng.uniform(0.4, a.max_delay)
        # A third of the rounds save every 3 steps: signals land in saves too.
        save_every = 3 if rng.random() < 1 / 3 else 0
        problem = run_round(a, work, plan, sig_name, how, delay, references[plan], save_every)
        early = problem == "before-start"
        before_start += early
        failures += bool(problem) and not early
        print(f"round {r}: {plan} {sig_name if how != 'timeout' else 'SIGTERM'} by {how} at {delay:.2f} s"
              + (f" (saving every {save_every} steps)" if save_every else "") + ": "
              + ("ok (ended before dtc started: nothing written, nothing left)" if early
                 else f"FAILED: {problem}" if problem else "ok"), flush=True)
    print(f"{a.rounds - failures} of {a.rounds} interruptions kept the work and resumed exactly"
          + (f" ({before_start} came before dtc had started anything)" if before_start else "")
          + (f"; {failures} FAILED" if failures else ""))
    if not failures and not a.work:
        shutil.rmtree(work)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
