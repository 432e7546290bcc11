//===- Sharding.cpp - shardings as attributes, factors <-> dimensions ----===//
#include "dtc/Sharding/Sharding.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::dtc;

ShardingAttr mlir::dtc::toShardingAttr(const TensorSharding &sharding,
                                       MLIRContext *ctx, StringRef grid) {
  SmallVector<DenseI64ArrayAttr> dimAttrs;
  for (const GridAxes &axes : sharding.dims)
    dimAttrs.push_back(DenseI64ArrayAttr::get(ctx, axes));
  return ShardingAttr::get(
      ctx, FlatSymbolRefAttr::get(ctx, grid), dimAttrs, sharding.partial,
      sharding.partial.empty() ? PartialKind::Sum : sharding.partialKind,
      sharding.pieces);
}

TensorSharding mlir::dtc::fromShardingAttr(ShardingAttr attr) {
  TensorSharding s;
  for (DenseI64ArrayAttr axes : attr.getDims())
    s.dims.emplace_back(axes.asArrayRef());
  s.partial.assign(attr.getPartial().begin(), attr.getPartial().end());
  llvm::sort(s.partial);
  s.partialKind = attr.getPartialKind();
  for (auto [dim, piece] : llvm::enumerate(attr.getPieces()))
    s.setPiece(dim, piece);
  return s;
}

RankedTensorType mlir::dtc::localType(RankedTensorType global,
                                      const TensorSharding &sharding,
                                      ArrayRef<int64_t> grid) {
  return RankedTensorType::get(localShape(global.getShape(), sharding, grid),
                               global.getElementType());
}

SmallVector<FactorSplit>
mlir::dtc::dimensionToFactors(const ShardingRule &rule, const DimFactors &dim,
                              ArrayRef<int64_t> axes, int64_t piece,
                              ArrayRef<int64_t> grid, GridAxes *dropped) {
  SmallVector<FactorSplit> out;
  if (dropped)
    dropped->clear();
  if (dim.empty() || axes.empty()) {
    if (dropped)
      dropped->assign(axes.begin(), axes.end());
    return out;
  }
  int64_t pieces = shardCount(grid, axes), dimSize = 1;
  for (int64_t factor : dim)
    dimSize *= rule.factorSizes[factor];
  int64_t major = dim.front(), majorSize = rule.factorSizes[major];
  int64_t rest = dimSize / majorSize;
  int64_t dimPieceSize = piece ? piece : pieceSize(dimSize, pieces);
  // A lone factor takes the split as it is, padded or not.
  if (dim.size() == 1) {
    out.push_back(
        {major, GridAxes(axes.begin(), axes.end()),
         dimPieceSize == pieceSize(majorSize, pieces) ? 0 : dimPieceSize});
    return out;
  }
  // A padded split of a merged dimension: pieces on the major factor's
  // boundaries (e.g. whole attention heads).
  if (dimPieceSize * pieces != dimSize) {
    int64_t majorPiece = dimPieceSize / rest;
    if (dimPieceSize % rest == 0 && majorPiece * pieces >= majorSize &&
        majorPiece <= majorSize) {
      out.push_back(
          {major, GridAxes(axes.begin(), axes.end()),
           majorPiece == pieceSize(majorSize, pieces) ? 0 : majorPiece});
    } else if (dropped) {
      dropped->assign(axes.begin(), axes.end());
    }
    return out;
  }
  size_t next = 0;
  for (size_t i = 0; i < dim.size() && next < axes.size(); ++i) {
    int64_t factor = dim[i];
    int64_t size = rule.factorSizes[factor];
    GridAxes taken;
    int64_t count = 1;
    // Every piece boundary must fall on a factor boundary.
    while (next < axes.size() && size % (count * grid[axes[next]]) == 0) {
      count *= grid[axes[next]];
      taken.push_back(axes[next++]);
      if (count == size)
        break;
    }
    if (!taken.empty())
      out.push_back({factor, taken, 0});
    if (count != size)
      break; // a factor split incompletely ends the dimension's split
  }
  if (dropped)
    dropped->assign(axes.begin() + next, axes.end());
  return out;
}

