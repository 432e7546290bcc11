#!/usr/bin/env python3
"""The end-to-end plans of the CPU suite, run on a GPU and held to one device.

  gpu_plans.py prepare --dtc build/bin/dtc --out DIR          (needs the compiler)
  gpu_plans.py run DIR --dtc-run build/bin/dtc-run [--steps 6] [--only REGEX]
                       [--trace-dir DIR]                      (needs a GPU)

`prepare` generates small GPT, LLaMA and every-op models
(examples/gen_model.py) and compiles each plan (data, tensor and pipeline
parallel, ZeRO-1/2/3, mixed precision) and its one-device reference into
DIR; the artifacts are all `run` needs, so the two halves can run on
different machines (dtc compile needs MLIR, the GPU machine need not have
it).

`run` trains every plan for --steps steps with `dtc-run --local-ranks N
--backend cuda` (its N ranks as threads on the one GPU; collectives
through host memory with `--collectives mpi` when N > 1, NCCL when N = 1)
and the reference on the CPU backend, and checks:
  - f32 plans against the CPU's one-device run: every step's loss within
    1e-4 relative, every saved parameter tensor within 1e-4 relative L2
    error and every element within 1e-3 of its tensor's largest magnitude
    (the per-tensor rule of test/e2e/lib/dp_equivalence.py: Adam amplifies the
    rounding noise of near-zero gradients element by element);
  - mixed-precision plans against the same plan on the CPU (bf16/f16
    rounding makes them differ from f32 by more than any fixed bound):
    losses within 2e-2 (bf16) or 5e-3 (fp16) relative, the parameters
    within 1e-2 relative L2;
  - no NaN or Inf anywhere.
With --trace-dir it also traces a data-parallel run on the GPU (a GPT wide
enough to keep the GPU busy, `--collectives local`, 25 MiB gradient
buckets) and fails unless most of the buckets' reduction time overlapped
the rest of the backward (check_trace.py --overlap --min-overlap 0.5).
Prints one line per plan and a summary; exits 1 if any plan fails.
Standard library only.
"""
import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

MODELS = {
    "gpt": ["gpt", "--layers", "2", "--hidden", "32", "--heads", "4", "--seq", "16", "--vocab", "256",
            "--batch", "8"],
    "llama": ["llama", "--layers", "2", "--hidden", "32", "--heads", "4", "--seq", "16", "--vocab", "256",
              "--batch", "8"],
    # Wide enough for several 1 MiB gradient buckets (about 3 MiB a layer).
    "gptwide": ["gpt", "--layers", "4", "--hidden", "256", "--heads", "4", "--seq", "64", "--vocab", "512",
                "--batch", "8"],
    # The traced run's: kernels long enough (milliseconds) that the host
    # runs ahead of the GPU, as in real training, so what the trace shows
    # is the device's schedule, not the launch rate.
    "gptbig": ["gpt", "--layers", "4", "--hidden", "1024", "--heads", "8", "--seq", "512", "--vocab", "8192",
               "--batch", "16"],
    "everyop": ["everyop", "--hidden", "16", "--heads", "4", "--seq", "8", "--vocab", "10", "--batch", "8"],
    # Mixture of experts whose capacity drops tokens (the moe_* kernels).
    "gptmoe": ["gpt", "--layers", "2", "--hidden", "32", "--heads", "4", "--seq", "16", "--vocab", "256",
               "--batch", "8", "--experts", "8", "--top-k", "2", "--capacity-factor", "1.0"],
}

