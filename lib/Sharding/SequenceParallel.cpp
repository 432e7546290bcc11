//===- SequenceParallel.cpp - Megatron sequence parallelism --------------===//
#include "dtc/Sharding/SequenceParallel.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Sharding/Sharding.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::dtc;

namespace {

/// The one factor of a dimension (none when merged or broadcast).
std::optional<int64_t> soleFactor(const TensorFactors &tensor, int64_t dim) {
  if (dim >= (int64_t)tensor.size() || tensor[dim].size() != 1)
    return std::nullopt;
  return tensor[dim].front();
}

/// The sequence factor of every op that carries one, found by following
/// dimension 1 of the token inputs through the ops' rules, forward and
/// backward (-1: an op meeting two different ones, like attention's query
/// and key sequences).
class SequenceFactors {
public:
  explicit SequenceFactors(func::FuncOp step) : step(step) {}

  void seed(Value input) { mark(input, 1); }

  void run() {
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      int64_t dim = dims.lookup(v);
      for (OpOperand &use : v.getUses())
        if (const ShardingRule *rule = ruleOf(use.getOwner()))
          visit(use.getOwner(), *rule,
                soleFactor(rule->operands[use.getOperandNumber()], dim));
      if (auto result = dyn_cast<OpResult>(v))
        if (const ShardingRule *rule = ruleOf(result.getOwner()))
          visit(result.getOwner(), *rule,
                soleFactor(rule->results[result.getResultNumber()], dim));
    }
  }

  std::optional<int64_t> factorOf(Operation *op) const {
    auto it = factors.find(op);
    if (it == factors.end() || it->second < 0)
      return std::nullopt;
    return it->second;
  }

  const ShardingRule *ruleOf(Operation *op) {
    auto it = rules.find(op);
    if (it != rules.end())
      return &it->second;
    auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
    if (!ruleOp || op->getParentOp() != step)
      return nullptr;
    return &rules.try_emplace(op, ruleOp.getShardingRule()).first->second;
  }

private:
  void mark(Value v, int64_t dim) {
    if (dims.try_emplace(v, dim).second)
      worklist.push_back(v);
  }

  void visit(Operation *op, const ShardingRule &rule,
             std::optional<int64_t> factor) {
    if (!factor)
      return;
    auto [it, first] = factors.try_emplace(op, *factor);
    if (!first) {
      if (it->second != *factor)
        it->second = -1;
      return;
    }
    auto markAll = [&](ValueRange values, ArrayRef<TensorFactors> tensors) {
      for (auto [value, tensor] : llvm::zip(values, tensors))
        for (int64_t dim = 0; dim < (int64_t)tensor.size(); ++dim)
          if (soleFactor(tensor, dim) == factor)
            mark(value, dim);
    };
    markAll(op->getOperands(), rule.operands);
    markAll(op->getResults(), rule.results);
  }

  func::FuncOp step;
  llvm::DenseMap<Value, int64_t> dims;
  SmallVector<Value> worklist;
  llvm::DenseMap<Operation *, int64_t> factors;
  llvm::DenseMap<Operation *, ShardingRule> rules;
};

bool usesAny(ArrayRef<int64_t> axes, const GridAxes &of) {
  return llvm::any_of(axes,
                      [&](int64_t a) { return llvm::is_contained(of, a); });
}

} // namespace

LogicalResult mlir::dtc::planSequenceParallel(func::FuncOp step,
                                              ArrayRef<int64_t> grid,
                                              const GridAxes &tpAxes) {
  const int64_t devices = shardCount(grid, tpAxes);
  SequenceFactors sequence(step);
  bool seeded = false;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    BlockArgument arg = step.getArgument(i);
    RankedTensorType type = tensorTypeOf(arg);
    if (argRole(step, i) != Role::Input || type.getRank() != 2 ||
        !isa<IntegerType>(type.getElementType()))
      continue;
    if (type.getDimSize(1) % devices != 0) {
      auto name = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kNameAttr);
      return emitError(arg.getLoc())
             << "sequence parallelism splits the sequence of input \""
             << (name ? name.getValue() : StringRef("?")) << "\" ("
             << type.getDimSize(1) << " tokens) over the " << devices
             << " tensor-parallel devices; it must divide evenly";
    }
    sequence.seed(arg);
    seeded = true;
  }
  if (!seeded)
    return step.emitError()
           << "sequence parallelism needs a token input of shape [batch, "
              "sequence] (an integer input of rank 2) to tell which "
              "dimension is the sequence";
  sequence.run();

  // Values carrying a pending sum over the tp axes, in program order, as
  // the partitioner will see them once the regions are split.
  llvm::DenseMap<Value, bool> pendingTp;
  for (Operation &op : step.getBody().front()) {
    const ShardingRule *rule = sequence.ruleOf(&op);
    if (!rule)
      continue;
    FailureOr<FactorAxes> factors = factorAxesFromAttr(&op, *rule, grid);
    if (failed(factors))
      return failure();
    bool tensorParallel = llvm::any_of(
        *factors, [&](const GridAxes &axes) { return usesAny(axes, tpAxes); });
    SmallVector<unsigned> pendingOperands;
    for (auto [idx, operand] : llvm::enumerate(op.getOperands()))
      if (pendingTp.lookup(operand))
        pendingOperands.push_back(idx);
    bool keepsSum = !tensorParallel && !pendingOperands.empty() &&
                    llvm::any_of(rule->linearGroups, [&](const auto &group) {
                      SmallVector<unsigned> sorted(group.begin(), group.end());
                      llvm::sort(sorted);
                      return sorted == pendingOperands;
                    });
    std::optional<int64_t> factor = sequence.factorOf(&op);
    std::optional<Phase> phase = phaseOf(&op);
    if (factor && phase && *phase != Phase::Optimizer && !tensorParallel &&
        !keepsSum && (*factors)[*factor].empty() &&
        rule->factorKinds[*factor] != FactorKind::Blocked &&
        rule->factorKinds[*factor] != FactorKind::Resolved) {
      FactorAxes split = *factors;
      split[*factor] = tpAxes;
      if (checkFactorAxes(&op, *rule, split, grid).empty()) {
        setFactorAxesAttr(&op, split);
        *factors = split;
        // The backward gathers these again rather than keeping the
        // forward's gathered copy (t times the bytes) alive until then.
        if (*phase == Phase::Forward)
          op.setAttr(DtcDialect::kRegatherAttr, UnitAttr::get(op.getContext()));
      }
    }
    for (auto [idx, result] : llvm::enumerate(op.getResults()))
      pendingTp[result] =
          keepsSum ||
          usesAny(resultSharding(*rule, *factors, idx, grid).partial, tpAxes);
  }
  return success();
}
