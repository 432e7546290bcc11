"""Mixture of experts, written from the model format (docs/model-format.md
"Mixture of experts"), independently of how dtc decomposes it:

  moe(x [T, D], router [D, E], w_in [E, D, F], w_out [E, F, D], top_k, cf)
  load_balancing_loss(x, router) = E * sum_e f_e * P_e

and their vector-Jacobian products, in the arrays' own precision (float64
for the reference, float32 for the noise runs). The kernels dtc's
decomposition runs (moe_route, moe_dispatch, ...) are here too, for
evaluating a training step op by op (interp.evaluate).
"""
import math

import numpy as np

from . import ops


def capacity(capacity_factor, tokens, top_k, experts):
    """Rows of each expert's buffer: ceil(cf * T * top_k / E), where a
    product within a millionth of an integer is that integer (an f32
    attribute's 1.1 is 1.10000002), at least 1 and at most T."""
    rows = float(capacity_factor) * tokens * top_k / experts
    return min(max(math.ceil(rows - 1e-6 * max(1.0, rows)), 1), tokens)


def route(probs, top_k, cap):
    """experts, positions (-1: dropped) and renormalised weights, [T, k]."""
    T, E = probs.shape
    order = np.argsort(-np.asarray(probs, dtype=np.float64), axis=1, kind="stable")
    experts = order[:, :top_k]
    chosen = np.take_along_axis(probs, experts, axis=1)
    weights = chosen / np.sum(chosen, axis=1, keepdims=True)
    used = np.zeros(E, dtype=np.int64)
    positions = np.full((T, top_k), -1, dtype=np.int64)
    for t in range(T):  # token order: earlier tokens take the rows first
        for j in range(top_k):
            e = experts[t, j]
            if used[e] < cap:
                positions[t, j] = used[e]
                used[e] += 1
    return experts, positions, weights


def _router(x, router):
    return ops.softmax(ops.matmul(x, router), 1)


def moe(x, router, w_in, w_out, top_k, capacity_factor):
    """The result [T, D] and what the VJP needs."""
    T, D = x.shape
    E = router.shape[1]
    probs = _router(x, router)
    experts, positions, weights = route(probs, top_k, capacity(capacity_factor, T, top_k, E))
    y = np.zeros_like(x)
    for e in range(E):
        t, j = np.nonzero((experts == e) & (positions >= 0))
        if len(t):
            h = ops.matmul(x[t], w_in[e])
            out = ops.matmul(ops.gelu(h), w_out[e])
            y[t] += weights[t, j][:, None] * out
    return y, (probs, experts, positions, weights)


def moe_vjp(x, router, w_in, w_out, top_k, capacity_factor, dy):
    """Gradients of x, router, w_in and w_out."""
    _, (probs, experts, positions, weights) = moe(x, router, w_in, w_out, top_k, capacity_factor)
    E = router.shape[1]
    dx = np.zeros_like(x)
    dw_in, dw_out = np.zeros_like(w_in), np.zeros_like(w_out)
    dweights = np.zeros_like(weights)
    for e in range(E):
        t, j = np.nonzero((experts == e) & (positions >= 0))
        if not len(t):
            continue
        h = ops.matmul(x[t], w_in[e])
        a = ops.gelu(h)
        out = ops.matmul(a, w_out[e])
        dweights[t, j] = np.sum(dy[t] * out, axis=1)
        dout = weights[t, j][:, None] * dy[t]
        dw_out[e] = ops.matmul(a.T, dout)
        dh = ops.matmul(dout, w_out[e].T) * ops.gelu_derivative(h)
        dw_in[e] = ops.matmul(x[t].T, dh)
        np.add.at(dx, t, ops.matmul(dh, w_in[e].T))
    dprobs = route_grad(probs, experts, dweights)
    dlogits = ops.softmax_vjp(probs, dprobs, 1)
    dx = dx + ops.matmul(dlogits, router.T)
    return dx, ops.matmul(x.T, dlogits), dw_in, dw_out


def route_grad(probs, experts, dweights):
    """d(weights)/d(probs)^T dweights: the renormalisation's derivative."""
    chosen = np.take_along_axis(probs, experts, axis=1)
    total = np.sum(chosen, axis=1, keepdims=True)
    weights = chosen / total
    inner = np.sum(dweights * weights, axis=1, keepdims=True)
    dprobs = np.zeros_like(probs)
    np.put_along_axis(dprobs, experts, (dweights - inner) / total, axis=1)
    return dprobs


def first_choice_fraction(experts, num_experts):
    return np.bincount(np.asarray(experts)[:, 0], minlength=num_experts) / experts.shape[0]


def load_balancing_loss(x, router):
    probs = _router(x, router)
    E = probs.shape[1]
    f = first_choice_fraction(np.argmax(probs, axis=1)[:, None], E).astype(probs.dtype)
    return E * np.sum(f * np.mean(probs, axis=0))


def load_balancing_loss_vjp(x, router, dloss):
    probs = _router(x, router)
    T, E = probs.shape
    f = first_choice_fraction(np.argmax(probs, axis=1)[:, None], E).astype(probs.dtype)
    dprobs = np.broadcast_to(dloss * E * f / T, probs.shape)
    dlogits = ops.softmax_vjp(probs, dprobs, 1)
    return ops.matmul(dlogits, router.T), ops.matmul(x.T, dlogits)


# ---- the kernels of dtc's decomposition -------------------------------------------------

def _slots(experts, positions, buffer_rows):
    t, j = np.nonzero(positions >= 0)
    return t, j, experts[t, j] * buffer_rows + positions[t, j]


def dispatch(x, experts, positions, weights, buffer_shape):
    E, C, D = buffer_shape
    buf = np.zeros((E * C, D), dtype=x.dtype)
    t, j, rows = _slots(experts, positions, C)
    buf[rows] = weights[t, j][:, None] * x[t]
    return buf.reshape(E, C, D)


def combine(y, experts, positions, weights):
    E, C, D = y.shape
    out = np.zeros((experts.shape[0], D), dtype=y.dtype)
    t, j, rows = _slots(experts, positions, C)
    np.add.at(out, t, weights[t, j][:, None] * y.reshape(E * C, D)[rows])
    return out


def slot_dot(a, y, experts, positions):
    E, C, D = y.shape
    out = np.zeros(experts.shape, dtype=a.dtype)
    t, j, rows = _slots(experts, positions, C)
    out[t, j] = np.sum(a[t] * y.reshape(E * C, D)[rows], axis=1)
    return out