int64_t mlir::dtc::factorPiece(const ShardingRule &rule,
                               const FactorAxes &factors, int64_t factor,
                               ArrayRef<int64_t> grid) {
  if (int64_t piece = factors.piece(factor))
    return piece;
  return pieceSize(rule.factorSizes[factor], shardCount(grid, factors[factor]));
}

bool mlir::dtc::isPaddedFactor(const ShardingRule &rule,
                               const FactorAxes &factors, int64_t factor,
                               ArrayRef<int64_t> grid) {
  int64_t n = shardCount(grid, factors[factor]);
  return n > 1 && factorPiece(rule, factors, factor, grid) * n !=
                      rule.factorSizes[factor];
}

static TensorSharding shardingOf(const ShardingRule &rule,
                                 const TensorFactors &tensor,
                                 const FactorAxes &factors,
                                 ArrayRef<int64_t> grid) {
  TensorSharding s;
  for (const DimFactors &dim : tensor) {
    GridAxes axes;
    for (int64_t factor : dim)
      axes.append(factors[factor].begin(), factors[factor].end());
    s.dims.push_back(axes);
  }
  // A dimension's piece is the product of its factors' pieces.
  for (auto [d, dim] : llvm::enumerate(tensor)) {
    int64_t dimSize = 1, piece = 1;
    for (int64_t factor : dim) {
      dimSize *= rule.factorSizes[factor];
      piece *= factorPiece(rule, factors, factor, grid);
    }
    int64_t n = shardCount(grid, s.dims[d]);
    if (n > 1 && piece != pieceSize(dimSize, n))
      s.setPiece(d, piece);
  }
  return s;
}

TensorSharding mlir::dtc::requiredOperandSharding(const ShardingRule &rule,
                                                  const FactorAxes &factors,
                                                  unsigned idx,
                                                  ArrayRef<int64_t> grid) {
  return shardingOf(rule, rule.operands[idx], factors, grid);
}

TensorSharding
mlir::dtc::resultSharding(const ShardingRule &rule, const FactorAxes &factors,
                          unsigned idx, ArrayRef<int64_t> grid,
                          SmallVectorImpl<int64_t> *meanFactors) {
  TensorSharding s = shardingOf(rule, rule.results[idx], factors, grid);
  for (unsigned f = 0; f < rule.getNumFactors(); ++f) {
    FactorKind kind = rule.factorKinds[f];
    if (factors[f].empty() || rule.resultHasFactor(idx, f) ||
        (kind != FactorKind::Sum && kind != FactorKind::Mean &&
         kind != FactorKind::Max))
      continue;
    s.partial.append(factors[f].begin(), factors[f].end());
    if (kind == FactorKind::Max)
      s.partialKind = PartialKind::Max;
    if (kind == FactorKind::Mean && meanFactors)
      meanFactors->push_back(f);
  }
  llvm::sort(s.partial);
  return s;
}

