//===- ShardingRule.cpp - factor-based sharding rules --------------------===//
#include "dtc/Sharding/ShardingRule.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::dtc;

StringRef mlir::dtc::stringifyFactorKind(FactorKind kind) {
  switch (kind) {
  case FactorKind::Parallel:
    return "parallel";
  case FactorKind::Sum:
    return "sum";
  case FactorKind::Mean:
    return "mean";
  case FactorKind::Max:
    return "max";
  case FactorKind::Resolved:
    return "resolved";
  case FactorKind::Blocked:
    return "blocked";
  }
  llvm_unreachable("unknown factor kind");
}

bool ShardingRule::resultHasFactor(unsigned resultIdx, int64_t factor) const {
  for (const DimFactors &dim : results[resultIdx])
    if (llvm::is_contained(dim, factor))
      return true;
  return false;
}

bool ShardingRule::operandHasFactor(unsigned operandIdx, int64_t factor) const {
  for (const DimFactors &dim : operands[operandIdx])
    if (llvm::is_contained(dim, factor))
      return true;
  return false;
}

bool ShardingRule::isLinearIn(unsigned operandIdx) const {
  return llvm::any_of(linearGroups, [&](const auto &group) {
    return llvm::is_contained(group, operandIdx);
  });
}

static ArrayRef<int64_t> shapeOf(Type type) {
  if (auto tensor = dyn_cast<RankedTensorType>(type))
    return tensor.getShape();
  return {};
}

std::string ShardingRule::verify(Operation *op) const {
  std::string message;
  llvm::raw_string_ostream os(message);
  auto checkTensors = [&](ArrayRef<TensorFactors> tensors, TypeRange types,
                          StringRef what) {
    if (tensors.size() != types.size()) {
      os << "rule has " << tensors.size() << " " << what << "s, op has "
         << types.size();
      return false;
    }
    for (auto [idx, pair] : llvm::enumerate(llvm::zip(tensors, types))) {
      auto [factors, type] = pair;
      ArrayRef<int64_t> shape = shapeOf(type);
      if (factors.size() != shape.size()) {
        os << what << " " << idx << " has rank " << shape.size()
           << " but the rule lists " << factors.size() << " dims";
        return false;
      }
      for (auto [dim, dimFactors] : llvm::enumerate(factors)) {
        int64_t product = 1;
        for (int64_t factor : dimFactors) {
          if (factor < 0 || factor >= (int64_t)factorSizes.size()) {
            os << what << " " << idx << " names unknown factor " << factor;
            return false;
          }
          product *= factorSizes[factor];
        }
        if (product != shape[dim]) {
          os << what << " " << idx << " dim " << dim << " has size "
             << shape[dim] << " but its factors multiply to " << product;
          return false;
        }
      }
    }
    return true;
  };
  if (!checkTensors(operands, op->getOperandTypes(), "operand") ||
      !checkTensors(results, op->getResultTypes(), "result"))
    return message;
  for (auto [factor, kind] : llvm::enumerate(factorKinds)) {
    if (kind != FactorKind::Parallel)
      continue;
    for (unsigned r = 0; r < results.size(); ++r)
      if (!resultHasFactor(r, factor)) {
        os << "parallel factor " << factor << " is missing from result " << r;
        return message;
      }
  }
  return "";
}

std::string ShardingRule::str() const {
  std::string out;
  llvm::raw_string_ostream os(out);
  auto name = [](int64_t factor) -> std::string {
    if (factor < 26)
      return std::string(1, static_cast<char>('a' + factor));
    return "f" + std::to_string(factor);
  };
  auto printTensors = [&](ArrayRef<TensorFactors> tensors) {
    os << "(";
    llvm::interleaveComma(tensors, os, [&](const TensorFactors &tensor) {
      os << "[";
      llvm::interleaveComma(tensor, os, [&](const DimFactors &dim) {
        if (dim.empty())
          os << "1";
        llvm::interleave(
            dim, os, [&](int64_t factor) { os << name(factor); }, "*");
      });
      os << "]";
    });
    os << ")";
  };
  printTensors(operands);
  os << " -> ";
  printTensors(results);
  os << " {";
  llvm::interleaveComma(
      llvm::seq<int64_t>(0, factorSizes.size()), os, [&](int64_t factor) {
        os << name(factor) << "=" << factorSizes[factor];
        if (factorKinds[factor] != FactorKind::Parallel)
          os << " " << stringifyFactorKind(factorKinds[factor]);
      });
  os << "}";
  if (!linearGroups.empty()) {
    os << " linear";
    for (const auto &group : linearGroups) {
      os << " {";
      llvm::interleaveComma(group, os);
      os << "}";
    }
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Builders
//===----------------------------------------------------------------------===//

/// Factors for `shape` aligned on the right against `outFactors` (numpy
/// broadcasting): a dimension of size 1 facing a larger one maps to none.
static TensorFactors alignRight(ArrayRef<int64_t> shape,
                                ArrayRef<int64_t> outShape,
                                const TensorFactors &outFactors) {
  TensorFactors factors(shape.size());
  size_t offset = outShape.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == outShape[offset + d])
      factors[d] = outFactors[offset + d];
    // else: size 1 broadcast, no factor
  }
  return factors;
}

