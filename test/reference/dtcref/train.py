"""Training as the command-line contract defines it, in float64 (or f32):
parameters from their init specs, the inputs of each step (synthetic or a
token file), the loss and gradients (the reference's autodiff), global-norm
clipping, then SGD / Adam / AdamW.

    clipping: every gradient times min(1, C / (||g|| + 1e-6)), ||g|| the L2
              norm over all gradients together;
    sgd, adam: g += wd p (L2);  sgd: p -= lr g;
    adam:      bias-corrected moments, p -= lr mhat / (sqrt(vhat) + eps);
    adamw:     adam without the L2 term, plus p -= lr wd p before the step.
"""
import argparse
import math

import numpy as np

from . import data as token_data
from . import interp
from . import mlir
from . import ops
from . import rng

DEFAULT_INIT = "normal(0.02)"


class Model:
    """A parsed model: its @main, parameters and data inputs."""

    def __init__(self, module):
        self.func = module.func("main")
        self.params, self.inputs = [], []
        for i, (ssa, t) in enumerate(self.func.args):
            attrs = self.func.arg_attrs[i]
            name = self.func.arg_name(i)
            if "dtc.param" in attrs:
                self.params.append((i, name, attrs.get("dtc.init", DEFAULT_INIT), t))
            else:
                mx = attrs.get("dtc.max")
                mx = mx.value if isinstance(mx, mlir.Typed) else mx
                self.inputs.append((i, name, t, mx))

    @classmethod
    def from_text(cls, text):
        return cls(mlir.parse_module(text))

    @property
    def param_names(self):
        return [p[1] for p in self.params]

    def init_params(self, seed):
        return {name: rng.init_values(init, seed, name, t.shape) for _, name, init, t in self.params}

    def token_inputs(self):
        """Indices (into self.inputs) of the first two integer [B, S] inputs."""
        found = [k for k, (_, _, t, _) in enumerate(self.inputs)
                 if not t.is_float and len(t.shape) == 2]
        if len(found) < 2:
            raise ValueError("the model needs two integer [B, S] inputs for token data")
        return found[0], found[1]

    def inputs_for_step(self, seed, step, tokens=None):
        """{input name: array} of global step `step`."""
        out = {}
        for _, name, t, mx in self.inputs:
            out[name] = rng.synthetic_input(seed, name, t.shape, t.elem, step, mx)
        if tokens is not None:
            ids_k, labels_k = self.token_inputs()
            t = self.inputs[ids_k][2]
            ids, labels = token_data.batch(tokens, step, t.shape[0], t.shape[1])
            for k, values in ((ids_k, ids), (labels_k, labels)):
                name, mx = self.inputs[k][1], self.inputs[k][3]
                if mx is not None and values.max() >= mx:
                    raise ValueError(f"token {values.max()} is not below {name}'s dtc.max {mx}")
                out[name] = values
        return out

    def args(self, params, inputs):
        values = [None] * len(self.func.args)
        for i, name, _, _ in self.params:
            values[i] = params[name]
        for i, name, _, _ in self.inputs:
            values[i] = inputs[name]
        return values

    def loss_and_grads(self, params, inputs, mode="f64"):
        loss, grads = interp.forward_and_grad(self.func, self.args(params, inputs),
                                              [p[0] for p in self.params], mode)
        return float(loss), {name: grads[i] for i, name, _, _ in self.params}

    def loss(self, params, inputs, mode="f64"):
        (loss,) = interp.evaluate(self.func, self.args(params, inputs), mode)
        return float(loss)


class Optimizer:
    """The optimizer flags of `dtc compile`, with the contract's defaults."""

    def __init__(self, kind="adam", lr=1e-3, weight_decay=None, beta1=0.9, beta2=0.999,
                 eps=1e-8, grad_clip=0.0, lr_schedule="constant", warmup_steps=0,
                 decay_steps=0, min_lr=0.0):
        if kind not in ("sgd", "adam", "adamw", "none"):
            raise ValueError(f"unknown optimizer {kind}")
        if lr_schedule not in ("constant", "cosine", "linear"):
            raise ValueError(f"unknown learning-rate schedule {lr_schedule}")
        self.kind, self.lr, self.beta1, self.beta2, self.eps = kind, lr, beta1, beta2, eps
        self.weight_decay = (0.01 if kind == "adamw" else 0.0) if weight_decay is None else weight_decay
        self.grad_clip = grad_clip
        self.lr_schedule, self.warmup_steps = lr_schedule, warmup_steps
        self.decay_steps, self.min_lr = decay_steps, min_lr

    def lr_at(self, t):
        """The rate of update t (0-based), as docs/cli.md states it."""
        W, D, M = self.warmup_steps, self.decay_steps, self.min_lr
        if t < W:
            return self.lr * ((t + 1) / W)
        if self.lr_schedule == "constant":
            return self.lr
        p = min(1.0, (t - W) / (D - W))
        if self.lr_schedule == "cosine":
            return M + (self.lr - M) * (1 + math.cos(math.pi * p)) / 2
        return self.lr - (self.lr - M) * p

    @classmethod
    def from_flags(cls, flags):
        """From `dtc compile` flags (other flags are ignored)."""
        p = argparse.ArgumentParser(add_help=False)
        p.add_argument("--optimizer", default="adam")
        p.add_argument("--lr", type=float, default=1e-3)
        p.add_argument("--weight-decay", type=float, default=None)
        p.add_argument("--beta1", type=float, default=0.9)
        p.add_argument("--beta2", type=float, default=0.999)
        p.add_argument("--eps", type=float, default=1e-8)
        p.add_argument("--grad-clip", type=float, default=0.0)
        p.add_argument("--lr-schedule", default="constant")
        p.add_argument("--warmup-steps", type=int, default=0)
        p.add_argument("--decay-steps", type=int, default=0)
        p.add_argument("--min-lr", type=float, default=0.0)
        a, _ = p.parse_known_args(flags)
        return cls(a.optimizer, a.lr, a.weight_decay, a.beta1, a.beta2, a.eps, a.grad_clip,
                   a.lr_schedule, a.warmup_steps, a.decay_steps, a.min_lr)

    @property
    def adam(self):
        return self.kind in ("adam", "adamw")


