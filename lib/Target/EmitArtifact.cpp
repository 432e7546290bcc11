//===- EmitArtifact.cpp - partitioned module -> .dtc artifact body -------===//
//
// Every dtc op becomes the kernel of the same name (attributes serialized
// generically, so a new op needs no change here); shard collectives become
// collective instructions on communicators named after their grid axes.
// Buffers live in memory slots planned by liveness: a slot is reused once
// every value viewing it is dead, reshapes are views of their operand's
// slot, and optimizer updates write their parameter and state in place.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/KernelRule.h"
#include "dtc/Dialect/Plan.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Sharding/Sharding.h"
#include "dtc/Target/Artifact.h"
#include "dtc/Version.h"
#include "dtc/runtime/ArtifactFormat.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSwitch.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Base64.h"
#include <map>
#include <set>
#include <tuple>

using namespace mlir;
using namespace mlir::dtc;
using json = nlohmann::json;

namespace {

RankedTensorType typeOf(Value v) { return tensorTypeOf(v); }

std::optional<std::string> dtypeName(Type type) {
  return kernelDTypeName(type);
}

int64_t elementBytes(Type type) {
  return type.isInteger(64) ? 8 : type.isBF16() || type.isF16() ? 2 : 4;
}

json shapeJson(ArrayRef<int64_t> shape) {
  return json(std::vector<int64_t>(shape.begin(), shape.end()));
}

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

struct Slot {
  int64_t bytes = 0;
  std::string category;
  /// Free slots are reused within a pool: the category, apart for gathered
  /// ZeRO-3 parameters (short-lived and large: in the pool of ordinary
  /// activations they would grow slots that long-lived activations then
  /// keep).
  std::string pool;
  bool pinned = false; // bound to a tensor or a constant: never reused
  int liveValues = 0;
  /// Pipelines: a slot of one micro-batch of chunk `chunk` (the runtime
  /// keeps one copy per micro-batch in flight), else -1 (one copy).
  int chunk = -1;
};

/// What the programs of one artifact share: its tensors and communicators.
struct ArtifactState {
  json tensors = json::array(), communicators = json::array();
  std::map<std::vector<int16_t>, std::string> commNames;
  std::set<std::string> tensorNames;
};

/// Pipelines: when a value exists. Step values are computed once per step
/// before the micro-batches, Accumulated ones once after them (sums over
/// the micro-batches), MicroBatch ones once per micro-batch.
enum class ValueScope { Step, MicroBatch, Accumulated };

/// Pipelines: where a value's bytes live. Step: one copy for the step.
/// Temp: a per-micro-batch value read only by the instruction list that
/// computes it (one copy, reused by every list). MicroBatch: read by a
/// later list of its micro-batch (a copy per micro-batch in flight).
enum class Pool { Step, Temp, MicroBatch };

class Emitter {
public:
  Emitter(ModuleOp module, func::FuncOp step, ArrayRef<int64_t> grid,
          const Plan &plan, ArtifactState &shared)
      : module(module), step(step), grid(grid), plan(plan), shared(shared),
        tensors(shared.tensors), communicators(shared.communicators),
        commNames(shared.commNames) {}

  /// The program of a step without micro-batches or stages.
  FailureOr<json> run(const ArtifactOptions &options);
  /// The program of one pipeline stage (docs/artifact.md "Pipelines").
  FailureOr<json> runPipeline(const ArtifactOptions &options);

private:
  int newSlot(int64_t bytes, StringRef category, bool pinned, int chunk = -1);
  /// A buffer for `value` in `slot`; unless `bind` is false, `value` is
  /// henceforth read from it (output copies bind nothing).
  FailureOr<int> newBuffer(int slot, Value value, Location loc,
                           std::optional<std::string> tensor = std::nullopt,
                           bool bind = true);
  FailureOr<int> allocate(Value value, StringRef category);
  /// `value` lives in existing buffer `buffer` (in-place results).
  int alias(Value value, int buffer);
  void release(Value value);
  FailureOr<std::string> communicator(ArrayRef<int16_t> axes);
  LogicalResult emitArguments();
  LogicalResult emitConstant(arith::ConstantOp op);
  LogicalResult emitOp(Operation *op, int64_t index);
  LogicalResult emitReturn(func::ReturnOp ret);
  void instruction(StringRef kernel, ArrayRef<int> in, ArrayRef<int> out,
                   json attrs, Operation *op);
  /// `index`: the instruction computing `value` in the step's one list
  /// (ZeRO's accounting below), or -1 in pipeline lists (a parameter
  /// gradient is "grad").
  StringRef categoryOf(Value value, int64_t index = -1) const;
  /// The buffer of the argument `result` replaces when the step returns it
  /// as that argument's update and nothing reads the argument from
  /// instruction `index` on: the result is written there directly (no
  /// copy, no second buffer). -1 otherwise.
  int updatedArgumentBuffer(Value result, int64_t index);

  ModuleOp module;
  func::FuncOp step;
  ArrayRef<int64_t> grid;
  const Plan &plan;
  ArtifactState &shared;

  json &tensors, buffers = json::array(), constants = json::array(),
                 instructions = json::array(), &communicators,
                 slotsJson = json::array();
  /// Where instruction() appends (pipelines: the list being emitted).
  json *current = &instructions;
  std::vector<Slot> slots;
  /// Free slots of one category ordered by (bytes, release order): best fit
  /// and the largest slot in O(log n), the first released winning ties.
  using FreePool = std::set<std::tuple<int64_t, uint64_t, int>>;
  std::map<std::string, FreePool, std::less<>> freeSlots;
  uint64_t releases = 0;
  std::vector<int> bufferSlot;
  llvm::DenseMap<Value, int> bufferOf;
  llvm::DenseMap<Value, int64_t> lastUse;
  /// Index of the first optimizer instruction (the return's when none).
  int64_t optimizerStart = 0;
  /// Whether categoryOf decides "grad" by lifetime (the one-list step,
  /// where ZeRO's reduce-scatters place gradients); pipeline lists count
  /// every parameter gradient.
  bool gradLifetimes = false;
  /// Pipelines: a gradient's pieces cut after the flush, read only by the
  /// update (ZeRO-1's reduce-scatter of the accumulated gradient): working
  /// memory of the optimizer, not "grad".
  llvm::DenseSet<Value> updatePieces;
  /// Transposes (of the last two dims) only matmuls read: not emitted; the
  /// matmul reads their source with a transpose flag (sgemm does it free).
  llvm::DenseMap<Value, Value> foldedTransposes;
  /// Values gathered from dtc.regather arguments (ZeRO-3's parameters).
  llvm::DenseSet<Value> gathered;
  std::map<std::vector<int16_t>, std::string> &commNames;

