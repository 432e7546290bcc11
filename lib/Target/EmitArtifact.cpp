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
#include "dtc/Target/Artifact.h"
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/Version.h"
#include "dtc/runtime/ArtifactFormat.h"
#include "dtc/Sharding/Sharding.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Base64.h"
#include <map>

using namespace mlir;
using namespace mlir::dtc;
using json = nlohmann::json;

namespace {

RankedTensorType typeOf(Value v) { return tensorTypeOf(v); }

std::optional<std::string> dtypeName(Type type) {
  if (type.isF32())
    return "f32";
  if (type.isBF16())
    return "bf16";
  if (type.isF16())
    return "f16";
  if (type.isInteger(32))
    return "i32";
  if (type.isInteger(64))
    return "i64";
  return std::nullopt;
}

int64_t elementBytes(Type type) {
  return type.isInteger(64) ? 8 : type.isBF16() || type.isF16() ? 2 : 4;
}

json shapeJson(ArrayRef<int64_t> shape) { return json(std::vector<int64_t>(shape.begin(), shape.end())); }

json shardingJson(ShardingAttr sharding) {
  json dims = json::array();
  for (DenseI64ArrayAttr axes : sharding.getDims())
    dims.push_back(std::vector<int64_t>(axes.asArrayRef().begin(), axes.asArrayRef().end()));
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

/// Inherent attributes as JSON (kernels.md attribute types).
FailureOr<json> attributeJson(Operation *op, Attribute attr) {
  if (auto b = dyn_cast<BoolAttr>(attr))
    return json(b.getValue());
  if (auto i = dyn_cast<IntegerAttr>(attr))
    return json(i.getValue().getSExtValue());
  if (auto f = dyn_cast<FloatAttr>(attr))
    return json(f.getValueAsDouble());
  if (auto s = dyn_cast<StringAttr>(attr))
    return json(s.getValue().str());
  if (auto a = dyn_cast<DenseI64ArrayAttr>(attr))
    return json(std::vector<int64_t>(a.asArrayRef().begin(), a.asArrayRef().end()));
  return op->emitError() << "cannot serialize attribute " << attr
                         << " into the artifact";
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
};

class Emitter {
public:
  Emitter(ModuleOp module, func::FuncOp step, ArrayRef<int64_t> grid,
          DictionaryAttr plan)
      : module(module), step(step), grid(grid), plan(plan) {}

  FailureOr<json> run(const ArtifactOptions &options);

private:
  int newSlot(int64_t bytes, StringRef category, bool pinned);
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
  StringRef categoryOf(Value value, int64_t index) const;
  /// The buffer of the argument `result` replaces when the step returns it
  /// as that argument's update and nothing reads the argument from
  /// instruction `index` on: the result is written there directly (no
  /// copy, no second buffer). -1 otherwise.
  int updatedArgumentBuffer(Value result, int64_t index);

  ModuleOp module;
  func::FuncOp step;
  ArrayRef<int64_t> grid;
  DictionaryAttr plan;

  json tensors = json::array(), buffers = json::array(),
       constants = json::array(), instructions = json::array(),
       communicators = json::array(), slotsJson = json::array();
  std::vector<Slot> slots;
  std::vector<int> bufferSlot;
  llvm::DenseMap<Value, int> bufferOf;
  llvm::DenseMap<Value, int64_t> lastUse;
  /// Index of the first optimizer instruction (the return's when none).
  int64_t optimizerStart = 0;
  /// Transposes (of the last two dims) only matmuls read: not emitted; the
  /// matmul reads their source with a transpose flag (sgemm does it free).
  llvm::DenseMap<Value, Value> foldedTransposes;
  std::map<std::string, std::vector<int>> freeSlots;
  /// Values gathered from dtc.regather arguments (ZeRO-3's parameters).
  llvm::DenseSet<Value> gathered;
  std::map<std::vector<int16_t>, std::string> commNames;
};

int Emitter::newSlot(int64_t bytes, StringRef category, bool pinned) {
  slots.push_back({bytes, category.str(), category.str(), pinned, 0});
  return slots.size() - 1;
}

FailureOr<int> Emitter::newBuffer(int slot, Value value, Location loc,
                                  std::optional<std::string> tensor, bool bind) {
  RankedTensorType type = typeOf(value);
  std::optional<std::string> dtype = dtypeName(type.getElementType());
  if (!dtype)
    return emitError(loc) << "element type " << type.getElementType()
                          << " is not supported by the runtime yet (f32 "
                             "floats, i32/i64 ids); mixed precision arrives "
                             "with --precision bf16-mixed";
  int64_t bytes = type.getNumElements() * elementBytes(type.getElementType());
  slots[slot].bytes = std::max(slots[slot].bytes, bytes);
  slots[slot].liveValues++;
  json buffer = {{"slot", slot}, {"dtype", *dtype}, {"shape", shapeJson(type.getShape())}};
  if (tensor)
    buffer["tensor"] = *tensor;
  buffers.push_back(buffer);
  bufferSlot.push_back(slot);
  int id = buffers.size() - 1;
  if (bind)
    bufferOf[value] = id;
  return id;
}

FailureOr<int> Emitter::allocate(Value value, StringRef category) {
  RankedTensorType type = typeOf(value);
  int64_t bytes = type.getNumElements() * elementBytes(type.getElementType());
  // Best fit among free slots of this category; else grow the largest free
  // one (cheaper than a new slot); else a new slot.
  std::string poolName = category.str();
  if (gathered.contains(value))
    poolName += "/gathered";
  std::vector<int> &pool = freeSlots[poolName];
  int best = -1, largest = -1;
  for (int s : pool) {
    if (slots[s].bytes >= bytes && (best < 0 || slots[s].bytes < slots[best].bytes))
      best = s;
    if (largest < 0 || slots[s].bytes > slots[largest].bytes)
      largest = s;
  }
  int chosen = best >= 0 ? best : largest;
  if (chosen >= 0)
    llvm::erase(pool, chosen);
  else
    chosen = newSlot(bytes, category, /*pinned=*/false);
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
    freeSlots[slot.pool].push_back(bufferSlot[it->second]);
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
  if (auto axesDict = plan ? plan.getAs<DictionaryAttr>("axes") : nullptr)
    for (NamedAttribute entry : axesDict)
      if (auto planAxes = dyn_cast<DenseI64ArrayAttr>(entry.getValue()))
        if (std::equal(planAxes.asArrayRef().begin(), planAxes.asArrayRef().end(),
                       key.begin(), key.end()))
          name = entry.getName().str();
  if (name.empty()) {
    name = "axes";
    for (int16_t axis : axes)
      name += "_" + std::to_string(axis);
  }
  communicators.push_back({{"name", name}, {"mesh_axes", std::vector<int64_t>(key.begin(), key.end())}});
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
  if (auto result = dyn_cast<OpResult>(value))
    if (auto names = result.getOwner()->getAttrOfType<ArrayAttr>(DtcDialect::kGradientOfAttr))
      if (result.getResultNumber() < names.size())
        if (auto name = dyn_cast<StringAttr>(names[result.getResultNumber()]);
            name && !name.getValue().empty() && index < optimizerStart &&
            lastUse.lookup(value) >= optimizerStart)
          return "grad";
  return "activation";
}

int Emitter::updatedArgumentBuffer(Value result, int64_t index) {
  if (!result.hasOneUse() || !isa<func::ReturnOp>(*result.user_begin()))
    return -1;
  auto updates = step.getResultAttrOfType<IntegerAttr>(result.use_begin()->getOperandNumber(),
                                                       DtcDialect::kUpdatesAttr);
  if (!updates || updates.getInt() < 0 || updates.getInt() >= step.getNumArguments())
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
  json inst = {{"op", kernel.str()}, {"in", std::vector<int>(in.begin(), in.end())},
               {"out", std::vector<int>(out.begin(), out.end())}};
  if (!attrs.empty())
    inst["attrs"] = std::move(attrs);
  if (op)
    if (auto phase = op->getAttrOfType<StringAttr>(DtcDialect::kPhaseAttr))
      inst["phase"] = phase.getValue().str();
  instructions.push_back(std::move(inst));
}

LogicalResult Emitter::emitArguments() {
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    BlockArgument arg = step.getArgument(i);
    auto attr = [&](StringRef name) { return step.getArgAttr(i, name); };
    auto role = dyn_cast_or_null<StringAttr>(attr(DtcDialect::kRoleAttr));
    auto name = dyn_cast_or_null<StringAttr>(attr(DtcDialect::kNameAttr));
    auto global = dyn_cast_or_null<TypeAttr>(attr(DtcDialect::kGlobalTypeAttr));
    auto sharding = dyn_cast_or_null<ShardingAttr>(attr(DtcDialect::kShardingAttr));
    if (!role || !name || !global || !sharding)
      return emitError(arg.getLoc())
             << "argument " << i << " lacks dtc.role, dtc.name, "
                "dtc.global_type or dtc.sharding (is the module partitioned?)";
    auto globalType = cast<RankedTensorType>(global.getValue());
    std::optional<std::string> dtype = dtypeName(globalType.getElementType());
    if (!dtype)
      return emitError(arg.getLoc())
             << "\"" << name.getValue() << "\" has element type "
             << globalType.getElementType()
             << ", which the runtime does not support yet (f32, bf16, "
                "f16 floats, i32/i64 ids)";
    json tensor = {{"name", name.getValue().str()},
                   {"role", role.getValue().str()},
                   {"dtype", *dtype},
                   {"shape", shapeJson(globalType.getShape())}};
    addSharding(tensor, sharding);
    if (auto init = dyn_cast_or_null<StringAttr>(attr(DtcDialect::kInitAttr)))
      tensor["init"] = init.getValue().str();
    if (auto of = dyn_cast_or_null<StringAttr>(attr(DtcDialect::kOfAttr)))
      tensor["of"] = of.getValue().str();
    if (auto max = dyn_cast_or_null<IntegerAttr>(attr(DtcDialect::kMaxAttr)))
      tensor["max"] = max.getInt();
    auto stateKind = dyn_cast_or_null<StringAttr>(attr(DtcDialect::kStateKindAttr));
    if (stateKind)
      tensor["kind"] = stateKind.getValue().str();
    tensors.push_back(tensor);

    // Step-wide optimizer state (loss scaling's scalars) is not per
    // parameter: it counts with the step counter, not the optimizer bytes.
    StringRef r = role.getValue();
    bool perParameter = static_cast<bool>(attr(DtcDialect::kOfAttr));
    StringRef category = r == "param" ? "param"
                         : r == "optimizer_state" && perParameter ? "optimizer"
                         : r == "input" ? "input"
                                        : "scalar";
    int slot = newSlot(0, category, /*pinned=*/true);
    if (failed(newBuffer(slot, arg, arg.getLoc(), name.getValue().str())))
      return failure();
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
    FailureOr<int> out = inPlace       ? FailureOr<int>(alias(result, in[0]))
                         : direct >= 0 ? FailureOr<int>(direct)
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
            bool inPlace = lastUse.lookup(input) == index && !slots[inputSlot].pinned &&
                           slots[inputSlot].liveValues == 1 &&
                           input.getType() == c.getResult().getType();
            return collective("all_reduce", c.getGridAxes(),
                              {{"reduction", reduction(c.getReduction())}}, inPlace);
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
          .Case([&](shard::AllSliceOp c) {
            return collective("all_slice", c.getGridAxes(),
                              {{"axis", c.getSliceAxis().getSExtValue()}});
          })
          .Case([&](shard::AllToAllOp c) {
            return collective("all_to_all", c.getGridAxes(),
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
            instruction(op->getName().stripDialect(), in, {*out}, json::object(), op);
            return success();
          })
          .Default([&](Operation *op) -> LogicalResult {
            if (!op->getDialect() || !isa<DtcDialect>(op->getDialect()))
              return op->emitError() << "'" << op->getName()
                                     << "' cannot be emitted into an artifact";
            json attrs = json::object();
            if (isa<MatmulOp>(op)) {
              if (foldedTransposes.count(op->getOperand(0)))
                attrs["transpose_a"] = true;
              if (foldedTransposes.count(op->getOperand(1)))
                attrs["transpose_b"] = true;
            }
            if (auto props = dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute()))
              for (NamedAttribute attr : props) {
                // Which optional operands are present shows in "in" itself.
                if (attr.getName() == "operandSegmentSizes")
                  continue;
                FailureOr<json> value = attributeJson(op, attr.getValue());
                if (failed(value))
                  return failure();
                attrs[attr.getName().str()] = *value;
              }
            SmallVector<int> out;
            auto inPlace = dyn_cast<InPlaceOpInterface>(op);
            for (OpResult res : op->getResults()) {
              // Update a parameter or optimizer state where it lives when
              // this op is its last reader and the result replaces it.
              if (inPlace) {
                int64_t operandIdx = inPlace.getInPlaceOperand(res.getResultNumber());
                if (operandIdx >= 0) {
                  Value source = op->getOperand(operandIdx);
                  auto arg = dyn_cast<BlockArgument>(source);
                  bool onlyReturned = res.hasOneUse() && isa<func::ReturnOp>(*res.user_begin());
                  auto updates = onlyReturned
                                     ? step.getResultAttrOfType<IntegerAttr>(
                                           res.use_begin()->getOperandNumber(),
                                           DtcDialect::kUpdatesAttr)
                                     : nullptr;
                  if (arg && updates && updates.getInt() == arg.getArgNumber() &&
                      lastUse.lookup(source) == index) {
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
            instruction(op->getName().stripDialect(), in, out, std::move(attrs), op);
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
    auto role = step.getResultAttrOfType<StringAttr>(idx, DtcDialect::kRoleAttr);
    if (!role)
      return ret.emitError() << "result " << idx << " has no dtc.role";
    int source = bufferOf.lookup(value);
    if (role.getValue() == "update") {
      auto updates = step.getResultAttrOfType<IntegerAttr>(idx, DtcDialect::kUpdatesAttr);
      if (!updates)
        return ret.emitError() << "update result " << idx << " has no dtc.updates";
      int target = bufferOf.lookup(step.getArgument(updates.getInt()));
      if (source != target)
        instruction("copy", {source}, {target}, json::object(), nullptr);
      continue;
    }
    // The loss and returned values (gradients) get a buffer of their own,
    // bound to a tensor the runtime reads after the step.
    auto name = step.getResultAttrOfType<StringAttr>(idx, DtcDialect::kNameAttr);
    auto global = step.getResultAttrOfType<TypeAttr>(idx, DtcDialect::kGlobalTypeAttr);
    auto sharding = step.getResultAttrOfType<ShardingAttr>(idx, DtcDialect::kShardingAttr);
    if (!name || !global || !sharding)
      return ret.emitError() << "result " << idx
                             << " lacks dtc.name, dtc.global_type or dtc.sharding";
    auto globalType = cast<RankedTensorType>(global.getValue());
    bool isLoss = role.getValue() == "loss";
    json tensor = {{"name", name.getValue().str()},
                   {"role", isLoss ? "loss" : "output"},
                   {"dtype", *dtypeName(globalType.getElementType())},
                   {"shape", shapeJson(globalType.getShape())}};
    addSharding(tensor, sharding);
    if (auto of = step.getResultAttrOfType<StringAttr>(idx, DtcDialect::kOfAttr))
      tensor["of"] = of.getValue().str();
    tensors.push_back(tensor);
    int slot = newSlot(0, isLoss ? "scalar" : "grad", /*pinned=*/true);
    FailureOr<int> target =
        newBuffer(slot, value, ret.getLoc(), name.getValue().str(), /*bind=*/false);
    if (failed(target))
      return failure();
    instruction("copy", {source}, {*target}, json::object(), nullptr);
  }
  return success();
}

/// A transpose swapping the last two dims whose every reader is a matmul.
static bool foldsIntoMatmuls(TransposeOp transpose) {
  ArrayRef<int64_t> perm = transpose.getPermutation();
  int64_t rank = perm.size();
  if (rank < 2 || perm[rank - 2] != rank - 1 || perm[rank - 1] != rank - 2)
    return false;
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (perm[d] != d)
      return false;
  return !transpose->use_empty() &&
         llvm::all_of(transpose->getUsers(), [](Operation *user) { return isa<MatmulOp>(user); });
}

FailureOr<json> Emitter::run(const ArtifactOptions &options) {
  Block &body = step.getBody().front();
  for (Operation &op : body)
    if (auto transpose = dyn_cast<TransposeOp>(op); transpose && foldsIntoMatmuls(transpose))
      foldedTransposes[transpose.getResult()] = transpose.getX();
  for (Operation &op : body)
    if (isa<shard::AllGatherOp, shard::AllToAllOp, PadOp, TransposeOp>(op) &&
        llvm::any_of(op.getOperands(), [&](Value v) {
          auto arg = dyn_cast<BlockArgument>(v);
          return gathered.contains(v) ||
                 (arg && step.getArgAttr(arg.getArgNumber(), DtcDialect::kRegatherAttr));
        }))
      gathered.insert(op.getResult(0));
  int64_t index = 0;
  optimizerStart = -1;
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
    if (foldedTransposes.count(op.getNumResults() ? op.getResult(0) : Value())) {
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

  json planJson = json::object();
  if (plan) {
    for (NamedAttribute entry : plan) {
      if (auto i = dyn_cast<IntegerAttr>(entry.getValue()))
        planJson[entry.getName().str()] = i.getInt();
    }
    if (auto axes = plan.getAs<DictionaryAttr>("axes")) {
      json axesJson = json::object();
      for (NamedAttribute entry : axes)
        if (auto list = dyn_cast<DenseI64ArrayAttr>(entry.getValue()))
          axesJson[entry.getName().str()] =
              std::vector<int64_t>(list.asArrayRef().begin(), list.asArrayRef().end());
      planJson["axes"] = axesJson;
    }
  }
  for (auto &[key, value] : options.planExtras.items())
    planJson[key] = value;

  json program = {{"name", "spmd"},
                  {"ranks", ranks},
                  {"slots", slotsJson},
                  {"buffers", buffers},
                  {"constants", constants},
                  {"instructions", instructions}};
  return json{{"format", "dtc-artifact"},
              {"version", ::dtc::rt::kArtifactVersion},
              {"producer", std::string("dtc ") + DTC_VERSION_STRING},
              {"source", options.sourceName},
              {"mesh", std::vector<int64_t>(grid.begin(), grid.end())},
              {"devices", devices},
              {"plan", planJson},
              {"optimizer", options.optimizer},
              {"communicators", communicators},
              {"tensors", tensors},
              {"programs", json::array({program})}};
}

} // namespace

FailureOr<json> mlir::dtc::buildArtifact(ModuleOp module,
                                         const ArtifactOptions &options) {
  auto step = module.lookupSymbol<func::FuncOp>("train_step");
  if (!step)
    return module.emitError() << "no @train_step to emit";
  auto plan = module->getAttrOfType<DictionaryAttr>(DtcDialect::kPlanAttr);
  auto gridRef = plan ? plan.getAs<FlatSymbolRefAttr>("grid") : nullptr;
  if (!gridRef)
    return module.emitError() << "the module has no dtc.plan grid (not partitioned)";
  FailureOr<SmallVector<int64_t>> grid = getGridShape(module, gridRef.getValue());
  if (failed(grid))
    return failure();
  Emitter emitter(module, step, *grid, plan);
  return emitter.run(options);
}
