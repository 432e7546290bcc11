//===- SequenceParallel.cpp - sequence parallelism's plan rewrites -------===//
#include "dtc/Sharding/SequenceParallel.h"
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Sharding/Sharding.h"
#include "dtc/artifact/PieceLayout.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

#include <numeric>

using namespace mlir;
using namespace mlir::dtc;
using ::dtc::artifact::orderGranule;
using ::dtc::artifact::SequenceOrder;
using ::dtc::artifact::sequenceOrderName;

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

  /// Whether the op met two different sequence factors.
  bool meetsSeveral(Operation *op) const {
    auto it = factors.find(op);
    return it != factors.end() && it->second < 0;
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

/// The step's token inputs: integer inputs [batch, sequence], whose
/// dimension 1 is the sequence both kinds of sequence parallelism split.
SmallVector<BlockArgument> tokenInputsOf(func::FuncOp step) {
  SmallVector<BlockArgument> inputs;
  for (BlockArgument arg : step.getArguments()) {
    RankedTensorType type = tensorTypeOf(arg);
    if (argRole(step, arg.getArgNumber()) == Role::Input &&
        type.getRank() == 2 && isa<IntegerType>(type.getElementType()))
      inputs.push_back(arg);
  }
  return inputs;
}

} // namespace

LogicalResult mlir::dtc::planSequenceParallel(func::FuncOp step,
                                              ArrayRef<int64_t> grid,
                                              const GridAxes &tpAxes) {
  const int64_t devices = shardCount(grid, tpAxes);
  SequenceFactors sequence(step);
  SmallVector<BlockArgument> tokenInputs = tokenInputsOf(step);
  for (BlockArgument arg : tokenInputs) {
    const int64_t length = tensorTypeOf(arg).getDimSize(1);
    if (length % devices != 0) {
      auto name = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                    DtcDialect::kNameAttr);
      return emitError(arg.getLoc())
             << "sequence parallelism splits the sequence of input \""
             << (name ? name.getValue() : StringRef("?")) << "\" (" << length
             << " tokens) over the " << devices
             << " tensor-parallel devices; it must divide evenly";
    }
    sequence.seed(arg);
  }
  if (tokenInputs.empty())
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

//===----------------------------------------------------------------------===//
// The striped and zigzag layouts of ring attention
//===----------------------------------------------------------------------===//

namespace {

/// Rewrites a training step into one that holds every sequence in a
/// permuted order, striped or zigzag (see orderSequence). Values flowing
/// through the sequence's ops are permuted by construction; what enters them
/// from elsewhere (a position table, RoPE's constant tables) is permuted on
/// entry, and what leaves them for an op that does not carry the sequence (the
/// optimizer reading a position table's gradient, a returned value) is permuted
/// back.
class SequencePermutation {
public:
  SequencePermutation(func::FuncOp step, int64_t ways, SequenceOrder order,
                      SequenceFactors &sequence)
      : step(step), ways(ways), order(order), sequence(sequence) {}

  LogicalResult run(ArrayRef<BlockArgument> tokenInputs) {
    for (BlockArgument arg : tokenInputs)
      permuted[arg] = 1;
    for (Operation &op :
         llvm::make_early_inc_range(step.getBody().front().getOperations()))
      if (failed(visit(&op)))
        return failure();
    MLIRContext *ctx = step.getContext();
    const bool zigzag = order == SequenceOrder::Zigzag;
    for (BlockArgument arg : tokenInputs)
      step.setArgAttr(arg.getArgNumber(),
                      zigzag ? DtcDialect::kZigzagInputAttr
                             : DtcDialect::kStripedInputAttr,
                      DenseI64ArrayAttr::get(ctx, {1, ways}));
    step.walk([&](Operation *op) {
      if (isa<AttentionOp, AttentionGradOp>(op) &&
          op->hasAttr(DtcDialect::kRingAttr))
        op->setAttr(zigzag ? DtcDialect::kZigzagAttr : DtcDialect::kStripedAttr,
                    IntegerAttr::get(IntegerType::get(ctx, 64), ways));
    });
    return success();
  }

private:
  /// The sequence factors of an op that carries the sequence outside the
  /// optimizer: one, or attention's query and key sequences under a ring.
  FailureOr<SmallVector<int64_t, 2>> sequenceFactorsOf(Operation *op) {
    if (phaseOf(op) == Phase::Optimizer)
      return SmallVector<int64_t, 2>{};
    if (std::optional<int64_t> factor = sequence.factorOf(op))
      return SmallVector<int64_t, 2>{*factor};
    if (isa<AttentionOp, AttentionGradOp>(op) &&
        op->hasAttr(DtcDialect::kRingAttr)) {
      auto [sq, sk] = attentionSequenceFactors(op);
      return SmallVector<int64_t, 2>{sq, sk};
    }
    if (sequence.meetsSeveral(op))
      return op->emitError()
             << "the " << layoutName()
             << " sequence layout cannot permute an op that "
                "relates two positions other than ring attention; use "
                "--sp-layout contiguous";
    return SmallVector<int64_t, 2>{};
  }

