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
// pieces of p elements, by default p = ceil(n/k); piece i holds global
// elements [i*p, min((i+1)*p, n)) followed by padding. Every rank runs the
// same static shapes (one SPMD program), which ragged pieces would not
// allow. A coarser p keeps pieces on the boundaries of a merged dimension's
// major factor: 12 attention heads of 64 over 8 devices split the 768 model
// columns into pieces of p = 2 heads = 128 (the last two all padding).
// docs/design.md "Uneven shards" says why.
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

/// Per factor of an op's ShardingRule, the grid axes sharding it (an empty
/// entry: not sharded), plus the piece size of a factor split coarser than
/// the default ceil(size / pieces) (kept in `pieces`; 0 or missing: the
/// default).
struct FactorAxes : llvm::SmallVector<GridAxes> {
  using llvm::SmallVector<GridAxes>::SmallVector;
  llvm::SmallVector<int64_t> pieces;
  int64_t piece(unsigned factor) const {
    return factor < pieces.size() ? pieces[factor] : 0;
  }
  void setPiece(unsigned factor, int64_t piece) {
    if (piece == 0 && factor >= pieces.size())
      return;
    if (pieces.size() <= factor)
      pieces.resize(size(), 0);
    pieces[factor] = piece;
  }
};

/// The reduction that resolves a pending partial value.
enum class PartialKind : uint8_t { Sum, Max };
llvm::StringRef stringifyPartialKind(PartialKind kind);

struct TensorSharding {
  llvm::SmallVector<GridAxes> dims;
  /// Per split dimension, its piece size when not ceil(size / pieces);
  /// 0 (or missing) means that default. Kept normalized (no default stored).
  llvm::SmallVector<int64_t> pieces;
  /// Grid axes over which the value is pending (sorted).
  GridAxes partial;
  PartialKind partialKind = PartialKind::Sum;

  static TensorSharding replicated(int64_t rank) {
    TensorSharding s;
    s.dims.resize(rank);
    return s;
  }
  bool isPartial() const { return !partial.empty(); }
  /// The explicit piece size of `dim` (0: the default).
  int64_t piece(unsigned dim) const {
    return dim < pieces.size() ? pieces[dim] : 0;
  }
  void setPiece(unsigned dim, int64_t piece);
  bool isReplicated() const;
  /// Every grid axis the sharding uses (dims and partial).
  GridAxes usedAxes() const;
  bool operator==(const TensorSharding &other) const;
  bool operator!=(const TensorSharding &other) const {
    return !(*this == other);
  }
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
/// Size of one piece of dimension `dim` (of size `size`) under `sharding`.
int64_t dimPiece(const TensorSharding &sharding, unsigned dim, int64_t size,
                 llvm::ArrayRef<int64_t> grid);
/// Drops explicit piece sizes equal to the default (and of unsplit dims).
void normalizePieces(TensorSharding &sharding, llvm::ArrayRef<int64_t> shape,
                     llvm::ArrayRef<int64_t> grid);
/// Whether dimension `dim` of `sharding` is split with padding.
bool isPadded(const TensorSharding &sharding, unsigned dim, int64_t size,
              llvm::ArrayRef<int64_t> grid);
/// Local (padded) shape of a value of shape `global` under `sharding`.
llvm::SmallVector<int64_t> localShape(llvm::ArrayRef<int64_t> global,
                                      const TensorSharding &sharding,
                                      llvm::ArrayRef<int64_t> grid);

} // namespace mlir::dtc

#endif // DTC_SHARDING_TENSORSHARDING_H