# name, model, mesh, strategy, extra compile flags, precision
PLANS = [
    ("gpt-1", "gpt", "1", "", [], "f32"),
    ("gpt-dp2", "gpt", "2", "dp=2", [], "f32"),
    ("gpt-tp2", "gpt", "2", "tp=2", [], "f32"),
    ("gpt-dp2-tp2", "gpt", "2x2", "dp=2,tp=2", [], "f32"),
    ("gpt-pp2-1f1b", "gpt", "2", "pp=2", ["--microbatches", "4", "--schedule", "1f1b"], "f32"),
    ("gpt-pp2-zb", "gpt", "2", "pp=2", ["--microbatches", "4", "--schedule", "zb"], "f32"),
    ("gpt-dp2-zero1", "gpt", "2", "dp=2,zero=1", [], "f32"),
    ("gpt-dp2-zero2-mb2", "gpt", "2", "dp=2,zero=2", ["--microbatches", "2"], "f32"),
    ("gpt-dp4-zero3", "gpt", "4", "dp=4,zero=3", [], "f32"),
    ("gpt-dp2-pp2-tp2-zero2", "gpt", "2x2x2", "dp=2,pp=2,tp=2,zero=2", ["--microbatches", "4"], "f32"),
    ("gpt-remat-full", "gpt", "2", "dp=2", ["--remat", "full"], "f32"),
    ("llama-1", "llama", "1", "", [], "f32"),
    ("llama-dp2-tp2", "llama", "2x2", "dp=2,tp=2", [], "f32"),
    ("llama-pp2-zero1", "llama", "2x2", "dp=2,pp=2,zero=1", ["--microbatches", "2"], "f32"),
    ("everyop-1", "everyop", "1", "", [], "f32"),
    ("gptmoe-1", "gptmoe", "1", "", [], "f32"),
    ("gptmoe-dp2-tp2", "gptmoe", "2x2", "dp=2,tp=2", [], "f32"),
    ("gptmoe-bf16-1", "gptmoe", "1", "", ["--precision", "bf16-mixed"], "bf16"),
    ("everyop-dp2", "everyop", "2", "dp=2", [], "f32"),
    ("gpt-bf16-1", "gpt", "1", "", ["--precision", "bf16-mixed"], "bf16"),
    ("gpt-bf16-dp2-zero1", "gpt", "2", "dp=2,zero=1", ["--precision", "bf16-mixed"], "bf16"),
    ("gpt-fp16-dp2", "gpt", "2", "dp=2", ["--precision", "fp16-mixed"], "fp16"),
    ("llama-bf16-tp2", "llama", "2", "tp=2", ["--precision", "bf16-mixed"], "bf16"),
    # SGD: Adam's first steps turn the rounding noise of a wide model's
    # near-zero gradients into whole learning-rate steps element by element.
    ("gptwide-1", "gptwide", "1", "", ["--optimizer", "sgd", "--lr", "0.01"], "f32"),
    ("gptwide-dp2-buckets", "gptwide", "2", "dp=2", ["--optimizer", "sgd", "--lr", "0.01", "--bucket-mb", "1"],
     "f32"),
    # Ring attention (attention_block and its gradient, the shift collective):
    # the SIMT kernels (head dimension 8) and, on the wide GPT in bf16, the
    # tensor-core ones (head dimension 64); zigzag (zigzag_length, the
    # default), striped (position_stride) and contiguous layouts.
    ("gpt-sp2", "gpt", "2", "sp=2", [], "f32"),
    ("gpt-sp2-contiguous", "gpt", "2", "sp=2", ["--sp-layout", "contiguous"], "f32"),
    ("gpt-sp4-striped", "gpt", "4", "sp=4", ["--sp-layout", "striped"], "f32"),
    ("gpt-dp2-sp2", "gpt", "2x2", "dp=2,sp=2", [], "f32"),
    ("llama-tp2-sp2", "llama", "2x2", "tp=2,sp=2", [], "f32"),
    ("gpt-pp2-sp2-1f1b", "gpt", "2x2", "pp=2,sp=2", ["--microbatches", "2", "--schedule", "1f1b"], "f32"),
    ("gpt-bf16-sp2", "gpt", "2", "sp=2", ["--precision", "bf16-mixed"], "bf16"),
    ("gptwide-bf16-sp4-striped", "gptwide", "4", "sp=4",
     ["--sp-layout", "striped", "--precision", "bf16-mixed", "--optimizer", "sgd", "--lr", "0.01"], "bf16"),
    ("gptwide-sp4", "gptwide", "4", "sp=4", ["--optimizer", "sgd", "--lr", "0.01"], "f32"),
    ("gptwide-bf16-sp2", "gptwide", "2", "sp=2", ["--precision", "bf16-mixed", "--optimizer", "sgd", "--lr", "0.01"],
     "bf16"),
    # --attention-stats keep: the blocks at positions 0 instead of attention
    # and attention_grad (SIMT in f32, tensor cores in bf16 at head dim 64).
    ("gpt-tp2-keep", "gpt", "2", "tp=2", ["--attention-stats", "keep"], "f32"),
    ("gptwide-bf16-keep", "gptwide", "1", "", ["--precision", "bf16-mixed", "--optimizer", "sgd", "--lr", "0.01",
                                               "--attention-stats", "keep"], "bf16"),
]

