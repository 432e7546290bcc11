//===- TensorSharding.h - how one value is laid out over a grid -*- C++ -*-===//
//
// The value-level half of the plan vocabulary (no dialect dependency, so op
// interfaces can use it):
//  - TensorSharding: per dimension the grid axes splitting it (major first),
//    plus the grid axes over which the value is a pending partial result and
//    the reduction that resolves it (sum or max);
//  - FactorAxes: per factor of an op's ShardingRule, the grid axes sharding
//    it.
//
// Uneven splits are padded: a dimension of size n split into k pieces has
// pieces of ceil(n/k) elements; piece i holds global elements
// [i*ceil(n/k), min((i+1)*ceil(n/k), n)) followed by padding. Every rank
// runs the same static shapes (one SPMD program), which ragged pieces
// would not allow. docs/design.md "Uneven shards" says why.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_SHARDING_TENSORSHARDING_H
#define DTC_SHARDING_TENSORSHARDING_H

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include <cstdint>
#include <string>

namespace mlir::dtc {

using GridAxes = llvm::SmallVector<int64_t, 2>;
using FactorAxes = llvm::SmallVector<GridAxes>;

/// The reduction that resolves a pending partial value.
enum class PartialKind : uint8_t { Sum, Max };
llvm::StringRef stringifyPartialKind(PartialKind kind);

struct TensorSharding {
  llvm::SmallVector<GridAxes> dims;
  /// Grid axes over which the value is pending (sorted).
  GridAxes partial;
  PartialKind partialKind = PartialKind::Sum;

  static TensorSharding replicated(int64_t rank) {
    TensorSharding s;
    s.dims.resize(rank);
    return s;
  }
  bool isPartial() const { return !partial.empty(); }
  bool isReplicated() const;
  /// Every grid axis the sharding uses (dims and partial).
  GridAxes usedAxes() const;
  bool operator==(const TensorSharding &other) const {
    return dims == other.dims && partial == other.partial &&
           (partial.empty() || partialKind == other.partialKind);
  }
  bool operator!=(const TensorSharding &other) const { return !(*this == other); }
  /// e.g. "[[0], []] partial [1] sum".
  std::string str() const;
};

/// Number of pieces `axes` split a dimension into on `grid`.
int64_t shardCount(llvm::ArrayRef<int64_t> grid, llvm::ArrayRef<int64_t> axes);
/// Size of one (padded) piece of a dimension of size `size` in `pieces`.
inline int64_t pieceSize(int64_t size, int64_t pieces) {
  return pieces <= 1 ? size : (size + pieces - 1) / pieces;
}
/// Whether splitting `size` into `pieces` needs padding.
inline bool isUneven(int64_t size, int64_t pieces) {
  return pieces > 1 && size % pieces != 0;
}
/// Local (padded) shape of a value of shape `global` under `sharding`.
llvm::SmallVector<int64_t> localShape(llvm::ArrayRef<int64_t> global,
                                      const TensorSharding &sharding,
                                      llvm::ArrayRef<int64_t> grid);

} // namespace mlir::dtc

#endif // DTC_SHARDING_TENSORSHARDING_H
