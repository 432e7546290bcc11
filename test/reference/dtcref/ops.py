"""What every dtc op computes, written from the model format's and the
kernel list's definitions, and the reference's own vector-Jacobian products.

Each function works on float64 arrays, float32 arrays or numerics.Bounded
(see numerics.py); integer tensors (ids, labels) are int64 numpy arrays.
Nothing here is derived from dtc's C++ (its gradient rules or kernels): the
VJPs are checked against float64 central differences and hand-computed
cases in test/reference/tests.
"""
import math

import numpy as np

from . import numerics as N

GELU_A = 0.044715
GELU_C = math.sqrt(2.0 / math.pi)


# ---- broadcasting -------------------------------------------------------------------

def broadcast_shape(a, b):
    return tuple(np.broadcast_shapes(tuple(a), tuple(b)))


def unbroadcast(g, shape):
    """Sums g (of a broadcast shape) back to `shape` (numpy's rule)."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    if axes:
        g = N.sum(g, axis=axes, keepdims=False)
    return N.reshape(g, shape)


# ---- elementwise --------------------------------------------------------------------------

def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b


def div(a, b):
    return a / b


def maximum(a, b):
    shape = broadcast_shape(a.shape, b.shape)
    return N.maximum(N.broadcast_to(a, shape), N.broadcast_to(b, shape))


def neg(x):
    return -x


def exp(x):
    return N.exp(x)


def log(x):
    return N.log(x)


def tanh(x):
    return N.tanh(x)


def sqrt(x):
    return N.sqrt(x)


def rsqrt(x):
    return N.const(1.0, x) / N.sqrt(x)


def relu(x):
    return N.where(N.val(x) > 0, x, N.zeros(x.shape, x))


def _gelu_inner(x):
    return N.const(GELU_C, x) * (x + N.const(GELU_A, x) * x * x * x)


def gelu(x):
    """The tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return N.const(0.5, x) * x * (N.const(1.0, x) + N.tanh(_gelu_inner(x)))


def sigmoid(x):
    return N.const(1.0, x) / (N.const(1.0, x) + N.exp(-x))


def silu(x):
    return x * sigmoid(x)


def gelu_derivative(x):
    t = N.tanh(_gelu_inner(x))
    one = N.const(1.0, x)
    dinner = N.const(GELU_C, x) * (one + N.const(3.0 * GELU_A, x) * x * x)
    return N.const(0.5, x) * (one + t) + N.const(0.5, x) * x * (one - t * t) * dinner


def silu_derivative(x):
    s = sigmoid(x)
    one = N.const(1.0, x)
    return s * (one + x * (one - s))


# ---- matmul ---------------------------------------------------------------------------

def swap_last(x):
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return N.transpose(x, perm)


def matmul(a, b, transpose_a=False, transpose_b=False):
    """[..., M, K] x [..., K, N]; batch dims broadcast (numpy's rule). With
    transpose_a, a holds [..., K, M]; with transpose_b, b holds [..., N, K]."""
    if transpose_a:
        a = swap_last(a)
    if transpose_b:
        b = swap_last(b)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError("matmul operands need rank >= 2")
    return N.matmul(a, b)


def matmul_vjp(a, b, dy):
    da = unbroadcast(N.matmul(dy, swap_last(b)), a.shape)
    db = unbroadcast(N.matmul(swap_last(a), dy), b.shape)
    return da, db


# ---- softmax and norms ----------------------------------------------------------------

def softmax(x, axis, mask=None):
    """exp(x - max) / sum along axis; entries where mask is False get 0."""
    if mask is None:
        m = N.max_stop(x, axis)
    else:
        # The shift is the largest VISIBLE entry; hidden ones become it
        # (exp(0) = 1) and are then multiplied by an exact 0.
        m = N.astype_like(np.max(np.where(mask, N.val(x), -np.inf), axis=axis, keepdims=True), x)
        x = N.where(mask, x, N.broadcast_to(m, x.shape))
    e = N.exp(x - m)
    if mask is not None:
        e = e * N.astype_like(mask, x)
    return e / N.sum(e, axis=axis, keepdims=True)


def softmax_vjp(y, dy, axis):
    return y * (dy - N.sum(dy * y, axis=axis, keepdims=True))


def _row_stats(x):
    D = x.shape[-1]
    mean = N.sum(x, axis=-1, keepdims=True) / N.const(float(D), x)
    d = x - mean
    var = N.sum(d * d, axis=-1, keepdims=True) / N.const(float(D), x)
    return d, var


def layer_norm(x, gamma, beta, eps):
    d, var = _row_stats(x)
    r = N.const(1.0, x) / N.sqrt(var + N.const(eps, x))
    return d * r * gamma + beta