  // Pipelines.
  /// The plan's virtual micro-batch axes: never a communicator.
  SmallVector<int64_t> mbAxes;
  /// Pool of each value (absent: Step) and, for MicroBatch, its chunk.
  llvm::DenseMap<Value, std::pair<Pool, int>> pools;
  bool isMicroBatchAxis(int64_t axis) const {
    return llvm::is_contained(mbAxes, axis);
  }
  /// Declares a global tensor unless another program already did.
  void declareTensor(const json &tensor) {
    std::string name = tensor["name"].get<std::string>();
    if (shared.tensorNames.insert(name).second)
      tensors.push_back(tensor);
  }
};

int Emitter::newSlot(int64_t bytes, StringRef category, bool pinned,
                     int chunk) {
  slots.push_back({bytes, category.str(), category.str(), pinned, 0, chunk});
  return slots.size() - 1;
}

FailureOr<int> Emitter::newBuffer(int slot, Value value, Location loc,
                                  std::optional<std::string> tensor,
                                  bool bind) {
  RankedTensorType type = typeOf(value);
  std::optional<std::string> dtype = dtypeName(type.getElementType());
  if (!dtype)
    return emitError(loc) << "element type " << type.getElementType()
                          << " is not supported by the runtime yet (f32, "
                             "bf16, f16 floats, i32/i64 ids)";
  int64_t bytes = type.getNumElements() * elementBytes(type.getElementType());
  slots[slot].bytes = std::max(slots[slot].bytes, bytes);
  slots[slot].liveValues++;
  json buffer = {
      {"slot", slot}, {"dtype", *dtype}, {"shape", shapeJson(type.getShape())}};
  if (tensor)
    buffer["tensor"] = *tensor;
  buffers.push_back(std::move(buffer));
  bufferSlot.push_back(slot);
  int id = buffers.size() - 1;
  if (bind)
    bufferOf[value] = id;
  return id;
}

FailureOr<int> Emitter::allocate(Value value, StringRef category) {
  RankedTensorType type = typeOf(value);
  int64_t bytes = type.getNumElements() * elementBytes(type.getElementType());
  // Pipelines: a micro-batch's values live in their chunk's per-micro-batch
  // slots, apart from what one copy serves.
  int chunk = -1;
  std::string key = category.str();
  if (auto it = pools.find(value); it != pools.end()) {
    // A micro-batch's share of a gradient is working memory; the gradient
    // is its sum over the micro-batches.
    category = "activation";
    key = category.str();
    if (it->second.first == Pool::MicroBatch) {
      chunk = it->second.second;
      key += "@chunk" + std::to_string(chunk);
    }
  }
  // Best fit among free slots of this category; else grow the largest free
  // one (cheaper than a new slot); else a new slot.
  std::string poolName = key;
  if (gathered.contains(value))
    poolName += "/gathered";
  FreePool &pool = freeSlots[poolName];
  int chosen = -1;
  if (!pool.empty()) {
    auto it = pool.lower_bound({bytes, 0, 0});
    if (it == pool.end()) // none fits: the first released of the largest
      it = pool.lower_bound({std::get<0>(*pool.rbegin()), 0, 0});
    chosen = std::get<2>(*it);
    pool.erase(it);
  } else {
    chosen = newSlot(bytes, category, /*pinned=*/false, chunk);
  }
  slots[chosen].pool = poolName;
  return newBuffer(chosen, value, value.getLoc());
}

int Emitter::alias(Value value, int buffer) {
  bufferOf[value] = buffer;
  slots[bufferSlot[buffer]].liveValues++;
  return buffer;
}

void Emitter::release(Value value) {
  auto it = bufferOf.find(value);
  if (it == bufferOf.end())
    return;
  Slot &slot = slots[bufferSlot[it->second]];
  if (--slot.liveValues == 0 && !slot.pinned)
    freeSlots[slot.pool].insert(
        {slot.bytes, releases++, bufferSlot[it->second]});
}

FailureOr<std::string> Emitter::communicator(ArrayRef<int16_t> axes) {
  std::vector<int16_t> key(axes.begin(), axes.end());
  auto it = commNames.find(key);
  if (it != commNames.end())
    return it->second;
  for (int16_t axis : axes)
    if (axis < 0 || axis >= (int64_t)grid.size())
      return module.emitError() << "collective on grid axis " << axis
                                << " of a " << grid.size() << "-axis grid";
  // Name it after the parallel dimension it serves when the plan says so.
  std::string name;
  for (const auto &[kind, planAxes] : plan.namedAxes())
    if (std::equal(planAxes.begin(), planAxes.end(), key.begin(), key.end()))
      name = kind;
  if (name.empty()) {
    name = "axes";
    for (int16_t axis : axes)
      name += "_" + std::to_string(axis);
  }
  communicators.push_back(
      {{"name", name},
       {"mesh_axes", std::vector<int64_t>(key.begin(), key.end())}});
  commNames[key] = name;
  return name;
}

StringRef Emitter::categoryOf(Value value, int64_t index) const {
  // Parameter gradients held from the backward into the optimizer are
  // "grad": the reduced gradients of plain data parallelism, the full ones
  // ZeRO-1 reduce-scatters in the optimizer, the pieces ZeRO-2/3 keep. Every
  // other value of the step (activations, their gradients, a full gradient
  // ZeRO-2 reduce-scatters as soon as it is complete, backward and
  // optimizer temporaries) is transient working memory, "activation".
  if (updatePieces.contains(value))
    return "activation";
  if (auto result = dyn_cast<OpResult>(value))
    if (auto names = result.getOwner()->getAttrOfType<ArrayAttr>(
            DtcDialect::kGradientOfAttr))
      if (result.getResultNumber() < names.size())
        if (auto name = dyn_cast<StringAttr>(names[result.getResultNumber()]);
            name && !name.getValue().empty() &&
            (!gradLifetimes || index < 0 ||
             (index < optimizerStart &&
              lastUse.lookup(value) >= optimizerStart)))
          return "grad";
  return "activation";
}

int Emitter::updatedArgumentBuffer(Value result, int64_t index) {
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

void Emitter::instruction(StringRef kernel, ArrayRef<int> in, ArrayRef<int> out,
                          json attrs, Operation *op) {
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

LogicalResult Emitter::emitArguments() {
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    BlockArgument arg = step.getArgument(i);
    auto attr = [&](StringRef name) { return step.getArgAttr(i, name); };
    auto role = dyn_cast_or_null<StringAttr>(attr(DtcDialect::kRoleAttr));
    // A message from another stage: its buffer comes with its recv.
    if (role && role.getValue() == "recv")
      continue;
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
      llvm::erase_if(dim, [&](int64_t a) { return isMicroBatchAxis(a); });
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
    auto stateKind =
        dyn_cast_or_null<StringAttr>(attr(DtcDialect::kStateKindAttr));
    if (stateKind)
      tensor["kind"] = stateKind.getValue().str();
    declareTensor(tensor);

    // Step-wide optimizer state (loss scaling's scalars) is not per
    // parameter: it counts with the step counter, not the optimizer bytes.
    StringRef r = role.getValue();
    bool perParameter = static_cast<bool>(attr(DtcDialect::kOfAttr));
    StringRef category = r == "param"                             ? "param"
                         : r == "optimizer_state" && perParameter ? "optimizer"
                         : r == "input"                           ? "input"
                                                                  : "scalar";
    int slot = newSlot(0, category, /*pinned=*/true);
    RankedTensorType local = localType(globalType, deviceSharding, grid);
    std::optional<std::string> localDtype = dtypeName(local.getElementType());
    int64_t bytes =
        local.getNumElements() * elementBytes(local.getElementType());
    slots[slot].bytes = bytes;
    slots[slot].liveValues++;
    buffers.push_back({{"slot", slot},
                       {"dtype", *localDtype},
                       {"shape", shapeJson(local.getShape())},
                       {"tensor", name.getValue().str()}});
    bufferSlot.push_back(slot);
    bufferOf[arg] = buffers.size() - 1;
  }
  return success();
}

LogicalResult Emitter::emitConstant(arith::ConstantOp op) {
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  if (!dense || !isa<RankedTensorType>(op.getType()))
    return op.emitError() << "only dense tensor constants are supported";
  int slot = newSlot(0, "constant", /*pinned=*/true);
  FailureOr<int> buffer = newBuffer(slot, op.getResult(), op.getLoc());
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

LogicalResult Emitter::emitOp(Operation *op, int64_t index) {
  SmallVector<int> in;
  for (Value operand : op->getOperands()) {
    if (Value source = foldedTransposes.lookup(operand))
      operand = source;
    auto it = bufferOf.find(operand);
    if (it == bufferOf.end())
      return op->emitError() << "operand has no buffer (unsupported producer)";
    in.push_back(it->second);
  }

  // `inPlace`: the result reuses the input's buffer.
  auto collective = [&](StringRef kernel, ArrayRef<int16_t> axes, json attrs,
                        bool inPlace = false) -> LogicalResult {
    FailureOr<std::string> comm = communicator(axes);
    if (failed(comm))
      return failure();
    attrs["comm"] = *comm;
    Value result = op->getResult(0);
    int direct = inPlace ? -1 : updatedArgumentBuffer(result, index);
    FailureOr<int> out = inPlace ? FailureOr<int>(alias(result, in[0]))
                         : direct >= 0
                             ? FailureOr<int>(direct)
                             : allocate(result, categoryOf(result, index));
    if (failed(out))
      return failure();
    instruction(kernel, in, {*out}, std::move(attrs), op);
    return success();
  };
  auto reduction = [](shard::ReductionKind kind) {
    return shard::stringifyReductionKind(kind).str();
  };

  LogicalResult result =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          .Case([&](shard::AllReduceOp c) -> LogicalResult {
            // Reduce in place when this is the input's last reader (the
            // usual case: a gradient reduced right before its update).
            Value input = c.getInput();
            int inputSlot = bufferSlot[in[0]];
            // ... and no other live value (a reshape view) shares its bytes.
            bool inPlace = lastUse.lookup(input) == index &&
                           !slots[inputSlot].pinned &&
                           slots[inputSlot].liveValues == 1 &&
                           input.getType() == c.getResult().getType();
            return collective("all_reduce", c.getGridAxes(),
                              {{"reduction", reduction(c.getReduction())}},
                              inPlace);
          })
          .Case([&](shard::AllGatherOp c) {
            return collective("all_gather", c.getGridAxes(),
                              {{"axis", c.getGatherAxis().getSExtValue()}});
          })
          .Case([&](shard::ReduceScatterOp c) {
            return collective("reduce_scatter", c.getGridAxes(),
                              {{"axis", c.getScatterAxis().getSExtValue()},
                               {"reduction", reduction(c.getReduction())}});
          })
          .Case([&](shard::AllSliceOp c) -> LogicalResult {
            ArrayRef<int16_t> axes = c.getGridAxes();
            int64_t axis = c.getSliceAxis().getSExtValue();
            auto mb = llvm::find_if(
                axes, [&](int16_t a) { return isMicroBatchAxis(a); });
            if (mb == axes.end())
              return collective("all_slice", axes, {{"axis", axis}});
            // A micro-batch's piece: the device axes (major) first, then the
            // micro-batch (minor) axis, which selects the running one.
            if (mb != axes.end() - 1)
              return op->emitError()
                     << "a slice over the micro-batch axis must have it last";
            SmallVector<int16_t> deviceAxes(axes.begin(), mb);
            int source = in[0];
            int scratchSlot = -1;
            if (!deviceAxes.empty()) {
              FailureOr<std::string> comm = communicator(deviceAxes);
              if (failed(comm))
                return failure();
              RankedTensorType whole = typeOf(c.getResult());
              SmallVector<int64_t> shape(whole.getShape());
              shape[axis] *= grid[*mb];
              auto scratchType =
                  RankedTensorType::get(shape, whole.getElementType());
              scratchSlot = newSlot(scratchType.getNumElements() *
                                        elementBytes(whole.getElementType()),
                                    "activation", /*pinned=*/false);
              buffers.push_back({{"slot", scratchSlot},
                                 {"dtype", *dtypeName(whole.getElementType())},
                                 {"shape", shapeJson(shape)}});
              bufferSlot.push_back(scratchSlot);
              source = buffers.size() - 1;
              instruction("all_slice", in, {source},
                          {{"comm", *comm}, {"axis", axis}}, op);
            }
            FailureOr<int> out =
                allocate(c.getResult(), categoryOf(c.getResult(), index));
            if (failed(out))
              return failure();
            instruction("microbatch_slice", {source}, {*out}, {{"axis", axis}},
                        op);
            if (scratchSlot >= 0)
              freeSlots["activation"].insert(
                  {slots[scratchSlot].bytes, releases++, scratchSlot});
            return success();
          })
          .Case([&](shard::AllToAllOp c) {
            return collective(
                "all_to_all", c.getGridAxes(),
                {{"split_axis", c.getSplitAxis().getSExtValue()},
                 {"concat_axis", c.getConcatAxis().getSExtValue()}});
          })
          .Case([&](ViewOpInterface view) -> LogicalResult {
            // A view of the operand's bytes unless the operand's slot is
            // bound to a tensor or constant (those hold nothing else).
            Value result = op->getResult(0);
            int operandSlot = bufferSlot[in[0]];
            if (!slots[operandSlot].pinned)
              return newBuffer(operandSlot, result, op->getLoc());
            FailureOr<int> out = allocate(result, categoryOf(result, index));
            if (failed(out))
              return failure();
            instruction(op->getName().stripDialect(), in, {*out},
                        json::object(), op);
            return success();
          })
          .Default([&](Operation *op) -> LogicalResult {
            if (!op->getDialect() || !isa<DtcDialect>(op->getDialect()))
              return op->emitError() << "'" << op->getName()
                                     << "' cannot be emitted into an artifact";
            json attrs = json::object();
            if (isa<MatmulOp, MatmulBiasOp, MatmulGeluOp>(op)) {
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
            auto inPlace = dyn_cast<InPlaceOpInterface>(op);
            for (OpResult res : op->getResults()) {
              // Update a parameter or optimizer state where it lives when
              // this op is its last reader and the result replaces it (is
              // returned as its new value). Later readers of the result
              // (mixed precision's cast of the new master) read it there;
              // a buffer of its own would live to the return's copy.
              if (inPlace) {
                int64_t operandIdx =
                    inPlace.getInPlaceOperand(res.getResultNumber());
                if (operandIdx >= 0) {
                  Value source = op->getOperand(operandIdx);
                  auto arg = dyn_cast<BlockArgument>(source);
                  bool replacesArg =
                      arg && llvm::any_of(res.getUses(), [&](OpOperand &use) {
                        if (!isa<func::ReturnOp>(use.getOwner()))
                          return false;
                        auto updates = step.getResultAttrOfType<IntegerAttr>(
                            use.getOperandNumber(), DtcDialect::kUpdatesAttr);
                        return updates &&
                               updates.getInt() == arg.getArgNumber();
                      });
                  if (replacesArg && lastUse.lookup(source) == index) {
                    out.push_back(alias(res, bufferOf[source]));
                    continue;
                  }
                }
              }
              if (int direct = updatedArgumentBuffer(res, index); direct >= 0) {
                out.push_back(direct);
                continue;
              }
              FailureOr<int> buffer = allocate(res, categoryOf(res, index));
              if (failed(buffer))
                return failure();
              out.push_back(*buffer);
            }
            instruction(op->getName().stripDialect(), in, out, std::move(attrs),
                        op);
            return success();
          });
  if (failed(result))
    return failure();

  // Free what dies here; results nobody reads die at once.
  llvm::SmallDenseSet<Value> seen;
  for (Value operand : op->getOperands()) {
    // A folded transpose's source is read here in its place.
    if (Value source = foldedTransposes.lookup(operand))
      operand = source;
    if (seen.insert(operand).second && lastUse.lookup(operand) == index)
      release(operand);
  }
  for (Value res : op->getResults())
    if (res.use_empty())
      release(res);
  return success();
}

LogicalResult Emitter::emitReturn(func::ReturnOp ret) {
  for (auto [idx, value] : llvm::enumerate(ret.getOperands())) {
    auto role =
        step.getResultAttrOfType<StringAttr>(idx, DtcDialect::kRoleAttr);
    if (!role)
      return ret.emitError() << "result " << idx << " has no dtc.role";
    if (role.getValue() == "send")
      continue; // emitted where the value is computed
    int source = bufferOf.lookup(value);
    if (role.getValue() == "update") {
      auto updates =
          step.getResultAttrOfType<IntegerAttr>(idx, DtcDialect::kUpdatesAttr);
      if (!updates)
        return ret.emitError()
               << "update result " << idx << " has no dtc.updates";
      int target = bufferOf.lookup(step.getArgument(updates.getInt()));
      if (source != target)
        instruction("copy", {source}, {target}, json::object(), nullptr);
      continue;
    }
    // The loss and returned values (gradients) get a buffer of their own,
    // bound to a tensor the runtime reads after the step.
    auto name =
        step.getResultAttrOfType<StringAttr>(idx, DtcDialect::kNameAttr);
    auto global =
        step.getResultAttrOfType<TypeAttr>(idx, DtcDialect::kGlobalTypeAttr);
    auto sharding =
        step.getResultAttrOfType<ShardingAttr>(idx, DtcDialect::kShardingAttr);
    if (!name || !global || !sharding)
      return ret.emitError()
             << "result " << idx
             << " lacks dtc.name, dtc.global_type or dtc.sharding";
    auto globalType = cast<RankedTensorType>(global.getValue());
    bool isLoss = role.getValue() == "loss";
    json tensor = {{"name", name.getValue().str()},
                   {"role", isLoss ? "loss" : "output"},
                   {"dtype", *dtypeName(globalType.getElementType())},
                   {"shape", shapeJson(globalType.getShape())}};
    addSharding(tensor, sharding);
    if (auto of =
            step.getResultAttrOfType<StringAttr>(idx, DtcDialect::kOfAttr))
      tensor["of"] = of.getValue().str();
    declareTensor(tensor);
    int slot = newSlot(0, isLoss ? "scalar" : "grad", /*pinned=*/true);
    FailureOr<int> target = newBuffer(slot, value, ret.getLoc(),
                                      name.getValue().str(), /*bind=*/false);
    if (failed(target))
      return failure();
    instruction("copy", {source}, {*target}, json::object(), nullptr);
  }
  return success();
}

/// A transpose swapping the last two dims whose every reader is a matmul
/// (plain or with a fused epilogue) reading it as `a` or `b`.
static bool foldsIntoMatmuls(TransposeOp transpose) {
  ArrayRef<int64_t> perm = transpose.getPermutation();
  int64_t rank = perm.size();
  if (rank < 2 || perm[rank - 2] != rank - 1 || perm[rank - 1] != rank - 2)
    return false;
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (perm[d] != d)
      return false;
  return !transpose->use_empty() &&
         llvm::all_of(transpose->getUses(), [](OpOperand &use) {
           return isa<MatmulOp, MatmulBiasOp, MatmulGeluOp>(use.getOwner()) &&
                  use.getOperandNumber() < 2;
         });
}

/// The per-micro-batch list of a phase: forward, B or W (-1: none).
int64_t phaseList(StringRef phase) {
  return llvm::StringSwitch<int64_t>(phase)
      .Case("forward", 0)
      .Case("backward_input", 1)
      .Case("backward_weight", 2)
      .Default(-1);
}

/// ZeRO-3: the values gathered (and padded, cropped, transposed) from
/// `dtc.regather` arguments, the stored pieces of parameters.
llvm::DenseSet<Value> gatheredParameters(func::FuncOp step) {
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

FailureOr<json> Emitter::run(const ArtifactOptions &options) {
  Block &body = step.getBody().front();
  for (Operation &op : body)
    if (auto transpose = dyn_cast<TransposeOp>(op);
        transpose && foldsIntoMatmuls(transpose))
      foldedTransposes[transpose.getResult()] = transpose.getX();
  gathered = gatheredParameters(step);
  int64_t index = 0;
  optimizerStart = -1;
  gradLifetimes = true;
  for (Operation &op : body) {
    auto phase = op.getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
    if (optimizerStart < 0 &&
        ((phase && phase.getValue() == "optimizer") || isa<func::ReturnOp>(op)))
      optimizerStart = index;
    for (Value operand : op.getOperands()) {
      lastUse[operand] = index;
      // A matmul reading a folded transpose reads its source.
      if (Value source = foldedTransposes.lookup(operand))
        lastUse[source] = index;
    }
    ++index;
  }
  if (failed(emitArguments()))
    return failure();
  index = 0;
  for (Operation &op : body) {
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

  for (const Slot &slot : slots)
    slotsJson.push_back({{"bytes", slot.bytes}, {"category", slot.category}});

  int64_t devices = 1;
  for (int64_t size : grid)
    devices *= size;
  std::vector<int> ranks(devices);
  for (int64_t r = 0; r < devices; ++r)
    ranks[r] = r;
  // Moved, not listed in initializer lists (which copy): the program of a
  // large model is most of the compiler's memory.
  json program = {{"name", "spmd"}, {"ranks", ranks}};
  program["slots"] = std::move(slotsJson);
  program["buffers"] = std::move(buffers);
  program["constants"] = std::move(constants);
  program["instructions"] = std::move(instructions);
  return program;
}

/// Pipelines: when each value of a partitioned step function exists (see
/// ValueScope). Per-micro-batch values are split over, or pending sums
/// over, the micro-batch axes; a reduction over them is accumulated; a
/// message says when it travels. Fails on an op that needs the whole batch
/// inside a micro-batch.
LogicalResult classifyScopes(func::FuncOp step, ArrayRef<int64_t> mbAxes,
                             llvm::DenseMap<Value, ValueScope> &scope) {
  Block &body = step.getBody().front();
  auto isMicroBatchAxis = [&](int64_t a) {
    return llvm::is_contained(mbAxes, a);
  };
  auto isMb = [&](ArrayRef<int16_t> axes) {
    return llvm::any_of(axes, [&](int16_t a) { return isMicroBatchAxis(a); });
  };
  auto shardingHasMb = [&](ShardingAttr attr) {
    if (!attr)
      return false;
    for (DenseI64ArrayAttr dim : attr.getDims())
      for (int64_t a : dim.asArrayRef())
        if (isMicroBatchAxis(a))
          return true;
    return false;
  };
  for (BlockArgument arg : step.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto when = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kScopeAttr);
    ValueScope s = ValueScope::Step;
    if (when)
      s = when.getValue() == "microbatch"    ? ValueScope::MicroBatch
          : when.getValue() == "accumulated" ? ValueScope::Accumulated
                                             : ValueScope::Step;
    else if (shardingHasMb(step.getArgAttrOfType<ShardingAttr>(
                 i, DtcDialect::kShardingAttr)))
      s = ValueScope::MicroBatch;
    scope[arg] = s;
  }
  auto isMbReduce = [&](Operation *op) {
    auto reduce = dyn_cast<shard::AllReduceOp>(op);
    return reduce && isMb(reduce.getGridAxes());
  };
  // ZeRO-3 gathers its parameters per micro-batch: a forward or backward
  // gather of a stored piece runs in the list of the micro-batch that reads
  // it and its copy dies there, instead of once per step with every
  // parameter whole through all the micro-batches (which is ZeRO-2's
  // memory). dp peers share a stage and its lists, so they issue the same
  // gathers in the same order.
  llvm::DenseSet<Value> gathered = gatheredParameters(step);
  auto isPerMicroBatchGather = [&](Operation &op) {
    auto phase = op.getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
    return op.getNumResults() == 1 && gathered.contains(op.getResult(0)) &&
           phase && phaseList(phase.getValue()) >= 0;
  };
  for (Operation &op : body) {
    if (isa<func::ReturnOp>(op))
      continue;
    bool perMicroBatch = isPerMicroBatchGather(op), accumulated = false;
    for (Value operand : op.getOperands()) {
      perMicroBatch |= scope.lookup(operand) == ValueScope::MicroBatch;
      accumulated |= scope.lookup(operand) == ValueScope::Accumulated;
    }
    ValueScope s = perMicroBatch ? ValueScope::MicroBatch
                   : accumulated ? ValueScope::Accumulated
                                 : ValueScope::Step;
    if (isMbReduce(&op)) {
      auto reduce = cast<shard::AllReduceOp>(op);
      if (!perMicroBatch || reduce.getReduction() != shard::ReductionKind::Sum)
        return op.emitError()
               << "internal error: a reduction over micro-batches of a value "
                  "that is not a per-micro-batch partial sum";
      s = ValueScope::Accumulated;
    } else if (auto slice = dyn_cast<shard::AllSliceOp>(op);
               slice && isMb(slice.getGridAxes())) {
      s = ValueScope::MicroBatch;
    } else if (op.getDialect() && isa<shard::ShardDialect>(op.getDialect())) {
      SmallVector<int16_t> axes;
      if (auto c = dyn_cast<shard::AllGatherOp>(op))
        axes.assign(c.getGridAxes().begin(), c.getGridAxes().end());
      else if (auto c = dyn_cast<shard::ReduceScatterOp>(op))
        axes.assign(c.getGridAxes().begin(), c.getGridAxes().end());
      else if (auto c = dyn_cast<shard::AllToAllOp>(op))
        axes.assign(c.getGridAxes().begin(), c.getGridAxes().end());
      if (isMb(axes))
        return op.emitError()
               << "'" << op.getName()
               << "' over the micro-batch axis: this op needs the "
               << "whole batch at once (it mixes examples), so it cannot run "
                  "per micro-batch";
    }
    if (perMicroBatch && accumulated && !isMbReduce(&op))
      return op.emitError()
             << "'" << op.getName()
             << "' needs a value summed over the whole batch inside a "
                "micro-batch; the model mixes examples across the batch, so it "
                "cannot be micro-batched";
    for (Value r : op.getResults())
      scope[r] = s;
  }

  return success();
}

namespace {

/// One entry of a pipeline program's instruction lists.
struct Item {
  enum Kind {
    Op,
    Recv,
    Slice,
    Fill,
    Accumulate,
    ReduceRest,
    Send,
    Return
  } kind;
  Operation *op = nullptr; // Op, ReduceRest (the all-reduce), Return
  Value value; // Recv, Slice (the input), Fill / Accumulate / ReduceRest / Send
  Value source;                    // Accumulate: the micro-batch's partial sum
  int64_t chunk = 0;               // Slice
  int64_t message = -1, peer = -1; // Recv, Send
};

} // namespace

FailureOr<json> Emitter::runPipeline(const ArtifactOptions &options) {
  const json &pipe = options.pipeline;
  const int64_t stages = pipe.value("stages", int64_t(1));
  const int64_t chunks = pipe.value("virtual_stages", int64_t(1));
  auto stageAttr =
      step->getAttrOfType<IntegerAttr>(DtcDialect::kPipelineStageAttr);
  const int64_t stage = stageAttr ? stageAttr.getInt() : 0;
  mbAxes = plan.microbatchAxes;
  SmallVector<int64_t> ppAxes = plan.ppAxes;
  Block &body = step.getBody().front();
  auto isMb = [&](ArrayRef<int16_t> axes) {
    return llvm::any_of(axes, [&](int16_t a) { return isMicroBatchAxis(a); });
  };

  // 1. When every value exists.
  llvm::DenseMap<Value, ValueScope> scope;
  if (failed(classifyScopes(step, mbAxes, scope)))
    return failure();
  gathered = gatheredParameters(step);
  auto isMbReduce = [&](Operation *op) {
    auto reduce = dyn_cast<shard::AllReduceOp>(op);
    return reduce && isMb(reduce.getGridAxes());
  };

  // 2. Which list each op runs in: 0 before the micro-batches, 1 + 3c + p
  //    for phase p of chunk c per micro-batch, 1 + 3v after them.
  const int64_t lists = 2 + 3 * chunks, post = lists - 1;
  llvm::DenseMap<Operation *, int64_t> chunkOf;
  auto chunkOfValue = [&](Value v) -> std::optional<int64_t> {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (auto k = step.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                                      DtcDialect::kStageAttr))
        return k.getInt() / stages;
      return std::nullopt;
    }
    if (auto it = chunkOf.find(v.getDefiningOp()); it != chunkOf.end())
      return it->second;
    return std::nullopt;
  };
  for (Operation &op : body)
    if (auto k = op.getAttrOfType<IntegerAttr>(DtcDialect::kStageAttr))
      chunkOf[&op] = k.getInt() / stages;
  // Collectives and rescales the partitioner added: their operands' chunk,
  // else their users'.
  for (Operation &op : body)
    if (!chunkOf.count(&op))
      for (Value operand : op.getOperands())
        if (auto c = chunkOfValue(operand)) {
          chunkOf[&op] = *c;
          break;
        }
  for (Operation &op : llvm::reverse(body))
    if (!chunkOf.count(&op))
      for (Operation *user : op.getUsers())
        if (auto it = chunkOf.find(user); it != chunkOf.end()) {
          chunkOf[&op] = it->second;
          break;
        }
  llvm::DenseMap<Operation *, int64_t> listOf;
  for (Operation &op : body) {
    if (isa<func::ReturnOp>(op) || op.getNumResults() == 0)
      continue;
    ValueScope s = scope.lookup(op.getResult(0));
    if (isMbReduce(&op) || s == ValueScope::Accumulated) {
      listOf[&op] = post;
      continue;
    }
    if (s == ValueScope::Step) {
      listOf[&op] = 0;
      continue;
    }
    auto phase = op.getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
    int64_t p = phase ? phaseList(phase.getValue()) : -1;
    if (p < 0)
      return op.emitError()
             << "internal error: a per-micro-batch op ('" << op.getName()
             << "') outside the forward and backward phases";
    listOf[&op] = 1 + 3 * chunkOf.lookup(&op) + p;
  }

  // Once-per-step work of the optimizer (ZeRO-1's slice of a whole
  // parameter for its update) runs after the flush when everything reading
  // it does, rather than holding its bytes through the micro-batches; not
  // what leaves the step (the return, a message).
  for (Operation &op : llvm::reverse(body)) {
    auto phase = op.getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr);
    if (op.getNumResults() && listOf.lookup(&op) == 0 && phase &&
        phase.getValue() == "optimizer" && !op.use_empty() &&
        llvm::all_of(op.getUsers(), [&](Operation *user) {
          return !isa<func::ReturnOp>(user) && listOf.lookup(user) == post;
        }))
      listOf[&op] = post;
  }
  for (auto &[op, list] : listOf)
    if (list == post && !isMbReduce(op) && op->getNumResults() == 1 &&
        (isa<PadOp, FillPaddingOp>(op) ||
         isa<shard::ShardDialect>(op->getDialect())))
      updatePieces.insert(op->getResult(0));

  // 3. The items of every list.
  for (Operation &op : body)
    if (auto transpose = dyn_cast<TransposeOp>(op);
        transpose && foldsIntoMatmuls(transpose))
      foldedTransposes[transpose.getResult()] = transpose.getX();
  std::vector<std::vector<Item>> items(lists);
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  llvm::DenseMap<Value, SmallVector<std::pair<int64_t, int64_t>, 1>>
      sends; // value -> (message, peer)
  for (auto [idx, value] : llvm::enumerate(ret.getOperands())) {
    auto role =
        step.getResultAttrOfType<StringAttr>(idx, DtcDialect::kRoleAttr);
    if (!role || role.getValue() != "send")
      continue;
    auto message =
        step.getResultAttrOfType<IntegerAttr>(idx, DtcDialect::kMessageAttr);
    auto peer =
        step.getResultAttrOfType<IntegerAttr>(idx, DtcDialect::kPeerAttr);
    if (!message || !peer)
      return ret.emitError() << "a send without dtc.message and dtc.peer";
    sends[value].push_back({message.getInt(), peer.getInt()});
  }
  auto listOfValue = [&](Value v) -> int64_t {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      unsigned i = arg.getArgNumber();
      ValueScope s = scope.lookup(v);
      if (s == ValueScope::Step)
        return 0;
      if (s == ValueScope::Accumulated)
        return post;
      auto phase = step.getArgAttrOfType<StringAttr>(i, DtcDialect::kPhaseAttr);
      int64_t p = phase ? phaseList(phase.getValue()) : 0;
      return 1 + 3 * chunkOfValue(v).value_or(0) + std::max<int64_t>(p, 0);
    }
    return listOf.lookup(v.getDefiningOp());
  };
  auto queueSends = [&](Value v, int64_t list) {
    for (auto [message, peer] : sends.lookup(v)) {
      Item send{Item::Send};
      send.value = v;
      send.message = message;
      send.peer = peer;
      items[list].push_back(send);
    }
  };
  // Sums over the micro-batches are complete when the list after them
  // starts: their remaining reduction and their sends go first, so no stage
  // waits for a message another stage would send only later.
  std::vector<Item> postFront;
  // Per-micro-batch inputs: each chunk slices its micro-batch's rows at its
  // first use.
  std::map<std::pair<void *, int64_t>, int> sliced; // (input, chunk) -> buffer
  std::map<std::pair<void *, int64_t>, bool> sliceQueued;
  for (Operation &op : body) {
    if (isa<func::ReturnOp>(op)) {
      Item r{Item::Return};
      r.op = &op;
      items[post].push_back(r);
      continue;
    }
    if (isa<arith::ConstantOp>(op))
      continue;
    if (op.getNumResults() && foldedTransposes.count(op.getResult(0)))
      continue;
    int64_t list = listOf.lookup(&op);
    if (isMbReduce(&op)) {
      Value partial = op.getOperand(0), sum = op.getResult(0);
      Item fill{Item::Fill};
      fill.value = sum;
      items[0].push_back(fill);
      Item acc{Item::Accumulate};
      acc.value = sum;
      acc.source = partial;
      items[listOfValue(partial)].push_back(acc);
      auto reduce = cast<shard::AllReduceOp>(op);
      if (llvm::any_of(reduce.getGridAxes(),
                       [&](int16_t a) { return !isMicroBatchAxis(a); })) {
        Item rest{Item::ReduceRest};
        rest.op = &op;
        rest.value = sum;
        postFront.push_back(rest);
      }
      size_t before = items[post].size();
      queueSends(sum, post);
      postFront.insert(postFront.end(), items[post].begin() + before,
                       items[post].end());
      items[post].resize(before);
      continue;
    }
    if (list >= 1 && list < post)
      for (Value operand : op.getOperands()) {
        if (Value source = foldedTransposes.lookup(operand))
          operand = source;
        auto arg = dyn_cast<BlockArgument>(operand);
        if (!arg || scope.lookup(arg) != ValueScope::MicroBatch)
          continue;
        auto role = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                      DtcDialect::kRoleAttr);
        if (role && role.getValue() == "recv")
          continue;
        int64_t chunk = (list - 1) / 3;
        bool &queued = sliceQueued[{arg.getAsOpaquePointer(), chunk}];
        if (queued)
          continue;
        queued = true;
        Item slice{Item::Slice};
        slice.value = arg;
        slice.chunk = chunk;
        items[list].push_back(slice);
      }
    Item item{Item::Op};
    item.op = &op;
    items[list].push_back(item);
    for (Value r : op.getResults())
      queueSends(r, list);
  }
  items[post].insert(items[post].begin(), postFront.begin(), postFront.end());
  // Receives wait as late as they can: right before their first reader in
  // their list (the end of it when only a later list reads them).
  auto reads = [&](const Item &item, Value v) {
    auto is = [&](Value x) {
      if (Value source = foldedTransposes.lookup(x))
        x = source;
      return x == v;
    };
    switch (item.kind) {
    case Item::Op:
    case Item::Return:
      return llvm::any_of(item.op->getOperands(), is);
    case Item::Accumulate:
      return is(item.source);
    case Item::Send:
    case Item::ReduceRest:
      return is(item.value);
    default:
      return false;
    }
  };
  for (BlockArgument arg : step.getArguments()) {
    auto role = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  DtcDialect::kRoleAttr);
    if (!role || role.getValue() != "recv")
      continue;
    auto message = step.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                                      DtcDialect::kMessageAttr);
    auto peer = step.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                                   DtcDialect::kPeerAttr);
    if (!message || !peer)
      return emitError(arg.getLoc())
             << "a recv without dtc.message and dtc.peer";
    Item recv{Item::Recv};
    recv.value = arg;
    recv.message = message.getInt();
    recv.peer = peer.getInt();
    std::vector<Item> &list = items[listOfValue(arg)];
    auto first =
        llvm::find_if(list, [&](const Item &item) { return reads(item, arg); });
    list.insert(first, recv);
  }

  // 4. Positions (pre, chunk 0 F B W, chunk 1 ..., post) and lifetimes.
  std::vector<std::vector<int64_t>> position(lists);
  int64_t pos = 0, mbBlockEnd = 0;
  for (int64_t l = 0; l < lists; ++l) {
    for (size_t i = 0; i < items[l].size(); ++i)
      position[l].push_back(pos++);
    if (l == post - 1)
      mbBlockEnd = pos;
  }
  llvm::DenseMap<Value, int64_t> definedIn;
  llvm::DenseMap<Value, bool> readElsewhere, readPerMicroBatch;
  auto read = [&](Value v, int64_t list, int64_t at) {
    if (Value source = foldedTransposes.lookup(v))
      v = source;
    lastUse[v] = std::max(lastUse.lookup(v), at);
    if (list >= 1 && list < post)
      readPerMicroBatch[v] = true;
    auto it = definedIn.find(v);
    if (it == definedIn.end() || it->second != list)
      readElsewhere[v] = true;
  };
  for (int64_t l = 0; l < lists; ++l)
    for (auto [i, item] : llvm::enumerate(items[l])) {
      int64_t at = position[l][i];
      switch (item.kind) {
      case Item::Op:
        for (Value operand : item.op->getOperands())
          read(operand, l, at);
        for (Value r : item.op->getResults())
          definedIn[r] = l;
        break;
      case Item::Recv:
        definedIn[item.value] = l;
        break;
      case Item::Fill:
        definedIn[item.value] = l;
        break;
      case Item::Accumulate:
        read(item.source, l, at);
        read(item.value, l, at);
        break;
      case Item::ReduceRest:
      case Item::Send:
        read(item.value, l, at);
        break;
      case Item::Return:
        for (Value operand : item.op->getOperands())
          read(operand, l, at);
        break;
      case Item::Slice:
        break;
      }
    }
  for (auto &[v, s] : scope) {
    if (s == ValueScope::MicroBatch) {
      int64_t list = definedIn.count(v) ? definedIn[v] : 0;
      bool cross = readElsewhere.lookup(v) || isa<BlockArgument>(v);
      if (list >= 1 && list < post)
        pools[v] = {cross ? Pool::MicroBatch : Pool::Temp, int((list - 1) / 3)};
    } else if (readPerMicroBatch.lookup(v)) {
      // Read by every micro-batch: alive through all of them.
      lastUse[v] = std::max(lastUse.lookup(v), mbBlockEnd);
    }
  }
  // Views share their operand's bytes, and so may an all-reduce done in
  // place: a per-micro-batch value read through them stays alive as long as
  // they are, in a copy per micro-batch if they are read by a later list.
  for (Operation &op : llvm::reverse(body))
    if ((isa<ViewOpInterface>(op) || isa<shard::AllReduceOp>(op)) &&
        op.getNumOperands() && op.getNumResults()) {
      Value operand = op.getOperand(0), view = op.getResult(0);
      lastUse[operand] =
          std::max(lastUse.lookup(operand), lastUse.lookup(view));
      auto viewPool = pools.find(view), operandPool = pools.find(operand);
      if (viewPool != pools.end() &&
          viewPool->second.first == Pool::MicroBatch &&
          operandPool != pools.end())
        operandPool->second = viewPool->second;
    }

  // 5. Emit.
  if (failed(emitArguments()))
    return failure();
  llvm::DenseMap<Value, int>
      wholeInput; // per-micro-batch input -> all its rows
  for (BlockArgument arg : step.getArguments())
    if (scope.lookup(arg) == ValueScope::MicroBatch && bufferOf.count(arg))
      wholeInput[arg] = bufferOf[arg];
  for (Operation &op : body)
    if (auto constant = dyn_cast<arith::ConstantOp>(op))
      if (failed(emitConstant(constant)))
        return failure();
  std::vector<json> listJson(lists, json::array());
  auto bufferOfValue = [&](Value v) -> FailureOr<int> {
    auto it = bufferOf.find(v);
    if (it == bufferOf.end())
      return step.emitError()
             << "internal error: a value has no buffer when it is read";
    return it->second;
  };
  auto pointToPoint = [&]() -> FailureOr<std::string> {
    if (ppAxes.empty())
      return step.emitError()
             << "messages between stages but the plan has no pp axes";
    return communicator(SmallVector<int16_t>(ppAxes.begin(), ppAxes.end()));
  };
  for (int64_t l = 0; l < lists; ++l) {
    current = &listJson[l];
    // A chunk's ops read its micro-batch's slice of an input.
    for (auto &[arg, whole] : wholeInput) {
      bufferOf[arg] = whole;
      if (l >= 1 && l < post)
        if (auto it = sliced.find({arg.getAsOpaquePointer(), (l - 1) / 3});
            it != sliced.end())
          bufferOf[arg] = it->second;
    }
    for (auto [i, item] : llvm::enumerate(items[l])) {
      int64_t at = position[l][i];
      switch (item.kind) {
      case Item::Op:
        if (failed(emitOp(item.op, at)))
          return failure();
        continue; // emitOp releases what dies
      case Item::Recv: {
        FailureOr<std::string> comm = pointToPoint();
        FailureOr<int> out = succeeded(comm)
                                 ? allocate(item.value, categoryOf(item.value))
                                 : FailureOr<int>(failure());
        if (failed(out))
          return failure();
        instruction(
            "recv", {}, {*out},
            {{"comm", *comm}, {"peer", item.peer}, {"message", item.message}},
            nullptr);
        if (item.value.use_empty())
          release(item.value);
        break;
      }
      case Item::Send: {
        FailureOr<std::string> comm = pointToPoint();
        FailureOr<int> in = succeeded(comm) ? bufferOfValue(item.value)
                                            : FailureOr<int>(failure());
        if (failed(in))
          return failure();
        instruction(
            "send", {*in}, {},
            {{"comm", *comm}, {"peer", item.peer}, {"message", item.message}},
            nullptr);
        break;
      }
      case Item::Slice: {
        BlockArgument arg = cast<BlockArgument>(item.value);
        auto attr = step.getArgAttrOfType<ShardingAttr>(
            arg.getArgNumber(), DtcDialect::kShardingAttr);
        int64_t axis = -1;
        for (auto [d, dim] : llvm::enumerate(attr.getDims()))
          if (llvm::any_of(dim.asArrayRef(),
                           [&](int64_t a) { return isMicroBatchAxis(a); }))
            axis = d;
        // The micro-batch's rows, in a slot of its own for this chunk (the
        // input's buffer holds every micro-batch).
        int slot = newSlot(0, "activation", /*pinned=*/true, int(item.chunk));
        FailureOr<int> piece =
            newBuffer(slot, arg, arg.getLoc(), std::nullopt, /*bind=*/false);
        if (failed(piece))
          return failure();
        int whole = wholeInput.lookup(arg);
        instruction("microbatch_slice", {whole}, {*piece}, {{"axis", axis}},
                    nullptr);
        sliced[{arg.getAsOpaquePointer(), item.chunk}] = *piece;
        bufferOf[arg] = *piece;
        break;
      }
      case Item::Fill: {
        FailureOr<int> out = allocate(item.value, categoryOf(item.value));
        if (failed(out))
          return failure();
        instruction("fill", {}, {*out}, {{"value", 0.0}},
                    item.value.getDefiningOp());
        break;
      }
      case Item::Accumulate: {
        FailureOr<int> in = bufferOfValue(item.source),
                       out = bufferOfValue(item.value);
        if (failed(in) || failed(out))
          return failure();
        instruction("accumulate", {*in}, {*out}, json::object(),
                    item.source.getDefiningOp());
        if (lastUse.lookup(item.source) == at)
          release(item.source);
        break;
      }
      case Item::ReduceRest: {
        auto reduce = cast<shard::AllReduceOp>(item.op);
        SmallVector<int16_t> rest;
        for (int16_t a : reduce.getGridAxes())
          if (!isMicroBatchAxis(a))
            rest.push_back(a);
        FailureOr<std::string> comm = communicator(rest);
        FailureOr<int> buffer = succeeded(comm) ? bufferOfValue(item.value)
                                                : FailureOr<int>(failure());
        if (failed(buffer))
          return failure();
        instruction("all_reduce", {*buffer}, {*buffer},
                    {{"comm", *comm}, {"reduction", "sum"}}, item.op);
        break;
      }
      case Item::Return:
        if (failed(emitReturn(cast<func::ReturnOp>(item.op))))
          return failure();
        break;
      }
    }
  }

  json slotList = json::array();
  for (const Slot &slot : slots) {
    json entry = {{"bytes", slot.bytes}, {"category", slot.category}};
    if (slot.chunk >= 0) {
      entry["scope"] = "microbatch";
      entry["chunk"] = slot.chunk;
    }
    slotList.push_back(entry);
  }
  std::vector<int> ranks;
  int64_t devices = 1;
  for (int64_t size : grid.drop_back(mbAxes.size()))
    devices *= size;
  for (int64_t r = 0; r < devices; ++r) {
    int64_t rest = r, idx = 0;
    SmallVector<int64_t> coords(grid.size() - mbAxes.size());
    for (int64_t a = coords.size() - 1; a >= 0; --a) {
      coords[a] = rest % grid[a];
      rest /= grid[a];
    }
    for (int64_t a : ppAxes)
      idx = idx * grid[a] + coords[a];
    if (idx == stage)
      ranks.push_back(r);
  }
  json chunkLists = json::array();
  for (int64_t c = 0; c < chunks; ++c)
    chunkLists.push_back({{"forward", listJson[1 + 3 * c]},
                          {"backward_input", listJson[2 + 3 * c]},
                          {"backward_weight", listJson[3 + 3 * c]}});
  json schedule = json::array();
  if (pipe.contains("per_stage") && stage < int64_t(pipe["per_stage"].size()))
    schedule = pipe["per_stage"][stage];
  return json{{"name", "stage" + std::to_string(stage)},
              {"ranks", ranks},
              {"stage", stage},
              {"slots", slotList},
              {"buffers", buffers},
              {"constants", constants},
              {"instructions", listJson[0]},
              {"chunks", chunkLists},
              {"finish", listJson[post]},
              {"schedule", schedule}};
}

} // namespace