std::string mlir::dtc::checkFactorAxes(Operation *op, const ShardingRule &rule,
                                       const FactorAxes &factors,
                                       ArrayRef<int64_t> grid) {
  std::string message;
  llvm::raw_string_ostream os(message);
  if (factors.size() != rule.getNumFactors()) {
    os << "dtc.factor_axes lists " << factors.size()
       << " factors but the op's sharding rule has " << rule.getNumFactors();
    return message;
  }
  SmallVector<int64_t> lowered;
  if (auto lowering = dyn_cast<LocalLoweringOpInterface>(op))
    lowered = lowering.getLoweredFactors();
  llvm::SmallDenseMap<int64_t, int64_t, 8> usedBy;
  for (auto [factor, axes] : llvm::enumerate(factors)) {
    if (axes.empty())
      continue;
    for (int64_t axis : axes) {
      if (axis < 0 || axis >= (int64_t)grid.size()) {
        os << "dtc.factor_axes: grid axis " << axis << " does not exist on a "
           << grid.size() << "-axis grid";
        return message;
      }
      auto [it, fresh] = usedBy.try_emplace(axis, int64_t(factor));
      if (!fresh &&
          !(rule.mayShareAxes(it->second, int64_t(factor)) &&
            (rule.sharedAxesMayDiffer || factors[it->second] == axes))) {
        os << "dtc.factor_axes: grid axis " << axis
           << " shards two factors (or one twice)";
        return message;
      }
    }
    FactorKind kind = rule.factorKinds[factor];
    int64_t size = rule.factorSizes[factor], pieces = shardCount(grid, axes);
    int64_t piece = factorPiece(rule, factors, factor, grid);
    if (factors.piece(factor) &&
        (piece < pieceSize(size, pieces) || piece > size || pieces <= 1)) {
      os << "dtc.factor_pieces: factor " << factor << " of size " << size
         << " cannot be split into " << pieces << " pieces of " << piece;
      return message;
    }
    if (kind == FactorKind::Blocked) {
      os << "dtc.factor_axes: factor " << factor
         << " cannot be sharded by this op (its rule blocks it)";
      return message;
    }
    if (kind == FactorKind::Resolved &&
        !llvm::is_contained(lowered, (int64_t)factor)) {
      os << "dtc.factor_axes: factor " << factor
         << " is resolved by a local lowering this op does not have";
      return message;
    }
    if (piece * pieces == size)
      continue;
    // Where the factor lives, for messages: "dimension 0 (size 257) of
    // operand 1 of 'dtc.matmul'".
    auto where = [&]() {
      std::string text;
      llvm::raw_string_ostream w(text);
      for (auto [idx, tensor] : llvm::enumerate(rule.operands))
        for (auto [dim, dimFactors] : llvm::enumerate(tensor))
          if (llvm::is_contained(dimFactors, (int64_t)factor)) {
            w << "dimension " << dim << " (size " << size << ") of operand "
              << idx << " of '" << op->getName() << "'";
            return text;
          }
      for (auto [idx, tensor] : llvm::enumerate(rule.results))
        for (auto [dim, dimFactors] : llvm::enumerate(tensor))
          if (llvm::is_contained(dimFactors, (int64_t)factor)) {
            w << "dimension " << dim << " (size " << size << ") of result "
              << idx << " of '" << op->getName() << "'";
            return text;
          }
      return text;
    };
    // A padded factor must be the major factor of its dimensions, and the
    // only one split there (padding sits at the end of the dimension).
    bool major = true;
    for (ArrayRef<TensorFactors> tensors :
         {ArrayRef<TensorFactors>(rule.operands),
          ArrayRef<TensorFactors>(rule.results)})
      for (const TensorFactors &tensor : tensors)
        for (const DimFactors &dim : tensor)
          if (llvm::is_contained(dim, (int64_t)factor))
            major &=
                dim.front() == (int64_t)factor &&
                llvm::all_of(llvm::ArrayRef(dim).drop_front(),
                             [&](int64_t f) { return factors[f].empty(); });
    if (!major) {
      os << "cannot split " << where() << " into " << pieces
         << " pieces: it does not divide, and it is not the major factor of a "
         << "merged dimension (padding must sit at the end of the dimension)";
      return message;
    }
    bool reduced = kind == FactorKind::Sum || kind == FactorKind::Mean;
    if (reduced && !llvm::is_contained(lowered, (int64_t)factor))
      for (unsigned idx = 0; idx < rule.operands.size(); ++idx)
        if (rule.operandHasFactor(idx, factor) && !rule.isLinearIn(idx)) {
          os << "cannot split " << where() << " into " << pieces
             << " pieces: it does not divide, and the op reduces over it "
                "non-linearly "
             << "(padding would change its result)";
          return message;
        }
  }
  // Merged dimensions split contiguously: every factor before the last
  // sharded one is split completely.
  auto checkDims = [&](ArrayRef<TensorFactors> tensors, StringRef what) {
    for (auto [idx, tensor] : llvm::enumerate(tensors))
      for (auto [dim, dimFactors] : llvm::enumerate(tensor)) {
        int64_t last = -1;
        for (auto [i, factor] : llvm::enumerate(dimFactors))
          if (!factors[factor].empty())
            last = i;
        for (int64_t i = 0; i < last; ++i) {
          int64_t factor = dimFactors[i];
          if (shardCount(grid, factors[factor]) != rule.factorSizes[factor]) {
            os << "dtc.factor_axes: factor " << dimFactors[last]
               << " is sharded "
               << "inside dimension " << dim << " of " << what << " " << idx
               << " while its major factor " << factor << " (size "
               << rule.factorSizes[factor] << ") is not split completely";
            return false;
          }
        }
      }
    return true;
  };
  if (!checkDims(rule.operands, "operand") ||
      !checkDims(rule.results, "result"))
    return message;
  for (unsigned r = 0; r < rule.results.size(); ++r) {
    bool sum = false, max = false;
    for (auto [factor, axes] : llvm::enumerate(factors)) {
      if (axes.empty() || rule.resultHasFactor(r, factor))
        continue;
      FactorKind kind = rule.factorKinds[factor];
      sum |= kind == FactorKind::Sum || kind == FactorKind::Mean;
      max |= kind == FactorKind::Max;
    }
    if (sum && max) {
      os << "dtc.factor_axes: result " << r
         << " would be pending both a sum and a max";
      return message;
    }
  }
  return "";
}