def layer_norm_vjp(x, gamma, dy, eps):
    """(dx, dgamma, dbeta); dgamma and dbeta sum over all leading dims."""
    D = x.shape[-1]
    d, var = _row_stats(x)
    r = N.const(1.0, x) / N.sqrt(var + N.const(eps, x))
    xhat = d * r
    lead = tuple(range(x.ndim - 1))
    dbeta = N.sum(dy, axis=lead) if lead else dy
    dgamma = N.sum(dy * xhat, axis=lead) if lead else dy * xhat
    g = dy * gamma
    inv_d = N.const(1.0 / D, x)
    mean_g = N.sum(g, axis=-1, keepdims=True) * inv_d
    mean_gx = N.sum(g * xhat, axis=-1, keepdims=True) * inv_d
    dx = r * (g - mean_g - xhat * mean_gx)
    return dx, dgamma, dbeta


def rms_norm(x, gamma, eps):
    D = x.shape[-1]
    ms = N.sum(x * x, axis=-1, keepdims=True) / N.const(float(D), x)
    r = N.const(1.0, x) / N.sqrt(ms + N.const(eps, x))
    return x * r * gamma


def rms_norm_vjp(x, gamma, dy, eps):
    D = x.shape[-1]
    ms = N.sum(x * x, axis=-1, keepdims=True) / N.const(float(D), x)
    r = N.const(1.0, x) / N.sqrt(ms + N.const(eps, x))
    xhat = x * r
    lead = tuple(range(x.ndim - 1))
    dgamma = N.sum(dy * xhat, axis=lead) if lead else dy * xhat
    g = dy * gamma
    mean_gx = N.sum(g * xhat, axis=-1, keepdims=True) / N.const(float(D), x)
    dx = r * (g - xhat * mean_gx)
    return dx, dgamma


# ---- embedding, attention, cross entropy ----------------------------------------------

def check_ids(ids, bound, what):
    ids = np.asarray(ids)
    bad = np.argwhere((ids < 0) | (ids >= bound))
    if bad.size:
        pos = tuple(int(i) for i in bad[0])
        raise ValueError(f"{what} {int(ids[pos])} at {list(pos)} is outside [0, {bound})")


def embedding(table, ids):
    check_ids(ids, table.shape[0], "id")
    return N.take_rows(table, np.asarray(ids))


def embedding_vjp(ids, dy, vocab):
    check_ids(ids, vocab, "id")
    return N.scatter_add_rows(ids, dy, vocab)


def causal_mask(sq, sk):
    """key j visible to query i iff j <= i."""
    return np.arange(sk)[None, :] <= np.arange(sq)[:, None]


def _group(q, k):
    """Query heads per key/value head (grouped-query attention: q [B, H, ...],
    k and v [B, Hkv, ...], H a multiple of Hkv)."""
    if k.shape[1] < 1 or q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads do not group over {k.shape[1]} key/value heads")
    return q.shape[1] // k.shape[1]


def _repeat_heads(x, group):
    """[B, Hkv, S, Dh] -> [B, Hkv * group, S, Dh]: query head h reads
    key/value head h // group."""
    if group == 1:
        return x
    idx = np.arange(x.shape[1] * group) // group
    if isinstance(x, N.Bounded):
        return N.Bounded(x.v[:, idx], x.e[:, idx])
    return x[:, idx]


