#!/usr/bin/env python3
"""Generates dtc models (docs/model-format.md, generic op form).

  gen_model.py gpt   --layers 2 --hidden 64 --heads 4 --seq 64 --vocab 256 --batch 8 -o gpt.mlir
  gen_model.py llama --layers 2 --hidden 64 --heads 4 --ffn 172 --seq 64 --vocab 256 --batch 8 -o llama.mlir
  gen_model.py llama --heads 8 --kv-heads 2 ...   (grouped-query attention: 4 query heads per key/value head)
  gen_model.py mlp   --hidden 64 --layers 2 --features 32 --classes 10 --batch 16 -o mlp.mlir
  gen_model.py everyop --hidden 16 --heads 4 --seq 8 --vocab 10 --batch 8 -o everyop.mlir
  gen_model.py gpt --experts 8 --top-k 2 --capacity-factor 1.25 ...   (mixture of experts)

GPT: nanoGPT (learned positions, pre-LayerNorm, GELU MLP, tied output
embedding; biases with --bias). LLaMA: RMSNorm, rotary position embedding,
SwiGLU MLP, untied output head, no biases. Rotary embedding is exact and uses
only model-format ops: rot(x) = x*cos + (x @ R)*sin, where R maps each pair
(x1, x2) to (-x2, x1) and cos/sin are constant tables.

With --experts E (gpt or llama), every --moe-every'th block's MLP is a
dtc.moe of E GELU experts of width --ffn (top --top-k routing, capacity
factor --capacity-factor) over the batch's B*S tokens, and the loss adds
--aux-loss-weight times each such layer's dtc.load_balancing_loss.

Standard library only.
"""
import argparse
import math
import sys


def ttype(shape, dtype="f32"):
    dims = "x".join(str(d) for d in shape)
    return f"tensor<{dims}x{dtype}>" if shape else f"tensor<{dtype}>"


def fmt(x):
    return repr(float(x)) if not math.isnan(x) else "0.0"


class Builder:
    """Emits generic-form dtc ops with SSA names and full types."""

    def __init__(self):
        self.args = []
        self.lines = []
        self.count = 0

    def param(self, name, shape, init=None):
        attrs = [f'dtc.param', f'dtc.name = "{name}"']
        if init:
            attrs.append(f'dtc.init = "{init}"')
        return self._arg(shape, "f32", attrs)

    def input(self, name, shape, dtype="f32", max_value=None):
        attrs = [f'dtc.name = "{name}"']
        if max_value is not None:
            attrs.append(f"dtc.max = {max_value} : i64")
        return self._arg(shape, dtype, attrs)

    def _arg(self, shape, dtype, attrs):
        name = f"%a{len(self.args)}"
        self.args.append(f"{name}: {ttype(shape, dtype)} {{{', '.join(attrs)}}}")
        return (name, list(shape), dtype)

    def op(self, opname, operands, shape, attrs="", dtype="f32"):
        self.count += 1
        name = f"%v{self.count}"
        ins = ", ".join(o[0] for o in operands)
        in_types = ", ".join(ttype(o[1], o[2]) for o in operands)
        attr_text = f" {{{attrs}}}" if attrs else ""
        self.lines.append(
            f'  {name} = "dtc.{opname}"({ins}){attr_text} : ({in_types}) -> {ttype(shape, dtype)}')
        return (name, list(shape), dtype)

    def const(self, values, shape):
        self.count += 1
        name = f"%c{self.count}"
        body = nest(values, shape) if shape else fmt(values[0])
        self.lines.append(f"  {name} = arith.constant dense<{body}> : {ttype(shape)}")
        return (name, list(shape), "f32")

    # Convenience wrappers -------------------------------------------------
    def matmul(self, a, b):
        shape = broadcast(a[1][:-2], b[1][:-2]) + [a[1][-2], b[1][-1]]
        return self.op("matmul", [a, b], shape)

    def binary(self, kind, a, b):
        return self.op(kind, [a, b], broadcast(a[1], b[1]))

    def unary(self, kind, a):
        return self.op(kind, [a], a[1])

    def reshape(self, a, shape):
        return self.op("reshape", [a], shape, dtype=a[2])

    def transpose(self, a, perm):
        shape = [a[1][p] for p in perm]
        return self.op("transpose", [a], shape,
                       f"permutation = array<i64: {', '.join(map(str, perm))}>")

    def layer_norm(self, x, g, b, eps=1e-5):
        return self.op("layer_norm", [x, g, b], x[1], f"epsilon = {eps:e} : f32")

    def rms_norm(self, x, g, eps=1e-5):
        return self.op("rms_norm", [x, g], x[1], f"epsilon = {eps:e} : f32")

    def text(self, comment):
        args = ",\n                ".join(self.args)
        body = "\n".join(self.lines)
        return (f"// {comment}\n"
                f"func.func @main({args}) -> tensor<f32> {{\n{body}\n"
                f"  return {self.loss[0]} : tensor<f32>\n}}\n")


