//===- ApplyStrategy.cpp - annotate @train_step with a pinned plan -------===//
//
// A plan is data: the grid, the sharding of every argument and a factor
// sharding (dtc.factor_axes) on every op. This pass produces it from pinned
// degrees; the cost-model search will produce the same annotations, and the
// partitioner cannot tell which made them.
//
//===----------------------------------------------------------------------===//
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
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step) {
      module.emitError() << "no @train_step to plan (run dtc-build-training-step first)";
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
    int64_t dpDegree = dp == 0 ? devices : static_cast<int64_t>(dp);
    if (dpDegree != devices)
      return module.emitError()
             << "dp=" << dpDegree << " does not use all " << devices
             << " devices of the mesh; tensor and pipeline parallelism are "
                "not implemented yet, so dp must equal the device count";

    // Data parallelism takes the outermost axes multiplying to dp; size-1
    // axes add nothing and stay out of its communicators.
    GridAxes dpAxes;
    int64_t covered = 1;
    for (auto [axis, size] : llvm::enumerate(grid)) {
      if (covered == dpDegree)
        break;
      if (size == 1)
        continue;
      dpAxes.push_back(axis);
      covered *= size;
    }

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
    // Argument attributes are set all at once: setting them one by one
    // uniques a new attribute array per argument (quadratic time and memory).
    SmallVector<DictionaryAttr> argAttrs;
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      BlockArgument arg = step.getArgument(i);
      auto type = cast<RankedTensorType>(arg.getType());
      TensorSharding sharding = TensorSharding::replicated(type.getRank());
      auto role = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kRoleAttr);
      if (role && role.getValue() == "input" && !dpAxes.empty()) {
        auto name = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kNameAttr);
        int64_t batch = type.getDimSize(0);
        if (batch % dpDegree != 0)
          return emitError(arg.getLoc())
                 << "the batch dimension of input \""
                 << (name ? name.getValue() : StringRef("?")) << "\" has size "
                 << batch << ", which does not divide over dp=" << dpDegree;
        sharding.dims[0] = dpAxes;
      }
      NamedAttrList attrs(step.getArgAttrDict(i));
      attrs.set(DtcDialect::kShardingAttr, sharding.toAttr(ctx, kGridName));
      argAttrs.push_back(attrs.getDictionary(ctx));
      shardings[arg] = sharding;
    }
    step.setAllArgAttrs(argAttrs);

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
    module->setAttr(DtcDialect::kPlanAttr,
                    b.getDictionaryAttr({
                        b.getNamedAttr("grid", FlatSymbolRefAttr::get(ctx, kGridName)),
                        b.getNamedAttr("dp", b.getI64IntegerAttr(dpDegree)),
                        b.getNamedAttr("tp", b.getI64IntegerAttr(1)),
                        b.getNamedAttr("pp", b.getI64IntegerAttr(1)),
                        b.getNamedAttr("zero", b.getI64IntegerAttr(0)),
                        b.getNamedAttr("axes", b.getDictionaryAttr(axes)),
                    }));
    return success();
  }
};

} // namespace
} // namespace mlir::dtc
