//===- Rules.cpp - check rules of every kernel (docs/kernels.md) ----------===//
//
// Backend independent. Each rule throws dtc::rt::Error with a message that
// says what is wrong (the caller adds the file, program and instruction).
//
//===----------------------------------------------------------------------===//
#include "RuleChecks.h"
#include "dtc/kernels/Kernel.h"
#include "dtc/kernels/LearningRate.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace dtc::kernels {

using namespace rules;

namespace {

// ---- rules ---------------------------------------------------------------

// Optional transpose_a / transpose_b: the operand holds its last two dims
// swapped ([..., K, M] for a, [..., N, K] for b).
void checkMatmul(const Descs &in, const Descs &out, const json &attrs) {
  const TensorDesc &a = in[0], &b = in[1];
  needFloat(a, "a");
  if (b.dtype != a.dtype)
    fail("a " + desc(a) + " and b " + desc(b) + " have different dtypes");
  needDtype(out[0], a.dtype, "the result");
  needRankAtLeast(a, 2, "a");
  needRankAtLeast(b, 2, "b");
  const bool ta = optBool(attrs, "transpose_a"),
             tb = optBool(attrs, "transpose_b");
  const size_t ra = a.shape.size(), rb = b.shape.size();
  int64_t M = a.shape[ra - (ta ? 1 : 2)], K = a.shape[ra - (ta ? 2 : 1)];
  int64_t K2 = b.shape[rb - (tb ? 1 : 2)], N = b.shape[rb - (tb ? 2 : 1)];
  if (K != K2)
    fail("contraction sizes differ: a is " + desc(a) + ", b is " + desc(b));
  Shape ba(a.shape.begin(), a.shape.end() - 2),
      bb(b.shape.begin(), b.shape.end() - 2);
  Shape batch;
  if (!broadcastShapes(ba, bb, batch))
    fail("batch dimensions of a " + desc(a) + " and b " + desc(b) +
         " do not broadcast");
  batch.push_back(M);
  batch.push_back(N);
  needShape(out[0], batch, "the result");
}

// The fused epilogues: matmul's rule on a, b and the result, then a bias
// [N] (the result's last dimension) of a's dtype, and matmul_gelu's
// pre-activation shaped like its result.
void checkEpilogueBias(const TensorDesc &bias, const TensorDesc &a,
                       const TensorDesc &result) {
  needDtype(bias, a.dtype, "bias");
  needShape(bias, Shape{result.shape.back()}, "bias");
}

void checkMatmulBias(const Descs &in, const Descs &out, const json &attrs) {
  checkMatmul(in, out, attrs);
  checkEpilogueBias(in[2], in[0], out[0]);
}

void checkMatmulGelu(const Descs &in, const Descs &out, const json &attrs) {
  checkMatmul(in, out, attrs);
  if (in.size() > 2)
    checkEpilogueBias(in[2], in[0], out[0]);
  needLike(out[1], out[0], "pre_activation", "the result");
}

enum class DT { Float, Any, IntOrFloat };

template <DT kinds>
void checkBinary(const Descs &in, const Descs &out, const json &) {
  const TensorDesc &l = in[0], &r = in[1];
  if (kinds == DT::Float) {
    needFloat(l, "lhs");
  }
  if (l.dtype != r.dtype)
    fail("lhs " + desc(l) + " and rhs " + desc(r) + " have different dtypes");
  needDtype(out[0], l.dtype, "the result");
  Shape s;
  if (!broadcastShapes(l.shape, r.shape, s))
    fail("shapes " + shapeStr(l.shape) + " and " + shapeStr(r.shape) +
         " do not broadcast");
  needShape(out[0], s, "the result");
}

template <DT kinds>
void checkUnary(const Descs &in, const Descs &out, const json &) {
  if (kinds == DT::Float)
    needFloat(in[0], "x");
  needLike(out[0], in[0], "the result", "x");
}

void checkSoftmax(const Descs &in, const Descs &out, const json &attrs) {
  needFloat(in[0], "x");
  needRankAtLeast(in[0], 1, "x");
  reqAxis(attrs, "axis", in[0].shape.size());
  needLike(out[0], in[0], "the result", "x");
}

void checkEps(const json &attrs) {
  if (reqNum(attrs, "epsilon") < 0)
    fail("attribute 'epsilon' must be >= 0");
}

void checkNormParams(const TensorDesc &x, const TensorDesc &p,
                     const char *what) {
  needDtype(p, x.dtype, what);
  needShape(p, Shape{x.shape.back()}, what);
}

void checkLayerNorm(const Descs &in, const Descs &out, const json &attrs) {
  needFloat(in[0], "x");
  needRankAtLeast(in[0], 1, "x");
  checkNormParams(in[0], in[1], "gamma");
  checkNormParams(in[0], in[2], "beta");
  checkEps(attrs);
  needLike(out[0], in[0], "the result", "x");
}

void checkRmsNorm(const Descs &in, const Descs &out, const json &attrs) {
  needFloat(in[0], "x");
  needRankAtLeast(in[0], 1, "x");
  checkNormParams(in[0], in[1], "gamma");
  checkEps(attrs);
  needLike(out[0], in[0], "the result", "x");
}

void checkEmbedding(const Descs &in, const Descs &out, const json &) {
  const TensorDesc &table = in[0], &ids = in[1];
  needFloat(table, "table");
  if (table.shape.size() != 2)
    fail("table must have rank 2 [V, D], got " + desc(table));
  needInt(ids, "ids");
  Shape s = ids.shape;
  s.push_back(table.shape[1]);
  needDtype(out[0], table.dtype, "the result");
  needShape(out[0], s, "the result");
}

// q [B, H, Sq, Dh]; k, v [B, H, Sk, Dh]; dy like q. Causal needs Sq == Sk.
void checkQueryKeyValue(const Descs &in) {
  needFloat(in[0], "q");
  if (in[0].shape.size() != 4)
    fail("q must have rank 4 [B, H, S, Dh], got " + desc(in[0]));
  const TensorDesc &q = in[0], &k = in[1];
  // Grouped keys and values: Hkv heads, each shared by H / Hkv query heads.
  if (k.dtype != q.dtype)
    fail("k must have q's dtype (q is " + desc(q) + "), got " + desc(k));
  if (k.shape.size() != 4 || k.shape[0] != q.shape[0] || k.shape[1] < 1 ||
      q.shape[1] % k.shape[1] != 0 || k.shape[3] != q.shape[3])
    fail("k must be [B, Hkv, Sk, Dh] with q's B and Dh and Hkv dividing q's "
         "H (q is " +
         desc(q) + "), got " + desc(k));
  needLike(in[2], k, "v", "k");
}

void checkAttentionOperands(const Descs &in, size_t n, const json &attrs) {
  checkQueryKeyValue(in);
  const TensorDesc &q = in[0], &k = in[1];
  if (n > 3)
    needLike(in[3], q, "dy", "q");
  if (reqBool(attrs, "causal") && k.shape[2] != q.shape[2])
    fail("causal attention needs as many keys as queries, got " + desc(q) +
         " and " + desc(k));
}

// attention_block and attention_block_grad: q, k, v as attention's (any
// number of keys, causal or not), then the query block's and the key
// block's global positions (i64 scalars).
void checkBlockOperands(const Descs &in, const json &attrs) {
  checkQueryKeyValue(in);
  reqBool(attrs, "causal");
  if (optAttr(attrs, "position_stride"))
    reqPositive(attrs, "position_stride");
  if (optAttr(attrs, "zigzag_length")) {
    // Zigzag rows are two chunks of contiguous positions each.
    const int64_t length = reqPositive(attrs, "zigzag_length");
    if (optAttr(attrs, "position_stride") && attrs["position_stride"] != 1)
      fail("a zigzag block's rows are contiguous in each chunk: "
           "position_stride must be 1");
    for (const TensorDesc *t : {&in[0], &in[1]})
      if (t->shape[2] % 2 != 0 || t->shape[2] > length)
        fail("a zigzag block holds two equal chunks of a sequence of " +
             std::to_string(length) + " positions, got " + desc(*t));
  }
  for (size_t i : {size_t(3), size_t(4)}) {
    needDtype(in[i], DType::I64, i == 3 ? "q_offset" : "k_offset");
    needShape(in[i], Shape{}, i == 3 ? "q_offset" : "k_offset");
  }
}

// Per query row logsumexp: f32 [B, H, Sq].
Shape rowStatsShape(const TensorDesc &q) {
  return Shape{q.shape[0], q.shape[1], q.shape[2]};
}

void checkAttentionBlock(const Descs &in, const Descs &out, const json &attrs) {
  checkBlockOperands(in, attrs);
  if (in.size() == 6)
    fail("the running output and logsumexp come together (7 operands), got "
         "6");
  if (in.size() == 7) {
    needLike(in[5], in[0], "y_acc", "q");
    needDtype(in[6], DType::F32, "lse_acc");
    needShape(in[6], rowStatsShape(in[0]), "lse_acc");
  }
  needLike(out[0], in[0], "the result", "q");
  needDtype(out[1], DType::F32, "the logsumexp");
  needShape(out[1], rowStatsShape(in[0]), "the logsumexp");
}

void checkAttentionBlockGrad(const Descs &in, const Descs &out,
                             const json &attrs) {
  checkBlockOperands(in, attrs);
  needLike(in[5], in[0], "dy", "q");
  needLike(in[6], in[0], "y", "q");
  needDtype(in[7], DType::F32, "lse");
  needShape(in[7], rowStatsShape(in[0]), "lse");
  needLike(out[0], in[0], "dq", "q");
  needLike(out[1], in[1], "dk", "k");
  needLike(out[2], in[2], "dv", "v");
}

void checkAttention(const Descs &in, const Descs &out, const json &attrs) {
  checkAttentionOperands(in, 3, attrs);
  needLike(out[0], in[0], "the result", "q");
}

/// `ignore_index` is optional; when present an integer.
void checkIgnoreIndex(const json &attrs) {
  if (const json *v = optAttr(attrs, "ignore_index");
      v && !v->is_number_integer())
    fail("attribute 'ignore_index' must be an integer");
}

void checkCrossEntropy(const Descs &in, const Descs &out, const json &attrs) {
  checkIgnoreIndex(attrs);
  if (const json *r = optAttr(attrs, "reduction");
      r && (!r->is_string() || (*r != "mean" && *r != "sum")))
    fail("attribute 'reduction' must be \"mean\" or \"sum\"");
  const TensorDesc &logits = in[0], &labels = in[1];
  needFloat(logits, "logits");
  needRankAtLeast(logits, 1, "logits");
  needInt(labels, "labels");
  needShape(labels, Shape(logits.shape.begin(), logits.shape.end() - 1),
            "labels");
  needFloat(out[0], "the result");
  needShape(out[0], Shape{}, "the result");
}

Shape reducedShape(const TensorDesc &x, const json &attrs) {
  std::vector<int64_t> axes = reqInts(attrs, "axes");
  bool keep = reqBool(attrs, "keep_dims");
  std::vector<bool> reduced(x.shape.size(), false);
  for (int64_t a : axes) {
    if (a < 0 || a >= int64_t(x.shape.size()))
      fail("axis " + std::to_string(a) + " in 'axes' is out of range for " +
           desc(x));
    if (reduced[size_t(a)])
      fail("axis " + std::to_string(a) + " appears twice in 'axes'");
    reduced[size_t(a)] = true;
  }
  Shape s;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (!reduced[i])
      s.push_back(x.shape[i]);
    else if (keep)
      s.push_back(1);
  }
  return s;
}