def nest(values, shape):
    if len(shape) == 1:
        return "[" + ", ".join(fmt(v) for v in values) + "]"
    step = len(values) // shape[0]
    return "[" + ", ".join(nest(values[i * step:(i + 1) * step], shape[1:])
                           for i in range(shape[0])) + "]"


def broadcast(a, b):
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + list(a)
    b = [1] * (n - len(b)) + list(b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return out


def attention_block(m, x, prefix, a, rope=None, bias=False):
    """Multi-head causal self-attention on x [B, S, D]; with a.kv_heads
    below a.heads, keys and values have that many heads, each shared by
    heads / kv_heads query heads (grouped-query attention)."""
    B, S, D = x[1]
    H = a.heads
    Hkv = getattr(a, "kv_heads", 0) or H
    Dh = D // H
    std_out = 0.02 / math.sqrt(2 * a.layers)

    def project(name, heads):
        w = m.param(f"{prefix}.{name}", [D, heads * Dh])
        y = m.matmul(x, w)
        if bias:
            y = m.binary("add", y, m.param(f"{prefix}.{name}_bias", [heads * Dh], "zeros"))
        y = m.reshape(y, [B, S, heads, Dh])
        return m.transpose(y, [0, 2, 1, 3])  # [B, heads, S, Dh]

    q, k, v = project("wq", H), project("wk", Hkv), project("wv", Hkv)
    if rope is not None:
        q, k = apply_rope(m, q, rope), apply_rope(m, k, rope)
    y = m.op("attention", [q, k, v], q[1], "causal = true")
    y = m.transpose(y, [0, 2, 1, 3])
    y = m.reshape(y, [B, S, D])
    wo = m.param(f"{prefix}.wo", [D, D], f"normal({std_out:.6g})")
    y = m.matmul(y, wo)
    if bias:
        y = m.binary("add", y, m.param(f"{prefix}.wo_bias", [D], "zeros"))
    return y


def is_moe_layer(a, l):
    return a.experts > 0 and (l + 1) % a.moe_every == 0


def moe_block(m, h, prefix, a, F, std_out):
    """h [B, S, D] through a dtc.moe over its B*S tokens; also returns the
    layer's load-balancing loss (None without --aux-loss-weight)."""
    B, S, D = h[1]
    E = a.experts
    tokens = m.reshape(h, [B * S, D])
    router = m.param(f"{prefix}.router", [D, E], "normal(0.02)")
    w_in = m.param(f"{prefix}.w_in", [E, D, F], "normal(0.02)")
    w_out = m.param(f"{prefix}.w_out", [E, F, D], f"normal({std_out:.6g})")
    y = m.op("moe", [tokens, router, w_in, w_out], [B * S, D],
             f"capacity_factor = {a.capacity_factor:e} : f32, top_k = {a.top_k} : i64")
    aux = None
    if a.aux_loss_weight:
        aux = m.op("load_balancing_loss", [tokens, router], [])
    return m.reshape(y, [B, S, D]), aux


def total_loss(m, a, ce, aux_losses):
    """The cross entropy plus --aux-loss-weight times the layers' load
    balancing losses."""
    if not aux_losses:
        return ce
    aux = aux_losses[0]
    for extra in aux_losses[1:]:
        aux = m.binary("add", aux, extra)
    return m.binary("add", ce, m.binary("mul", aux, m.const([a.aux_loss_weight], [])))


def moe_text(a):
    if not a.experts:
        return ""
    return (f" experts={a.experts} top_k={a.top_k} capacity_factor={a.capacity_factor:g}"
            f" moe_every={a.moe_every} aux_loss_weight={a.aux_loss_weight:g}")


def rope_tables(m, seq, dh, base=10000.0):
    cos, sin = [], []
    for pos in range(seq):
        for i in range(dh):
            freq = base ** (-(2 * (i // 2)) / dh)
            cos.append(math.cos(pos * freq))
            sin.append(math.sin(pos * freq))
    rotate = [0.0] * (dh * dh)
    for j in range(0, dh, 2):
        # (x @ R)[j] = -x[j+1], (x @ R)[j+1] = x[j]
        rotate[(j + 1) * dh + j] = -1.0
        rotate[j * dh + (j + 1)] = 1.0
    return (m.const(cos, [seq, dh]), m.const(sin, [seq, dh]), m.const(rotate, [dh, dh]))


def apply_rope(m, x, rope):
    cos, sin, rotate = rope
    rotated = m.matmul(x, rotate)
    return m.binary("add", m.binary("mul", x, cos), m.binary("mul", rotated, sin))


def ignore_attr(a):
    """The cross entropy's ignore_index attribute (--ignore-index), or none."""
    return "" if a.ignore_index is None else f"ignore_index = {a.ignore_index} : i64"


def gpt(a):
    m = Builder()
    B, S, D, V = a.batch, a.seq, a.hidden, a.vocab
    F = a.ffn or 4 * D
    ids = m.input("ids", [B, S], "i32", V)
    labels = m.input("labels", [B, S], "i32", V)
    wte = m.param("wte", [V, D], "normal(0.02)")
    wpe = m.param("wpe", [S, D], "normal(0.01)")
    x = m.binary("add", m.op("embedding", [wte, ids], [B, S, D]), wpe)
    std_out = 0.02 / math.sqrt(2 * a.layers)
    aux_losses = []
    for l in range(a.layers):
        p = f"h.{l}"
        h = m.layer_norm(x, m.param(f"{p}.ln_1.weight", [D], "ones"),
                         m.param(f"{p}.ln_1.bias", [D], "zeros"))
        x = m.binary("add", x, attention_block(m, h, f"{p}.attn", a, bias=a.bias))
        h = m.layer_norm(x, m.param(f"{p}.ln_2.weight", [D], "ones"),
                         m.param(f"{p}.ln_2.bias", [D], "zeros"))
        if is_moe_layer(a, l):
            f, aux = moe_block(m, h, f"{p}.moe", a, F, std_out)
            aux_losses += [aux] if aux else []
            x = m.binary("add", x, f)
            continue
        f = m.matmul(h, m.param(f"{p}.mlp.c_fc", [D, F]))
        if a.bias:
            f = m.binary("add", f, m.param(f"{p}.mlp.c_fc_bias", [F], "zeros"))
        f = m.unary("gelu", f)
        f = m.matmul(f, m.param(f"{p}.mlp.c_proj", [F, D], f"normal({std_out:.6g})"))
        x = m.binary("add", x, f)
    x = m.layer_norm(x, m.param("ln_f.weight", [D], "ones"), m.param("ln_f.bias", [D], "zeros"))
    logits = m.matmul(x, m.transpose(wte, [1, 0]))  # tied output embedding
    m.loss = total_loss(m, a, m.op("cross_entropy", [logits, labels], [], ignore_attr(a)),
                        aux_losses)
    return m.text(f"GPT: layers={a.layers} hidden={D} heads={a.heads} ffn={F} "
                  f"seq={S} vocab={V} batch={B} bias={a.bias}{moe_text(a)} (examples/gen_model.py)")


def llama(a):
    m = Builder()
    B, S, D, V = a.batch, a.seq, a.hidden, a.vocab
    F = a.ffn or int(2 * (4 * D) / 3)
    ids = m.input("ids", [B, S], "i32", V)
    labels = m.input("labels", [B, S], "i32", V)
    tok = m.param("tok_embeddings", [V, D], "normal(0.02)")
    x = m.op("embedding", [tok, ids], [B, S, D])
    rope = rope_tables(m, S, D // a.heads)
    std_out = 0.02 / math.sqrt(2 * a.layers)
    aux_losses = []
    for l in range(a.layers):
        p = f"layers.{l}"
        h = m.rms_norm(x, m.param(f"{p}.attention_norm", [D], "ones"))
        x = m.binary("add", x, attention_block(m, h, f"{p}.attention", a, rope=rope))
        h = m.rms_norm(x, m.param(f"{p}.ffn_norm", [D], "ones"))
        if is_moe_layer(a, l):
            f, aux = moe_block(m, h, f"{p}.moe", a, F, std_out)
            aux_losses += [aux] if aux else []
            x = m.binary("add", x, f)
            continue
        gate = m.unary("silu", m.matmul(h, m.param(f"{p}.feed_forward.w1", [D, F])))
        up = m.matmul(h, m.param(f"{p}.feed_forward.w3", [D, F]))
        f = m.matmul(m.binary("mul", gate, up),
                     m.param(f"{p}.feed_forward.w2", [F, D], f"normal({std_out:.6g})"))
        x = m.binary("add", x, f)
    x = m.rms_norm(x, m.param("norm", [D], "ones"))
    logits = m.matmul(x, m.param("output", [D, V]))
    m.loss = total_loss(m, a, m.op("cross_entropy", [logits, labels], [], ignore_attr(a)),
                        aux_losses)
    kv = f" kv_heads={a.kv_heads}" if a.kv_heads and a.kv_heads != a.heads else ""
    return m.text(f"LLaMA: layers={a.layers} hidden={D} heads={a.heads}{kv} ffn={F} "
                  f"seq={S} vocab={V} batch={B}{moe_text(a)} (examples/gen_model.py)")


def mlp(a):
    m = Builder()
    x = m.input("x", [a.batch, a.features])
    y = m.input("y", [a.batch], "i32", a.classes)
    width = a.features
    for l in range(a.layers):
        w = m.param(f"fc{l}.weight", [width, a.hidden], f"normal({1 / math.sqrt(width):.6g})")
        b = m.param(f"fc{l}.bias", [a.hidden], "zeros")
        x = m.unary("relu", m.binary("add", m.matmul(x, w), b))
        width = a.hidden
    w = m.param("head.weight", [width, a.classes], f"normal({1 / math.sqrt(width):.6g})")
    logits = m.binary("add", m.matmul(x, w), m.param("head.bias", [a.classes], "zeros"))
    m.loss = m.op("cross_entropy", [logits, y], [])
    return m.text(f"MLP: layers={a.layers} hidden={a.hidden} features={a.features} "
                  f"classes={a.classes} batch={a.batch} (examples/gen_model.py)")


def everyop(a):
    """Every op of the model format in a small transformer: a tied, vocab-split
    embedding and LM head, attention both fused and spelled out (softmax of
    4-D matmuls), RMSNorm and LayerNorm, a gated MLP through every
    elementwise op, reductions over split and whole dimensions, a cast."""
    m = Builder()
    B, S, D, V, H = a.batch, a.seq, a.hidden, a.vocab, a.heads
    F, Dh = a.ffn or 2 * D, D // H
    ids = m.input("ids", [B, S], "i32", V)
    labels = m.input("labels", [B, S], "i32", V)
    feat = m.input("feat", [B, S, D])
    wte = m.param("wte", [V, D], "normal(0.3)")
    ids64 = m.op("cast", [ids], [B, S], dtype="i64")
    x = m.op("embedding", [wte, ids64], [B, S, D])
    x = m.binary("add", x, m.binary("mul", feat, m.param("feat_scale", [D], "normal(0.1)")))
    h = m.layer_norm(x, m.param("ln_1.weight", [D], "ones"), m.param("ln_1.bias", [D], "zeros"))

    def heads(name):
        y = m.matmul(h, m.param(name, [D, D], "normal(0.2)"))
        return m.transpose(m.reshape(y, [B, S, H, Dh]), [0, 2, 1, 3])

    q, k, v = heads("wq"), heads("wk"), heads("wv")
    fused = m.op("attention", [q, k, v], q[1], "causal = true")
    scores = m.matmul(q, m.transpose(k, [0, 1, 3, 2]))
    probs = m.op("softmax", [m.binary("mul", scores, m.const([Dh ** -0.5], [1]))],
                 [B, H, S, S], "axis = 3 : i64")
    spelled = m.matmul(probs, v)
    o = m.reshape(m.transpose(m.binary("add", fused, spelled), [0, 2, 1, 3]), [B, S, D])
    x = m.binary("add", x, m.matmul(o, m.param("wo", [D, D], "normal(0.2)")))
    h = m.rms_norm(x, m.param("ln_2.weight", [D], "ones"))
    g = m.matmul(h, m.param("w1", [D, F], "normal(0.3)"))
    u = m.matmul(h, m.param("w3", [D, F], "normal(0.3)"))
    one = m.const([1.0], [1])
    soft = m.op("log", [m.binary("add", m.unary("exp", m.unary("neg", m.unary("relu", u))), one)], u[1])
    root = m.unary("sqrt", m.binary("add", m.binary("mul", g, g), one))
    inv = m.unary("rsqrt", m.binary("add", m.binary("mul", u, u), one))
    mixed = m.binary("sub", m.binary("max", m.binary("div", g, root), m.binary("mul", inv, soft)),
                     m.unary("tanh", g))
    f = m.binary("add", m.binary("mul", m.unary("silu", g), m.unary("gelu", u)), mixed)
    x = m.binary("add", x, m.matmul(f, m.param("w2", [F, D], "normal(0.2)")))
    x = m.layer_norm(x, m.param("ln_f.weight", [D], "ones"), m.param("ln_f.bias", [D], "zeros"))
    logits = m.matmul(x, m.transpose(wte, [1, 0]))
    ce = m.op("cross_entropy", [logits, labels], [])
    energy = m.op("reduce_mean", [m.op("reduce_sum", [m.binary("mul", f, f)], [B, S],
                                       "axes = array<i64: 2>")],
                  [], "axes = array<i64: 0, 1>")
    m.loss = m.binary("add", ce, m.binary("mul", energy, m.const([1e-3], [])))
    return m.text(f"every op: hidden={D} heads={H} ffn={F} seq={S} vocab={V} batch={B} "
                  f"(examples/gen_model.py)")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["gpt", "llama", "mlp", "everyop"])
    p.add_argument("--layers", type=int, default=2, help="transformer blocks / hidden layers (default: 2)")
    p.add_argument("--hidden", type=int, default=64, help="model width (default: 64)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default: 4)")
    p.add_argument("--kv-heads", type=int, default=0,
                   help="llama: key/value heads, a divisor of --heads (default: --heads; "
                        "fewer is grouped-query attention, 1 multi-query)")
    p.add_argument("--ffn", type=int, default=0, help="MLP width (default: 4*hidden for gpt, 8/3*hidden for llama)")
    p.add_argument("--seq", type=int, default=64, help="sequence length (default: 64)")
    p.add_argument("--vocab", type=int, default=256, help="vocabulary size (default: 256, bytes)")
    p.add_argument("--batch", type=int, default=8, help="global batch size (default: 8)")
    p.add_argument("--ignore-index", type=int, default=None,
                   help="gpt, llama: labels equal to this are left out of the loss "
                        "(cross_entropy's ignore_index; default: none)")
    p.add_argument("--bias", action="store_true", help="gpt: add biases to projections (default: off)")
    p.add_argument("--features", type=int, default=32, help="mlp: input features (default: 32)")
    p.add_argument("--classes", type=int, default=10, help="mlp: classes (default: 10)")
    p.add_argument("--experts", type=int, default=0,
                   help="gpt/llama: experts of each mixture-of-experts MLP (default: 0, dense)")
    p.add_argument("--top-k", type=int, default=2, help="experts per token (default: 2)")
    p.add_argument("--capacity-factor", type=float, default=1.25,
                   help="expert capacity = ceil(factor * tokens * top_k / experts) (default: 1.25)")
    p.add_argument("--moe-every", type=int, default=1,
                   help="every n-th block's MLP is a mixture of experts (default: 1, all)")
    p.add_argument("--aux-loss-weight", type=float, default=0.01,
                   help="weight of the load-balancing losses in the loss (default: 0.01; 0: none)")
    p.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    a = p.parse_args(argv)
    for name in ["layers", "hidden", "heads", "seq", "vocab", "batch", "features", "classes"]:
        if getattr(a, name) <= 0:
            p.error(f"--{name} must be positive")
    if a.kind != "mlp" and a.hidden % a.heads:
        p.error(f"--hidden {a.hidden} must be a multiple of --heads {a.heads}")
    if a.kv_heads and (a.kind != "llama" or a.kv_heads < 0 or a.heads % a.kv_heads):
        p.error(f"--kv-heads {a.kv_heads}: llama only, and a divisor of --heads {a.heads}")
    if a.experts and (a.kind not in ("gpt", "llama") or a.experts < 0 or a.moe_every < 1
                      or not 1 <= a.top_k <= a.experts or not a.capacity_factor > 0
                      or a.aux_loss_weight < 0):
        p.error("--experts: gpt or llama, with 1 <= --top-k <= --experts, --capacity-factor > 0, "
                "--moe-every >= 1 and --aux-loss-weight >= 0")
    if a.kind == "llama" and (a.hidden // a.heads) % 2:
        p.error("llama: the head size (hidden/heads) must be even for rotary embeddings")
    text = {"gpt": gpt, "llama": llama, "mlp": mlp, "everyop": everyop}[a.kind](a)
    if a.output == "-":
        sys.stdout.write(text)
    else:
        with open(a.output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
