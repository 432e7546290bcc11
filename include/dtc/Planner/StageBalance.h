//===- StageBalance.h - where the pipeline cuts the layers ------*- C++ -*-===//
//
// A planner decision: which layers go to which virtual stage. Today it
// balances the cost model's compute estimate; a search may call it, or
// write other cuts into the plan (Plan::stageCuts), which the stage split
// applies either way.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLANNER_STAGEBALANCE_H
#define DTC_PLANNER_STAGEBALANCE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LLVM.h"

namespace mlir::dtc {

/// The layers of `step` (one more than the largest dtc.layer). Errors at
/// an op that has no layer.
FailureOr<int64_t> countLayers(func::FuncOp step);

/// Contiguous split of `costs` into `groups` non-empty runs minimizing the
/// largest run's sum; the group of every item.
SmallVector<int64_t> balanceRuns(ArrayRef<double> costs, int64_t groups);

/// Cuts the layers (dtc.layer) of `step` into `pp` x `chunks` contiguous
/// virtual stages of about equal compute (every op's flops, whatever its
/// phase, plus one per layer) and returns the first layer of each stage
/// after the first. Errors at the step when an op has no layer or there
/// are fewer layers than stages.
FailureOr<SmallVector<int64_t>> balanceStages(func::FuncOp step, int64_t pp,
                                              int64_t chunks);

} // namespace mlir::dtc

#endif // DTC_PLANNER_STAGEBALANCE_H
