//===- TestPrintTensorLayout.cpp - print the tp layout program's choice ---===//
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Planner/TensorLayout.h"
#include "dtc/Sharding/Sharding.h"

#include "llvm/Support/FormatVariadic.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_TESTPRINTTENSORLAYOUT
#include "dtc/Passes/Passes.h.inc"

namespace {
struct TestPrintTensorLayoutPass
    : impl::TestPrintTensorLayoutBase<TestPrintTensorLayoutPass> {
  using TestPrintTensorLayoutBase::TestPrintTensorLayoutBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp step = findTrainStep(module);
    std::optional<Plan> plan = getPlan(module);
    if (!step || !plan || plan->tpAxes.empty()) {
      module.emitError() << "dtc-test-print-tensor-layout needs a training "
                            "step and a dtc.plan with tp > 1";
      return signalPassFailure();
    }
    FailureOr<SmallVector<int64_t>> grid = getGridShape(module, plan->grid);
    if (failed(grid))
      return signalPassFailure();
    FailureOr<::dtc::cost::HardwareProfile> hw =
        tensorLayoutHardware(step, hardware, *grid);
    if (failed(hw))
      return signalPassFailure();
    TensorLayoutOptions options =
        tensorLayoutOptions(*plan, *hw, double(deviceMemory));
    options.mergeElementwise = mergeElementwise;
    FailureOr<TensorLayout> layout = planTensorLayout(step, *grid, options);
    if (failed(layout))
      return signalPassFailure();
    for (Operation &op : step.getBody().front()) {
      auto it = layout->splitFactor.find(&op);
      if (it == layout->splitFactor.end())
        continue;
      if (it->second < 0) {
        op.emitRemark() << "tp: " << op.getName() << " whole";
        continue;
      }
      ShardingRule rule = cast<ShardingRuleOpInterface>(op).getShardingRule();
      op.emitRemark() << "tp: " << op.getName() << " splits factor "
                      << it->second << " ("
                      << stringifyFactorKind(rule.factorKinds[it->second])
                      << ", size " << rule.factorSizes[it->second] << ")";
    }
    for (BlockArgument arg : step.getArguments()) {
      auto it = layout->parameters.find(arg);
      if (it == layout->parameters.end())
        continue;
      auto name = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                    DtcDialect::kNameAttr);
      int64_t dim = -1;
      for (auto [d, axes] : llvm::enumerate(it->second.dims))
        if (!axes.empty())
          dim = int64_t(d);
      InFlightDiagnostic remark = step.emitRemark()
                                  << "tp: parameter " << name.getValue()
                                  << (dim < 0 ? " whole" : " split along dim ");
      if (dim >= 0)
        remark << dim;
    }
    const auto &s = layout->solution;
    step.emitRemark() << llvm::formatv(
        "tp layout: {0} nodes, {1} variables, {2} constraints, optimal {3}, "
        "cost {4:E3} s, memory {5:E3} bytes per device",
        layout->problem.nodes.size(), s.variables, s.constraints,
        s.optimal ? "yes" : "no", s.objective, s.memory);
  }
};
} // namespace
} // namespace mlir::dtc
