//===- DtcOps.cpp - type inference, sharding rules and costs of dtc ops --===//
//
// Each op's shape and attribute rule is its kernel's check rule
// (kernels/common/Rules.cpp, run as the verifier by KernelRuleOpInterface);
// what stays here is type inference for builders, the sharding rule
// (getShardingRule()) and the cost. Gradient rules live in DtcGradients.cpp.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/kernels/Flops.h"

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

LogicalResult
mlir::dtc::inferBroadcastElementwiseType(std::optional<Location> loc, Type lhs,
                                         Type rhs,
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
    return emitOptionalError(
        loc, "dtc.matmul needs operands of rank >= 2, got ",
        ShapeStr{a.getShape()}, " and ", ShapeStr{b.getShape()});
  if (a.getElementType() != b.getElementType())
    return emitOptionalError(
        loc, "dtc.matmul operands have different element types ",
        a.getElementType(), " and ", b.getElementType());
  int64_t k = a.getShape().back(), kb = b.getShape()[b.getRank() - 2];
  if (k != kb)
    return emitOptionalError(loc,
                             "dtc.matmul contracting dimensions differ: a ",
                             ShapeStr{a.getShape()}, " has K=", k, ", b ",
                             ShapeStr{b.getShape()}, " has K=", kb);
  auto batch =
      broadcastShapes(a.getShape().drop_back(2), b.getShape().drop_back(2));
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
  return int64_t(::dtc::kernels::matmulProductFlops(
      tensorType(getResult()).getNumElements(),
      tensorType(getA()).getShape().back()));
}

// The fused ops cost what the ops they replace cost: the product, and one
// operation per element for the bias add and for the GELU.

int64_t MatmulBiasOp::getFlopCount() {
  auto out = tensorType(getResult());
  return int64_t(::dtc::kernels::matmulProductFlops(
             out.getNumElements(), tensorType(getA()).getShape().back())) +
         out.getNumElements();
}

int64_t MatmulGeluOp::getFlopCount() {
  auto out = tensorType(getResult());
  return int64_t(::dtc::kernels::matmulProductFlops(
             out.getNumElements(), tensorType(getA()).getShape().back())) +
         (getBias() ? 2 : 1) * out.getNumElements();
}

//===----------------------------------------------------------------------===//
// softmax, layer_norm, rms_norm
//===----------------------------------------------------------------------===//

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

