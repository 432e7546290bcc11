//===- Partition.cpp - SPMD partitioning of @train_step ------------------===//
//
// Reads the plan (argument shardings + each op's dtc.factor_axes) and
// rewrites @train_step to what one device runs: every op on its local
// shapes, and collectives wherever a value's sharding differs from what its
// consumer needs (planned by planReshard, include/dtc/Sharding/Reshard.h).
// Pending partial values (from sharded Sum/Mean/Max factors) flow through
// ops that are linear in them and are resolved only where a consumer needs
// the full value: that is how the data-parallel gradient all-reduce,
// Megatron's row-parallel all-reduce and, later, ZeRO's reduce-scatter
// appear.
//
// Most ops are cloned onto local shapes. An op whose local computation
// differs when some factor is sharded (vocab-parallel embedding and cross
// entropy) builds it itself through LocalLoweringOpInterface, using this
// partitioner as its LocalLoweringContext (rank offsets, collectives).
//
// Uneven splits are padded (TensorSharding.h). Padding holds garbage except
// right after a slice; before an op reduces over a padded factor, the
// padding of each operand holding it is set to the reduction's identity
// (dtc.fill_padding), which is exact because the op is linear in those
// operands (checkFactorAxes refuses other uneven splits).
//
//===----------------------------------------------------------------------===//
#include "UnitMicroBatchAxes.h"
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"
#include "dtc/Sharding/Reshard.h"
#include "dtc/Sharding/Sharding.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include <map>

namespace mlir::dtc {
#define GEN_PASS_DEF_PARTITION
#include "dtc/Passes/Passes.h.inc"

LocalLoweringContext::~LocalLoweringContext() = default;

namespace {

RankedTensorType typeOf(Value v) { return tensorTypeOf(v); }

/// Forward, backward (input and weight gradients alike) or optimizer, with
/// the op's layer when it has one.
std::string regionKey(std::optional<Phase> phase) {
  if (!phase)
    return "";
  if (*phase == Phase::BackwardWeight)
    phase = Phase::BackwardInput;
  return stringifyPhase(*phase).str();
}
std::string regionOf(Operation *op) {
  std::string region = regionKey(phaseOf(op));
  if (auto layer = op->getAttrOfType<IntegerAttr>(DtcDialect::kLayerAttr))
    region += ":" + std::to_string(layer.getInt());
  return region;
}

SmallVector<int16_t> toGridAxes(ArrayRef<int64_t> axes) {
  return SmallVector<int16_t>(axes.begin(), axes.end());
}

shard::ReductionKind reductionOf(PartialKind kind) {
  return kind == PartialKind::Max ? shard::ReductionKind::Max
                                  : shard::ReductionKind::Sum;
}

int64_t elementBytes(Type type) {
  return type.isInteger(64) || type.isF64() ? 8
         : type.isF16() || type.isBF16()    ? 2
                                            : 4;
}

class Partitioner : public LocalLoweringContext {
public:
  Partitioner(func::FuncOp step, StringRef grid, ArrayRef<int64_t> gridShape,
              ArrayRef<int64_t> microbatchAxes)
      : step(step), gridName(grid), gridShape(gridShape),
        microbatchAxes(microbatchAxes.begin(), microbatchAxes.end()),
        ctx(step.getContext()), b(step.getContext()) {}

  LogicalResult run();

