//===- DecomposeComposites.cpp - composite model ops as kernels -----------===//
//
// A composite op (DecomposeOpInterface: dtc.moe, dtc.load_balancing_loss)
// has no kernel; it says how it is written in ops that have one, and this
// pass writes it so before the training step is built. Autodiff, planning,
// partitioning and emission then see only kernels, each with its own
// gradient and sharding rule.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/CSE.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_DECOMPOSECOMPOSITES
#include "dtc/Passes/Passes.h.inc"

namespace {

struct DecomposeCompositesPass
    : impl::DecomposeCompositesBase<DecomposeCompositesPass> {
  void runOnOperation() override {
    SmallVector<DecomposeOpInterface> composites;
    getOperation().walk(
        [&](DecomposeOpInterface op) { composites.push_back(op); });
    if (composites.empty())
      return;
    for (DecomposeOpInterface composite : composites) {
      OpBuilder b(composite);
      Value replacement = composite.decompose(b);
      if (!replacement)
        return signalPassFailure();
      composite->getResult(0).replaceAllUsesWith(replacement);
      composite->erase();
    }
    // One router product per (x, router): a load-balancing loss repeats
    // its dtc.moe's softmax(x router).
    IRRewriter rewriter(&getContext());
    DominanceInfo dominance;
    eliminateCommonSubExpressions(rewriter, dominance, getOperation());
  }
};

} // namespace
} // namespace mlir::dtc
