//===- DtcOps.cpp - shape rules, sharding rules and costs of dtc ops -----===//
//
// Each op's shape rule is its type inference or verifier; its sharding rule
// is getShardingRule(); its gradient rule lives in DtcGradients.cpp.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/Utils.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::dtc;

//===----------------------------------------------------------------------===//
// Shared shape helpers
//===----------------------------------------------------------------------===//

namespace {
/// Prints a shape as [8, 16] for diagnostics.
struct ShapeStr {
  ArrayRef<int64_t> shape;
};
raw_ostream &operator<<(raw_ostream &os, ShapeStr s) {
  os << "[";
  llvm::interleaveComma(s.shape, os);
  return os << "]";
}
Diagnostic &operator<<(Diagnostic &diag, ShapeStr s) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << s;
  return diag << text;
}
ShapeStr shapeOf(Value v) {
  return {cast<RankedTensorType>(v.getType()).getShape()};
}
RankedTensorType tensorType(Value v) { return tensorTypeOf(v); }
} // namespace

FailureOr<SmallVector<int64_t>>
mlir::dtc::broadcastShapes(ArrayRef<int64_t> lhs, ArrayRef<int64_t> rhs) {
  size_t rank = std::max(lhs.size(), rhs.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t l = i < rank - lhs.size() ? 1 : lhs[i - (rank - lhs.size())];
    int64_t r = i < rank - rhs.size() ? 1 : rhs[i - (rank - rhs.size())];
    if (l != r && l != 1 && r != 1)
      return failure();
    out[i] = l == 1 ? r : l;
  }
  return out;
}

LogicalResult mlir::dtc::inferBroadcastElementwiseType(
    std::optional<Location> loc, Type lhs, Type rhs,
    SmallVectorImpl<Type> &inferred) {
  auto l = cast<RankedTensorType>(lhs), r = cast<RankedTensorType>(rhs);
  if (l.getElementType() != r.getElementType())
    return emitOptionalError(loc, "operands have different element types ",
                             l.getElementType(), " and ", r.getElementType());
  auto shape = broadcastShapes(l.getShape(), r.getShape());
  if (failed(shape))
    return emitOptionalError(loc, "operand shapes ", ShapeStr{l.getShape()},
                             " and ", ShapeStr{r.getShape()},
                             " do not broadcast");
  inferred.push_back(RankedTensorType::get(*shape, l.getElementType()));
  return success();
}

LogicalResult mlir::dtc::inferReduceType(std::optional<Location> loc, Type x,
                                         ArrayRef<int64_t> axes, bool keepDims,
                                         SmallVectorImpl<Type> &inferred) {
  auto type = cast<RankedTensorType>(x);
  llvm::SmallSet<int64_t, 4> seen;
  for (int64_t axis : axes) {
    if (axis < 0 || axis >= type.getRank())
      return emitOptionalError(loc, "reduction axis ", axis,
                               " is out of range for rank ", type.getRank());
    if (!seen.insert(axis).second)
      return emitOptionalError(loc, "reduction axis ", axis, " listed twice");
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    if (!seen.contains(d))
      shape.push_back(type.getDimSize(d));
    else if (keepDims)
      shape.push_back(1);
  }
  inferred.push_back(RankedTensorType::get(shape, type.getElementType()));
  return success();
}

static LogicalResult checkAxis(Operation *op, int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return op->emitOpError() << "axis " << axis << " is out of range for rank "
                             << rank;
  return success();
}

static LogicalResult checkSameType(Operation *op, Value v, Type expected,
                                   StringRef what) {
  if (v.getType() != expected)
    return op->emitOpError() << what << " must have type " << expected
                             << ", got " << v.getType();
  return success();
}

