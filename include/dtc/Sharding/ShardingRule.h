//===- ShardingRule.h - factor-based sharding rules of ops ------*- C++ -*-===//
//
// An op's sharding rule names "factors": the independent index spaces of its
// computation (for matmul: batch dims, M, N and the contracted K). Every
// dimension of every operand and result maps to an ordered list of factors
// (major first; a reshape merges several factors into one dimension; a
// broadcast dimension of size 1 maps to none). A plan shards factors over
// grid axes; the sharding of every operand and result follows from the
// factors it contains. This is the vocabulary of Alpa's intra-op strategies
// and of Shardy's OpShardingRule, declared by each op through
// ShardingRuleOpInterface.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_SHARDING_SHARDINGRULE_H
#define DTC_SHARDING_SHARDINGRULE_H

#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"
#include <string>

namespace mlir::dtc {

/// What sharding a factor means for a result that does not contain it.
enum class FactorKind : uint8_t {
  /// Appears in every result; sharding it shards those results.
  Parallel,
  /// Summed into results that lack it: they become pending partial sums.
  Sum,
  /// Averaged into results that lack it: the shard's local mean, scaled by
  /// (local count / global count), is a pending partial sum.
  Mean,
  /// Max-reduced into results that lack it: they become pending partial
  /// maxima (resolved by an all-reduce max).
  Max,
  /// Reduced into results that lack it by the op's own local lowering
  /// (LocalLoweringOpInterface), which communicates itself: those results
  /// are complete (e.g. the vocabulary of a vocab-parallel cross entropy).
  Resolved,
  /// Cannot be sharded by this op's local computation (e.g. the softmax axis
  /// or a normalized dimension); operands are gathered along it.
  Blocked,
};

llvm::StringRef stringifyFactorKind(FactorKind kind);

/// Factors of one tensor dimension, major first.
using DimFactors = llvm::SmallVector<int64_t, 2>;
/// Factors of every dimension of one tensor.
using TensorFactors = llvm::SmallVector<DimFactors, 4>;
/// Sets of operands an op is jointly linear in (see ShardingRule).
using LinearGroups = llvm::SmallVector<llvm::SmallVector<unsigned, 2>, 2>;

struct ShardingRule {
  llvm::SmallVector<int64_t> factorSizes;
  llvm::SmallVector<FactorKind> factorKinds;
  llvm::SmallVector<TensorFactors> operands;
  llvm::SmallVector<TensorFactors> results;
  /// If the operands of exactly one group carry the same pending partial sum
  /// and no other operand does, the results carry it too (the op is linear in
  /// that group jointly: add is linear in {lhs, rhs}, mul in {lhs} and in
  /// {rhs} separately). Otherwise partial operands are all-reduced first.
  LinearGroups linearGroups;
  /// Pairs of factors that may be sharded over the same grid axes (ring
  /// attention's queries and keys: its local lowering runs the blocks off
  /// the diagonal by passing one side around). Any other axis shards one
  /// factor only.
  llvm::SmallVector<std::pair<int64_t, int64_t>, 1> sharedAxes;
  /// Whether a shared pair may be split over different axes that overlap
  /// (expert parallelism: the tokens over the data-parallel axes and the
  /// expert-parallel ones, the experts over the latter); otherwise a shared
  /// pair takes the same axes (ring attention's queries and keys).
  bool sharedAxesMayDiffer = false;

  /// Whether factors `a` and `b` may share grid axes.
  bool mayShareAxes(int64_t a, int64_t b) const {
    return llvm::is_contained(sharedAxes, std::make_pair(a, b)) ||
           llvm::is_contained(sharedAxes, std::make_pair(b, a));
  }

  int64_t addFactor(int64_t size, FactorKind kind) {
    factorSizes.push_back(size);
    factorKinds.push_back(kind);
    return static_cast<int64_t>(factorSizes.size()) - 1;
  }
  unsigned getNumFactors() const { return factorSizes.size(); }
  /// True if `factor` appears in some dimension of result `resultIdx`.
  bool resultHasFactor(unsigned resultIdx, int64_t factor) const;
  /// True if `factor` appears in some dimension of operand `operandIdx`.
  bool operandHasFactor(unsigned operandIdx, int64_t factor) const;
  /// True if some linear group contains operand `operandIdx`.
  bool isLinearIn(unsigned operandIdx) const;
  /// Checks internal consistency (sizes multiply to dims, Parallel factors in
  /// every result); returns an explanation on failure.
  std::string verify(Operation *op) const;
  /// e.g. "([i, k], [k, j]) -> ([i, j]) {i=8, j=10, k=32 sum}".
  std::string str() const;
};

//===----------------------------------------------------------------------===//
// Builders shared by the ops' rules.
//===----------------------------------------------------------------------===//

/// Every result has the first result's shape; operands broadcast to it
/// numpy-style (aligned on the right; a size-1 or missing dimension facing a
/// larger one maps to no factor). All factors Parallel.
ShardingRule buildElementwiseRule(Operation *op, LinearGroups linear);
/// reduce_sum / reduce_mean.
ShardingRule buildReduceRule(Operation *op, llvm::ArrayRef<int64_t> axes,
                             bool keepDims, FactorKind reduction);
/// Reshape between two static shapes: dimensions are grouped where their
/// products match; a group of one dimension on one side splits into the
/// other side's factors.
ShardingRule buildReshapeRule(RankedTensorType from, RankedTensorType to);

} // namespace mlir::dtc

#endif // DTC_SHARDING_SHARDINGRULE_H
