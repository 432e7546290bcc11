//===- Vocabulary.h - the words of the artifact contract --------*- C++ -*-===//
//
// The one place that names the artifact's kinds (docs/artifact.md): the
// collectives, the roles of tensors, the phases of a training step, the
// memory categories of slots, the reductions and the pipeline instructions.
// The compiler (cost model, resharding, emitter, reports) and the runtime
// (loader, executor, statistics) spell them only through these functions,
// so a name cannot drift between the two sides.
//
// Plain C++17, MLIR-free, nothing throws: code built with -fno-exceptions
// may include it.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_ARTIFACT_VOCABULARY_H
#define DTC_ARTIFACT_VOCABULARY_H

#include <string>
#include <string_view>

namespace dtc::artifact {

/// Collective instructions (docs/artifact.md "Collectives"). The order is
/// the order of statistics and reports.
enum class CollectiveKind {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllSlice,
  AllToAll,
  Shift,
  /// Expert parallelism's exchange of slot rows (docs/artifact.md).
  MoeExchange
};
constexpr int kNumCollectiveKinds = 7;
/// "all_reduce", "all_gather", "reduce_scatter", "all_slice", "all_to_all",
/// "shift", "moe_exchange".
const char *collectiveKindName(CollectiveKind kind) noexcept;
bool parseCollectiveKind(std::string_view name, CollectiveKind &out) noexcept;

/// Roles of the artifact's tensors (docs/artifact.md "Tensors").
enum class Role { Param, OptimizerState, Input, Step, Loss, Output };
constexpr int kNumRoles = 6;
/// "param", "optimizer_state", "input", "step", "loss", "output".
const char *roleName(Role role) noexcept;
bool parseRole(std::string_view name, Role &out) noexcept;

/// Phases of a training step's ops: the forward pass, the backward's input
/// gradients (B) and weight gradients (W), the optimizer update.
enum class Phase { Forward, BackwardInput, BackwardWeight, Optimizer };
constexpr int kNumPhases = 4;
/// "forward", "backward_input", "backward_weight", "optimizer".
const char *phaseName(Phase phase) noexcept;
bool parsePhase(std::string_view name, Phase &out) noexcept;

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
/// "param", "grad", "optimizer", "activation", "input", "constant",
/// "scalar".
const char *memCategoryName(MemCategory category) noexcept;
bool parseMemCategory(std::string_view name, MemCategory &out) noexcept;

/// Reductions of all_reduce and reduce_scatter.
enum class ReduceOp { Sum, Max, Min, Average };
constexpr int kNumReduceOps = 4;
/// "sum", "max", "min", "average".
const char *reduceOpName(ReduceOp op) noexcept;
bool parseReduceOp(std::string_view name, ReduceOp &out) noexcept;

/// Instructions that are neither kernels nor collectives: pipelines
/// (docs/artifact.md "Pipelines"). None: a kernel or a collective.
enum class PipeOp { None, Send, Recv, MicrobatchSlice, Accumulate, Fill };
/// "send", "recv", "microbatch_slice", "accumulate", "fill" ("" for None).
const char *pipeOpName(PipeOp op) noexcept;
/// False for anything else, None included.
bool parsePipeOp(std::string_view name, PipeOp &out) noexcept;

/// Every name of a kind as messages list them, in enum order: "param,
/// optimizer_state, input, step, loss or output".
std::string roleNameList();
std::string memCategoryNameList();
std::string reduceOpNameList();

} // namespace dtc::artifact

// The runtime's names for the same words.
namespace dtc::rt {
using namespace ::dtc::artifact;
using CollKind = ::dtc::artifact::CollectiveKind;
constexpr int kNumCollKinds = ::dtc::artifact::kNumCollectiveKinds;
inline const char *collKindName(CollKind kind) noexcept {
  return ::dtc::artifact::collectiveKindName(kind);
}
inline bool parseCollKind(std::string_view name, CollKind &out) noexcept {
  return ::dtc::artifact::parseCollectiveKind(name, out);
}
} // namespace dtc::rt

#endif // DTC_ARTIFACT_VOCABULARY_H
