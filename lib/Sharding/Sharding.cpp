//===- Sharding.cpp - value shardings and factor assignment --------------===//
#include "dtc/Sharding/Sharding.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace mlir::dtc;

ShardingAttr TensorSharding::toAttr(MLIRContext *ctx, StringRef grid) const {
  SmallVector<DenseI64ArrayAttr> dimAttrs;
  for (const GridAxes &axes : dims)
    dimAttrs.push_back(DenseI64ArrayAttr::get(ctx, axes));
  return ShardingAttr::get(ctx, FlatSymbolRefAttr::get(ctx, grid), dimAttrs,
                           partial);
}

TensorSharding TensorSharding::fromAttr(ShardingAttr attr) {
  TensorSharding s;
  for (DenseI64ArrayAttr axes : attr.getDims())
    s.dims.emplace_back(axes.asArrayRef());
  s.partial.assign(attr.getPartial().begin(), attr.getPartial().end());
  return s;
}

int64_t mlir::dtc::shardCount(ArrayRef<int64_t> grid, ArrayRef<int64_t> axes) {
  int64_t n = 1;
  for (int64_t axis : axes)
    n *= grid[axis];
  return n;
}

RankedTensorType mlir::dtc::localType(RankedTensorType global,
                                      const TensorSharding &sharding,
                                      ArrayRef<int64_t> grid) {
  SmallVector<int64_t> shape(global.getShape());
  for (auto [dim, axes] : llvm::enumerate(sharding.dims))
    shape[dim] /= shardCount(grid, axes);
  return RankedTensorType::get(shape, global.getElementType());
}

FactorAxes mlir::dtc::assignFactorsFromOperands(const ShardingRule &rule,
                                                ArrayRef<TensorSharding> operands,
                                                ArrayRef<int64_t> grid) {
  FactorAxes factors(rule.getNumFactors());
  llvm::SmallSet<int64_t, 8> used;
  for (auto [idx, sharding] : llvm::enumerate(operands)) {
    for (auto [dim, axes] : llvm::enumerate(sharding.dims)) {
      if (axes.empty() || dim >= rule.operands[idx].size())
        continue;
      const DimFactors &dimFactors = rule.operands[idx][dim];
      if (dimFactors.empty())
        continue;
      int64_t factor = dimFactors.front();
      if (rule.factorKinds[factor] == FactorKind::Blocked || !factors[factor].empty())
        continue;
      if (llvm::any_of(axes, [&](int64_t a) { return used.contains(a); }))
        continue;
      if (rule.factorSizes[factor] % shardCount(grid, axes) != 0)
        continue;
      factors[factor] = axes;
      for (int64_t a : axes)
        used.insert(a);
    }
  }
  // Only the major factor of a dimension can be sharded contiguously.
  auto dropMinor = [&](ArrayRef<TensorFactors> tensors) {
    for (const TensorFactors &tensor : tensors)
      for (const DimFactors &dim : tensor)
        for (size_t i = 1; i < dim.size(); ++i)
          factors[dim[i]].clear();
  };
  dropMinor(rule.operands);
  dropMinor(rule.results);
  return factors;
}

static TensorSharding shardingOf(const TensorFactors &tensor,
                                 const FactorAxes &factors) {
  TensorSharding s;
  for (const DimFactors &dim : tensor) {
    GridAxes axes;
    if (!dim.empty())
      axes = factors[dim.front()];
    s.dims.push_back(axes);
  }
  return s;
}

TensorSharding mlir::dtc::requiredOperandSharding(const ShardingRule &rule,
                                                  const FactorAxes &factors,
                                                  unsigned idx) {
  return shardingOf(rule.operands[idx], factors);
}

TensorSharding mlir::dtc::resultSharding(const ShardingRule &rule,
                                         const FactorAxes &factors, unsigned idx,
                                         GridAxes *meanAxes) {
  TensorSharding s = shardingOf(rule.results[idx], factors);
  for (unsigned f = 0; f < rule.getNumFactors(); ++f) {
    FactorKind kind = rule.factorKinds[f];
    if (factors[f].empty() || rule.resultHasFactor(idx, f) ||
        (kind != FactorKind::Sum && kind != FactorKind::Mean))
      continue;
    s.partial.append(factors[f].begin(), factors[f].end());
    if (kind == FactorKind::Mean && meanAxes)
      meanAxes->append(factors[f].begin(), factors[f].end());
  }
  llvm::sort(s.partial);
  return s;
}

ArrayAttr mlir::dtc::factorAxesToAttr(MLIRContext *ctx, const FactorAxes &factors) {
  SmallVector<Attribute> attrs;
  for (const GridAxes &axes : factors)
    attrs.push_back(DenseI64ArrayAttr::get(ctx, axes));
  return ArrayAttr::get(ctx, attrs);
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
  llvm::SmallSet<int64_t, 8> used;
  for (auto [factor, axes] : llvm::enumerate(factors)) {
    if (axes.empty())
      continue;
    for (int64_t axis : axes) {
      if (axis < 0 || axis >= (int64_t)grid.size())
        return op->emitError() << "dtc.factor_axes: grid axis " << axis
                               << " does not exist on a " << grid.size() << "-axis grid";
      if (!used.insert(axis).second)
        return op->emitError() << "dtc.factor_axes: grid axis " << axis
                               << " shards two factors (or one twice)";
    }
    if (rule.factorKinds[factor] == FactorKind::Blocked)
      return op->emitError() << "dtc.factor_axes: factor " << factor
                             << " cannot be sharded by this op (its rule blocks it)";
    if (rule.factorSizes[factor] % shardCount(grid, axes) != 0)
      return op->emitError() << "dtc.factor_axes: factor " << factor << " of size "
                             << rule.factorSizes[factor] << " does not split into "
                             << shardCount(grid, axes) << " equal pieces";
    auto minor = [&](ArrayRef<TensorFactors> tensors) {
      for (const TensorFactors &tensor : tensors)
        for (const DimFactors &dim : tensor)
          // A broadcast size-1 dimension has no factor at all.
          if (dim.size() > 1 && llvm::is_contained(llvm::ArrayRef(dim).drop_front(), (int64_t)factor))
            return true;
      return false;
    };
    if (minor(rule.operands) || minor(rule.results))
      return op->emitError() << "dtc.factor_axes: factor " << factor
                             << " is not the major factor of a merged dimension";
  }
  return factors;
}

FailureOr<SmallVector<int64_t>> mlir::dtc::getGridShape(ModuleOp module,
                                                        StringRef name) {
  auto grid = module.lookupSymbol<shard::GridOp>(name);
  if (!grid)
    return module.emitError() << "no shard.grid @" << name << " in the module";
  return SmallVector<int64_t>(grid.getShape());
}
