//===- SlotPlanning.cpp - where and when the values of a program live ----===//
//
// Buffers live in memory slots planned by liveness: a slot is reused once
// every value viewing it is dead (best fit within its pool, at most twice
// the size for a value the backward keeps; else the largest free slot
// grown), reshapes are views of their operand's slot, and
// optimizer updates write their parameter and state in place. Pipelines
// add when values exist (per step, per micro-batch, accumulated) and a
// copy of a slot per micro-batch in flight.
//
//===----------------------------------------------------------------------===//
#include "EmitterInternal.h"
#include "dtc/Dialect/KernelRule.h"
#include "dtc/Dialect/Utils.h"

using namespace mlir;
using namespace mlir::dtc;
using namespace mlir::dtc::emitter;

RankedTensorType emitter::typeOf(Value v) { return tensorTypeOf(v); }

std::optional<std::string> emitter::dtypeName(Type type) {
  return kernelDTypeName(type);
}

int64_t emitter::elementBytes(Type type) {
  return type.isInteger(64) ? 8 : type.isBF16() || type.isF16() ? 2 : 4;
}

json emitter::shapeJson(ArrayRef<int64_t> shape) {
  return json(std::vector<int64_t>(shape.begin(), shape.end()));
}

//===----------------------------------------------------------------------===//
// Slots and buffers
//===----------------------------------------------------------------------===//

int SlotPlan::newSlot(int64_t bytes, MemoryCategory category, bool pinned,
                      int chunk) {
  slots.push_back(
      {bytes, category, categoryName(category).str(), pinned, 0, chunk});
  return slots.size() - 1;
}

int SlotPlan::addBuffer(int slot, RankedTensorType type,
                        std::optional<std::string> tensor) {
  int64_t bytes = type.getNumElements() * elementBytes(type.getElementType());
  slots[slot].bytes = std::max(slots[slot].bytes, bytes);
  json buffer = {{"slot", slot},
                 {"dtype", *dtypeName(type.getElementType())},
                 {"shape", shapeJson(type.getShape())}};
  if (tensor)
    buffer["tensor"] = *tensor;
  buffers.push_back(std::move(buffer));
  bufferSlot.push_back(slot);
  return buffers.size() - 1;
}

FailureOr<int> SlotPlan::newBuffer(int slot, Value value, Location loc,
                                   std::optional<std::string> tensor,
                                   bool bind) {
  RankedTensorType type = typeOf(value);
  if (!dtypeName(type.getElementType()))
    return emitError(loc) << "element type " << type.getElementType()
                          << " is not supported by the runtime yet (f32, "
                             "bf16, f16 floats, i32/i64 ids)";
  int id = addBuffer(slot, type, std::move(tensor));
  slots[slot].liveValues++;
  if (bind)
    bufferOf[value] = id;
  return id;
}

/// Whether a backward op reads `value`, a forward value, or a view of it.
static bool keptForBackward(Value value) {
  Operation *def = value.getDefiningOp();
  if (!def || !isPhase(def, Phase::Forward))
    return false;
  SmallVector<Value> views{value};
  while (!views.empty()) {
    Value v = views.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (isBackward(user))
        return true;
      if (isa<ViewOpInterface>(user))
        views.append(user->result_begin(), user->result_end());
    }
  }
  return false;
}

