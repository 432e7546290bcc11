"""Evaluates dtc IR (a parsed function) op by op, and differentiates a
model's forward function with the reference's own VJPs.

`evaluate` runs any function dtc prints at the `parsed` or `training-step`
stage: the model ops, the gradient ops the training step adds
(`*_grad`, `broadcast`) and the optimizer ops (`sgd_update`,
`adam_update`), in float64 (or float32, for noise estimates). Running dtc's
own training step this way checks dtc's gradient RULES in exact arithmetic,
apart from its f32 kernels.

`forward_and_grad` is the reference's autodiff: reverse mode over the
forward ops with ops.py's VJPs, independent of dtc's rules.
"""
import numpy as np

np.seterr(all="ignore")  # NaN/Inf are values here; the comparisons catch them

from . import mlir
from . import moe
from . import numerics as N
from . import ops


class EvalError(Exception):
    pass


LOW_MODES = ("bf16", "f16")


def _float_dtype(mode):
    return np.float64 if mode == "f64" else np.float32


# fp16-mixed scales the loss (and so every gradient) before storing
# gradients in f16, which keeps small gradients out of f16's subnormals; the
# scale in effect (dtc compile --loss-scale).
F16_GRADIENT_SCALE = 65536.0


def round_low(arr, mode, scale=1.0):
    """`arr` (f32) rounded to the mode's 16-bit format and back, round to
    nearest even: the values dtc's mixed precision stores (`scale`: stored
    times this factor). Other modes: unchanged."""
    if mode not in LOW_MODES:
        return arr
    arr = np.asarray(arr, dtype=np.float32)
    if mode == "f16":
        return ((arr * np.float32(scale)).astype(np.float16).astype(np.float32)
                / np.float32(scale))
    bits = arr.view(np.uint32).astype(np.uint64)
    # numpy scalars of one kind: a rank-0 value (a loss term) would
    # otherwise promote uint64 and a Python int to float64.
    u = np.uint64
    bits = (bits + u(0x7FFF) + ((bits >> u(16)) & u(1))) & u(0xFFFF0000)
    return bits.astype(np.uint32).view(np.float32)


def _ignore_index(op):
    """A cross entropy's ignore_index, or None."""
    v = _attr(op, "ignore_index", None)
    return None if v is None else int(v)


def _attr(op, key, default=None):
    value = op.attr(key, default)
    if isinstance(value, mlir.Typed):
        return value.value
    return value


def _ints(op, key):
    value = op.attr(key, [])
    return [int(v.value if isinstance(v, mlir.Typed) else v) for v in value]


def _result_type(op, i=0):
    return op.result_types[i]