ShardingRule mlir::dtc::buildElementwiseRule(Operation *op,
                                             LinearGroups linear) {
  ShardingRule rule;
  ArrayRef<int64_t> shape = shapeOf(op->getResult(0).getType());
  TensorFactors factors;
  for (int64_t size : shape)
    factors.push_back(
        size == 1 ? DimFactors{}
                  : DimFactors{rule.addFactor(size, FactorKind::Parallel)});
  for (Type type : op->getOperandTypes())
    rule.operands.push_back(alignRight(shapeOf(type), shape, factors));
  for (unsigned i = 0; i < op->getNumResults(); ++i)
    rule.results.push_back(factors);
  rule.linearGroups = std::move(linear);
  return rule;
}

ShardingRule mlir::dtc::buildReduceRule(Operation *op, ArrayRef<int64_t> axes,
                                        bool keepDims, FactorKind reduction) {
  ShardingRule rule;
  ArrayRef<int64_t> shape = shapeOf(op->getOperand(0).getType());
  TensorFactors in, out;
  for (auto [dim, size] : llvm::enumerate(shape)) {
    bool reduced = llvm::is_contained(axes, (int64_t)dim);
    DimFactors factors;
    if (size != 1)
      factors.push_back(
          rule.addFactor(size, reduced ? reduction : FactorKind::Parallel));
    in.push_back(factors);
    if (!reduced)
      out.push_back(factors);
    else if (keepDims)
      out.push_back({});
  }
  rule.operands.push_back(in);
  rule.results.push_back(out);
  // A reduction is linear; mean's scaling is linear too.
  rule.linearGroups = {{0}};
  return rule;
}

ShardingRule mlir::dtc::buildReshapeRule(RankedTensorType from,
                                         RankedTensorType to) {
  ShardingRule rule;
  ArrayRef<int64_t> a = from.getShape(), b = to.getShape();
  TensorFactors in(a.size()), out(b.size());
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    // Size-1 dimensions carry no factor.
    if (i < a.size() && a[i] == 1) {
      ++i;
      continue;
    }
    if (j < b.size() && b[j] == 1) {
      ++j;
      continue;
    }
    if (i >= a.size() || j >= b.size())
      break; // only possible with zero-size dims, which verifiers reject
    // Grow the smallest group of dims [i, i2) and [j, j2) with equal products.
    size_t i2 = i + 1, j2 = j + 1;
    int64_t pa = a[i], pb = b[j];
    while (pa != pb) {
      if (pa < pb && i2 < a.size())
        pa *= a[i2++];
      else if (pb < pa && j2 < b.size())
        pb *= b[j2++];
      else
        break; // element counts differ: the verifier rejects such a reshape
    }
    if (pa != pb)
      break;
    if (i2 - i == 1) {
      // One input dim splits into output dims [j, j2): one factor each.
      for (size_t k = j; k < j2; ++k) {
        if (b[k] == 1)
          continue;
        int64_t factor = rule.addFactor(b[k], FactorKind::Parallel);
        in[i].push_back(factor);
        out[k].push_back(factor);
      }
    } else if (j2 - j == 1) {
      // Input dims [i, i2) merge into one output dim.
      for (size_t k = i; k < i2; ++k) {
        if (a[k] == 1)
          continue;
        int64_t factor = rule.addFactor(a[k], FactorKind::Parallel);
        in[k].push_back(factor);
        out[j].push_back(factor);
      }
    } else {
      // Many-to-many regrouping (e.g. 6x4 -> 4x6): not shardable here. The
      // input side's factors are reduced away (blocked) and the output side's
      // are fresh; neither may be sharded, so the mapping is never used.
      for (size_t k = i; k < i2; ++k)
        if (a[k] != 1)
          in[k].push_back(rule.addFactor(a[k], FactorKind::Blocked));
      for (size_t k = j; k < j2; ++k)
        if (b[k] != 1)
          out[k].push_back(rule.addFactor(b[k], FactorKind::Blocked));
    }
    i = i2;
    j = j2;
  }
  rule.operands.push_back(in);
  rule.results.push_back(out);
  rule.linearGroups = {{0}};
  return rule;
}