void mlir::dtc::setFactorAxesAttr(Operation *op, const FactorAxes &factors) {
  MLIRContext *ctx = op->getContext();
  SmallVector<Attribute> attrs;
  for (const GridAxes &axes : factors)
    attrs.push_back(DenseI64ArrayAttr::get(ctx, axes));
  op->setAttr(DtcDialect::kFactorAxesAttr, ArrayAttr::get(ctx, attrs));
  if (llvm::any_of(factors.pieces, [](int64_t p) { return p != 0; })) {
    SmallVector<int64_t> pieces(factors.size(), 0);
    for (unsigned f = 0; f < factors.size(); ++f)
      pieces[f] = factors.piece(f);
    op->setAttr(DtcDialect::kFactorPiecesAttr,
                DenseI64ArrayAttr::get(ctx, pieces));
  } else {
    op->removeAttr(DtcDialect::kFactorPiecesAttr);
  }
}

FailureOr<FactorAxes> mlir::dtc::factorAxesFromAttr(Operation *op,
                                                    const ShardingRule &rule,
                                                    ArrayRef<int64_t> grid) {
  auto attr = op->getAttrOfType<ArrayAttr>(DtcDialect::kFactorAxesAttr);
  FactorAxes factors(rule.getNumFactors());
  if (!attr)
    return factors; // unannotated: nothing sharded
  if (attr.size() != rule.getNumFactors())
    return op->emitError() << "dtc.factor_axes lists " << attr.size()
                           << " factors but the op's sharding rule has "
                           << rule.getNumFactors();
  for (auto [idx, entry] : llvm::enumerate(attr)) {
    auto axes = dyn_cast<DenseI64ArrayAttr>(entry);
    if (!axes)
      return op->emitError() << "dtc.factor_axes entries must be array<i64>";
    factors[idx].assign(axes.asArrayRef().begin(), axes.asArrayRef().end());
  }
  if (auto pieces =
          op->getAttrOfType<DenseI64ArrayAttr>(DtcDialect::kFactorPiecesAttr)) {
    if (pieces.size() != (int64_t)rule.getNumFactors())
      return op->emitError() << "dtc.factor_pieces lists " << pieces.size()
                             << " factors but the op's sharding rule has "
                             << rule.getNumFactors();
    for (auto [idx, piece] : llvm::enumerate(pieces.asArrayRef()))
      factors.setPiece(idx, piece);
  }
  std::string problem = checkFactorAxes(op, rule, factors, grid);
  if (!problem.empty())
    return op->emitError() << problem;
  return factors;
}

FailureOr<SmallVector<int64_t>> mlir::dtc::getGridShape(ModuleOp module,
                                                        StringRef name) {
  auto grid = module.lookupSymbol<shard::GridOp>(name);
  if (!grid)
    return module.emitError() << "no shard.grid @" << name << " in the module";
  return SmallVector<int64_t>(grid.getShape());
}