/// x [..., D] with per-feature vectors `vectors` of shape [D].
static LogicalResult checkNormShapes(Operation *op, Value x,
                                     ArrayRef<std::pair<Value, StringRef>> vectors) {
  auto xType = tensorType(x);
  if (xType.getRank() < 1)
    return op->emitOpError() << "x must have rank >= 1";
  int64_t d = xType.getShape().back();
  for (auto [v, name] : vectors) {
    auto type = tensorType(v);
    if (type.getElementType() != xType.getElementType())
      return op->emitOpError() << name << " element type " << type.getElementType()
                               << " differs from x's " << xType.getElementType();
    if (type.getRank() != 1 || type.getDimSize(0) != d)
      return op->emitOpError() << name << " must have shape [" << d
                               << "] (the last dim of x " << shapeOf(x)
                               << "), got " << shapeOf(v);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  auto a = cast<RankedTensorType>(adaptor.getA().getType());
  auto b = cast<RankedTensorType>(adaptor.getB().getType());
  if (a.getRank() < 2 || b.getRank() < 2)
    return emitOptionalError(loc, "dtc.matmul needs operands of rank >= 2, got ",
                             ShapeStr{a.getShape()}, " and ",
                             ShapeStr{b.getShape()});
  if (a.getElementType() != b.getElementType())
    return emitOptionalError(loc, "dtc.matmul operands have different element types ",
                             a.getElementType(), " and ", b.getElementType());
  int64_t k = a.getShape().back(), kb = b.getShape()[b.getRank() - 2];
  if (k != kb)
    return emitOptionalError(loc, "dtc.matmul contracting dimensions differ: a ",
                             ShapeStr{a.getShape()}, " has K=", k, ", b ",
                             ShapeStr{b.getShape()}, " has K=", kb);
  auto batch = broadcastShapes(a.getShape().drop_back(2),
                               b.getShape().drop_back(2));
  if (failed(batch))
    return emitOptionalError(loc, "dtc.matmul batch dimensions of ",
                             ShapeStr{a.getShape()}, " and ",
                             ShapeStr{b.getShape()}, " do not broadcast");
  SmallVector<int64_t> shape = *batch;
  shape.push_back(a.getShape()[a.getRank() - 2]);
  shape.push_back(b.getShape().back());
  inferred.push_back(RankedTensorType::get(shape, a.getElementType()));
  return success();
}

ShardingRule MatmulOp::getShardingRule() {
  ShardingRule rule;
  auto a = tensorType(getA()), b = tensorType(getB()),
       out = tensorType(getResult());
  int64_t rank = out.getRank();
  TensorFactors outFactors(rank);
  for (int64_t d = 0; d < rank - 2; ++d)
    if (out.getDimSize(d) != 1)
      outFactors[d] = {rule.addFactor(out.getDimSize(d), FactorKind::Parallel)};
  int64_t m = rule.addFactor(out.getDimSize(rank - 2), FactorKind::Parallel);
  int64_t n = rule.addFactor(out.getDimSize(rank - 1), FactorKind::Parallel);
  int64_t k = rule.addFactor(a.getShape().back(), FactorKind::Sum);
  outFactors[rank - 2] = {m};
  outFactors[rank - 1] = {n};
  auto operandFactors = [&](RankedTensorType type, DimFactors second,
                            DimFactors last) {
    TensorFactors factors(type.getRank());
    int64_t offset = rank - type.getRank();
    for (int64_t d = 0; d < type.getRank() - 2; ++d)
      if (type.getDimSize(d) == out.getDimSize(offset + d))
        factors[d] = outFactors[offset + d];
    factors[type.getRank() - 2] = second;
    factors[type.getRank() - 1] = last;
    return factors;
  };
  rule.operands.push_back(operandFactors(a, {m}, {k}));
  rule.operands.push_back(operandFactors(b, {k}, {n}));
  // Size-1 M/N/K dims still carry their (size-1) factor; harmless.
  rule.results.push_back(outFactors);
  rule.linearGroups = {{0}, {1}};
  return rule;
}

int64_t MatmulOp::getFlopCount() {
  auto out = tensorType(getResult());
  return 2 * out.getNumElements() * tensorType(getA()).getShape().back();
}

//===----------------------------------------------------------------------===//
// softmax, layer_norm, rms_norm
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::verify() {
  return checkAxis(*this, getAxis(), tensorType(getX()).getRank());
}

/// Elementwise rule where the factor of dimension `blockedDim` (and of any
/// operand dims aligned with it) may not be sharded.
static ShardingRule elementwiseWithBlockedDim(Operation *op, int64_t blockedDim,
                                              LinearGroups linear = {}) {
  ShardingRule rule = buildElementwiseRule(op, std::move(linear));
  for (int64_t factor : rule.results[0][blockedDim])
    rule.factorKinds[factor] = FactorKind::Blocked;
  return rule;
}

ShardingRule SoftmaxOp::getShardingRule() {
  return elementwiseWithBlockedDim(*this, getAxis());
}

LogicalResult LayerNormOp::verify() {
  if (failed(checkNormShapes(*this, getX(),
                             {{getGamma(), "gamma"}, {getBeta(), "beta"}})))
    return failure();
  return checkSameType(*this, getResult(), getX().getType(), "result");
}

/// x [..., D], per-feature vectors [D], results shaped like x or [D]:
/// leading factors behave as `leadingKind`, D is blocked.
static ShardingRule normRule(Operation *op, FactorKind leadingKind) {
  ShardingRule rule;
  auto x = tensorType(op->getOperand(0));
  TensorFactors xFactors;
  for (int64_t d = 0; d + 1 < x.getRank(); ++d)
    xFactors.push_back(x.getDimSize(d) == 1
                           ? DimFactors{}
                           : DimFactors{rule.addFactor(x.getDimSize(d), leadingKind)});
  int64_t feature = rule.addFactor(x.getShape().back(), FactorKind::Blocked);
  xFactors.push_back({feature});
  TensorFactors vector = {{feature}};
  auto factorsFor = [&](Type type) {
    return cast<RankedTensorType>(type).getRank() == 1 && x.getRank() != 1
               ? vector
               : xFactors;
  };
  for (Value operand : op->getOperands())
    rule.operands.push_back(factorsFor(operand.getType()));
  for (Type type : op->getResultTypes())
    rule.results.push_back(factorsFor(type));
  return rule;
}

ShardingRule LayerNormOp::getShardingRule() {
  return normRule(*this, FactorKind::Parallel);
}

LogicalResult RmsNormOp::verify() {
  if (failed(checkNormShapes(*this, getX(), {{getGamma(), "gamma"}})))
    return failure();
  return checkSameType(*this, getResult(), getX().getType(), "result");
}

ShardingRule RmsNormOp::getShardingRule() {
  return normRule(*this, FactorKind::Parallel);
}

//===----------------------------------------------------------------------===//
// embedding
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  auto table = cast<RankedTensorType>(adaptor.getTable().getType());
  auto ids = cast<RankedTensorType>(adaptor.getIds().getType());
  if (table.getRank() != 2)
    return emitOptionalError(loc, "dtc.embedding table must be [V, D], got ",
                             ShapeStr{table.getShape()});
  SmallVector<int64_t> shape(ids.getShape());
  shape.push_back(table.getDimSize(1));
  inferred.push_back(RankedTensorType::get(shape, table.getElementType()));
  return success();
}