def _eval_op(op, args, mode):
    """Values of op's results from its operands' values."""
    name = op.name
    fdt = _float_dtype(mode)
    if name == "arith.constant":
        dense = op.attr("value")
        t = dense.type
        arr = dense.array
        return [arr.astype(fdt) if t.is_float else arr.astype(np.int64)]
    short = name[4:] if name.startswith("dtc.") else None
    if short is None:
        raise EvalError(f"cannot evaluate op {name}")
    a = args
    if short in ("add", "sub", "mul", "div", "max"):
        if np.issubdtype(np.asarray(a[0]).dtype, np.integer):
            x, y = np.asarray(a[0]), np.asarray(a[1])
            if short == "div":
                if np.any(y == 0):
                    raise EvalError("integer division by zero")
                return [np.trunc(x / y).astype(np.int64)]
            return [{"add": np.add, "sub": np.subtract, "mul": np.multiply,
                     "max": np.maximum}[short](x, y)]
        fn = {"add": ops.add, "sub": ops.sub, "mul": ops.mul, "div": ops.div,
              "max": ops.maximum}[short]
        return [fn(a[0], a[1])]
    if short in ("neg", "exp", "log", "tanh", "sqrt", "rsqrt", "relu", "gelu", "silu"):
        if short == "neg" and np.issubdtype(np.asarray(a[0]).dtype, np.integer):
            return [-np.asarray(a[0])]
        return [getattr(ops, short)(a[0])]
    if short == "matmul":
        return [ops.matmul(a[0], a[1], bool(_attr(op, "transpose_a", False)),
                           bool(_attr(op, "transpose_b", False)))]
    if short == "softmax":
        return [ops.softmax(a[0], int(_attr(op, "axis")))]
    if short == "layer_norm":
        return [ops.layer_norm(a[0], a[1], a[2], float(_attr(op, "epsilon")))]
    if short == "rms_norm":
        return [ops.rms_norm(a[0], a[1], float(_attr(op, "epsilon")))]
    if short == "embedding":
        return [ops.embedding(a[0], a[1])]
    if short == "attention":
        return [ops.attention(a[0], a[1], a[2], bool(_attr(op, "causal", False)))]
    if short == "cross_entropy":
        return [ops.cross_entropy(a[0], a[1], _ignore_index(op), _attr(op, "reduction", "mean"))]
    if short == "label_mask":
        return [ops.label_mask(a[0], _ignore_index(op))]
    if short.startswith("moe") or short == "load_balancing_loss":
        return _eval_moe(op, short, a)
    if short in ("reduce_sum", "reduce_mean"):
        fn = ops.reduce_sum if short == "reduce_sum" else ops.reduce_mean
        x = a[0]
        if short == "reduce_sum" and np.issubdtype(np.asarray(x).dtype, np.integer):
            return [np.sum(x, axis=tuple(_ints(op, "axes")), keepdims=bool(_attr(op, "keep_dims", False)))]
        return [fn(x, _ints(op, "axes"), bool(_attr(op, "keep_dims", False)))]
    if short == "reshape":
        return [np.reshape(a[0], _result_type(op).shape)]
    if short == "transpose":
        return [np.transpose(a[0], _ints(op, "permutation"))]
    if short == "cast":
        t = _result_type(op)
        out = ops.cast_value(a[0], t.elem)
        if t.is_float:
            out = np.asarray(out, dtype=fdt)
        return [out]
    if short in ("broadcast", "copy"):
        return [np.broadcast_to(a[0], _result_type(op).shape).copy()]
    # Gradient ops of the training step.
    if short == "relu_grad":
        return [a[1] * (a[0] > 0).astype(fdt)]
    if short == "gelu_grad":
        return [a[1] * ops.gelu_derivative(a[0])]
    if short == "silu_grad":
        return [a[1] * ops.silu_derivative(a[0])]
    if short == "max_grad":
        shape = np.shape(a[2])
        lhs, rhs = np.broadcast_to(a[0], shape), np.broadcast_to(a[1], shape)
        zero = np.zeros(shape, dtype=fdt)
        return [np.where(lhs >= rhs, a[2], zero), np.where(rhs > lhs, a[2], zero)]
    if short == "softmax_grad":
        return [ops.softmax_vjp(a[0], a[1], int(_attr(op, "axis")))]
    if short == "layer_norm_grad":
        return list(ops.layer_norm_vjp(a[0], a[1], a[2], float(_attr(op, "epsilon"))))
    if short == "rms_norm_grad":
        return list(ops.rms_norm_vjp(a[0], a[1], a[2], float(_attr(op, "epsilon"))))
    # The pipeline's split norm gradients: B (dx) and W (the parameters'
    # gradients, which do not depend on gamma).
    if short in ("layer_norm_input_grad", "rms_norm_input_grad"):
        vjp = ops.layer_norm_vjp if short.startswith("layer") else ops.rms_norm_vjp
        return [vjp(a[0], a[1], a[2], float(_attr(op, "epsilon")))[0]]
    if short in ("layer_norm_param_grad", "rms_norm_param_grad"):
        vjp = ops.layer_norm_vjp if short.startswith("layer") else ops.rms_norm_vjp
        ones = np.ones(np.shape(a[0])[-1:], dtype=np.asarray(a[0]).dtype)
        return list(vjp(a[0], ones, a[1], float(_attr(op, "epsilon")))[1:])
    if short == "embedding_grad":
        return [ops.embedding_vjp(a[0], a[1], _result_type(op).shape[0])]
    if short == "attention_grad":
        return list(ops.attention_vjp(a[0], a[1], a[2], a[3], bool(_attr(op, "causal", False))))
    if short == "cross_entropy_grad":
        return [ops.cross_entropy_grad(a[0], a[1], a[2], float(_attr(op, "scale")),
                                       _ignore_index(op))]
    if short == "sgd_update":
        return [_rounded(ops.sgd_update(_f64(a[0]), _f64(a[1]), float(_attr(op, "lr")),
                                        float(_attr(op, "weight_decay"))), fdt)]
    if short == "adam_update":
        p, m, v = ops.adam_update(
            _f64(a[0]), _f64(a[1]), _f64(a[2]), _f64(a[3]), int(a[4]),
            float(_attr(op, "lr")), float(_attr(op, "beta1")), float(_attr(op, "beta2")),
            float(_attr(op, "eps")), float(_attr(op, "weight_decay")), bool(_attr(op, "decoupled")))
        return [_rounded(p, fdt), _rounded(m, fdt), _rounded(v, fdt)]
    raise EvalError(f"cannot evaluate op {name}")


