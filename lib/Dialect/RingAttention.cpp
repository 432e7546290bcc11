//===- RingAttention.cpp - attention over a split sequence, as a ring -----===//
//
// Under ring-attention sequence parallelism (a plan with sp > 1; the ops
// carry dtc.ring) attention's query and key sequences are split over one
// grid axis of n ranks, each rank holding one contiguous chunk of c
// positions, or under the striped layout (dtc.striped) the positions r,
// r + n, r + 2n, ..., or under the zigzag layout (dtc.zigzag) the chunks r
// and 2n - 1 - r of the sequence cut into 2n; the last two balance causal
// work (docs/design.md). The local
// lowering runs n blocks: at ring step t a rank's queries meet the key/value
// chunk of the rank t places before it (the chunks travel by shard.shift), each
// block merged into the running output by logsumexp weights
// (dtc.attention_block, with the chunks' global positions for the causal mask).
// The gradient runs the same ring with the key/value gradients travelling
// beside their chunks; one last shift brings them home. docs/design.md "Ring
// attention" derives the traffic.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/artifact/PieceLayout.h"
#include "dtc/kernels/Flops.h"

using namespace mlir;
using namespace mlir::dtc;

namespace {

constexpr StringLiteral kSharedOutput = "ring_attention.output";
constexpr StringLiteral kSharedLogSumExp = "ring_attention.lse";

/// The ring's axis and length from the sequence factors' axes: queries and
/// keys split over the same one grid axis (a ring), or only the queries
/// split (one block against whole keys).
struct Ring {
  int64_t axis = -1; ///< -1: the keys are whole
  int64_t length = 1;
  GridAxes queryAxes;
  /// The striped layout (dtc.striped): rank r's rows are the positions r,
  /// r + n, r + 2n, ... instead of one contiguous chunk.
  bool striped = false;
  /// The zigzag layout (dtc.zigzag): rank r's rows are the chunks r and
  /// 2n - 1 - r of the sequence cut into 2n.
  bool zigzag = false;
};

/// The attributes that mark a permuted sequence, with the order each names.
constexpr std::pair<StringLiteral, ::dtc::artifact::SequenceOrder>
    kOrderedLayouts[] = {
        {DtcDialect::kStripedAttr, ::dtc::artifact::SequenceOrder::Striped},
        {DtcDialect::kZigzagAttr, ::dtc::artifact::SequenceOrder::Zigzag}};

FailureOr<Ring> ringOf(Operation *op, const FactorAxes &factors,
                       ArrayRef<int64_t> grid) {
  auto [sq, sk] = attentionSequenceFactors(op);
  Ring ring;
  ring.queryAxes = factors[sq];
  const GridAxes &keyAxes = factors[sk];
  if (keyAxes.empty()) {
    // The layouts are defined per ring rank; whole keys have none.
    for (auto [layout, order] : kOrderedLayouts)
      if (op->hasAttr(layout))
        return op->emitError()
               << "attention over a "
               << ::dtc::artifact::sequenceOrderName(order)
               << " sequence needs its keys split over the ring's axis like "
                  "its queries";
    return ring;
  }
  if (keyAxes.size() != 1 || ring.queryAxes != keyAxes)
    return op->emitError()
           << "ring attention needs the queries and the keys split over the "
              "same one mesh axis (sp takes one whole axis), got queries over "
           << ring.queryAxes.size() << " and keys over " << keyAxes.size()
           << " axes";
  if (factors.piece(sq) || factors.piece(sk))
    return op->emitError() << "ring attention needs the sequence to divide "
                              "evenly over the sp devices";
  ring.axis = keyAxes.front();
  ring.length = grid[ring.axis];
  for (auto [layout, order] : kOrderedLayouts)
    if (auto ways = op->getAttrOfType<IntegerAttr>(layout)) {
      if (ways.getInt() != ring.length)
        return op->emitError()
               << "the sequence's " << ::dtc::artifact::sequenceOrderName(order)
               << " layout is over " << ways.getInt()
               << " ranks but the ring has " << ring.length;
      (order == ::dtc::artifact::SequenceOrder::Zigzag ? ring.zigzag
                                                       : ring.striped) = true;
    }
  if (ring.striped && ring.zigzag)
    return op->emitError() << "a sequence is striped or zigzag, not both";
  return ring;
}

/// What the rank index r multiplies into a block's offset: c for a
/// contiguous chunk of c rows, 1 under striped (rows r, r + n, ...), c / 2
/// under zigzag (the first chunk r of c / 2 positions).
int64_t offsetUnit(const Ring &ring, int64_t rows) {
  return ring.striped ? 1 : ring.zigzag ? rows / 2 : rows;
}

/// The global position of the rank's first query.
Value queryOffset(LocalLoweringContext &ctx, Location loc, const Ring &ring,
                  int64_t rows) {
  return ctx.shardOffset(loc, ring.queryAxes, offsetUnit(ring, rows));
}

/// The global position of the first key of the block ring step `step` has
/// brought (0 when the keys are whole).
Value keyOffset(LocalLoweringContext &ctx, Location loc, const Ring &ring,
                int64_t rows, int64_t step) {
  if (ring.axis < 0)
    return ctx.shardOffset(loc, {}, rows);
  return ctx.ringOffset(loc, ring.axis, offsetUnit(ring, rows), step);
}

/// Rows of a block are positions offset + row * stride.
int64_t positionStride(const Ring &ring) {
  return ring.striped ? ring.length : 1;
}

/// The zigzag layout's whole sequence (n blocks of `rows`); none otherwise.
IntegerAttr zigzagLength(OpBuilder &b, const Ring &ring, int64_t rows) {
  return ring.zigzag ? b.getI64IntegerAttr(ring.length * rows) : IntegerAttr();
}

RankedTensorType rowStatsType(Value q) {
  auto type = cast<RankedTensorType>(q.getType());
  return RankedTensorType::get(
      {type.getDimSize(0), type.getDimSize(1), type.getDimSize(2)},
      Float32Type::get(q.getContext()));
}

/// The forward ring: the whole attention's local output and logsumexp.
std::pair<Value, Value> forwardRing(LocalLoweringContext &ctx, Location loc,
                                    const Ring &ring, Value q, Value k, Value v,
                                    bool causal) {
  OpBuilder &b = ctx.builder();
  const int64_t chunk = cast<RankedTensorType>(k.getType()).getDimSize(2);
  Value qOffset = queryOffset(
      ctx, loc, ring, cast<RankedTensorType>(q.getType()).getDimSize(2));
  Value y, lse;
  for (int64_t step = 0; step < ring.length; ++step) {
    if (step > 0) {
      k = ctx.shiftToNext(loc, k, ring.axis);
      v = ctx.shiftToNext(loc, v, ring.axis);
    }
    auto block = AttentionBlockOp::create(
        b, loc, TypeRange{q.getType(), rowStatsType(q)}, q, k, v, qOffset,
        keyOffset(ctx, loc, ring, chunk, step), y, lse, causal,
        positionStride(ring), zigzagLength(b, ring, chunk));
    y = block.getResult();
    lse = block.getLse();
  }
  return {y, lse};
}

/// The factors the ring lowering implements: both sequences, under
/// dtc.ring; none otherwise.
SmallVector<int64_t> ringLoweredFactors(Operation *op) {
  if (!op->hasAttr(DtcDialect::kRingAttr))
    return {};
  auto [sq, sk] = attentionSequenceFactors(op);
  return {sq, sk};
}

} // namespace

