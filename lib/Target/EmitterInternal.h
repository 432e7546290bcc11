//===- EmitterInternal.h - the artifact emitter's shared pieces -*- C++ -*-===//
//
// Private to lib/Target. The emitter in four steps:
//   EmitArtifact.cpp     the entry point: reads the plan, emits a program per
//                        step function, assembles the artifact body with its
//                        shared tensors and communicators;
//   SlotPlanning.cpp     where values live: memory slots and the buffers
//                        viewing them (liveness, pools, in-place updates),
//                        and when values exist (scopes of micro-batches);
//   ProgramEmission.cpp  op -> instruction, and the program of a step
//                        without stages or micro-batches;
//   PipelineEmission.cpp the program of one pipeline stage: its instruction
//                        lists, messages, accumulations and schedule.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_LIB_TARGET_EMITTERINTERNAL_H
#define DTC_LIB_TARGET_EMITTERINTERNAL_H

#include "dtc/Dialect/DtcOps.h"
#include "dtc/Target/Artifact.h"
#include "dtc/artifact/Vocabulary.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace mlir::dtc::emitter {

using json = nlohmann::json;

//===----------------------------------------------------------------------===//
// Vocabulary: every name of docs/artifact.md the emitter writes or compares
// (instruction kinds, roles, phases, memory categories, reductions, scopes)
// comes from here, so that they can follow one shared vocabulary in one edit.
//===----------------------------------------------------------------------===//

// The artifact's names are the artifact library's vocabulary
// (include/dtc/artifact/Vocabulary.h), which the runtime parses with.
using CollectiveKind = ::dtc::artifact::CollectiveKind;
inline StringRef collectiveName(CollectiveKind kind) {
  return ::dtc::artifact::collectiveKindName(kind);
}

/// The instructions of pipelines and micro-batches.
using PipelineOp = ::dtc::artifact::PipeOp;
inline StringRef pipelineOpName(PipelineOp op) {
  return ::dtc::artifact::pipeOpName(op);
}

/// The kernel copying a result into its tensor or the argument it updates.
constexpr StringLiteral kCopyKernel = "copy";

/// Roles of the artifact's tensors (the dtc.role of the step's arguments
/// and results, which the emitter copies).
using TensorRole = ::dtc::artifact::Role;
inline StringRef tensorRoleName(TensorRole role) {
  return ::dtc::artifact::roleName(role);
}

/// dtc.role values of the step function that name no artifact tensor: a
/// message from another stage (argument), a message to one (result), and a
/// result that is an argument's new value.
constexpr StringLiteral kRecvRole = "recv";
constexpr StringLiteral kSendRole = "send";
constexpr StringLiteral kUpdateRole = "update";

/// The parts of a training step (dtc.phase, an instruction's "phase", the
/// instruction lists of a pipeline chunk).
using ArtifactPhase = ::dtc::artifact::Phase;
inline StringRef artifactPhaseName(ArtifactPhase phase) {
  return ::dtc::artifact::phaseName(phase);
}

/// What a memory slot holds (a slot's "category").
using MemoryCategory = ::dtc::artifact::MemCategory;
inline StringRef categoryName(MemoryCategory category) {
  return ::dtc::artifact::memCategoryName(category);
}

/// A collective's "reduction".
inline std::string reductionName(shard::ReductionKind kind) {
  return shard::stringifyReductionKind(kind).str();
}

/// Pipelines: when a value exists. Step values are computed once per step
/// before the micro-batches, Accumulated ones once after them (sums over
/// the micro-batches), MicroBatch ones once per micro-batch.
enum class ValueScope { Step, MicroBatch, Accumulated };

/// dtc.scope's values; a slot's "scope" (MicroBatch: a copy per micro-batch
/// in flight).
inline StringRef scopeName(ValueScope scope) {
  switch (scope) {
  case ValueScope::Step:
    return "step";
  case ValueScope::MicroBatch:
    return "microbatch";
  case ValueScope::Accumulated:
    return "accumulated";
  }
  llvm_unreachable("unknown scope");
}

//===----------------------------------------------------------------------===//
// The plan and what the programs of an artifact share (EmitArtifact.cpp)
//===----------------------------------------------------------------------===//

/// What the emitter reads of the module's dtc.plan (readPlan).
struct PlanInfo {
  /// The grid's shape, its virtual micro-batch axes (the last ones) included.
  SmallVector<int64_t> grid;
  /// The virtual micro-batch axes: never a device, never a communicator.
  SmallVector<int64_t> microBatchAxes;
  /// The pipeline's axes: messages between stages travel over them.
  SmallVector<int64_t> pipelineAxes;
  /// The parallel dimensions the plan names, in its order: communicators
  /// are named after them.
  SmallVector<std::pair<std::string, SmallVector<int64_t>>> namedAxes;
  /// The plan as the artifact's "plan" records it (its integers and axes).
  json record = json::object();