def _eval_moe(op, short, a):
    """The mixture-of-experts ops (dtcref/moe.py): the two model ops and the
    kernels dtc writes dtc.moe in."""
    if short == "moe":
        return [moe.moe(a[0], a[1], a[2], a[3], int(_attr(op, "top_k")),
                        float(_attr(op, "capacity_factor")))[0]]
    if short == "load_balancing_loss":
        return [moe.load_balancing_loss(a[0], a[1])]
    if short == "moe_route":
        return list(moe.route(a[0], int(_attr(op, "top_k")), int(_attr(op, "capacity"))))
    if short == "moe_route_grad":
        return [moe.route_grad(a[0], a[1], a[2])]
    if short == "moe_dispatch":
        return [moe.dispatch(a[0], a[1], a[2], a[3], _result_type(op).shape)]
    if short == "moe_combine":
        return [moe.combine(a[0], a[1], a[2], a[3])]
    if short == "moe_slot_dot":
        return [moe.slot_dot(a[0], a[1], a[2], a[3])]
    if short == "moe_first_choice_fraction":
        return [moe.first_choice_fraction(a[0], _result_type(op).shape[0])]
    raise EvalError(f"cannot evaluate op {op.name}")


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def _rounded(x, fdt):
    """The optimizer ops compute per element in double and store the result."""
    return np.asarray(x).astype(fdt)


def evaluate(func, arg_values, mode="f64", keep=False):
    """Runs `func` on `arg_values` (one per argument, in order). Returns the
    returned values, or (returned, every SSA value) with keep=True."""
    if len(arg_values) != len(func.args):
        raise EvalError(f"@{func.name} takes {len(func.args)} arguments, got {len(arg_values)}")
    env = {}
    fdt = _float_dtype(mode)
    for (ssa, t), value in zip(func.args, arg_values):
        arr = np.asarray(value)
        arr = round_low(arr.astype(fdt), mode) if t.is_float else arr.astype(np.int64)
        if tuple(arr.shape) != t.shape:
            raise EvalError(f"argument {ssa} has shape {arr.shape}, expected {t}")
        env[ssa] = arr
    for op in func.ops:
        try:
            outs = _eval_op(op, [env[o] for o in op.operands], mode)
        except KeyError as e:
            raise EvalError(f"{op}: undefined value {e}") from None
        for name, t, value in zip(op.results, op.result_types, outs):
            value = np.asarray(value)
            if isinstance(t, mlir.TensorType):
                if tuple(value.shape) != t.shape:
                    raise EvalError(f"{op}: result shape {value.shape}, declared {t}")
                value = value.astype(fdt) if t.is_float else value.astype(np.int64)
                # Mixed precision: every activation is stored in 16 bits,
                # the loss in f32.
                if t.is_float and name not in func.returned:
                    value = round_low(value, mode)
            env[name] = value
    returned = [env[r] for r in func.returned]
    return (returned, env) if keep else returned


# ---- the reference's autodiff ---------------------------------------------------------

