//===- TensorSharding.cpp - value shardings -------------------------------===//
#include "dtc/Sharding/TensorSharding.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::dtc;

StringRef mlir::dtc::stringifyPartialKind(PartialKind kind) {
  return kind == PartialKind::Max ? "max" : "sum";
}

void TensorSharding::setPiece(unsigned dim, int64_t piece) {
  if (piece == 0 && dim >= pieces.size())
    return;
  if (pieces.size() <= dim)
    pieces.resize(dims.size(), 0);
  pieces[dim] = piece;
  while (!pieces.empty() && pieces.back() == 0)
    pieces.pop_back();
}

bool TensorSharding::operator==(const TensorSharding &other) const {
  if (dims != other.dims || partial != other.partial ||
      (!partial.empty() && partialKind != other.partialKind))
    return false;
  for (unsigned d = 0; d < dims.size(); ++d)
    if (piece(d) != other.piece(d))
      return false;
  return true;
}

int64_t mlir::dtc::dimPiece(const TensorSharding &sharding, unsigned dim,
                            int64_t size, ArrayRef<int64_t> grid) {
  int64_t explicitPiece = sharding.piece(dim);
  return explicitPiece ? explicitPiece
                       : pieceSize(size, shardCount(grid, sharding.dims[dim]));
}

void mlir::dtc::normalizePieces(TensorSharding &sharding,
                                ArrayRef<int64_t> shape,
                                ArrayRef<int64_t> grid) {
  for (unsigned dim = 0; dim < sharding.dims.size(); ++dim) {
    int64_t n = shardCount(grid, sharding.dims[dim]);
    if (n <= 1 || sharding.piece(dim) == pieceSize(shape[dim], n))
      sharding.setPiece(dim, 0);
  }
}

bool mlir::dtc::isPadded(const TensorSharding &sharding, unsigned dim,
                         int64_t size, ArrayRef<int64_t> grid) {
  int64_t n = shardCount(grid, sharding.dims[dim]);
  return n > 1 && dimPiece(sharding, dim, size, grid) * n != size;
}

bool TensorSharding::isReplicated() const {
  return partial.empty() &&
         llvm::all_of(dims, [](const GridAxes &axes) { return axes.empty(); });
}

GridAxes TensorSharding::usedAxes() const {
  GridAxes used(partial.begin(), partial.end());
  for (const GridAxes &axes : dims)
    used.append(axes.begin(), axes.end());
  return used;
}

std::string TensorSharding::str() const {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "[";
  llvm::interleaveComma(dims, os, [&](const GridAxes &axes) {
    os << "[";
    llvm::interleaveComma(axes, os);
    os << "]";
  });
  os << "]";
  if (!pieces.empty()) {
    os << " pieces [";
    llvm::interleaveComma(pieces, os);
    os << "]";
  }
  if (!partial.empty()) {
    os << " partial [";
    llvm::interleaveComma(partial, os);
    os << "] " << stringifyPartialKind(partialKind);
  }
  return out;
}

int64_t mlir::dtc::shardCount(ArrayRef<int64_t> grid, ArrayRef<int64_t> axes) {
  int64_t n = 1;
  for (int64_t axis : axes)
    n *= grid[axis];
  return n;
}

SmallVector<int64_t> mlir::dtc::localShape(ArrayRef<int64_t> global,
                                           const TensorSharding &sharding,
                                           ArrayRef<int64_t> grid) {
  SmallVector<int64_t> shape(global);
  for (unsigned dim = 0; dim < sharding.dims.size(); ++dim)
    shape[dim] = dimPiece(sharding, dim, shape[dim], grid);
  return shape;
}
