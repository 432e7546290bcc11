//===- Artifact.h - the parsed and validated artifact body ------*- C++ -*-===//
//
// parseArtifact() turns the JSON body of a `.dtc` file into these structs and
// performs every check of docs/artifact.md "Validation on load" except the
// rank count (checkRankCount). A failure comes back as a message that starts
// with the file label: "model.dtc: program 'spmd' instruction 7 (softmax):
// attribute 'axis' = 3 is out of range for a rank-2 operand".
//
// Library `dtc_artifact`: MLIR-free, every entry point here is noexcept, so
// the compiler (-fno-exceptions) and the runtime call the same code; the
// runtime turns the messages into dtc::rt::Error (include/dtc/runtime/
// Artifact.h).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_ARTIFACT_ARTIFACT_H
#define DTC_ARTIFACT_ARTIFACT_H

#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/artifact/InitSpec.h"
#include "dtc/artifact/PieceLayout.h"
#include "dtc/artifact/Schedule.h"
#include "dtc/artifact/Types.h"
#include "dtc/artifact/Vocabulary.h"

#include <nlohmann/json.hpp>

#include <string>
#include <unordered_map>
#include <vector>

namespace dtc::artifact {

struct TensorDecl {
  std::string name;
  Role role = Role::Param;
  DType dtype = DType::F32;
  Shape shape; ///< global
  Sharding sharding;
  std::vector<int64_t>
      pieces;           ///< per dim piece size, 0 = ceil(G/n); may be empty
  InitSpec init;        ///< param, optimizer_state
  std::string initText; ///< as written
  std::string of; ///< optimizer_state: the parameter ("" for step-wide state)
  /// optimizer_state: "master" (the f32 master weights of `of`, a bf16/f16
  /// parameter), "loss_scale" (dynamic loss scaling's scale),
  /// "loss_scale_good_steps" (good steps in a row), "skipped_steps" (steps
  /// it skipped), or "".
  std::string kind;
  int64_t max = 0; ///< integer input: exclusive bound (0 = none)
  /// input: the dimension the program holds in a permuted sequence order
  /// over orderedWays ranks (the artifact's "striped" or "zigzag"; the data
  /// feed permutes it), or -1.
  int orderedDim = -1;
  int64_t orderedWays = 1;
  SequenceOrder order = SequenceOrder::Natural;
};

/// The piece of tensor `d` the rank at mesh coordinates `coords` holds,
/// with the tensor's sequence order.
Piece pieceOf(const Mesh &mesh, const TensorDecl &d,
              const std::vector<int64_t> &coords);

struct CommDecl {
  std::string name;
  std::vector<int> meshAxes;
};

struct SlotDecl {
  uint64_t bytes = 0;
  MemCategory category = MemCategory::Activation;
  /// Pipelines: >= 0 for a slot of one micro-batch of this chunk (scope
  /// "microbatch": a copy per micro-batch in flight), -1 for one copy.
  int chunk = -1;
};

struct BufferDecl {
  int slot = 0;
  DType dtype = DType::F32;
  Shape shape;     ///< local
  int tensor = -1; ///< index into Artifact::tensors, -1 if none
  uint64_t bytes() const { return uint64_t(numel(shape)) * dtypeSize(dtype); }
};

struct ConstantDecl {
  int buffer = 0;
  bool isSplat = true;
  double splat = 0;
  std::string data; ///< decoded bytes (exactly the buffer's bytes)
};

struct InstrDecl {
  std::string op;
  std::vector<int> in, out;
  nlohmann::json attrs = nlohmann::json::object();
  bool isCollective = false;
  PipeOp pipe = PipeOp::None;
  // send / recv: the peer's index in `comm`, the message id.
  int peer = -1;
  int64_t message = -1;
  double fillValue = 0; ///< fill
  // Collectives only (filled by validation):
  CollectiveKind coll = CollectiveKind::AllReduce;
  int comm = -1; ///< index into Artifact::comms
  ReduceOp reduce = ReduceOp::Sum;
  int axis = 0, splitAxis = 0, concatAxis = 0;
  /// shift: member m sends to (m + offset) mod n (the group's size).
  int offset = 0;
  /// moe_exchange: from token slots to experts' buffers (else back).
  bool toExperts = false;
  /// all_reduce, reduce_scatter or all_gather in a bucket: index into
  /// ProgramDecl::buckets.
  int bucket = -1;
  /// Part of the forward-only run that evaluates the loss (the program's
  /// "evaluation" section, Evaluation.h).
  bool evaluation = false;
};

/// A bucket: collectives of one kind, communicator, reduction and dtype in a
/// program's `instructions`, run as one collective at the last member. Each
/// member packs its share of the bucket's buffer as it runs; the last member
/// runs the collective and unpacks every member's result. A block holds one
/// share of each member at `offsets`:
///  - all_reduce (data-parallel gradients): the operand; the buffer is one
///    block, reduced in place;
///  - reduce_scatter (ZeRO gradients): the piece for each member j of the
///    group goes to block j (a piece along the instruction's axis: its
///    result's size), and block `groupSize` receives the reduced pieces;
///  - all_gather (ZeRO parameters): the operand goes to block 0, and blocks
///    1..groupSize receive every member's block 0.
struct BucketDecl {
  CollectiveKind coll = CollectiveKind::AllReduce;
  std::vector<int> members;      ///< instruction indices, in order
  std::vector<uint64_t> offsets; ///< each member's share in a block
  uint64_t bytes = 0;            ///< a block: the members' shares together
  int64_t elements = 0;          ///< a block's elements
  int groupSize = 1;             ///< the communicator's members
  /// The bucket's buffer.
  uint64_t bufferBytes() const {
    return coll == CollectiveKind::AllReduce ? bytes
                                             : uint64_t(groupSize + 1) * bytes;
  }
  /// The larger of the collective's operand and result.
  uint64_t dataBytes() const {
    return coll == CollectiveKind::AllReduce ? bytes
                                             : uint64_t(groupSize) * bytes;
  }
};

/// The instruction lists one micro-batch runs on one model chunk.
struct ChunkDecl {
  std::vector<InstrDecl> forward, backwardInput, backwardWeight;
};

struct ProgramDecl {
  std::string name;
  std::vector<int> ranks;
  std::vector<SlotDecl> slots;
  std::vector<BufferDecl> buffers;
  std::vector<ConstantDecl> constants;
  /// Without a pipeline: the whole step. With one: what runs once before
  /// the micro-batches.
  std::vector<InstrDecl> instructions;
  /// The buckets of `instructions` (never in a pipeline's lists).
  std::vector<BucketDecl> buckets;
  /// Per tensor (Artifact::tensors index): the buffer bound to it, or -1.
  /// Filled by the parser so Artifact::bufferOf is O(1).
  std::vector<int> tensorBuffer;
  // Pipelines only:
  int stage = -1;                      ///< pipeline stage
  std::vector<ChunkDecl> chunks;       ///< one per virtual stage on this stage
  std::vector<InstrDecl> finish;       ///< once after the micro-batches
  std::vector<sched::Action> schedule; ///< this stage's order of actions
  /// Whether the program has an "evaluation" section (which marks
  /// InstrDecl::evaluation).
  bool hasEvaluation = false;
};

/// The artifact's "pipeline" section.
struct PipelineDecl {
  bool present = false;
  int stages = 1, virtualStages = 1, microbatches = 1;
  std::string schedule;
};

struct Artifact {
  std::string label; ///< file name used in messages
  int version = kArtifactVersion;
  std::string producer, source;
  Mesh mesh;
  int64_t devices = 0;
  nlohmann::json plan = nlohmann::json::object();
  nlohmann::json optimizer = nlohmann::json::object();
  /// "memory": the per-device budget the compiler planned for and the peak
  /// it computed (0 = not recorded; informational, see MemoryPlan.h).
  uint64_t memoryBudgetBytes = 0, memoryPeakBytes = 0;
  std::vector<CommDecl> comms;
  std::vector<TensorDecl> tensors;
  std::vector<ProgramDecl> programs;
  PipelineDecl pipeline;