def _vjp(op, args, result, dy, mode):
    """Gradients of op's operands (None for integer or constant ones)."""
    short = op.name[4:] if op.name.startswith("dtc.") else op.name
    a = args
    if short == "add":
        return [ops.unbroadcast(dy, a[0].shape), ops.unbroadcast(dy, a[1].shape)]
    if short == "sub":
        return [ops.unbroadcast(dy, a[0].shape), ops.unbroadcast(-dy, a[1].shape)]
    if short == "mul":
        return [ops.unbroadcast(dy * a[1], a[0].shape), ops.unbroadcast(dy * a[0], a[1].shape)]
    if short == "div":
        return [ops.unbroadcast(dy / a[1], a[0].shape),
                ops.unbroadcast(-dy * a[0] / (a[1] * a[1]), a[1].shape)]
    if short == "max":
        shape = dy.shape
        lhs, rhs = np.broadcast_to(a[0], shape), np.broadcast_to(a[1], shape)
        to_lhs = lhs >= rhs  # ties: the whole gradient goes to lhs
        zero = np.zeros_like(dy)
        return [ops.unbroadcast(np.where(to_lhs, dy, zero), a[0].shape),
                ops.unbroadcast(np.where(to_lhs, zero, dy), a[1].shape)]
    if short == "neg":
        return [-dy]
    if short == "exp":
        return [dy * result]
    if short == "log":
        return [dy / a[0]]
    if short == "tanh":
        return [dy * (1 - result * result)]
    if short == "sqrt":
        return [dy / (2 * result)]
    if short == "rsqrt":
        return [dy * (-0.5) * result * result * result]
    if short == "relu":
        return [dy * (a[0] > 0)]  # relu'(0) = 0
    if short == "gelu":
        return [dy * ops.gelu_derivative(a[0])]
    if short == "silu":
        return [dy * ops.silu_derivative(a[0])]
    if short == "matmul":
        ta, tb = bool(_attr(op, "transpose_a", False)), bool(_attr(op, "transpose_b", False))
        x = ops.swap_last(a[0]) if ta else a[0]
        w = ops.swap_last(a[1]) if tb else a[1]
        da, db = ops.matmul_vjp(x, w, dy)
        return [ops.swap_last(da) if ta else da, ops.swap_last(db) if tb else db]
    if short == "softmax":
        return [ops.softmax_vjp(result, dy, int(_attr(op, "axis")))]
    if short == "layer_norm":
        return list(ops.layer_norm_vjp(a[0], a[1], dy, float(_attr(op, "epsilon"))))
    if short == "rms_norm":
        return list(ops.rms_norm_vjp(a[0], a[1], dy, float(_attr(op, "epsilon"))))
    if short == "embedding":
        return [ops.embedding_vjp(a[1], dy, a[0].shape[0]), None]
    if short == "attention":
        return list(ops.attention_vjp(a[0], a[1], a[2], dy, bool(_attr(op, "causal", False))))
    if short == "cross_entropy":
        ignore = _ignore_index(op)
        keep = np.asarray(a[1]) != ignore if ignore is not None else np.ones(np.shape(a[1]), bool)
        count = 1 if _attr(op, "reduction", "mean") == "sum" else max(int(keep.sum()), 1)
        return [ops.cross_entropy_grad(a[0], a[1], dy, 1.0 / count, ignore), None]
    if short in ("reduce_sum", "reduce_mean"):
        axes = _ints(op, "axes")
        g = ops.expand_reduced(dy, a[0].shape, axes, bool(_attr(op, "keep_dims", False)))
        if short == "reduce_mean" and axes:
            count = 1
            for ax in axes:
                count *= a[0].shape[ax]
            g = g / count
        return [g]
    if short == "moe":
        return list(moe.moe_vjp(a[0], a[1], a[2], a[3], int(_attr(op, "top_k")),
                                float(_attr(op, "capacity_factor")), dy))
    if short == "load_balancing_loss":
        return list(moe.load_balancing_loss_vjp(a[0], a[1], dy))
    if short == "reshape":
        return [np.reshape(dy, a[0].shape)]
    if short == "transpose":
        perm = _ints(op, "permutation")
        return [np.transpose(dy, np.argsort(perm))]
    if short == "broadcast":
        return [ops.unbroadcast(dy, a[0].shape)]
    if short == "cast":
        src_float = not np.issubdtype(np.asarray(a[0]).dtype, np.integer)
        return [dy if src_float and _result_type(op).is_float else None]
    if short == "arith.constant":
        return []
    raise EvalError(f"no reference gradient for {op.name}")


def forward_and_grad(func, arg_values, wrt, mode="f64"):
    """The loss (the single returned value) and d loss / d argument for each
    argument index in `wrt`."""
    (loss,), env = evaluate(func, arg_values, mode, keep=True)
    fdt = _float_dtype(mode)
    grads = {func.returned[0]: np.ones((), dtype=fdt)}
    for op in reversed(func.ops):
        dys = [grads.get(r) for r in op.results]
        if all(d is None for d in dys) or op.name == "arith.constant":
            continue
        if len(op.results) != 1:
            raise EvalError(f"cannot differentiate multi-result op {op.name}")
        args = [env[o] for o in op.operands]
        outs = _vjp(op, args, env[op.results[0]], dys[0], mode)
        for operand, g in zip(op.operands, outs):
            if g is None or np.issubdtype(np.asarray(env[operand]).dtype, np.integer):
                continue
            g = round_low(np.asarray(g, dtype=fdt), mode, F16_GRADIENT_SCALE)
            if g.shape != np.shape(env[operand]):
                raise EvalError(f"{op}: gradient of shape {g.shape} for {operand} {np.shape(env[operand])}")
            grads[operand] = (round_low(grads[operand] + g, mode, F16_GRADIENT_SCALE)
                              if operand in grads else g)
    out = {}
    for i in wrt:
        ssa, t = func.args[i]
        out[i] = grads.get(ssa, np.zeros(t.shape, dtype=fdt))
    return loss, out