FailureOr<int> SlotPlan::allocate(Value value, MemoryCategory category) {
  RankedTensorType type = typeOf(value);
  int64_t bytes = type.getNumElements() * elementBytes(type.getElementType());
  // Pipelines: a micro-batch's values live in their chunk's per-micro-batch
  // slots, apart from what one copy serves.
  int chunk = -1;
  std::string key = categoryName(category).str();
  if (auto it = pools.find(value); it != pools.end()) {
    // A micro-batch's share of a gradient is working memory; the gradient
    // is its sum over the micro-batches.
    category = MemoryCategory::Activation;
    key = categoryName(category).str();
    if (it->second.first == Pool::MicroBatch) {
      chunk = it->second.second;
      key += "@chunk" + std::to_string(chunk);
    }
  }
  // Best fit among free slots of this category; else grow the largest free
  // one if it is smaller (cheaper than a new slot); else a new slot.
  std::string poolName = key;
  if (gathered.contains(value))
    poolName += "/gathered";
  FreePool &pool = freeSlots[poolName];
  int chosen = -1;
  // Best fit, but a value the backward keeps takes no slot over twice its
  // size: a sequence-parallel shard would hold a gathered copy's slot from
  // the forward to the backward, and every later gathered copy would need a
  // new one. LLaMA-70B's 8 layers on dp=8,tp=8 with sequence parallelism
  // planned 16.4 GiB of activations for the 5.7 GiB the backward reads, more
  // than without sequence parallelism (13.8); 6.9 GiB this way.
  auto it = pool.lower_bound({bytes, 0, 0});
  if (it != pool.end() && std::get<0>(*it) > 2 * bytes &&
      keptForBackward(value))
    it = pool.end();
  // None fits: grow the first released of the largest, if smaller.
  if (it == pool.end() && !pool.empty() && std::get<0>(*pool.rbegin()) < bytes)
    it = pool.lower_bound({std::get<0>(*pool.rbegin()), 0, 0});
  if (it != pool.end()) {
    chosen = std::get<2>(*it);
    pool.erase(it);
  } else {
    chosen = newSlot(bytes, category, /*pinned=*/false, chunk);
  }
  slots[chosen].pool = poolName;
  return newBuffer(chosen, value, value.getLoc());
}

int SlotPlan::alias(Value value, int buffer) {
  bufferOf[value] = buffer;
  slots[bufferSlot[buffer]].liveValues++;
  return buffer;
}

void SlotPlan::release(Value value) {
  auto it = bufferOf.find(value);
  if (it == bufferOf.end())
    return;
  Slot &slot = slots[bufferSlot[it->second]];
  if (--slot.liveValues == 0 && !slot.pinned)
    freeSlots[slot.pool].insert(
        {slot.bytes, releases++, bufferSlot[it->second]});
}

void SlotPlan::releaseSlot(int slot) {
  freeSlots[slots[slot].pool].insert({slots[slot].bytes, releases++, slot});
}

MemoryCategory SlotPlan::categoryOf(Value value, int64_t index) const {
  // Parameter gradients held from the backward into the optimizer are
  // "grad": the reduced gradients of plain data parallelism, the full ones
  // ZeRO-1 reduce-scatters in the optimizer, the pieces ZeRO-2/3 keep. Every
  // other value of the step (activations, their gradients, a full gradient
  // ZeRO-2 reduce-scatters as soon as it is complete, backward and
  // optimizer temporaries) is transient working memory, "activation".
  if (updatePieces.contains(value))
    return MemoryCategory::Activation;
  if (auto result = dyn_cast<OpResult>(value))
    if (auto names = result.getOwner()->getAttrOfType<ArrayAttr>(
            DtcDialect::kGradientOfAttr))
      if (result.getResultNumber() < names.size())
        if (auto name = dyn_cast<StringAttr>(names[result.getResultNumber()]);
            name && !name.getValue().empty() &&
            (!gradLifetimes || index < 0 ||
             (index < optimizerStart &&
              lastUse.lookup(value) >= optimizerStart)))
          return MemoryCategory::Grad;
  return MemoryCategory::Activation;
}

int SlotPlan::updatedArgumentBuffer(Value result, int64_t index) {
  if (!result.hasOneUse() || !isa<func::ReturnOp>(*result.user_begin()))
    return -1;
  auto updates = step.getResultAttrOfType<IntegerAttr>(
      result.use_begin()->getOperandNumber(), DtcDialect::kUpdatesAttr);
  if (!updates || updates.getInt() < 0 ||
      updates.getInt() >= step.getNumArguments())
    return -1;
  Value arg = step.getArgument(updates.getInt());
  auto it = bufferOf.find(arg);
  if (it == bufferOf.end() || arg.getType() != result.getType() ||
      (lastUse.count(arg) && lastUse.lookup(arg) >= index))
    return -1;
  return alias(result, it->second);
}

