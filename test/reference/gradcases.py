"""One small model per gradient rule: loss = sum(op(...) * r), r a random
data input of op's output shape, so every output element's gradient
matters with a different weight. W(...) arguments are parameters, X(...)
float data inputs, IDS(...) integer inputs."""


def W(name, type, init="normal(1)"):
    return f'%{name}: {type} {{dtc.param, dtc.name = "{name}", dtc.init = "{init}"}}'


def X(name, type):
    return f'%{name}: {type} {{dtc.name = "{name}"}}'


def IDS(name, type, mx):
    return f'%{name}: {type} {{dtc.name = "{name}", dtc.max = {mx} : i64}}'


def _rank(type):
    body = type[len("tensor<"):-1]
    return body.count("x")


def model_text(args, body, out_type):
    """The model: `body` computes %out of `out_type` from `args`."""
    rank = _rank(out_type)
    proj = out_type if rank else "tensor<1xf32>"
    axes = ", ".join(str(i) for i in range(max(rank, 1)))
    return (f"func.func @main({', '.join(args)}, %r: {proj} {{dtc.name = \"r\"}}) -> tensor<f32> {{\n"
            f"{body}\n"
            f"  %proj = \"dtc.mul\"(%out, %r) : ({out_type}, {proj}) -> {proj}\n"
            f"  %loss = \"dtc.reduce_sum\"(%proj) {{axes = array<i64: {axes}>}} : ({proj}) -> tensor<f32>\n"
            f"  return %loss : tensor<f32>\n}}\n")


def unary(op, init="normal(1)", shape="tensor<3x5xf32>"):
    return ([W("a", shape, init)], f'  %out = "dtc.{op}"(%a) : ({shape}) -> {shape}', shape)


def binary(op, ta, tb, to, init_b="normal(1)"):
    return ([W("a", ta), W("b", tb, init_b)], f'  %out = "dtc.{op}"(%a, %b) : ({ta}, {tb}) -> {to}', to)


def _t(shape):
    return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"


def matmul_case(a_shape, b_shape, ta, tb):
    """matmul of a (transposed first when ta) and b (when tb), through
    explicit dtc.transpose ops the emitter folds into sgemm flags."""
    a_store = list(a_shape)
    b_store = list(b_shape)
    if ta:
        a_store[-1], a_store[-2] = a_store[-2], a_store[-1]
    if tb:
        b_store[-1], b_store[-2] = b_store[-2], b_store[-1]
    lines = []
    a_val, b_val = "%a", "%b"
    if ta:
        perm = ", ".join(str(i) for i in list(range(len(a_shape) - 2)) + [len(a_shape) - 1, len(a_shape) - 2])
        lines.append(f'  %at = "dtc.transpose"(%a) {{permutation = array<i64: {perm}>}} : ({_t(a_store)}) -> {_t(a_shape)}')
        a_val = "%at"
    if tb:
        perm = ", ".join(str(i) for i in list(range(len(b_shape) - 2)) + [len(b_shape) - 1, len(b_shape) - 2])
        lines.append(f'  %bt = "dtc.transpose"(%b) {{permutation = array<i64: {perm}>}} : ({_t(b_store)}) -> {_t(b_shape)}')
        b_val = "%bt"
    import numpy as np
    out = list(np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))) + [a_shape[-2], b_shape[-1]]
    lines.append(f'  %out = "dtc.matmul"({a_val}, {b_val}) : ({_t(a_shape)}, {_t(b_shape)}) -> {_t(out)}')
    return [W("a", _t(a_store)), W("b", _t(b_store))], "\n".join(lines), _t(out)


