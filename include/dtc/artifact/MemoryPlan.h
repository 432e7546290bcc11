//===- MemoryPlan.h - what a rank of an artifact allocates ------*- C++ -*-===//
//
// One definition of a rank's memory, used on both sides: `dtc compile`
// refuses a plan whose peak exceeds the device budget (and records the
// peak in the artifact), `dtc-run` refuses to start when the ranks of a node
// need more than it has available, and the executor's counting allocator
// measures the same quantities (--stats) so tests can compare.
//
// A rank allocates, for the whole run, every slot of its program
// (slotAllocationBytes each; a pipeline chunk's micro-batch slots once per
// copy its schedule keeps in flight), the collectives' staging: one packing
// buffer for the largest axis-wise collective (collectiveStagingBytes), per
// communicator the scratch its ring algorithms keep (the largest any of its
// collectives takes, collectiveScratchBytes), the buckets' buffer
// (the largest bucket's, and its scratch: bucketScratchBytes), a scalar per
// pipeline fill value, the backend's conversion copies (the largest set one
// kernel takes, WorkspaceModel::conversionBytes) and the kernel context's
// workspace (the largest any kernel takes, WorkspaceModel::contextBytes). While
// one kernel runs it also holds that call's temporaries
// (WorkspaceModel::scratchBytes). Workspace = the context's workspace + the
// largest temporaries; the peak is the sum of every kind. The executor
// allocates all of it at load (micro-batch copies during the first step), so
// from the second step on the measured high-water equals the plan.
//
// Library `dtc_artifact`: nothing here throws (the compiler, built with
// -fno-exceptions, calls it); the runtime's throwing wrappers, planned for
// the CPU backend, are include/dtc/runtime/MemoryPlan.h.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_ARTIFACT_MEMORYPLAN_H
#define DTC_ARTIFACT_MEMORYPLAN_H

#include "dtc/artifact/Artifact.h"
#include "dtc/artifact/WorkspaceModel.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtc::artifact {

/// Memory kinds: the slot categories, then collective staging, then the
/// kernels' workspace.
constexpr int kStagingKind = kNumMemCategories;
constexpr int kWorkspaceKind = kNumMemCategories + 1;
constexpr int kNumMemKinds = kNumMemCategories + 2;
/// "param", ..., "scalar", "staging", "workspace".
const char *memKindName(int kind) noexcept;
/// For people (every dtc message, summary and table): "parameters",
/// "gradients", "optimizer state", ..., "collective staging", "workspace".
const char *memKindDescription(int kind) noexcept;
/// The plan report's memory_bytes key of a kind: "params", "grads",
/// "optimizer", "activations", "inputs", "constants", "scalars",
/// "staging", "workspace".
const char *memKindReportKey(int kind) noexcept;
/// "optimizer state 50.21 GiB, parameters 25.10 GiB, gradients 25.10 GiB":
/// the `count` largest kinds of `need`.
std::string largestKinds(const struct MemoryNeed &need, int count) noexcept;

/// Bytes the executor allocates for a slot of `bytes`: 64-byte aligned,
/// rounded up, plus 64 bytes so vectorized loops may read past the end.
constexpr uint64_t slotAllocationBytes(uint64_t bytes) {
  return (bytes + 63) / 64 * 64 + 64;
}

/// What one rank running a program needs.
struct MemoryNeed {
  std::string program;
  /// Per kind: slot allocations of that category; [kStagingKind] the
  /// staging buffer's allocation plus every communicator's scratch;
  /// [kWorkspaceKind] the largest scratch of any one kernel.
  uint64_t bytes[kNumMemKinds] = {};
  /// Sum of every kind: the rank's high-water mark.
  uint64_t peak = 0;
  /// The instruction whose scratch is the workspace (-1: none).
  int workspaceInstruction = -1;
};