json SlotPlan::slotsJson() const {
  json list = json::array();
  for (const Slot &slot : slots) {
    json entry = {{"bytes", slot.bytes},
                  {"category", categoryName(slot.category).str()}};
    if (slot.chunk >= 0) {
      entry["scope"] = scopeName(ValueScope::MicroBatch).str();
      entry["chunk"] = slot.chunk;
    }
    list.push_back(std::move(entry));
  }
  return list;
}

//===----------------------------------------------------------------------===//
// When values exist
//===----------------------------------------------------------------------===//

int64_t emitter::phaseList(StringRef phase) {
  if (phase == artifactPhaseName(ArtifactPhase::Forward))
    return 0;
  if (phase == artifactPhaseName(ArtifactPhase::BackwardInput))
    return 1;
  if (phase == artifactPhaseName(ArtifactPhase::BackwardWeight))
    return 2;
  return -1;
}

llvm::DenseSet<Value> emitter::gatheredParameters(func::FuncOp step) {
  llvm::DenseSet<Value> gathered;
  for (Operation &op : step.getBody().front())
    if (isa<shard::AllGatherOp, shard::AllToAllOp, PadOp, TransposeOp>(op) &&
        llvm::any_of(op.getOperands(), [&](Value v) {
          auto arg = dyn_cast<BlockArgument>(v);
          return gathered.contains(v) ||
                 (arg && step.getArgAttr(arg.getArgNumber(),
                                         DtcDialect::kRegatherAttr));
        }))
      gathered.insert(op.getResult(0));
  return gathered;
}

bool emitter::isWholeInputGather(Operation &op,
                                 const llvm::DenseMap<Value, ValueScope> &scope,
                                 ArrayRef<int64_t> mbAxes) {
  auto gather = dyn_cast<shard::AllGatherOp>(op);
  if (!gather || gather.getGridAxes().empty() ||
      !llvm::all_of(gather.getGridAxes(), [&](int16_t a) {
        return llvm::is_contained(mbAxes, int64_t(a));
      }))
    return false;
  auto arg = dyn_cast<BlockArgument>(gather.getInput());
  return arg && scope.lookup(arg) == ValueScope::MicroBatch;
}

namespace {

/// Per-micro-batch values are split over, or pending sums over, the
/// micro-batch axes; a reduction over them is accumulated; a message says
/// when it travels.
class ScopeClassifier {
public:
  ScopeClassifier(func::FuncOp step, ArrayRef<int64_t> mbAxes,
                  llvm::DenseMap<Value, ValueScope> &scope)
      : step(step), mbAxes(mbAxes), scope(scope),
        gathered(gatheredParameters(step)) {}

  void classifyArguments();
  LogicalResult classifyOp(Operation &op);

private:
  bool isMicroBatchAxis(int64_t a) const {
    return llvm::is_contained(mbAxes, a);
  }
  bool anyMicroBatchAxis(ArrayRef<int16_t> axes) const {
    return llvm::any_of(axes, [&](int16_t a) { return isMicroBatchAxis(a); });
  }
  bool splitOverMicroBatches(ShardingAttr attr) const;
  bool isMicroBatchReduce(Operation &op) const {
    auto reduce = dyn_cast<shard::AllReduceOp>(op);
    return reduce && anyMicroBatchAxis(reduce.getGridAxes());
  }
  /// ZeRO-3 gathers its parameters per micro-batch: a forward or backward
  /// gather of a stored piece runs in the list of the micro-batch that
  /// reads it and its copy dies there, instead of once per step with every
  /// parameter whole through all the micro-batches (which is ZeRO-2's
  /// memory). dp peers share a stage and its lists, so they issue the same
  /// gathers in the same order.
  bool isPerMicroBatchGather(Operation &op) const;
  /// A collective other than a reduction or slice may not cross the
  /// micro-batch axes.
  LogicalResult checkCollectiveAxes(Operation &op) const;

