//===- Propagation.cpp - sharding propagation with priorities ------------===//
#include "dtc/Sharding/Propagation.h"
#include "dtc/Dialect/Utils.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include <deque>

using namespace mlir;
using namespace mlir::dtc;

ShardingPropagation::ShardingPropagation(
    func::FuncOp func, ArrayRef<int64_t> grid,
    std::function<bool(Value, int64_t)> mayUse)
    : func(func), grid(grid.begin(), grid.end()), mayUse(std::move(mayUse)) {}

ShardingPropagation::ValueState &ShardingPropagation::state(Value v) {
  ValueState &s = states[v];
  int64_t rank = tensorTypeOf(v).getRank();
  if ((int64_t)s.size() != rank)
    s.resize(rank);
  return s;
}

void ShardingPropagation::pin(Value value, const TensorSharding &sharding,
                              ShardingPriority priority) {
  ValueState &s = state(value);
  uint8_t level = static_cast<uint8_t>(priority);
  if (llvm::any_of(
          s, [&](const DimState &d) { return d.level >= level && d.closed; }))
    return;
  for (auto [dim, axes] : llvm::enumerate(sharding.dims))
    s[dim] = DimState{axes, sharding.piece(dim), level, level, true};
}

void ShardingPropagation::pinStorage(Value value,
                                     const TensorSharding &sharding) {
  ValueState &s = state(value);
  uint8_t level = static_cast<uint8_t>(ShardingPriority::Strategy);
  for (auto [dim, axes] : llvm::enumerate(sharding.dims))
    s[dim] = DimState{axes, sharding.piece(dim), level, level, true, true};
}

void ShardingPropagation::restrictTo(ArrayRef<Operation *> ops) {
  restricted = true;
  only.clear();
  only.insert(ops.begin(), ops.end());
}

void ShardingPropagation::reserve(Operation *op, const GridAxes &axes,
                                  int64_t factor) {
  reserved[op] = Reservation{axes, factor};
}

void ShardingPropagation::close(Value value) {
  for (DimState &d : state(value))
    d.closed = true;
}

TensorSharding ShardingPropagation::shardingOf(Value value) const {
  int64_t rank = tensorTypeOf(value).getRank();
  TensorSharding s = TensorSharding::replicated(rank);
  auto it = states.find(value);
  if (it != states.end())
    for (auto [dim, d] : llvm::enumerate(it->second)) {
      s.dims[dim] = d.axes;
      s.setPiece(dim, d.piece);
    }
  normalizePieces(s, tensorTypeOf(value).getShape(), grid);
  return s;
}

ShardingPriority ShardingPropagation::priorityOf(Value value) const {
  auto it = states.find(value);
  uint8_t best = 0;
  if (it != states.end())
    for (const DimState &d : it->second)
      if (!d.axes.empty())
        best = std::max(best, d.origin);
  return static_cast<ShardingPriority>(best);
}

const FactorAxes &ShardingPropagation::factorsOf(Operation *op) const {
  static const FactorAxes none;
  auto it = opFactors.find(op);
  return it == opFactors.end() ? none : it->second;
}

FactorAxes ShardingPropagation::assign(Operation *op, const ShardingRule &rule,
                                       uint8_t minOrigin,
                                       SmallVectorImpl<uint8_t> &origins) {
  FactorAxes factors(rule.getNumFactors());
  origins.assign(rule.getNumFactors(), 0);
  struct Candidate {
    uint8_t level, origin;
    const DimFactors *dimFactors;
    const GridAxes *axes;
    int64_t piece;
  };
  SmallVector<Candidate> candidates;
  auto collect = [&](ValueRange values, ArrayRef<TensorFactors> tensors) {
    for (auto [value, tensor] : llvm::zip(values, tensors)) {
      auto it = states.find(value);
      if (it == states.end())
        continue;
      for (auto [dim, d] : llvm::enumerate(it->second))
        if (!d.axes.empty() && !d.storageOnly && d.origin >= minOrigin &&
            dim < tensor.size())
          candidates.push_back(
              {d.level, d.origin, &tensor[dim], &d.axes, d.piece});
    }
  };
  collect(op->getOperands(), rule.operands);
  collect(op->getResults(), rule.results);
  llvm::stable_sort(candidates, [](const Candidate &a, const Candidate &b) {
    return std::tie(a.level, a.origin) > std::tie(b.level, b.origin);
  });
  // Grid axis -> the factor it shards (a declared pair may share it; -1:
  // reserved for no factor).
  llvm::SmallDenseMap<int64_t, int64_t, 8> used;
  auto reservation = reserved.find(op);
  const Reservation *fixed =
      reservation == reserved.end() ? nullptr : &reservation->second;
  if (fixed) {
    for (int64_t a : fixed->axes)
      used[a] = fixed->factor;
    // Seeds propagation from the strategy round on, not before user pins'.
    if (fixed->factor >= 0 &&
        minOrigin <= uint8_t(ShardingPriority::Strategy)) {
      factors[fixed->factor] = fixed->axes;
      origins[fixed->factor] = uint8_t(ShardingPriority::Strategy);
    }
  }
  for (const Candidate &c : candidates) {
    for (const FactorSplit &split :
         dimensionToFactors(rule, *c.dimFactors, *c.axes, c.piece, grid)) {
      int64_t factor = split.factor;
      GridAxes axes = split.axes;
      // The reserved factor takes other axes before its reserved ones once.
      const bool extendsReserved =
          fixed && factor == fixed->factor && factors[factor] == fixed->axes;
      if (extendsReserved) {
        llvm::erase_if(axes, [&](int64_t a) {
          return llvm::is_contained(fixed->axes, a);
        });
        if (axes.empty() || split.piece != 0)
          continue;
        factors[factor].clear();
      }
      if (!factors[factor].empty() || llvm::any_of(axes, [&](int64_t a) {
            auto it = used.find(a);
            return it != used.end() && it->second != factor &&
                   !rule.mayShareAxes(it->second, factor);
          })) {
        if (extendsReserved)
          factors[factor] = fixed->axes;
        continue;
      }
      if (extendsReserved)
        axes.append(fixed->axes.begin(), fixed->axes.end());
      factors[factor] = axes;
      factors.setPiece(factor, split.piece);
      if (!checkFactorAxes(op, rule, factors, grid).empty()) {
        factors[factor].clear();
        if (extendsReserved)
          factors[factor] = fixed->axes;
        factors.setPiece(factor, 0);
        continue;
      }
      origins[factor] =
          extendsReserved
              ? std::max(c.origin, uint8_t(ShardingPriority::Strategy))
              : c.origin;
      for (int64_t a : axes)
        used.try_emplace(a, factor);
    }
  }
  return factors;
}