template <DT kinds>
void checkReduce(const Descs &in, const Descs &out, const json &attrs) {
  if (kinds == DT::Float)
    needFloat(in[0], "x");
  needDtype(out[0], in[0].dtype, "the result");
  needShape(out[0], reducedShape(in[0], attrs), "the result");
}

void checkReshape(const Descs &in, const Descs &out, const json &) {
  needDtype(out[0], in[0].dtype, "the result");
  if (rt::numel(out[0].shape) != rt::numel(in[0].shape))
    fail("the result " + desc(out[0]) +
         " has a different element count than x " + desc(in[0]));
}

void checkTranspose(const Descs &in, const Descs &out, const json &attrs) {
  std::vector<int64_t> perm = reqInts(attrs, "permutation");
  const Shape &xs = in[0].shape;
  if (perm.size() != xs.size())
    fail("'permutation' has " + std::to_string(perm.size()) +
         " entries for a rank-" + std::to_string(xs.size()) + " operand");
  std::vector<bool> seen(xs.size(), false);
  Shape s;
  for (int64_t p : perm) {
    if (p < 0 || p >= int64_t(xs.size()) || seen[size_t(p)])
      fail("'permutation' is not a permutation of 0.." +
           std::to_string(int64_t(xs.size()) - 1));
    seen[size_t(p)] = true;
    s.push_back(xs[size_t(p)]);
  }
  needDtype(out[0], in[0].dtype, "the result");
  needShape(out[0], s, "the result");
}