  func::FuncOp step;
  ArrayRef<int64_t> mbAxes;
  llvm::DenseMap<Value, ValueScope> &scope;
  llvm::DenseSet<Value> gathered;
};

bool ScopeClassifier::splitOverMicroBatches(ShardingAttr attr) const {
  if (!attr)
    return false;
  for (DenseI64ArrayAttr dim : attr.getDims())
    for (int64_t a : dim.asArrayRef())
      if (isMicroBatchAxis(a))
        return true;
  return false;
}

void ScopeClassifier::classifyArguments() {
  for (BlockArgument arg : step.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto when = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kScopeAttr);
    ValueScope s = ValueScope::Step;
    if (when)
      s = when.getValue() == scopeName(ValueScope::MicroBatch)
              ? ValueScope::MicroBatch
          : when.getValue() == scopeName(ValueScope::Accumulated)
              ? ValueScope::Accumulated
              : ValueScope::Step;
    else if (splitOverMicroBatches(step.getArgAttrOfType<ShardingAttr>(
                 i, DtcDialect::kShardingAttr)))
      s = ValueScope::MicroBatch;
    scope[arg] = s;
  }
}

bool ScopeClassifier::isPerMicroBatchGather(Operation &op) const {
  auto phase = op.getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
  return op.getNumResults() == 1 && gathered.contains(op.getResult(0)) &&
         phase && phaseList(phase.getValue()) >= 0;
}

LogicalResult ScopeClassifier::checkCollectiveAxes(Operation &op) const {
  SmallVector<int16_t> axes;
  if (auto c = dyn_cast<shard::AllGatherOp>(op))
    axes.assign(c.getGridAxes().begin(), c.getGridAxes().end());
  else if (auto c = dyn_cast<shard::ReduceScatterOp>(op))
    axes.assign(c.getGridAxes().begin(), c.getGridAxes().end());
  else if (auto c = dyn_cast<shard::AllToAllOp>(op))
    axes.assign(c.getGridAxes().begin(), c.getGridAxes().end());
  if (anyMicroBatchAxis(axes))
    return op.emitError()
           << "'" << op.getName()
           << "' over the micro-batch axis: this op needs the "
           << "whole batch at once (it mixes examples), so the model "
              "cannot be micro-batched";
  return success();
}

LogicalResult ScopeClassifier::classifyOp(Operation &op) {
  bool perMicroBatch = isPerMicroBatchGather(op), accumulated = false;
  for (Value operand : op.getOperands()) {
    perMicroBatch |= scope.lookup(operand) == ValueScope::MicroBatch;
    accumulated |= scope.lookup(operand) == ValueScope::Accumulated;
  }
  ValueScope s = perMicroBatch ? ValueScope::MicroBatch
                 : accumulated ? ValueScope::Accumulated
                               : ValueScope::Step;
  if (isMicroBatchReduce(op)) {
    auto reduce = cast<shard::AllReduceOp>(op);
    if (!perMicroBatch || reduce.getReduction() != shard::ReductionKind::Sum)
      return op.emitError()
             << "internal error: a reduction over micro-batches of a value "
                "that is not a per-micro-batch partial sum";
    s = ValueScope::Accumulated;
  } else if (auto slice = dyn_cast<shard::AllSliceOp>(op);
             slice && anyMicroBatchAxis(slice.getGridAxes())) {
    s = ValueScope::MicroBatch;
  } else if (isWholeInputGather(op, scope, mbAxes)) {
    // The input's every micro-batch: its whole local piece, once per step.
    s = ValueScope::Step;
    perMicroBatch = false;
  } else if (op.getDialect() && isa<shard::ShardDialect>(op.getDialect())) {
    if (failed(checkCollectiveAxes(op)))
      return failure();
  }
  if (perMicroBatch && accumulated && !isMicroBatchReduce(op))
    return op.emitError()
           << "'" << op.getName()
           << "' needs a value summed over the whole batch inside a "
              "micro-batch; the model mixes examples across the batch, so it "
              "cannot be micro-batched";
  for (Value r : op.getResults())
    scope[r] = s;
  return success();
}

} // namespace

LogicalResult
emitter::classifyScopes(func::FuncOp step, ArrayRef<int64_t> mbAxes,
                        llvm::DenseMap<Value, ValueScope> &scope) {
  ScopeClassifier classifier(step, mbAxes, scope);
  classifier.classifyArguments();
  for (Operation &op : step.getBody().front())
    if (!isa<func::ReturnOp>(op) && failed(classifier.classifyOp(op)))
      return failure();
  return success();
}