  // LocalLoweringContext
  OpBuilder &builder() override { return b; }
  ArrayRef<int64_t> grid() const override { return gridShape; }
  Value shardOffset(Location loc, ArrayRef<int64_t> axes,
                    int64_t pieceSize) override;
  Value ringOffset(Location loc, int64_t axis, int64_t pieceSize,
                   int64_t shift) override;
  Value shiftToNext(Location loc, Value local, int64_t axis) override;
  Value allReduce(Location loc, Value local, ArrayRef<int64_t> axes,
                  PartialKind kind) override;
  Value sliceAlong(Location loc, Value whole, ArrayRef<int64_t> axes,
                   int64_t dim) override;
  Value gatherAlong(Location loc, Value local, ArrayRef<int64_t> axes,
                    int64_t dim) override;
  FlatSymbolRefAttr gridSymbol() override {
    return FlatSymbolRefAttr::get(ctx, gridName);
  }
  Value lookupShared(Value key, StringRef name) override {
    auto it = shared.find({key.getAsOpaquePointer(), name.str()});
    return it == shared.end() ? Value() : it->second;
  }
  void share(Value key, StringRef name, Value value) override {
    shared[{key.getAsOpaquePointer(), name.str()}] = value;
  }

private:
  struct Local {
    Value value;
    TensorSharding sharding;
    /// For reshardings of a dtc.regather argument: the region (phase and
    /// layer) whose consumers may reuse it.
    std::string region;
  };

  LogicalResult checkSharding(Location loc, RankedTensorType global,
                              const TensorSharding &sharding);
  LogicalResult partitionOp(Operation *op);
  GridAxes keptPartialSum(Operation *op, const ShardingRule &rule,
                          const FactorAxes &factors,
                          SmallVector<unsigned> &partialOperands);
  FailureOr<Value> reshard(Value global, const TensorSharding &target,
                           Location loc);
  /// A view resharded to whole rows, made from a copy of what it views
  /// resharded the same way, when one exists; failure otherwise.
  FailureOr<Value> wholeRowsView(Value global, const TensorSharding &target,
                                 Location loc);
  Value emitStep(const ReshardStep &step, Value v, RankedTensorType global,
                 Location loc);
  Value fillPadding(Location loc, Value local, int64_t dim, int64_t size,
                    ArrayRef<int64_t> axes, bool max);
  /// The rank's offset (dtc.shard_offset) along `axes`, `shift` ring steps
  /// back; one op per distinct request.
  Value offsetOf(Location loc, ArrayRef<int64_t> axes, int64_t pieceSize,
                 int64_t shift);
  LogicalResult partitionReturn(func::ReturnOp ret);
  /// Tags ops built since `mark` with the current phase (and, for
  /// collectives on a gradient, the parameter it is the gradient of).
  void tagSince(Block::iterator mark);
  Block::iterator mark() {
    Block *block = b.getInsertionBlock();
    return block->empty() ? block->end() : std::prev(block->end());
  }

