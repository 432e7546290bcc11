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
// so the experts' FFNs are ordinary batched matmuls (tensor parallelism
// splits their F like any MLP's) and every kernel has a small gradient
// rule: dispatch and combine are each other's transpose, moe_slot_dot
// gives their weights' gradients, moe_route_grad the renormalisation's.
// Routing reads every token's scores (capacity is filled in global token
// order), so moe_route keeps its tokens whole; dispatch sums over tokens
// (a batch shard fills its own tokens' rows: a pending partial sum) and
// combine is parallel in them.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/Utils.h"

#include "mlir/IR/Diagnostics.h"

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
  if (getTopK() < 1 || getTopK() > experts)
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

/// The token-side operands (rows [T, D] and [T, k] slot tensors) and an
/// experts' buffer [E, C, D]: tokens of `tokenKind`, D of `widthKind`.
static void slotRule(ShardingRule &rule, RankedTensorType rows,
                     RankedTensorType buffer, int64_t topK,
                     FactorKind tokenKind, TensorFactors &rowFactors,
                     TensorFactors &slotFactors, TensorFactors &bufferFactors,
                     FactorKind widthKind = FactorKind::Parallel) {
  DimFactors tokens = factorOf(rule, rows.getDimSize(0), tokenKind);
  DimFactors width = factorOf(rule, rows.getDimSize(1), widthKind);
  DimFactors slots = factorOf(rule, topK, FactorKind::Blocked);
  DimFactors experts =
      factorOf(rule, buffer.getDimSize(0), FactorKind::Blocked);
  DimFactors capacity =
      factorOf(rule, buffer.getDimSize(1), FactorKind::Blocked);
  rowFactors = {tokens, width};
  slotFactors = {tokens, slots};
  bufferFactors = {experts, capacity, width};
}

ShardingRule MoeDispatchOp::getShardingRule() {
  // A batch shard fills the rows of its own tokens: a pending sum.
  ShardingRule rule;
  TensorFactors rows, slots, buffer;
  slotRule(rule, typeOf(getX()), typeOf(getBuffer()),
           typeOf(getExperts()).getDimSize(1), FactorKind::Sum, rows, slots,
           buffer);
  rule.operands = {rows, slots, slots, slots};
  rule.results = {buffer};
  return rule;
}

ShardingRule MoeCombineOp::getShardingRule() {
  ShardingRule rule;
  TensorFactors rows, slots, buffer;
  slotRule(rule, typeOf(getResult()), typeOf(getY()),
           typeOf(getExperts()).getDimSize(1), FactorKind::Parallel, rows,
           slots, buffer);
  rule.operands = {buffer, slots, slots, slots};
  rule.results = {rows};
  return rule;
}

ShardingRule MoeSlotDotOp::getShardingRule() {
  // The row width is contracted: split, each shard's dot is a partial sum.
  ShardingRule rule;
  TensorFactors rows, slots, buffer;
  slotRule(rule, typeOf(getA()), typeOf(getY()),
           typeOf(getExperts()).getDimSize(1), FactorKind::Parallel, rows,
           slots, buffer, FactorKind::Sum);
  rule.operands = {rows, buffer, slots, slots};
  rule.results = {slots};
  return rule;
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