  /// The one dimension of `tensor` whose factor is a sequence factor
  /// (nullopt: none); fails when the sequence is merged into a dimension
  /// with others or appears twice.
  FailureOr<std::optional<int64_t>> sequenceDim(Operation *op,
                                                const TensorFactors &tensor,
                                                ArrayRef<int64_t> factors) {
    std::optional<int64_t> found;
    for (int64_t dim = 0; dim < (int64_t)tensor.size(); ++dim) {
      bool has = llvm::any_of(tensor[dim], [&](int64_t f) {
        return llvm::is_contained(factors, f);
      });
      if (!has)
        continue;
      if (tensor[dim].size() != 1 || found)
        return op->emitError()
               << "the " << layoutName()
               << " sequence layout needs the sequence to stay a "
                  "dimension of its own (dimension "
               << dim << " merges it or repeats it); use --sp-layout "
               << "contiguous";
      found = dim;
    }
    return found;
  }

  LogicalResult visit(Operation *op) {
    FailureOr<SmallVector<int64_t, 2>> factors = sequenceFactorsOf(op);
    if (failed(factors))
      return failure();
    if (factors->empty()) {
      // Not a sequence op: it reads positions in their natural order.
      for (OpOperand &use : op->getOpOperands()) {
        auto it = permuted.find(use.get());
        if (it == permuted.end())
          continue;
        FailureOr<Value> natural = leave(use.get(), it->second);
        if (failed(natural))
          return failure();
        use.set(*natural);
      }
      return success();
    }
    const ShardingRule *rule = sequence.ruleOf(op);
    for (OpOperand &use : op->getOpOperands()) {
      FailureOr<std::optional<int64_t>> dim =
          sequenceDim(op, rule->operands[use.getOperandNumber()], *factors);
      if (failed(dim))
        return failure();
      auto it = permuted.find(use.get());
      if (!*dim) {
        if (it != permuted.end())
          return op->emitError()
                 << "the " << layoutName() << " sequence layout: operand "
                 << use.getOperandNumber()
                 << " holds the sequence where the op does not expect it; "
                    "use --sp-layout contiguous";
        continue;
      }
      if (it != permuted.end()) {
        if (it->second != **dim)
          return op->emitError()
                 << "the " << layoutName() << " sequence layout: operand "
                 << use.getOperandNumber()
                 << " holds the sequence in another dimension";
        continue;
      }
      FailureOr<Value> ordered = enter(op, use.get(), **dim);
      if (failed(ordered))
        return failure();
      use.set(*ordered);
    }
    for (OpResult result : op->getResults()) {
      FailureOr<std::optional<int64_t>> dim =
          sequenceDim(op, rule->results[result.getResultNumber()], *factors);
      if (failed(dim))
        return failure();
      if (*dim)
        permuted[result] = **dim;
    }
    return success();
  }

  StringRef layoutName() const { return sequenceOrderName(order); }

  /// The element of the unpermuted sequence (of `length`) that index `i`
  /// of the permuted one reads: to the permuted order (program index ->
  /// position, the data format's map) or back.
  int64_t sourceOf(int64_t i, int64_t length, bool toOrdered) const {
    return toOrdered ? ::dtc::artifact::orderedPosition(order, i, length, ways)
                     : ::dtc::artifact::orderedIndex(order, i, length, ways);
  }

  /// Ids of the permutation along a sequence of `length`.
  Value permutationIds(OpBuilder &b, Location loc, int64_t length,
                       bool toOrdered) {
    SmallVector<int32_t> ids(length);
    for (int64_t i = 0; i < length; ++i)
      ids[i] = int32_t(sourceOf(i, length, toOrdered));
    auto type = RankedTensorType::get({length}, b.getI32Type());
    return arith::ConstantOp::create(
        b, loc, DenseIntElementsAttr::get(type, ArrayRef<int32_t>(ids)));
  }

  /// The new ops run where `anchor` runs (phase, layer, chunk).
  static void placeLike(Operation *anchor, ArrayRef<Operation *> created) {
    for (Operation *op : created) {
      copyPlaceAttrs(anchor, op, /*identity=*/false);
      op->removeAttr(DtcDialect::kRingAttr);
    }
  }