  func::FuncOp step;
  StringRef gridName;
  ArrayRef<int64_t> gridShape;
  /// The plan's virtual micro-batch axis (none when not micro-batched).
  GridAxes microbatchAxes;
  MLIRContext *ctx;
  OpBuilder b;
  /// Set while partitioning one op (what new ops are tagged with).
  StringAttr phase;
  /// The op's region: forward, backward or optimizer, and its dtc.layer
  /// when it has one. A dtc.regather argument's gathered copy serves the
  /// consumers of one region only.
  std::string region;
  llvm::DenseSet<Value> regather;
  ArrayAttr gradientOf;
  /// Global value -> its local value and that value's sharding.
  llvm::DenseMap<Value, Local> locals;
  /// Global value -> reshardings already materialized (reused by every
  /// consumer that needs the same layout, e.g. one gradient all-reduce for
  /// both clipping and the update).
  llvm::DenseMap<Value, SmallVector<Local, 1>> reshards;
  /// dtc.shard_offset ops by (axes, piece size, ring shift).
  std::map<std::tuple<GridAxes, int64_t, int64_t>, Value> offsets;
  std::map<std::tuple<void *, int64_t, bool>, Value> filled;
  std::map<std::pair<void *, std::string>, Value> shared;
  func::FuncOp local;
};

LogicalResult Partitioner::checkSharding(Location loc, RankedTensorType global,
                                         const TensorSharding &sharding) {
  if (sharding.dims.size() != (size_t)global.getRank())
    return emitError(loc) << "sharding has " << sharding.dims.size()
                          << " dims for a value of rank " << global.getRank();
  for (int64_t axis : sharding.usedAxes())
    if (axis < 0 || axis >= (int64_t)gridShape.size())
      return emitError(loc) << "grid axis " << axis << " does not exist on a "
                            << gridShape.size() << "-axis grid";
  return success();
}

void Partitioner::tagSince(Block::iterator mark) {
  Block *block = b.getInsertionBlock();
  auto it = mark == block->end() ? block->begin() : std::next(mark);
  for (; it != block->end(); ++it) {
    if (phase && !it->hasAttr(DtcDialect::kPhaseAttr))
      it->setAttr(DtcDialect::kPhaseAttr, phase);
    bool collective =
        isa<shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
            shard::AllSliceOp, shard::AllToAllOp, shard::ShiftOp, MoeExchangeOp,
            PadOp, FillPaddingOp>(*it);
    if (gradientOf && collective && !it->hasAttr(DtcDialect::kGradientOfAttr))
      it->setAttr(DtcDialect::kGradientOfAttr, gradientOf);
  }
}

Value Partitioner::offsetOf(Location loc, ArrayRef<int64_t> axes,
                            int64_t pieceSize, int64_t shift) {
  Value &v = offsets[{GridAxes(axes.begin(), axes.end()), pieceSize, shift}];
  if (v)
    return v;
  // At the top of the function: every later use is dominated.
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&local.getBody().front());
  auto offset = ShardOffsetOp::create(
      b, loc, RankedTensorType::get({}, b.getI64Type()), axes, pieceSize,
      shift ? b.getI64IntegerAttr(shift) : IntegerAttr());
  setPhase(offset, Phase::Forward);
  return v = offset;
}

Value Partitioner::shardOffset(Location loc, ArrayRef<int64_t> axes,
                               int64_t pieceSize) {
  return offsetOf(loc, axes, pieceSize, /*shift=*/0);
}

Value Partitioner::ringOffset(Location loc, int64_t axis, int64_t pieceSize,
                              int64_t shift) {
  return offsetOf(loc, {axis}, pieceSize, shift);
}

Value Partitioner::shiftToNext(Location loc, Value v, int64_t axis) {
  return shard::ShiftOp::create(b, loc, v.getType(), gridName,
                                toGridAxes({axis}), v, APInt(64, axis),
                                /*offset=*/1, /*rotate=*/true);
}

Value Partitioner::allReduce(Location loc, Value v, ArrayRef<int64_t> axes,
                             PartialKind kind) {
  return shard::AllReduceOp::create(b, loc, v.getType(), gridName,
                                    toGridAxes(axes), v, reductionOf(kind));
}

Value Partitioner::sliceAlong(Location loc, Value whole, ArrayRef<int64_t> axes,
                              int64_t dim) {
  RankedTensorType type = typeOf(whole);
  SmallVector<int64_t> shape(type.getShape());
  shape[size_t(dim)] /=
      shardCount(gridShape, GridAxes(axes.begin(), axes.end()));
  return shard::AllSliceOp::create(b, loc, type.clone(shape), whole, gridName,
                                   toGridAxes(axes), dim);
}

Value Partitioner::gatherAlong(Location loc, Value local,
                               ArrayRef<int64_t> axes, int64_t dim) {
  RankedTensorType type = typeOf(local);
  SmallVector<int64_t> shape(type.getShape());
  shape[size_t(dim)] *=
      shardCount(gridShape, GridAxes(axes.begin(), axes.end()));
  return shard::AllGatherOp::create(b, loc, type.clone(shape), gridName,
                                    toGridAxes(axes), local, APInt(64, dim));
}

Value Partitioner::fillPadding(Location loc, Value v, int64_t dim, int64_t size,
                               ArrayRef<int64_t> axes, bool max) {
  auto key = std::make_tuple(v.getAsOpaquePointer(), dim, max);
  if (Value done = filled[key])
    return done;
  Value offset = shardOffset(loc, axes, typeOf(v).getDimSize(dim));
  return filled[key] = FillPaddingOp::create(b, loc, v, offset, dim, size,
                                             max ? "-inf" : "zero");
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
    if (auto attr =
            step.getArgAttrOfType<ShardingAttr>(i, DtcDialect::kShardingAttr))
      sharding = fromShardingAttr(attr);
    if (sharding.isPartial())
      return emitError(arg.getLoc()) << "an argument cannot be a partial value";
    normalizePieces(sharding, global.getShape(), gridShape);
    if (failed(checkSharding(arg.getLoc(), global, sharding)))
      return failure();
    localArgTypes.push_back(localType(global, sharding, gridShape));
    argShardings.push_back(sharding);
  }
  b.setInsertionPointAfter(step);
  local = func::FuncOp::create(b, step.getLoc(), step.getName(),
                               FunctionType::get(ctx, localArgTypes, {}));
  // Markers such as dtc.train_step and dtc.pipeline_stage carry over.
  for (NamedAttribute attr : step->getDiscardableAttrs())
    local->setAttr(attr.getName(), attr.getValue());
  SmallVector<Location> argLocs;
  for (BlockArgument arg : step.getArguments())
    argLocs.push_back(arg.getLoc());
  Block *body = b.createBlock(&local.getBody(), {}, localArgTypes, argLocs);
  // All at once: one attribute array, not one per argument (quadratic).
  SmallVector<DictionaryAttr> argAttrs;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    NamedAttrList attrs(step.getArgAttrDict(i));
    attrs.set(DtcDialect::kGlobalTypeAttr,
              TypeAttr::get(step.getArgument(i).getType()));
    attrs.set(DtcDialect::kShardingAttr,
              toShardingAttr(argShardings[i], ctx, gridName));
    argAttrs.push_back(attrs.getDictionary(ctx));
    locals[step.getArgument(i)] = {body->getArgument(i), argShardings[i], {}};
    if (step.getArgAttr(i, DtcDialect::kRegatherAttr))
      regather.insert(step.getArgument(i));
  }
  local.setAllArgAttrs(argAttrs);

  b.setInsertionPointToEnd(body);
  for (Operation &op : step.getBody().front()) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      if (failed(partitionReturn(ret)))
        return failure();
      continue;
    }
    if (isa<arith::ConstantOp>(op)) {
      // Constants stay whole; consumers slice what they need.
      Value v = b.clone(op)->getResult(0);
      locals[op.getResult(0)] = {
          v, TensorSharding::replicated(typeOf(v).getRank()), {}};
      continue;
    }
    if (failed(partitionOp(&op)))
      return failure();
  }
  step.erase();
  return success();
}

