//===- ProgramEmission.cpp - the ops of a step -> instructions -----------===//
//
// Every dtc op becomes the kernel of the same name (attributes serialized
// generically, so a new op needs no change here); shard collectives become
// collective instructions on communicators named after their grid axes.
// Arguments and returned values are the artifact's tensors, bound to
// pinned slots.
//
//===----------------------------------------------------------------------===//
#include "EmitterInternal.h"
#include "dtc/Dialect/KernelRule.h"
#include "dtc/Sharding/Sharding.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Base64.h"

using namespace mlir;
using namespace mlir::dtc;
using namespace mlir::dtc::emitter;

namespace {

json shardingJson(ShardingAttr sharding) {
  json dims = json::array();
  for (DenseI64ArrayAttr axes : sharding.getDims())
    dims.push_back(std::vector<int64_t>(axes.asArrayRef().begin(),
                                        axes.asArrayRef().end()));
  return dims;
}

/// A tensor's sharding keys: "sharding", and "pieces" when a split dimension
/// has a piece size other than the default.
void addSharding(json &tensor, ShardingAttr sharding) {
  tensor["sharding"] = shardingJson(sharding);
  if (!sharding.getPieces().empty()) {
    std::vector<int64_t> pieces(sharding.getDims().size(), 0);
    for (auto [dim, piece] : llvm::enumerate(sharding.getPieces()))
      pieces[dim] = piece;
    tensor["pieces"] = pieces;
  }
}

/// Where an argument's bytes count: step-wide optimizer state (loss
/// scaling's scalars) is not per parameter, it counts with the step
/// counter, not the optimizer bytes.
MemoryCategory argumentCategory(StringRef role, bool perParameter) {
  if (role == tensorRoleName(TensorRole::Param))
    return MemoryCategory::Param;
  if (role == tensorRoleName(TensorRole::OptimizerState) && perParameter)
    return MemoryCategory::Optimizer;
  if (role == tensorRoleName(TensorRole::Input))
    return MemoryCategory::Input;
  return MemoryCategory::Scalar;
}

bool isMatmul(Operation *op) {
  return isa<MatmulOp, MatmulBiasOp, MatmulGeluOp>(op);
}

} // namespace

bool mlir::dtc::foldsIntoMatmuls(Operation *op) {
  auto transpose = dyn_cast<TransposeOp>(op);
  if (!transpose)
    return false;
  ArrayRef<int64_t> perm = transpose.getPermutation();
  int64_t rank = perm.size();
  if (rank < 2 || perm[rank - 2] != rank - 1 || perm[rank - 1] != rank - 2)
    return false;
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (perm[d] != d)
      return false;
  return !transpose->use_empty() &&
         llvm::all_of(transpose->getUses(), [](OpOperand &use) {
           return isMatmul(use.getOwner()) && use.getOperandNumber() < 2;
         });
}

void ProgramEmitter::foldTransposes() {
  for (Operation &op : step.getBody().front())
    if (auto transpose = dyn_cast<TransposeOp>(op);
        transpose && foldsIntoMatmuls(transpose))
      foldedTransposes[transpose.getResult()] = transpose.getX();
}

void ProgramEmitter::instruction(StringRef kernel, ArrayRef<int> in,
                                 ArrayRef<int> out, json attrs, Operation *op) {
  json inst = {{"op", kernel.str()},
               {"in", std::vector<int>(in.begin(), in.end())},
               {"out", std::vector<int>(out.begin(), out.end())}};
  if (!attrs.empty())
    inst["attrs"] = std::move(attrs);
  if (op)
    if (auto phase = op->getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr))
      inst["phase"] = phase.getValue().str();
  current->push_back(std::move(inst));
}

//===----------------------------------------------------------------------===//
// Arguments, constants and the return: the artifact's tensors
//===----------------------------------------------------------------------===//

LogicalResult ProgramEmitter::emitArguments() {
  for (unsigned i = 0; i < step.getNumArguments(); ++i)
    if (failed(emitArgument(i)))
      return failure();
  return success();
}

