//===- Partition.cpp - SPMD partitioning of @train_step ------------------===//
//
// Reads the plan (argument shardings + each op's dtc.factor_axes) and
// rewrites @train_step to what one device runs: every op on its local
// shapes, and collectives wherever a value's sharding differs from what its
// consumer needs. Pending partial sums (from sharded Sum/Mean factors) flow
// through ops that are linear in them and are reduced only where a consumer
// needs the full value: that is how the data-parallel gradient all-reduce,
// and later ZeRO's reduce-scatter and Megatron's row-parallel all-reduce,
// appear.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Sharding/Sharding.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_PARTITION
#include "dtc/Passes/Passes.h.inc"

namespace {

RankedTensorType typeOf(Value v) { return tensorTypeOf(v); }

SmallVector<int16_t> toGridAxes(ArrayRef<int64_t> axes) {
  return SmallVector<int16_t>(axes.begin(), axes.end());
}

bool isPrefix(ArrayRef<int64_t> prefix, ArrayRef<int64_t> of) {
  return prefix.size() <= of.size() && of.take_front(prefix.size()) == prefix;
}

class Partitioner {
public:
  Partitioner(func::FuncOp step, StringRef grid, ArrayRef<int64_t> gridShape)
      : step(step), grid(grid), gridShape(gridShape), ctx(step.getContext()) {}

  LogicalResult run();

private:
  struct Local {
    Value value;
    TensorSharding sharding;
  };

  LogicalResult checkDivides(Location loc, RankedTensorType global,
                             const TensorSharding &sharding);
  LogicalResult partitionOp(Operation *op, OpBuilder &b);
  FailureOr<Value> reshard(Value global, const TensorSharding &target,
                           OpBuilder &b, Location loc, StringAttr phase);
  LogicalResult partitionReturn(func::ReturnOp ret, OpBuilder &b);

  func::FuncOp step;
  StringRef grid;
  ArrayRef<int64_t> gridShape;
  MLIRContext *ctx;
  /// Global value -> its local value and that value's sharding.
  llvm::DenseMap<Value, Local> locals;
  /// Global value -> reshardings already materialized (reused by every
  /// consumer that needs the same layout, e.g. one gradient all-reduce for
  /// both clipping and the update).
  llvm::DenseMap<Value, SmallVector<Local, 1>> reshards;
  /// The partitioned function, built beside the global one.
  func::FuncOp local;
};

LogicalResult Partitioner::checkDivides(Location loc, RankedTensorType global,
                                        const TensorSharding &sharding) {
  if (sharding.dims.size() != (size_t)global.getRank())
    return emitError(loc) << "sharding has " << sharding.dims.size()
                          << " dims for a value of rank " << global.getRank();
  for (auto [dim, axes] : llvm::enumerate(sharding.dims)) {
    for (int64_t axis : axes)
      if (axis < 0 || axis >= (int64_t)gridShape.size())
        return emitError(loc) << "grid axis " << axis << " does not exist on a "
                              << gridShape.size() << "-axis grid";
    int64_t n = shardCount(gridShape, axes);
    if (global.getDimSize(dim) % n != 0)
      return emitError(loc) << "dimension " << dim << " of size "
                            << global.getDimSize(dim) << " does not split into "
                            << n << " equal pieces";
  }
  return success();
}

LogicalResult Partitioner::run() {
  // The local function is built beside the global one, whose ops keep their
  // global types (and so their sharding rules) until it is replaced.
  SmallVector<Type> localArgTypes;
  SmallVector<TensorSharding> argShardings;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    BlockArgument arg = step.getArgument(i);
    auto global = typeOf(arg);
    TensorSharding sharding = TensorSharding::replicated(global.getRank());
    if (auto attr = step.getArgAttrOfType<ShardingAttr>(i, DtcDialect::kShardingAttr))
      sharding = TensorSharding::fromAttr(attr);
    if (sharding.isPartial())
      return emitError(arg.getLoc()) << "an argument cannot be a partial sum";
    if (failed(checkDivides(arg.getLoc(), global, sharding)))
      return failure();
    localArgTypes.push_back(localType(global, sharding, gridShape));
    argShardings.push_back(sharding);
  }
  OpBuilder b(ctx);
  b.setInsertionPointAfter(step);
  local = func::FuncOp::create(b, step.getLoc(), step.getName(),
                               FunctionType::get(ctx, localArgTypes, {}));
  SmallVector<Location> argLocs;
  for (BlockArgument arg : step.getArguments())
    argLocs.push_back(arg.getLoc());
  Block *body = b.createBlock(&local.getBody(), {}, localArgTypes, argLocs);
  // All at once: one attribute array, not one per argument (quadratic).
  SmallVector<DictionaryAttr> argAttrs;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    NamedAttrList attrs(step.getArgAttrDict(i));
    attrs.set(DtcDialect::kGlobalTypeAttr, TypeAttr::get(step.getArgument(i).getType()));
    attrs.set(DtcDialect::kShardingAttr, argShardings[i].toAttr(ctx, grid));
    argAttrs.push_back(attrs.getDictionary(ctx));
    locals[step.getArgument(i)] = {body->getArgument(i), argShardings[i]};
  }
  local.setAllArgAttrs(argAttrs);

  b.setInsertionPointToEnd(body);
  for (Operation &op : step.getBody().front()) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (failed(partitionReturn(ret, b)))
        return failure();
      continue;
    }
    if (isa<arith::ConstantOp>(op)) {
      // Constants stay whole; consumers slice what they need.
      Value v = b.clone(op)->getResult(0);
      locals[op.getResult(0)] = {v, TensorSharding::replicated(typeOf(v).getRank())};
      continue;
    }
    if (failed(partitionOp(&op, b)))
      return failure();
  }
  step.erase();
  return success();
}

