//===- Sharding.h - value shardings and factor assignment -------*- C++ -*-===//
//
// The plan vocabulary shared by every planner (pinned strategies today, the
// cost-model search later) and the partitioner:
//  - TensorSharding: per dimension the grid axes splitting it, plus the grid
//    axes over which the value is a pending partial sum;
//  - FactorAxes: per factor of an op's ShardingRule, the grid axes sharding
//    it. An op's FactorAxes decide the sharding it needs of each operand and
//    the sharding of each result.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_SHARDING_SHARDING_H
#define DTC_SHARDING_SHARDING_H

#include "dtc/Dialect/DtcOps.h"
#include "dtc/Sharding/ShardingRule.h"

namespace mlir::dtc {

using GridAxes = SmallVector<int64_t, 2>;
using FactorAxes = SmallVector<GridAxes>;

struct TensorSharding {
  SmallVector<GridAxes> dims;
  GridAxes partial;

  static TensorSharding replicated(int64_t rank) {
    TensorSharding s;
    s.dims.resize(rank);
    return s;
  }
  bool isPartial() const { return !partial.empty(); }
  bool operator==(const TensorSharding &other) const {
    return dims == other.dims && partial == other.partial;
  }
  bool operator!=(const TensorSharding &other) const { return !(*this == other); }

  ShardingAttr toAttr(MLIRContext *ctx, StringRef grid) const;
  static TensorSharding fromAttr(ShardingAttr attr);
};

/// Number of pieces `axes` split a dimension into on `grid`.
int64_t shardCount(ArrayRef<int64_t> grid, ArrayRef<int64_t> axes);

/// The local type of `global` under `sharding` (dims must divide).
RankedTensorType localType(RankedTensorType global, const TensorSharding &sharding,
                           ArrayRef<int64_t> grid);

/// Greedy factor assignment from operand shardings: each sharded operand
/// dimension shards its major factor unless the factor is blocked, already
/// sharded, does not divide, or its axes are taken. Factors that would sit in
/// a non-major position of some dimension are left unsharded.
FactorAxes assignFactorsFromOperands(const ShardingRule &rule,
                                     ArrayRef<TensorSharding> operands,
                                     ArrayRef<int64_t> grid);

/// Sharding an op needs of operand `idx` (never partial).
TensorSharding requiredOperandSharding(const ShardingRule &rule,
                                       const FactorAxes &factors, unsigned idx);
/// Dimension sharding of result `idx`, and the axes it is partial over
/// because of sharded Sum/Mean factors it lacks. `meanAxes` receives the
/// subset coming from Mean factors (the result needs rescaling).
TensorSharding resultSharding(const ShardingRule &rule, const FactorAxes &factors,
                              unsigned idx, GridAxes *meanAxes = nullptr);

/// The op's dtc.factor_axes annotation.
ArrayAttr factorAxesToAttr(MLIRContext *ctx, const FactorAxes &factors);
/// Reads and checks an op's dtc.factor_axes against its rule and the grid
/// (plans are data, possibly written by a search or by hand): axes exist,
/// are used once per op, blocked factors stay whole, and sharded factors
/// divide evenly and sit in major position of every dimension.
FailureOr<FactorAxes> factorAxesFromAttr(Operation *op, const ShardingRule &rule,
                                         ArrayRef<int64_t> grid);

/// Reads the grid shape of `shard.grid @name` in `module`.
FailureOr<SmallVector<int64_t>> getGridShape(ModuleOp module, StringRef name);

} // namespace mlir::dtc

#endif // DTC_SHARDING_SHARDING_H
