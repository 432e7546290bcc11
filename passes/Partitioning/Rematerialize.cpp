//===- Rematerialize.cpp - activation checkpointing -----------------------===//
//
// Trades compute for activation memory: forward values the backward reads
// are computed again just before the backward of their layer instead of
// being kept from the forward. The recomputation is a clone of the same
// forward ops on the same inputs, so the kernels, their inputs and hence
// every bit of the result are unchanged; only the liveness of the forward
// values shrinks, which the emitter's memory plan turns into smaller
// activation memory (a value whose last reader is now a forward op dies in
// the forward).
//
// Modes:
// - full: within each layer (dtc.layer) only the layer-boundary values are
//   kept (those a forward op of another layer reads, and the loss); every
//   other forward value the backward reads is recomputed from them.
// - selective (Megatron's selective recompute): only ops with the
//   CheapToRecompute trait are recomputed (elementwise activations, data
//   movement, softmax, fused attention), and only when every operand they
//   need stays alive anyway (a boundary, or a value the backward reads
//   itself, or another recomputed value). So attention's output and the
//   GELU/SiLU outputs are recomputed from the q/k/v and pre-activations the
//   gradients keep, while matmul outputs and norms are kept.
//
// Runs on the planned step (clones carry their original's factor sharding,
// so partitioning treats them exactly like the original) before the
// pipeline split: clones get their layer's dtc.layer, dtc.forward = the id
// of the op they recompute, dtc.recompute, and the phase of their earliest
// need (backward_input when some B op reads them, else backward_weight), so
// the stage split and the B/W lists place them like any backward op.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include <map>

namespace mlir::dtc {
#define GEN_PASS_DEF_REMATERIALIZE
#include "dtc/Passes/Passes.h.inc"

namespace {

StringRef phaseOf(Operation *op) {
  auto phase = op->getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
  return phase ? phase.getValue() : StringRef();
}

/// Backward and optimizer ops: the readers whose operands can come from a
/// recomputation. Ops without a phase (the return) read what the forward
/// produced.
bool isAfterForward(Operation *op) {
  StringRef phase = phaseOf(op);
  return !phase.empty() && phase != DtcDialect::kForwardPhase;
}

bool hasDirectBackwardReader(Value v) {
  return llvm::any_of(v.getUsers(), isAfterForward);
}

class Rematerializer {
public:
  Rematerializer(func::FuncOp step, bool selective)
      : step(step), selective(selective) {}