SmallVector<Value> ShardingPropagation::project(Operation *op,
                                                const ShardingRule &rule,
                                                const FactorAxes &factors,
                                                ArrayRef<uint8_t> origins) {
  SmallVector<Value> changed;
  auto update = [&](Value value, const TensorFactors &tensor,
                    const TensorSharding &want) {
    ValueState &s = state(value);
    bool any = false;
    for (auto [dim, axes] : llvm::enumerate(want.dims)) {
      DimState &d = s[dim];
      if (axes.empty() || d.closed || d.level != 0)
        continue;
      bool free = llvm::all_of(axes, [&](int64_t a) {
        if (mayUse && !mayUse(value, a))
          return false;
        return llvm::none_of(s, [&](const DimState &other) {
          return llvm::is_contained(other.axes, a);
        });
      });
      if (!free)
        continue;
      uint8_t origin = 0;
      for (int64_t factor : tensor[dim])
        if (!factors[factor].empty())
          origin = std::max(origin, origins[factor]);
      d.axes = axes;
      d.piece = want.piece(dim);
      d.level = static_cast<uint8_t>(ShardingPriority::Inferred);
      d.origin = origin;
      any = true;
    }
    if (any)
      changed.push_back(value);
  };
  for (auto [idx, operand] : llvm::enumerate(op->getOperands()))
    update(operand, rule.operands[idx],
           requiredOperandSharding(rule, factors, idx, grid));
  for (auto [idx, result] : llvm::enumerate(op->getResults()))
    update(result, rule.results[idx], resultSharding(rule, factors, idx, grid));
  return changed;
}

LogicalResult ShardingPropagation::run() {
  SmallVector<Operation *> ops;
  WalkResult walk = func.walk([&](Operation *op) {
    auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
    if (!ruleOp || (restricted && !only.contains(op)))
      return WalkResult::advance();
    ShardingRule rule = ruleOp.getShardingRule();
    std::string problem = rule.verify(op);
    if (!problem.empty()) {
      op->emitError() << "inconsistent sharding rule: " << problem;
      return WalkResult::interrupt();
    }
    rules[op] = std::move(rule);
    ops.push_back(op);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();

  for (uint8_t level :
       {uint8_t(ShardingPriority::User), uint8_t(ShardingPriority::Strategy)}) {
    std::deque<Operation *> worklist(ops.begin(), ops.end());
    llvm::DenseSet<Operation *> queued(ops.begin(), ops.end());
    auto enqueue = [&](Operation *op) {
      if (rules.count(op) && queued.insert(op).second)
        worklist.push_back(op);
    };
    while (!worklist.empty()) {
      Operation *op = worklist.front();
      worklist.pop_front();
      queued.erase(op);
      const ShardingRule &rule = rules[op];
      SmallVector<uint8_t> origins;
      FactorAxes factors = assign(op, rule, level, origins);
      for (Value changed : project(op, rule, factors, origins)) {
        if (Operation *def = changed.getDefiningOp())
          enqueue(def);
        for (Operation *user : changed.getUsers())
          enqueue(user);
      }
    }
  }
  for (Operation *op : ops) {
    SmallVector<uint8_t> origins;
    opFactors[op] = assign(op, rules[op], 0, origins);
  }
  return success();
}

void ShardingPropagation::annotate(StringRef gridName) {
  MLIRContext *ctx = func.getContext();
  // All at once: setting them one by one uniques a new attribute array per
  // argument (quadratic time and memory in deep models).
  SmallVector<DictionaryAttr> argAttrs;
  for (BlockArgument arg : func.getArguments()) {
    NamedAttrList attrs(func.getArgAttrDict(arg.getArgNumber()));
    attrs.set(DtcDialect::kShardingAttr,
              toShardingAttr(shardingOf(arg), ctx, gridName));
    argAttrs.push_back(attrs.getDictionary(ctx));
  }
  func.setAllArgAttrs(argAttrs);
  for (auto &[op, factors] : opFactors)
    setFactorAxesAttr(op, factors);
}
