//===- UnitMicroBatchAxes.cpp - one micro-batch's collectives -------------===//
//
// fixUnitMicroBatchAxes (UnitMicroBatchAxes.h): docs/design.md "Expert
// parallelism" says why a pipeline of one micro-batch needs it.
//
//===----------------------------------------------------------------------===//
#include "UnitMicroBatchAxes.h"
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::dtc {
namespace {

/// The grid axes of a collective between devices, if `op` is one.
std::optional<ArrayRef<int16_t>> collectiveAxes(Operation *op) {
  if (auto c = dyn_cast<shard::AllGatherOp>(op))
    return c.getGridAxes();
  if (auto c = dyn_cast<shard::AllSliceOp>(op))
    return c.getGridAxes();
  if (auto c = dyn_cast<shard::AllReduceOp>(op))
    return c.getGridAxes();
  if (auto c = dyn_cast<shard::ReduceScatterOp>(op))
    return c.getGridAxes();
  if (auto c = dyn_cast<shard::AllToAllOp>(op))
    return c.getGridAxes();
  return std::nullopt;
}

void setCollectiveAxes(Operation *op, ArrayRef<int16_t> axes) {
  if (auto c = dyn_cast<shard::AllGatherOp>(op))
    c.setGridAxes(axes);
  else if (auto c = dyn_cast<shard::AllSliceOp>(op))
    c.setGridAxes(axes);
  else if (auto c = dyn_cast<shard::AllReduceOp>(op))
    c.setGridAxes(axes);
  else if (auto c = dyn_cast<shard::ReduceScatterOp>(op))
    c.setGridAxes(axes);
  else if (auto c = dyn_cast<shard::AllToAllOp>(op))
    c.setGridAxes(axes);
}

/// What a pipeline of one micro-batch must change so that work mixing the
/// batch's examples stays inside its micro-batch: collectives over a
/// micro-batch axis of size 1 to lose it (gathers and exchanges of values
/// computed in the micro-batch, and sums that the micro-batch's own work
/// reads: a sum over micro-batches exists only after the last one), and
/// values of the micro-batch that the step's end reads without a sum over
/// the micro-batches (what such work made whole) to get one. Follows the
/// emitter's scopes (per step, per micro-batch, accumulated over them).
struct UnitMicroBatchFixes {
  SmallVector<Operation *> drop;
  SmallVector<OpOperand *> accumulate;
  bool empty() const { return drop.empty() && accumulate.empty(); }
};

UnitMicroBatchFixes unitMicroBatchFixes(func::FuncOp local,
                                        ArrayRef<int64_t> gridShape,
                                        ArrayRef<int64_t> mbAxes) {
  enum class Scope { Step, MicroBatch, Accumulated };
  auto isMb = [&](int64_t a) { return llvm::is_contained(mbAxes, a); };
  auto onlyUnitMb = [&](ArrayRef<int16_t> axes) {
    return llvm::all_of(
        axes, [&](int16_t a) { return !isMb(a) || gridShape[size_t(a)] == 1; });
  };
  llvm::DenseMap<Value, Scope> scope;
  // An accumulated value's sum over the micro-batches.
  llvm::DenseMap<Value, Operation *> sumOf;
  for (BlockArgument arg : local.getArguments()) {
    unsigned i = arg.getArgNumber();
    Scope s = Scope::Step;
    if (auto when =
            local.getArgAttrOfType<StringAttr>(i, DtcDialect::kScopeAttr))
      s = when.getValue() == "microbatch"    ? Scope::MicroBatch
          : when.getValue() == "accumulated" ? Scope::Accumulated
                                             : Scope::Step;
    else if (auto attr = local.getArgAttrOfType<ShardingAttr>(
                 i, DtcDialect::kShardingAttr))
      for (DenseI64ArrayAttr dim : attr.getDims())
        if (llvm::any_of(dim.asArrayRef(), isMb))
          s = Scope::MicroBatch;
    scope[arg] = s;
  }
  // A gather of a step input over the micro-batch axis reads the input's
  // every micro-batch once per step (the emitter's whole-input copy); a
  // message from the previous stage is one micro-batch's.
  auto isStepInput = [&](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && !local.getArgAttr(arg.getArgNumber(), DtcDialect::kScopeAttr);
  };
  // What the step returns but does not send to the next stage (the loss,
  // outputs, updated state) is read after the micro-batches.
  auto leavesTheStep = [&](OpOperand &use) {
    if (!isa<func::ReturnOp>(use.getOwner()))
      return false;
    return resultRole(local, use.getOperandNumber()) != Role::Send;
  };
  llvm::SetVector<Operation *> drop;
  UnitMicroBatchFixes fixes;
  for (Operation &op : local.getBody().front()) {
    bool perMicroBatch = false;
    SmallVector<Operation *> sums;
    std::optional<ArrayRef<int16_t>> axes = collectiveAxes(&op);
    const bool overMb = axes && llvm::any_of(*axes, isMb);
    // The optimizer's own work runs once per step. (Its reductions of a
    // gradient may run per micro-batch, ZeRO's reduce-scatter before the
    // sum over micro-batches, which the collectives' schedule moves into the
    // backward; a stage's return also sends values of the micro-batch to
    // the next stage.)
    const bool stepEnd = isPhase(&op, Phase::Optimizer) && !overMb &&
                         !isa<shard::AllReduceOp, shard::ReduceScatterOp>(op);
    for (OpOperand &operand : op.getOpOperands()) {
      Scope s = scope.lookup(operand.get());
      if (s == Scope::MicroBatch && (stepEnd || leavesTheStep(operand))) {
        // Read as its sum over the micro-batches (one per value).
        fixes.accumulate.push_back(&operand);
        s = Scope::Accumulated;
      }
      perMicroBatch |= s == Scope::MicroBatch;
      if (s == Scope::Accumulated)
        sums.push_back(sumOf.lookup(operand.get()));
    }
    Scope result = perMicroBatch  ? Scope::MicroBatch
                   : sums.empty() ? Scope::Step
                                  : Scope::Accumulated;
    Operation *sum = sums.empty() ? nullptr : sums.front();
    if (overMb && isa<shard::AllReduceOp, shard::ReduceScatterOp>(op)) {
      result = Scope::Accumulated;
      sum = &op;
    } else if (overMb && isa<shard::AllSliceOp>(op)) {
      result = Scope::MicroBatch;
    } else if (overMb && onlyUnitMb(*axes) && !isStepInput(op.getOperand(0))) {
      drop.insert(&op); // a gather or an exchange inside the micro-batch
    } else if (perMicroBatch && !stepEnd && !isa<func::ReturnOp>(op)) {
      for (Operation *s : sums)
        if (s && onlyUnitMb(*collectiveAxes(s)))
          drop.insert(s);
    }
    for (Value r : op.getResults()) {
      scope[r] = result;
      if (result == Scope::Accumulated)
        sumOf[r] = sum;
    }
  }
  fixes.drop = drop.takeVector();
  // Drops first: they change what reaches the step's end.
  if (!fixes.drop.empty())
    fixes.accumulate.clear();
  return fixes;
}

} // namespace

LogicalResult fixUnitMicroBatchAxes(func::FuncOp local, StringRef gridName,
                                    ArrayRef<int64_t> gridShape,
                                    ArrayRef<int64_t> mbAxes) {
  SmallVector<int16_t> unit;
  for (int64_t a : mbAxes)
    if (gridShape[size_t(a)] == 1)
      unit.push_back(int16_t(a));
  if (unit.empty())
    return success();
  OpBuilder b(local.getContext());
  // Each round drops collectives' axes or sums what the optimizer reads (and
  // the sums it adds are read by nothing else): a few rounds at most.
  for (int round = 0; round < 1000; ++round) {
    UnitMicroBatchFixes fixes = unitMicroBatchFixes(local, gridShape, mbAxes);
    if (fixes.empty())
      return success();
    for (Operation *op : fixes.drop) {
      SmallVector<int16_t> kept;
      const ArrayRef<int16_t> axes = *collectiveAxes(op);
      for (int16_t a : axes)
        if (!llvm::is_contained(mbAxes, int64_t(a)))
          kept.push_back(a);
      if (kept.empty()) {
        op->getResult(0).replaceAllUsesWith(op->getOperand(0));
        op->erase();
      } else {
        setCollectiveAxes(op, kept);
      }
    }
    // One sum per value, before its first reader at the step's end; the
    // readers inside the micro-batch keep the value itself.
    llvm::MapVector<Value, SmallVector<OpOperand *>> readers;
    for (OpOperand *use : fixes.accumulate)
      readers[use->get()].push_back(use);
    for (auto &[value, uses] : readers) {
      Operation *first = uses.front()->getOwner();
      for (OpOperand *use : uses)
        if (use->getOwner()->isBeforeInBlock(first))
          first = use->getOwner();
      b.setInsertionPoint(first);
      auto sum = shard::AllReduceOp::create(b, first->getLoc(), value.getType(),
                                            gridName, unit, value,
                                            shard::ReductionKind::Sum);
      setPhase(sum, Phase::Optimizer);
      for (OpOperand *use : uses)
        use->set(sum.getResult());
    }
  }
  return local.emitError() << "internal error: the collectives over the "
                              "micro-batch axis of size 1 do not settle";
}

} // namespace mlir::dtc