json planToJson(const Plan &plan, const ArtifactOptions &options) {
  json planJson = json::object();
  for (const auto &[key, count] : plan.namedCounts())
    planJson[key] = count;
  json axesJson = json::object();
  for (const auto &[kind, axes] : plan.namedAxes())
    axesJson[kind] = std::vector<int64_t>(axes.begin(), axes.end());
  planJson["axes"] = axesJson;
  for (auto &[key, value] : options.planExtras.items())
    planJson[key] = value;
  return planJson;
}

FailureOr<json> mlir::dtc::buildArtifact(ModuleOp module,
                                         const ArtifactOptions &options) {
  SmallVector<func::FuncOp> steps = trainSteps(module);
  if (steps.empty())
    return module.emitError() << "no training step to emit";
  std::optional<Plan> plan = getPlan(module);
  if (!plan)
    return module.emitError()
           << "the module has no dtc.plan grid (not partitioned)";
  FailureOr<SmallVector<int64_t>> grid = getGridShape(module, plan->grid);
  if (failed(grid))
    return failure();
  // Devices: the grid without its virtual micro-batch axes (the last ones).
  SmallVector<int64_t> mbAxes = plan->microbatchAxes;
  SmallVector<int64_t> mesh(grid->begin(), grid->end() - mbAxes.size());
  int64_t devices = 1;
  for (int64_t size : mesh)
    devices *= size;

  ArtifactState shared;
  json programs = json::array();
  bool pipelined = steps.size() > 1 || !mbAxes.empty();
  if (pipelined && options.pipeline.is_null())
    return module.emitError() << "a pipelined step needs a schedule to emit";
  for (func::FuncOp step : steps) {
    Emitter emitter(module, step, *grid, *plan, shared);
    FailureOr<json> program =
        pipelined ? emitter.runPipeline(options) : emitter.run(options);
    if (failed(program))
      return failure();
    programs.push_back(std::move(*program));
  }
  json body{{"format", "dtc-artifact"},
            {"version", ::dtc::rt::kArtifactVersion},
            {"producer", std::string("dtc ") + DTC_VERSION_STRING},
            {"source", options.sourceName},
            {"mesh", std::vector<int64_t>(mesh.begin(), mesh.end())},
            {"devices", devices},
            {"plan", planToJson(*plan, options)},
            {"optimizer", options.optimizer}};
  body["communicators"] = std::move(shared.communicators);
  body["tensors"] = std::move(shared.tensors);
  body["programs"] = std::move(programs);
  if (pipelined) {
    json pipeline = options.pipeline;
    pipeline.erase("per_stage");
    body["pipeline"] = pipeline;
  }
  return body;
}

int64_t mlir::dtc::flopsPerStep(func::FuncOp step, int64_t microbatches) {
  auto module = step->getParentOfType<ModuleOp>();
  std::optional<Plan> plan = getPlan(module);
  SmallVector<int64_t> mbAxes =
      plan ? plan->microbatchAxes : SmallVector<int64_t>();
  llvm::DenseMap<Value, ValueScope> scope;
  bool perMicroBatch =
      !mbAxes.empty() && succeeded(classifyScopes(step, mbAxes, scope));
  int64_t flops = 0;
  step.walk([&](CostOpInterface op) {
    int64_t times =
        perMicroBatch && op->getNumResults() &&
                scope.lookup(op->getResult(0)) == ValueScope::MicroBatch
            ? microbatches
            : 1;
    flops += op.getFlopCount() * times;
  });
  return flops;
}
