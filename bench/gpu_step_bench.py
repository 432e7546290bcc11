#!/usr/bin/env python3
"""dtc's CUDA training step beside cuBLAS and PyTorch on the same GPU: a GPT
layer of a 1.3B-class model in bf16, its achieved TFLOP/s and MFU.

  bench/gpu_step_bench.py prepare OUTDIR [--layers 2] [--batch 4] ...   (here: needs dtc compile)
  bench/gpu_step_bench.py run OUTDIR --dtc-run PATH [--gemm-rate PATH]   (on the GPU machine)
                          [--steps 20] [--warmup 3] [--torch] [--torch-variants autocast,compile]
                          [--json OUT.json]

prepare writes, with examples/gen_model.py and `dtc compile --mesh 1
--precision bf16-mixed --optimizer adamw --hw h100 --attention-stats keep`:
  OUTDIR/gpt-bench.mlir         the model (GPT-3 XL / 1.3B shapes: hidden 2048, 16 heads
                                of 128, ffn 8192, seq 2048, vocab 50304; --layers of them)
  OUTDIR/gpt-bench.dtc          the artifact (parameters are initialised at run time)
  OUTDIR/gpt-bench.report.json  the plan report
  OUTDIR/gpt-bench.json         the configuration, parameter counts, model FLOPs and the
                                step's GEMMs (shapes, transposes, calls) read from the artifact
Everything `run` needs is in OUTDIR: copy it to the GPU machine with the
repository. Nothing there needs MLIR.

run (each part reports its failure and the others go on):
  1. dtc: `DTC_RUN OUTDIR/gpt-bench.dtc --steps W+N --backend cuda --local-ranks 1
     --log ... --stats ...` (--local-ranks only when the dtc-run has it); the median of
     step_time_s over the steps after the W warm-up ones (a step ends when its loss is
     on the host); from --stats the executed kernel FLOPs, the kernel time, and each
     matmul shape's rate. If dtc-run fails before its timed steps, it runs once more
     without --stats. --dtc-timeout (120 s) bounds each run.
  2. cuBLAS: the cuda_gemm_rate program (bench/cuda_gemm_rate.cu; --gemm-rate PATH, else
     built here with nvcc into OUTDIR, else torch.matmul, which is cuBLAS too) on 8192^3
     and on every GEMM shape of the step; their FLOP-weighted rate is the rate of the
     step's GEMMs at cuBLAS's speed.
  3. PyTorch (--torch): bench/torch_gpt_step.py, the same model and step, per variant
     (autocast = torch.autocast(bfloat16) with f32 parameters and fused AdamW, the usual
     mixed precision; bf16-master = dtc's scheme; compile = autocast + torch.compile),
     each a process of its own (--python, default this one) bounded by --timeout (120 s).
SIGTERM (a `timeout` around the script) stops the measuring and prints what finished.
Outputs beside the artifact: dtc-log.jsonl, dtc-stats.json, dtc-run.out, torch-*.json,
torch-*.out, and with --json every number printed.
Then one table: step time, TFLOP/s, MFU against the device's dense bf16 peak (by its
name: H100 SXM / H200 / GH200 989.4, H100 NVL 835, H100 PCIe 756, A100 312 TFLOP/s;
--peak-tflops overrides), dtc / peer.

Model FLOPs per step (the same for every system; T = batch*seq tokens, L layers,
D hidden, F ffn, V vocab, S seq, B batch):
  6 * T * (L * (4 D^2 + 2 D F) + V D)   matmul weights, forward + backward (2 + 4 per
                                         multiply-add), the tied LM head included
  + 6 * L * B * S^2 * D                 causal attention: q k^T and p v, forward and
                                         backward, the executed (lower) half of S^2
Norms, GELU, softmax, the loss, embedding lookups and the optimizer are not counted.
The usual full-attention count (PaLM's 12 L B S^2 D) is in the JSON as
model_flops_full_attention. dtc's --stats counts what its kernels execute instead
(attention: the diagonal too, and 10 Dh per pair backward since it recomputes the
probabilities); both are printed.
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))

# GPT-3 XL (1.3B): 24 layers of these; the benchmark runs --layers of them.
MODEL_DEFAULTS = dict(layers=2, hidden=2048, heads=16, seq=2048, vocab=50304, batch=4, ffn=0)

# Dense bf16 tensor-core peaks, TFLOP/s (NVIDIA data sheets, without sparsity).
PEAKS = [  # (substring of the device name, peak, what it is) -- first match wins
    ("GH200", 989.4, "GH200 (H100 SXM compute)"),
    ("H200", 989.4, "H200"),
    ("H100 NVL", 835.0, "H100 NVL"),
    ("H100 PCIE", 756.0, "H100 PCIe"),
    ("H100", 989.4, "H100 SXM"),
    ("H800", 989.4, "H800 SXM"),
    ("A100", 312.0, "A100"),
    ("A800", 312.0, "A800"),
    ("L40S", 362.05, "L40S"),
]


def model_flops(cfg):
    """Model FLOPs of one training step (docstring above). Standard library only:
    bench/torch_gpt_step.py uses it too."""
    B, S, D, L, V = (int(cfg[k]) for k in ("batch", "seq", "hidden", "layers", "vocab"))
    F = int(cfg.get("ffn") or 4 * D)
    T = B * S
    matmul_weights = L * (4 * D * D + 2 * D * F) + V * D
    matmul = 6 * T * matmul_weights
    attention = 6 * L * B * S * S * D
    return {"total": matmul + attention, "matmul": matmul, "attention": attention,
            "matmul_weights": matmul_weights, "tokens": T,
            "full_attention_total": matmul + 2 * attention}


def param_counts(cfg):
    D, L, V, S = (int(cfg[k]) for k in ("hidden", "layers", "vocab", "seq"))
    F = int(cfg.get("ffn") or 4 * D)
    per_layer = 4 * D * D + 2 * D * F + 4 * D + ((4 * D + F) if cfg.get("bias") else 0)
    total = V * D + S * D + L * per_layer + 2 * D
    return {"params": total, "params_nonembedding": total - V * D - S * D,
            "params_per_layer": per_layer}


# ---- prepare -------------------------------------------------------------------

def sh(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if p.returncode:
        sys.exit(f"gpu_step_bench: failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stdout[-4000:]}")
    return p.stdout


def gemm_key(a_shape, b_shape, ta, tb):
    """(batch, m, n, k, layout) of dtc's matmul on local shapes a, b (docs/kernels.md):
    a [..., M, K] ([..., K, M] with ta), b [..., K, N] ([..., N, K] with tb); batch
    dims broadcast; a's batch dims fold into M when b has none and a is not
    transposed (one GEMM, as a backend would run it)."""
    a, b = list(a_shape), list(b_shape)
    m, k = (a[-1], a[-2]) if ta else (a[-2], a[-1])
    n = b[-2] if tb else b[-1]
    ab, bb = a[:-2], b[:-2]
    n_b = 1
    for x in bb:
        n_b *= x
    n_a = 1
    for x in ab:
        n_a *= x
    if n_b == 1 and not ta:
        return 1, m * n_a, n, k, ("T" if ta else "N") + ("T" if tb else "N")
    nd = max(len(ab), len(bb))
    ab, bb = [1] * (nd - len(ab)) + ab, [1] * (nd - len(bb)) + bb
    batch = 1
    for x, y in zip(ab, bb):
        batch *= max(x, y)
    return batch, m, n, k, ("T" if ta else "N") + ("T" if tb else "N")


def artifact_gemms(dtc, art):
    """The step's GEMMs from `dtc inspect`: one entry per distinct (op, shape,
    layout) with its calls per step."""
    info = json.loads(sh([dtc, "inspect", art]))
    gemms, params = {}, 0
    for t in info.get("tensors", []):
        if t.get("role") == "param":
            n = 1
            for x in t["shape"]:
                n *= x
            params += n
    for prog in info["programs"][:1]:
        buffers = {i: b for i, b in enumerate(prog["buffers"])}
        by_id = {b.get("id", i): b for i, b in buffers.items()}
        for ins in prog["instructions"]:
            op = ins["op"]
            if op not in ("matmul", "matmul_bias", "matmul_gelu"):
                continue
            attrs = ins.get("attrs", {})
            a, b = by_id[ins["in"][0]], by_id[ins["in"][1]]
            batch, m, n, k, layout = gemm_key(a["shape"], b["shape"], attrs.get("transpose_a", False),
                                              attrs.get("transpose_b", False))
            key = (op, batch, m, n, k, layout, ins.get("phase", ""))
            gemms[key] = gemms.get(key, 0) + 1
    out = [{"op": op, "batch": batch, "m": m, "n": n, "k": k, "layout": layout, "phase": phase,
            "calls": c, "flops": 2 * batch * m * n * k * c}
           for (op, batch, m, n, k, layout, phase), c in gemms.items()]
    out.sort(key=lambda g: -g["flops"])
    return out, params, info


def cmd_prepare(a):
    out = os.path.abspath(a.outdir)
    os.makedirs(out, exist_ok=True)
    dtc = a.dtc
    if not os.path.exists(dtc):
        sys.exit(f"gpu_step_bench: no dtc at {dtc} (build it, or pass --dtc)")
    cfg = {k: getattr(a, k) for k in MODEL_DEFAULTS}
    cfg["bias"] = a.bias
    cfg["ffn"] = cfg["ffn"] or 4 * cfg["hidden"]
    if cfg["hidden"] % cfg["heads"]:
        sys.exit("gpu_step_bench: --hidden must be a multiple of --heads")
    model = os.path.join(out, "gpt-bench.mlir")
    art = os.path.join(out, "gpt-bench.dtc")
    report = os.path.join(out, "gpt-bench.report.json")
    gen = [sys.executable, os.path.join(ROOT, "examples", "gen_model.py"), "gpt",
           *[x for k in ("layers", "hidden", "heads", "seq", "vocab", "batch", "ffn")
             for x in (f"--{k}", str(cfg[k]))], *(["--bias"] if a.bias else []), "-o", model]
    sh(gen)
    compile_cmd = [dtc, "compile", model, "--mesh", "1", "--strategy", "dp=1", "--precision", a.precision,
                   "--optimizer", "adamw", "--lr", repr(a.lr), "--weight-decay", repr(a.weight_decay),
                   "--hw", a.hw, "--attention-stats", a.attention_stats, "--report", report, "-o", art]
    if a.device_memory:
        compile_cmd += ["--device-memory", a.device_memory]
    compile_cmd += a.compile_arg
    t0 = time.perf_counter()
    sh(compile_cmd)
    compile_s = time.perf_counter() - t0
    gemms, artifact_params, info = artifact_gemms(dtc, art)
    counts = param_counts(cfg)
    if artifact_params != counts["params"]:
        print(f"note: the artifact has {artifact_params} parameters, the formula "
              f"{counts['params']}", file=sys.stderr)
    with open(report) as f:
        rep = json.load(f)
    opt = info.get("optimizer", {})
    flops = model_flops(cfg)
    conf = {
        "model": cfg,
        "optimizer": {"kind": opt.get("kind", "adamw"), "lr": opt.get("lr", a.lr),
                      "beta1": opt.get("beta1", 0.9), "beta2": opt.get("beta2", 0.999),
                      "eps": opt.get("eps", 1e-8), "weight_decay": opt.get("weight_decay", a.weight_decay)},
        "precision": a.precision,
        "params": artifact_params, **{k: v for k, v in counts.items() if k != "params"},
        "model_flops_per_step": flops["total"],
        "model_flops_matmul": flops["matmul"],
        "model_flops_attention": flops["attention"],
        "model_flops_full_attention": flops["full_attention_total"],
        "tokens_per_step": flops["tokens"],
        "flop_formula": "6*T*(L*(4*D^2 + 2*D*F) + V*D) + 6*L*B*S^2*D (causal half), T = B*S",
        "gemms": gemms,
        "artifact": os.path.basename(art),
        "artifact_bytes": os.path.getsize(art),
        "compile_command": " ".join(compile_cmd),
        "compile_s": compile_s,
        "compiler_predicted": rep.get("predicted", {}),
        "compiler_memory_bytes": rep.get("memory_bytes", {}),
        "producer": info.get("producer"),
    }
    with open(os.path.join(out, "gpt-bench.json"), "w") as f:
        json.dump(conf, f, indent=1)
    mem = rep.get("memory_bytes", {}).get("peak_per_device", 0)
    print(f"GPT: {cfg['layers']} layers, hidden {cfg['hidden']}, {cfg['heads']} heads of "
          f"{cfg['hidden'] // cfg['heads']}, ffn {cfg['ffn']}, seq {cfg['seq']}, vocab "
          f"{cfg['vocab']}, batch {cfg['batch']}; {artifact_params / 1e6:.1f}M parameters "
          f"({counts['params_nonembedding'] / 1e6:.1f}M outside the embeddings)")
    print(f"{a.precision}, AdamW; model FLOPs per step {flops['total'] / 1e12:.3f} T "
          f"({len(gemms)} distinct GEMMs, {sum(g['calls'] for g in gemms)} calls); "
          f"planned peak memory {mem / 2**30:.2f} GiB")
    print(f"wrote {art} ({os.path.getsize(art)} bytes, compiled in {compile_s:.2f} s) and "
          f"{os.path.join(out, 'gpt-bench.json')}")
    return 0


# ---- run -----------------------------------------------------------------------

class Stopped(BaseException):
    """SIGTERM (e.g. `timeout` around this script): stop measuring, print what we have."""


def on_sigterm(signum, frame):
    raise Stopped()


def note(msg):
    print(f"note: {msg}", flush=True)


def device_name(python):
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.strip().splitlines()[0].strip(), "nvidia-smi"
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        p = subprocess.run([python, "-c", "import torch; print(torch.cuda.get_device_name(0))"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=120)
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.strip().splitlines()[-1], "torch"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return None, None


def peak_for(name):
    if not name:
        return None, None
    up = name.upper()
    for key, peak, what in PEAKS:
        if key in up:
            return peak, what
    return None, None


def run_logged(cmd, log_path, timeout, env=None):
    """Runs cmd, its output to log_path and, by line, to our stdout; returns
    (exit code, output); a timeout is exit code 124."""
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        try:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        except OSError as e:
            log.write(str(e) + "\n")
            return 127, str(e)
        lines = []
        try:
            deadline = time.monotonic() + timeout
            for line in p.stdout:
                lines.append(line)
                log.write(line)
                if not line.startswith(("step ", "json: ", "RESULT ")):
                    print("    " + line.rstrip(), flush=True)
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(cmd, timeout)
            rc = p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            log.write(f"killed after {timeout} s\n")
            return 124, "".join(lines)
        except BaseException:
            p.kill()
            p.wait()
            raise
    return rc, "".join(lines)


def parse_kernel_name(name):
    """'matmul 4x2048x2048 * 2048x2048 transpose_b bf16 bf16' -> ('matmul',
    [[4,2048,2048],[2048,2048]], {'transpose_b'})."""
    toks = name.split()
    if not toks:
        return None, [], set()
    shapes, flags = [], set()
    for t in toks[1:]:
        if re.fullmatch(r"\d+(x\d+)*", t):
            shapes.append([int(x) for x in t.split("x")])
        elif t in ("transpose_a", "transpose_b", "causal"):
            flags.add(t)
    return toks[0], shapes, flags


def dtc_part(a, conf, outdir, res):
    art = os.path.join(outdir, conf.get("artifact", "gpt-bench.dtc"))
    log = os.path.join(outdir, "dtc-log.jsonl")
    stats = os.path.join(outdir, "dtc-stats.json")
    for f in (log, stats):
        if os.path.exists(f):
            os.remove(f)
    cmd = [a.dtc_run, art, "--steps", str(a.warmup + a.steps), "--backend", a.backend,
           "--log", log, "--stats", stats]
    local = a.local_ranks
    if local == "auto":
        try:
            h = subprocess.run([a.dtc_run, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=60).stdout
            local = "1" if "--local-ranks" in h else "no"
        except (OSError, subprocess.TimeoutExpired):
            local = "1"
    if local != "no":
        cmd += ["--local-ranks", local]
    cmd += a.dtc_arg
    def attempt(cmd, out_name):
        print(f"[dtc] {' '.join(cmd)}", flush=True)
        if os.path.exists(log):
            os.remove(log)
        t0 = time.perf_counter()
        rc, out = run_logged(cmd, os.path.join(outdir, out_name), a.dtc_timeout)
        res["dtc_command"] = " ".join(cmd)
        res["dtc_wall_s"] = time.perf_counter() - t0
        steps = []
        if os.path.exists(log):
            with open(log) as f:
                for line in f:
                    try:
                        steps.append(json.loads(line))
                    except ValueError:
                        pass
        why = None
        if rc != 0:
            last = out.strip().splitlines()[-1] if out.strip() else "(none)"
            why = (f"dtc-run exited {rc}" + (" (timed out)" if rc == 124 else "") +
                   f"; last output: {last} (all of it in {os.path.join(outdir, out_name)})")
        return rc, steps, why

    rc, steps, why = attempt(cmd, "dtc-run.out")
    if rc != 0 and len(steps) <= a.warmup and rc != 124:
        # --stats may be what a new backend cannot do yet: the step time needs only --log.
        print(f"[dtc] FAILED: {why}; once more without --stats", flush=True)
        res["dtc_first_failure"] = why
        i = cmd.index("--stats")
        rc, steps, why = attempt(cmd[:i] + cmd[i + 2:], "dtc-run-nostats.out")
    if rc != 0:
        if len(steps) <= a.warmup:
            raise RuntimeError(why)
        note(f"dtc: {why}; using the {len(steps)} steps its log has")
        res["errors"]["dtc (after its steps)"] = why
    timed = [s for s in steps[a.warmup:] if s.get("step_time_s") is not None]
    if not timed:
        raise RuntimeError(f"dtc-run wrote no timed steps to {log}")
    t = statistics.median(s["step_time_s"] for s in timed)
    losses = [s.get("loss") for s in steps]
    d = {"step_s": t, "step_s_min": min(s["step_time_s"] for s in timed),
         "step_times_s": [s["step_time_s"] for s in steps], "losses": losses,
         "first_step_s": steps[0].get("step_time_s") if steps else None}
    if any(x is None for x in losses):
        note("dtc: a loss is not finite (null in the log): the timing stands, the numbers do not")
    if os.path.exists(stats):
        with open(stats) as f:
            st = json.load(f)
        d["backend"] = st.get("backend")
        d["backend_properties"] = {k: v for k, v in st.items() if isinstance(v, (str, int, float))
                                   and k not in ("devices", "threads", "activation_peak_bytes")}
        kernels = st.get("kernels", [])
        d["kernel_s_per_step"] = sum(k.get("seconds_per_step", 0.0) for k in kernels)
        d["executed_flops_per_step"] = sum(k["gflops"] * 1e9 * k["seconds_per_step"] for k in kernels
                                           if k.get("gflops") is not None and k.get("seconds_per_step"))
        d["memory_total_bytes"] = st.get("allocated_bytes", {}).get("total")
        d["seconds_per_step_by_op"] = st.get("seconds_per_step_by_op", {})
        per_shape = {}
        for k in kernels:
            op, shapes, flags = parse_kernel_name(k.get("kernel", ""))
            if op in ("matmul", "matmul_bias", "matmul_gelu") and len(shapes) >= 2 and k.get("gflops"):
                key = gemm_key(shapes[0], shapes[1], "transpose_a" in flags, "transpose_b" in flags)
                e = per_shape.setdefault(key, {"s": 0.0, "flops": 0.0, "calls": 0.0, "ops": set()})
                e["s"] += k["seconds_per_step"]
                e["flops"] += k["gflops"] * 1e9 * k["seconds_per_step"]
                e["calls"] += k.get("calls_per_step", 0)
                e["ops"].add(op)
        d["matmul_by_shape"] = {"%dx%dx%dx%d %s" % key: {"s_per_step": e["s"], "flops_per_step": e["flops"],
                                                         "calls_per_step": e["calls"],
                                                         "ops": sorted(e["ops"])}
                                for key, e in per_shape.items()}
        d["top_kernels"] = sorted(kernels, key=lambda k: -k.get("seconds_per_step", 0))[:10]
    else:
        note(f"dtc: no --stats file at {stats}")
    return d


def find_nvcc():
    for c in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if c and os.path.exists(c):
            return c
    return None


def gemm_tool(a, outdir):
    if a.gemm_rate:
        if os.path.exists(a.gemm_rate):
            return a.gemm_rate, "given"
        note(f"cuBLAS: no program at --gemm-rate {a.gemm_rate}; building one")
    nvcc = find_nvcc()
    if not nvcc:
        return None, "no nvcc"
    exe = os.path.join(outdir, "cuda_gemm_rate")
    src = os.path.join(HERE, "cuda_gemm_rate.cu")
    # This machine's GPU (-arch=native), else Ampere and Hopper.
    for arch in (["-arch=native"], ["-gencode", "arch=compute_80,code=sm_80",
                                    "-gencode", "arch=compute_90,code=sm_90"]):
        cmd = [nvcc, "-std=c++17", "-O3", *arch, src, "-lcublasLt", "-o", exe]
        print(f"[cuBLAS] {' '.join(cmd)}", flush=True)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode == 0:
            return exe, "built with " + " ".join(cmd[:-3])
    return None, f"nvcc failed: {p.stdout.strip()[-500:]}"


TORCH_GEMM = r"""
import json, statistics, sys, torch
m, n, k, layout, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.rand((k, m) if layout[0] == "T" else (m, k), device="cuda", dtype=torch.bfloat16) * 2 - 1
b = torch.rand((n, k) if layout[1] == "T" else (k, n), device="cuda", dtype=torch.bfloat16) * 2 - 1
A = a.t() if layout[0] == "T" else a
B = b.t() if layout[1] == "T" else b
for _ in range(5): A @ B
torch.cuda.synchronize()
ts = []
for _ in range(reps):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record(); A @ B; e1.record(); e1.synchronize(); ts.append(e0.elapsed_time(e1))
ms = statistics.median(ts)
print("json: " + json.dumps({"m": m, "n": n, "k": k, "layout": layout, "median_ms": ms,
      "tflops": 2 * m * n * k / (ms * 1e-3) / 1e12, "device": torch.cuda.get_device_name(0)}))