void checkCast(const Descs &in, const Descs &out, const json &) {
  needShape(out[0], in[0].shape, "the result");
}

void checkBroadcast(const Descs &in, const Descs &out, const json &) {
  needDtype(out[0], in[0].dtype, "the result");
  if (!broadcastsTo(in[0].shape, out[0].shape))
    fail("x " + desc(in[0]) + " does not broadcast to the result shape " +
         shapeStr(out[0].shape));
}

void checkActGrad(const Descs &in, const Descs &out, const json &) {
  needFloat(in[0], "x");
  needLike(in[1], in[0], "dy", "x");
  needLike(out[0], in[0], "dx", "x");
}

// dy has max's result shape: exactly the broadcast of lhs and rhs.
void checkMaxGrad(const Descs &in, const Descs &out, const json &) {
  const TensorDesc &l = in[0], &r = in[1], &dy = in[2];
  needFloat(dy, "dy");
  needDtype(l, dy.dtype, "lhs");
  needDtype(r, dy.dtype, "rhs");
  Shape s;
  if (!broadcastShapes(l.shape, r.shape, s))
    fail("shapes " + shapeStr(l.shape) + " and " + shapeStr(r.shape) +
         " do not broadcast");
  needShape(dy, s, "dy (the broadcast of lhs and rhs)");
  needLike(out[0], dy, "dlhs", "dy");
  needLike(out[1], dy, "drhs", "dy");
}