  bool isMicroBatchAxis(int64_t axis) const {
    return llvm::is_contained(microBatchAxes, axis);
  }
};

/// The tensors and communicators of one artifact, which its programs
/// declare as they use them.
class ArtifactTables {
public:
  ArtifactTables(ModuleOp module, const PlanInfo &plan)
      : module(module), plan(plan) {}

  /// Declares a global tensor unless another program already did.
  void declareTensor(const json &tensor);
  /// The communicator over `axes`, declared at its first use.
  FailureOr<std::string> communicator(ArrayRef<int16_t> axes);

  json tensors = json::array(), communicators = json::array();

private:
  ModuleOp module;
  const PlanInfo &plan;
  std::map<std::vector<int16_t>, std::string> commNames;
  std::set<std::string> tensorNames;
};

//===----------------------------------------------------------------------===//
// Slot planning (SlotPlanning.cpp)
//===----------------------------------------------------------------------===//

RankedTensorType typeOf(Value v);
std::optional<std::string> dtypeName(Type type);
int64_t elementBytes(Type type);
json shapeJson(ArrayRef<int64_t> shape);

/// Pipelines: where a value's bytes live. Step: one copy for the step.
/// Temp: a per-micro-batch value read only by the instruction list that
/// computes it (one copy, reused by every list). MicroBatch: read by a
/// later list of its micro-batch (a copy per micro-batch in flight).
enum class Pool { Step, Temp, MicroBatch };

struct Slot {
  int64_t bytes = 0;
  MemoryCategory category;
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

/// The memory of one program: slots, planned by liveness, and the buffers
/// viewing them. A slot is reused once every value viewing it is dead.
class SlotPlan {
public:
  explicit SlotPlan(func::FuncOp step) : step(step) {}

  int newSlot(int64_t bytes, MemoryCategory category, bool pinned,
              int chunk = -1);
  /// A buffer of `type` in `slot` (grown to hold it) that no value is read
  /// from yet.
  int addBuffer(int slot, RankedTensorType type,
                std::optional<std::string> tensor = std::nullopt);
  /// A buffer for `value` in `slot`; unless `bind` is false, `value` is
  /// henceforth read from it (output copies bind nothing).
  FailureOr<int> newBuffer(int slot, Value value, Location loc,
                           std::optional<std::string> tensor = std::nullopt,
                           bool bind = true);
  /// A buffer for `value` in a free slot of its pool, else a new slot.
  FailureOr<int> allocate(Value value, MemoryCategory category);
  /// `value` lives in existing buffer `buffer` (views, in-place results).
  int alias(Value value, int buffer);
  /// `value` is dead: its slot is free once no other value views it.
  void release(Value value);
  /// A scratch slot no value views is free.
  void releaseSlot(int slot);

  /// `index`: the instruction computing `value` in the step's one list
  /// (ZeRO's accounting below), or -1 in pipeline lists (a parameter
  /// gradient is "grad").
  MemoryCategory categoryOf(Value value, int64_t index = -1) const;
  /// The buffer of the argument `result` replaces when the step returns it
  /// as that argument's update and nothing reads the argument from
  /// instruction `index` on: the result is written there directly (no
  /// copy, no second buffer). -1 otherwise.
  int updatedArgumentBuffer(Value result, int64_t index);

  /// The program's "slots".
  json slotsJson() const;