"""


def measure_gemm(tool, python, m, n, k, layout, reps):
    if tool:
        cmd = [tool, str(m), str(n), str(k), str(reps), layout]
    else:
        cmd = [python, "-c", TORCH_GEMM, str(m), str(n), str(k), layout, str(reps)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    lines = [l for l in p.stdout.splitlines() if l.startswith("json: ")]
    if p.returncode or not lines:
        raise RuntimeError(f"{' '.join(cmd[:1] if tool else cmd[:2])} {m}x{n}x{k} {layout} exited "
                           f"{p.returncode}: {p.stdout.strip()[-300:]}")
    return json.loads(lines[-1][len("json: "):])


def cublas_part(a, conf, outdir, res):
    tool, how = gemm_tool(a, outdir)
    if tool:
        d = {"source": f"cuda_gemm_rate (cuBLASLt; {how})", "tool": tool}
    else:
        note(f"cuBLAS: no cuda_gemm_rate ({how}); measuring with torch.matmul (cuBLAS too)")
        d = {"source": "torch.matmul (cuBLAS)"}
    big = measure_gemm(tool, a.python, 8192, 8192, 8192, "NN", a.gemm_reps)
    d["gemm_8192"] = big
    print(f"[cuBLAS] 8192^3 NN: {big['tflops']:.1f} TFLOP/s", flush=True)
    shapes = []
    total_flops = total_s = 0.0
    for g in conf.get("gemms", []):
        try:
            r = measure_gemm(tool, a.python, g["m"], g["n"], g["k"], g["layout"], a.gemm_reps)
        except Exception as e:  # noqa: BLE001
            note(f"cuBLAS {g['m']}x{g['n']}x{g['k']} {g['layout']}: {e}")
            continue
        s = r["median_ms"] * 1e-3 * g["batch"] * g["calls"]
        total_flops += g["flops"]
        total_s += s
        shapes.append({**g, "cublas_tflops": r["tflops"], "cublas_s_per_step": s})
    d["step_gemms"] = shapes
    if total_s > 0:
        d["step_gemms_tflops"] = total_flops / total_s / 1e12
        d["step_gemms_s"] = total_s
        d["step_gemms_flops"] = total_flops
    return d


TORCH_VARIANTS = ("autocast", "bf16-master", "compile", "f32")


def torch_part(a, conf_path, outdir, variant):
    out = os.path.join(outdir, f"torch-{variant}.json")
    if os.path.exists(out):
        os.remove(out)
    prec = "autocast" if variant == "compile" else variant
    cmd = [a.python, os.path.join(HERE, "torch_gpt_step.py"), "--config", conf_path,
           "--precision", prec, "--steps", str(a.torch_steps), "--warmup",
           str(a.torch_warmup + (3 if variant == "compile" else 0)), "--json", out,
           "--device", a.torch_device]
    if variant == "compile":
        cmd.append("--compile")
    print(f"[torch {variant}] {' '.join(cmd)}", flush=True)
    rc, text = run_logged(cmd, os.path.join(outdir, f"torch-{variant}.out"), a.timeout)
    if rc != 0 or not os.path.exists(out):
        tail = text.strip().splitlines()[-1] if text.strip() else "(no output)"
        raise RuntimeError(f"exited {rc}" + (" (timed out)" if rc == 124 else "") + f": {tail}")
    with open(out) as f:
        return json.load(f)


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def cmd_run(a):
    outdir = os.path.abspath(a.outdir)
    conf_path = os.path.join(outdir, "gpt-bench.json")
    with open(conf_path) as f:
        conf = json.load(f)
    cfg = conf["model"]
    flops = model_flops(cfg)
    F_model = flops["total"]
    res = {"config": conf_path, "model": cfg, "params": conf.get("params"),
           "model_flops_per_step": F_model, "model_flops_full_attention": flops["full_attention_total"],
           "flop_formula": conf.get("flop_formula"), "errors": {}}

    name, via = device_name(a.python)
    peak, what = peak_for(name)
    if a.peak_tflops:
        peak, what = a.peak_tflops, "given with --peak-tflops"
    res["device"], res["device_from"] = name, via
    res["peak_tflops"], res["peak_assumed"] = peak, what
    print(f"device: {name or 'unknown'}" + (f" (from {via})" if via else "") +
          (f"; dense bf16 peak assumed {peak} TFLOP/s ({what})" if peak else
           "; unknown peak (pass --peak-tflops): no MFU"), flush=True)

    parts = {}
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        measure(a, conf, conf_path, outdir, res, parts)
    except Stopped:
        res["errors"]["stopped"] = "SIGTERM before every part ran: the table has what finished"
        print("[stopped] SIGTERM: printing what finished", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    torch_variants = [v for v in a.torch_variants.split(",") if v] if a.torch else []
    print_table(a, conf, cfg, flops, res, parts, torch_variants, name, peak, what)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
        print(f"\nwrote {a.json}")
    return 0 if not res["errors"] else 1


def measure(a, conf, conf_path, outdir, res, parts):
    if "dtc" in a.parts:
        try:
            parts["dtc"] = dtc_part(a, conf, outdir, res)
        except Exception as e:  # noqa: BLE001
            res["errors"]["dtc"] = str(e)
            print(f"[dtc] FAILED: {e}", flush=True)
    if "cublas" in a.parts:
        try:
            parts["cublas"] = cublas_part(a, conf, outdir, res)
        except Exception as e:  # noqa: BLE001
            res["errors"]["cublas"] = str(e)
            print(f"[cuBLAS] FAILED: {e}", flush=True)
    torch_variants = [v for v in a.torch_variants.split(",") if v] if a.torch else []
    for v in torch_variants:
        try:
            parts[f"torch-{v}"] = torch_part(a, conf_path, outdir, v)
        except Exception as e:  # noqa: BLE001
            res["errors"][f"torch-{v}"] = str(e)
            print(f"[torch {v}] FAILED: {e}", flush=True)


def print_details(res, parts):
    """Per matmul shape (dtc beside cuBLAS) and dtc's longest kernels."""
    dtc, cb = parts.get("dtc"), parts.get("cublas")
    if not dtc:
        return
    if dtc.get("matmul_by_shape"):
        cub = {("%dx%dx%dx%d %s" % (g["batch"], g["m"], g["n"], g["k"], g["layout"])): g
               for g in (cb or {}).get("step_gemms", [])}
        print("\nmatmuls by shape (batch x M x N x K, row-major layout; dtc from --stats):")
        print(f"  {'shape':<30} {'calls':>5} {'dtc ms':>8} {'dtc TF/s':>9} {'cuBLAS TF/s':>12} {'dtc/cuBLAS':>11}")
        tot_d = tot_c = 0.0
        for key, e in sorted(dtc["matmul_by_shape"].items(), key=lambda kv: -kv[1]["s_per_step"]):
            tf = e["flops_per_step"] / e["s_per_step"] / 1e12 if e["s_per_step"] else None
            c = cub.get(key)
            ctf = c["cublas_tflops"] if c else None
            tot_d += e["s_per_step"]
            if c:
                tot_c += e["flops_per_step"] / (ctf * 1e12)
            print(f"  {key:<30} {e['calls_per_step']:>5.0f} {e['s_per_step'] * 1e3:>8.3f} "
                  f"{fmt(tf, '9.1f'):>9} {fmt(ctf, '12.1f'):>12} "
                  f"{fmt(tf / ctf if (tf and ctf) else None, '11.2f'):>11}  {'/'.join(e['ops'])}")
        if tot_c:
            print(f"  all matmuls: dtc {tot_d * 1e3:.2f} ms, at cuBLAS's rates {tot_c * 1e3:.2f} ms "
                  f"(dtc/cuBLAS speed {tot_c / tot_d:.2f}; dtc's times are means over all steps)")
            res["dtc_matmul_s"], res["cublas_matmul_s"] = tot_d, tot_c
    if dtc.get("top_kernels"):
        mean_all = statistics.mean(dtc["step_times_s"])
        print("\ndtc kernels that took longest (--stats, per step; share of the mean step):")
        for k in dtc["top_kernels"][:8]:
            share = k["seconds_per_step"] / mean_all * 100 if mean_all else 0
            gf = f"{k['gflops'] / 1e3:7.1f} TF/s" if k.get("gflops") else " " * 12
            print(f"  {k['seconds_per_step'] * 1e3:8.3f} ms {share:5.1f}% {gf} "
                  f"{k.get('calls_per_step', 0):4.0f}x {k['kernel'][:90]}")


