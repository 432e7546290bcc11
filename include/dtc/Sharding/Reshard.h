//===- Reshard.h - moving a value between two shardings ---------*- C++ -*-===//
//
// A library function, so the partitioner, the cost model, the propagation
// and the later search and ZeRO passes all price and build resharding the
// same way. planReshard() returns the sequence of collectives that turns a
// value's layout `from` into `to` on a grid, and its cost in bytes each
// device sends (the runtime's ring algorithms, include/dtc/CostModel):
//  - axes the target splits that the value does not use yet are sliced
//    first (free, and every later collective moves less);
//  - pending partial values become reduce-scatters straight into a split
//    the target wants, all-reduces otherwise;
//  - a split moving from one dimension to another is an all-to-all;
//  - what remains is gathered down to a prefix of the target, then sliced.
// Among the orders it can build (with and without the early slices and the
// all-to-alls) it keeps the cheapest.
//
// Uneven (padded) dimensions move only between whole and split (a split of
// a split of a padded dimension would not line up with the flat pieces);
// materializing a step pads a whole dimension to a multiple of the group
// size before a slice/scatter/all-to-all and crops a gathered one.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_SHARDING_RESHARD_H
#define DTC_SHARDING_RESHARD_H

#include "dtc/Sharding/TensorSharding.h"
#include "dtc/artifact/Vocabulary.h"

#include <string>

namespace mlir::dtc {

struct ReshardStep {
  /// The artifact's collective kinds (include/dtc/artifact/Vocabulary.h).
  using Kind = ::dtc::artifact::CollectiveKind;
  Kind kind;
  /// The group: grid axes, in group order.
  GridAxes axes;
  /// ReduceScatter/AllGather/AllSlice: the dimension; AllToAll: the
  /// dimension the axes move to (split).
  int64_t dim = -1;
  /// AllToAll: the dimension the axes leave (concatenated).
  int64_t concatDim = -1;
  PartialKind reduction = PartialKind::Sum;
  TensorSharding before, after;
  /// How the step is materialized on local buffers (padded pieces): before
  /// the collective, dimension `padDim` is zero-padded to `padSize` (a
  /// multiple of the group); after it, dimension `cropDim` is cropped to
  /// `cropSize` (a gathered padded dimension back to its global size).
  /// -1: nothing to pad or crop.
  int64_t padDim = -1, padSize = 0, cropDim = -1, cropSize = 0;
  /// Bytes each device sends (maximum over devices).
  double bytes = 0;
};

llvm::StringRef stringifyReshardKind(ReshardStep::Kind kind);

struct ReshardPlan {
  llvm::SmallVector<ReshardStep, 2> steps;
  /// Total bytes each device sends.
  double bytes = 0;
  std::string str() const;
};

/// The cheapest plan turning `from` into `to` for a value of `shape` with
/// `elementBytes`-byte elements. Fails (with `error`) only when `to` is
/// pending over axes `from` is not (a whole value cannot become partial) or
/// pending with another reduction.
bool planReshard(llvm::ArrayRef<int64_t> shape, int64_t elementBytes,
                 const TensorSharding &from, const TensorSharding &to,
                 llvm::ArrayRef<int64_t> grid, ReshardPlan &plan,
                 std::string &error);

} // namespace mlir::dtc

#endif // DTC_SHARDING_RESHARD_H