LogicalResult ProgramEmitter::emitArgument(unsigned i) {
  BlockArgument arg = step.getArgument(i);
  auto attr = [&](StringRef name) { return step.getArgAttr(i, name); };
  auto role = dyn_cast_or_null<StringAttr>(attr(DtcDialect::kRoleAttr));
  // A message from another stage: its buffer comes with its recv.
  if (role && role.getValue() == kRecvRole)
    return success();
  auto name = dyn_cast_or_null<StringAttr>(attr(DtcDialect::kNameAttr));
  auto global = dyn_cast_or_null<TypeAttr>(attr(DtcDialect::kGlobalTypeAttr));
  auto sharding =
      dyn_cast_or_null<ShardingAttr>(attr(DtcDialect::kShardingAttr));
  if (!role || !name || !global || !sharding)
    return emitError(arg.getLoc())
           << "argument " << i
           << " lacks dtc.role, dtc.name, "
              "dtc.global_type or dtc.sharding (is the module partitioned?)";
  auto globalType = cast<RankedTensorType>(global.getValue());
  std::optional<std::string> dtype = dtypeName(globalType.getElementType());
  if (!dtype)
    return emitError(arg.getLoc())
           << "\"" << name.getValue() << "\" has element type "
           << globalType.getElementType()
           << ", which the runtime does not support yet (f32, bf16, "
              "f16 floats, i32/i64 ids)";
  // The tensor lives on devices: a micro-batch axis is no device, and the
  // buffer holds the rank's piece of every micro-batch (each micro-batch
  // slices its own).
  TensorSharding deviceSharding = fromShardingAttr(sharding);
  for (GridAxes &dim : deviceSharding.dims)
    llvm::erase_if(dim, [&](int64_t a) { return plan.isMicroBatchAxis(a); });
  json tensor = {{"name", name.getValue().str()},
                 {"role", role.getValue().str()},
                 {"dtype", *dtype},
                 {"shape", shapeJson(globalType.getShape())}};
  addSharding(tensor, toShardingAttr(deviceSharding, step.getContext(),
                                     sharding.getGrid().getValue()));
  if (auto init = dyn_cast_or_null<StringAttr>(attr(DtcDialect::kInitAttr)))
    tensor["init"] = init.getValue().str();
  if (auto of = dyn_cast_or_null<StringAttr>(attr(DtcDialect::kOfAttr)))
    tensor["of"] = of.getValue().str();
  if (auto max = dyn_cast_or_null<IntegerAttr>(attr(DtcDialect::kMaxAttr)))
    tensor["max"] = max.getInt();
  for (auto [name, key] : {std::pair{DtcDialect::kStripedInputAttr, "striped"},
                           std::pair{DtcDialect::kZigzagInputAttr, "zigzag"}})
    if (auto ordered = dyn_cast_or_null<DenseI64ArrayAttr>(attr(name)))
      tensor[key] = {{"dim", ordered[0]}, {"ways", ordered[1]}};
  if (auto kind =
          dyn_cast_or_null<StringAttr>(attr(DtcDialect::kStateKindAttr)))
    tensor["kind"] = kind.getValue().str();
  tables.declareTensor(tensor);

  bool perParameter = static_cast<bool>(attr(DtcDialect::kOfAttr));
  int slot = memory.newSlot(0, argumentCategory(role.getValue(), perParameter),
                            /*pinned=*/true);
  RankedTensorType local = localType(globalType, deviceSharding, plan.grid);
  memory.alias(arg, memory.addBuffer(slot, local, name.getValue().str()));
  return success();
}

LogicalResult ProgramEmitter::emitConstant(arith::ConstantOp op) {
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  if (!dense || !isa<RankedTensorType>(op.getType()))
    return op.emitError() << "only dense tensor constants are supported";
  int slot = memory.newSlot(0, MemoryCategory::Constant, /*pinned=*/true);
  FailureOr<int> buffer = memory.newBuffer(slot, op.getResult(), op.getLoc());
  if (failed(buffer))
    return failure();
  Type elementType = dense.getElementType();
  json entry = {{"buffer", *buffer}};
  if (dense.isSplat()) {
    if (isa<FloatType>(elementType))
      entry["splat"] = dense.getSplatValue<APFloat>().convertToDouble();
    else
      entry["splat"] = dense.getSplatValue<APInt>().getSExtValue();
  } else {
    // Raw data is packed little-endian elements on the hosts we support.
    ArrayRef<char> raw = dense.getRawData();
    entry["data"] = llvm::encodeBase64(raw);
  }
  constants.push_back(entry);
  return success();
}

