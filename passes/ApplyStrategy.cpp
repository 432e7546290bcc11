//===- ApplyStrategy.cpp - annotate the training step with a pinned plan -===//
//
// A plan is data: the grid, the sharding of every argument and a factor
// sharding (dtc.factor_axes) on every op. This pass produces it from pinned
// degrees; the cost-model search will produce the same annotations, and the
// partitioner cannot tell which made them.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Sharding/Sharding.h"

#include "llvm/ADT/DenseMap.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_APPLYSTRATEGY
#include "dtc/Passes/Passes.h.inc"

namespace {

constexpr StringLiteral kGridName = "mesh";

struct ApplyStrategyPass : impl::ApplyStrategyBase<ApplyStrategyPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp step = findTrainStep(module);
    if (!step) {
      module.emitError() << "no training step to plan (run dtc-build-training-step first)";
      return signalPassFailure();
    }
    if (failed(apply(module, step)))
      signalPassFailure();
  }

  LogicalResult apply(ModuleOp module, func::FuncOp step) {
    MLIRContext *ctx = &getContext();
    SmallVector<int64_t> grid(mesh.begin(), mesh.end());
    if (grid.empty())
      grid = {1};
    int64_t devices = 1;
    for (int64_t size : grid) {
      if (size <= 0)
        return module.emitError() << "mesh axis sizes must be positive";
      devices *= size;
    }
    int64_t ppDegree = pp, microbatchCount = microbatches;
    if (ppDegree < 1 || microbatchCount < 1 || virtualStages < 1)
      return module.emitError() << "pp, virtual-stages and microbatches must be >= 1";
    if (devices % ppDegree != 0)
      return module.emitError() << "pp=" << ppDegree << " does not divide the "
                                << devices << " devices of the mesh";
    int64_t dpDegree = dp == 0 ? devices / ppDegree : static_cast<int64_t>(dp);
    if (dpDegree * ppDegree != devices)
      return module.emitError()
             << "dp=" << dpDegree << " x pp=" << ppDegree << " uses "
             << dpDegree * ppDegree << " devices but the mesh has " << devices
             << "; tensor parallelism is not implemented yet, so dp*pp must "
                "equal the device count";

    // Pipeline stages take the innermost axes multiplying to pp, data
    // parallelism the outer rest; size-1 axes add nothing and stay out of
    // both groups' communicators.
    GridAxes ppAxes, dpAxes;
    int64_t covered = 1;
    int64_t axis = static_cast<int64_t>(grid.size()) - 1;
    for (; axis >= 0 && covered < ppDegree; --axis) {
      if (grid[axis] == 1)
        continue;
      ppAxes.insert(ppAxes.begin(), axis);
      covered *= grid[axis];
    }
    if (covered != ppDegree) {
      std::string shape;
      for (int64_t size : grid)
        shape += (shape.empty() ? "" : "x") + std::to_string(size);
      return module.emitError()
             << "pp=" << ppDegree << " is not a product of the innermost mesh axes of "
             << shape << " (pipeline stages take whole axes; e.g. --mesh "
             << devices / ppDegree << "x" << ppDegree << ")";
    }
    for (int64_t a = 0; a <= axis; ++a)
      if (grid[a] != 1)
        dpAxes.push_back(a);

    // Micro-batches: a virtual grid axis after the device axes, the minor
    // split of the batch (a dp shard's rows, in M consecutive pieces). A
    // pipeline always has it (of size 1 for one micro-batch): stages run
    // their forward and backward per micro-batch.
    GridAxes batchAxes = dpAxes, mbAxes;
    if (microbatchCount > 1 || ppDegree > 1) {
      mbAxes.push_back(static_cast<int64_t>(grid.size()));
      grid.push_back(microbatchCount);
      batchAxes.push_back(mbAxes.back());
    }
    int64_t batchSplit = dpDegree * microbatchCount;

    if (auto existing = module.lookupSymbol<shard::GridOp>(kGridName)) {
      if (existing.getShape() != ArrayRef<int64_t>(grid))
        return existing.emitError() << "a different grid @" << kGridName
                                    << " already exists";
    } else {
      OpBuilder b(ctx);
      b.setInsertionPointToStart(module.getBody());
      shard::GridOp::create(b, module.getLoc(), kGridName, grid);
    }

    llvm::DenseMap<Value, TensorSharding> shardings;
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      BlockArgument arg = step.getArgument(i);
      auto type = cast<RankedTensorType>(arg.getType());
      TensorSharding sharding = TensorSharding::replicated(type.getRank());
      auto role = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kRoleAttr);
      if (role && role.getValue() == "input" && !batchAxes.empty()) {
        auto name = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kNameAttr);
        int64_t batch = type.getDimSize(0);
        if (batch % batchSplit != 0) {
          InFlightDiagnostic diag = emitError(arg.getLoc())
                                    << "the batch dimension of input \""
                                    << (name ? name.getValue() : StringRef("?"))
                                    << "\" has size " << batch
                                    << ", which does not divide over dp=" << dpDegree;
          if (microbatchCount > 1)
            diag << " x " << microbatchCount << " micro-batches";
          return diag;
        }
        sharding.dims[0] = batchAxes;
      }
      step.setArgAttr(i, DtcDialect::kShardingAttr, sharding.toAttr(ctx, kGridName));
      shardings[arg] = sharding;
    }

    auto shardingOf = [&](Value v) {
      auto it = shardings.find(v);
      if (it != shardings.end())
        return it->second;
      return TensorSharding::replicated(cast<RankedTensorType>(v.getType()).getRank());
    };
    WalkResult walk = step.walk([&](Operation *op) {
      auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
      if (!ruleOp)
        return WalkResult::advance();
      ShardingRule rule = ruleOp.getShardingRule();
      std::string problem = rule.verify(op);
      if (!problem.empty()) {
        op->emitError() << "inconsistent sharding rule: " << problem;
        return WalkResult::interrupt();
      }
      SmallVector<TensorSharding> operands;
      for (Value v : op->getOperands())
        operands.push_back(shardingOf(v));
      FactorAxes factors = assignFactorsFromOperands(rule, operands, grid);
      op->setAttr(DtcDialect::kFactorAxesAttr, factorAxesToAttr(ctx, factors));
      for (auto [idx, result] : llvm::enumerate(op->getResults())) {
        TensorSharding s = resultSharding(rule, factors, idx);
        s.partial.clear(); // pending sums do not steer the layout of consumers
        shardings[result] = s;
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();

    Builder b(ctx);
    SmallVector<NamedAttribute> axes = {
        b.getNamedAttr("dp", b.getDenseI64ArrayAttr(dpAxes))};
    if (!ppAxes.empty())
      axes.push_back(b.getNamedAttr("pp", b.getDenseI64ArrayAttr(ppAxes)));
    if (!mbAxes.empty())
      axes.push_back(b.getNamedAttr(kMicrobatchAxesKey, b.getDenseI64ArrayAttr(mbAxes)));
    module->setAttr(DtcDialect::kPlanAttr,
                    b.getDictionaryAttr({
                        b.getNamedAttr("grid", FlatSymbolRefAttr::get(ctx, kGridName)),
                        b.getNamedAttr("dp", b.getI64IntegerAttr(dpDegree)),
                        b.getNamedAttr("tp", b.getI64IntegerAttr(1)),
                        b.getNamedAttr("pp", b.getI64IntegerAttr(ppDegree)),
                        b.getNamedAttr("virtual_stages", b.getI64IntegerAttr(virtualStages)),
                        b.getNamedAttr("microbatches", b.getI64IntegerAttr(microbatchCount)),
                        b.getNamedAttr("zero", b.getI64IntegerAttr(0)),
                        b.getNamedAttr("axes", b.getDictionaryAttr(axes)),
                    }));
    return success();
  }
};

} // namespace
} // namespace mlir::dtc