/// Keep pending sums flowing if the partial operands (returned in
/// `partialOperands`) form exactly one of the op's linear groups and agree
/// on their axes: the axes the results stay partial over, or none.
GridAxes Partitioner::keptPartialSum(Operation *op, const ShardingRule &rule,
                                     const FactorAxes &factors,
                                     SmallVector<unsigned> &partialOperands) {
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
      const TensorSharding &first =
          locals.lookup(op->getOperand(sorted.front())).sharding;
      bool agree =
          first.partialKind == PartialKind::Sum &&
          llvm::all_of(sorted, [&](unsigned idx) {
            return locals.lookup(op->getOperand(idx)).sharding.partial ==
                   first.partial;
          });
      // The op's own factor shardings must not reuse those axes.
      bool disjoint = llvm::all_of(factors, [&](const GridAxes &f) {
        return llvm::none_of(
            f, [&](int64_t a) { return llvm::is_contained(first.partial, a); });
      });
      // A partial operand already reduced for another consumer is cheaper to
      // reuse than to keep the sum pending (and reduce it again later).
      bool alreadyReduced = llvm::any_of(sorted, [&](unsigned idx) {
        Value operand = op->getOperand(idx);
        TensorSharding wanted =
            requiredOperandSharding(rule, factors, idx, gridShape);
        return llvm::any_of(reshards.lookup(operand), [&](const Local &done) {
          return done.sharding == wanted;
        });
      });
      // The optimizer runs once per step, after the micro-batches: a sum
      // pending over them is complete before it (a per-micro-batch op
      // there would run in the micro-batch loop).
      bool overMicroBatches = isPhase(op, Phase::Optimizer) &&
                              llvm::any_of(first.partial, [&](int64_t a) {
                                return llvm::is_contained(microbatchAxes, a);
                              });
      if (agree && disjoint && !alreadyReduced && !overMicroBatches)
        keptPartial = first.partial;
      break;
    }
  }

  return keptPartial;
}