void checkSoftmaxGrad(const Descs &in, const Descs &out, const json &attrs) {
  needFloat(in[0], "y");
  needRankAtLeast(in[0], 1, "y");
  needLike(in[1], in[0], "dy", "y");
  reqAxis(attrs, "axis", in[0].shape.size());
  needLike(out[0], in[0], "dx", "y");
}

void checkRmsNormGrad(const Descs &in, const Descs &out, const json &attrs) {
  needFloat(in[0], "x");
  needRankAtLeast(in[0], 1, "x");
  checkNormParams(in[0], in[1], "gamma");
  needLike(in[2], in[0], "dy", "x");
  checkEps(attrs);
  needLike(out[0], in[0], "dx", "x");
  needLike(out[1], in[1], "dgamma", "gamma");
}

// rms_norm_grad's rule plus dbeta.
void checkLayerNormGrad(const Descs &in, const Descs &out, const json &attrs) {
  checkRmsNormGrad(in, out, attrs);
  needLike(out[2], in[1], "dbeta", "gamma");
}

// x, gamma, dy -> dx (rms_norm_input_grad, layer_norm_input_grad)
void checkNormInputGrad(const Descs &in, const Descs &out, const json &attrs) {
  needFloat(in[0], "x");
  needRankAtLeast(in[0], 1, "x");
  checkNormParams(in[0], in[1], "gamma");
  needLike(in[2], in[0], "dy", "x");
  checkEps(attrs);
  needLike(out[0], in[0], "dx", "x");
}

// x, dy -> dgamma (rms_norm_param_grad) [, dbeta (layer_norm_param_grad)]
void checkNormParamGrad(const Descs &in, const Descs &out, const json &attrs) {
  needFloat(in[0], "x");
  needRankAtLeast(in[0], 1, "x");
  needLike(in[1], in[0], "dy", "x");
  checkEps(attrs);
  checkNormParams(in[0], out[0], "dgamma");
  if (out.size() > 1)
    needLike(out[1], out[0], "dbeta", "dgamma");
}

void checkEmbeddingGrad(const Descs &in, const Descs &out, const json &) {
  const TensorDesc &ids = in[0], &dy = in[1], &dt = out[0];
  needInt(ids, "ids");
  needFloat(dt, "dtable");
  if (dt.shape.size() != 2)
    fail("dtable must have rank 2 [V, D], got " + desc(dt));
  needDtype(dy, dt.dtype, "dy");
  Shape s = ids.shape;
  s.push_back(dt.shape[1]);
  needShape(dy, s, "dy");
}

void checkAttentionGrad(const Descs &in, const Descs &out, const json &attrs) {
  checkAttentionOperands(in, 4, attrs);
  needLike(out[0], in[0], "dq", "q");
  needLike(out[1], in[1], "dk", "k");
  needLike(out[2], in[2], "dv", "v");
}

void checkLabelMask(const Descs &in, const Descs &out, const json &attrs) {
  needInt(in[0], "labels");
  reqInt(attrs, "ignore_index");
  needDtype(out[0], DType::F32, "the mask");
  needShape(out[0], in[0].shape, "the mask");
}