  /// `v` with dimension `dim` permuted (a row lookup over that dimension);
  /// constants are permuted in place.
  FailureOr<Value> permute(OpBuilder &b, Operation *anchor, Value v,
                           int64_t dim, bool toOrdered) {
    Location loc = v.getLoc();
    RankedTensorType type = tensorTypeOf(v);
    const int64_t length = type.getDimSize(dim);
    if (length % orderGranule(order, ways) != 0)
      return anchor->emitError()
             << "the " << layoutName() << " sequence layout: dimension " << dim
             << " (" << length << ") does not divide into "
             << orderGranule(order, ways) << " chunks";
    DenseElementsAttr dense;
    if (matchPattern(v, m_Constant(&dense))) {
      if (dense.isSplat())
        return v;
      SmallVector<Attribute> from(dense.getValues<Attribute>());
      SmallVector<Attribute> to(from.size());
      auto product = [](ArrayRef<int64_t> dims) {
        return std::accumulate(dims.begin(), dims.end(), int64_t(1),
                               std::multiplies<int64_t>());
      };
      const int64_t inner = product(type.getShape().drop_front(dim + 1));
      const int64_t outer = product(type.getShape().take_front(dim));
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < length; ++i) {
          const int64_t source = sourceOf(i, length, toOrdered);
          for (int64_t k = 0; k < inner; ++k)
            to[(o * length + i) * inner + k] =
                from[(o * length + source) * inner + k];
        }
      auto constant =
          arith::ConstantOp::create(b, loc, DenseElementsAttr::get(type, to));
      placeLike(anchor, {constant});
      return constant.getResult();
    }
    if (!isa<FloatType>(type.getElementType()))
      return anchor->emitError()
             << "the " << layoutName()
             << " sequence layout cannot permute an integer value "
                "computed in the step; use --sp-layout contiguous";
    SmallVector<Operation *> created;
    auto record = [&](Value x) {
      created.push_back(x.getDefiningOp());
      return x;
    };
    Value x = v;
    SmallVector<int64_t> perm;
    if (dim != 0) {
      perm.push_back(dim);
      for (int64_t d = 0; d < type.getRank(); ++d)
        if (d != dim)
          perm.push_back(d);
      x = record(TransposeOp::create(b, loc, x, perm));
    }
    RankedTensorType front = tensorTypeOf(x);
    const int64_t rest = front.getNumElements() / length;
    if (front.getRank() != 2)
      x = record(ReshapeOp::create(
          b, loc, RankedTensorType::get({length, rest}, front.getElementType()),
          x));
    x = record(EmbeddingOp::create(
        b, loc, x, record(permutationIds(b, loc, length, toOrdered))));
    if (front.getRank() != 2)
      x = record(ReshapeOp::create(b, loc, front, x));
    if (dim != 0) {
      SmallVector<int64_t> inverse(perm.size());
      for (auto [i, p] : llvm::enumerate(perm))
        inverse[p] = int64_t(i);
      x = record(TransposeOp::create(b, loc, x, inverse));
    }
    placeLike(anchor, created);
    return x;
  }

  /// `v` (natural order) permuted along `dim` for `user`.
  FailureOr<Value> enter(Operation *user, Value v, int64_t dim) {
    auto key = std::make_pair(v, dim);
    for (auto [place, ordered] : entries[key])
      if (inSamePlace(place, user))
        return ordered;
    OpBuilder b(user);
    FailureOr<Value> ordered = permute(b, user, v, dim, /*toOrdered=*/true);
    if (failed(ordered))
      return failure();
    entries[key].push_back({user, *ordered});
    return ordered;
  }

  /// `v` (permuted along `dim`) in natural order, computed right after it.
  FailureOr<Value> leave(Value v, int64_t dim) {
    if (Value done = exits.lookup(v))
      return done;
    Operation *producer = v.getDefiningOp();
    if (!producer)
      return step.emitError() << "the " << layoutName()
                              << " sequence layout: a token input is used in "
                                 "natural order; use --sp-layout contiguous";
    OpBuilder b(producer->getContext());
    b.setInsertionPointAfter(producer);
    FailureOr<Value> natural =
        permute(b, producer, v, dim, /*toOrdered=*/false);
    if (failed(natural))
      return failure();
    return exits[v] = *natural;
  }

  func::FuncOp step;
  int64_t ways;
  SequenceOrder order;
  SequenceFactors &sequence;
  /// Values holding the sequence in permuted order, and in which dimension.
  llvm::DenseMap<Value, int64_t> permuted;
  llvm::DenseMap<std::pair<Value, int64_t>,
                 SmallVector<std::pair<Operation *, Value>, 1>>
      entries;
  llvm::DenseMap<Value, Value> exits;
};

} // namespace

LogicalResult mlir::dtc::orderSequence(func::FuncOp step, int64_t ways,
                                       SequenceOrder order) {
  SequenceFactors sequence(step);
  SmallVector<BlockArgument> tokenInputs = tokenInputsOf(step);
  for (BlockArgument arg : tokenInputs) {
    const int64_t length = tensorTypeOf(arg).getDimSize(1);
    const int64_t chunks = orderGranule(order, ways);
    if (length % chunks != 0)
      return emitError(arg.getLoc())
             << "the " << sequenceOrderName(order)
             << " sequence layout cuts the sequence of input \""
             << argumentName(step, arg.getArgNumber()) << "\" (" << length
             << " tokens) into " << chunks << " chunks; it must divide evenly"
             << (order == SequenceOrder::Zigzag
                     ? " (--sp-layout striped needs " + std::to_string(ways) +
                           ")"
                     : std::string());
    sequence.seed(arg);
  }
  if (tokenInputs.empty())
    return step.emitError()
           << "ring-attention sequence parallelism needs a token input of "
              "shape [batch, sequence] (an integer input of rank 2) to tell "
              "which dimension is the sequence";
  sequence.run();
  return SequencePermutation(step, ways, order, sequence).run(tokenInputs);
}