LogicalResult Partitioner::partitionOp(Operation *op) {
  auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return op->emitError()
           << "'" << op->getName()
           << "' has no sharding rule and cannot be partitioned";
  ShardingRule rule = ruleOp.getShardingRule();
  FailureOr<FactorAxes> factors = factorAxesFromAttr(op, rule, gridShape);
  if (failed(factors))
    return failure();
  phase = op->getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
  region = regionOf(op);
  gradientOf = nullptr;
  Block::iterator start = mark();

  SmallVector<unsigned> partialOperands;
  GridAxes keptPartial = keptPartialSum(op, rule, *factors, partialOperands);

  SmallVector<Value> localOperands;
  for (auto [idx, operand] : llvm::enumerate(op->getOperands())) {
    TensorSharding target =
        requiredOperandSharding(rule, *factors, idx, gridShape);
    if (!keptPartial.empty() && llvm::is_contained(partialOperands, idx))
      target.partial = keptPartial;
    FailureOr<Value> v = reshard(operand, target, op->getLoc());
    if (failed(v))
      return failure();
    localOperands.push_back(*v);
  }

  SmallVector<int64_t> lowered;
  auto lowering = dyn_cast<LocalLoweringOpInterface>(op);
  if (lowering)
    lowered = lowering.getLoweredFactors();

  // Padding must not reach a reduction: set it to the identity first.
  for (auto [factor, axes] : llvm::enumerate(*factors)) {
    FactorKind kind = rule.factorKinds[factor];
    if (!isPaddedFactor(rule, *factors, factor, gridShape) ||
        llvm::is_contained(lowered, (int64_t)factor) ||
        (kind != FactorKind::Sum && kind != FactorKind::Mean &&
         kind != FactorKind::Max))
      continue;
    for (unsigned idx = 0; idx < rule.operands.size(); ++idx)
      for (auto [dim, dimFactors] : llvm::enumerate(rule.operands[idx]))
        if (llvm::is_contained(dimFactors, (int64_t)factor))
          localOperands[idx] =
              fillPadding(op->getLoc(), localOperands[idx], dim,
                          typeOf(op->getOperand(idx)).getDimSize(dim), axes,
                          kind == FactorKind::Max);
  }

  SmallVector<TensorSharding> resultShardings;
  SmallVector<Type> localTypes;
  SmallVector<SmallVector<int64_t>> meanFactors(op->getNumResults());
  for (auto [idx, result] : llvm::enumerate(op->getResults())) {
    TensorSharding sharding =
        resultSharding(rule, *factors, idx, gridShape, &meanFactors[idx]);
    if (!keptPartial.empty()) {
      sharding.partial.append(keptPartial.begin(), keptPartial.end());
      llvm::sort(sharding.partial);
      sharding.partial.erase(llvm::unique(sharding.partial),
                             sharding.partial.end());
    }
    if (failed(checkSharding(op->getLoc(), typeOf(result), sharding)))
      return failure();
    resultShardings.push_back(sharding);
    localTypes.push_back(localType(typeOf(result), sharding, gridShape));
  }

  SmallVector<Value> localResults;
  bool lower = lowering && llvm::any_of(lowered, [&](int64_t f) {
                 return !(*factors)[f].empty();
               });
  if (lower) {
    if (failed(lowering.buildLocal(*this, localOperands, localTypes, *factors,
                                   localResults)))
      return failure();
    if (localResults.size() != op->getNumResults())
      return op->emitError() << "local lowering built " << localResults.size()
                             << " results for " << op->getNumResults();
  } else {
    IRMapping mapping;
    mapping.map(op->getOperands(), localOperands);
    Operation *clone = b.clone(*op, mapping);
    clone->removeAttr(DtcDialect::kFactorAxesAttr);
    clone->removeAttr(DtcDialect::kRegatherAttr);
    for (auto [result, type] : llvm::zip(clone->getResults(), localTypes))
      result.setType(type);
    localResults.assign(clone->result_begin(), clone->result_end());
  }

  for (auto [idx, result] : llvm::enumerate(op->getResults())) {
    Value v = localResults[idx];
    if (v.getType() != localTypes[idx])
      return op->emitError() << "local result " << idx << " has type "
                             << v.getType() << ", expected " << localTypes[idx];
    if (!meanFactors[idx].empty()) {
      // A shard's mean times (local count / global count) is its share of
      // the global mean; padded pieces were zeroed above and count fully.
      double scale = 1.0;
      for (int64_t f : meanFactors[idx])
        scale *= double(factorPiece(rule, *factors, f, gridShape)) /
                 rule.factorSizes[f];
      auto scalarType = RankedTensorType::get({}, typeOf(v).getElementType());
      Value factor = createSplatConstant(b, op->getLoc(), scalarType, scale);
      v = MulOp::create(b, op->getLoc(), v, factor);
    }
    locals[result] = {v, resultShardings[idx], {}};
  }
  tagSince(start);
  return success();
}