# Plans run with `--collectives local` (all-reduces on the GPU across the
# local ranks, so that the gradient buckets overlap the backward).
ASYNC = ["gptwide-dp2-buckets"]

# The traced data-parallel run (--trace-dir): the default 25 MiB buckets on
# a model whose kernels keep the GPU busy. Only its trace is checked: most
# of its buckets' reduction time must overlap the rest of the backward.
TRACE_PLAN = ("gptbig-dp2", "gptbig", "2", "dp=2", [], "f32")
TRACE_MIN_OVERLAP = 0.5


def devices(mesh):
    n = 1
    for part in mesh.split("x"):
        n *= int(part)
    return n


def thread_stacks(pid):
    """Where a hung process's threads are: gdb's backtraces when gdb is
    there, else each thread's kernel wait channel."""
    if shutil.which("gdb"):
        p = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                           capture_output=True, text=True, timeout=60)
        return p.stdout + p.stderr
    lines = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task")):
        try:
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                wchan = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            lines.append(f"thread {tid} ({comm}): waits in {wchan or '-'}")
        except OSError as e:
            lines.append(f"thread {tid}: {e}")
    return "\n".join(lines)


def run(cmd, log=None, timeout=300):
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
        code = p.returncode
    except subprocess.TimeoutExpired:
        # A hang: record where every thread waits, then kill (dtc-run turns
        # SIGTERM into a stop at the next step, which a hang never reaches).
        try:
            stacks = thread_stacks(p.pid)
        except Exception as e:  # the diagnosis must not hide the hang
            stacks = f"(no stacks: {e})"
        p.kill()
        out, err = p.communicate()
        err = (err or "") + f"\ntimed out after {timeout} s; its threads then:\n{stacks}\n"
        code = 124
    if log:
        with open(log, "w") as f:
            f.write(" ".join(cmd) + "\n" + out + err + f"\n(exit {code}, {time.time() - t0:.1f} s)\n")
    return code, out, err


def prepare(a):
    os.makedirs(a.out, exist_ok=True)
    gen = os.path.join(ROOT, "examples", "gen_model.py")
    for name, args in MODELS.items():
        code, _, err = run([sys.executable, gen] + args + ["-o", os.path.join(a.out, name + ".mlir")])
        if code:
            sys.exit(f"gen_model {name}: {err}")
    plans = []
    for name, model, mesh, strategy, extra, precision in PLANS + [TRACE_PLAN]:
        cmd = [a.dtc, "compile", os.path.join(a.out, model + ".mlir"), "--mesh", mesh] + \
            (["--strategy", strategy] if strategy else []) + extra + ["-o", os.path.join(a.out, name + ".dtc")]
        code, _, err = run(cmd)
        if code:
            sys.exit(f"dtc compile {name}: {err.strip()}")
        # f32 plans are held to the CPU's one-device run of their model;
        # mixed-precision plans to the same plan on the CPU.
        ref = f"{model}-1" if precision == "f32" else name
        if name == TRACE_PLAN[0]:
            continue
        plans.append({"name": name, "model": model, "mesh": mesh, "strategy": strategy,
                      "devices": devices(mesh), "precision": precision, "reference": ref})
    with open(os.path.join(a.out, "plans.json"), "w") as f:
        json.dump(plans, f, indent=1)
    print(f"prepared {len(plans)} plans in {a.out}")


def losses(text):
    out = {}
    for line in text.splitlines():
        p = line.split()
        if len(p) == 4 and p[0] == "step" and p[2] == "loss":
            out[int(p[1])] = float(p[3])
    return out


