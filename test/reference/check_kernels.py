#!/usr/bin/env python3
"""Checks every CPU kernel, forward and backward, against the reference.

  check_kernels.py --kernel-eval build/bin/dtc-kernel-eval [--only NAME,...] [--backend cuda]

Each case runs one kernel (dtc-kernel-eval, with 1 and with 2 threads) on
random f32 operands and
compares every output element with the reference evaluated in
numerics.Bounded mode: the float64 value v and a first-order bound E of
the error an f32 evaluation of the same formula makes (numerics.py: u per
rounding, gamma(n) per n-term sum, k ulps per libm function). The kernel
passes when |kernel - v| <= 2 E for every element (2: room for another
summation order or formula of the same accuracy), NaN/Inf fails. The
optimizer kernels compute in double and round once: |kernel - v| <= 2 u |v|.
Integer results (casts to int, integer arithmetic, ids) must be exact.

A kernel's accuracy problem (a wrong constant, a dropped term, a summation
that loses digits) shows as a ratio above 1; the ratio of each kernel is
printed.
"""
import argparse
import base64
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from dtcref import numerics as N  # noqa: E402
from dtcref import ops  # noqa: E402

B = N.Bounded
SAFETY = 2.0
TINY = 1e-37  # below this, f32 subnormals make relative bounds meaningless

_NP = {"f32": np.float32, "i32": np.int32, "i64": np.int64}


def enc(arr, dtype):
    return base64.b64encode(np.ascontiguousarray(arr, dtype=np.dtype(_NP[dtype]).newbyteorder("<")).tobytes()).decode()


def dec(text, dtype, shape):
    return np.frombuffer(base64.b64decode(text), dtype=np.dtype(_NP[dtype]).newbyteorder("<")).reshape(shape)


class Case:
    def __init__(self, kernel, inputs, outs, attrs, ref, label=""):
        self.kernel = kernel
        self.inputs = inputs  # [(array, dtype)]
        self.outs = outs  # [(shape, dtype)]
        self.attrs = attrs
        self.ref = ref  # () -> list of Bounded / exact int arrays / ('rounded', array)
        self.label = label or kernel

    def json(self):
        return {"kernel": self.kernel, "attrs": self.attrs,
                "in": [{"dtype": dt, "shape": list(np.shape(a)), "data": enc(a, dt)} for a, dt in self.inputs],
                "out": [{"dtype": dt, "shape": list(s)} for s, dt in self.outs]}


def rnd(gen, shape, lo=-1.0, hi=1.0):
    return gen.uniform(lo, hi, shape).astype(np.float32)


def exact(x):
    return B(np.asarray(x, dtype=np.float64))