LogicalResult Partitioner::partitionOp(Operation *op, OpBuilder &b) {
  auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return op->emitError() << "'" << op->getName()
                           << "' has no sharding rule and cannot be partitioned";
  ShardingRule rule = ruleOp.getShardingRule();
  FailureOr<FactorAxes> factors = factorAxesFromAttr(op, rule, gridShape);
  if (failed(factors))
    return failure();
  auto phase = op->getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);

  // Keep pending sums flowing if the partial operands form exactly one of
  // the op's linear groups and agree on their axes.
  SmallVector<unsigned> partialOperands;
  for (auto [idx, operand] : llvm::enumerate(op->getOperands()))
    if (locals.lookup(operand).sharding.isPartial())
      partialOperands.push_back(idx);
  GridAxes keptPartial;
  if (!partialOperands.empty()) {
    for (const auto &group : rule.linearGroups) {
      SmallVector<unsigned> sorted(group.begin(), group.end());
      llvm::sort(sorted);
      if (sorted != partialOperands)
        continue;
      GridAxes axes = locals.lookup(op->getOperand(sorted.front())).sharding.partial;
      bool agree = llvm::all_of(sorted, [&](unsigned idx) {
        return locals.lookup(op->getOperand(idx)).sharding.partial == axes;
      });
      // The op's own factor shardings must not reuse those axes.
      bool disjoint = llvm::all_of(*factors, [&](const GridAxes &f) {
        return llvm::none_of(f, [&](int64_t a) { return llvm::is_contained(axes, a); });
      });
      // A partial operand already reduced for another consumer is cheaper to
      // reuse than to keep the sum pending (and reduce it again later).
      bool alreadyReduced = llvm::any_of(sorted, [&](unsigned idx) {
        Value operand = op->getOperand(idx);
        TensorSharding wanted = requiredOperandSharding(rule, *factors, idx);
        return llvm::any_of(reshards.lookup(operand), [&](const Local &done) {
          return done.sharding == wanted;
        });
      });
      if (agree && disjoint && !alreadyReduced)
        keptPartial = axes;
      break;
    }
  }

  IRMapping mapping;
  for (auto [idx, operand] : llvm::enumerate(op->getOperands())) {
    TensorSharding target = requiredOperandSharding(rule, *factors, idx);
    if (!keptPartial.empty() && llvm::is_contained(partialOperands, idx))
      target.partial = keptPartial;
    if (failed(checkDivides(op->getLoc(), typeOf(operand), target)))
      return failure();
    FailureOr<Value> local = reshard(operand, target, b, op->getLoc(), phase);
    if (failed(local))
      return failure();
    mapping.map(operand, *local);
  }

  Operation *clone = b.clone(*op, mapping);
  clone->removeAttr(DtcDialect::kFactorAxesAttr);
  b.setInsertionPointAfter(clone);
  for (auto [idx, result] : llvm::enumerate(op->getResults())) {
    GridAxes meanAxes;
    TensorSharding sharding = resultSharding(rule, *factors, idx, &meanAxes);
    if (!keptPartial.empty()) {
      sharding.partial.append(keptPartial.begin(), keptPartial.end());
      llvm::sort(sharding.partial);
      sharding.partial.erase(llvm::unique(sharding.partial), sharding.partial.end());
    }
    if (failed(checkDivides(op->getLoc(), typeOf(result), sharding)))
      return failure();
    Value local = clone->getResult(idx);
    local.setType(localType(typeOf(result), sharding, gridShape));
    if (!meanAxes.empty()) {
      // A shard's mean times (local count / global count) is its share of
      // the global mean (equal pieces).
      auto scalarType = RankedTensorType::get({}, typeOf(local).getElementType());
      Value factor = createSplatConstant(b, op->getLoc(), scalarType,
                                         1.0 / shardCount(gridShape, meanAxes));
      auto scaled = MulOp::create(b, op->getLoc(), local, factor);
      if (phase)
        scaled->setAttr(DtcDialect::kPhaseAttr, phase);
      local = scaled;
    }
    locals[result] = {local, sharding};
  }
  return success();
}