Value Partitioner::emitStep(const ReshardStep &step, Value v,
                            RankedTensorType global, Location loc) {
  RankedTensorType after = localType(global, step.after, gridShape);
  int64_t n = shardCount(gridShape, step.axes);
  auto gridAttr = FlatSymbolRefAttr::get(ctx, gridName);
  auto axesAttr = b.getDenseI16ArrayAttr(toGridAxes(step.axes));
  // Pads (or crops) dimension `dim` of `x` to `size`.
  auto fit = [&](Value x, int64_t dim, int64_t size) -> Value {
    RankedTensorType type = typeOf(x);
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] = size;
    return PadOp::create(
        b, loc, RankedTensorType::get(shape, type.getElementType()), x);
  };
  if (step.padDim >= 0)
    v = fit(v, step.padDim, step.padSize);
  // The collective's own result type: `after`, except a concatenated
  // dimension before its crop.
  SmallVector<int64_t> shape(after.getShape());
  if (step.cropDim >= 0)
    shape[step.cropDim] = typeOf(v).getDimSize(step.cropDim) * n;
  auto resultType = RankedTensorType::get(shape, global.getElementType());
  switch (step.kind) {
  case ReshardStep::Kind::AllReduce:
    v = allReduce(loc, v, step.axes, step.reduction);
    break;
  case ReshardStep::Kind::ReduceScatter:
    v = shard::ReduceScatterOp::create(
        b, loc, resultType, gridAttr, axesAttr, v,
        shard::ReductionKindAttr::get(ctx, reductionOf(step.reduction)),
        b.getIndexAttr(step.dim));
    break;
  case ReshardStep::Kind::AllSlice:
    v = shard::AllSliceOp::create(b, loc, resultType, v, gridName,
                                  toGridAxes(step.axes), step.dim);
    break;
  case ReshardStep::Kind::AllGather:
    v = shard::AllGatherOp::create(b, loc, resultType, gridName,
                                   toGridAxes(step.axes), v,
                                   APInt(64, step.dim));
    break;
  case ReshardStep::Kind::AllToAll:
    v = shard::AllToAllOp::create(b, loc, resultType, gridAttr, axesAttr, v,
                                  b.getIndexAttr(step.dim),
                                  b.getIndexAttr(step.concatDim));
    break;
  case ReshardStep::Kind::Shift:
  case ReshardStep::Kind::MoeExchange:
    // The ring's shifts and the experts' exchanges come from ops' local
    // lowerings, never from resharding a value.
    llvm_unreachable("a resharding plan has no shift or moe_exchange step");
  }
  if (step.cropDim >= 0)
    v = fit(v, step.cropDim, step.cropSize);
  return v;
}