def cases(gen):
    out = []
    f = "f32"

    def add(kernel, ins, outs, attrs, ref, label=""):
        out.append(Case(kernel, ins, outs, attrs, ref, label))

    # matmul: every transpose flag combination, plain, batched, broadcast.
    shapes = [([7, 33], [33, 5]), ([3, 4, 17], [17, 6]), ([4, 9], [2, 9, 3]),
              ([2, 1, 5, 8], [3, 8, 4]), ([1, 1], [1, 7]), ([2, 64, 48], [2, 48, 40]),
              ([1100, 24], [24, 70])]  # with ta: a tall a^T b, computed transposed
    for sa, sb in shapes:
        for ta in (False, True):
            for tb in (False, True):
                a, b = rnd(gen, sa), rnd(gen, sb)
                sa_st, sb_st = list(sa), list(sb)
                if ta:
                    sa_st[-1], sa_st[-2] = sa_st[-2], sa_st[-1]
                    a = np.ascontiguousarray(np.swapaxes(a, -1, -2))
                if tb:
                    sb_st[-1], sb_st[-2] = sb_st[-2], sb_st[-1]
                    b = np.ascontiguousarray(np.swapaxes(b, -1, -2))
                oshape = list(np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))) + [sa[-2], sb[-1]]
                attrs = {}
                if ta:
                    attrs["transpose_a"] = True
                if tb:
                    attrs["transpose_b"] = True
                add("matmul", [(a, f), (b, f)], [(oshape, f)], attrs,
                    lambda a=a, b=b, ta=ta, tb=tb: [ops.matmul(exact(a), exact(b), ta, tb)],
                    f"matmul {sa}x{sb}{' ta' if ta else ''}{' tb' if tb else ''}")
    # The fused epilogues: matmul + bias, GELU of matmul (+ bias) and its
    # pre-activation; one GEMM in several row blocks, transposes, batches.
    for sa, sb, ta, tb in (([7, 33], [33, 5], False, False), ([3, 4, 17], [17, 6], False, True),
                           ([2, 64, 48], [2, 48, 40], True, False), ([600, 9], [9, 20], False, False),
                           ([2, 1, 5, 8], [3, 8, 4], False, True)):
        a, b = rnd(gen, sa, -1.5, 1.5), rnd(gen, sb, -1.5, 1.5)
        oshape = list(np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))) + [sa[-2], sb[-1]]
        bias = rnd(gen, [sb[-1]], -2, 2)
        ka = np.ascontiguousarray(np.swapaxes(a, -1, -2)) if ta else a
        kb = np.ascontiguousarray(np.swapaxes(b, -1, -2)) if tb else b
        attrs = {k: True for k, on in (("transpose_a", ta), ("transpose_b", tb)) if on}
        label = f"{sa}x{sb}{' ta' if ta else ''}{' tb' if tb else ''}"

        def biased(a=a, b=b, bias=bias, o=oshape):
            return N.broadcast_to(ops.add(ops.matmul(exact(a), exact(b)), exact(bias)), o)

        add("matmul_bias", [(ka, f), (kb, f), (bias, f)], [(oshape, f)], attrs,
            lambda biased=biased: [biased()], f"matmul_bias {label}")
        add("matmul_gelu", [(ka, f), (kb, f), (bias, f)], [(oshape, f), (oshape, f)], attrs,
            lambda biased=biased: [ops.gelu(biased()), biased()], f"matmul_gelu {label} bias")
        add("matmul_gelu", [(ka, f), (kb, f)], [(oshape, f), (oshape, f)], attrs,
            lambda a=a, b=b: [ops.gelu(ops.matmul(exact(a), exact(b))), ops.matmul(exact(a), exact(b))],
            f"matmul_gelu {label}")
    # Binary elementwise with broadcasting.
    for op in ("add", "sub", "mul", "div", "max"):
        for sa, sb in (([5, 6], [6]), ([3, 1, 4], [2, 1]), ([], [4, 3]), ([40, 50], [40, 50])):
            a = rnd(gen, sa, -3, 3)
            b = rnd(gen, sb, 0.25, 3) if op == "div" else rnd(gen, sb, -3, 3)
            if op == "max" and a.size > 1:
                b.flat[0] = a.flat[0] if b.shape == a.shape else b.flat[0]  # a tie
            oshape = list(np.broadcast_shapes(tuple(sa), tuple(sb)))
            fn = {"add": ops.add, "sub": ops.sub, "mul": ops.mul, "div": ops.div, "max": ops.maximum}[op]
            add(op, [(a, f), (b, f)], [(oshape, f)], {},
                lambda a=a, b=b, fn=fn, o=oshape: [N.broadcast_to(fn(exact(a), exact(b)), o)], f"{op} {sa},{sb}")
    # Integer arithmetic is exact.
    for dt in ("i32", "i64"):
        a = gen.integers(-1000, 1000, (4, 5)).astype(_NP[dt])
        b = gen.integers(1, 50, (5,)).astype(_NP[dt])
        for op, fn in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("max", np.maximum),
                       ("div", lambda x, y: np.trunc(x / y))):
            add(op, [(a, dt), (b, dt)], [([4, 5], dt)], {},
                lambda a=a, b=b, fn=fn: [fn(a.astype(np.int64), b.astype(np.int64)).astype(np.int64)],
                f"{op} {dt}")
    # Unary.
    for op, lo, hi in (("neg", -4, 4), ("exp", -10, 10), ("log", 1e-3, 50), ("tanh", -6, 6),
                       ("sqrt", 1e-3, 50), ("rsqrt", 1e-3, 50), ("relu", -3, 3), ("gelu", -6, 6),
                       ("silu", -20, 20)):
        x = rnd(gen, [1000], lo, hi)
        if op == "relu":
            x[:3] = [0.0, -0.0, 1e-30]
        add(op, [(x, f)], [([1000], f)], {}, lambda x=x, op=op: [getattr(ops, op)(exact(x))], op)
    # Softmax along every axis.
    x = rnd(gen, [3, 7, 65], -6, 6)
    for axis in range(3):
        add("softmax", [(x, f)], [([3, 7, 65], f)], {"axis": axis},
            lambda x=x, axis=axis: [ops.softmax(exact(x), axis)], f"softmax axis {axis}")
    # Norms.
    for shape, eps in (([4, 3, 96], 1e-5), ([5, 1], 1e-5), ([6, 10], 0.5)):
        x = rnd(gen, shape, -2, 3)
        g, b = rnd(gen, shape[-1:], 0.5, 1.5), rnd(gen, shape[-1:])
        add("layer_norm", [(x, f), (g, f), (b, f)], [(shape, f)], {"epsilon": eps},
            lambda x=x, g=g, b=b, eps=eps: [ops.layer_norm(exact(x), exact(g), exact(b), eps)], f"layer_norm {shape}")
        add("rms_norm", [(x, f), (g, f)], [(shape, f)], {"epsilon": eps},
            lambda x=x, g=g, eps=eps: [ops.rms_norm(exact(x), exact(g), eps)], f"rms_norm {shape}")
        dy = rnd(gen, shape)
        add("layer_norm_grad", [(x, f), (g, f), (dy, f)], [(shape, f), (shape[-1:], f), (shape[-1:], f)],
            {"epsilon": eps}, lambda x=x, g=g, dy=dy, eps=eps: list(ops.layer_norm_vjp(exact(x), exact(g), exact(dy), eps)),
            f"layer_norm_grad {shape}")
        add("rms_norm_grad", [(x, f), (g, f), (dy, f)], [(shape, f), (shape[-1:], f)],
            {"epsilon": eps}, lambda x=x, g=g, dy=dy, eps=eps: list(ops.rms_norm_vjp(exact(x), exact(g), exact(dy), eps)),
            f"rms_norm_grad {shape}")
    # Embedding and its gradient (repeated ids accumulate).
    for dt in ("i32", "i64"):
        table = rnd(gen, [11, 6])
        ids = gen.integers(0, 11, (4, 9)).astype(_NP[dt])
        add("embedding", [(table, f), (ids, dt)], [([4, 9, 6], f)], {},
            lambda t=table, i=ids: [ops.embedding(exact(t), i.astype(np.int64))], f"embedding {dt}")
        dy = rnd(gen, [4, 9, 6])
        add("embedding_grad", [(ids, dt), (dy, f)], [([11, 6], f)], {},
            lambda i=ids, dy=dy: [ops.embedding_vjp(i.astype(np.int64), exact(dy), 11)], f"embedding_grad {dt}")
    # Attention: causal self-attention, cross attention.
    for sq, sk, causal in ((9, 9, True), (9, 9, False), (4, 13, False), (33, 33, True)):
        q, k, v = rnd(gen, [2, 3, sq, 8], -2, 2), rnd(gen, [2, 3, sk, 8], -2, 2), rnd(gen, [2, 3, sk, 8])
        add("attention", [(q, f), (k, f), (v, f)], [([2, 3, sq, 8], f)], {"causal": causal},
            lambda q=q, k=k, v=v, c=causal: [ops.attention(exact(q), exact(k), exact(v), c)],
            f"attention {sq}x{sk} causal={causal}")
        dy = rnd(gen, [2, 3, sq, 8])
        add("attention_grad", [(q, f), (k, f), (v, f), (dy, f)],
            [([2, 3, sq, 8], f), ([2, 3, sk, 8], f), ([2, 3, sk, 8], f)], {"causal": causal},
            lambda q=q, k=k, v=v, dy=dy, c=causal: list(ops.attention_vjp(exact(q), exact(k), exact(v), exact(dy), c)),
            f"attention_grad {sq}x{sk} causal={causal}")
    # Ring attention's blocks: the diagonal block, a past block (every key),
    # a shift that is not a block multiple with more queries than keys, no
    # mask, grouped keys and values, striped positions (stride: rows at
    # offset + i * stride), zigzag chunks (zz: the sequence's length; a
    # rank's diagonal step, an earlier rank's keys, and a block of 10
    # queries against 6 keys); with and without a running output.
    i64 = "i64"
    for sq, sk, hkv, causal, qo, ko, stride, zz in (
            (9, 9, 3, True, 0, 0, 1, 0), (9, 9, 3, True, 9, 0, 1, 0), (12, 7, 3, True, 5, 2, 1, 0),
            (4, 13, 3, False, 0, 0, 1, 0), (10, 10, 1, True, 20, 10, 1, 0),
            (8, 8, 3, True, 5, 1, 2, 0), (9, 9, 3, True, 3, 0, 4, 0), (7, 7, 1, True, 2, 2, 3, 0),
            (10, 10, 3, True, 5, 5, 1, 40), (10, 10, 1, True, 10, 0, 1, 40),
            (10, 6, 3, True, 5, 2, 1, 40)):
        q, k, v = rnd(gen, [2, 3, sq, 8], -2, 2), rnd(gen, [2, hkv, sk, 8], -2, 2), rnd(gen, [2, hkv, sk, 8])
        offs = [(np.array(qo, dtype=np.int64), i64), (np.array(ko, dtype=np.int64), i64)]
        label = f"{sq}x{sk} kv heads {hkv} causal={causal} at {qo},{ko}" + (
            f" stride {stride}" if stride > 1 else "") + (f" zigzag {zz}" if zz else "")
        attrs = {"causal": causal, **({"position_stride": stride} if stride > 1 else {}),
                 **({"zigzag_length": zz} if zz else {})}
        outs = [([2, 3, sq, 8], f), ([2, 3, sq], f)]
        add("attention_block", [(q, f), (k, f), (v, f)] + offs, outs, attrs,
            lambda q=q, k=k, v=v, qo=qo, ko=ko, c=causal, st=stride, zz=zz: list(
                ops.attention_block(exact(q), exact(k), exact(v), qo, ko, c, stride=st, zigzag=zz)),
            f"attention_block {label}")
        ya, la = rnd(gen, [2, 3, sq, 8]), rnd(gen, [2, 3, sq], 0.5, 3)
        add("attention_block", [(q, f), (k, f), (v, f)] + offs + [(ya, f), (la, f)], outs, attrs,
            lambda q=q, k=k, v=v, qo=qo, ko=ko, c=causal, ya=ya, la=la, st=stride, zz=zz: list(
                ops.attention_block(exact(q), exact(k), exact(v), qo, ko, c, exact(ya), exact(la), stride=st,
                                    zigzag=zz)),
            f"attention_block {label} merged")
        dy, y, lse = rnd(gen, [2, 3, sq, 8]), rnd(gen, [2, 3, sq, 8]), rnd(gen, [2, 3, sq], 1, 3)
        add("attention_block_grad", [(q, f), (k, f), (v, f)] + offs + [(dy, f), (y, f), (lse, f)],
            [([2, 3, sq, 8], f), ([2, hkv, sk, 8], f), ([2, hkv, sk, 8], f)], attrs,
            lambda q=q, k=k, v=v, qo=qo, ko=ko, c=causal, dy=dy, y=y, lse=lse, st=stride, zz=zz: list(
                ops.attention_block_vjp(exact(q), exact(k), exact(v), qo, ko, exact(dy), exact(y), exact(lse), c,
                                        stride=st, zigzag=zz)),
            f"attention_block_grad {label}")
    # Cross entropy and its gradient.
    for dt in ("i32", "i64"):
        z = rnd(gen, [3, 5, 70], -8, 8)
        y = gen.integers(0, 70, (3, 5)).astype(_NP[dt])
        add("cross_entropy", [(z, f), (y, dt)], [([], f)], {},
            lambda z=z, y=y: [ops.cross_entropy(exact(z), y.astype(np.int64))], f"cross_entropy {dt}")
        dl = np.array(0.7, dtype=np.float32)
        add("cross_entropy_grad", [(z, f), (y, dt), (dl, f)], [([3, 5, 70], f)], {"scale": 1 / 30},
            lambda z=z, y=y, dl=dl: [ops.cross_entropy_grad(exact(z), y.astype(np.int64), exact(dl), 1 / 30)],
            f"cross_entropy_grad {dt}")
    # Reductions.
    x = rnd(gen, [6, 50, 7], -2, 2)
    for axes, keep in (([1], False), ([0, 2], True), ([0, 1, 2], False), ([], False)):
        shape = [1 if (i in axes and keep) else d for i, d in enumerate(x.shape) if keep or i not in axes]
        for op, fn in (("reduce_sum", ops.reduce_sum), ("reduce_mean", ops.reduce_mean)):
            add(op, [(x, f)], [(shape, f)], {"axes": axes, "keep_dims": keep},
                lambda x=x, axes=axes, keep=keep, fn=fn: [fn(exact(x), axes, keep)], f"{op} {axes} keep={keep}")
    # Data movement and casts (exact).
    x = rnd(gen, [2, 3, 4])
    add("transpose", [(x, f)], [([4, 2, 3], f)], {"permutation": [2, 0, 1]},
        lambda x=x: [exact(np.transpose(x, (2, 0, 1)))])
    add("reshape", [(x, f)], [([6, 4], f)], {}, lambda x=x: [exact(x.reshape(6, 4))])
    add("copy", [(x, f)], [([2, 3, 4], f)], {}, lambda x=x: [exact(x)])
    add("broadcast", [(rnd(gen, [3, 1]), f)], [([2, 3, 4], f)], {}, None, "broadcast")
    out[-1].ref = lambda c=out[-1]: [exact(np.broadcast_to(c.inputs[0][0], (2, 3, 4)))]
    xf = np.array([2.7, -2.7, 0.5, -0.5, 3e9, -3e9, np.nan, 7.0], dtype=np.float32)
    for dt in ("i32", "i64"):
        add("cast", [(xf, f)], [([8], dt)], {}, lambda dt=dt: [ops.cast_value(xf.astype(np.float64), dt)], f"cast f32->{dt}")
        xi = gen.integers(-2**20, 2**20, (6,)).astype(_NP[dt])
        add("cast", [(xi, dt)], [([6], f)], {}, lambda xi=xi: [exact(xi.astype(np.float64))], f"cast {dt}->f32")
    # Gradient kernels of the activations and max.
    for op, deriv in (("relu_grad", None), ("gelu_grad", ops.gelu_derivative), ("silu_grad", ops.silu_derivative)):
        x, dy = rnd(gen, [500], -5, 5), rnd(gen, [500])
        if deriv is None:
            x[:2] = [0.0, -0.0]
            ref = (lambda x=x, dy=dy: [N.where(x > 0, exact(dy), exact(np.zeros_like(dy)))])
        else:
            ref = (lambda x=x, dy=dy, d=deriv: [exact(dy) * d(exact(x))])
        add(op, [(x, f), (dy, f)], [([500], f)], {}, ref, op)
    l, r, dy = rnd(gen, [4, 5]), rnd(gen, [5]), rnd(gen, [4, 5])
    l[0, :] = r  # ties go to lhs
    add("max_grad", [(l, f), (r, f), (dy, f)], [([4, 5], f), ([4, 5], f)], {},
        lambda l=l, r=r, dy=dy: [exact(np.where(l >= r, dy, 0)), exact(np.where(r > l, dy, 0))], "max_grad")
    for axis in (0, 1):
        y = ops.softmax(rnd(gen, [6, 40], -3, 3).astype(np.float64), axis).astype(np.float32)
        dy = rnd(gen, [6, 40])
        add("softmax_grad", [(y, f), (dy, f)], [([6, 40], f)], {"axis": axis},
            lambda y=y, dy=dy, axis=axis: [ops.softmax_vjp(exact(y), exact(dy), axis)], f"softmax_grad axis {axis}")
    # Optimizer updates: double precision per element, one rounding.
    p, g = rnd(gen, [300]), rnd(gen, [300], -0.1, 0.1)
    add("sgd_update", [(p, f), (g, f)], [([300], f)], {"lr": 0.1, "weight_decay": 0.01},
        lambda p=p, g=g: [("rounded", ops.sgd_update(p.astype(np.float64), g.astype(np.float64), 0.1, 0.01))])
    m, v = rnd(gen, [300], -1e-2, 1e-2), rnd(gen, [300], 1e-6, 1e-4)
    for decoupled in (False, True):
        for step in (0, 1, 6):
            at = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1, "decoupled": decoupled}
            add("adam_update", [(p, f), (g, f), (m, f), (v, f), (np.array(step, dtype=np.int64), "i64")],
                [([300], f)] * 3, at,
                lambda p=p, g=g, m=m, v=v, s=step, d=decoupled: [
                    ("rounded", x) for x in ops.adam_update(p.astype(np.float64), g.astype(np.float64),
                                                            m.astype(np.float64), v.astype(np.float64), s, 1e-2,
                                                            0.9, 0.999, 1e-8, 0.1, d)],
                f"adam_update step {step} decoupled={decoupled}")
    return out


