//===- DecomposeIgnoredLabels.cpp - mean over kept labels as sum / count --===//
//
// A cross entropy that ignores some labels averages over the positions it
// keeps, a count known only from the data. Written as sum / max(count, 1),
// both the sum and the count are sums over the label positions, which every
// plan splits as partial sums; the mean itself could not be split with a
// fixed share per shard. The count depends on the labels alone, so under
// micro-batches it is taken from the whole batch once per step
// (dtc.whole_batch) and every micro-batch divides its sum by it.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/Sequence.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_DECOMPOSEIGNOREDLABELS
#include "dtc/Passes/Passes.h.inc"

namespace {

struct DecomposeIgnoredLabelsPass
    : impl::DecomposeIgnoredLabelsBase<DecomposeIgnoredLabelsPass> {
  void runOnOperation() override {
    SmallVector<CrossEntropyOp> means;
    getOperation().walk([&](CrossEntropyOp op) {
      if (op.getIgnoreIndex() && !op.isSum())
        means.push_back(op);
    });
    for (CrossEntropyOp op : means)
      decompose(op);
  }

  static void decompose(CrossEntropyOp op) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    auto labels = cast<RankedTensorType>(op.getLabels().getType());
    Value sum =
        CrossEntropyOp::create(b, loc, scalar, op.getLogits(), op.getLabels(),
                               op.getIgnoreIndexAttr(), b.getStringAttr("sum"));
    Value mask = LabelMaskOp::create(b, loc, labels.clone(b.getF32Type()),
                                     op.getLabels(), op.getIgnoreIndexAttr());
    Value count = mask;
    if (labels.getRank() > 0)
      count = ReduceSumOp::create(b, loc, scalar, mask,
                                  b.getDenseI64ArrayAttr(llvm::to_vector(
                                      llvm::seq<int64_t>(0, labels.getRank()))),
                                  b.getBoolAttr(false));
    // The count is the whole batch's: under micro-batches it is taken once
    // per step from all the labels, before any micro-batch divides by it.
    mask.getDefiningOp()->setAttr(DtcDialect::kWholeBatchAttr, b.getUnitAttr());
    if (count != mask)
      count.getDefiningOp()->setAttr(DtcDialect::kWholeBatchAttr,
                                     b.getUnitAttr());
    // max(count, 1): no kept label gives 0 / 1 = 0, and a zero gradient.
    Value one = arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(scalar, b.getF32FloatAttr(1.0f)));
    Value denominator = MaxOp::create(b, loc, count, one);
    Value loss = DivOp::create(b, loc, sum, denominator);
    op.getResult().replaceAllUsesWith(loss);
    op.erase();
  }
};

} // namespace
} // namespace mlir::dtc