/// The grid axes a value is split over when it is split along its first
/// dimension only, evenly, with nothing pending (so each piece is one
/// contiguous range of its row-major elements); nothing otherwise.
static std::optional<GridAxes> leadingSplit(const TensorSharding &sharding,
                                            RankedTensorType type,
                                            ArrayRef<int64_t> gridShape) {
  if (sharding.isPartial() || type.getRank() == 0 || sharding.piece(0) != 0)
    return std::nullopt;
  for (size_t dim = 1; dim < sharding.dims.size(); ++dim)
    if (!sharding.dims[dim].empty())
      return std::nullopt;
  int64_t pieces = 1;
  for (int64_t axis : sharding.dims[0])
    pieces *= gridShape[axis];
  if (type.getDimSize(0) % pieces != 0)
    return std::nullopt;
  return sharding.dims[0];
}

FailureOr<Value> Partitioner::wholeRowsView(Value global,
                                            const TensorSharding &target,
                                            Location loc) {
  // A view of whole rows is whole rows of what it views: when the viewed
  // value was already resharded to rows split the same way (a weight
  // gradient's [rows, k] reshape of an activation gradient that the input
  // gradient gathered over the sequence), reshape that copy instead of
  // gathering again. Each piece is the same contiguous range of elements
  // in both shapes, so the local reshape is exact.
  Operation *def = global.getDefiningOp();
  if (!def || !isa<ViewOpInterface>(def) || def->getNumOperands() != 1)
    return failure();
  std::optional<GridAxes> rows =
      leadingSplit(target, typeOf(global), gridShape);
  if (!rows)
    return failure();
  Value viewed = def->getOperand(0);
  Operation *viewedDef = viewed.getDefiningOp();
  bool perRegion = regather.contains(viewed) ||
                   (viewedDef && viewedDef->hasAttr(DtcDialect::kRegatherAttr));
  for (const Local &done : reshards[viewed]) {
    if ((perRegion && done.region != region) ||
        leadingSplit(done.sharding, typeOf(viewed), gridShape) != rows)
      continue;
    Block::iterator start = mark();
    Value v = ReshapeOp::create(
        b, loc, localType(typeOf(global), target, gridShape), done.value);
    tagSince(start);
    reshards[global].push_back({v, target, perRegion ? region : std::string()});
    return v;
  }
  return failure();
}

