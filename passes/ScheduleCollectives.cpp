//===- ScheduleCollectives.cpp - issue ZeRO's collectives early ----------===//
//
// The partitioner materializes a resharding right before the op that needs
// it. That is the right place for most collectives, but not for ZeRO's:
//  - a gradient's reduce-scatter placed at its update keeps every full
//    gradient alive until the optimizer (ZeRO-1's memory); issued as soon
//    as the gradient is complete, the full gradient dies there (ZeRO-2);
//  - a ZeRO-3 parameter gathered right before its use leaves nothing for
//    the communication to overlap with; issued one region earlier, it can.
// Moving an op never changes what it computes: only its operands' defining
// ops must stay before it, and all ranks move the same ops the same way.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include <tuple>

namespace mlir::dtc {
#define GEN_PASS_DEF_SCHEDULECOLLECTIVES
#include "dtc/Passes/Passes.h.inc"

namespace {

bool isCollectiveOrPadding(Operation *op) {
  return isa<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
             shard::AllSliceOp, shard::AllToAllOp, PadOp, FillPaddingOp>(op);
}

StringRef phaseOf(Operation *op) {
  auto phase = op->getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
  return phase ? phase.getValue() : StringRef();
}

/// forward, backward (B and W alike) or optimizer.
StringRef phaseGroup(Operation *op) {
  StringRef phase = phaseOf(op);
  return phase.starts_with("backward") ? StringRef("backward") : phase;
}

struct ScheduleCollectivesPass : impl::ScheduleCollectivesBase<ScheduleCollectivesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plan = module->getAttrOfType<DictionaryAttr>(DtcDialect::kPlanAttr);
    auto zero = plan ? plan.getAs<IntegerAttr>("zero") : nullptr;
    if (!zero || zero.getInt() < 2)
      return;
    module.walk([&](func::FuncOp func) {
      if (func.isExternal())
        return;
      Block &body = func.getBody().front();
      reduceGradientsEarly(body);
      if (zero.getInt() >= 3)
        prefetchGathers(func, body);
    });
  }

  /// Moves `op` to right after the last of its operands' definitions in
  /// `body` (the block's start when they are all arguments or outside).
  static void hoist(Operation *op, Block &body) {
    Operation *after = nullptr;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (def->getBlock() == &body && (!after || after->isBeforeInBlock(def)))
          after = def;
    if (!after) {
      op->moveBefore(&body, body.begin());
      return;
    }
    if (after->isBeforeInBlock(op) && after->getNextNode() != op)
      op->moveAfter(after);
  }

  /// ZeRO-2/3: the optimizer-phase collectives on a parameter gradient (its
  /// reduce-scatter and the padding around it) run as soon as their operand
  /// exists, tagged with the phase they now run in.
  void reduceGradientsEarly(Block &body) {
    SmallVector<Operation *> chain;
    for (Operation &op : body)
      if (phaseOf(&op) == "optimizer" && isCollectiveOrPadding(&op) &&
          op.hasAttr(DtcDialect::kGradientOfAttr))
        chain.push_back(&op);
    for (Operation *op : chain) {
      hoist(op, body);
      Operation *prev = op->getPrevNode();
      if (prev && phaseOf(prev) != "optimizer" && !phaseOf(prev).empty())
        op->setAttr(DtcDialect::kPhaseAttr, prev->getAttr(DtcDialect::kPhaseAttr));
    }
  }

  /// ZeRO-3: a region's parameter gathers are issued before the previous
  /// region of the same phase starts.
  void prefetchGathers(func::FuncOp func, Block &body) {
    struct Chain {
      SmallVector<Operation *> ops; // in order, head first
      Operation *firstConsumer = nullptr;
    };
    SmallVector<Chain> chains;
    for (BlockArgument arg : func.getArguments()) {
      if (!func.getArgAttr(arg.getArgNumber(), DtcDialect::kRegatherAttr))
        continue;
      for (Operation *user : arg.getUsers()) {
        if (!isCollectiveOrPadding(user) || user->getBlock() != &body)
          continue;
        Chain chain;
        Operation *op = user;
        while (true) {
          chain.ops.push_back(op);
          Value result = op->getResult(0);
          Operation *next = result.hasOneUse() ? *result.user_begin() : nullptr;
          if (!next || !isCollectiveOrPadding(next))
            break;
          op = next;
        }
        for (Operation *consumer : chain.ops.back()->getResult(0).getUsers())
          if (!chain.firstConsumer || consumer->isBeforeInBlock(chain.firstConsumer))
            chain.firstConsumer = consumer;
        if (chain.firstConsumer && !isa<func::ReturnOp>(chain.firstConsumer))
          chains.push_back(std::move(chain));
      }
    }
    llvm::stable_sort(chains, [](const Chain &a, const Chain &b) {
      return a.firstConsumer->isBeforeInBlock(b.firstConsumer);
    });
    // Regions in program order: a layer when ops carry one, else each
    // consuming op.
    using Region = std::tuple<std::string, int64_t, Operation *>;
    auto regionOf = [](Operation *consumer) -> Region {
      if (auto layer = consumer->getAttrOfType<IntegerAttr>("dtc.layer"))
        return {phaseGroup(consumer).str(), layer.getInt(), nullptr};
      return {phaseGroup(consumer).str(), -1, consumer};
    };
    Operation *previousStart = nullptr, *currentStart = nullptr;
    Region currentRegion;
    std::string currentGroup;
    for (Chain &chain : chains) {
      Region region = regionOf(chain.firstConsumer);
      if (!currentStart || region != currentRegion) {
        std::string group = std::get<0>(region);
        previousStart = group == currentGroup ? currentStart : nullptr;
        currentStart = chain.firstConsumer;
        currentRegion = region;
        currentGroup = group;
      }
      if (!previousStart)
        continue;
      for (Operation *op : chain.ops)
        op->moveBefore(previousStart);
    }
  }
};

} // namespace
} // namespace mlir::dtc