  /// Tensor name -> index, filled by the parser (lookups stay O(1) in
  /// artifacts with hundreds of thousands of tensors).
  std::unordered_map<std::string, int> tensorIndex;

  int findTensor(const std::string &name) const; ///< -1 if none
  int findComm(const std::string &name) const;   ///< -1 if none
  /// Index of the program that runs `rank`.
  int programOf(int64_t rank) const;
  /// Indices of tensors with this role, in artifact order.
  std::vector<int> tensorsWithRole(Role r) const;
  /// Buffer id bound to tensor `t` in program `p`, or -1.
  int bufferOf(int p, int t) const;
  /// Whether every program has an "evaluation" section (a forward-only run
  /// of the loss is possible).
  bool hasEvaluation() const;
};

/// Parses and validates a JSON body into `out`. On the first problem returns
/// false and sets `error`, prefixed by `label`.
bool parseArtifact(const nlohmann::json &body, const std::string &label,
                   Artifact &out, std::string &error) noexcept;
/// parseArtifact for a body this process validated with it already: the
/// same checks except the replay of every rank's communication (the
/// deadlock proof), which is most of the time on large meshes.
bool parseCheckedArtifact(const nlohmann::json &body, const std::string &label,
                          Artifact &out, std::string &error) noexcept;
/// Checks the container, parses and validates.
bool loadArtifactBytes(std::string_view fileBytes, const std::string &label,
                       Artifact &out, std::string &error) noexcept;
/// Reads the file, then loadArtifactBytes with the path as label.
bool loadArtifactFile(const std::string &path, Artifact &out,
                      std::string &error) noexcept;
/// False (with the message) unless the artifact's device count is `ranks`.
bool checkRankCount(const Artifact &a, int64_t ranks,
                    std::string &error) noexcept;

/// Validation without keeping the result (the compiler's check of what it
/// writes): container-free JSON body, expected rank count (0 = do not
/// check). Returns false and sets `error` (prefixed by `label`) on the first
/// problem.
bool checkArtifact(const nlohmann::json &body, const std::string &label,
                   int64_t ranks, std::string &error) noexcept;

} // namespace dtc::artifact

namespace dtc::rt {
using namespace ::dtc::artifact;
} // namespace dtc::rt

#endif // DTC_ARTIFACT_ARTIFACT_H