LogicalResult ProgramEmitter::emitReturn(func::ReturnOp ret) {
  for (auto [idx, value] : llvm::enumerate(ret.getOperands())) {
    auto role =
        step.getResultAttrOfType<StringAttr>(idx, DtcDialect::kRoleAttr);
    if (!role)
      return ret.emitError() << "result " << idx << " has no dtc.role";
    if (role.getValue() == kSendRole)
      continue; // emitted where the value is computed
    int source = memory.bufferOf.lookup(value);
    if (role.getValue() != kUpdateRole) {
      if (failed(emitOutput(ret, idx, value, role.getValue(), source)))
        return failure();
      continue;
    }
    auto updates =
        step.getResultAttrOfType<IntegerAttr>(idx, DtcDialect::kUpdatesAttr);
    if (!updates)
      return ret.emitError()
             << "update result " << idx << " has no dtc.updates";
    int target = memory.bufferOf.lookup(step.getArgument(updates.getInt()));
    if (source != target)
      instruction(kCopyKernel, {source}, {target}, json::object(), nullptr);
  }
  return success();
}

/// The loss and returned values (gradients) get a buffer of their own,
/// bound to a tensor the runtime reads after the step.
LogicalResult ProgramEmitter::emitOutput(func::ReturnOp ret, unsigned idx,
                                         Value value, StringRef role,
                                         int source) {
  auto name = step.getResultAttrOfType<StringAttr>(idx, DtcDialect::kNameAttr);
  auto global =
      step.getResultAttrOfType<TypeAttr>(idx, DtcDialect::kGlobalTypeAttr);
  auto sharding =
      step.getResultAttrOfType<ShardingAttr>(idx, DtcDialect::kShardingAttr);
  if (!name || !global || !sharding)
    return ret.emitError()
           << "result " << idx
           << " lacks dtc.name, dtc.global_type or dtc.sharding";
  auto globalType = cast<RankedTensorType>(global.getValue());
  bool isLoss = role == tensorRoleName(TensorRole::Loss);
  json tensor = {
      {"name", name.getValue().str()},
      {"role",
       tensorRoleName(isLoss ? TensorRole::Loss : TensorRole::Output).str()},
      {"dtype", *dtypeName(globalType.getElementType())},
      {"shape", shapeJson(globalType.getShape())}};
  addSharding(tensor, sharding);
  if (auto of = step.getResultAttrOfType<StringAttr>(idx, DtcDialect::kOfAttr))
    tensor["of"] = of.getValue().str();
  tables.declareTensor(tensor);
  int slot =
      memory.newSlot(0, isLoss ? MemoryCategory::Scalar : MemoryCategory::Grad,
                     /*pinned=*/true);
  FailureOr<int> target = memory.newBuffer(
      slot, value, ret.getLoc(), name.getValue().str(), /*bind=*/false);
  if (failed(target))
    return failure();
  instruction(kCopyKernel, {source}, {*target}, json::object(), nullptr);
  return success();
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

FailureOr<SmallVector<int>> ProgramEmitter::operandBuffers(Operation *op) {
  SmallVector<int> in;
  for (Value operand : op->getOperands()) {
    if (Value source = foldedTransposes.lookup(operand))
      operand = source;
    auto it = memory.bufferOf.find(operand);
    if (it == memory.bufferOf.end())
      return op->emitError() << "operand has no buffer (unsupported producer)";
    in.push_back(it->second);
  }
  return in;
}

LogicalResult ProgramEmitter::emitOp(Operation *op, int64_t index) {
  FailureOr<SmallVector<int>> operands = operandBuffers(op);
  if (failed(operands))
    return failure();
  ArrayRef<int> in = *operands;
  LogicalResult result =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          .Case(
              [&](shard::AllReduceOp c) { return emitAllReduce(c, in, index); })
          .Case([&](shard::AllGatherOp c) {
            if (llvm::all_of(c.getGridAxes(), [&](int16_t a) {
                  return plan.isMicroBatchAxis(a);
                }))
              return emitWholeInput(op, in, index);
            return emitCollective(
                op, CollectiveKind::AllGather, c.getGridAxes(),
                {{"axis", c.getGatherAxis().getSExtValue()}}, in, index);
          })
          .Case([&](shard::ReduceScatterOp c) {
            return emitCollective(
                op, CollectiveKind::ReduceScatter, c.getGridAxes(),
                {{"axis", c.getScatterAxis().getSExtValue()},
                 {"reduction", reductionName(c.getReduction())}},
                in, index);
          })
          .Case([&](shard::AllSliceOp c) { return emitAllSlice(c, in, index); })
          .Case([&](shard::AllToAllOp c) {
            return emitCollective(
                op, CollectiveKind::AllToAll, c.getGridAxes(),
                {{"split_axis", c.getSplitAxis().getSExtValue()},
                 {"concat_axis", c.getConcatAxis().getSExtValue()}},
                in, index);
          })
          .Case([&](shard::ShiftOp c) {
            return emitCollective(op, CollectiveKind::Shift, c.getGridAxes(),
                                  {{"offset", c.getOffset()}}, in, index);
          })
          .Case([&](MoeExchangeOp c) {
            return emitCollective(
                op, CollectiveKind::MoeExchange, c.getGridAxes(),
                {{"to_experts", c.getToExperts()}}, in, index);
          })
          .Case([&](ViewOpInterface) { return emitView(op, in, index); })
          .Default([&](Operation *op) { return emitKernel(op, in, index); });
  if (failed(result))
    return failure();
  releaseDeadValues(op, index);
  return success();
}

void ProgramEmitter::releaseDeadValues(Operation *op, int64_t index) {
  llvm::SmallDenseSet<Value> seen;
  for (Value operand : op->getOperands()) {
    // A folded transpose's source is read here in its place.
    if (Value source = foldedTransposes.lookup(operand))
      operand = source;
    if (seen.insert(operand).second && memory.lastUse.lookup(operand) == index)
      memory.release(operand);
  }
  for (Value res : op->getResults())
    if (res.use_empty())
      memory.release(res);
}

LogicalResult ProgramEmitter::emitCollective(Operation *op, CollectiveKind kind,
                                             ArrayRef<int16_t> axes, json attrs,
                                             ArrayRef<int> in, int64_t index,
                                             bool inPlace) {
  FailureOr<std::string> comm = tables.communicator(axes);
  if (failed(comm))
    return failure();
  attrs["comm"] = *comm;
  if (auto bucket = op->getAttrOfType<IntegerAttr>(DtcDialect::kBucketAttr))
    attrs["bucket"] = bucket.getInt();
  Value result = op->getResult(0);
  int direct = inPlace ? -1 : memory.updatedArgumentBuffer(result, index);
  FailureOr<int> out =
      inPlace       ? FailureOr<int>(memory.alias(result, in[0]))
      : direct >= 0 ? FailureOr<int>(direct)
                    : memory.allocate(result, memory.categoryOf(result, index));
  if (failed(out))
    return failure();
  instruction(collectiveName(kind), in, {*out}, std::move(attrs), op);
  return success();
}

LogicalResult ProgramEmitter::emitAllReduce(shard::AllReduceOp op,
                                            ArrayRef<int> in, int64_t index) {
  // Reduce in place when this is the input's last reader (the usual case: a
  // gradient reduced right before its update) ...
  Value input = op.getInput();
  const Slot &inputSlot = memory.slots[memory.bufferSlot[in[0]]];
  // ... and no other live value (a reshape view) shares its bytes, and the
  // result is the same kind of memory (a gradient reduced in the backward
  // is "grad" from there to its update; its operand was working memory).
  bool inPlace = memory.lastUse.lookup(input) == index && !inputSlot.pinned &&
                 inputSlot.liveValues == 1 &&
                 input.getType() == op.getResult().getType() &&
                 memory.categoryOf(op.getResult(), index) == inputSlot.category;
  json attrs = {{"reduction", reductionName(op.getReduction())}};
  return emitCollective(op, CollectiveKind::AllReduce, op.getGridAxes(),
                        std::move(attrs), in, index, inPlace);
}

LogicalResult ProgramEmitter::emitAllSlice(shard::AllSliceOp op,
                                           ArrayRef<int> in, int64_t index) {
  ArrayRef<int16_t> axes = op.getGridAxes();
  int64_t axis = op.getSliceAxis().getSExtValue();
  auto mb =
      llvm::find_if(axes, [&](int16_t a) { return plan.isMicroBatchAxis(a); });
  if (mb == axes.end())
    return emitCollective(op, CollectiveKind::AllSlice, axes, {{"axis", axis}},
                          in, index);
  // A micro-batch's piece: the device axes (major) first, then the
  // micro-batch (minor) axis, which selects the running one.
  if (mb != axes.end() - 1)
    return op->emitError()
           << "a slice over the micro-batch axis must have it last";
  SmallVector<int16_t> deviceAxes(axes.begin(), mb);
  int source = in[0];
  int scratchSlot = -1;
  if (!deviceAxes.empty()) {
    FailureOr<std::string> comm = tables.communicator(deviceAxes);
    if (failed(comm))
      return failure();
    RankedTensorType whole = typeOf(op.getResult());
    SmallVector<int64_t> shape(whole.getShape());
    shape[axis] *= plan.grid[*mb];
    auto scratchType = RankedTensorType::get(shape, whole.getElementType());
    scratchSlot = memory.newSlot(scratchType.getNumElements() *
                                     elementBytes(whole.getElementType()),
                                 MemoryCategory::Activation, /*pinned=*/false);
    source = memory.addBuffer(scratchSlot, scratchType);
    instruction(collectiveName(CollectiveKind::AllSlice), in, {source},
                {{"comm", *comm}, {"axis", axis}}, op);
  }
  FailureOr<int> out =
      memory.allocate(op.getResult(), memory.categoryOf(op.getResult(), index));
  if (failed(out))
    return failure();
  instruction(pipelineOpName(PipelineOp::MicrobatchSlice), {source}, {*out},
              {{"axis", axis}}, op);
  if (scratchSlot >= 0)
    memory.releaseSlot(scratchSlot);
  return success();
}

LogicalResult ProgramEmitter::emitWholeInput(Operation *op, ArrayRef<int> in,
                                             int64_t index) {
  // Only this gather crosses the micro-batch axes (classifyScopes): it runs
  // once per step, where the input's buffer holds every micro-batch.
  Value result = op->getResult(0);
  FailureOr<int> out =
      memory.allocate(result, memory.categoryOf(result, index));
  if (failed(out))
    return failure();
  instruction("copy", in, {*out}, json::object(), op);
  return success();
}

LogicalResult ProgramEmitter::emitView(Operation *op, ArrayRef<int> in,
                                       int64_t index) {
  // A view of the operand's bytes unless the operand's slot is bound to a
  // tensor or constant (those hold nothing else).
  Value result = op->getResult(0);
  int operandSlot = memory.bufferSlot[in[0]];
  if (!memory.slots[operandSlot].pinned)
    return memory.newBuffer(operandSlot, result, op->getLoc());
  FailureOr<int> out =
      memory.allocate(result, memory.categoryOf(result, index));
  if (failed(out))
    return failure();
  instruction(op->getName().stripDialect(), in, {*out}, json::object(), op);
  return success();
}

LogicalResult ProgramEmitter::emitKernel(Operation *op, ArrayRef<int> in,
                                         int64_t index) {
  if (!op->getDialect() || !isa<DtcDialect>(op->getDialect()))
    return op->emitError() << "'" << op->getName()
                           << "' cannot be emitted into an artifact";
  json attrs = json::object();
  if (isMatmul(op)) {
    if (foldedTransposes.count(op->getOperand(0)))
      attrs["transpose_a"] = true;
    if (foldedTransposes.count(op->getOperand(1)))
      attrs["transpose_b"] = true;
  }
  // The same attribute object the op's verifier checked.
  FailureOr<json> inherent = kernelAttributes(op);
  if (failed(inherent))
    return failure();
  attrs.update(*inherent);
  SmallVector<int> out;
  for (OpResult res : op->getResults()) {
    if (int updated = inPlaceUpdateBuffer(op, res, index); updated >= 0) {
      out.push_back(updated);
      continue;
    }
    if (int direct = memory.updatedArgumentBuffer(res, index); direct >= 0) {
      out.push_back(direct);
      continue;
    }
    FailureOr<int> buffer = memory.allocate(res, memory.categoryOf(res, index));
    if (failed(buffer))
      return failure();
    out.push_back(*buffer);
  }
  instruction(op->getName().stripDialect(), in, out, std::move(attrs), op);
  return success();
}

int ProgramEmitter::inPlaceUpdateBuffer(Operation *op, OpResult result,
                                        int64_t index) {
  // Update a parameter or optimizer state where it lives when this op is
  // its last reader and the result replaces it (is returned as its new
  // value). Later readers of the result (mixed precision's cast of the new
  // master) read it there; a buffer of its own would live to the return's
  // copy.
  auto inPlace = dyn_cast<InPlaceOpInterface>(op);
  if (!inPlace)
    return -1;
  int64_t operandIdx = inPlace.getInPlaceOperand(result.getResultNumber());
  if (operandIdx < 0)
    return -1;
  Value source = op->getOperand(operandIdx);
  auto arg = dyn_cast<BlockArgument>(source);
  bool replacesArg = arg && llvm::any_of(result.getUses(), [&](OpOperand &use) {
                       if (!isa<func::ReturnOp>(use.getOwner()))
                         return false;
                       auto updates = step.getResultAttrOfType<IntegerAttr>(
                           use.getOperandNumber(), DtcDialect::kUpdatesAttr);
                       return updates && updates.getInt() == arg.getArgNumber();
                     });
  if (!replacesArg || memory.lastUse.lookup(source) != index)
    return -1;
  return memory.alias(result, memory.bufferOf[source]);
}

//===----------------------------------------------------------------------===//
// The program of a step without stages or micro-batches
//===----------------------------------------------------------------------===//

void ProgramEmitter::planSpmdLifetimes() {
  int64_t index = 0;
  memory.optimizerStart = -1;
  memory.gradLifetimes = true;
  for (Operation &op : step.getBody().front()) {
    auto phase = op.getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
    if (memory.optimizerStart < 0 &&
        ((phase &&
          phase.getValue() == artifactPhaseName(ArtifactPhase::Optimizer)) ||
         isa<func::ReturnOp>(op)))
      memory.optimizerStart = index;
    for (Value operand : op.getOperands()) {
      memory.lastUse[operand] = index;
      // A matmul reading a folded transpose reads its source.
      if (Value source = foldedTransposes.lookup(operand))
        memory.lastUse[source] = index;
    }
    ++index;
  }
}

LogicalResult ProgramEmitter::emitSpmdBody() {
  int64_t index = 0;
  for (Operation &op : step.getBody().front()) {
    LogicalResult result = success();
    if (foldedTransposes.count(op.getNumResults() ? op.getResult(0)
                                                  : Value())) {
      ++index;
      continue;
    }
    if (auto constant = dyn_cast<arith::ConstantOp>(op))
      result = emitConstant(constant);
    else if (auto ret = dyn_cast<func::ReturnOp>(op))
      result = emitReturn(ret);
    else
      result = emitOp(&op, index);
    if (failed(result))
      return failure();
    ++index;
  }
  return success();
}

FailureOr<json> ProgramEmitter::emitSpmdProgram() {
  foldTransposes();
  memory.gathered = gatheredParameters(step);
  planSpmdLifetimes();
  if (failed(emitArguments()) || failed(emitSpmdBody()))
    return failure();

  int64_t devices = 1;
  for (int64_t size : plan.grid)
    devices *= size;
  std::vector<int> ranks(devices);
  for (int64_t r = 0; r < devices; ++r)
    ranks[r] = r;
  // Moved, not listed in initializer lists (which copy): the program of a
  // large model is most of the compiler's memory.
  json program = {{"name", "spmd"}, {"ranks", ranks}};
  program["slots"] = memory.slotsJson();
  program["buffers"] = std::move(memory.buffers);
  program["constants"] = std::move(constants);
  program["instructions"] = std::move(instructions);
  return program;
}