ShardingRule EmbeddingOp::getShardingRule() {
  ShardingRule rule;
  auto table = tensorType(getTable()), ids = tensorType(getIds());
  // A vocabulary shard looks up only its own rows (buildLocal): the result
  // is a pending sum over the shards.
  int64_t vocab = rule.addFactor(table.getDimSize(0), FactorKind::Sum);
  int64_t feature = rule.addFactor(table.getDimSize(1), FactorKind::Parallel);
  TensorFactors idFactors;
  for (int64_t size : ids.getShape())
    idFactors.push_back(size == 1 ? DimFactors{}
                                  : DimFactors{rule.addFactor(size, FactorKind::Parallel)});
  rule.operands.push_back({{vocab}, {feature}});
  rule.operands.push_back(idFactors);
  TensorFactors out = idFactors;
  out.push_back({feature});
  rule.results.push_back(out);
  return rule;
}

SmallVector<int64_t> EmbeddingOp::getLoweredFactors() { return {0}; }

LogicalResult EmbeddingOp::buildLocal(LocalLoweringContext &ctx,
                                      ArrayRef<Value> operands, TypeRange types,
                                      const FactorAxes &factors,
                                      SmallVectorImpl<Value> &results) {
  int64_t pieceRows = tensorType(operands[0]).getDimSize(0);
  Value offset = ctx.shardOffset(getLoc(), factors[0], pieceRows);
  results.push_back(EmbeddingShardOp::create(ctx.builder(), getLoc(), types[0],
                                             operands[0], operands[1], offset,
                                             tensorType(getTable()).getDimSize(0)));
  return success();
}

int64_t EmbeddingOp::getIndexBound(unsigned operandIdx) {
  return operandIdx == getIdsMutable().getOperandNumber()
             ? tensorType(getTable()).getDimSize(0)
             : 0;
}

//===----------------------------------------------------------------------===//
// attention
//===----------------------------------------------------------------------===//

static LogicalResult verifyAttentionShapes(Operation *op, Value q, Value k,
                                           Value v, bool causal) {
  auto qt = tensorType(q), kt = tensorType(k), vt = tensorType(v);
  for (auto [value, name] : {std::pair{q, "q"}, {k, "k"}, {v, "v"}})
    if (tensorType(value).getRank() != 4)
      return op->emitOpError() << name << " must be [B, H, S, Dh], got "
                               << shapeOf(value);
  if (kt != vt)
    return op->emitOpError() << "k " << shapeOf(k) << " and v " << shapeOf(v)
                             << " must have the same type";
  if (qt.getElementType() != kt.getElementType())
    return op->emitOpError() << "q, k and v must have the same element type";
  if (qt.getDimSize(0) != kt.getDimSize(0) || qt.getDimSize(1) != kt.getDimSize(1) ||
      qt.getDimSize(3) != kt.getDimSize(3))
    return op->emitOpError() << "q " << shapeOf(q) << " and k " << shapeOf(k)
                             << " must agree on B, H and Dh";
  if (causal && qt.getDimSize(2) != kt.getDimSize(2))
    return op->emitOpError() << "causal attention needs as many queries as keys, got "
                             << qt.getDimSize(2) << " and " << kt.getDimSize(2);
  return success();
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionShapes(*this, getQ(), getK(), getV(), getCausal())))
    return failure();
  return checkSameType(*this, getResult(), getQ().getType(), "result");
}

/// Factors of attention and its gradient. Batch and heads are parallel;
/// queries are independent unless causal (the mask needs global positions);
/// keys, and the q.k feature dim, feed a softmax and stay whole. With
/// `gradient`, queries are summed into dk/dv and v's features feed the
/// softmax gradient.
static ShardingRule attentionRule(Operation *op, bool causal, bool gradient) {
  ShardingRule rule;
  auto q = tensorType(op->getOperand(0)), k = tensorType(op->getOperand(1));
  int64_t b = rule.addFactor(q.getDimSize(0), FactorKind::Parallel);
  int64_t h = rule.addFactor(q.getDimSize(1), FactorKind::Parallel);
  int64_t sq = rule.addFactor(q.getDimSize(2),
                              causal ? FactorKind::Blocked
                                     : (gradient ? FactorKind::Sum
                                                 : FactorKind::Parallel));
  int64_t sk = rule.addFactor(k.getDimSize(2), FactorKind::Blocked);
  int64_t dqk = rule.addFactor(q.getDimSize(3), FactorKind::Blocked);
  int64_t dv = rule.addFactor(q.getDimSize(3),
                              gradient ? FactorKind::Blocked : FactorKind::Parallel);
  auto dims = [](int64_t b, int64_t h, int64_t s, int64_t d) {
    auto one = [](int64_t f) { return DimFactors{f}; };
    return TensorFactors{one(b), one(h), one(s), one(d)};
  };
  TensorFactors qf = dims(b, h, sq, dqk), kf = dims(b, h, sk, dqk),
                vf = dims(b, h, sk, dv), of = dims(b, h, sq, dv);
  rule.operands = {qf, kf, vf};
  if (gradient) {
    rule.operands.push_back(of);
    rule.results = {qf, kf, vf};
  } else {
    rule.results = {of};
  }
  return rule;
}