CASES = {
    "add_broadcast": binary("add", "tensor<3x4xf32>", "tensor<4xf32>", "tensor<3x4xf32>"),
    "sub_broadcast": binary("sub", "tensor<3x1xf32>", "tensor<2x3x4xf32>", "tensor<2x3x4xf32>"),
    "mul_scalar": binary("mul", "tensor<3x4xf32>", "tensor<f32>", "tensor<3x4xf32>"),
    "div": binary("div", "tensor<3x4xf32>", "tensor<3x1xf32>", "tensor<3x4xf32>", "uniform(1,2)"),
    "max": binary("max", "tensor<3x4xf32>", "tensor<4xf32>", "tensor<3x4xf32>"),
    "neg": unary("neg"),
    "exp": unary("exp"),
    "log": unary("log", "uniform(0.5,3)"),
    "tanh": unary("tanh"),
    "sqrt": unary("sqrt", "uniform(0.5,3)"),
    "rsqrt": unary("rsqrt", "uniform(0.5,3)"),
    "relu": unary("relu"),
    "gelu": unary("gelu", "normal(2)"),
    "silu": unary("silu", "normal(2)"),
    "softmax_last": ([W("a", "tensor<3x6xf32>")],
                     '  %out = "dtc.softmax"(%a) {axis = 1 : i64} : (tensor<3x6xf32>) -> tensor<3x6xf32>',
                     "tensor<3x6xf32>"),
    "softmax_first": ([W("a", "tensor<4x3xf32>")],
                      '  %out = "dtc.softmax"(%a) {axis = 0 : i64} : (tensor<4x3xf32>) -> tensor<4x3xf32>',
                      "tensor<4x3xf32>"),
    "layer_norm": ([W("x", "tensor<3x8xf32>"), W("g", "tensor<8xf32>"), W("b", "tensor<8xf32>")],
                   '  %out = "dtc.layer_norm"(%x, %g, %b) {epsilon = 1.0e-5 : f32} : (tensor<3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<3x8xf32>',
                   "tensor<3x8xf32>"),
    "layer_norm_big_eps": ([W("x", "tensor<2x3x5xf32>", "normal(0.3)"), W("g", "tensor<5xf32>"), W("b", "tensor<5xf32>")],
                           '  %out = "dtc.layer_norm"(%x, %g, %b) {epsilon = 0.25 : f32} : (tensor<2x3x5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>',
                           "tensor<2x3x5xf32>"),
    "rms_norm": ([W("x", "tensor<2x3x8xf32>"), W("g", "tensor<8xf32>")],
                 '  %out = "dtc.rms_norm"(%x, %g) {epsilon = 1.0e-5 : f32} : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>',
                 "tensor<2x3x8xf32>"),
    "embedding": ([W("t", "tensor<7x4xf32>"), IDS("ids", "tensor<3x5xi32>", 7)],
                  '  %out = "dtc.embedding"(%t, %ids) : (tensor<7x4xf32>, tensor<3x5xi32>) -> tensor<3x5x4xf32>',
                  "tensor<3x5x4xf32>"),
    "attention_causal": ([W("q", "tensor<2x2x5x4xf32>"), W("k", "tensor<2x2x5x4xf32>"), W("v", "tensor<2x2x5x4xf32>")],
                         '  %out = "dtc.attention"(%q, %k, %v) {causal = true} : (tensor<2x2x5x4xf32>, tensor<2x2x5x4xf32>, tensor<2x2x5x4xf32>) -> tensor<2x2x5x4xf32>',
                         "tensor<2x2x5x4xf32>"),
    "attention_cross": ([W("q", "tensor<1x2x3x4xf32>"), W("k", "tensor<1x2x6x4xf32>"), W("v", "tensor<1x2x6x4xf32>")],
                        '  %out = "dtc.attention"(%q, %k, %v) {causal = false} : (tensor<1x2x3x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x3x4xf32>',
                        "tensor<1x2x3x4xf32>"),
    "cross_entropy": ([W("logits", "tensor<3x4x6xf32>"), IDS("y", "tensor<3x4xi32>", 6)],
                      '  %out = "dtc.cross_entropy"(%logits, %y) : (tensor<3x4x6xf32>, tensor<3x4xi32>) -> tensor<f32>',
                      "tensor<f32>"),
    "reduce_sum": ([W("a", "tensor<2x3x4xf32>")],
                   '  %out = "dtc.reduce_sum"(%a) {axes = array<i64: 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3xf32>',
                   "tensor<3xf32>"),
    "reduce_sum_keep": ([W("a", "tensor<2x3x4xf32>")],
                        '  %out = "dtc.reduce_sum"(%a) {axes = array<i64: 1>, keep_dims = true} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>',
                        "tensor<2x1x4xf32>"),
    "reduce_mean": ([W("a", "tensor<2x3x4xf32>")],
                    '  %out = "dtc.reduce_mean"(%a) {axes = array<i64: 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2xf32>',
                    "tensor<2xf32>"),
    "reduce_mean_keep": ([W("a", "tensor<2x3x4xf32>")],
                         '  %out = "dtc.reduce_mean"(%a) {axes = array<i64: 0>, keep_dims = true} : (tensor<2x3x4xf32>) -> tensor<1x3x4xf32>',
                         "tensor<1x3x4xf32>"),
    "reshape": ([W("a", "tensor<2x6xf32>")],
                '  %out = "dtc.reshape"(%a) : (tensor<2x6xf32>) -> tensor<3x4xf32>', "tensor<3x4xf32>"),
    "transpose": ([W("a", "tensor<2x3x4xf32>")],
                  '  %out = "dtc.transpose"(%a) {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>',
                  "tensor<4x2x3xf32>"),
    "cast": ([W("a", "tensor<5xf32>")], '  %out = "dtc.cast"(%a) : (tensor<5xf32>) -> tensor<5xf32>', "tensor<5xf32>"),
    "broadcast": ([W("a", "tensor<3x1xf32>")],
                  '  %out = "dtc.broadcast"(%a) : (tensor<3x1xf32>) -> tensor<2x3x4xf32>', "tensor<2x3x4xf32>"),
    "composite_block": ([W("x", "tensor<2x4x8xf32>"), W("w", "tensor<8x8xf32>", "normal(0.3)"), W("g", "tensor<8xf32>", "ones")],
                        '  %n = "dtc.rms_norm"(%x, %g) {epsilon = 1.0e-5 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>\n'
                        '  %h = "dtc.matmul"(%n, %w) : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>\n'
                        '  %s = "dtc.silu"(%h) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>\n'
                        '  %h2 = "dtc.matmul"(%s, %w) : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>\n'
                        '  %out = "dtc.add"(%x, %h2) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>',
                        "tensor<2x4x8xf32>"),
}

# Every transpose_a/transpose_b combination, plain, batched and broadcast
# (non-square, so a swapped operand cannot go unnoticed).
_MATMUL_SHAPES = {
    "2d": ([3, 5], [5, 4]),
    "batched": ([2, 3, 5], [2, 5, 4]),
    "shared_weight": ([2, 3, 5], [5, 4]),
    "broadcast_a": ([3, 5], [2, 5, 4]),
    "broadcast_both": ([2, 1, 3, 5], [3, 5, 4]),
}
for _kind, (_a, _b) in _MATMUL_SHAPES.items():
    for _ta in (False, True):
        for _tb in (False, True):
            CASES[f"matmul_{_kind}{'_ta' if _ta else ''}{'_tb' if _tb else ''}"] = matmul_case(_a, _b, _ta, _tb)


def case_text(name):
    args, body, out = CASES[name]
    return model_text(args, body, out)