def clip_by_global_norm(grads, clip, mode="f64"):
    """g * min(1, C / (||g|| + 1e-6)) over all gradients together."""
    if clip <= 0:
        return grads
    dt = np.float64 if mode == "f64" else np.float32
    total = dt(0)
    for g in grads.values():
        total = total + np.sum(g * g, dtype=dt)
    norm = np.sqrt(total)
    coef = dt(clip) / np.maximum(norm + dt(1e-6), dt(clip))
    return {name: (g * coef).astype(dt) for name, g in grads.items()}


class State:
    """Parameters, Adam moments and the optimizer step (updates applied)."""

    def __init__(self, params, mode="f64"):
        dt = np.float32 if mode == "f32" else np.float64
        self.mode = mode
        self.params = {k: np.asarray(v, dtype=dt) for k, v in params.items()}
        self.m = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.v = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.step = 0

    def apply(self, opt, grads):
        dt = np.float32 if self.mode == "f32" else np.float64
        grads = clip_by_global_norm(grads, opt.grad_clip, self.mode)
        for name, g in grads.items():
            p = self.params[name]
            # Per element in double, stored in the mode's precision (as the
            # CPU kernels do for f32).
            p64, g64 = p.astype(np.float64), g.astype(np.float64)
            lr = opt.lr_at(self.step)
            if opt.kind == "sgd":
                self.params[name] = ops.sgd_update(p64, g64, lr, opt.weight_decay).astype(dt)
            elif opt.adam:
                new_p, new_m, new_v = ops.adam_update(
                    p64, g64, self.m[name].astype(np.float64), self.v[name].astype(np.float64),
                    self.step, lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay,
                    opt.kind == "adamw")
                self.params[name], self.m[name], self.v[name] = new_p.astype(dt), new_m.astype(dt), new_v.astype(dt)
        self.step += 1
        return grads


def train(model, opt, params, steps, seed, tokens=None, mode="f64", start_step=0, state=None):
    """Runs `steps` steps from global step `start_step`. Returns (losses,
    state, last step's (clipped) gradients). Modes bf16 and f16 are mixed
    precision: f32 master weights, optimizer and clipping; parameters,
    activations and gradients rounded to 16 bits where dtc stores them."""
    state = state or State(params, "f32" if mode in interp.LOW_MODES else mode)
    losses, grads = [], None
    for k in range(start_step, start_step + steps):
        inputs = model.inputs_for_step(seed, k, tokens)
        loss, grads = model.loss_and_grads(state.params, inputs, mode)
        losses.append(loss)
        grads = state.apply(opt, grads) if opt.kind != "none" else clip_by_global_norm(
            grads, opt.grad_clip, mode)
    return losses, state, grads


def nudged(params, seed):
    """params with every element moved by one rounding (relative u = 2^-24,
    random sign), kept in f32: another f32 run started from these shows how
    far rounding noise carries."""
    gen = np.random.default_rng(seed)
    out = {}
    for name, value in params.items():
        v = np.asarray(value, dtype=np.float64)
        sign = gen.choice([-1.0, 1.0], size=v.shape)
        out[name] = (v * (1 + sign * 2.0 ** -24)).astype(np.float32)
    return out


def f32_runs(model, opt, params, steps, seed, tokens=None, nudges=2, start_step=0, mode="f32"):
    """The f32 runs of the tolerance model (compare.py): one from params,
    `nudges` from nudged params. Returns [(losses, state, grads)]. With
    mode bf16 or f16, the same runs in that mixed precision: the noise its
    rounding causes on this computation."""
    runs = [train(model, opt, params, steps, seed, tokens, mode, start_step)]
    for k in range(nudges):
        runs.append(train(model, opt, nudged(params, 1000 + k), steps, seed, tokens, mode, start_step))
    return runs