def check(case, result):
    """(problems, worst ratio)."""
    if "error" in result:
        return [f"{case.label}: the kernel failed: {result['error']}"], math.inf
    problems, worst = [], 0.0
    refs = case.ref()
    for k, ((shape, dt), data, ref) in enumerate(zip(case.outs, result["out"], refs)):
        got = dec(data, dt, shape).astype(np.float64 if dt == "f32" else np.int64)
        what = f"{case.label} output {k}"
        if dt != "f32":
            want = np.asarray(ref, dtype=np.int64)
            if not np.array_equal(got, want):
                idx = np.argwhere(got != want)[0]
                problems.append(f"{what}: element {list(idx)} is {got[tuple(idx)]}, expected {want[tuple(idx)]}")
                worst = math.inf
            continue
        if isinstance(ref, tuple) and ref[0] == "rounded":
            v = np.asarray(ref[1], dtype=np.float64)
            e = np.zeros_like(v) + N.U * np.abs(v)
        else:
            ref = B.lift(ref)
            v, e = np.broadcast_to(ref.v, tuple(shape)), np.broadcast_to(ref.e, tuple(shape))
        bad = np.argwhere(~np.isfinite(got) & np.isfinite(v))
        if bad.size:
            idx = tuple(bad[0])
            problems.append(f"{what}: element {list(idx)} is {got[idx]} (reference {v[idx]:.9g})")
            worst = math.inf
            continue
        tol = SAFETY * e + TINY
        ratio = np.where(np.isfinite(v), np.abs(got - v) / tol, 0.0)
        i = int(np.argmax(ratio)) if ratio.size else 0
        r = float(ratio.reshape(-1)[i]) if ratio.size else 0.0
        worst = max(worst, r)
        if not (r <= 1.0):
            idx = list(np.unravel_index(i, ratio.shape)) if ratio.size > 1 else []
            problems.append(f"{what}: element {idx} is {got.reshape(-1)[i]:.9g}, reference "
                            f"{v.reshape(-1)[i]:.9g} (error {abs(got.reshape(-1)[i] - v.reshape(-1)[i]):.3e} "
                            f"> {tol.reshape(-1)[i]:.3e}, {r:.1f}x the f32 bound)")
    return problems, worst


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernel-eval", required=True, help="path of dtc-kernel-eval")
    p.add_argument("--only", default="", help="comma-separated kernel names")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--backend", default="cpu",
                   help="runtime backend of the kernels (cpu, or cuda on a GPU machine)")
    a = p.parse_args(argv)
    all_cases = cases(np.random.default_rng(a.seed))
    if a.only:
        keep = set(a.only.split(","))
        all_cases = [c for c in all_cases if c.kernel in keep]
    with tempfile.TemporaryDirectory(prefix="dtc-kernels-") as work:
        cases_path, results_path = os.path.join(work, "cases.json"), os.path.join(work, "results.json")
        with open(cases_path, "w") as f:
            json.dump([c.json() for c in all_cases], f)
        runs = []
        for threads in ((1, 2) if a.backend == "cpu" else (1,)):
            proc = subprocess.run([a.kernel_eval, cases_path, results_path, str(threads), a.backend],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"FAIL: dtc-kernel-eval exited with {proc.returncode}: {proc.stderr}")
                return 1
            with open(results_path) as f:
                runs.append((threads, json.load(f)))
    by_kernel = {}
    failed = False
    for case, result in [(c, r) for threads, results in runs for c, r in zip(all_cases, results)]:
        problems, worst = check(case, result)
        entry = by_kernel.setdefault(case.kernel, [0, 0.0, []])
        entry[0] += 1
        entry[1] = max(entry[1], worst)
        entry[2] += problems
    for kernel, (count, worst, problems) in by_kernel.items():
        status = "ok" if not problems else "FAIL"
        print(f"{kernel}: {status}: {count} cases, worst {worst:.2f} of the f32 bound")
        for problem in problems[:5]:
            print(f"  {problem}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