ShardingRule AttentionOp::getShardingRule() {
  return attentionRule(*this, getCausal(), /*gradient=*/false);
}

int64_t AttentionOp::getFlopCount() {
  auto q = tensorType(getQ()), k = tensorType(getK());
  int64_t pairs = q.getDimSize(0) * q.getDimSize(1) * q.getDimSize(2) * k.getDimSize(2);
  int64_t flops = 4 * pairs * q.getDimSize(3) + 5 * pairs;
  return getCausal() ? flops / 2 : flops;
}

//===----------------------------------------------------------------------===//
// cross_entropy
//===----------------------------------------------------------------------===//

static LogicalResult verifyLogitsLabels(Operation *op, Value logits,
                                        Value labels) {
  auto lt = tensorType(logits), yt = tensorType(labels);
  if (lt.getRank() < 1)
    return op->emitOpError() << "logits must have rank >= 1";
  if (yt.getShape() != lt.getShape().drop_back())
    return op->emitOpError() << "labels " << shapeOf(labels)
                             << " must have the shape of logits "
                             << shapeOf(logits) << " without its last dim";
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  return verifyLogitsLabels(*this, getLogits(), getLabels());
}

/// logits [..., V], labels [...]: label positions behave as `positions`,
/// the vocabulary as `vocabKind` (its sharding is implemented by buildLocal:
/// Megatron's vocab-parallel cross entropy).
static ShardingRule crossEntropyRule(Operation *op, FactorKind positions,
                                     FactorKind vocabKind) {
  ShardingRule rule;
  auto logits = tensorType(op->getOperand(0));
  TensorFactors lead;
  for (int64_t d = 0; d + 1 < logits.getRank(); ++d)
    lead.push_back(logits.getDimSize(d) == 1
                       ? DimFactors{}
                       : DimFactors{rule.addFactor(logits.getDimSize(d), positions)});
  int64_t vocab = rule.addFactor(logits.getShape().back(), vocabKind);
  TensorFactors logitFactors = lead;
  logitFactors.push_back({vocab});
  rule.operands = {logitFactors, lead};
  for (unsigned i = 2; i < op->getNumOperands(); ++i)
    rule.operands.push_back({}); // dloss scalar
  rule.results = {positions == FactorKind::Mean ? TensorFactors{} : logitFactors};
  return rule;
}

int64_t CrossEntropyOp::getIndexBound(unsigned operandIdx) {
  return operandIdx == getLabelsMutable().getOperandNumber()
             ? tensorType(getLogits()).getShape().back()
             : 0;
}

ShardingRule CrossEntropyOp::getShardingRule() {
  return crossEntropyRule(*this, FactorKind::Mean, FactorKind::Resolved);
}

/// The factor of the logits' last (vocabulary) dimension.
static int64_t vocabFactorOf(Operation *op) {
  auto logits = tensorType(op->getOperand(0));
  int64_t lead = 0;
  for (int64_t d = 0; d + 1 < logits.getRank(); ++d)
    lead += logits.getDimSize(d) != 1;
  return lead; // added right after the non-trivial leading factors
}

namespace {
/// Global softmax statistics of vocabulary-sharded logits, per label
/// position: the row maximum, the normalizer sum(exp(logit - max)) and the
/// label's logit, each resolved across the shards over `axes`.
struct VocabStats {
  Value max, sumExp, target;
};
} // namespace

static VocabStats vocabShardStats(LocalLoweringContext &ctx, Location loc,
                                  Value logits, Value labels, Value offset,
                                  int64_t vocab, ArrayRef<int64_t> axes) {
  OpBuilder &b = ctx.builder();
  auto type = tensorType(logits);
  int64_t last = type.getRank() - 1;
  Value rowInput = logits;
  // Padding columns past the vocabulary must not win the maximum.
  if (isUneven(vocab, shardCount(ctx.grid(), axes)))
    rowInput = FillPaddingOp::create(b, loc, logits, offset, last, vocab, "-inf");
  Value localMax = ReduceMaxOp::create(b, loc, rowInput, ArrayRef<int64_t>{last}, false);
  VocabStats stats;
  stats.max = ctx.allReduce(loc, localMax, axes, PartialKind::Max);
  // The sums are f32 whatever the logits' type: the loss's reductions
  // (over the shard in the kernel, over shards in the all-reduce) keep f32.
  auto rowType = tensorType(stats.max).clone(b.getF32Type());
  auto shardStats = CrossEntropyShardStatsOp::create(
      b, loc, TypeRange{rowType, rowType}, logits, labels, stats.max, offset, vocab);
  stats.sumExp = ctx.allReduce(loc, shardStats.getSumExp(), axes, PartialKind::Sum);
  stats.target = ctx.allReduce(loc, shardStats.getTarget(), axes, PartialKind::Sum);
  ctx.share(logits, "cross_entropy.max", stats.max);
  ctx.share(logits, "cross_entropy.sum_exp", stats.sumExp);
  return stats;
}

SmallVector<int64_t> CrossEntropyOp::getLoweredFactors() {
  return {vocabFactorOf(*this)};
}

