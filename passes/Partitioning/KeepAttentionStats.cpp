//===- KeepAttentionStats.cpp - attention's backward from the forward's stats
//-===//
//
// attention_grad gets only q, k, v and dy, so its kernel first recomputes
// each row's logsumexp and rowsum(dy * y): a whole forward pass (on the
// bf16 GPT bench, 0.57 of attention_grad's 2.84 ms per step on an H200).
// With --attention-stats keep, a forward `attention` and the
// `attention_grad` of the same q, k, v become `attention_block` (one block
// at positions 0: the same output, plus the logsumexp) and
// `attention_block_grad`, which reads the kept output and logsumexp
// instead of recomputing them: what FlashAttention keeps. The price is
// memory: the output y (read by its projection's transpose, then dead)
// and the f32 logsumexp [B, H, S] live until the backward.
//
// Runs on the partitioned step (local shapes), before emission, so the
// plan, its sharding and recomputation are those of the ops it replaces;
// ring attention's ops (dtc.ring) are lowered as rings already.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_KEEPATTENTIONSTATS
#include "dtc/Passes/Passes.h.inc"

namespace {

/// The forward attention of `grad`'s q, k, v (same mask) before it in its
/// block, if any.
AttentionOp forwardOf(AttentionGradOp grad) {
  for (Operation *user : grad->getOperand(0).getUsers()) {
    auto fwd = dyn_cast<AttentionOp>(user);
    if (!fwd || fwd->getBlock() != grad->getBlock() ||
        !fwd->isBeforeInBlock(grad) || fwd->hasAttr(DtcDialect::kRingAttr) ||
        fwd.getCausal() != grad.getCausal())
      continue;
    if (fwd->getOperand(1) == grad->getOperand(1) &&
        fwd->getOperand(2) == grad->getOperand(2))
      return fwd;
  }
  return {};
}

struct KeepAttentionStatsPass
    : impl::KeepAttentionStatsBase<KeepAttentionStatsPass> {
  void runOnOperation() override {
    SmallVector<AttentionGradOp> grads;
    getOperation().walk([&](AttentionGradOp g) {
      if (!g->hasAttr(DtcDialect::kRingAttr))
        grads.push_back(g);
    });
    // One gradient per forward (dtc-merge-duplicate-backward-ops); a second
    // one would find no forward left and stay as it is.
    for (AttentionGradOp grad : grads) {
      AttentionOp fwd = forwardOf(grad);
      if (!fwd)
        continue;
      OpBuilder fb(fwd);
      Location loc = fwd.getLoc();
      Value zero = arith::ConstantOp::create(
          fb, loc,
          DenseIntElementsAttr::get(
              RankedTensorType::get({}, fb.getIntegerType(64)),
              ArrayRef<int64_t>{0}));
      copyPlaceAttrs(fwd, zero.getDefiningOp(), /*identity=*/false);
      auto q = cast<RankedTensorType>(fwd->getOperand(0).getType());
      auto lseType = RankedTensorType::get(
          {q.getDimSize(0), q.getDimSize(1), q.getDimSize(2)}, fb.getF32Type());
      auto block = AttentionBlockOp::create(
          fb, loc, TypeRange{fwd.getType(), lseType}, fwd->getOperand(0),
          fwd->getOperand(1), fwd->getOperand(2), zero, zero, Value(), Value(),
          fwd.getCausal(), /*position_stride=*/1, /*zigzag_length=*/nullptr);
      copyPlaceAttrs(fwd, block, /*identity=*/true);
      fwd.getResult().replaceAllUsesWith(block.getResult());
      fwd->erase();
      OpBuilder b(grad);
      auto blockGrad = AttentionBlockGradOp::create(
          b, grad.getLoc(), grad->getResultTypes(), grad->getOperand(0),
          grad->getOperand(1), grad->getOperand(2), zero, zero,
          grad->getOperand(3), block.getResult(), block.getLse(),
          grad.getCausal(), /*position_stride=*/1, /*zigzag_length=*/nullptr);
      copyPlaceAttrs(grad, blockGrad, /*identity=*/true);
      grad->replaceAllUsesWith(blockGrad->getResults());
      grad->erase();
    }
  }
};

} // namespace
} // namespace mlir::dtc