def read_params(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    base, tensors = 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = struct.unpack_from(f"<{(end - begin) // 4}f", data, base + begin)
    return tensors


def compare_params(a, b, rtol, elem_rtol, atol=1e-6):
    """Worst relative L2 error over the tensors, or a problem string."""
    if sorted(a) != sorted(b):
        return None, f"parameter names differ: {sorted(set(a) ^ set(b))}"
    worst = 0.0
    for name in a:
        x, y = a[name], b[name]
        if any(not math.isfinite(v) for v in y):
            return None, f"{name} has NaN/Inf"
        nx = math.sqrt(sum(v * v for v in x))
        d = math.sqrt(sum((u - v) ** 2 for u, v in zip(x, y)))
        big = max((abs(v) for v in x), default=0.0)
        rel = d / nx if nx > 0 else d
        worst = max(worst, rel)
        if d > rtol * nx + atol * math.sqrt(len(x)):
            return rel, f"{name}: relative L2 error {rel:.2e} > {rtol:g}"
        for i, (u, v) in enumerate(zip(x, y)):
            if abs(u - v) > elem_rtol * big + atol:
                return rel, f"{name}[{i}] = {v:.9g}, reference {u:.9g} (tensor max {big:.3g})"
    return worst, ""


def dtc_run(a, artifact, ranks, backend, work, tag, extra=(), collectives=None):
    ckpt = os.path.join(work, tag + ".safetensors")
    # The overlapping test mode is new on the GPU (its predecessor hung,
    # docs/backends.md): a short leash, so that a hang costs a minute and
    # leaves its threads' stacks.
    quick = collectives == "local"
    cmd = [a.dtc_run, artifact, "--steps", str(a.steps), "--local-ranks", str(ranks),
           "--backend", backend, "--save", ckpt, "--timeout", "20" if quick else "120"] + list(extra)
    if backend == "cuda":
        cmd += ["--collectives", collectives or ("nccl" if ranks == 1 else "mpi")]
    elif tag.endswith("-cuda"):
        backend = "cpu"  # --device-backend cpu: the driver's own check without a GPU
    code, out, err = run(cmd, os.path.join(work, tag + ".log"), timeout=60 if quick else 300)
    lines = err.strip().splitlines()
    message = next((l for l in lines if l.startswith("timed out")), lines[-1] if lines else "")
    return code, losses(out), ckpt, message


def trace_overlap(trace_dir):
    """(collective seconds, of which overlapping a kernel) on rank 0."""
    with open(os.path.join(trace_dir, "rank-0.json")) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    kernels = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and e.get("tid") == 2)
    colls = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and e.get("tid") == 3]
    total = sum(b - a for a, b in colls)
    covered = 0.0
    for a0, b0 in colls:
        for a1, b1 in kernels:
            if a1 >= b0:
                break
            covered += max(0.0, min(b0, b1) - max(a0, a1))
    return total * 1e-6, covered * 1e-6, len(colls)