SmallVector<int64_t> AttentionOp::getLoweredFactors() {
  return ringLoweredFactors(*this);
}

LogicalResult AttentionOp::buildLocal(LocalLoweringContext &ctx,
                                      ArrayRef<Value> operands, TypeRange,
                                      const FactorAxes &factors,
                                      SmallVectorImpl<Value> &results) {
  FailureOr<Ring> ring = ringOf(*this, factors, ctx.grid());
  if (failed(ring))
    return failure();
  auto [y, lse] = forwardRing(ctx, getLoc(), *ring, operands[0], operands[1],
                              operands[2], getCausal());
  // The gradient's ring needs the output and logsumexp; it finds them by
  // its local q when the forward's q reaches it (not recomputed).
  ctx.share(operands[0], kSharedOutput, y);
  ctx.share(operands[0], kSharedLogSumExp, lse);
  results.push_back(y);
  return success();
}

SmallVector<int64_t> AttentionGradOp::getLoweredFactors() {
  return ringLoweredFactors(*this);
}

LogicalResult AttentionGradOp::buildLocal(LocalLoweringContext &ctx,
                                          ArrayRef<Value> operands,
                                          TypeRange types,
                                          const FactorAxes &factors,
                                          SmallVectorImpl<Value> &results) {
  FailureOr<Ring> ring = ringOf(*this, factors, ctx.grid());
  if (failed(ring))
    return failure();
  Location loc = getLoc();
  OpBuilder &b = ctx.builder();
  Value q = operands[0], k = operands[1], v = operands[2], dy = operands[3];
  Value y = ctx.lookupShared(q, kSharedOutput),
        lse = ctx.lookupShared(q, kSharedLogSumExp);
  if (!y || !lse)
    std::tie(y, lse) = forwardRing(ctx, loc, *ring, q, k, v, getCausal());
  const int64_t chunk = cast<RankedTensorType>(k.getType()).getDimSize(2);
  Value qOffset = queryOffset(
      ctx, loc, *ring, cast<RankedTensorType>(q.getType()).getDimSize(2));
  // dk and dv of the chunk in hand travel with it around the ring.
  Value dq, dk, dv;
  for (int64_t step = 0; step < ring->length; ++step) {
    if (step > 0) {
      k = ctx.shiftToNext(loc, k, ring->axis);
      v = ctx.shiftToNext(loc, v, ring->axis);
      dk = ctx.shiftToNext(loc, dk, ring->axis);
      dv = ctx.shiftToNext(loc, dv, ring->axis);
    }
    auto block = AttentionBlockGradOp::create(
        b, loc, types, q, k, v, qOffset,
        keyOffset(ctx, loc, *ring, chunk, step), dy, y, lse, getCausal(),
        positionStride(*ring), zigzagLength(b, *ring, chunk));
    auto accumulate = [&](Value sum, Value term) {
      return sum ? AddOp::create(b, loc, sum, term).getResult() : term;
    };
    dq = accumulate(dq, block.getDq());
    dk = accumulate(dk, block.getDk());
    dv = accumulate(dv, block.getDv());
  }
  // After n blocks each chunk's gradient sits one rank before its owner.
  if (ring->length > 1) {
    dk = ctx.shiftToNext(loc, dk, ring->axis);
    dv = ctx.shiftToNext(loc, dv, ring->axis);
  } else if (!ring->queryAxes.empty()) {
    // Whole keys met by split queries: each rank holds its queries' terms
    // of every key's gradient.
    dk = ctx.allReduce(loc, dk, ring->queryAxes, PartialKind::Sum);
    dv = ctx.allReduce(loc, dv, ring->queryAxes, PartialKind::Sum);
  }
  results.append({dq, dk, dv});
  return success();
}

static int64_t blockFlops(Operation *op, bool causal, bool gradient) {
  auto q = cast<RankedTensorType>(op->getOperand(0).getType()),
       k = cast<RankedTensorType>(op->getOperand(1).getType());
  return int64_t(::dtc::kernels::attentionBlockFlops(
      q.getDimSize(0), q.getDimSize(1), q.getDimSize(2), k.getDimSize(2),
      q.getDimSize(3), causal, gradient));
}

int64_t AttentionBlockOp::getIndependentProducts() {
  return attentionHeads(getQ());
}
int64_t AttentionBlockGradOp::getIndependentProducts() {
  return attentionHeads(getQ());
}

int64_t AttentionBlockOp::getFlopCount() {
  return blockFlops(*this, getCausal(), /*gradient=*/false);
}
int64_t AttentionBlockGradOp::getFlopCount() {
  return blockFlops(*this, getCausal(), /*gradient=*/true);
}