LogicalResult CrossEntropyOp::buildLocal(LocalLoweringContext &ctx,
                                         ArrayRef<Value> operands, TypeRange types,
                                         const FactorAxes &factors,
                                         SmallVectorImpl<Value> &results) {
  OpBuilder &b = ctx.builder();
  Location loc = getLoc();
  const GridAxes &axes = factors[vocabFactorOf(*this)];
  Value logits = operands[0], labels = operands[1];
  int64_t vocab = tensorType(getLogits()).getShape().back();
  Value offset = ctx.shardOffset(loc, axes, tensorType(logits).getShape().back());
  VocabStats stats = vocabShardStats(ctx, loc, logits, labels, offset, vocab, axes);
  // -log softmax(logits)[label] = log(sum_exp) + max - logits[label], in f32
  Value max = stats.max;
  if (tensorType(max).getElementType() != tensorType(stats.target).getElementType())
    max = CastOp::create(b, loc, tensorType(stats.target), max);
  Value rows = AddOp::create(b, loc, LogOp::create(b, loc, stats.sumExp),
                             SubOp::create(b, loc, max, stats.target));
  int64_t rank = tensorType(rows).getRank();
  Value loss = rows;
  if (rank > 0)
    loss = ReduceMeanOp::create(b, loc, rows,
                                llvm::to_vector(llvm::seq<int64_t>(0, rank)), false);
  if (loss.getType() != types[0])
    return emitOpError() << "local lowering produced " << loss.getType()
                         << " for a result of type " << types[0];
  results.push_back(loss);
  return success();
}

//===----------------------------------------------------------------------===//
// reshape, transpose, cast, broadcast
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = tensorType(getX()), out = tensorType(getResult());
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "changes the element type from "
                         << in.getElementType() << " to " << out.getElementType()
                         << " (use dtc.cast)";
  if (in.getNumElements() != out.getNumElements())
    return emitOpError() << "cannot reshape " << shapeOf(getX()) << " ("
                         << in.getNumElements() << " elements) to "
                         << shapeOf(getResult()) << " (" << out.getNumElements()
                         << " elements)";
  return success();
}

ShardingRule ReshapeOp::getShardingRule() {
  return buildReshapeRule(tensorType(getX()), tensorType(getResult()));
}

int64_t ReshapeOp::getFlopCount() { return 0; }

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  auto x = cast<RankedTensorType>(adaptor.getX().getType());
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  if ((int64_t)perm.size() != x.getRank())
    return emitOptionalError(loc, "dtc.transpose permutation has ", perm.size(),
                             " entries for rank ", x.getRank());
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.getRank() || seen[p])
      return emitOptionalError(loc, "dtc.transpose permutation ",
                               ShapeStr{perm}, " is not a permutation of 0..",
                               x.getRank() - 1);
    seen[p] = true;
    shape.push_back(x.getDimSize(p));
  }
  inferred.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

ShardingRule TransposeOp::getShardingRule() {
  ShardingRule rule;
  auto x = tensorType(getX());
  TensorFactors in;
  for (int64_t size : x.getShape())
    in.push_back(size == 1 ? DimFactors{}
                           : DimFactors{rule.addFactor(size, FactorKind::Parallel)});
  TensorFactors out;
  for (int64_t p : getPermutation())
    out.push_back(in[p]);
  rule.operands = {in};
  rule.results = {out};
  rule.linearGroups = {{0}};
  return rule;
}

ShardingRule CastOp::getShardingRule() {
  bool floatToFloat = isa<FloatType>(tensorType(getX()).getElementType()) &&
                      isa<FloatType>(tensorType(getResult()).getElementType());
  return buildElementwiseRule(*this, floatToFloat ? LinearGroups{{0}}
                                                  : LinearGroups{});
}

LogicalResult BroadcastOp::verify() {
  auto in = tensorType(getX()), out = tensorType(getResult());
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "changes the element type";
  auto shape = broadcastShapes(in.getShape(), out.getShape());
  if (failed(shape) || ArrayRef<int64_t>(*shape) != out.getShape())
    return emitOpError() << "cannot broadcast " << shapeOf(getX()) << " to "
                         << shapeOf(getResult());
  return success();
}

ShardingRule BroadcastOp::getShardingRule() {
  return buildElementwiseRule(*this, {{0}});
}

//===----------------------------------------------------------------------===//
// Gradient ops
//===----------------------------------------------------------------------===//

LogicalResult MaxGradOp::verify() {
  auto shape = broadcastShapes(shapeOf(getLhs()).shape, shapeOf(getRhs()).shape);
  if (failed(shape) || ArrayRef<int64_t>(*shape) != shapeOf(getDy()).shape)
    return emitOpError() << "dy " << shapeOf(getDy())
                         << " must have the broadcast shape of lhs "
                         << shapeOf(getLhs()) << " and rhs " << shapeOf(getRhs());
  if (failed(checkSameType(*this, getDlhs(), getDy().getType(), "dlhs")) ||
      failed(checkSameType(*this, getDrhs(), getDy().getType(), "drhs")))
    return failure();
  return success();
}

ShardingRule MaxGradOp::getShardingRule() {
  return buildElementwiseRule(*this, {{2}});
}