  LogicalResult run() {
    Block &body = step.front();
    std::map<int64_t, SmallVector<Operation *>> forwardOfLayer;
    for (Operation &op : body) {
      position[&op] = position.size();
      if (phaseOf(&op) != DtcDialect::kForwardPhase ||
          isa<arith::ConstantOp>(op) || op.getNumResults() == 0)
        continue;
      auto layer = op.getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr);
      if (!layer)
        return op.emitError()
               << "forward op without dtc.layer: rematerialization needs the "
                  "layers of dtc-build-training-step";
      forwardOfLayer[layer.getInt()].push_back(&op);
    }
    for (auto &[layer, ops] : forwardOfLayer)
      recomputeLayer(ops);
    return success();
  }

private:
  void recomputeLayer(ArrayRef<Operation *> ops) {
    llvm::DenseSet<Operation *> inLayer(ops.begin(), ops.end());
    // Kept: what forward ops of other layers (or the return) read.
    auto isKept = [&](Operation *op) {
      for (Value r : op->getResults())
        for (Operation *user : r.getUsers())
          if (!isAfterForward(user) && !inLayer.contains(user))
            return true;
      return false;
    };
    llvm::SetVector<Operation *> candidates;
    for (Operation *op : ops)
      if (!isKept(op) && (!selective || op->hasTrait<CheapToRecompute>()))
        candidates.insert(op);
    // Selective: an op stays a candidate only if each operand it reads from
    // this layer stays alive anyway (kept, read by the backward itself) or
    // is recomputed too; otherwise recomputing it would keep a value alive
    // that the forward could free.
    if (selective) {
      bool changed = true;
      while (changed) {
        changed = false;
        for (Operation *op : llvm::to_vector(candidates)) {
          bool operandsAlive = llvm::all_of(op->getOperands(), [&](Value v) {
            Operation *def = v.getDefiningOp();
            return !def || !inLayer.contains(def) || isKept(def) ||
                   candidates.contains(def) || hasDirectBackwardReader(v);
          });
          if (!operandsAlive) {
            candidates.remove(op);
            changed = true;
          }
        }
      }
    }
    // What the backward reads, and what that needs, in program order.
    llvm::DenseSet<Operation *> needed;
    for (Operation *op : llvm::reverse(ops)) {
      if (!candidates.contains(op))
        continue;
      bool read = llvm::any_of(op->getResults(), hasDirectBackwardReader) ||
                  llvm::any_of(op->getUsers(), [&](Operation *u) {
                    return needed.contains(u);
                  });
      if (read)
        needed.insert(op);
    }
    if (needed.empty())
      return;

    // Just before the first backward op that reads a recomputed value.
    Operation *insertBefore = nullptr;
    for (Operation *op : ops)
      if (needed.contains(op))
        for (Operation *user : op->getUsers())
          if (isAfterForward(user) &&
              (!insertBefore || position[user] < position[insertBefore]))
            insertBefore = user;
    OpBuilder b(insertBefore);
    IRMapping mapping;
    SmallVector<Operation *> clones;
    for (Operation *op : ops) {
      if (!needed.contains(op))
        continue;
      Operation *clone = b.clone(*op, mapping);
      if (Attribute id = op->getAttr(DtcDialect::kIdAttr))
        clone->setAttr(DtcDialect::kForwardAttr, id);
      clone->removeAttr(DtcDialect::kIdAttr);
      clone->removeAttr(DtcDialect::kPinAttr);
      clone->removeAttr(DtcDialect::kPinPriorityAttr);
      clone->setAttr(DtcDialect::kRecomputeAttr, b.getUnitAttr());
      clone->setAttr(DtcDialect::kPhaseAttr,
                     b.getStringAttr(DtcDialect::kBackwardWeightPhase));
      clones.push_back(clone);
      for (auto [original, copy] :
           llvm::zip(op->getResults(), clone->getResults()))
        original.replaceUsesWithIf(copy, [&](OpOperand &use) {
          Operation *user = use.getOwner();
          return isAfterForward(user) &&
                 !user->hasAttr(DtcDialect::kRecomputeAttr);
        });
    }
    // A clone is B work when some B op (or B clone) reads it.
    for (Operation *clone : llvm::reverse(clones)) {
      bool input = llvm::any_of(clone->getUsers(), [](Operation *u) {
        return phaseOf(u) == DtcDialect::kBackwardInputPhase;
      });
      if (input)
        clone->setAttr(
            DtcDialect::kPhaseAttr,
            OpBuilder(clone).getStringAttr(DtcDialect::kBackwardInputPhase));
    }
  }

  func::FuncOp step;
  bool selective;
  llvm::DenseMap<Operation *, size_t> position;
};

struct RematerializePass : impl::RematerializeBase<RematerializePass> {
  using RematerializeBase::RematerializeBase;

  void runOnOperation() override {
    if (mode == "none")
      return;
    if (mode != "full" && mode != "selective") {
      getOperation().emitError()
          << "dtc-rematerialize: mode must be none, full or selective, "
             "got \""
          << mode << "\"";
      return signalPassFailure();
    }
    for (func::FuncOp step : trainSteps(getOperation()))
      if (failed(Rematerializer(step, mode == "selective").run()))
        return signalPassFailure();
  }
};

} // namespace
} // namespace mlir::dtc
