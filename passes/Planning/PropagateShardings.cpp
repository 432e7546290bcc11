//===- PropagateShardings.cpp - complete a plan from pinned shardings ----===//
//
// The plan-completion step any planner can reuse: pin what you know (by
// hand, from the command line, from a strategy or a search) and let
// propagation derive the rest (include/dtc/Sharding/Propagation.h).
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Sharding/Propagation.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_PROPAGATESHARDINGS
#include "dtc/Passes/Passes.h.inc"

namespace {

/// The priority named next to a pin ("user" when absent).
FailureOr<ShardingPriority> priorityOf(Attribute attr, Location loc) {
  auto name = dyn_cast_or_null<StringAttr>(attr);
  if (!attr || (name && name.getValue() == "user"))
    return ShardingPriority::User;
  if (name && name.getValue() == "strategy")
    return ShardingPriority::Strategy;
  if (name && name.getValue() == "storage")
    return ShardingPriority::None; // a storage pin (pinStorage)
  return emitError(loc)
         << "dtc.pin_priority must be \"user\", \"strategy\" or \"storage\"";
}

struct PropagateShardingsPass
    : impl::PropagateShardingsBase<PropagateShardingsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    auto plan = module->getAttrOfType<DictionaryAttr>(DtcDialect::kPlanAttr);
    auto gridRef = plan ? plan.getAs<FlatSymbolRefAttr>("grid") : nullptr;
    if (!step || !gridRef) {
      module.emitError()
          << "dtc-propagate-shardings needs a @train_step and a dtc.plan "
             "with a grid";
      return signalPassFailure();
    }
    FailureOr<SmallVector<int64_t>> grid =
        getGridShape(module, gridRef.getValue());
    if (failed(grid))
      return signalPassFailure();
    ShardingPropagation propagation(step, *grid);
    auto pin = [&](Value v, ShardingAttr attr, Attribute priority,
                   Location loc) {
      TensorSharding sharding = fromShardingAttr(attr);
      if (sharding.dims.size() != (size_t)tensorTypeOf(v).getRank() ||
          sharding.isPartial()) {
        emitError(loc)
            << "a pin must give one entry per dimension and no partial axes";
        return failure();
      }
      FailureOr<ShardingPriority> p = priorityOf(priority, loc);
      if (failed(p))
        return failure();
      if (*p == ShardingPriority::None)
        propagation.pinStorage(v, sharding);
      else
        propagation.pin(v, sharding, *p);
      return success();
    };
    for (BlockArgument arg : step.getArguments())
      if (auto attr = step.getArgAttrOfType<ShardingAttr>(
              arg.getArgNumber(), DtcDialect::kShardingAttr))
        if (failed(pin(arg, attr,
                       step.getArgAttr(arg.getArgNumber(),
                                       DtcDialect::kPinPriorityAttr),
                       arg.getLoc())))
          return signalPassFailure();
    WalkResult walk = step.walk([&](Operation *op) {
      if (isa<arith::ConstantOp>(op))
        propagation.close(op->getResult(0));
      auto attr = op->getAttrOfType<ShardingAttr>(DtcDialect::kPinAttr);
      if (!attr)
        return WalkResult::advance();
      if (op->getNumResults() == 0 ||
          failed(pin(op->getResult(0), attr,
                     op->getAttr(DtcDialect::kPinPriorityAttr), op->getLoc())))
        return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (walk.wasInterrupted() || failed(propagation.run()))
      return signalPassFailure();
    propagation.annotate(gridRef.getValue());
  }
};

} // namespace
} // namespace mlir::dtc