LogicalResult SoftmaxGradOp::verify() {
  if (getY().getType() != getDy().getType())
    return emitOpError() << "y and dy must have the same type";
  return checkAxis(*this, getAxis(), tensorType(getY()).getRank());
}

ShardingRule SoftmaxGradOp::getShardingRule() {
  return elementwiseWithBlockedDim(*this, getAxis(), {{1}});
}

LogicalResult LayerNormGradOp::verify() {
  if (failed(checkNormShapes(*this, getX(), {{getGamma(), "gamma"}})) ||
      failed(checkSameType(*this, getDy(), getX().getType(), "dy")) ||
      failed(checkSameType(*this, getDx(), getX().getType(), "dx")) ||
      failed(checkSameType(*this, getDgamma(), getGamma().getType(), "dgamma")) ||
      failed(checkSameType(*this, getDbeta(), getGamma().getType(), "dbeta")))
    return failure();
  return success();
}

ShardingRule LayerNormGradOp::getShardingRule() {
  return normRule(*this, FactorKind::Sum);
}

LogicalResult RmsNormGradOp::verify() {
  if (failed(checkNormShapes(*this, getX(), {{getGamma(), "gamma"}})) ||
      failed(checkSameType(*this, getDy(), getX().getType(), "dy")) ||
      failed(checkSameType(*this, getDx(), getX().getType(), "dx")) ||
      failed(checkSameType(*this, getDgamma(), getGamma().getType(), "dgamma")))
    return failure();
  return success();
}

ShardingRule RmsNormGradOp::getShardingRule() {
  return normRule(*this, FactorKind::Sum);
}

LogicalResult LayerNormInputGradOp::verify() {
  if (failed(checkNormShapes(*this, getX(), {{getGamma(), "gamma"}})) ||
      failed(checkSameType(*this, getDy(), getX().getType(), "dy")) ||
      failed(checkSameType(*this, getDx(), getX().getType(), "dx")))
    return failure();
  return success();
}

ShardingRule LayerNormInputGradOp::getShardingRule() {
  return normRule(*this, FactorKind::Parallel);
}

LogicalResult LayerNormParamGradOp::verify() {
  if (failed(checkSameType(*this, getDy(), getX().getType(), "dy")) ||
      failed(checkNormShapes(*this, getX(), {{getDgamma(), "dgamma"}, {getDbeta(), "dbeta"}})))
    return failure();
  return success();
}

ShardingRule LayerNormParamGradOp::getShardingRule() {
  return normRule(*this, FactorKind::Sum);
}

LogicalResult RmsNormInputGradOp::verify() {
  if (failed(checkNormShapes(*this, getX(), {{getGamma(), "gamma"}})) ||
      failed(checkSameType(*this, getDy(), getX().getType(), "dy")) ||
      failed(checkSameType(*this, getDx(), getX().getType(), "dx")))
    return failure();
  return success();
}

ShardingRule RmsNormInputGradOp::getShardingRule() {
  return normRule(*this, FactorKind::Parallel);
}

LogicalResult RmsNormParamGradOp::verify() {
  if (failed(checkSameType(*this, getDy(), getX().getType(), "dy")) ||
      failed(checkNormShapes(*this, getX(), {{getDgamma(), "dgamma"}})))
    return failure();
  return success();
}

ShardingRule RmsNormParamGradOp::getShardingRule() {
  return normRule(*this, FactorKind::Sum);
}

LogicalResult EmbeddingGradOp::verify() {
  auto table = tensorType(getDtable()), ids = tensorType(getIds()),
       dy = tensorType(getDy());
  if (table.getRank() != 2)
    return emitOpError() << "dtable must be [V, D], got " << shapeOf(getDtable());
  SmallVector<int64_t> expected(ids.getShape());
  expected.push_back(table.getDimSize(1));
  if (dy.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError() << "dy " << shapeOf(getDy()) << " must be "
                         << ShapeStr{expected};
  if (dy.getElementType() != table.getElementType())
    return emitOpError() << "dy and dtable must have the same element type";
  return success();
}

int64_t EmbeddingGradOp::getIndexBound(unsigned operandIdx) {
  return operandIdx == getIdsMutable().getOperandNumber()
             ? tensorType(getDtable()).getDimSize(0)
             : 0;
}

ShardingRule EmbeddingGradOp::getShardingRule() {
  ShardingRule rule;
  auto table = tensorType(getDtable()), ids = tensorType(getIds());
  TensorFactors idFactors;
  for (int64_t size : ids.getShape())
    idFactors.push_back(size == 1 ? DimFactors{}
                                  : DimFactors{rule.addFactor(size, FactorKind::Sum)});
  int64_t feature = rule.addFactor(table.getDimSize(1), FactorKind::Parallel);
  // A vocabulary shard scatters only its own rows (buildLocal).
  int64_t vocab = rule.addFactor(table.getDimSize(0), FactorKind::Parallel);
  TensorFactors dy = idFactors;
  dy.push_back({feature});
  rule.operands = {idFactors, dy};
  rule.results = {{{vocab}, {feature}}};
  rule.linearGroups = {{1}};
  return rule;
}

SmallVector<int64_t> EmbeddingGradOp::getLoweredFactors() {
  return {getShardingRule().results[0][0].front()};
}

LogicalResult EmbeddingGradOp::buildLocal(LocalLoweringContext &ctx,
                                          ArrayRef<Value> operands, TypeRange types,
                                          const FactorAxes &factors,
                                          SmallVectorImpl<Value> &results) {
  const GridAxes &axes = factors[getLoweredFactors().front()];
  int64_t pieceRows = cast<RankedTensorType>(types[0]).getDimSize(0);
  Value offset = ctx.shardOffset(getLoc(), axes, pieceRows);
  results.push_back(EmbeddingShardGradOp::create(ctx.builder(), getLoc(), types[0],
                                                 operands[0], operands[1], offset,
                                                 tensorType(getDtable()).getDimSize(0)));
  return success();
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttentionShapes(*this, getQ(), getK(), getV(), getCausal())) ||
      failed(checkSameType(*this, getDy(), getQ().getType(), "dy")) ||
      failed(checkSameType(*this, getDq(), getQ().getType(), "dq")) ||
      failed(checkSameType(*this, getDk(), getK().getType(), "dk")) ||
      failed(checkSameType(*this, getDv(), getV().getType(), "dv")))
    return failure();
  return success();
}