void checkCrossEntropyGrad(const Descs &in, const Descs &out,
                           const json &attrs) {
  checkIgnoreIndex(attrs);
  const TensorDesc &logits = in[0], &labels = in[1], &dloss = in[2];
  needFloat(logits, "logits");
  needRankAtLeast(logits, 1, "logits");
  needInt(labels, "labels");
  needShape(labels, Shape(logits.shape.begin(), logits.shape.end() - 1),
            "labels");
  needFloat(dloss, "dloss");
  needShape(dloss, Shape{}, "dloss");
  reqNum(attrs, "scale");
  needLike(out[0], logits, "dlogits", "logits");
}

/// A gradient of an update: p's shape, p's float dtype or a narrower one
/// (mixed precision's bf16/f16 gradients of f32 master weights).
void needGradOf(const TensorDesc &g, const TensorDesc &p) {
  needFloat(g, "g");
  if (g.shape != p.shape || rt::dtypeSize(g.dtype) > rt::dtypeSize(p.dtype))
    fail("g must have p's shape and p's or a narrower float dtype (" + desc(p) +
         "), got " + desc(g));
}

/// The optional loss-scaling inputs of the updates, from `index`: inv_scale
/// and found_inf, f32 scalars, both or neither.
void checkScaling(const Descs &in, size_t index) {
  if (in.size() == index)
    return;
  if (in.size() != index + 2)
    fail("the loss-scaling inputs inv_scale and found_inf come together");
  const char *names[] = {"inv_scale", "found_inf"};
  for (size_t i = 0; i < 2; ++i) {
    needDtype(in[index + i], DType::F32, names[i]);
    needShape(in[index + i], Shape{}, names[i]);
  }
}

/// The learning rate and its schedule (include/dtc/kernels/LearningRate.h).
LearningRateSchedule checkSchedule(const json &attrs) {
  reqNum(attrs, "lr");
  LearningRateSchedule schedule;
  if (std::string problem = learningRateSchedule(attrs, schedule);
      !problem.empty())
    fail(problem);
  return schedule;
}

void needStep(const TensorDesc &t) {
  needDtype(t, DType::I64, "step");
  needShape(t, Shape{}, "step");
}

// sgd_update(p, g[, step][, inv_scale, found_inf]): the step (the updates
// applied so far) only when the schedule's rate varies with it.
void checkSgd(const Descs &in, const Descs &out, const json &attrs) {
  needFloat(in[0], "p");
  needGradOf(in[1], in[0]);
  size_t scaling = 2;
  if (checkSchedule(attrs).varies()) {
    if (in.size() < 3 || in[2].dtype != DType::I64)
      fail("a learning-rate schedule that changes with the step needs the "
           "optimizer step (an i64 scalar) as input 2");
    needStep(in[2]);
    scaling = 3;
  }
  checkScaling(in, scaling);
  reqNum(attrs, "weight_decay");
  needLike(out[0], in[0], "p'", "p");
}

void checkAdam(const Descs &in, const Descs &out, const json &attrs) {
  needFloat(in[0], "p");
  needGradOf(in[1], in[0]);
  needLike(in[2], in[0], "m", "p");
  needLike(in[3], in[0], "v", "p");
  needStep(in[4]);
  checkScaling(in, 5);
  checkSchedule(attrs);
  for (const char *b : {"beta1", "beta2"}) {
    double v = reqNum(attrs, b);
    if (v < 0 || v >= 1)
      fail(std::string("attribute '") + b + "' must be in [0, 1)");
  }
  // eps > 0: with eps = 0 a parameter whose gradient has always been zero
  // divides 0 by 0 (docs/model-format.md "Rules the format leaves open").
  if (reqNum(attrs, "eps") <= 0)
    fail("attribute 'eps' must be > 0");
  reqNum(attrs, "weight_decay");
  reqBool(attrs, "decoupled");
  needLike(out[0], in[0], "p'", "p");
  needLike(out[1], in[0], "m'", "p");
  needLike(out[2], in[0], "v'", "p");
}

