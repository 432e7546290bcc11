//===- Propagation.h - sharding propagation with priorities ----*- C++ -*-===//
//
// From a few pinned value shardings to a whole consistent plan: a sharding
// for every value and a factor sharding for every op. Propagation runs
// forward and backward through the ops' sharding rules (a result's split
// reaches the operands that hold the same factor, and the other way round),
// hands a merged dimension's axes to its factors in order (minor factors
// included, as Shardy does), and resolves conflicts by priority:
//   user pin > strategy pin > inferred,
// then by the pin the inferred split came from, then by operand order.
// It runs one round per priority level, highest first, each to a fixed
// point: a dimension is only ever filled (empty -> split), never changed, so
// it terminates and a higher-priority pin is never overridden.
//
// Pins are closed: every dimension of a pinned value, split or not, stays as
// pinned. A storage pin fixes how a value is stored without making it a
// source: the ops that read or write it plan as if it had no split and the
// partitioner reshards it for them (ZeRO's parameters and optimizer state,
// split over the data-parallel axes, are gathered where they are used instead
// of pushing that split into the activations they meet). Plans stay data: the
// result is written as the same annotations a search would write
// (dtc.sharding, dtc.factor_axes).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_SHARDING_PROPAGATION_H
#define DTC_SHARDING_PROPAGATION_H

#include "dtc/Sharding/Sharding.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include <functional>

namespace mlir::dtc {

enum class ShardingPriority : uint8_t {
  None = 0,
  Inferred = 1,
  Strategy = 2,
  User = 3
};

class ShardingPropagation {
public:
  /// `mayUse(value, axis)`: whether propagation may split `value` over
  /// `axis` (e.g. parameters stay whole on the data-parallel axes).
  ShardingPropagation(func::FuncOp func, ArrayRef<int64_t> grid,
                      std::function<bool(Value, int64_t)> mayUse = nullptr);

  /// Fixes the sharding of `value` at `priority` (Strategy or User). A pin
  /// of a higher priority replaces a lower one; otherwise the first stays.
  void pin(Value value, const TensorSharding &sharding,
           ShardingPriority priority);
  /// Fixes how `value` is stored (closed, like a pin) without proposing its
  /// split to any op: readers and writers plan around it.
  void pinStorage(Value value, const TensorSharding &sharding);
  /// Plans only `ops`: every other op keeps the factor sharding it carries
  /// and is neither planned nor annotated (a second planning round over one
  /// phase of the step, e.g. ZeRO's optimizer).
  void restrictTo(ArrayRef<Operation *> ops);
  /// Gives `axes` to factor `factor` of `op` (none of its factors when -1),
  /// decided by a planner (the tensor-parallel layout program): the op's
  /// other factors never take them, and a factor that other pins split
  /// (the batch over dp) gets them after its own axes. (The micro-batch
  /// axis must stay the batch's minor split: reserve no factor the batch
  /// pins split over it.)
  void reserve(Operation *op, const GridAxes &axes, int64_t factor);
  /// Keeps `value` whole (constants: consumers slice what they need).
  void close(Value value);
  /// Propagates, then fixes every op's factor sharding.
  LogicalResult run();

  TensorSharding shardingOf(Value value) const;
  /// The priority `value`'s split dimensions came from (None if whole).
  ShardingPriority priorityOf(Value value) const;
  /// The op's factor sharding after run().
  const FactorAxes &factorsOf(Operation *op) const;
  /// Writes dtc.sharding on the function's arguments and dtc.factor_axes
  /// on every op with a sharding rule.
  void annotate(StringRef gridName);

private:
  struct DimState {
    GridAxes axes;
    /// Piece size when not the default (0).
    int64_t piece = 0;
    /// Level of what set it: 0 none, 1 inferred, 2 strategy, 3 user.
    uint8_t level = 0;
    /// Level of the pin an inferred split comes from.
    uint8_t origin = 0;
    bool closed = false;
    /// A storage pin: kept, never proposed to ops.
    bool storageOnly = false;
  };
  using ValueState = SmallVector<DimState, 4>;

  ValueState &state(Value v);
  /// Factor sharding of `op` from the dimensions whose origin is at least
  /// `minOrigin`, higher priority first; `origins` receives each factor's.
  FactorAxes assign(Operation *op, const ShardingRule &rule, uint8_t minOrigin,
                    SmallVectorImpl<uint8_t> &origins);
  /// Fills the open, empty dimensions of the op's operands and results from
  /// `factors`; returns the values that changed.
  SmallVector<Value> project(Operation *op, const ShardingRule &rule,
                             const FactorAxes &factors,
                             ArrayRef<uint8_t> origins);

  func::FuncOp func;
  SmallVector<int64_t> grid;
  std::function<bool(Value, int64_t)> mayUse;
  llvm::DenseMap<Value, ValueState> states;
  llvm::DenseMap<Operation *, FactorAxes> opFactors;
  llvm::DenseMap<Operation *, ShardingRule> rules;
  struct Reservation {
    GridAxes axes;
    int64_t factor;
  };
  llvm::DenseMap<Operation *, Reservation> reserved;
  /// restrictTo()'s ops; empty: every op with a sharding rule.
  llvm::DenseSet<Operation *> only;
  bool restricted = false;
};

} // namespace mlir::dtc

#endif // DTC_SHARDING_PROPAGATION_H
