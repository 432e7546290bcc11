//===- Executor.h - one rank's program: memory, kernels, collectives -*- C++ -*-===//
//
// RankExecutor holds what one rank needs to run its program of an artifact:
// one allocation per slot, typed buffer views, resolved kernels, the group
// communicators, and counters (bytes per memory category, calls and bytes per
// collective kind). It knows nothing about files, steps or checkpoints; the
// Trainer (Trainer.h) and LocalRunner (LocalRunner.h) drive it.
//
// Internal to the runtime: throws dtc::rt::Error.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_EXECUTOR_H
#define DTC_RUNTIME_EXECUTOR_H

#include "dtc/kernels/Kernel.h"
#include <algorithm>
#include "dtc/runtime/Artifact.h"
#include "dtc/runtime/Communicator.h"

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dtc::rt {

/// Counters of one collective kind, measured while it runs.
struct CollectiveStats {
  uint64_t calls = 0;
  /// Sum of each call's data size D: the larger of its input and output
  /// buffers on this rank (the D of the usual alpha-beta formulas).
  uint64_t bytes = 0;
  /// Bytes this rank really sent / received through its communicator's
  /// point-to-point primitive (Communicator::bytesSent), not a formula.
  uint64_t sentBytes = 0, receivedBytes = 0;
};

struct ExecStats {
  /// Allocator high-water bytes per memory category (index: MemCategory):
  /// what this rank really allocated (slots are 64-byte aligned).
  uint64_t memoryBytes[kNumMemCategories] = {};
  /// High-water bytes of collective staging (packing buffers and the
  /// communicators' scratch), which no slot holds.
  uint64_t stagingBytes = 0;
  /// High-water of everything the executor allocated.
  uint64_t totalMemoryBytes = 0;
  /// Per collective kind (index: CollKind), cumulative over every run().
  CollectiveStats collectives[kNumCollKinds];
  /// Collective counters of the last run (one step).
  CollectiveStats perStep[kNumCollKinds];
  /// The same per artifact communicator (index: Artifact::comms).
  std::vector<std::array<CollectiveStats, kNumCollKinds>> perStepByComm;
  uint64_t runs = 0;
  /// Seconds spent per instruction kind (kernel or collective name),
  /// cumulative over every run().
  std::map<std::string, double> secondsByOp;
  /// Per kernel and operand shapes ("matmul 2048x128 * 128x512"): calls,
  /// seconds and floating-point operations (kernels::flopCount), cumulative.
  struct KernelShapeStats {
    uint64_t calls = 0;
    double seconds = 0, flops = 0;
  };
  std::map<std::string, KernelShapeStats> byKernelShape;
};

/// A tensor's piece on this rank.
struct LocalTensor {
  int tensor = -1; ///< index into Artifact::tensors
  const TensorDecl *decl = nullptr;
  void *data = nullptr;
  Piece piece; ///< local shape + global offset
  size_t bytes() const { return size_t(numel(piece.local)) * dtypeSize(decl->dtype); }
};

/// Kernel threads per rank when none are asked for: OMP_NUM_THREADS or
/// OPENBLAS_NUM_THREADS when set (the first that is), else
/// max(1, cores available to this process / ranks on this node).
int defaultKernelThreads(int ranksOnNode);

class RankExecutor {
public:
  /// Collective over `world` (creates one communicator per artifact
  /// communicator, in artifact order, before anything that can fail), then
  /// allocates the slots, resolves kernels for `backend` and fills constants.
  /// The artifact must outlive the executor.
  RankExecutor(const Artifact &artifact, World &world, const std::string &backend = "cpu");
  ~RankExecutor();

  const Artifact &artifact() const { return a_; }
  int rank() const { return rank_; }
  int programIndex() const { return prog_; }
  const ProgramDecl &program() const { return a_.programs[size_t(prog_)]; }
  const std::vector<int64_t> &coords() const { return coords_; }

  /// Whether this rank's program binds tensor `t`.
  bool holds(int t) const;
  /// The local piece of tensor `t` (must be held).
  LocalTensor tensor(int t);
  LocalTensor tensor(const std::string &name);
  /// The piece rank `r` holds of tensor `t` under its sharding.
  Piece pieceFor(int t, int64_t r) const;

  /// Params and optimizer state from their `init` (local pieces at global
  /// indices); the step tensor (if any) to 0.
  void initPersistent(uint64_t seed);
  /// Synthetic values of every held input for step `step`.
  void fillSyntheticInputs(uint64_t seed, int64_t step);
  /// Writes the step tensor (number of optimizer updates applied), if held.
  void setOptimizerStep(int64_t value);
  /// The loss buffer's value (must be held).
  float loss();

  /// Fault injection for dynamic loss scaling's tests (DTC_INJECT_OVERFLOW,
  /// docs/runtime.md): during the next run only, the first element of the
  /// first parameter gradient this program computes (the first output of
  /// category grad) becomes +inf right after the instruction that writes
  /// it. Returns false (and arms nothing) when the program has no such
  /// gradient.
  bool injectOverflowNextRun();

  /// Runs the instruction list once. A failing kernel does not stop the
  /// list (so collectives stay matched across ranks); the first error's
  /// message is returned ("" when all went well).
  std::string run();

  /// Counters so far; memory high-water includes the communicators' scratch.
  const ExecStats &stats() const;

  /// Threads this rank's kernels use (default 1).
  void setThreads(int threads) { kernelCtx_.setThreads(threads); }
  int threads() const { return kernelCtx_.threads(); }

private:
  struct Prepared;
  void runCollective(Prepared &p);
  /// A tracked allocation (counted in the category's high-water mark).
  char *allocate(size_t bytes, int category);
  const Artifact &a_;
  World &world_;
  int rank_ = 0, prog_ = 0;
  std::vector<int64_t> coords_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<char *> slotMem_;
  std::vector<void *> bufPtr_;
  std::vector<Prepared> instrs_;
  kernels::KernelContext kernelCtx_;
  /// Packing buffer of the axis-wise collectives (sized once, at load).
  char *staging_ = nullptr;
  size_t stagingSize_ = 0;
  /// f32 copies of the bf16/f16 operands of one kernel call (counted as
  /// staging).
  size_t conversionSize_ = 0;
  /// The instruction and output buffer injectOverflowNextRun poisons (-1:
  /// none), and whether the next run does.
  int overflowInstr_ = -1, overflowBuffer_ = -1;
  bool overflowArmed_ = false;
  uint64_t stagingAllocated_ = 0;
  std::vector<char *> allocations_;
  mutable ExecStats stats_;
};

} // namespace dtc::rt

#endif // DTC_RUNTIME_EXECUTOR_H