FailureOr<Value> Partitioner::reshard(Value global, const TensorSharding &target,
                                      OpBuilder &b, Location loc,
                                      StringAttr phase) {
  Local current = locals.lookup(global);
  if (!current.value)
    return emitError(loc) << "internal error: value used before it was partitioned";
  if (current.sharding == target)
    return current.value;
  for (const Local &done : reshards[global])
    if (done.sharding == target)
      return done.value;

  RankedTensorType global_ = typeOf(global);
  Value v = current.value;
  TensorSharding s = current.sharding;
  // Collectives on a parameter's gradient are still that gradient.
  ArrayAttr gradientOf;
  if (auto result = dyn_cast<OpResult>(global))
    if (auto names = result.getOwner()->getAttrOfType<ArrayAttr>(DtcDialect::kGradientOfAttr))
      if (result.getResultNumber() < names.size())
        gradientOf = ArrayAttr::get(ctx, {names[result.getResultNumber()]});
  auto tag = [&](Operation *op) {
    if (phase)
      op->setAttr(DtcDialect::kPhaseAttr, phase);
    if (gradientOf)
      op->setAttr(DtcDialect::kGradientOfAttr, gradientOf);
  };
  auto typeFor = [&](const TensorSharding &sharding) {
    return localType(global_, sharding, gridShape);
  };

  // 1. Pending sums the target does not keep: reduce-scatter straight into a
  //    split dimension where the target wants one, all-reduce the rest.
  for (int64_t axis : target.partial)
    if (!llvm::is_contained(s.partial, axis))
      return emitError(loc) << "cannot turn a full value into a partial sum";
  GridAxes toReduce;
  for (int64_t axis : s.partial)
    if (!llvm::is_contained(target.partial, axis))
      toReduce.push_back(axis);
  if (!toReduce.empty()) {
    for (auto [dim, axes] : llvm::enumerate(target.dims)) {
      if (axes.empty() || !s.dims[dim].empty() ||
          !llvm::all_of(axes, [&](int64_t a) { return llvm::is_contained(toReduce, a); }))
        continue;
      TensorSharding next = s;
      next.dims[dim] = axes;
      llvm::erase_if(next.partial, [&](int64_t a) { return llvm::is_contained(axes, a); });
      auto op = shard::ReduceScatterOp::create(
          b, loc, typeFor(next), FlatSymbolRefAttr::get(ctx, grid),
          b.getDenseI16ArrayAttr(toGridAxes(axes)), v,
          shard::ReductionKindAttr::get(ctx, shard::ReductionKind::Sum),
          b.getIndexAttr(dim));
      tag(op);
      v = op.getResult();
      s = next;
      llvm::erase_if(toReduce, [&](int64_t a) { return llvm::is_contained(axes, a); });
    }
    if (!toReduce.empty()) {
      TensorSharding next = s;
      llvm::erase_if(next.partial, [&](int64_t a) { return llvm::is_contained(toReduce, a); });
      auto op = shard::AllReduceOp::create(b, loc, typeFor(next), grid,
                                           toGridAxes(toReduce), v,
                                           shard::ReductionKind::Sum);
      tag(op);
      v = op.getResult();
      s = next;
    }
  }

  // 2. Gather every dimension down to a prefix of its target first, then
  //    slice: slicing before a gather on the same axis would mix pieces.
  for (unsigned dim = 0; dim < s.dims.size(); ++dim) {
    const GridAxes &cur = s.dims[dim], &tgt = target.dims[dim];
    if (isPrefix(cur, tgt))
      continue;
    size_t keep = 0;
    while (keep < cur.size() && keep < tgt.size() && cur[keep] == tgt[keep])
      ++keep;
    TensorSharding next = s;
    next.dims[dim].resize(keep);
    SmallVector<int64_t> gathered(cur.begin() + keep, cur.end());
    auto op = shard::AllGatherOp::create(
        b, loc, typeFor(next), grid, toGridAxes(gathered), v,
        APInt(64, dim));
    tag(op);
    v = op.getResult();
    s = next;
  }
  for (unsigned dim = 0; dim < s.dims.size(); ++dim) {
    const GridAxes &cur = s.dims[dim], &tgt = target.dims[dim];
    if (cur == tgt)
      continue;
    TensorSharding next = s;
    next.dims[dim] = tgt;
    SmallVector<int64_t> sliced(tgt.begin() + cur.size(), tgt.end());
    auto op = shard::AllSliceOp::create(b, loc, typeFor(next), v, grid,
                                        toGridAxes(sliced), dim);
    tag(op);
    v = op.getResult();
    s = next;
  }
  reshards[global].push_back({v, s});
  return v;
}

