//===- MoeOps.cpp - mixture of experts: verifiers, decompositions, rules --===//
//
// dtc.moe and dtc.load_balancing_loss are composite model ops: each states
// how it is written in kernels (decompose), and dtc-decompose-composites
// replaces it before the training step is built. dtc.moe becomes
//
//   probs = softmax(x router)                         [T, E]
//   experts, positions, weights = moe_route(probs)    [T, k] each
//   buffer = moe_dispatch(x, experts, positions, 1)   [E, C, D]
//   y = gelu(buffer w_in) w_out                       [E, C, D] (batched)
//   result = moe_combine(y, experts, positions, weights)
//
// so the experts' FFNs are ordinary batched matmuls (expert parallelism
// splits their E; Megatron's tensor-parallel pattern keeps them whole) and
// every kernel has a small gradient rule: dispatch and combine are each
// other's transpose, moe_slot_dot gives their weights' gradients,
// moe_route_grad the renormalisation's.
// Routing reads every token's scores (capacity is filled in global token
// order), so moe_route keeps its tokens whole; dispatch sums over tokens
// (a batch shard fills its own tokens' rows: a pending partial sum) and
// combine is parallel in them.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/Utils.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace mlir::dtc;

namespace {

RankedTensorType typeOf(Value v) { return tensorTypeOf(v); }

/// A dimension's factors: one of `size` and `kind`, none for size 1 (a
/// dimension of size 1 is never split).
DimFactors factorOf(ShardingRule &rule, int64_t size, FactorKind kind) {
  if (size == 1)
    return {};
  return {rule.addFactor(size, kind)};
}

/// softmax(x router) along the experts.
Value routerProbs(OpBuilder &b, Location loc, Value x, Value router) {
  Value logits = MatmulOp::create(b, loc, x, router);
  return SoftmaxOp::create(b, loc, logits, b.getI64IntegerAttr(1));
}

/// moe_route of `probs` with `topK` slots per token and `capacity` rows per
/// expert.
MoeRouteOp route(OpBuilder &b, Location loc, Value probs, int64_t topK,
                 int64_t capacity) {
  RankedTensorType p = typeOf(probs);
  auto slots = RankedTensorType::get({p.getDimSize(0), topK}, b.getI32Type());
  return MoeRouteOp::create(b, loc, slots, slots,
                            slots.clone(p.getElementType()), probs, topK,
                            capacity);
}

/// Checks that `v` has rank `rank`; names it `what` in the error.
LogicalResult needRank(Operation *op, Value v, int64_t rank, StringRef what) {
  if (typeOf(v).getRank() != rank)
    return op->emitOpError()
           << what << " must have rank " << rank << ", got " << v.getType();
  return success();
}

/// x [T, D] and router [D, E] of one element type.
LogicalResult verifyRouter(Operation *op, Value x, Value router) {
  if (failed(needRank(op, x, 2, "x [T, D]")) ||
      failed(needRank(op, router, 2, "router [D, E]")))
    return failure();
  if (typeOf(router).getDimSize(0) != typeOf(x).getDimSize(1))
    return op->emitOpError() << "router " << router.getType()
                             << " must be [D, E] for x " << x.getType();
  if (typeOf(router).getElementType() != typeOf(x).getElementType())
    return op->emitOpError() << "router and x must have one element type, got "
                             << router.getType() << " and " << x.getType();
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// dtc.moe
//===----------------------------------------------------------------------===//

LogicalResult MoeOp::verify() {
  if (failed(verifyRouter(*this, getX(), getRouter())) ||
      failed(needRank(*this, getWIn(), 3, "w_in [E, D, F]")) ||
      failed(needRank(*this, getWOut(), 3, "w_out [E, F, D]")))
    return failure();
  RankedTensorType x = typeOf(getX()), wIn = typeOf(getWIn()),
                   wOut = typeOf(getWOut());
  const int64_t experts = typeOf(getRouter()).getDimSize(1);
  const int64_t d = x.getDimSize(1), f = wIn.getDimSize(2);
  if (wIn.getDimSize(0) != experts || wIn.getDimSize(1) != d)
    return emitOpError() << "w_in " << getWIn().getType()
                         << " must be [E, D, F] = [" << experts << ", " << d
                         << ", F] for router " << getRouter().getType()
                         << " and x " << getX().getType();
  if (wOut.getShape() != ArrayRef<int64_t>{experts, f, d})
    return emitOpError() << "w_out " << getWOut().getType()
                         << " must be [E, F, D] = [" << experts << ", " << f
                         << ", " << d << "] for w_in " << getWIn().getType();
  for (Value v : {getWIn(), getWOut(), getResult()})
    if (typeOf(v).getElementType() != x.getElementType())
      return emitOpError() << "x, router, w_in, w_out and the result must have "
                              "one element type, got "
                           << v.getType() << " beside x " << getX().getType();
  if (typeOf(getResult()).getShape() != x.getShape())
    return emitOpError() << "the result " << getResult().getType()
                         << " must have x's shape " << getX().getType();
  if (getTopK() < 1 || int64_t(getTopK()) > experts)
    return emitOpError() << "top_k = " << getTopK()
                         << " must be in [1, E] = [1, " << experts << "]";
  const double factor = getCapacityFactor().convertToDouble();
  if (!(factor > 0) || !std::isfinite(factor))
    return emitOpError() << "capacity_factor = " << formatNumber(factor)
                         << " must be a finite number > 0";
  return success();
}

int64_t MoeOp::getCapacity() {
  const int64_t tokens = typeOf(getX()).getDimSize(0);
  const int64_t experts = typeOf(getRouter()).getDimSize(1);
  // In double from the attribute's f32 value; a product within a millionth
  // of an integer is that integer (f32's 1.1 is 1.10000002, and 1.1 * 20
  // tokens * 2 / 4 experts must give 11 rows, not 12). No expert can take
  // more than every token.
  const double rows = getCapacityFactor().convertToDouble() * double(tokens) *
                      double(getTopK()) / double(experts);
  const int64_t capacity =
      int64_t(std::ceil(rows - 1e-6 * std::max(1.0, rows)));
  return std::clamp<int64_t>(capacity, 1, tokens);
}

Value MoeOp::decompose(OpBuilder &b) {
  Location loc = getLoc();
  RankedTensorType x = typeOf(getX());
  const int64_t capacity = getCapacity();
  const int64_t experts = typeOf(getRouter()).getDimSize(1);
  MoeRouteOp slots = route(b, loc, routerProbs(b, loc, getX(), getRouter()),
                           getTopK(), capacity);
  Value ones = createSplatConstant(b, loc, typeOf(slots.getWeights()), 1.0);
  auto bufferType = RankedTensorType::get({experts, capacity, x.getDimSize(1)},
                                          x.getElementType());
  Value buffer =
      MoeDispatchOp::create(b, loc, bufferType, getX(), slots.getExperts(),
                            slots.getPositions(), ones);
  Value hidden =
      GeluOp::create(b, loc, MatmulOp::create(b, loc, buffer, getWIn()));
  Value y = MatmulOp::create(b, loc, hidden, getWOut());
  return MoeCombineOp::create(b, loc, x, y, slots.getExperts(),
                              slots.getPositions(), slots.getWeights());
}

//===----------------------------------------------------------------------===//
// dtc.load_balancing_loss
//===----------------------------------------------------------------------===//

LogicalResult LoadBalancingLossOp::verify() {
  return verifyRouter(*this, getX(), getRouter());
}

Value LoadBalancingLossOp::decompose(OpBuilder &b) {
  Location loc = getLoc();
  Value probs = routerProbs(b, loc, getX(), getRouter());
  RankedTensorType p = typeOf(probs);
  const int64_t tokens = p.getDimSize(0), experts = p.getDimSize(1);
  // The first choice of each token: a route of one slot that drops nothing.
  MoeRouteOp first = route(b, loc, probs, 1, tokens);
  auto perExpert = RankedTensorType::get({experts}, b.getF32Type());
  Value fraction =
      MoeFirstChoiceFractionOp::create(b, loc, perExpert, first.getExperts());
  Value meanProb = ReduceMeanOp::create(b, loc, probs, ArrayRef<int64_t>{0},
                                        /*keep_dims=*/false);
  if (typeOf(meanProb).getElementType() != b.getF32Type())
    meanProb = CastOp::create(b, loc, perExpert, meanProb);
  Value sum =
      ReduceSumOp::create(b, loc, MulOp::create(b, loc, fraction, meanProb),
                          ArrayRef<int64_t>{0}, /*keep_dims=*/false);
  auto scalar = RankedTensorType::get({}, b.getF32Type());
  return MulOp::create(b, loc, sum,
                       createSplatConstant(b, loc, scalar, double(experts)));
}

//===----------------------------------------------------------------------===//
// dtc.moe_exchange
//===----------------------------------------------------------------------===//

LogicalResult MoeExchangeOp::verify() {
  auto grid =
      SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(*this, getGridAttr());
  if (!grid)
    return emitOpError() << "no shard.grid " << getGridAttr();
  int64_t members = 1;
  for (int16_t axis : getGridAxes()) {
    if (axis < 0 || axis >= grid.getRank())
      return emitOpError() << "grid axis " << axis << " does not exist on "
                           << getGridAttr();
    members *= grid.getShape()[axis];
  }
  if (failed(needRank(*this, getExperts(), 2, "experts [T, k]")) ||
      failed(needRank(*this, getData(), 3, "data")) ||
      failed(needRank(*this, getResult(), 3, "the result")))
    return failure();
  if (getPositions().getType() != getExperts().getType())
    return emitOpError() << "positions " << getPositions().getType()
                         << " must have the type of experts "
                         << getExperts().getType();
  RankedTensorType data = typeOf(getData()), result = typeOf(getResult());
  if (data.getElementType() != result.getElementType() ||
      data.getDimSize(2) != result.getDimSize(2))
    return emitOpError() << "data " << data << " and the result " << result
                         << " must have one element type and row width";
  RankedTensorType slots = getToExperts() ? data : result,
                   buffer = getToExperts() ? result : data;
  const int64_t tokens = typeOf(getExperts()).getDimSize(0),
                topK = typeOf(getExperts()).getDimSize(1);
  if (slots.getDimSize(0) * members != tokens || slots.getDimSize(1) != topK)
    return emitOpError() << "the token slots " << slots
                         << " must be [T/n, k] = [" << tokens << "/" << members
                         << ", " << topK << ", D] for the routing "
                         << getExperts().getType() << " over " << members
                         << " members";
  (void)buffer;
  return success();
}

//===----------------------------------------------------------------------===//
// The kernels' sharding rules
//===----------------------------------------------------------------------===//

ShardingRule MoeRouteOp::getShardingRule() {
  // Positions follow every earlier token's choices: tokens stay whole.
  ShardingRule rule;
  RankedTensorType probs = typeOf(getProbs());
  DimFactors tokens = factorOf(rule, probs.getDimSize(0), FactorKind::Blocked);
  DimFactors experts = factorOf(rule, probs.getDimSize(1), FactorKind::Blocked);
  DimFactors slots = factorOf(rule, getTopK(), FactorKind::Blocked);
  rule.operands = {{tokens, experts}};
  rule.results = {{tokens, slots}, {tokens, slots}, {tokens, slots}};
  return rule;
}

ShardingRule MoeRouteGradOp::getShardingRule() {
  ShardingRule rule;
  RankedTensorType probs = typeOf(getProbs());
  DimFactors tokens = factorOf(rule, probs.getDimSize(0), FactorKind::Parallel);
  DimFactors experts = factorOf(rule, probs.getDimSize(1), FactorKind::Blocked);
  DimFactors slots =
      factorOf(rule, typeOf(getExperts()).getDimSize(1), FactorKind::Blocked);
  rule.operands = {{tokens, experts}, {tokens, slots}, {tokens, slots}};
  rule.results = {{tokens, experts}};
  return rule;
}

namespace {

/// The factors of dispatch's, combine's and slot_dot's rules: token rows
/// [tokens, width], the routing [routed, slots] (every token's: it stays
/// whole, and a lowering slices what it needs), an experts' buffer
/// [experts, capacity, width]. -1 for a factor of a dimension of size 1.
struct SlotFactors {
  int64_t tokens = -1, width = -1, routed = -1, slots = -1, experts = -1,
          capacity = -1;
  TensorFactors rows, routing, buffer, tokenSlots;
};

SlotFactors slotRule(ShardingRule &rule, RankedTensorType rows,
                     RankedTensorType buffer, int64_t topK,
                     FactorKind tokenKind, FactorKind expertKind,
                     FactorKind widthKind = FactorKind::Parallel) {
  SlotFactors f;
  auto add = [&](int64_t size, FactorKind kind, int64_t &id) {
    DimFactors dim = factorOf(rule, size, kind);
    id = dim.empty() ? -1 : dim.front();
    return dim;
  };
  DimFactors tokens = add(rows.getDimSize(0), tokenKind, f.tokens);
  DimFactors width = add(rows.getDimSize(1), widthKind, f.width);
  DimFactors routed = add(rows.getDimSize(0), FactorKind::Blocked, f.routed);
  DimFactors slots = add(topK, FactorKind::Blocked, f.slots);
  DimFactors experts = add(buffer.getDimSize(0), expertKind, f.experts);
  DimFactors capacity =
      add(buffer.getDimSize(1), FactorKind::Blocked, f.capacity);
  f.rows = {tokens, width};
  f.routing = {routed, slots};
  f.buffer = {experts, capacity, width};
  f.tokenSlots = {tokens, slots};
  if (f.tokens >= 0 && f.experts >= 0) {
    rule.sharedAxes.push_back({f.tokens, f.experts});
    rule.sharedAxesMayDiffer = true;
  }
  return f;
}

SlotFactors slotRuleOf(MoeDispatchOp op, ShardingRule &rule) {
  // The tokens are summed into the buffer: a batch shard fills its own
  // tokens' rows, and the lowering completes the sum (over an axis that
  // also splits the experts, by sending each row to its expert's rank).
  SlotFactors f = slotRule(rule, typeOf(op.getX()), typeOf(op.getBuffer()),
                           typeOf(op.getExperts()).getDimSize(1),
                           FactorKind::Resolved, FactorKind::Parallel);
  rule.operands = {f.rows, f.routing, f.routing, f.routing};
  rule.results = {f.buffer};
  return f;
}

SlotFactors slotRuleOf(MoeCombineOp op, ShardingRule &rule) {
  SlotFactors f = slotRule(rule, typeOf(op.getResult()), typeOf(op.getY()),
                           typeOf(op.getExperts()).getDimSize(1),
                           FactorKind::Parallel, FactorKind::Resolved);
  rule.operands = {f.buffer, f.routing, f.routing, f.routing};
  rule.results = {f.rows};
  return f;
}

SlotFactors slotRuleOf(MoeSlotDotOp op, ShardingRule &rule) {
  // The row width is contracted: split, each shard's dot is a partial sum.
  SlotFactors f =
      slotRule(rule, typeOf(op.getA()), typeOf(op.getY()),
               typeOf(op.getExperts()).getDimSize(1), FactorKind::Parallel,
               FactorKind::Resolved, FactorKind::Sum);
  rule.operands = {f.rows, f.buffer, f.routing, f.routing};
  rule.results = {f.tokenSlots};
  return f;
}

/// How a lowering of dispatch, combine or slot_dot splits tokens and
/// experts: the tokens over `batchOnly` then `shared`, the experts over
/// `shared` (expert parallelism: the axes of both) then `expertsOnly`.
struct SlotSplit {
  GridAxes tokens, batchOnly, shared, expertsOnly;
};

FailureOr<SlotSplit> slotSplit(Operation *op, const SlotFactors &f,
                               const FactorAxes &factors,
                               ArrayRef<int64_t> grid) {
  // An axis of size 1 (a pipeline's one micro-batch) splits nothing.
  auto splitting = [&](const GridAxes &axes) {
    GridAxes kept;
    for (int64_t axis : axes)
      if (grid[size_t(axis)] != 1)
        kept.push_back(axis);
    return kept;
  };
  SlotSplit split;
  if (f.tokens >= 0)
    split.tokens = splitting(factors[size_t(f.tokens)]);
  GridAxes experts;
  if (f.experts >= 0)
    experts = splitting(factors[size_t(f.experts)]);
  for (int64_t axis : experts)
    (llvm::is_contained(split.tokens, axis) ? split.shared : split.expertsOnly)
        .push_back(axis);
  // The axes both split are the tokens' minor ones (so each group of them
  // holds one contiguous run of tokens) and the experts' major ones (so
  // each member of the group one contiguous run of experts, which other
  // axes may split further).
  const size_t n = split.tokens.size(), m = split.shared.size();
  if (!std::equal(split.shared.begin(), split.shared.end(),
                  split.tokens.begin() + (n - m)) ||
      !std::equal(split.shared.begin(), split.shared.end(), experts.begin()))
    return op->emitError()
           << "expert parallelism needs the mesh axes that split both the "
              "tokens and the experts to be the tokens' last and the "
              "experts' first";
  split.batchOnly.assign(split.tokens.begin(), split.tokens.begin() + (n - m));
  return split;
}

/// `whole`'s piece of dimension 0 over `axes` (itself when none).
Value sliceTokens(LocalLoweringContext &ctx, Location loc, Value whole,
                  ArrayRef<int64_t> axes) {
  return axes.empty() ? whole : ctx.sliceAlong(loc, whole, axes, 0);
}

/// `v` as `type`'s element type.
Value castTo(OpBuilder &b, Location loc, Value v, Type element) {
  RankedTensorType t = typeOf(v);
  if (t.getElementType() == element)
    return v;
  return CastOp::create(b, loc, t.clone(element), v);
}

Value reshapeTo(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  return ReshapeOp::create(b, loc, typeOf(v).clone(shape), v);
}

/// dtc.moe_exchange of `data` over `axes`.
Value exchange(LocalLoweringContext &ctx, Location loc, Value data,
               Value experts, Value positions, ArrayRef<int64_t> axes,
               bool toExperts, RankedTensorType resultType) {
  SmallVector<int16_t> gridAxes(axes.begin(), axes.end());
  return MoeExchangeOp::create(ctx.builder(), loc, resultType, data, experts,
                               positions, ctx.gridSymbol().getValue(), gridAxes,
                               toExperts);
}

/// The routing of the tokens of this rank's expert-parallel group: the
/// batch-only axes' piece.
std::pair<Value, Value> groupRouting(LocalLoweringContext &ctx, Location loc,
                                     Value experts, Value positions,
                                     const SlotSplit &split) {
  return {sliceTokens(ctx, loc, experts, split.batchOnly),
          sliceTokens(ctx, loc, positions, split.batchOnly)};
}

/// The factors a slot kernel's lowering implements: its tokens and experts.
template <class SlotOp> SmallVector<int64_t> loweredSlotFactors(SlotOp op) {
  ShardingRule rule;
  SlotFactors f = slotRuleOf(op, rule);
  return {f.tokens, f.experts};
}

/// How `factors` split a slot kernel's tokens and experts.
template <class SlotOp>
FailureOr<SlotSplit> slotSplitOf(SlotOp op, const FactorAxes &factors,
                                 ArrayRef<int64_t> grid) {
  ShardingRule rule;
  return slotSplit(op, slotRuleOf(op, rule), factors, grid);
}

} // namespace

ShardingRule MoeDispatchOp::getShardingRule() {
  ShardingRule rule;
  slotRuleOf(*this, rule);
  return rule;
}

ShardingRule MoeCombineOp::getShardingRule() {
  ShardingRule rule;
  slotRuleOf(*this, rule);
  return rule;
}

ShardingRule MoeSlotDotOp::getShardingRule() {
  ShardingRule rule;
  slotRuleOf(*this, rule);
  return rule;
}

//===----------------------------------------------------------------------===//
// Local lowerings: batch shards and expert parallelism
//===----------------------------------------------------------------------===//

SmallVector<int64_t> MoeDispatchOp::getLoweredFactors() {
  return loweredSlotFactors(*this);
}

LogicalResult MoeDispatchOp::buildLocal(LocalLoweringContext &ctx,
                                        ArrayRef<Value> local,
                                        TypeRange resultTypes,
                                        const FactorAxes &factors,
                                        SmallVectorImpl<Value> &results) {
  FailureOr<SlotSplit> split = slotSplitOf(*this, factors, ctx.grid());
  if (failed(split))
    return failure();
  OpBuilder &b = ctx.builder();
  Location loc = getLoc();
  Value x = local[0], experts = local[1], positions = local[2],
        weights = local[3];
  auto resultType = cast<RankedTensorType>(resultTypes[0]);
  Value buffer;
  if (split->shared.empty()) {
    // Each batch shard fills its own tokens' rows of every expert (the
    // rows as wide as the rank's piece of them).
    SmallVector<int64_t> ownShape(resultType.getShape());
    ownShape[0] = typeOf(getBuffer()).getDimSize(0);
    Value own =
        MoeDispatchOp::create(b, loc, resultType.clone(ownShape), x,
                              sliceTokens(ctx, loc, experts, split->tokens),
                              sliceTokens(ctx, loc, positions, split->tokens),
                              sliceTokens(ctx, loc, weights, split->tokens));
    if (!split->tokens.empty())
      own = ctx.allReduce(loc, own, split->tokens, PartialKind::Sum);
    buffer = split->expertsOnly.empty()
                 ? own
                 : ctx.sliceAlong(loc, own, split->expertsOnly, 0);
  } else {
    // Each token slot's row, scaled, goes to its expert's rank.
    RankedTensorType xt = typeOf(x);
    const int64_t tokens = xt.getDimSize(0), width = xt.getDimSize(1),
                  topK = typeOf(experts).getDimSize(1);
    Value w = castTo(b, loc, sliceTokens(ctx, loc, weights, split->tokens),
                     xt.getElementType());
    Value rows = MulOp::create(b, loc, reshapeTo(b, loc, x, {tokens, 1, width}),
                               reshapeTo(b, loc, w, {tokens, topK, 1}));
    auto [groupExperts, groupPositions] =
        groupRouting(ctx, loc, experts, positions, *split);
    SmallVector<int64_t> memberShape(resultType.getShape());
    memberShape[0] = typeOf(getBuffer()).getDimSize(0) /
                     shardCount(ctx.grid(), split->shared);
    buffer =
        exchange(ctx, loc, rows, groupExperts, groupPositions, split->shared,
                 /*toExperts=*/true, resultType.clone(memberShape));
    // Other groups' tokens fill other rows of the same experts.
    if (!split->batchOnly.empty())
      buffer = ctx.allReduce(loc, buffer, split->batchOnly, PartialKind::Sum);
    if (!split->expertsOnly.empty())
      buffer = ctx.sliceAlong(loc, buffer, split->expertsOnly, 0);
  }
  results.push_back(buffer);
  return success();
}

SmallVector<int64_t> MoeCombineOp::getLoweredFactors() {
  return loweredSlotFactors(*this);
}

/// The experts' buffer whole over the axes that split only the experts
/// (a plan that splits the experts where the tokens are whole, e.g. the
/// tensor-parallel layout program's).
static Value wholeExperts(LocalLoweringContext &ctx, Location loc, Value y,
                          const SlotSplit &split) {
  return split.expertsOnly.empty()
             ? y
             : ctx.gatherAlong(loc, y, split.expertsOnly, 0);
}

/// Every slot's buffer row at this rank's tokens [T/n, k, width]: sent by
/// its expert's rank.
static Value slotRows(LocalLoweringContext &ctx, Operation *op, Value y,
                      Value experts, Value positions, const SlotSplit &split,
                      int64_t tokens) {
  Location loc = op->getLoc();
  RankedTensorType yt = typeOf(y);
  auto [groupExperts, groupPositions] =
      groupRouting(ctx, loc, experts, positions, split);
  auto rowsType = RankedTensorType::get(
      {tokens, typeOf(experts).getDimSize(1), yt.getDimSize(2)},
      yt.getElementType());
  return exchange(ctx, loc, wholeExperts(ctx, loc, y, split), groupExperts,
                  groupPositions, split.shared, /*toExperts=*/false, rowsType);
}

LogicalResult MoeCombineOp::buildLocal(LocalLoweringContext &ctx,
                                       ArrayRef<Value> local,
                                       TypeRange resultTypes,
                                       const FactorAxes &factors,
                                       SmallVectorImpl<Value> &results) {
  FailureOr<SlotSplit> split = slotSplitOf(*this, factors, ctx.grid());
  if (failed(split))
    return failure();
  OpBuilder &b = ctx.builder();
  Location loc = getLoc();
  Value y = local[0], experts = local[1], positions = local[2],
        weights = local[3];
  auto resultType = cast<RankedTensorType>(resultTypes[0]);
  Value tokenWeights = sliceTokens(ctx, loc, weights, split->tokens);
  if (split->shared.empty()) {
    results.push_back(MoeCombineOp::create(
        b, loc, resultType, wholeExperts(ctx, loc, y, *split),
        sliceTokens(ctx, loc, experts, split->tokens),
        sliceTokens(ctx, loc, positions, split->tokens), tokenWeights));
    return success();
  }
  const int64_t tokens = resultType.getDimSize(0),
                topK = typeOf(experts).getDimSize(1);
  Value rows = slotRows(ctx, *this, y, experts, positions, *split, tokens);
  Value w = reshapeTo(b, loc,
                      castTo(b, loc, tokenWeights, resultType.getElementType()),
                      {tokens, topK, 1});
  Value weighted = MulOp::create(b, loc, rows, w);
  results.push_back(ReduceSumOp::create(b, loc, weighted,
                                        SmallVector<int64_t>{1},
                                        /*keep_dims=*/false));
  return success();
}

SmallVector<int64_t> MoeSlotDotOp::getLoweredFactors() {
  return loweredSlotFactors(*this);
}

LogicalResult MoeSlotDotOp::buildLocal(LocalLoweringContext &ctx,
                                       ArrayRef<Value> local,
                                       TypeRange resultTypes,
                                       const FactorAxes &factors,
                                       SmallVectorImpl<Value> &results) {
  FailureOr<SlotSplit> split = slotSplitOf(*this, factors, ctx.grid());
  if (failed(split))
    return failure();
  OpBuilder &b = ctx.builder();
  Location loc = getLoc();
  Value a = local[0], y = local[1], experts = local[2], positions = local[3];
  auto resultType = cast<RankedTensorType>(resultTypes[0]);
  if (split->shared.empty()) {
    results.push_back(MoeSlotDotOp::create(
        b, loc, resultType, a, wholeExperts(ctx, loc, y, *split),
        sliceTokens(ctx, loc, experts, split->tokens),
        sliceTokens(ctx, loc, positions, split->tokens)));
    return success();
  }
  RankedTensorType at = typeOf(a);
  const int64_t tokens = at.getDimSize(0), width = at.getDimSize(1);
  FailureOr<Value> rows =
      slotRows(ctx, *this, y, experts, positions, *split, tokens);
  if (failed(rows))
    return failure();
  Value products = MulOp::create(
      b, loc, *rows,
      reshapeTo(b, loc, castTo(b, loc, a, typeOf(*rows).getElementType()),
                {tokens, 1, width}));
  Value dots = ReduceSumOp::create(b, loc, products, SmallVector<int64_t>{2},
                                   /*keep_dims=*/false);
  results.push_back(castTo(b, loc, dots, resultType.getElementType()));
  return success();
}

ShardingRule MoeFirstChoiceFractionOp::getShardingRule() {
  // A fraction of the tokens: a shard's local fraction, scaled by its share
  // of the tokens, is a pending sum.
  ShardingRule rule;
  RankedTensorType experts = typeOf(getExperts());
  DimFactors tokens = factorOf(rule, experts.getDimSize(0), FactorKind::Mean);
  DimFactors slots = factorOf(rule, experts.getDimSize(1), FactorKind::Blocked);
  DimFactors perExpert =
      factorOf(rule, typeOf(getFraction()).getDimSize(0), FactorKind::Blocked);
  rule.operands = {{tokens, slots}};
  rule.results = {{perExpert}};
  return rule;
}

//===----------------------------------------------------------------------===//
// Gradient rules
//===----------------------------------------------------------------------===//

LogicalResult MoeRouteOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                        SmallVectorImpl<Value> &grads) {
  // Only the weights are differentiable; which experts a token picks and
  // where it lands are piecewise constant.
  Value dweights = dys[2];
  grads.assign({dweights ? Value(MoeRouteGradOp::create(
                               b, getLoc(), getProbs().getType(), getProbs(),
                               getExperts(), dweights))
                         : Value()});
  return success();
}

LogicalResult MoeDispatchOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                           SmallVectorImpl<Value> &grads) {
  Value dx = MoeCombineOp::create(b, getLoc(), getX().getType(), dys[0],
                                  getExperts(), getPositions(), getWeights());
  Value dweights =
      MoeSlotDotOp::create(b, getLoc(), getWeights().getType(), getX(), dys[0],
                           getExperts(), getPositions());
  grads.assign({dx, Value(), Value(), dweights});
  return success();
}

