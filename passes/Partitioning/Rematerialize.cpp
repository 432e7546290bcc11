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
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include <functional>
#include <map>

namespace mlir::dtc {
#define GEN_PASS_DEF_REMATERIALIZE
#include "dtc/Passes/Passes.h.inc"

namespace {

class Rematerializer {
public:
  /// `modeOf(layer)`: the recomputation of a layer.
  /// `separateWeightWork`: the schedule runs a micro-batch's W apart from
  /// its B (zb), and later than right after it where the stage does not
  /// recompute fully.
  Rematerializer(func::FuncOp step, std::function<Recompute(int64_t)> modeOf,
                 bool separateWeightWork)
      : step(step), modeOf(std::move(modeOf)),
        separateWeightWork(separateWeightWork) {}

  LogicalResult run() {
    Block &body = step.front();
    std::map<int64_t, SmallVector<Operation *>> forwardOfLayer;
    for (Operation &op : body) {
      position[&op] = position.size();
      if (!isPhase(&op, Phase::Forward) || isa<arith::ConstantOp>(op) ||
          op.getNumResults() == 0)
        continue;
      auto layer = op.getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr);
      if (!layer)
        return op.emitError()
               << "forward op without dtc.layer: rematerialization needs the "
                  "layers of dtc-build-training-step";
      forwardOfLayer[layer.getInt()].push_back(&op);
    }
    for (auto &[layer, ops] : forwardOfLayer)
      if (Recompute mode = modeOf(layer); mode != Recompute::None)
        recomputeLayer(ops, mode == Recompute::Selective);
    return success();
  }

private:
  void recomputeLayer(ArrayRef<Operation *> ops, bool selective) {
    const llvm::SetVector<Operation *> candidates =
        recomputedOps(ops, selective);
    // Zero-bubble schedules may run a micro-batch's W long after its B:
    // then what W reads is recomputed again right before it, so that
    // between the two only the layer's boundary values and B's gradients
    // are kept. A stage that recomputes fully never defers W
    // (Plan::pendingWeightGradients): it runs whole backwards, which read
    // B's recomputation with no second forward.
    if (separateWeightWork && selective) {
      recompute(ops, candidates, [](Operation *user) {
        return isPhase(user, Phase::BackwardWeight);
      });
      recompute(ops, candidates, [](Operation *user) {
        return isAfterForward(user) && !isPhase(user, Phase::BackwardWeight);
      });
      return;
    }
    recompute(ops, candidates, isAfterForward);
  }

  /// Clones the candidates that `reader`s read (directly or through other
  /// candidates) right before the first such reader, which read the clones
  /// from then on.
  void recompute(ArrayRef<Operation *> ops,
                 const llvm::SetVector<Operation *> &candidates,
                 llvm::function_ref<bool(Operation *)> reader) {
    auto isReader = [&](Operation *user) {
      return reader(user) && !user->hasAttr(DtcDialect::kRecomputeAttr);
    };
    // What the readers read, and what that needs, in program order.
    llvm::DenseSet<Operation *> needed;
    for (Operation *op : llvm::reverse(ops)) {
      if (!candidates.contains(op))
        continue;
      bool read = llvm::any_of(op->getUsers(), [&](Operation *u) {
        return isReader(u) || needed.contains(u);
      });
      if (read)
        needed.insert(op);
    }
    if (needed.empty())
      return;

    // Just before the first reader of a recomputed value.
    Operation *insertBefore = nullptr;
    for (Operation *op : ops)
      if (needed.contains(op))
        for (Operation *user : op->getUsers())
          if (isReader(user) &&
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
      setPhase(clone, Phase::BackwardWeight);
      clones.push_back(clone);
      for (auto [original, copy] :
           llvm::zip(op->getResults(), clone->getResults()))
        original.replaceUsesWithIf(
            copy, [&](OpOperand &use) { return isReader(use.getOwner()); });
    }
    // A clone is B work when some B op (or B clone) reads it.
    for (Operation *clone : llvm::reverse(clones)) {
      bool input = llvm::any_of(clone->getUsers(), [](Operation *u) {
        return isPhase(u, Phase::BackwardInput);
      });
      if (input)
        setPhase(clone, Phase::BackwardInput);
    }
  }

  func::FuncOp step;
  std::function<Recompute(int64_t)> modeOf;
  bool separateWeightWork;
  llvm::DenseMap<Operation *, size_t> position;
};

struct RematerializePass : impl::RematerializeBase<RematerializePass> {
  using RematerializeBase::RematerializeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<std::function<Recompute(int64_t)>> modeOf = layerModes(module);
    if (failed(modeOf))
      return signalPassFailure();
    if (!*modeOf)
      return; // no recomputation anywhere
    std::optional<Plan> plan = getPlan(module);
    const bool separateWeightWork = plan && plan->schedule == "zb";
    for (func::FuncOp step : trainSteps(module))
      if (failed(Rematerializer(step, *modeOf, separateWeightWork).run()))
        return signalPassFailure();
  }

  /// The recomputation of each layer: the `mode` option on every layer,
  /// else the plan's mode of the pipeline stage the layer runs on; null when
  /// nothing is recomputed.
  FailureOr<std::function<Recompute(int64_t)>> layerModes(ModuleOp module) {
    std::optional<Plan> plan = getPlan(module);
    if (!mode.empty() || !plan) {
      std::optional<Recompute> all =
          mode.empty() ? Recompute::Full : symbolizeRecompute(mode);
      if (!all)
        return module.emitError()
               << "dtc-rematerialize: mode must be none, full or selective, "
                  "got \""
               << mode << "\"";
      if (*all == Recompute::None)
        return std::function<Recompute(int64_t)>();
      return std::function<Recompute(int64_t)>(
          [m = *all](int64_t) { return m; });
    }
    if (plan->recompute.empty())
      return std::function<Recompute(int64_t)>();
    if (plan->recompute.size() > 1 &&
        (int64_t)plan->stageCuts.size() != plan->virtualStageCount() - 1)
      return module.emitError()
             << "dtc-rematerialize: a recomputation per pipeline stage needs "
                "the plan's stage_cuts";
    return std::function<Recompute(int64_t)>([plan = *plan](int64_t layer) {
      return plan.recomputeOf(plan.virtualStageOfLayer(layer) % plan.pp);
    });
  }
};

} // namespace
} // namespace mlir::dtc
