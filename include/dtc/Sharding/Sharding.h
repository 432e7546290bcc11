//===- Sharding.h - shardings as attributes, factors <-> dimensions -*- C++
//-*-===//
//
// The plan vocabulary shared by every planner (pinned strategies, the
// propagation, the cost-model search later) and the partitioner: value
// shardings (TensorSharding.h) as #dtc.sharding attributes, an op's factor
// sharding (dtc.factor_axes) and the dimension shardings it implies for
// each operand and result, and the legality of a factor sharding.
//
// Factors and dimensions: a dimension made of factors [f1, f2, ...] (major
// first; a reshape merges several) is split over the concatenation of their
// axes. That is a contiguous split only if every factor before the last
// sharded one is split completely (as Shardy requires), so
// dimensionToFactors() hands a dimension's axes to its factors in that
// order and drops what cannot be expressed.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_SHARDING_SHARDING_H
#define DTC_SHARDING_SHARDING_H

#include "dtc/Dialect/DtcOps.h"
#include "dtc/Sharding/ShardingRule.h"
#include "dtc/Sharding/TensorSharding.h"

namespace mlir::dtc {

ShardingAttr toShardingAttr(const TensorSharding &sharding, MLIRContext *ctx,
                            StringRef grid);
TensorSharding fromShardingAttr(ShardingAttr attr);

/// The local (padded) type of `global` under `sharding`.
RankedTensorType localType(RankedTensorType global,
                           const TensorSharding &sharding,
                           ArrayRef<int64_t> grid);

/// One factor's share of a dimension's split.
struct FactorSplit {
  int64_t factor;
  GridAxes axes;
  /// The factor's piece size when not the default (0).
  int64_t piece = 0;
};

/// The factors of one dimension and the axes each gets when the dimension
/// is split over `axes` in pieces of `piece` (0: the default): axes go to
/// the major factor while they divide it, to the next factor once it is
/// split completely; a padded split reaches only the major factor, and only
/// when its pieces fall on that factor's boundaries. What cannot be
/// expressed is dropped (returned in `dropped` when given).
SmallVector<FactorSplit>
dimensionToFactors(const ShardingRule &rule, const DimFactors &dim,
                   ArrayRef<int64_t> axes, int64_t piece,
                   ArrayRef<int64_t> grid, GridAxes *dropped = nullptr);

/// Sharding an op needs of operand `idx` (never partial).
TensorSharding requiredOperandSharding(const ShardingRule &rule,
                                       const FactorAxes &factors, unsigned idx,
                                       ArrayRef<int64_t> grid);
/// Dimension sharding of result `idx`, and the axes it is pending over
/// because of sharded Sum/Mean/Max factors it lacks. `meanFactors` receives
/// the sharded Mean factors among them (the result needs rescaling).
TensorSharding resultSharding(const ShardingRule &rule,
                              const FactorAxes &factors, unsigned idx,
                              ArrayRef<int64_t> grid,
                              SmallVectorImpl<int64_t> *meanFactors = nullptr);
/// Size of one piece of `factor` under `factors` (its size when unsplit).
int64_t factorPiece(const ShardingRule &rule, const FactorAxes &factors,
                    int64_t factor, ArrayRef<int64_t> grid);
/// Whether `factor` is split with padding.
bool isPaddedFactor(const ShardingRule &rule, const FactorAxes &factors,
                    int64_t factor, ArrayRef<int64_t> grid);

/// Why `factors` is not a legal factor sharding of `op` (with rule `rule`)
/// on `grid`, or "" when it is: axes exist and shard one factor each,
/// blocked factors stay whole, merged dimensions split contiguously and
/// evenly, an uneven (padded) split of a factor the op reduces needs an op
/// linear in the operands holding it (padding is zeroed first) or a local
/// lowering that implements it, and no result is pending both a sum and a
/// max. Messages name the factor, its size and the pieces.
std::string checkFactorAxes(Operation *op, const ShardingRule &rule,
                            const FactorAxes &factors, ArrayRef<int64_t> grid);

/// Writes the op's dtc.factor_axes (and dtc.factor_pieces when a factor has
/// a non-default piece size).
void setFactorAxesAttr(Operation *op, const FactorAxes &factors);
/// Reads an op's dtc.factor_axes and checks it (checkFactorAxes): plans are
/// data, possibly written by a search or by hand.
FailureOr<FactorAxes> factorAxesFromAttr(Operation *op,
                                         const ShardingRule &rule,
                                         ArrayRef<int64_t> grid);

/// Reads the grid shape of `shard.grid @name` in `module`.
FailureOr<SmallVector<int64_t>> getGridShape(ModuleOp module, StringRef name);

} // namespace mlir::dtc

#endif // DTC_SHARDING_SHARDING_H