/// x [..., D], per-feature vectors [D], results shaped like x or [D]:
/// leading factors behave as `leadingKind`, D is blocked.
static ShardingRule normRule(Operation *op, FactorKind leadingKind) {
  ShardingRule rule;
  auto x = tensorType(op->getOperand(0));
  TensorFactors xFactors;
  for (int64_t d = 0; d + 1 < x.getRank(); ++d)
    xFactors.push_back(
        x.getDimSize(d) == 1
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
    idFactors.push_back(
        size == 1 ? DimFactors{}
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
  results.push_back(EmbeddingShardOp::create(
      ctx.builder(), getLoc(), types[0], operands[0], operands[1], offset,
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

/// The sequence factors (queries, keys) of attentionRule.
std::pair<int64_t, int64_t> mlir::dtc::attentionSequenceFactors(Operation *op) {
  auto q = tensorType(op->getOperand(0)), k = tensorType(op->getOperand(1));
  const int64_t sq = q.getDimSize(1) / k.getDimSize(1) > 1 ? 3 : 2;
  return {sq, sq + 1};
}

/// Factors of attention and its gradient. Batch and heads are parallel;
/// queries are independent unless causal (the mask needs global positions);
/// keys, and the q.k feature dim, feed a softmax and stay whole; v's
/// features stay whole too (the kernel needs them equal to q's). With
/// `gradient`, queries are summed into dk/dv.
///
/// Grouped keys and values (k, v with Hkv of q's H heads): q's head
/// dimension is (kv head, query of the group), major first, so query head h
/// = kv·G + g reads kv head h / G. Splitting the kv-head factor splits k, v
/// and q's heads alike, each shard keeping whole groups; the group factor
/// is missing from k and v (they are read by every query of the group), so
/// the gradient sums it into dk and dv.
static ShardingRule attentionRule(Operation *op, bool causal, bool gradient) {
  ShardingRule rule;
  auto q = tensorType(op->getOperand(0)), k = tensorType(op->getOperand(1));
  int64_t b = rule.addFactor(q.getDimSize(0), FactorKind::Parallel);
  int64_t h = rule.addFactor(k.getDimSize(1), FactorKind::Parallel);
  const int64_t groupSize = q.getDimSize(1) / k.getDimSize(1);
  const int64_t group =
      groupSize > 1 ? rule.addFactor(groupSize, gradient ? FactorKind::Sum
                                                         : FactorKind::Parallel)
                    : -1;
  // Under ring attention (dtc.ring) the local lowering implements split
  // sequences: queries stay in the output, and what the gradient's dk/dv
  // or the forward's keys reduce away it completes itself.
  const bool ring = op->hasAttr(DtcDialect::kRingAttr);
  int64_t sq = rule.addFactor(
      q.getDimSize(2),
      ring     ? (gradient ? FactorKind::Resolved : FactorKind::Parallel)
      : causal ? FactorKind::Blocked
               : (gradient ? FactorKind::Sum : FactorKind::Parallel));
  int64_t sk = rule.addFactor(k.getDimSize(2), ring ? FactorKind::Resolved
                                                    : FactorKind::Blocked);
  int64_t dqk = rule.addFactor(q.getDimSize(3), FactorKind::Blocked);
  // The kernel (and the model format) needs v's features to equal q's and
  // k's, so a split of them alone has no local computation.
  int64_t dv = rule.addFactor(q.getDimSize(3), FactorKind::Blocked);
  auto dims = [](int64_t b, DimFactors heads, int64_t s, int64_t d) {
    auto one = [](int64_t f) { return DimFactors{f}; };
    return TensorFactors{one(b), std::move(heads), one(s), one(d)};
  };
  DimFactors queryHeads{h}, kvHeads{h};
  if (group >= 0)
    queryHeads.push_back(group);
  TensorFactors qf = dims(b, queryHeads, sq, dqk),
                kf = dims(b, kvHeads, sk, dqk), vf = dims(b, kvHeads, sk, dv),
                of = dims(b, queryHeads, sq, dv);
  rule.operands = {qf, kf, vf};
  if (ring)
    rule.sharedAxes.push_back({sq, sk});
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

/// Batch rows times heads of an attention's q [B, H, S, Dh].
int64_t mlir::dtc::attentionHeads(Value q) {
  auto type = cast<RankedTensorType>(q.getType());
  return type.getDimSize(0) * type.getDimSize(1);
}

int64_t AttentionOp::getIndependentProducts() { return attentionHeads(getQ()); }

int64_t AttentionOp::getFlopCount() {
  auto q = tensorType(getQ()), k = tensorType(getK());
  return int64_t(::dtc::kernels::attentionFlops(
      q.getDimSize(0), q.getDimSize(1), q.getDimSize(2), k.getDimSize(2),
      q.getDimSize(3), getCausal(), /*gradient=*/false));
}

//===----------------------------------------------------------------------===//
// cross_entropy
//===----------------------------------------------------------------------===//

/// logits [..., V], labels [...]: label positions behave as `positions`,
/// the vocabulary as `vocabKind` (its sharding is implemented by buildLocal:
/// Megatron's vocab-parallel cross entropy).
static ShardingRule crossEntropyRule(Operation *op, FactorKind positions,
                                     FactorKind vocabKind) {
  ShardingRule rule;
  auto logits = tensorType(op->getOperand(0));
  TensorFactors lead;
  for (int64_t d = 0; d + 1 < logits.getRank(); ++d)
    lead.push_back(
        logits.getDimSize(d) == 1
            ? DimFactors{}
            : DimFactors{rule.addFactor(logits.getDimSize(d), positions)});
  int64_t vocab = rule.addFactor(logits.getShape().back(), vocabKind);
  TensorFactors logitFactors = lead;
  logitFactors.push_back({vocab});
  rule.operands = {logitFactors, lead};
  for (unsigned i = 2; i < op->getNumOperands(); ++i)
    rule.operands.push_back({}); // dloss scalar
  // The loss is a scalar; the gradient is shaped like the logits.
  rule.results = {tensorType(op->getResult(0)).getRank() == 0 ? TensorFactors{}
                                                              : logitFactors};
  return rule;
}

int64_t CrossEntropyOp::getIndexBound(unsigned operandIdx) {
  return operandIdx == getLabelsMutable().getOperandNumber()
             ? tensorType(getLogits()).getShape().back()
             : 0;
}

ShardingRule CrossEntropyOp::getShardingRule() {
  // A sum splits over the positions as partial sums, a plain mean as fixed
  // shares of them; a mean over the labels kept is neither (its count is
  // data) and keeps its positions whole (dtc-decompose-ignored-labels
  // rewrites it as sum / count first).
  const FactorKind positions = isSum()            ? FactorKind::Sum
                               : getIgnoreIndex() ? FactorKind::Blocked
                                                  : FactorKind::Mean;
  return crossEntropyRule(*this, positions, FactorKind::Resolved);
}

ShardingRule LabelMaskOp::getShardingRule() {
  return buildElementwiseRule(*this, {});
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
                                  int64_t vocab, ArrayRef<int64_t> axes,
                                  IntegerAttr ignoreIndex) {
  OpBuilder &b = ctx.builder();
  auto type = tensorType(logits);
  int64_t last = type.getRank() - 1;
  Value rowInput = logits;
  // Padding columns past the vocabulary must not win the maximum.
  if (isUneven(vocab, shardCount(ctx.grid(), axes)))
    rowInput =
        FillPaddingOp::create(b, loc, logits, offset, last, vocab, "-inf");
  Value localMax =
      ReduceMaxOp::create(b, loc, rowInput, ArrayRef<int64_t>{last}, false);
  VocabStats stats;
  stats.max = ctx.allReduce(loc, localMax, axes, PartialKind::Max);
  // The sums are f32 whatever the logits' type: the loss's reductions
  // (over the shard in the kernel, over shards in the all-reduce) keep f32.
  auto rowType = tensorType(stats.max).clone(b.getF32Type());
  auto shardStats = CrossEntropyShardStatsOp::create(
      b, loc, TypeRange{rowType, rowType}, logits, labels, stats.max, offset,
      b.getI64IntegerAttr(vocab), ignoreIndex);
  stats.sumExp =
      ctx.allReduce(loc, shardStats.getSumExp(), axes, PartialKind::Sum);
  stats.target =
      ctx.allReduce(loc, shardStats.getTarget(), axes, PartialKind::Sum);
  ctx.share(logits, "cross_entropy.max", stats.max);
  ctx.share(logits, "cross_entropy.sum_exp", stats.sumExp);
  return stats;
}

SmallVector<int64_t> CrossEntropyOp::getLoweredFactors() {
  return {vocabFactorOf(*this)};
}

LogicalResult CrossEntropyOp::buildLocal(LocalLoweringContext &ctx,
                                         ArrayRef<Value> operands,
                                         TypeRange types,
                                         const FactorAxes &factors,
                                         SmallVectorImpl<Value> &results) {
  OpBuilder &b = ctx.builder();
  Location loc = getLoc();
  const GridAxes &axes = factors[vocabFactorOf(*this)];
  Value logits = operands[0], labels = operands[1];
  int64_t vocab = tensorType(getLogits()).getShape().back();
  Value offset =
      ctx.shardOffset(loc, axes, tensorType(logits).getShape().back());
  VocabStats stats = vocabShardStats(ctx, loc, logits, labels, offset, vocab,
                                     axes, getIgnoreIndexAttr());
  // -log softmax(logits)[label] = log(sum_exp) + max - logits[label], in f32
  Value max = stats.max;
  if (tensorType(max).getElementType() !=
      tensorType(stats.target).getElementType())
    max = CastOp::create(b, loc, tensorType(stats.target), max);
  Value rows = AddOp::create(b, loc, LogOp::create(b, loc, stats.sumExp),
                             SubOp::create(b, loc, max, stats.target));
  int64_t rank = tensorType(rows).getRank();
  auto allAxes = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  Value mask;
  if (getIgnoreIndex()) // ignored positions' rows count for nothing
    rows =
        MulOp::create(b, loc, rows,
                      mask = LabelMaskOp::create(b, loc, tensorType(rows),
                                                 labels, getIgnoreIndexAttr()));
  Value loss = rows;
  if (rank > 0 && isSum())
    loss = ReduceSumOp::create(b, loc, rows, allAxes, false);
  else if (rank > 0 && mask) // the mean over the kept labels (0 if none)
    loss = DivOp::create(
        b, loc, ReduceSumOp::create(b, loc, rows, allAxes, false),
        MaxOp::create(b, loc, ReduceSumOp::create(b, loc, mask, allAxes, false),
                      arith::ConstantOp::create(
                          b, loc,
                          DenseElementsAttr::get(
                              RankedTensorType::get({}, b.getF32Type()),
                              b.getF32FloatAttr(1.0f)))));
  else if (rank > 0)
    loss = ReduceMeanOp::create(b, loc, rows, allAxes, false);
  if (loss.getType() != types[0])
    return emitOpError() << "local lowering produced " << loss.getType()
                         << " for a result of type " << types[0];
  results.push_back(loss);
  return success();
}

//===----------------------------------------------------------------------===//
// reshape, transpose, cast, broadcast
//===----------------------------------------------------------------------===//

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
    in.push_back(size == 1
                     ? DimFactors{}
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

ShardingRule BroadcastOp::getShardingRule() {
  return buildElementwiseRule(*this, {{0}});
}

//===----------------------------------------------------------------------===//
// Gradient ops
//===----------------------------------------------------------------------===//

ShardingRule MaxGradOp::getShardingRule() {
  return buildElementwiseRule(*this, {{2}});
}

ShardingRule SoftmaxGradOp::getShardingRule() {
  return elementwiseWithBlockedDim(*this, getAxis(), {{1}});
}

ShardingRule LayerNormGradOp::getShardingRule() {
  return normRule(*this, FactorKind::Sum);
}

ShardingRule RmsNormGradOp::getShardingRule() {
  return normRule(*this, FactorKind::Sum);
}

ShardingRule LayerNormInputGradOp::getShardingRule() {
  return normRule(*this, FactorKind::Parallel);
}

ShardingRule LayerNormParamGradOp::getShardingRule() {
  return normRule(*this, FactorKind::Sum);
}

ShardingRule RmsNormInputGradOp::getShardingRule() {
  return normRule(*this, FactorKind::Parallel);
}

ShardingRule RmsNormParamGradOp::getShardingRule() {
  return normRule(*this, FactorKind::Sum);
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
    idFactors.push_back(
        size == 1 ? DimFactors{}
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
                                          ArrayRef<Value> operands,
                                          TypeRange types,
                                          const FactorAxes &factors,
                                          SmallVectorImpl<Value> &results) {
  const GridAxes &axes = factors[getLoweredFactors().front()];
  int64_t pieceRows = cast<RankedTensorType>(types[0]).getDimSize(0);
  Value offset = ctx.shardOffset(getLoc(), axes, pieceRows);
  results.push_back(EmbeddingShardGradOp::create(
      ctx.builder(), getLoc(), types[0], operands[0], operands[1], offset,
      tensorType(getDtable()).getDimSize(0)));
  return success();
}

ShardingRule AttentionGradOp::getShardingRule() {
  return attentionRule(*this, getCausal(), /*gradient=*/true);
}

int64_t AttentionGradOp::getIndependentProducts() {
  return attentionHeads(getQ());
}

int64_t AttentionGradOp::getFlopCount() {
  auto q = tensorType(getQ()), k = tensorType(getK());
  return int64_t(::dtc::kernels::attentionFlops(
      q.getDimSize(0), q.getDimSize(1), q.getDimSize(2), k.getDimSize(2),
      q.getDimSize(3), getCausal(), /*gradient=*/true));
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
  Value offset =
      ctx.shardOffset(loc, axes, tensorType(logits).getShape().back());
  // The forward's statistics when it ran on the same local logits.
  Value max = ctx.lookupShared(logits, "cross_entropy.max");
  Value sumExp = ctx.lookupShared(logits, "cross_entropy.sum_exp");
  if (!max || !sumExp) {
    VocabStats stats = vocabShardStats(ctx, loc, logits, labels, offset, vocab,
                                       axes, getIgnoreIndexAttr());
    max = stats.max;
    sumExp = stats.sumExp;
  }
  OpBuilder &b = ctx.builder();
  results.push_back(CrossEntropyShardGradOp::create(
      b, loc, types[0], logits, labels, max, sumExp, dloss, offset,
      b.getI64IntegerAttr(vocab), getScaleAttr(), getIgnoreIndexAttr()));
  return success();
}

//===----------------------------------------------------------------------===//
// Local ops
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Optimizer ops
//===----------------------------------------------------------------------===//

ShardingRule SgdUpdateOp::getShardingRule() {
  return buildElementwiseRule(*this, {});
}

ShardingRule AdamUpdateOp::getShardingRule() {
  return buildElementwiseRule(*this, {});
}

ShardingRule LossScaleUpdateOp::getShardingRule() {
  // Scalars only: nothing to split.
  return buildElementwiseRule(*this, {});
}

#define GET_OP_CLASSES
#include "dtc/Dialect/DtcOps.cpp.inc"
