//===- BalanceStages.cpp - the plan's stage cuts
//---------------------------===//
//
// The stage-balancing decision, taken before the stage split and recorded
// in the plan (so dtc-split-pipeline only applies it). It runs after
// dtc-rematerialize because recomputed forward ops cost compute in the
// stage that recomputes them.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Planner/StageBalance.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_BALANCESTAGES
#include "dtc/Passes/Passes.h.inc"

namespace {

struct BalanceStagesPass : impl::BalanceStagesBase<BalanceStagesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<Plan> plan = getPlan(module);
    if (!plan || plan->virtualStageCount() == 1 || !plan->stageCuts.empty())
      return;
    func::FuncOp step = findTrainStep(module);
    if (!step) {
      module.emitError()
          << "expected exactly one training step to split into pipeline stages";
      return signalPassFailure();
    }
    FailureOr<SmallVector<int64_t>> cuts =
        balanceStages(step, plan->pp, plan->virtualStages);
    if (failed(cuts))
      return signalPassFailure();
    plan->stageCuts = std::move(*cuts);
    setPlan(module, *plan);
  }
};

} // namespace
} // namespace mlir::dtc