ShardingRule AttentionGradOp::getShardingRule() {
  return attentionRule(*this, getCausal(), /*gradient=*/true);
}

int64_t AttentionGradOp::getFlopCount() {
  auto q = tensorType(getQ()), k = tensorType(getK());
  int64_t pairs = q.getDimSize(0) * q.getDimSize(1) * q.getDimSize(2) * k.getDimSize(2);
  int64_t flops = 10 * pairs * q.getDimSize(3) + 8 * pairs;
  return getCausal() ? flops / 2 : flops;
}

LogicalResult CrossEntropyGradOp::verify() {
  if (failed(verifyLogitsLabels(*this, getLogits(), getLabels())))
    return failure();
  return checkSameType(*this, getDlogits(), getLogits().getType(), "dlogits");
}

int64_t CrossEntropyGradOp::getIndexBound(unsigned operandIdx) {
  return operandIdx == getLabelsMutable().getOperandNumber()
             ? tensorType(getLogits()).getShape().back()
             : 0;
}

ShardingRule CrossEntropyGradOp::getShardingRule() {
  return crossEntropyRule(*this, FactorKind::Parallel, FactorKind::Parallel);
}

SmallVector<int64_t> CrossEntropyGradOp::getLoweredFactors() {
  return {vocabFactorOf(*this)};
}

LogicalResult CrossEntropyGradOp::buildLocal(LocalLoweringContext &ctx,
                                             ArrayRef<Value> operands,
                                             TypeRange types,
                                             const FactorAxes &factors,
                                             SmallVectorImpl<Value> &results) {
  Location loc = getLoc();
  const GridAxes &axes = factors[vocabFactorOf(*this)];
  Value logits = operands[0], labels = operands[1], dloss = operands[2];
  int64_t vocab = tensorType(getLogits()).getShape().back();
  Value offset = ctx.shardOffset(loc, axes, tensorType(logits).getShape().back());
  // The forward's statistics when it ran on the same local logits.
  Value max = ctx.lookupShared(logits, "cross_entropy.max");
  Value sumExp = ctx.lookupShared(logits, "cross_entropy.sum_exp");
  if (!max || !sumExp) {
    VocabStats stats = vocabShardStats(ctx, loc, logits, labels, offset, vocab, axes);
    max = stats.max;
    sumExp = stats.sumExp;
  }
  results.push_back(CrossEntropyShardGradOp::create(
      ctx.builder(), loc, types[0], logits, labels, max, sumExp, dloss, offset,
      vocab, getScale()));
  return success();
}

//===----------------------------------------------------------------------===//
// Local ops
//===----------------------------------------------------------------------===//

LogicalResult ShardOffsetOp::verify() {
  if (getPieceSize() < 1)
    return emitOpError() << "piece_size must be >= 1, got " << getPieceSize();
  llvm::SmallSet<int64_t, 4> seen;
  for (int64_t axis : getGridAxes())
    if (axis < 0 || !seen.insert(axis).second)
      return emitOpError() << "grid_axes must be distinct non-negative axes";
  return success();
}

LogicalResult PadOp::verify() {
  auto in = tensorType(getX()), out = tensorType(getResult());
  if (in.getElementType() != out.getElementType() || in.getRank() != out.getRank())
    return emitOpError() << "pads " << shapeOf(getX()) << " to " << shapeOf(getResult())
                         << ": rank and element type must stay";
  return success();
}

LogicalResult FillPaddingOp::verify() {
  if (failed(checkAxis(*this, getAxis(), tensorType(getX()).getRank())))
    return failure();
  if (getSize() < 1)
    return emitOpError() << "size must be >= 1, got " << getSize();
  if (getFill() != "zero" && getFill() != "-inf")
    return emitOpError() << "fill must be \"zero\" or \"-inf\", got \"" << getFill() << "\"";
  return success();
}

/// ids [...] and a [V', D] table shard against rows [..., D].
static LogicalResult checkShardLookup(Operation *op, Value table, Value ids, Value rows,
                                      StringRef tableName, StringRef rowsName) {
  auto t = tensorType(table), r = tensorType(rows);
  if (t.getRank() != 2)
    return op->emitOpError() << tableName << " must be [V, D], got " << shapeOf(table);
  SmallVector<int64_t> expected(tensorType(ids).getShape());
  expected.push_back(t.getDimSize(1));
  if (r.getShape() != ArrayRef<int64_t>(expected) || r.getElementType() != t.getElementType())
    return op->emitOpError() << rowsName << " " << shapeOf(rows) << " must be "
                             << ShapeStr{expected} << " of the table's element type";
  return success();
}

