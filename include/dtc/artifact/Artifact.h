//===- Artifact.h - the parsed and validated artifact body ------*- C++ -*-===//
//
// parseArtifact() turns the JSON body of a `.dtc` file into these structs and
// performs every check of docs/artifact.md "Validation on load" except the
// rank count (checkRankCount). Failures throw dtc::rt::Error whose message
// starts with the file label: "model.dtc: program 'spmd' instruction 7
// (softmax): attribute 'axis' = 3 is out of range for a rank-2 operand".
//
// Internal to the runtime (throws). The compiler-facing, non-throwing entry
// point is dtc::rt::checkArtifact() at the end of this file.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_ARTIFACT_H
#define DTC_RUNTIME_ARTIFACT_H

#include "dtc/runtime/ArtifactFormat.h"
#include "dtc/runtime/Schedule.h"
#include "dtc/runtime/Types.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace dtc::rt {

enum class Role { Param, OptimizerState, Input, Step, Loss, Output };
const char *roleName(Role r);

/// Memory categories of slots (docs/artifact.md "Programs").
enum class MemCategory {
  Param,
  Grad,
  Optimizer,
  Activation,
  Input,
  Constant,
  Scalar
};
constexpr int kNumMemCategories = 7;
const char *memCategoryName(MemCategory c);

/// Per dimension: the mesh axes that split it, major first.
using Sharding = std::vector<std::vector<int>>;

/// `init` of a param / optimizer_state: normal(STD), uniform(LO,HI), zeros,
/// ones, fill(V).
struct InitSpec {
  enum Kind { Zeros, Ones, Normal, Uniform, Fill } kind = Zeros;
  double a = 0, b = 0; ///< normal: a = STD; uniform: [a, b); fill: a = V
};
/// Parses an init string; returns false if malformed.
bool parseInitSpec(const std::string &text, InitSpec &out);

/// The device mesh: axis sizes, outermost first; rank <-> coordinates in
/// row-major order.
class Mesh {
public:
  Mesh() = default;
  explicit Mesh(std::vector<int64_t> axes);
  const std::vector<int64_t> &axes() const { return axes_; }
  int numAxes() const { return int(axes_.size()); }
  int64_t devices() const;
  std::vector<int64_t> coords(int64_t rank) const;
  /// Product of the sizes of `axes`.
  int64_t groupSize(const std::vector<int> &axes) const;
  /// Row-major index of `c` over `axes` in the listed order.
  int64_t groupIndex(const std::vector<int64_t> &c,
                     const std::vector<int> &axes) const;
  /// Row-major index of `c` over the axes NOT in `axes` (identifies the group).
  int64_t groupColor(const std::vector<int64_t> &c,
                     const std::vector<int> &axes) const;
  /// "2x2"
  std::string str() const;

private:
  std::vector<int64_t> axes_;
};

/// The local piece of a global tensor on one rank. A dimension of size G
/// split into n pieces has pieces of ceil(G/n) elements: piece i holds
/// global elements [i*ceil(G/n), min((i+1)*ceil(G/n), G)) followed by
/// padding (uneven splits; a piece may be all padding).
struct Piece {
  Shape local;  ///< local (padded) shape: the buffer's
  Shape offset; ///< global index of the piece's first element, per dim
  Shape extent; ///< elements of the piece inside the global tensor, per dim
};
/// `pieces[d]`, when given and non-zero, is dimension d's piece size
/// instead of ceil(G/n) (the artifact's "pieces").
Piece pieceOf(const Mesh &mesh, const Sharding &sharding, const Shape &global,
              const std::vector<int64_t> &coords,
              const std::vector<int64_t> &pieces = {});
/// Calls f(localStart, globalStart, length) for each contiguous run of the
/// piece's elements inside the global tensor (row-major element indices
/// into the local buffer and the global tensor); padding is skipped.
void forEachPieceRun(const Shape &global, const Piece &piece,
                     const std::function<void(int64_t, int64_t, int64_t)> &f);

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
};

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

/// Collective ops (docs/artifact.md "Collectives").
enum class CollKind { AllReduce, AllGather, ReduceScatter, AllSlice, AllToAll };
constexpr int kNumCollKinds = 5;
const char *collKindName(CollKind k);
bool parseCollKind(const std::string &op, CollKind &out);
enum class ReduceOp { Sum, Max, Min, Average };

/// Instructions that are neither kernels nor collectives: pipelines
/// (docs/artifact.md "Pipelines").
enum class PipeOp { None, Send, Recv, MicrobatchSlice, Accumulate, Fill };

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
  CollKind coll = CollKind::AllReduce;
  int comm = -1; ///< index into Artifact::comms
  ReduceOp reduce = ReduceOp::Sum;
  int axis = 0, splitAxis = 0, concatAxis = 0;
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
  /// Per tensor (Artifact::tensors index): the buffer bound to it, or -1.
  /// Filled by the parser so Artifact::bufferOf is O(1).
  std::vector<int> tensorBuffer;
  // Pipelines only:
  int stage = -1;                      ///< pipeline stage
  std::vector<ChunkDecl> chunks;       ///< one per virtual stage on this stage
  std::vector<InstrDecl> finish;       ///< once after the micro-batches
  std::vector<sched::Action> schedule; ///< this stage's order of actions
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
};

/// Parses and validates a JSON body; `label` prefixes every message.
Artifact parseArtifact(const nlohmann::json &body, const std::string &label);
/// Checks the container, parses and validates.
Artifact loadArtifactBytes(std::string_view fileBytes,
                           const std::string &label);
/// Reads the file, then loadArtifactBytes with the path as label.
Artifact loadArtifactFile(const std::string &path);
/// Throws unless the artifact's device count equals `ranks`.
void checkRankCount(const Artifact &a, int64_t ranks);

/// Non-throwing validation for the compiler: container-free JSON body,
/// expected rank count (0 = do not check). Returns false and sets `error`
/// (prefixed by `label`) on the first problem.
bool checkArtifact(const nlohmann::json &body, const std::string &label,
                   int64_t ranks, std::string &error) noexcept;

} // namespace dtc::rt

#endif // DTC_RUNTIME_ARTIFACT_H