LogicalResult MoeCombineOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                          SmallVectorImpl<Value> &grads) {
  Value dy = MoeDispatchOp::create(b, getLoc(), getY().getType(), dys[0],
                                   getExperts(), getPositions(), getWeights());
  Value dweights =
      MoeSlotDotOp::create(b, getLoc(), getWeights().getType(), dys[0], getY(),
                           getExperts(), getPositions());
  grads.assign({dy, Value(), Value(), dweights});
  return success();
}

LogicalResult
MoeFirstChoiceFractionOp::buildGradient(OpBuilder &, ArrayRef<Value>,
                                        SmallVectorImpl<Value> &grads) {
  grads.assign({Value()}); // a function of integer choices
  return success();
}

int64_t mlir::dtc::exchangedSlotElements(Operation *op) {
  auto slots = [](Value experts, Value rows) {
    return tensorTypeOf(experts).getNumElements() *
           tensorTypeOf(rows).getShape().back();
  };
  return llvm::TypeSwitch<Operation *, int64_t>(op)
      .Case([&](MoeDispatchOp d) { return slots(d.getExperts(), d.getX()); })
      .Case([&](MoeCombineOp c) { return slots(c.getExperts(), c.getY()); })
      .Case([&](MoeSlotDotOp s) { return slots(s.getExperts(), s.getA()); })
      .Default([](Operation *) { return int64_t(0); });
}
