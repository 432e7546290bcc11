//===- MergeDuplicateBackwardOps.cpp - each backward value once -----------===//
//
// Gradient rules are local: each builds what it needs from its own op's
// operands, so ops sharing an operand build the same reshapes and
// transposes of it once each. Merging them is CSE restricted to backward
// ops that agree on everything but their provenance (dtc.id, dtc.forward),
// which MLIR's CSE compares too.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_MERGEDUPLICATEBACKWARDOPS
#include "dtc/Passes/Passes.h.inc"

namespace {

/// Same discardable attributes, provenance aside.
bool sameTags(Operation *a, Operation *b) {
  auto tags = [](Operation *op) {
    SmallVector<NamedAttribute> kept;
    for (NamedAttribute attr : op->getDiscardableAttrs())
      if (attr.getName() != DtcDialect::kIdAttr &&
          attr.getName() != DtcDialect::kForwardAttr)
        kept.push_back(attr);
    return kept;
  };
  return tags(a) == tags(b);
}

bool mergeable(Operation *op) {
  return isBackward(op) && op->getNumRegions() == 0 &&
         op->getNumOperands() > 0 && op->getNumResults() > 0 &&
         isMemoryEffectFree(op);
}

struct MergeDuplicateBackwardOpsPass
    : impl::MergeDuplicateBackwardOpsBase<MergeDuplicateBackwardOpsPass> {
  void runOnOperation() override {
    func::FuncOp step = findTrainStep(getOperation());
    if (!step)
      return;
    llvm::SetVector<Operation *> dead;
    for (Operation &op : step.front()) {
      if (!mergeable(&op))
        continue;
      // An earlier duplicate uses the same first operand.
      for (Operation *other : op.getOperand(0).getUsers()) {
        if (other == &op || dead.contains(other) ||
            other->getBlock() != op.getBlock() ||
            !other->isBeforeInBlock(&op) || !mergeable(other) ||
            !OperationEquivalence::isEquivalentTo(
                other, &op,
                OperationEquivalence::IgnoreDiscardableAttrs |
                    OperationEquivalence::IgnoreLocations) ||
            !sameTags(other, &op))
          continue;
        op.replaceAllUsesWith(other);
        dead.insert(&op);
        break;
      }
    }
    for (Operation *op : dead)
      op->erase();
  }
};

} // namespace
} // namespace mlir::dtc