void checkLossScaleUpdate(const Descs &in, const Descs &out,
                          const json &attrs) {
  const char *names[] = {"scale", "good_steps", "skipped", "found_inf"};
  const DType types[] = {DType::F32, DType::I64, DType::I64, DType::F32};
  for (size_t i = 0; i < 4; ++i) {
    needDtype(in[i], types[i], names[i]);
    needShape(in[i], Shape{}, names[i]);
  }
  for (size_t i = 0; i < 3; ++i)
    needLike(out[i], in[i], "a result", names[i]);
  if (reqNum(attrs, "growth_factor") < 1)
    fail("attribute 'growth_factor' must be >= 1");
  const double backoff = reqNum(attrs, "backoff_factor");
  if (!(backoff > 0 && backoff <= 1))
    fail("attribute 'backoff_factor' must be in (0, 1]");
  if (reqInt(attrs, "growth_interval") < 1)
    fail("attribute 'growth_interval' must be >= 1");
}

// ---- local ops (added by the partitioner) ---------------------------------

void needOffset(const TensorDesc &t) {
  needDtype(t, DType::I64, "offset");
  needShape(t, Shape{}, "offset");
}

void checkShardOffset(const Descs &, const Descs &out, const json &attrs) {
  std::vector<int64_t> axes = reqInts(attrs, "grid_axes");
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0)
      fail("'grid_axes' entries must be non-negative mesh axes, got " +
           std::to_string(axes[i]));
    if (std::find(axes.begin(), axes.begin() + i, axes[i]) != axes.begin() + i)
      fail("mesh axis " + std::to_string(axes[i]) +
           " appears twice in 'grid_axes'");
  }
  reqPositive(attrs, "piece_size");
  if (const json *shift = optAttr(attrs, "shift");
      shift && !shift->is_number_integer())
    fail("attribute 'shift' must be an integer");
  needDtype(out[0], DType::I64, "the result");
  needShape(out[0], Shape{}, "the result");
}

void checkPad(const Descs &in, const Descs &out, const json &) {
  needDtype(out[0], in[0].dtype, "the result");
  if (out[0].shape.size() != in[0].shape.size())
    fail("the result " + desc(out[0]) + " must have x's rank (x is " +
         desc(in[0]) + ")");
}

void checkFillPadding(const Descs &in, const Descs &out, const json &attrs) {
  needFloat(in[0], "x");
  needOffset(in[1]);
  reqAxis(attrs, "axis", in[0].shape.size());
  reqPositive(attrs, "size");
  std::string fill = reqStr(attrs, "fill");
  if (fill != "zero" && fill != "-inf")
    fail("attribute 'fill' must be \"zero\" or \"-inf\", got \"" + fill + "\"");
  needLike(out[0], in[0], "the result", "x");
}

void checkEmbeddingShard(const Descs &in, const Descs &out, const json &attrs) {
  checkEmbedding({in[0], in[1]}, out, attrs);
  needOffset(in[2]);
  reqPositive(attrs, "vocab");
}

void checkEmbeddingShardGrad(const Descs &in, const Descs &out,
                             const json &attrs) {
  const TensorDesc &ids = in[0], &dy = in[1], &dt = out[0];
  needInt(ids, "ids");
  needOffset(in[2]);
  reqPositive(attrs, "vocab");
  needFloat(dt, "dtable");
  if (dt.shape.size() != 2)
    fail("dtable must have rank 2 [V, D], got " + desc(dt));
  needDtype(dy, dt.dtype, "dy");
  Shape s = ids.shape;
  s.push_back(dt.shape[1]);
  needShape(dy, s, "dy");
}

/// logits [..., V'], labels [...] and per-position rows [...].
void checkShardRows(const Descs &in, size_t rows) {
  const TensorDesc &logits = in[0], &labels = in[1];
  needFloat(logits, "logits");
  needRankAtLeast(logits, 1, "logits");
  needInt(labels, "labels");
  Shape lead(logits.shape.begin(), logits.shape.end() - 1);
  needShape(labels, lead, "labels");
  // In the logits' dtype or f32 (mixed precision keeps the loss's sums over
  // low-precision logits in f32).
  for (size_t i = 2; i < 2 + rows; ++i) {
    if (in[i].dtype != DType::F32)
      needDtype(in[i], logits.dtype, "a per-position statistic");
    needShape(in[i], lead, "a per-position statistic");
  }
}

void checkCrossEntropyShardStats(const Descs &in, const Descs &out,
                                 const json &attrs) {
  checkShardRows(in, 1);
  needOffset(in[3]);
  reqPositive(attrs, "vocab");
  // Sums may be wider than the logits (f32 statistics of bf16 logits).
  needFloat(out[0], "sum_exp");
  needShape(out[0], in[2].shape, "sum_exp");
  needFloat(out[1], "target");
  needShape(out[1], in[2].shape, "target");
}