  std::vector<Slot> slots;
  json buffers = json::array();
  std::vector<int> bufferSlot;
  llvm::DenseMap<Value, int> bufferOf;
  /// The position of each value's last reader.
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
  /// Values gathered from dtc.regather arguments (ZeRO-3's parameters).
  llvm::DenseSet<Value> gathered;
  /// Pipelines: the pool of each value (absent: Step) and, for MicroBatch,
  /// its chunk.
  llvm::DenseMap<Value, std::pair<Pool, int>> pools;

private:
  func::FuncOp step;
  /// Free slots of one pool ordered by (bytes, release order): best fit
  /// and the largest slot in O(log n), the first released winning ties.
  using FreePool = std::set<std::tuple<int64_t, uint64_t, int>>;
  std::map<std::string, FreePool, std::less<>> freeSlots;
  uint64_t releases = 0;
};

/// ZeRO-3: the values gathered (and padded, cropped, transposed) from
/// `dtc.regather` arguments, the stored pieces of parameters.
llvm::DenseSet<Value> gatheredParameters(func::FuncOp step);

/// Pipelines: when each value of a partitioned step function exists (see
/// ValueScope). Fails on an op that needs the whole batch inside a
/// micro-batch.
LogicalResult classifyScopes(func::FuncOp step, ArrayRef<int64_t> mbAxes,
                             llvm::DenseMap<Value, ValueScope> &scope);
/// A gather over micro-batch axes only of a per-micro-batch argument (an
/// op that needs the whole batch, dtc.whole_batch): the input's whole local
/// piece, which the input's buffer holds; a copy once per step, no
/// communication.
bool isWholeInputGather(Operation &op,
                        const llvm::DenseMap<Value, ValueScope> &scope,
                        ArrayRef<int64_t> mbAxes);

/// The per-micro-batch list of a phase: forward, B or W (-1: none).
int64_t phaseList(StringRef phase);

//===----------------------------------------------------------------------===//
// Program emission (ProgramEmission.cpp)
//===----------------------------------------------------------------------===//

/// Emits the program of one step function: every dtc op becomes the kernel
/// of the same name, shard collectives become collective instructions.
class ProgramEmitter {
public:
  ProgramEmitter(ModuleOp module, func::FuncOp step, const PlanInfo &plan,
                 ArtifactTables &tables)
      : module(module), step(step), plan(plan), tables(tables), memory(step) {}

  /// The program of a step without micro-batches or stages.
  FailureOr<json> emitSpmdProgram();

  // The steps the pipeline's emitter shares.
  /// Transposes only matmuls read are not emitted (foldedTransposes).
  void foldTransposes();
  LogicalResult emitArguments();
  LogicalResult emitConstant(arith::ConstantOp op);
  /// `index`: the op's position in the liveness order (lastUse).
  LogicalResult emitOp(Operation *op, int64_t index);
  LogicalResult emitReturn(func::ReturnOp ret);
  void instruction(StringRef kernel, ArrayRef<int> in, ArrayRef<int> out,
                   json attrs, Operation *op);

  ModuleOp module;
  func::FuncOp step;
  const PlanInfo &plan;
  ArtifactTables &tables;
  SlotPlan memory;
  json constants = json::array(), instructions = json::array();
  /// Where instruction() appends (pipelines: the list being emitted).
  json *current = &instructions;
  /// Transposes (of the last two dims) only matmuls read: not emitted; the
  /// matmul reads their source with a transpose flag (sgemm does it free).
  llvm::DenseMap<Value, Value> foldedTransposes;

private:
  LogicalResult emitArgument(unsigned i);
  /// The last positions reading each value, in the step's one list.
  void planSpmdLifetimes();
  LogicalResult emitSpmdBody();
  FailureOr<SmallVector<int>> operandBuffers(Operation *op);
  /// `inPlace`: the result reuses the input's buffer.
  LogicalResult emitCollective(Operation *op, CollectiveKind kind,
                               ArrayRef<int16_t> axes, json attrs,
                               ArrayRef<int> in, int64_t index,
                               bool inPlace = false);
  LogicalResult emitAllReduce(shard::AllReduceOp op, ArrayRef<int> in,
                              int64_t index);
  LogicalResult emitAllSlice(shard::AllSliceOp op, ArrayRef<int> in,
                             int64_t index);
  /// A gather of an input's micro-batches (isWholeInputGather): a copy of
  /// the input's whole local piece, which its buffer holds.
  LogicalResult emitWholeInput(Operation *op, ArrayRef<int> in, int64_t index);
  LogicalResult emitView(Operation *op, ArrayRef<int> in, int64_t index);
  LogicalResult emitKernel(Operation *op, ArrayRef<int> in, int64_t index);
  /// The buffer of the argument `result` updates in place, or -1.
  int inPlaceUpdateBuffer(Operation *op, OpResult result, int64_t index);
  /// Frees what dies at `op`; results nobody reads die at once.
  void releaseDeadValues(Operation *op, int64_t index);
  LogicalResult emitOutput(func::ReturnOp ret, unsigned idx, Value value,
                           StringRef role, int source);
};

//===----------------------------------------------------------------------===//
// Pipeline emission (PipelineEmission.cpp)
//===----------------------------------------------------------------------===//

/// The program of one pipeline stage (docs/artifact.md "Pipelines"):
/// `pipeline` is ArtifactOptions::pipeline.
FailureOr<json> emitStageProgram(ProgramEmitter &program, const json &pipeline);

} // namespace mlir::dtc::emitter

#endif // DTC_LIB_TARGET_EMITTERINTERNAL_H