FailureOr<Value>
Partitioner::reshard(Value global, const TensorSharding &target, Location loc) {
  Local current = locals.lookup(global);
  if (!current.value)
    return emitError(loc)
           << "internal error: value used before it was partitioned";
  if (current.sharding == target)
    return current.value;
  // A dtc.regather argument (ZeRO-3's parameters) or the result of an op
  // marked dtc.regather (sequence parallelism's split activations) is
  // gathered again in each region that needs it, not kept from the first.
  Operation *def = global.getDefiningOp();
  bool perRegion = regather.contains(global) ||
                   (def && def->hasAttr(DtcDialect::kRegatherAttr) &&
                    !current.sharding.isPartial());
  for (const Local &done : reshards[global])
    if (done.sharding == target && (!perRegion || done.region == region))
      return done.value;
  if (FailureOr<Value> viewed = wholeRowsView(global, target, loc);
      succeeded(viewed))
    return *viewed;

  RankedTensorType globalType = typeOf(global);
  ReshardPlan plan;
  std::string problem;
  if (!planReshard(globalType.getShape(),
                   elementBytes(globalType.getElementType()), current.sharding,
                   target, gridShape, plan, problem))
    return emitError(loc) << "cannot reshard a value from "
                          << current.sharding.str() << " to " << target.str()
                          << ": " << problem;

  // Collectives on a parameter's gradient are still that gradient.
  ArrayAttr savedGradientOf = gradientOf;
  if (auto result = dyn_cast<OpResult>(global))
    if (auto names = result.getOwner()->getAttrOfType<ArrayAttr>(
            DtcDialect::kGradientOfAttr))
      if (result.getResultNumber() < names.size())
        gradientOf = ArrayAttr::get(ctx, {names[result.getResultNumber()]});
  Block::iterator start = mark();
  Value v = current.value;
  for (const ReshardStep &step : plan.steps)
    v = emitStep(step, v, globalType, loc);
  tagSince(start);
  gradientOf = savedGradientOf;
  reshards[global].push_back({v, target, perRegion ? region : std::string()});
  return v;
}

LogicalResult Partitioner::partitionReturn(func::ReturnOp ret) {
  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  SmallVector<DictionaryAttr> resultAttrs;
  phase = enumAttr(ctx, Phase::Optimizer);
  region = regionKey(Phase::Optimizer);
  gradientOf = nullptr;
  for (auto [idx, operand] : llvm::enumerate(ret.getOperands())) {
    auto global = typeOf(operand);
    // A state update keeps its argument's layout; everything else is
    // returned whole.
    TensorSharding target = TensorSharding::replicated(global.getRank());
    if (auto updates = step.getResultAttrOfType<IntegerAttr>(
            idx, DtcDialect::kUpdatesAttr))
      if (auto attr = local.getArgAttrOfType<ShardingAttr>(
              updates.getInt(), DtcDialect::kShardingAttr)) {
        target = fromShardingAttr(attr);
        normalizePieces(target, global.getShape(), gridShape);
      }
    // A result whose layout the plan fixed (a message to another pipeline
    // stage, which receives it with that layout) keeps it.
    if (auto attr = step.getResultAttrOfType<ShardingAttr>(
            idx, DtcDialect::kShardingAttr)) {
      target = fromShardingAttr(attr);
      normalizePieces(target, global.getShape(), gridShape);
    }
    FailureOr<Value> value = reshard(operand, target, ret.getLoc());
    if (failed(value))
      return failure();
    results.push_back(*value);
    resultTypes.push_back(value->getType());
    NamedAttrList attrs(step.getResultAttrDict(idx));
    attrs.set(DtcDialect::kGlobalTypeAttr, TypeAttr::get(global));
    attrs.set(DtcDialect::kShardingAttr, toShardingAttr(target, ctx, gridName));
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
    SmallVector<func::FuncOp> steps = trainSteps(module);
    if (steps.empty()) {
      module.emitError() << "no training step to partition";
      return signalPassFailure();
    }
    std::optional<Plan> plan = getPlan(module);
    if (!plan) {
      module.emitError() << "no dtc.plan with a grid (run a planner such as "
                            "dtc-apply-strategy first)";
      return signalPassFailure();
    }
    FailureOr<SmallVector<int64_t>> shape = getGridShape(module, plan->grid);
    if (failed(shape))
      return signalPassFailure();
    // Every step function (one per pipeline stage) on its own.
    for (func::FuncOp step : steps) {
      Partitioner partitioner(step, plan->grid, *shape, plan->microbatchAxes);
      if (failed(partitioner.run()))
        return signalPassFailure();
    }
    for (func::FuncOp local : trainSteps(module))
      if (failed(fixUnitMicroBatchAxes(local, plan->grid, *shape,
                                       plan->microbatchAxes)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace mlir::dtc