LogicalResult EmbeddingShardOp::verify() {
  return checkShardLookup(*this, getTable(), getIds(), getResult(), "table", "result");
}

LogicalResult EmbeddingShardGradOp::verify() {
  return checkShardLookup(*this, getDtable(), getIds(), getDy(), "dtable", "dy");
}

/// logits [..., V'], labels [...] and per-position rows [...].
static LogicalResult checkShardRows(Operation *op, Value logits, Value labels,
                                    ArrayRef<Value> rows, int64_t vocab) {
  if (failed(verifyLogitsLabels(op, logits, labels)))
    return failure();
  // In the logits' element type or f32 (the loss's sums over low-precision
  // logits stay f32).
  auto rowType = RankedTensorType::get(tensorType(labels).getShape(),
                                       tensorType(logits).getElementType());
  for (Value row : rows)
    if (row.getType() != rowType && row.getType() != rowType.clone(Float32Type::get(op->getContext())))
      return op->emitOpError() << "per-position statistics must be " << rowType
                               << " or f32, got " << row.getType();
  if (vocab < 1)
    return op->emitOpError() << "vocab must be >= 1";
  return success();
}

LogicalResult CrossEntropyShardStatsOp::verify() {
  return checkShardRows(*this, getLogits(), getLabels(),
                        {getMax(), getSumExp(), getTarget()}, getVocab());
}

LogicalResult CrossEntropyShardGradOp::verify() {
  if (failed(checkShardRows(*this, getLogits(), getLabels(), {getMax(), getSumExp()},
                            getVocab())))
    return failure();
  return checkSameType(*this, getDlogits(), getLogits().getType(), "dlogits");
}

//===----------------------------------------------------------------------===//
// Optimizer ops
//===----------------------------------------------------------------------===//

/// The gradient of an update: the parameter's shape, a float element type
/// no wider than the parameter's; the loss-scaling operands come together.
static LogicalResult checkUpdateOperands(Operation *op, Value param, Value grad,
                                         Value invScale, Value foundInf) {
  auto p = tensorType(param), g = tensorType(grad);
  if (p.getShape() != g.getShape())
    return op->emitOpError() << "gradient shape " << shapeOf(grad)
                             << " differs from the parameter's " << shapeOf(param);
  if (g.getElementType() != p.getElementType() &&
      g.getElementType().getIntOrFloatBitWidth() >= p.getElementType().getIntOrFloatBitWidth())
    return op->emitOpError() << "gradient element type " << g.getElementType()
                             << " is not narrower than the parameter's "
                             << p.getElementType();
  if (bool(invScale) != bool(foundInf))
    return op->emitOpError() << "takes inv_scale and found_inf together (loss scaling) or neither";
  return success();
}

LogicalResult SgdUpdateOp::verify() {
  return checkUpdateOperands(*this, getParam(), getGrad(), getInvScale(), getFoundInf());
}

ShardingRule SgdUpdateOp::getShardingRule() {
  return buildElementwiseRule(*this, {});
}

int64_t SgdUpdateOp::getInPlaceOperand(unsigned resultIdx) {
  return getParamMutable().getOperandNumber();
}

int64_t AdamUpdateOp::getInPlaceOperand(unsigned resultIdx) {
  switch (resultIdx) {
  case 0:
    return getParamMutable().getOperandNumber();
  case 1:
    return getMMutable().getOperandNumber();
  case 2:
    return getVMutable().getOperandNumber();
  }
  return -1;
}

LogicalResult AdamUpdateOp::verify() {
  auto inUnit = [](APFloat value) {
    double v = value.convertToDouble();
    return v >= 0.0 && v < 1.0;
  };
  if (!inUnit(getBeta1Attr().getValue()) || !inUnit(getBeta2Attr().getValue()))
    return emitOpError() << "betas must be in [0, 1)";
  if (getEpsAttr().getValue().convertToDouble() <= 0.0)
    return emitOpError() << "eps must be positive";
  return checkUpdateOperands(*this, getParam(), getGrad(), getInvScale(), getFoundInf());
}

ShardingRule AdamUpdateOp::getShardingRule() {
  return buildElementwiseRule(*this, {});
}

LogicalResult LossScaleUpdateOp::verify() {
  if (getGrowthFactorAttr().getValueAsDouble() < 1.0)
    return emitOpError() << "growth_factor must be >= 1";
  double backoff = getBackoffFactorAttr().getValueAsDouble();
  if (!(backoff > 0.0 && backoff <= 1.0))
    return emitOpError() << "backoff_factor must be in (0, 1]";
  if (getGrowthInterval() < 1)
    return emitOpError() << "growth_interval must be >= 1";
  return success();
}

ShardingRule LossScaleUpdateOp::getShardingRule() {
  // Scalars only: nothing to split.
  return buildElementwiseRule(*this, {});
}

int64_t LossScaleUpdateOp::getInPlaceOperand(unsigned resultIdx) {
  return resultIdx < 3 ? int64_t(resultIdx) : -1;
}

#define GET_OP_CLASSES
#include "dtc/Dialect/DtcOps.cpp.inc"