LogicalResult Partitioner::partitionReturn(func::ReturnOp ret, OpBuilder &b) {
  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  SmallVector<DictionaryAttr> resultAttrs;
  for (auto [idx, operand] : llvm::enumerate(ret.getOperands())) {
    auto global = typeOf(operand);
    // A state update keeps its argument's layout; everything else is
    // returned whole.
    TensorSharding target = TensorSharding::replicated(global.getRank());
    if (auto updates = step.getResultAttrOfType<IntegerAttr>(idx, DtcDialect::kUpdatesAttr))
      if (auto attr = local.getArgAttrOfType<ShardingAttr>(updates.getInt(),
                                                           DtcDialect::kShardingAttr))
        target = TensorSharding::fromAttr(attr);
    auto phase = StringAttr::get(ctx, "optimizer");
    FailureOr<Value> value = reshard(operand, target, b, ret.getLoc(), phase);
    if (failed(value))
      return failure();
    results.push_back(*value);
    resultTypes.push_back(value->getType());
    NamedAttrList attrs(step.getResultAttrDict(idx));
    attrs.set(DtcDialect::kGlobalTypeAttr, TypeAttr::get(global));
    attrs.set(DtcDialect::kShardingAttr, target.toAttr(ctx, grid));
    resultAttrs.push_back(attrs.getDictionary(ctx));
  }
  func::ReturnOp::create(b, ret.getLoc(), results);
  SmallVector<Type> argTypes(local.getArgumentTypes());
  local.setFunctionType(FunctionType::get(ctx, argTypes, resultTypes));
  local.setAllResultAttrs(resultAttrs);
  return success();
}

struct PartitionPass : impl::PartitionBase<PartitionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step) {
      module.emitError() << "no @train_step to partition";
      return signalPassFailure();
    }
    auto plan = module->getAttrOfType<DictionaryAttr>(DtcDialect::kPlanAttr);
    auto gridRef = plan ? plan.getAs<FlatSymbolRefAttr>("grid") : nullptr;
    if (!gridRef) {
      module.emitError() << "no dtc.plan with a grid (run a planner such as "
                            "dtc-apply-strategy first)";
      return signalPassFailure();
    }
    FailureOr<SmallVector<int64_t>> shape = getGridShape(module, gridRef.getValue());
    if (failed(shape))
      return signalPassFailure();
    Partitioner partitioner(step, gridRef.getValue(), *shape);
    if (failed(partitioner.run()))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::dtc