def run_all(a):
    with open(os.path.join(a.dir, "plans.json")) as f:
        plans = json.load(f)
    if a.only:
        plans = [p for p in plans if re.search(a.only, p["name"])]
    work = os.path.join(a.work or a.dir, "runs")
    os.makedirs(work, exist_ok=True)
    refs, failed = {}, 0
    print(f"{'plan':26} {'ranks':>5} {'coll':>9} {'loss rel err':>12} {'param rel err':>13}  result")
    for p in plans:
        name, ranks = p["name"], p["devices"]
        ref = p["reference"]
        if ref not in refs:
            code, l, ckpt, err = dtc_run(a, os.path.join(a.dir, ref + ".dtc"),
                                         next(q["devices"] for q in plans_all(a) if q["name"] == ref),
                                         "cpu", work, ref + "-cpu")
            refs[ref] = (code, l, ckpt, err)
        rcode, rl, rckpt, rerr = refs[ref]
        coll = "local" if name in ASYNC else "nccl" if ranks == 1 else "mpi"
        code, l, ckpt, err = dtc_run(a, os.path.join(a.dir, name + ".dtc"), ranks, a.device_backend, work,
                                     name + "-cuda", collectives=coll if a.device_backend == "cuda" else None)
        problem, loss_err, param_err = "", float("nan"), float("nan")
        if rcode:
            problem = f"CPU reference failed: {rerr}"
        elif code:
            problem = f"GPU run failed (exit {code}): {err}"
        elif sorted(l) != sorted(rl) or not l:
            problem = f"steps differ: {sorted(l)} vs {sorted(rl)}"
        else:
            loss_tol = {"f32": 1e-4, "bf16": 2e-2, "fp16": 5e-3}[p["precision"]]
            loss_err = 0.0
            for k in rl:
                if not math.isfinite(l[k]):
                    problem = f"step {k} loss {l[k]}"
                    break
                e = abs(l[k] - rl[k]) / max(abs(rl[k]), 1e-30)
                loss_err = max(loss_err, e)
                if e > loss_tol:
                    problem = f"step {k}: loss {l[k]:.9g}, CPU {rl[k]:.9g} ({e:.2e} > {loss_tol:g})"
                    break
            if not problem:
                tol = (1e-4, 1e-3) if p["precision"] == "f32" else (1e-2, 5e-2)
                param_err, problem = compare_params(read_params(rckpt), read_params(ckpt), *tol)
                param_err = float("nan") if param_err is None else param_err
        ok = not problem
        failed += not ok
        print(f"{name:26} {ranks:5} {coll:>9} {loss_err:12.2e} {param_err:13.2e}  {'ok' if ok else 'FAIL: ' + problem}",
              flush=True)
    print(f"gpu plans: {len(plans) - failed} passed, {failed} failed")
    if a.trace_dir:
        art = os.path.join(a.dir, TRACE_PLAN[0] + ".dtc")
        stats = os.path.join(work, "trace-dp2-stats.json")
        code, _, _, err = dtc_run(a, art, 2, a.device_backend, work, "trace-dp2",
                                  ["--trace", a.trace_dir, "--stats", stats],
                                  collectives="local" if a.device_backend == "cuda" else None)
        if code:
            print(f"trace run failed: {err}")
            failed += 1
        else:
            # The trace-event format and the run's own counts (test/e2e/lib/check_trace.py).
            # On the GPU, also the buckets' overlap with the backward.
            check = [sys.executable, os.path.join(ROOT, "test", "e2e", "lib", "check_trace.py"), a.trace_dir,
                     "--ranks", "2", "--steps", str(a.steps), "--stats", stats] + \
                (["--overlap", "--min-overlap", str(TRACE_MIN_OVERLAP)] if a.device_backend == "cuda" else [])
            ccode, cout, cerr = run(check)
            for line in (cout + cerr).strip().splitlines():
                if "bucket reductions" in line or "PROBLEM" in line:
                    print("  " + line)
            print(f"trace format, counts and overlap: {'ok' if ccode == 0 else 'FAIL'}: "
                  f"{(cout + cerr).strip().splitlines()[-1]}")
            failed += ccode != 0
            total, covered, n = trace_overlap(a.trace_dir)
            print(f"trace ({TRACE_PLAN[0]}, rank 0, files in {a.trace_dir}): {n} collective events, "
                  f"{total * 1e3:.3f} ms in collectives, {covered * 1e3:.3f} ms of it overlapping kernels")
    return 1 if failed else 0


def plans_all(a):
    with open(os.path.join(a.dir, "plans.json")) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("prepare")
    pp.add_argument("--dtc", required=True)
    pp.add_argument("--out", required=True)
    pr = sub.add_parser("run")
    pr.add_argument("dir")
    pr.add_argument("--dtc-run", required=True)
    pr.add_argument("--steps", type=int, default=6)
    pr.add_argument("--only", default="")
    pr.add_argument("--work", default="")
    pr.add_argument("--trace-dir", default="")
    pr.add_argument("--device-backend", default="cuda",
                    help="backend of the plans' runs (cpu checks this driver itself without a GPU)")
    a = p.parse_args()
    if a.cmd == "prepare":
        prepare(a)
        return 0
    return run_all(a)


if __name__ == "__main__":
    sys.exit(main())
