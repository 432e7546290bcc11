//===- TensorLayout.h - tensor-parallel layout by integer program -*- C++
//-*-===//
//
// Which factor of each forward op the tensor-parallel axes split, chosen by
// Alpa's intra-op integer program (include/dtc/Planner/IntraOpIlp.h) instead
// of Megatron's column/row pattern: for models whose layers do not look
// like a transformer's, or where another layout communicates less.
//
// The program is built from the ops' own facts: each op's strategies are
// "no tp split" and one per factor of its sharding rule that may be split
// over the tp devices (not blocked, divisible, legal for the op); each
// parameter read in the forward is a node of its own (whole, or split along
// one dimension), so a parameter two ops read is stored once. Costs, from
// the hardware profile (include/dtc/CostModel/CostModel.h):
//  - compute: each op's kernel at its roofline on its local size, the
//    backward counted as twice the forward;
//  - the communication a strategy implies: an all-reduce of each result
//    left pending by a split reduction (Megatron's row-parallel output) in
//    the forward, and of each float operand's gradient the split leaves
//    partial (an operand without the split factor: the column-parallel
//    input) in the backward;
//  - resharding on edges: a split value read whole is all-gathered (and a
//    whole value read split costs the gathering of its gradient), a value
//    split one way read another is exchanged all-to-all both ways;
//  - memory: parameters with their gradients and optimizer state, and the
//    forward's results (kept for the backward), per device.
// Identical blocks (include/dtc/Planner/ModelStructure.h) share their
// nodes, each instance adding its costs and memory and its edges (merged
// per pair of nodes), so the program's size follows the distinct layers,
// not the depth, and every block gets the same layout. Ops whose factors
// are all parallel (element-wise ops, reshapes, transposes) join the node
// of an operand and keep its split, as Alpa merges element-wise chains: no
// variables of their own.
// The chosen split of every forward op and parameter is what
// dtc-materialize-plan pins; propagation derives the backward and the
// optimizer from it.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLANNER_TENSORLAYOUT_H
#define DTC_PLANNER_TENSORLAYOUT_H

#include "dtc/CostModel/CostModel.h"
#include "dtc/Planner/IntraOpIlp.h"
#include "dtc/Sharding/TensorSharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

#include <functional>
#include <limits>

namespace mlir::dtc {

struct TensorLayoutOptions {
  /// The tensor-parallel axes (split as one group).
  GridAxes tpAxes;
  /// Costs; its axes must be the mesh's (HardwareProfile::forMesh).
  ::dtc::cost::HardwareProfile hardware;
  /// Bytes per device the layout may use (parameters, their state and the
  /// forward's activations), infinite for none.
  double memoryBudget = std::numeric_limits<double>::infinity();
  /// The step's values hold the whole batch: a device computes and
  /// communicates `batchShare` of each activation (1/dp) and keeps
  /// `activationShare` of it at once (its stage's layers, the micro-batches
  /// in flight, none under full recomputation).
  double batchShare = 1, activationShare = 1;
  /// The share of each parameter's bytes, of its gradient's and of its
  /// optimizer state's a device keeps: its pipeline stage's layers, and
  /// ZeRO's split over dp.
  double parameterShare = 1, gradientShare = 1, stateShare = 1;
  /// Micro-batches per step: each adds its gradients into the step's
  /// (the artifact's accumulate kernels), in the size the readers of each
  /// parameter compute them.
  int64_t microbatches = 1;
  double timeLimitSeconds = 30;
  /// When no layout fits the budget, the one that needs least memory
  /// instead of an error (the driver's re-planning, whose budget comes
  /// from the emitted plan's overshoot, not from the user).
  bool leastMemoryWhenNothingFits = false;
  /// Whether the tp axes may split `factor` of `op` (all may when unset).
  std::function<bool(Operation *, int64_t)> mayUseFactor;
  /// Element-wise ops follow their operand's node instead of being nodes
  /// of their own (Alpa's simplification; a smaller program).
  bool mergeElementwise = true;
};

struct TensorLayout {
  /// Per forward op with a sharding rule: the factor the tp axes split, -1
  /// for none.
  llvm::DenseMap<Operation *, int64_t> splitFactor;
  /// Per parameter read in the forward: its tp layout (replicated when
  /// whole).
  llvm::DenseMap<Value, TensorSharding> parameters;
  ::dtc::planner::IntraOpSolution solution;
  ::dtc::planner::IntraOpProblem problem;
};

/// The profile `nameOrFile` (as --hw takes it) fitted to `grid`, or an
/// error at `at` that the layout program needs one.
FailureOr<::dtc::cost::HardwareProfile>
tensorLayoutHardware(Operation *at, StringRef nameOrFile,
                     ArrayRef<int64_t> grid);

struct Plan;
/// The options for `plan`'s tp axes, its batch shares (dp, micro-batches)
/// and `hardware`; the budget is `deviceMemory` when positive, else the
/// profile's.
TensorLayoutOptions
tensorLayoutOptions(const Plan &plan,
                    const ::dtc::cost::HardwareProfile &hardware,
                    double deviceMemory);

/// Builds and solves the program for `step`'s forward on `grid`. Fails with
/// an error at the step when no layout fits the budget or the solver finds
/// none in time.
FailureOr<TensorLayout> planTensorLayout(func::FuncOp step,
                                         ArrayRef<int64_t> grid,
                                         const TensorLayoutOptions &options);

} // namespace mlir::dtc

#endif // DTC_PLANNER_TENSORLAYOUT_H
