#!/usr/bin/env python3
"""dtc beside its peers: the same GPT training step in dtc, PyTorch eager,
torch.compile and JAX, on the same cores, interleaved; tokens/s per system
and the ratio dtc / peer.

  bench/peers_bench.py [--sizes small,big] [--reps 5] [--threads 1]
                       [--systems dtc,torch,torch-compile,jax]
                       [--venv DIR] [--install]

Sizes (GPT of examples/gen_model.py: learned positions, pre-LayerNorm, tanh
GELU MLP of 4x width, tied output embedding, no biases; cross-entropy; Adam
lr 1e-3, betas 0.9/0.999, eps 1e-8; f32):
  small  2 layers, hidden 128, 4 heads, seq 128, batch 16, vocab 256
  big    4 layers, hidden 512, 8 heads, seq 256, batch 16, vocab 256

Each repetition runs every system once, in turn, as a fresh process pinned
to the same cores (--threads of them) with its thread pools set to that many
threads; a process times --steps steps after --warmup steps (compilation
and warm-up excluded) and reports its median step. The table shows, per
system, the median over repetitions of tokens/s, and dtc's ratio to each
peer (> 1: dtc is faster), also for the best run of each ("of max":
less sensitive to other work on the machine). A second table divides by
CPU time instead of wall time (the process and its threads; for dtc the
difference between a run with and one without the timed steps): on a
machine shared with other work it moves much less than wall time. Peer models are written here to compute the
same step as the dtc model: same shapes, ops, loss and optimizer (weights
are initialised differently, which does not change the work).

The peers come from PyPI into a virtual environment (--venv, default
.venv-peers in the checkout): `--install` creates it and installs torch,
jax and numpy; without it, systems whose packages are missing are skipped
with a note. Nothing is installed unless asked.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SIZES = {
    "small": dict(layers=2, hidden=128, heads=4, seq=128, batch=16, vocab=256),
    "big": dict(layers=4, hidden=512, heads=8, seq=256, batch=16, vocab=256),
}
PEERS = ("torch", "torch-compile", "jax")


# ---- the peers (run inside the venv as `peers_bench.py --worker SYSTEM`) -------

def worker_torch(cfg, compiled, steps, warmup):
    import math
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    B, S, D, H, V, L = (cfg[k] for k in ("batch", "seq", "hidden", "heads", "vocab", "layers"))
    Dh = D // H

    def param(*shape, std=0.02):
        return torch.nn.Parameter(torch.randn(*shape) * std)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = torch.nn.LayerNorm(D, eps=1e-5)
            self.ln_2 = torch.nn.LayerNorm(D, eps=1e-5)
            std_out = 0.02 / math.sqrt(2 * L)
            self.wq, self.wk, self.wv = param(D, D), param(D, D), param(D, D)
            self.wo = param(D, D, std=std_out)
            self.c_fc, self.c_proj = param(D, 4 * D), param(4 * D, D, std=std_out)

        def forward(self, x):
            h = self.ln_1(x)
            q, k, v = ((h @ w).view(B, S, H, Dh).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + y.transpose(1, 2).reshape(B, S, D) @ self.wo
            h = self.ln_2(x)
            return x + F.gelu(h @ self.c_fc, approximate="tanh") @ self.c_proj

    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = param(V, D), param(S, D, std=0.01)
            self.h = torch.nn.ModuleList(Block() for _ in range(L))
            self.ln_f = torch.nn.LayerNorm(D, eps=1e-5)

        def forward(self, ids, labels):
            x = self.wte[ids] + self.wpe
            for block in self.h:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.t()
            return F.cross_entropy(logits.view(-1, V), labels.view(-1))

    model = GPT()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    run = torch.compile(model) if compiled else model
    gen = torch.Generator().manual_seed(1)

    def step():
        ids = torch.randint(0, V, (B, S), generator=gen)
        labels = torch.randint(0, V, (B, S), generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = run(ids, labels)
        loss.backward()
        opt.step()
        return loss.item()

    return timed(step, steps, warmup)


def worker_jax(cfg, steps, warmup):
    import math
    import jax
    import jax.numpy as jnp

    B, S, D, H, V, L = (cfg[k] for k in ("batch", "seq", "hidden", "heads", "vocab", "layers"))
    Dh = D // H
    key = jax.random.PRNGKey(0)

    def normal(shape, std):
        nonlocal key
        key, sub = jax.random.split(key)
        return jax.random.normal(sub, shape, jnp.float32) * std

    std_out = 0.02 / math.sqrt(2 * L)
    params = {
        "wte": normal((V, D), 0.02), "wpe": normal((S, D), 0.01),
        "ln_f": (jnp.ones(D), jnp.zeros(D)),
        "h": [{
            "ln_1": (jnp.ones(D), jnp.zeros(D)), "ln_2": (jnp.ones(D), jnp.zeros(D)),
            "wq": normal((D, D), 0.02), "wk": normal((D, D), 0.02), "wv": normal((D, D), 0.02),
            "wo": normal((D, D), std_out),
            "c_fc": normal((D, 4 * D), 0.02), "c_proj": normal((4 * D, D), std_out),
        } for _ in range(L)],
    }

    def layer_norm(x, gb):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * gb[0] + gb[1]

    def loss_fn(p, ids, labels):
        x = p["wte"][ids] + p["wpe"]
        for b in p["h"]:
            h = layer_norm(x, b["ln_1"])
            q, k, v = ((h @ b[w]).reshape(B, S, H, Dh) for w in ("wq", "wk", "wv"))
            y = jax.nn.dot_product_attention(q, k, v, is_causal=True)  # [B, S, H, Dh]
            x = x + y.reshape(B, S, D) @ b["wo"]
            h = layer_norm(x, b["ln_2"])
            x = x + jax.nn.gelu(h @ b["c_fc"], approximate=True) @ b["c_proj"]
        logits = layer_norm(x, p["ln_f"]) @ p["wte"].T
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.take_along_axis(logp, labels[..., None], axis=-1).mean()

    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 1e-3

    @jax.jit
    def train_step(p, m, v, t, ids, labels):
        loss, g = jax.value_and_grad(loss_fn)(p, ids, labels)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        p = jax.tree_util.tree_map(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps),
                                   p, m, v)
        return p, m, v, t, loss

    state = [params, jax.tree_util.tree_map(jnp.zeros_like, params),
             jax.tree_util.tree_map(jnp.zeros_like, params), jnp.float32(0)]
    rng = [jax.random.PRNGKey(1)]

    def step():
        rng[0], a, b = jax.random.split(rng[0], 3)
        ids = jax.random.randint(a, (B, S), 0, V)
        labels = jax.random.randint(b, (B, S), 0, V)
        *new_state, loss = train_step(*state, ids, labels)
        state[:] = new_state
        return float(loss)

    return timed(step, steps, warmup)


def timed(step, steps, warmup):
    for _ in range(warmup):
        step()
    times = []
    cpu0 = time.process_time()
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    cpu = (time.process_time() - cpu0) / steps
    return {"step_s": statistics.median(times), "cpu_s": cpu, "loss": loss}


def worker_main(a):
    cfg = SIZES[a.size]
    if a.worker == "jax":
        r = worker_jax(cfg, a.steps, a.warmup)
    else:
        import torch
        torch.set_num_threads(a.threads)
        torch.set_num_interop_threads(1)
        r = worker_torch(cfg, a.worker == "torch-compile", a.steps, a.warmup)
    print("RESULT " + json.dumps(r), flush=True)
    return 0


# ---- the driver ---------------------------------------------------------------

def thread_env(threads):
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    # One intra-op thread for XLA's CPU backend (Eigen pool and its own).
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                        f"intra_op_parallelism_threads={threads}").strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def sh(cmd, env=None, cores=None):
    if cores:
        cmd = ["taskset", "-c", cores] + cmd
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if p.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout[-4000:]}")
    return p.stdout


def venv_python(venv):
    return os.path.join(venv, "bin", "python")


def install(venv):
    if not os.path.exists(venv_python(venv)):
        sh([sys.executable, "-m", "venv", venv])
    sh([venv_python(venv), "-m", "pip", "install", "-q", "torch", "jax", "jaxlib", "numpy"])


def available(venv, system):
    if not os.path.exists(venv_python(venv)):
        return False
    module = "jax" if system == "jax" else "torch"
    return subprocess.run([venv_python(venv), "-c", f"import {module}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_dtc(a, dtc, art, tokens, cores, env):
    """Median wall time of a step, and CPU time per step: the difference
    between a run of warm-up + timed steps and one of warm-up steps only."""
    threads = ["--threads", str(a.threads)] if dtc == a.dtc else []  # a baseline may predate it
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        cpu = []
        for n in (a.warmup, a.warmup + a.steps):
            c0 = children_cpu()
            sh([dtc, "run", art, "--steps", str(n), "--data", tokens, *threads, "--log", log],
               env=env, cores=cores)
            cpu.append(children_cpu() - c0)
        steps = [json.loads(line) for line in open(log)][a.warmup:]
    return statistics.median(s["step_time_s"] for s in steps), max(cpu[1] - cpu[0], 1e-9) / a.steps


def run_peer(a, system, size, cores, env):
    out = sh([venv_python(a.venv), os.path.abspath(__file__), "--worker", system, "--size", size,
              "--steps", str(a.steps), "--warmup", str(a.warmup), "--threads", str(a.threads)],
             env=env, cores=cores)
    line = [l for l in out.splitlines() if l.startswith("RESULT ")][-1]
    r = json.loads(line[len("RESULT "):])
    return r["step_s"], r["cpu_s"]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="small,big")
    p.add_argument("--systems", default="dtc," + ",".join(PEERS))
    p.add_argument("--reps", type=int, default=5, help="interleaved repetitions (default 5)")
    p.add_argument("--steps", type=int, default=0, help="timed steps per run (default: 20 small, 5 big)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--threads", type=int, default=1, help="cores (and threads) per system (default 1)")
    p.add_argument("--cores", default="", help="taskset core list (default: the first --threads "
                   "cores this process may use)")
    p.add_argument("--venv", default=os.path.join(ROOT, ".venv-peers"))
    p.add_argument("--install", action="store_true", help="create --venv and pip install the peers")
    p.add_argument("--dtc", default=os.path.join(ROOT, "build", "bin", "dtc"))
    p.add_argument("--baseline", help="another build's dtc, run as system dtc-baseline "
                   "(on the artifact it compiles itself; threads from the environment)")
    p.add_argument("--worker", choices=PEERS, help=argparse.SUPPRESS)
    p.add_argument("--size", choices=sorted(SIZES), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return worker_main(a)

    systems = [s for s in a.systems.split(",") if s]
    if a.baseline:
        systems.append("dtc-baseline")
    for s in systems:
        if s not in ("dtc", "dtc-baseline") and s not in PEERS:
            p.error(f"unknown system {s} (expected dtc, {', '.join(PEERS)})")
    if a.install:
        install(a.venv)
    for s in [s for s in systems if s not in ("dtc", "dtc-baseline")]:
        if not available(a.venv, s):
            print(f"note: skipping {s}: not installed in {a.venv} (run with --install)")
            systems.remove(s)
    cores = a.cores or ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:a.threads])
    env = thread_env(a.threads)

    work = tempfile.mkdtemp(prefix="dtc-peers-")
    tokens = os.path.join(work, "tokens")
    sh([sys.executable, os.path.join(ROOT, "examples", "char_tokens.py"),
        "/usr/share/common-licenses/GPL-3", "-o", tokens])
    print(f"{a.threads} thread(s) per system on cores {cores}; {a.reps} interleaved repetitions; "
          f"median step of each run, median tokens/s over runs\n")
    for size in a.sizes.split(","):
        cfg = SIZES[size]
        steps = a.steps or (20 if size == "small" else 5)
        a_steps = argparse.Namespace(**{**vars(a), "steps": steps})
        model, art = os.path.join(work, f"{size}.mlir"), os.path.join(work, f"{size}.dtc")
        base_art = os.path.join(work, f"{size}.baseline.dtc")
        if "dtc" in systems or a.baseline:
            sh([sys.executable, os.path.join(ROOT, "examples", "gen_model.py"), "gpt",
                *[x for k, v in cfg.items() for x in (f"--{k}", str(v))], "-o", model])
        if "dtc" in systems:
            sh([a.dtc, "compile", model, "--mesh", "1", "--strategy", "dp=1", "-o", art])
        if a.baseline:
            sh([a.baseline, "compile", model, "--mesh", "1", "-o", base_art])
        tokens_per_step = cfg["batch"] * cfg["seq"]
        tps = {s: [] for s in systems}
        cpu_tps = {s: [] for s in systems}
        for rep in range(a.reps):
            for s in systems:
                if s == "dtc":
                    t, c = run_dtc(a_steps, a.dtc, art, tokens, cores, env)
                elif s == "dtc-baseline":
                    t, c = run_dtc(a_steps, a.baseline, base_art, tokens, cores, env)
                else:
                    t, c = run_peer(a_steps, s, size, cores, env)
                tps[s].append(tokens_per_step / t)
                cpu_tps[s].append(tokens_per_step / c)
        desc = ", ".join(f"{k} {v}" for k, v in cfg.items())
        print(f"{size}: GPT {desc}; {steps} timed steps per run")
        for title, table in (("wall clock", tps), ("per CPU second (all threads)", cpu_tps)):
            print(f"  tokens/s, {title}:")
            print(f"  {'system':<14} {'median':>10} {'min':>8} {'max':>8}"
                  f" {'dtc/system':>11} {'(of max)':>9}   runs")
            med = {s: statistics.median(v) for s, v in table.items()}
            for s in systems:
                ratio = f"{med['dtc'] / med[s]:.2f}x" if "dtc" in med else "n/a"
                best = f"{max(table['dtc']) / max(table[s]):.2f}x" if "dtc" in med else "n/a"
                runs = " ".join(f"{t:.0f}" for t in table[s])
                print(f"  {s:<14} {med[s]:>10.0f} {min(table[s]):>8.0f} {max(table[s]):>8.0f}"
                      f" {ratio:>11} {best:>9}   {runs}")
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