def print_table(a, conf, cfg, flops, res, parts, torch_variants, name, peak, what):
    """The headline table, printed last (a log's tail shows it)."""
    res.update(parts)
    print_details(res, parts)
    F_model = flops["total"]
    B, S = cfg["batch"], cfg["seq"]
    dtc, cb = parts.get("dtc"), parts.get("cublas")
    print()
    print(f"GPT {cfg['layers']} layers x (hidden {cfg['hidden']}, {cfg['heads']} heads of "
          f"{cfg['hidden'] // cfg['heads']}, ffn {cfg.get('ffn') or 4 * cfg['hidden']}), seq {S}, "
          f"batch {B}, vocab {cfg['vocab']}: {conf.get('params', 0) / 1e6:.1f}M params, "
          f"{conf.get('precision', 'bf16-mixed')}, AdamW, one device")
    print(f"device {name or 'unknown'}; peak {fmt(peak, '.1f')} TFLOP/s dense bf16"
          f" ({what or 'unknown'})")
    print(f"model FLOPs/step {F_model / 1e12:.3f} T = 6*T*(L*(4D^2+2DF)+VD) "
          f"{flops['matmul'] / 1e12:.3f} T + causal attention 6*L*B*S^2*D "
          f"{flops['attention'] / 1e12:.3f} T (T = B*S = {B * S} tokens)")
    print(f"{'':<44} {'step ms':>9} {'TFLOP/s':>9} {'MFU':>7} {'tokens/s':>10} {'dtc/this':>9}")
    print(f"{'':<44} {'(median)':>9} {'(model)':>9} {'':>7} {'':>10} {'(>1: dtc faster)':>17}")
    rows = []

    def row(label, step_s):
        tf = F_model / step_s / 1e12 if step_s else None
        mfu = tf / peak if (tf is not None and peak) else None
        tps = B * S / step_s if step_s else None
        speed = (step_s / dtc["step_s"]) if (dtc and step_s) else None
        print(f"{label:<44} {fmt(step_s and step_s * 1e3, '9.2f'):>9} "
              f"{fmt(tf, '9.1f' if (tf or 0) >= 1 else '9.4f'):>9} "
              f"{fmt(mfu and mfu * 100, '6.1f'):>6}% {fmt(tps, '10.0f'):>10} "
              f"{fmt(speed, '8.2f') + 'x' if speed else '-':>9}")
        rows.append({"system": label, "step_s": step_s, "tflops": tf, "mfu": mfu, "tokens_per_s": tps,
                     "dtc_speedup": speed})

    if dtc:
        row(f"dtc ({dtc.get('backend') or a.backend}, bf16-mixed)", dtc["step_s"])
    elif "dtc" in a.parts:
        print(f"{'dtc':<44} failed: {res['errors'].get('dtc', 'not run')[:300]}")
    for v in torch_variants:
        t = parts.get(f"torch-{v}")
        adam = (t or {}).get("adam", "fused")
        label = {"autocast": f"PyTorch eager (autocast bf16, {adam} AdamW)",
                 "bf16-master": f"PyTorch eager (bf16, f32 masters, {adam})",
                 "compile": f"PyTorch torch.compile (autocast, {adam})",
                 "f32": f"PyTorch eager (f32, {adam} AdamW)"}[v]
        if t:
            row(label, t["step_s"])
        else:
            print(f"{label:<44} failed: {res['errors'].get('torch-' + v, 'not run')[:200]}")
    if cb:
        g = cb["gemm_8192"]
        print(f"{'cuBLAS bf16 GEMM 8192^3':<44} {g['median_ms']:>9.3f} {g['tflops']:>9.1f} "
              f"{fmt(peak and g['tflops'] / peak * 100, '6.1f'):>6}%")
        rows.append({"system": "cuBLAS 8192^3", "tflops": g["tflops"],
                     "mfu": g["tflops"] / peak if peak else None})
        if cb.get("step_gemms_tflops"):
            print(f"{'cuBLAS on the step GEMMs (FLOP-weighted)':<44} {cb['step_gemms_s'] * 1e3:>9.2f} "
                  f"{cb['step_gemms_tflops']:>9.1f} "
                  f"{fmt(peak and cb['step_gemms_tflops'] / peak * 100, '6.1f'):>6}%"
                  f"   ({cb['step_gemms_flops'] / 1e12:.3f} TFLOP of GEMMs alone)")
    elif "cublas" in a.parts:
        print(f"{'cuBLAS':<44} failed: {res['errors'].get('cublas', 'not run')[:200]}")
    if peak:
        print(f"{'device peak (dense bf16)':<44} {'':>9} {peak:>9.1f} {100.0:>6.1f}%")
    if dtc:
        mfu = F_model / dtc["step_s"] / 1e12 / peak if peak else None
        if mfu is not None:
            print(f"dtc MFU {mfu * 100:.1f}% (aim: >= 50%: {'met' if mfu >= 0.5 else 'NOT met'})")
        if dtc.get("executed_flops_per_step"):
            ex = dtc["executed_flops_per_step"]
            print(f"dtc executed kernel FLOPs/step (--stats: matmuls and attention as run) "
                  f"{ex / 1e12:.3f} T -> {ex / dtc['step_s'] / 1e12:.1f} TFLOP/s at the median step")
        if dtc.get("kernel_s_per_step") is not None:
            mean_all = statistics.mean(dtc["step_times_s"])
            dtc["mean_step_s_all"] = mean_all
            print(f"dtc kernels busy {dtc['kernel_s_per_step'] * 1e3:.2f} ms per step of the mean step "
                  f"{mean_all * 1e3:.2f} ms ({dtc['kernel_s_per_step'] / mean_all * 100:.0f}%; "
                  f"both means over all {len(dtc['step_times_s'])} steps, warm-up included)")
        if dtc.get("first_step_s") is not None:
            # dtc-run draws fresh synthetic tokens every step, so no loss
            # falls below the uniform one; PyTorch's run cycles four
            # batches and learns them: their losses are not comparable.
            print(f"dtc first step {dtc['first_step_s'] * 1e3:.1f} ms; losses "
                  f"{dtc['losses'][0]} -> {dtc['losses'][-1]} (fresh random tokens each step: "
                  f"the floor is ln(vocab) = {math.log(int(cfg['vocab'])):.3f})")
    for k, e in res["errors"].items():
        print(f"FAILED {k}: {e[:300]}")
    res["rows"] = rows


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("prepare", help="generate and compile the model (needs dtc compile)")
    pp.add_argument("outdir")
    for k, v in MODEL_DEFAULTS.items():
        pp.add_argument(f"--{k}", type=int, default=v,
                        help=f"(default {v}{', 4*hidden' if k == 'ffn' else ''})")
    pp.add_argument("--bias", action="store_true", help="biases on the projections")
    pp.add_argument("--precision", default="bf16-mixed")
    pp.add_argument("--lr", type=float, default=1e-3)
    pp.add_argument("--weight-decay", type=float, default=0.01)
    pp.add_argument("--hw", default="h100", help="dtc compile --hw (default h100)")
    pp.add_argument("--attention-stats", default="keep", choices=["keep", "recompute"],
                    help="dtc compile --attention-stats (default keep: attention's backward reads the "
                         "forward's output and logsumexp, as PyTorch's SDPA does)")
    pp.add_argument("--device-memory", help="dtc compile --device-memory (default: --hw's)")
    pp.add_argument("--compile-arg", action="append", default=[],
                    help="one more dtc compile argument (repeatable, e.g. --compile-arg=--remat=full)")
    pp.add_argument("--dtc", default=os.path.join(ROOT, "build", "bin", "dtc"))

    pr = sub.add_parser("run", help="run dtc, cuBLAS and PyTorch on this machine's GPU")
    pr.add_argument("outdir")
    pr.add_argument("--dtc-run", default=os.path.join(ROOT, "build", "bin", "dtc-run"))
    pr.add_argument("--gemm-rate", help="cuda_gemm_rate program (default: build it with nvcc)")
    pr.add_argument("--steps", type=int, default=20, help="timed dtc steps (default 20)")
    pr.add_argument("--warmup", type=int, default=3, help="dtc steps before them (default 3)")
    pr.add_argument("--backend", default="cuda", help="dtc-run --backend (cpu to test this script)")
    pr.add_argument("--local-ranks", default="auto",
                    help="dtc-run --local-ranks value; 'no' to leave it out (default: 1 when "
                    "dtc-run --help mentions it)")
    pr.add_argument("--dtc-arg", action="append", default=[], help="one more dtc-run argument")
    pr.add_argument("--parts", default="dtc,cublas", help="which of dtc,cublas to run (default both)")
    pr.add_argument("--torch", action="store_true", help="also run the PyTorch step")
    pr.add_argument("--torch-variants", default="autocast",
                    help="comma list of autocast, bf16-master, compile, f32 (default autocast)")
    pr.add_argument("--torch-steps", type=int, default=20)
    pr.add_argument("--torch-warmup", type=int, default=5)
    pr.add_argument("--torch-device", default="cuda", help=argparse.SUPPRESS)
    pr.add_argument("--python", default=sys.executable, help="python with torch (default: this one)")
    pr.add_argument("--gemm-reps", type=int, default=20)
    pr.add_argument("--peak-tflops", type=float, help="the device's dense bf16 peak (default: by name)")
    pr.add_argument("--dtc-timeout", type=int, default=120, help="seconds for a dtc-run (default 120)")
    pr.add_argument("--timeout", type=int, default=120, help="seconds per torch run (default 120)")
    pr.add_argument("--json", help="write every number here too")
    a = p.parse_args(argv)
    if a.cmd == "prepare":
        return cmd_prepare(a)
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    a.parts = [x for x in a.parts.split(",") if x]
    bad = [x for x in a.parts if x not in ("dtc", "cublas")]
    bad += [v for v in a.torch_variants.split(",") if v and v not in TORCH_VARIANTS]
    if bad:
        p.error(f"unknown part or variant: {', '.join(bad)}")
    return cmd_run(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
