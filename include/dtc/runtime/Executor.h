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
#include "dtc/runtime/Artifact.h"
#include "dtc/runtime/Communicator.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dtc::rt {

/// Counters of one collective kind.
struct CollectiveStats {
  uint64_t calls = 0;
  /// Sum of each call's data size D: the larger of its input and output
  /// buffers on this rank (the D of the usual alpha-beta formulas).
  uint64_t bytes = 0;
  /// Bytes this rank sends with ring algorithms: all_reduce 2(n-1)/n D,
  /// all_gather / reduce_scatter / all_to_all (n-1)/n D, all_slice 0.
  uint64_t wireBytes = 0;
};

struct ExecStats {
  /// Bytes of this rank's slots per memory category (index: MemCategory).
  uint64_t memoryBytes[kNumMemCategories] = {};
  uint64_t totalMemoryBytes = 0;
  /// Measured by the executor's counting allocator: the high-water mark of
  /// the bytes it really allocated, per memory kind (MemoryPlan.h: slot
  /// categories, then kernel and collective scratch as "workspace"), and of
  /// their sum.
  uint64_t peakBytes[kNumMemCategories + 1] = {};
  uint64_t peakTotalBytes = 0;
  /// Per collective kind (index: CollKind), cumulative over every run().
  CollectiveStats collectives[kNumCollKinds];
  /// Collective counters of ONE run (the program is the same every step).
  CollectiveStats perStep[kNumCollKinds];
  uint64_t runs = 0;
  /// Seconds spent per instruction kind (kernel or collective name),
  /// cumulative over every run().
  std::map<std::string, double> secondsByOp;
};

/// A tensor's piece on this rank.
struct LocalTensor {
  int tensor = -1; ///< index into Artifact::tensors
  const TensorDecl *decl = nullptr;
  void *data = nullptr;
  Piece piece; ///< local shape + global offset
  size_t bytes() const { return size_t(numel(piece.local)) * dtypeSize(decl->dtype); }
};

/// The executor's allocator: counts every byte it hands out for a rank
/// (slots, and as workspace the scratch of kernels and collectives, which
/// reaches it through kernels::ScratchCounter), with high-water marks.
class MemoryMeter final : public kernels::ScratchCounter {
public:
  void add(int kind, uint64_t bytes);
  void sub(int kind, uint64_t bytes);
  void allocated(size_t bytes) override;
  void released(size_t bytes) override;
  /// Copies the high-water marks into `stats`.
  void report(ExecStats &stats) const;

private:
  uint64_t current_[kNumMemCategories + 1] = {}, peak_[kNumMemCategories + 1] = {};
  uint64_t total_ = 0, peakTotal_ = 0;
};

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

  /// Runs the instruction list once. A failing kernel does not stop the
  /// list (so collectives stay matched across ranks); the first error's
  /// message is returned ("" when all went well).
  std::string run();

  const ExecStats &stats() const {
    meter_.report(stats_);
    return stats_;
  }

private:
  struct Prepared;
  void runCollective(Prepared &p);
  const Artifact &a_;
  World &world_;
  int rank_ = 0, prog_ = 0;
  std::vector<int64_t> coords_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<char *> slotMem_;
  std::vector<void *> bufPtr_;
  std::vector<Prepared> instrs_;
  MemoryMeter meter_;
  mutable ExecStats stats_;
};

} // namespace dtc::rt

#endif // DTC_RUNTIME_EXECUTOR_H
