//===- TensorSharding.cpp - value shardings -------------------------------===//
#include "dtc/Sharding/TensorSharding.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::dtc;

StringRef mlir::dtc::stringifyPartialKind(PartialKind kind) {
  return kind == PartialKind::Max ? "max" : "sum";
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
  for (auto [dim, axes] : llvm::enumerate(sharding.dims))
    shape[dim] = pieceSize(shape[dim], shardCount(grid, axes));
  return shape;
}
