#!/usr/bin/env python3
"""The GPT training step of bench/gpu_step_bench.py in PyTorch: the peer that
dtc's CUDA step is compared with, on the same device.

  bench/torch_gpt_step.py --config OUTDIR/gpt-bench.json [--precision autocast]
                          [--compile] [--steps 20] [--warmup 5] [--json OUT.json]
  bench/torch_gpt_step.py --layers 2 --hidden 64 --heads 4 --seq 64 --vocab 256
                          --batch 4 --device cpu          (a quick check anywhere)

The model is examples/gen_model.py's gpt (nanoGPT): learned positions,
pre-LayerNorm (weight and bias), separate q/k/v/o projections [D, D], causal
F.scaled_dot_product_attention, tanh-GELU MLP of width ffn (4*hidden),
with "bias" in the config biases on q, k, v, o and the MLP's first product
(gen_model.py puts none on its second), final LayerNorm,
tied output embedding, mean cross entropy; AdamW on every parameter with the
config's lr, betas, eps and weight decay (dtc's defaults: 1e-3, 0.9/0.999,
1e-8, 0.01). Weights are initialised differently from dtc's, which does not
change the work.

Precision (--precision):
  autocast     f32 parameters and AdamW, forward under
               torch.autocast(bfloat16): matmuls and attention in bf16, norms,
               softmax and the loss in f32 (autocast's lists); f32 gradients.
               PyTorch's standard mixed precision (the default).
  bf16-master  dtc's bf16-mixed scheme: bf16 parameters, activations and
               gradients, f32 master weights that AdamW updates, each
               parameter then its master rounded (two foreach copies per step).
  f32          everything f32 (TF32 off).
AdamW is fused=True on CUDA (--adam fused|foreach|default).

Timing: --warmup steps first (with --compile, compilation happens there),
then --steps steps, each synchronised (like dtc's step, which ends when its
loss is on the host): wall time per step, and CUDA-event time; the median of
each. Batches are made on the device before timing. TFLOP/s use the model
FLOPs of bench/gpu_step_bench.py (model_flops). Prints a line for people and
`RESULT {json}`; --json writes the same object.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_step_bench import model_flops  # noqa: E402  (standard library only)

DEFAULTS = dict(layers=2, hidden=64, heads=4, seq=64, vocab=256, batch=4, ffn=0, bias=False,
                lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)


def build(cfg, device, param_dtype):
    import torch
    import torch.nn.functional as F

    B, S, D, H, V, L = (cfg[k] for k in ("batch", "seq", "hidden", "heads", "vocab", "layers"))
    Fw = cfg["ffn"] or 4 * D
    Dh = D // H
    bias = bool(cfg.get("bias"))

    def param(*shape, std=0.02, init="normal"):
        t = torch.empty(*shape, device=device, dtype=param_dtype)
        if init == "normal":
            t.normal_(0.0, std)
        elif init == "ones":
            t.fill_(1.0)
        else:
            t.zero_()
        return torch.nn.Parameter(t)

    std_out = 0.02 / math.sqrt(2 * L)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1_w, self.ln_1_b = param(D, init="ones"), param(D, init="zeros")
            self.ln_2_w, self.ln_2_b = param(D, init="ones"), param(D, init="zeros")
            self.wq, self.wk, self.wv = param(D, D), param(D, D), param(D, D)
            self.wo = param(D, D, std=std_out)
            self.c_fc, self.c_proj = param(D, Fw), param(Fw, D, std=std_out)
            if bias:
                self.bq, self.bk, self.bv, self.bo = (param(D, init="zeros") for _ in range(4))
                self.b_fc = param(Fw, init="zeros")  # gen_model.py: no bias on c_proj

        def lin(self, x, w, b):
            y = x @ w
            return y + b if b is not None else y

        def forward(self, x):
            g = (lambda n: getattr(self, n)) if bias else (lambda n: None)
            h = F.layer_norm(x, (D,), self.ln_1_w, self.ln_1_b, 1e-5)
            q, k, v = (self.lin(h, w, g(b)).view(B, S, H, Dh).transpose(1, 2)
                       for w, b in ((self.wq, "bq"), (self.wk, "bk"), (self.wv, "bv")))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.lin(y.transpose(1, 2).reshape(B, S, D), self.wo, g("bo"))
            h = F.layer_norm(x, (D,), self.ln_2_w, self.ln_2_b, 1e-5)
            f = F.gelu(self.lin(h, self.c_fc, g("b_fc")), approximate="tanh")
            return x + f @ self.c_proj

    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = param(V, D), param(S, D, std=0.01)
            self.h = torch.nn.ModuleList(Block() for _ in range(L))
            self.ln_f_w, self.ln_f_b = param(D, init="ones"), param(D, init="zeros")

        def forward(self, ids, labels):
            x = F.embedding(ids, self.wte) + self.wpe
            for block in self.h:
                x = block(x)
            x = F.layer_norm(x, (D,), self.ln_f_w, self.ln_f_b, 1e-5)
            logits = x @ self.wte.t()  # tied output embedding
            return F.cross_entropy(logits.view(-1, V), labels.view(-1))

    return GPT()


def run(cfg, a):
    import torch

    device = torch.device(a.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    param_dtype = torch.bfloat16 if a.precision == "bf16-master" else torch.float32
    model = build(cfg, device, param_dtype)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)

    adam = a.adam
    if adam == "auto":
        adam = "fused" if cuda else "default"
    kw = dict(lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
              weight_decay=cfg["weight_decay"])
    if adam == "fused":
        kw["fused"] = True
    elif adam == "foreach":
        kw["foreach"] = True
    if a.precision == "bf16-master":
        masters = [p.detach().float().requires_grad_(True) for p in params]
        master_grads = [torch.zeros_like(m) for m in masters]
        for m, g in zip(masters, master_grads):
            m.grad = g
        opt = torch.optim.AdamW(masters, **kw)
    else:
        opt = torch.optim.AdamW(params, **kw)

    fwd = torch.compile(model) if a.compile else model
    B, S, V = cfg["batch"], cfg["seq"], cfg["vocab"]
    gen = torch.Generator(device=device).manual_seed(1)
    batches = [(torch.randint(0, V, (B, S), generator=gen, device=device),
                torch.randint(0, V, (B, S), generator=gen, device=device)) for _ in range(4)]

    def step(k):
        ids, labels = batches[k % len(batches)]
        if a.precision == "bf16-master":
            for p in params:
                p.grad = None
            loss = fwd(ids, labels)
            loss.backward()
            torch._foreach_copy_(master_grads, [p.grad for p in params])
            opt.step()
            with torch.no_grad():
                torch._foreach_copy_(params, masters)
        else:
            opt.zero_grad(set_to_none=True)
            if a.precision == "autocast":
                with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                    loss = fwd(ids, labels)
            else:
                loss = fwd(ids, labels)
            loss.backward()
            opt.step()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    t_compile = time.perf_counter()
    losses = []
    for k in range(a.warmup):
        losses.append(float(step(k).detach()))
    sync()
    warmup_s = time.perf_counter() - t_compile
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    wall, event = [], []
    for k in range(a.warmup, a.warmup + a.steps):
        sync()
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        t0 = time.perf_counter()
        loss = step(k)
        if cuda:
            e1.record()
        losses.append(float(loss.detach()))  # the host reads the loss, as dtc's step does
        sync()
        wall.append(time.perf_counter() - t0)
        if cuda:
            event.append(e0.elapsed_time(e1) * 1e-3)

    flops = model_flops(cfg)
    step_s = statistics.median(wall)
    r = {
        "system": "torch" + (".compile" if a.compile else "") + f" ({a.precision}, {adam} AdamW)",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "precision": a.precision, "compile": bool(a.compile), "adam": adam,
        "sdpa_backends": sdpa_note(torch, cuda),
        "params": n_params,
        "steps": a.steps, "warmup": a.warmup, "warmup_s": warmup_s,
        "step_s": step_s, "step_s_min": min(wall),
        "event_step_s": statistics.median(event) if event else None,
        "step_times_s": wall,
        "tokens_per_s": B * S / step_s,
        "model_flops_per_step": flops["total"],
        "tflops": flops["total"] / step_s / 1e12,
        "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
        "max_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
    }
    return r


def sdpa_note(torch, cuda):
    if not cuda:
        return "cpu"
    try:
        b = torch.backends.cuda
        return ",".join(n for n, on in (("flash", b.flash_sdp_enabled()),
                                       ("cudnn", b.cudnn_sdp_enabled()),
                                       ("mem_efficient", b.mem_efficient_sdp_enabled()),
                                       ("math", b.math_sdp_enabled())) if on) + " enabled"
    except Exception:  # noqa: BLE001  (an older or newer torch)
        return "unknown"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="gpt-bench.json of gpu_step_bench.py prepare (its 'model')")
    for k in ("layers", "hidden", "heads", "seq", "vocab", "batch", "ffn"):
        p.add_argument(f"--{k}", type=int, help=f"overrides the config (default {DEFAULTS[k]})")
    p.add_argument("--bias", action="store_true", default=None)
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu, for a quick check")
    p.add_argument("--precision", choices=["autocast", "bf16-master", "f32"], default="autocast")
    p.add_argument("--adam", choices=["auto", "fused", "foreach", "default"], default="auto",
                   help="AdamW implementation (auto: fused on CUDA)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: torch's)")
    p.add_argument("--json", help="write the result object here")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")

    cfg = dict(DEFAULTS)
    if a.config:
        with open(a.config) as f:
            c = json.load(f)
        cfg.update(c.get("model", c))
        cfg.update(c.get("optimizer", {}))
    for k in ("layers", "hidden", "heads", "seq", "vocab", "batch", "ffn"):
        if getattr(a, k) is not None:
            cfg[k] = getattr(a, k)
    if a.bias is not None:
        cfg["bias"] = a.bias
    if cfg["hidden"] % cfg["heads"]:
        p.error("hidden must be a multiple of heads")

    import torch
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_gpt_step: CUDA is not available to this torch "
              f"({torch.__version__}); use --device cpu for a check", file=sys.stderr)
        return 1
    r = run(cfg, a)
    shape = ", ".join(f"{k} {cfg[k]}" for k in ("layers", "hidden", "heads", "seq", "vocab", "batch"))
    print(f"{r['system']} on {r['device']}: GPT {shape}; {r['params'] / 1e6:.1f}M params; "
          f"median step {r['step_s'] * 1e3:.2f} ms (events {((r['event_step_s'] or 0) * 1e3):.2f} ms), "
          f"{r['tflops']:.1f} TFLOP/s, {r['tokens_per_s']:.0f} tokens/s; "
          f"loss {r['loss_first']:.4f} -> {r['loss_last']:.4f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    print("RESULT " + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
