//===- PropagateShardings.cpp - complete a plan from pinned shardings ----===//
//
// The plan-completion step any planner can reuse: pin what you know (by
// hand, from the command line, from a strategy or a search) and let
// propagation derive the rest (include/dtc/Sharding/Propagation.h).
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Sharding/Propagation.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_PROPAGATESHARDINGS
#include "dtc/Passes/Passes.h.inc"

namespace {

/// The priority named next to a pin (a user's when absent).
FailureOr<ShardingPriority> priorityOf(Attribute attr, Location loc) {
  std::optional<PinPriority> pin =
      attr ? enumOf<PinPriority>(attr) : PinPriority::User;
  if (!pin)
    return emitError(loc) << "dtc.pin_priority must be " << pinPriorityNames();
  switch (*pin) {
  case PinPriority::User:
    return ShardingPriority::User;
  case PinPriority::Strategy:
    return ShardingPriority::Strategy;
  case PinPriority::Storage:
    return ShardingPriority::None; // a storage pin (pinStorage)
  }
  llvm_unreachable("a pin priority DtcEnums.td does not know");
}

struct PropagateShardingsPass
    : impl::PropagateShardingsBase<PropagateShardingsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    std::optional<Plan> plan = getPlan(module);
    if (!step || !plan) {
      module.emitError()
          << "dtc-propagate-shardings needs a @train_step and a dtc.plan "
             "with a grid";
      return signalPassFailure();
    }
    FailureOr<SmallVector<int64_t>> grid = getGridShape(module, plan->grid);
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
    propagation.annotate(plan->grid);
  }
};

} // namespace
} // namespace mlir::dtc