/// Bytes of packing buffer the executor needs for collective `ins` of `p`
/// (axis-wise all_gather / reduce_scatter off the outermost dimension, and
/// all_to_all's send and receive halves).
uint64_t collectiveStagingBytes(const ProgramDecl &p, const InstrDecl &ins);
/// Scratch the host communicator's ring algorithms take for `count`
/// elements of `elementBytes` on a group of `members` (docs/runtime.md
/// "Collectives"): all_reduce one chunk plus one element, reduce_scatter
/// twice the whole. Communicator::allReduceScratch and reduceScatterScratch
/// are these.
uint64_t ringAllReduceScratchBytes(uint64_t count, uint64_t elementBytes,
                                   int members);
uint64_t ringReduceScatterScratchBytes(uint64_t count, uint64_t elementBytes,
                                       int members);
/// Ring scratch collective `ins` of `p` takes on its communicator (0 for
/// the collectives without a ring). The executor reserves the largest per
/// communicator at load.
uint64_t collectiveScratchBytes(const Artifact &a, const ProgramDecl &p,
                                const InstrDecl &ins);
/// Ring scratch of bucket `b`'s one collective (of all its members'
/// elements). The bucket's own buffer, as large as the largest bucket's
/// (BucketDecl::bufferBytes), is collective staging too.
uint64_t bucketScratchBytes(const ProgramDecl &p, const BucketDecl &b);
/// Pipelines: per chunk of `p`, the most micro-batch copies of its slots
/// alive at once in p's schedule (a copy lives from its micro-batch's first
/// action on the chunk to its last). The executor allocates exactly that
/// many copies per chunk and reuses them.
std::vector<uint64_t> microbatchCopiesInFlight(const ProgramDecl &p);
/// The need of every program of a validated artifact, in program order,
/// when each rank's kernels run on `threads` threads (the fused attention's
/// tiles and layer_norm's rows are per thread) of the backend `model`
/// describes.
std::vector<MemoryNeed> memoryNeeds(const Artifact &a, int threads,
                                    const WorkspaceModel &model);

/// For the compiler: validates `body` like the runtime does, then fills
/// `needs`. On failure returns false with `error` prefixed by `label`.
bool artifactMemoryNeeds(const nlohmann::json &body, const std::string &label,
                         int threads, const WorkspaceModel &model,
                         std::vector<MemoryNeed> &needs,
                         std::string &error) noexcept;

/// Kernel threads per rank when `ranksOnNode` ranks share this machine:
/// OMP_NUM_THREADS or OPENBLAS_NUM_THREADS when set, else the cores this
/// process may run on divided among the ranks (at least 1).
int defaultKernelThreads(int ranksOnNode) noexcept;

/// The kernel threads a rank gets by default when all `devices` ranks of a
/// mesh run on this machine (defaultKernelThreads): what the compiler plans
/// the thread-dependent workspace for.
int plannedKernelThreads(int64_t devices) noexcept;

/// "1.50 GiB", "512.00 KiB", "100 B".
std::string formatBytes(uint64_t bytes) noexcept;

/// Parses a size: plain bytes ("1000000"), or a number (fractions allowed)
/// with a unit: K/M/G/T (also KB/MB/GB/TB) = 10^3.., KiB/MiB/GiB/TiB =
/// 2^10..; units are case-insensitive, an optional final "B" aside. The
/// result must be a whole number of bytes >= 1 and < 2^63. Returns false on
/// anything else.
bool parseByteSize(std::string_view text, uint64_t &bytes) noexcept;

/// This machine's physical memory (0 if unknown).
uint64_t physicalMemoryBytes() noexcept;
/// Memory available to new allocations now: /proc/meminfo MemAvailable
/// (0 if unknown).
uint64_t availableMemoryBytes() noexcept;

/// False unless `ranksOnNode` ranks of the largest program, with kernels on
/// `threads` threads each, fit in this node's available memory; `error`
/// gives the numbers.
bool checkMemoryFits(const Artifact &a, int ranksOnNode, int threads,
                     const WorkspaceModel &model, std::string &error) noexcept;

} // namespace dtc::artifact

namespace dtc::rt {
using namespace ::dtc::artifact;
} // namespace dtc::rt

#endif // DTC_ARTIFACT_MEMORYPLAN_H