void checkCrossEntropyShardGrad(const Descs &in, const Descs &out,
                                const json &attrs) {
  checkShardRows(in, 2);
  needFloat(in[4], "dloss");
  needShape(in[4], Shape{}, "dloss");
  needOffset(in[5]);
  reqPositive(attrs, "vocab");
  reqNum(attrs, "scale");
  needLike(out[0], in[0], "dlogits", "logits");
}

std::vector<KernelInfo> makeKernels() {
  using P = std::vector<std::pair<int, int>>;
  std::vector<KernelInfo> k = {
      {"matmul", 2, 1, {}, checkMatmul, 0, CostClass::Gemm},
      {"matmul_bias", 3, 1, {}, checkMatmulBias, 0, CostClass::Gemm},
      {"matmul_gelu", 2, 2, {}, checkMatmulGelu, 1, CostClass::Gemm},
      {"add", 2, 1, {}, checkBinary<DT::Any>},
      {"sub", 2, 1, {}, checkBinary<DT::Any>},
      {"mul", 2, 1, {}, checkBinary<DT::Any>},
      {"div", 2, 1, {}, checkBinary<DT::Any>},
      {"max", 2, 1, {}, checkBinary<DT::Any>},
      {"neg", 1, 1, {}, checkUnary<DT::Any>},
      {"exp", 1, 1, {}, checkUnary<DT::Float>},
      {"log", 1, 1, {}, checkUnary<DT::Float>},
      {"tanh", 1, 1, {}, checkUnary<DT::Float>},
      {"sqrt", 1, 1, {}, checkUnary<DT::Float>},
      {"rsqrt", 1, 1, {}, checkUnary<DT::Float>},
      {"relu", 1, 1, {}, checkUnary<DT::Float>},
      {"gelu", 1, 1, {}, checkUnary<DT::Float>},
      {"silu", 1, 1, {}, checkUnary<DT::Float>},
      {"softmax", 1, 1, {}, checkSoftmax, 0, CostClass::RowReduction},
      {"layer_norm", 3, 1, {}, checkLayerNorm, 0, CostClass::RowReduction},
      {"rms_norm", 2, 1, {}, checkRmsNorm, 0, CostClass::RowReduction},
      {"embedding", 2, 1, {}, checkEmbedding},
      {"attention", 3, 1, {}, checkAttention, 0, CostClass::Attention},
      {"cross_entropy",
       2,
       1,
       {},
       checkCrossEntropy,
       0,
       CostClass::RowReduction},
      {"label_mask", 1, 1, {}, checkLabelMask},
      {"reduce_sum", 1, 1, {}, checkReduce<DT::Any>},
      {"reduce_mean", 1, 1, {}, checkReduce<DT::Float>},
      {"reshape", 1, 1, P{{0, 0}}, checkReshape},
      {"transpose", 1, 1, {}, checkTranspose},
      {"cast", 1, 1, {}, checkCast},
      {"copy", 1, 1, {}, checkUnary<DT::Any>},
      {"broadcast", 1, 1, {}, checkBroadcast},
      {"relu_grad", 2, 1, {}, checkActGrad},
      {"gelu_grad", 2, 1, {}, checkActGrad},
      {"silu_grad", 2, 1, {}, checkActGrad},
      {"max_grad", 3, 2, {}, checkMaxGrad},
      {"softmax_grad", 2, 1, {}, checkSoftmaxGrad, 0, CostClass::RowReduction},
      {"layer_norm_grad",
       3,
       3,
       {},
       checkLayerNormGrad,
       0,
       CostClass::RowReduction},
      {"rms_norm_grad", 3, 2, {}, checkRmsNormGrad, 0, CostClass::RowReduction},
      {"layer_norm_input_grad",
       3,
       1,
       {},
       checkNormInputGrad,
       0,
       CostClass::RowReduction},
      {"layer_norm_param_grad",
       2,
       2,
       {},
       checkNormParamGrad,
       0,
       CostClass::RowReduction},
      {"rms_norm_input_grad",
       3,
       1,
       {},
       checkNormInputGrad,
       0,
       CostClass::RowReduction},
      {"rms_norm_param_grad",
       2,
       1,
       {},
       checkNormParamGrad,
       0,
       CostClass::RowReduction},
      {"embedding_grad", 2, 1, {}, checkEmbeddingGrad},
      {"attention_grad",
       4,
       3,
       {},
       checkAttentionGrad,
       0,
       CostClass::AttentionGrad},
      {"attention_block",
       5,
       2,
       {},
       checkAttentionBlock,
       2,
       CostClass::Attention},
      {"attention_block_grad",
       8,
       3,
       {},
       checkAttentionBlockGrad,
       0,
       CostClass::AttentionGrad},
      {"cross_entropy_grad",
       3,
       1,
       {},
       checkCrossEntropyGrad,
       0,
       CostClass::RowReduction},
      {"sgd_update", 2, 1, P{{0, 0}}, checkSgd, 3},
      {"adam_update", 5, 3, P{{0, 0}, {1, 2}, {2, 3}}, checkAdam, 2,
       CostClass::Optimizer},
      {"loss_scale_update", 4, 3, P{{0, 0}, {1, 1}, {2, 2}},
       checkLossScaleUpdate},
      {"reduce_max", 1, 1, {}, checkReduce<DT::Float>},
      {"shard_offset", 0, 1, {}, checkShardOffset},
      {"pad", 1, 1, {}, checkPad},
      {"fill_padding", 2, 1, P{{0, 0}}, checkFillPadding},
      {"embedding_shard", 3, 1, {}, checkEmbeddingShard},
      {"embedding_shard_grad", 3, 1, {}, checkEmbeddingShardGrad},
      {"cross_entropy_shard_stats",
       4,
       2,
       {},
       checkCrossEntropyShardStats,
       0,
       CostClass::RowReduction},
      {"cross_entropy_shard_grad",
       6,
       1,
       {},
       checkCrossEntropyShardGrad,
       0,
       CostClass::RowReduction},
  };
  for (KernelInfo &moe : moeKernels())
    k.push_back(std::move(moe));
  return k;
}

} // namespace