def _sum_groups(dx, group):
    """The gradient of _repeat_heads: each key/value head's group summed."""
    if group == 1:
        return dx
    b, h, s, d = dx.shape
    return N.sum(N.reshape(dx, (b, h // group, group, s, d)), axis=2)


def attention(q, k, v, causal):
    """softmax(q k^T / sqrt(Dh)) v over [B, H, S, Dh]; k and v may have fewer
    (grouped) heads."""
    group = _group(q, k)
    k, v = _repeat_heads(k, group), _repeat_heads(v, group)
    dh = q.shape[-1]
    s = N.matmul(q, swap_last(k)) * N.const(1.0 / math.sqrt(dh), q)
    mask = None
    if causal:
        if q.shape[-2] != k.shape[-2]:
            raise ValueError("causal attention needs as many queries as keys")
        mask = np.broadcast_to(causal_mask(q.shape[-2], k.shape[-2]), s.shape)
    p = softmax(s, -1, mask)
    return N.matmul(p, v)


def attention_vjp(q, k, v, dy, causal):
    group = _group(q, k)
    dq, dk, dv = _attention_vjp(q, _repeat_heads(k, group), _repeat_heads(v, group), dy, causal)
    return dq, _sum_groups(dk, group), _sum_groups(dv, group)


def _attention_vjp(q, k, v, dy, causal):
    dh = q.shape[-1]
    scale = N.const(1.0 / math.sqrt(dh), q)
    s = N.matmul(q, swap_last(k)) * scale
    mask = None
    if causal:
        mask = np.broadcast_to(causal_mask(q.shape[-2], k.shape[-2]), s.shape)
    p = softmax(s, -1, mask)
    dv = N.matmul(swap_last(p), dy)
    dp = N.matmul(dy, swap_last(v))
    ds = softmax_vjp(p, dp, -1) * scale
    dq = N.matmul(ds, k)
    dk = N.matmul(swap_last(ds), q)
    return dq, dk, dv


def _block_positions(offset, rows, stride, zigzag):
    """Global positions of a block's rows: offset + i * stride, or under the
    zigzag layout (zigzag: the sequence's length L) two chunks of rows / 2,
    the first from `offset`, the second mirrored from the end, from
    L - rows / 2 - offset (rank r of n holds chunks r and 2n - 1 - r)."""
    if not zigzag:
        return int(offset) + stride * np.arange(rows)
    half = rows // 2
    return np.concatenate([int(offset) + np.arange(half),
                           int(zigzag) - half - int(offset) + np.arange(rows - half)])


def _block_scores(q, k, q_offset, k_offset, causal, stride=1, zigzag=0):
    """Scaled scores of q's rows against one key block, and the visibility
    mask (None: every key): key j is visible to row i when its global
    position (_block_positions) is at most the row's."""
    s = N.matmul(q, swap_last(k)) * N.const(1.0 / math.sqrt(q.shape[-1]), q)
    if not causal:
        return s, None
    key_positions = _block_positions(k_offset, k.shape[-2], stride, zigzag)
    query_positions = _block_positions(q_offset, q.shape[-2], stride, zigzag)
    mask = key_positions[None, :] <= query_positions[:, None]
    if not mask.any(axis=-1).all():
        raise ValueError("the reference models blocks whose every row sees a key")
    return s, np.broadcast_to(mask, s.shape)


def attention_block(q, k, v, q_offset, k_offset, causal, y_acc=None, lse_acc=None, stride=1, zigzag=0):
    """Ring attention's block (docs/kernels.md `attention_block`): the
    block's softmax output and row logsumexp, merged with the running ones
    when given: lse = log(e^lse_acc + e^lse_b), y = y_acc e^(lse_acc - lse)
    + y_b e^(lse_b - lse). Returns (y, lse)."""
    group = _group(q, k)
    k, v = _repeat_heads(k, group), _repeat_heads(v, group)
    s, mask = _block_scores(q, k, q_offset, k_offset, causal, stride, zigzag)
    if mask is None:
        m = N.max_stop(s, -1)
    else:
        m = N.astype_like(np.max(np.where(mask, N.val(s), -np.inf), axis=-1, keepdims=True), s)
        s = N.where(mask, s, N.broadcast_to(m, s.shape))
    e = N.exp(s - m)
    if mask is not None:
        e = e * N.astype_like(mask, s)
    total = N.sum(e, axis=-1, keepdims=True)
    y_b = N.matmul(e / total, v)
    lse_b = N.reshape(N.log(total) + m, total.shape[:-1])
    if y_acc is None:
        return y_b, lse_b
    # The larger of the two is a shift the exact result does not depend on.
    mx = N.astype_like(np.maximum(N.val(lse_acc), N.val(lse_b)), lse_b)
    lse = mx + N.log(N.exp(lse_acc - mx) + N.exp(lse_b - mx))
    col = lse.shape + (1,)
    f_acc = N.reshape(N.exp(lse_acc - lse), col)
    f_b = N.reshape(N.exp(lse_b - lse), col)
    return y_acc * f_acc + y_b * f_b, lse


def attention_block_vjp(q, k, v, q_offset, k_offset, dy, y, lse, causal, stride=1, zigzag=0):
    """One key block's terms of attention's gradient (docs/kernels.md
    `attention_block_grad`), from the whole attention's y and logsumexp:
    p = e^(s - lse), D = rowsum(dy * y). Returns (dq, dk, dv)."""
    group = _group(q, k)
    kr, vr = _repeat_heads(k, group), _repeat_heads(v, group)
    s, mask = _block_scores(q, kr, q_offset, k_offset, causal, stride, zigzag)
    p = N.exp(s - N.reshape(lse, lse.shape + (1,)))
    if mask is not None:
        p = p * N.astype_like(mask, s)
    dv = N.matmul(swap_last(p), dy)
    dp = N.matmul(dy, swap_last(vr))
    ds = p * (dp - N.sum(dy * y, axis=-1, keepdims=True)) * N.const(1.0 / math.sqrt(q.shape[-1]), q)
    dq = N.matmul(ds, kr)
    dk = N.matmul(swap_last(ds), q)
    return dq, _sum_groups(dk, group), _sum_groups(dv, group)


def _log_softmax_parts(logits):
    m = N.max_stop(logits, -1)
    lse = N.log(N.sum(N.exp(logits - m), axis=-1)) + m[..., 0]
    return lse


def _kept(labels, ignore_index):
    """The positions whose label is not ignore_index, and the labels with the
    ignored ones replaced by 0 (they may lie outside [0, V))."""
    labels = np.asarray(labels)
    keep = np.ones(labels.shape, dtype=bool) if ignore_index is None else labels != ignore_index
    return keep, np.where(keep, labels, 0)


def label_mask(labels, ignore_index):
    return _kept(labels, ignore_index)[0].astype(np.float64)


def cross_entropy(logits, labels, ignore_index=None, reduction="mean"):
    """-log softmax(logits)[label] over the label positions not equal to
    ignore_index: their mean (0 when none is kept), or with reduction "sum"
    their sum."""
    keep, safe = _kept(labels, ignore_index)
    check_ids(safe, logits.shape[-1], "label")
    lse = _log_softmax_parts(logits)
    rows = (lse - N.take_last(logits, safe)) * N.astype_like(keep, logits)
    total = N.sum(rows)
    if reduction == "sum":
        return total
    count = int(keep.sum())
    if count == 0:
        return total * N.const(0.0, logits)
    return total / N.const(float(count), logits)


def cross_entropy_grad(logits, labels, dloss, scale, ignore_index=None):
    """(softmax(logits) - onehot(label)) * dloss * scale; 0 on the rows whose
    label is ignore_index."""
    keep, safe = _kept(labels, ignore_index)
    check_ids(safe, logits.shape[-1], "label")
    p = softmax(logits, -1)
    onehot = (np.arange(logits.shape[-1]) == safe[..., None])
    return ((p - N.astype_like(onehot, logits)) * (dloss * N.const(scale, logits))
            * N.astype_like(keep[..., None], logits))


# ---- reductions and data movement -------------------------------------------------------

def reduce_sum(x, axes, keep_dims):
    axes = tuple(int(a) for a in axes)
    if not axes:
        return x
    return N.sum(x, axis=axes, keepdims=bool(keep_dims))


def reduce_mean(x, axes, keep_dims):
    axes = tuple(int(a) for a in axes)
    if not axes:
        return x
    count = 1
    for a in axes:
        count *= x.shape[a]
    return N.sum(x, axis=axes, keepdims=bool(keep_dims)) / N.const(float(count), x)


def expand_reduced(dy, shape, axes, keep_dims):
    shape = tuple(shape)
    if not keep_dims:
        kept = list(shape)
        for a in axes:
            kept[a] = 1
        dy = N.reshape(dy, tuple(kept))
    return N.broadcast_to(dy, shape)


def cast_value(x, elem):
    """dtc.cast to element type `elem` ('f32', 'i32', 'i64', ...): float to
    int truncates toward zero, NaN becomes 0, out-of-range saturates."""
    if elem in ("i32", "i64"):
        lo, hi = (-2**31, 2**31 - 1) if elem == "i32" else (-2**63, 2**63 - 1)
        if np.issubdtype(np.asarray(x).dtype, np.integer):
            return np.clip(np.asarray(x, dtype=object), lo, hi).astype(np.int64)
        f = np.asarray(N.val(x), dtype=np.float64)
        t = np.trunc(np.nan_to_num(f, nan=0.0, posinf=float(hi), neginf=float(lo)))
        out = np.where(t <= lo, lo, np.where(t >= hi, hi, 0)).astype(np.int64)
        inside = (t > lo) & (t < hi)
        out[inside] = t[inside].astype(np.int64)
        return out
    if not N.is_bounded(x) and np.issubdtype(np.asarray(x).dtype, np.integer):
        return np.asarray(x, dtype=np.float64)
    return x


# ---- optimizer updates (cli.md) ------------------------------------------------------------

def sgd_update(p, g, lr, wd):
    return p - lr * (g + wd * p)


def adam_update(p, g, m, v, step, lr, beta1, beta2, eps, wd, decoupled):
    """PyTorch Adam (L2 weight decay) / AdamW (decoupled), step = updates
    already applied (t = step + 1)."""
    t = int(step) + 1
    if not decoupled:
        g = g + wd * p
    m2 = beta1 * m + (1 - beta1) * g
    v2 = beta2 * v + (1 - beta2) * g * g
    mhat = m2 / (1 - beta1 ** t)
    vhat = v2 / (1 - beta2 ** t)
    if decoupled:
        p = p - lr * wd * p
    return p - lr * mhat / (np.sqrt(vhat) + eps), m2, v2