const std::vector<KernelInfo> &allKernels() {
  static const std::vector<KernelInfo> kernels = makeKernels();
  return kernels;
}

const KernelInfo *findKernel(std::string_view name) {
  for (const KernelInfo &k : allKernels())
    if (name == k.name)
      return &k;
  return nullptr;
}

std::string checkRule(const KernelInfo &kernel,
                      const std::vector<TensorDesc> &in,
                      const std::vector<TensorDesc> &out,
                      const json &attrs) noexcept {
  try {
    if (in.size() < size_t(kernel.numIn) ||
        in.size() > size_t(kernel.numIn + kernel.numOptionalIn) ||
        out.size() != size_t(kernel.numOut))
      return std::string(kernel.name) + " takes " +
             std::to_string(kernel.numIn) +
             (kernel.numOptionalIn
                  ? " to " + std::to_string(kernel.numIn + kernel.numOptionalIn)
                  : std::string()) +
             " operand(s) and " + std::to_string(kernel.numOut) +
             " result(s), got " + std::to_string(in.size()) + " and " +
             std::to_string(out.size());
    kernel.check(in, out, attrs);
    return {};
  } catch (const Error &e) {
    return e.what();
  } catch (const std::exception &e) {
    // Only allocation can get here; still a verdict, never an escape into
    // a caller built without exceptions.
    return std::string("the check rule failed: ") + e.what();
  }
}

bool broadcastShapes(const Shape &a, const Shape &b, Shape &out) {
  size_t r = std::max(a.size(), b.size());
  out.assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      return false;
    out[r - 1 - i] = da == 1 ? db : da;
  }
  return true;
}

bool broadcastsTo(const Shape &from, const Shape &to) {
  if (from.size() > to.size())
    return false;
  for (size_t i = 0; i < from.size(); ++i) {
    int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != t && f != 1)
      return false;
  }
  return true;
}

int64_t attrInt(const json &attrs, const char *key) {
  return attrs.find(key)->get<int64_t>();
}
double attrNum(const json &attrs, const char *key) {
  return attrs.find(key)->get<double>();
}
bool attrBool(const json &attrs, const char *key) {
  return attrs.find(key)->get<bool>();
}
bool attrFlag(const json &attrs, const char *key) {
  auto it = attrs.find(key);
  return it != attrs.end() && it->get<bool>();
}
int64_t attrIntOr(const json &attrs, const char *key, int64_t otherwise) {
  if (!attrs.is_object())
    return otherwise;
  auto it = attrs.find(key);
  return it == attrs.end() ? otherwise : it->get<int64_t>();
}
std::vector<int64_t> attrInts(const json &attrs, const char *key) {
  std::vector<int64_t> r;
  for (const json &e : *attrs.find(key))
    r.push_back(e.get<int64_t>());
  return r;
}

} // namespace dtc::kernels
