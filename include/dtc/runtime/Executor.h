//===- Executor.h - one rank's program: memory, kernels, collectives -*- C++
//-*-===//
//
// RankExecutor holds what one rank needs to run its program of an artifact:
// a backend (Backend.h) with one allocation per slot, typed buffer views,
// kernels bound from the backend's table, the group communicators, and
// counters (bytes per memory category, calls and bytes per collective kind,
// time per kernel). It drives any backend the same way: kernels on the
// compute stream, collectives on the communication stream, events where one
// waits for the other, a synchronisation at the end of a step and before
// the host touches a tensor. It knows nothing about files, steps or
// checkpoints; the Trainer (Trainer.h) and LocalRunner (LocalRunner.h) drive
// it.
//
// Internal to the runtime: throws dtc::rt::Error.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_EXECUTOR_H
#define DTC_RUNTIME_EXECUTOR_H

#include "dtc/kernels/Kernel.h"
#include "dtc/runtime/Artifact.h"
#include "dtc/runtime/Backend.h"
#include "dtc/runtime/Communicator.h"

#include <algorithm>

#include <array>
#include <deque>
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
  /// Kernel workspace: what the backend keeps for its kernels
  /// (Backend::kernelWorkspaceBytes, reserved when they are bound) plus the
  /// high-water of the temporaries one kernel call holds
  /// (kernels::ScratchVector).
  uint64_t workspaceBytes = 0;
  /// The usual accounting per category: the slots' declared bytes (no
  /// alignment), activations at their peak with the micro-batch copies in
  /// flight (activationPeakBytes). The plan report's categories.
  uint64_t slotBytes[kNumMemCategories] = {};
  /// High-water of everything the executor allocated at once.
  uint64_t totalMemoryBytes = 0;
  /// Per collective kind (index: CollKind), cumulative over every run().
  CollectiveStats collectives[kNumCollKinds];
  /// Collective counters of the last run (one step).
  CollectiveStats perStep[kNumCollKinds];
  /// The same per artifact communicator (index: Artifact::comms).
  std::vector<std::array<CollectiveStats, kNumCollKinds>> perStepByComm;
  uint64_t runs = 0;
  /// The runs secondsByOp and byKernelShape count: every run but the first
  /// (the warm-up, which pays first-touch page faults and the kernels' own
  /// set-up) once there is a second; the first alone until then.
  uint64_t timedRuns = 0;
  /// Seconds spent per instruction kind (kernel or collective name),
  /// cumulative over the timed runs.
  std::map<std::string, double> secondsByOp;
  /// Pipelines: point-to-point messages of the last step (calls and bytes
  /// of the sends; sent and received bytes as counted by the communicator)
  /// and cumulatively.
  CollectiveStats sendRecvPerStep, sendRecv;
  /// Activation memory as the allocator saw it: the most bytes of
  /// activation slots live at once (one-copy slots plus every micro-batch
  /// copy in flight), and the most micro-batch copies in flight (summed over
  /// chunks). Without micro-batches: the activation slots' bytes and 0.
  uint64_t activationPeakBytes = 0;
  int microbatchesPeak = 0;
  /// Bytes of one micro-batch copy per chunk.
  std::vector<uint64_t> microbatchBytes;
  /// Per kernel and operand shapes ("matmul 2048x128 * 128x512"): calls,
  /// seconds and floating-point operations (kernels::flopCount), cumulative
  /// over the timed runs.
  struct KernelShapeStats {
    uint64_t calls = 0;
    double seconds = 0, flops = 0;
  };
  std::map<std::string, KernelShapeStats> byKernelShape;
};

class RankExecutor;
class TraceWriter;

/// What the host does with a tensor it takes from the executor.
enum class Access { Read, Write, ReadWrite };

/// A tensor's piece on this rank, in host memory while this view lives.
/// On a backend whose memory the host addresses (CPU), `data` is the
/// tensor's own buffer; otherwise a host copy, read from the device when
/// the view is taken (Read, ReadWrite) and written back when it goes
/// (Write, ReadWrite). A view must not outlive its executor or a run().
class LocalTensor {
public:
  int tensor = -1; ///< index into Artifact::tensors
  const TensorDecl *decl = nullptr;
  void *data = nullptr; ///< host address of the piece
  Piece piece;          ///< local shape + global offset
  size_t bytes() const {
    return size_t(numel(piece.local)) * dtypeSize(decl->dtype);
  }

  LocalTensor() = default;
  LocalTensor(LocalTensor &&other) noexcept { *this = std::move(other); }
  LocalTensor &operator=(LocalTensor &&other) noexcept;
  ~LocalTensor() { release(); }

private:
  friend class RankExecutor;
  /// Writes a host copy back (a failure is reported by the next run()).
  void release() noexcept;
  RankExecutor *owner_ = nullptr;
  void *device_ = nullptr;
  std::unique_ptr<char[]> copy_;
  bool writeBack_ = false;
};

class RankExecutor;

/// Counts the kernel scratch of the thread that runs a rank's instructions
/// (installed around RankExecutor::run) into that rank's high-water marks.
class ScratchMeter final : public kernels::ScratchCounter {
public:
  explicit ScratchMeter(const RankExecutor &exec) : exec_(exec) {}
  void allocated(size_t bytes) override;
  void released(size_t bytes) override { current_ -= bytes; }
  uint64_t peak() const { return peak_; }
  /// High-water of everything: persistent allocations plus scratch.
  uint64_t peakTotal() const { return peakTotal_; }
  void noteTotal(uint64_t persistent) {
    peakTotal_ = std::max(peakTotal_, persistent + current_);
  }

private:
  const RankExecutor &exec_;
  uint64_t current_ = 0, peak_ = 0, peakTotal_ = 0;
};

class RankExecutor {
public:
  /// Collective over `world` (creates one communicator per artifact
  /// communicator, in artifact order, before anything that can fail), then
  /// allocates the slots, binds kernels from the backend's table and fills
  /// constants. The artifact must outlive the executor.
  RankExecutor(const Artifact &artifact, World &world,
               std::unique_ptr<Backend> backend);
  /// The same with the backend of that name (makeBackend), one thread.
  RankExecutor(const Artifact &artifact, World &world,
               const std::string &backend = "cpu");
  ~RankExecutor();

  Backend &backend() { return *backend_; }
  const Backend &backend() const { return *backend_; }

  const Artifact &artifact() const { return a_; }
  int rank() const { return rank_; }
  int programIndex() const { return prog_; }
  const ProgramDecl &program() const { return a_.programs[size_t(prog_)]; }
  const std::vector<int64_t> &coords() const { return coords_; }

  /// Whether this rank's program binds tensor `t`.
  bool holds(int t) const;
  /// The local piece of tensor `t` (must be held), in host memory while
  /// the view lives (see LocalTensor).
  LocalTensor tensor(int t, Access access = Access::ReadWrite);
  LocalTensor tensor(const std::string &name,
                     Access access = Access::ReadWrite);
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

  /// Runs the instruction list once and waits for it. A failing kernel
  /// does not stop the list (so collectives stay matched across ranks); the
  /// first error's message is returned ("" when all went well).
  std::string run();
  /// Runs what evaluating the loss needs of the step (the artifact's
  /// "evaluation" section, include/dtc/artifact/Evaluation.h): no backward,
  /// no update, so parameters and optimizer state stay as they are; the
  /// loss buffer then holds the inputs' loss. Pipelines run their forward
  /// actions in the schedule's order. Neither --stats' counters nor the
  /// overflow injection see it. Throws Error when the artifact has no
  /// evaluation section.
  std::string runEvaluation();

  /// Counters so far; memory high-water includes the communicators' scratch.
  const ExecStats &stats() const;
  /// Bytes allocated now for the whole run: slots, staging, communicator
  /// scratch (everything but kernel scratch).
  uint64_t persistentBytes() const;

  /// Threads this rank's kernels use (default 1).
  void setThreads(int threads) { backend_->setThreads(threads); }
  int threads() const { return backend_->threads(); }

  /// Records every kernel, collective and run (and the memory per category
  /// after each run) into `trace` from now on; nullptr stops. The writer
  /// must outlive its use here.
  void setTrace(TraceWriter *trace);

private:
  struct Prepared;
  /// One instruction as enqueued in this run: its events, its traffic.
  struct Enqueued {
    Prepared *instr;
    int index;
    Event *start, *end;
    Traffic traffic;
    int microbatch = -1; ///< pipelines: the micro-batch it ran for
  };
  using List = std::vector<Prepared>;
  List prepare(const std::vector<InstrDecl> &list, int chunk);
  /// Kernels (accumulate and fill as the backend's add and broadcast) and
  /// micro-batch slices: on the compute stream.
  void enqueueKernel(Prepared &p, int index, int microbatch);
  /// Collectives and pipeline sends/receives: on the communication stream.
  void enqueueCollective(Prepared &p, int index, int microbatch);
  void runCollective(Prepared &p, Traffic &traffic);
  void runMoeExchange(Prepared &p, Traffic &traffic);
  /// A gradient bucket's member: packs its operand into bucketBuffer_;
  /// the last member also reduces the bucket and unpacks every result.
  void runBucketMember(Prepared &p, Traffic &traffic);
  void runPipeMessage(Prepared &p, int microbatch, Traffic &traffic);
  /// Enqueues a list; pipelines: for micro-batch `microbatch` of chunk
  /// `chunk` (-1: a once-per-step list). Records the first error in `first`.
  void enqueueList(List &list, int chunk, int microbatch, std::string &first,
                   bool evaluation = false);
  void enqueuePipelineStep(std::string &first, bool evaluation);
  std::string runStep(bool evaluation);
  /// After the run's synchronisation: time, bytes and trace of each
  /// instruction.
  void account(const Event &runStart, int64_t traceStartNs);
  void traceMemory(int64_t atNs);
  Event &nextEvent();
  /// A tracked allocation (counted in the category's high-water mark).
  char *allocate(size_t bytes, int category);
  const Artifact &a_;
  World &world_;
  std::unique_ptr<Backend> backend_;
  int rank_ = 0, prog_ = 0;
  std::vector<int64_t> coords_;
  std::vector<std::unique_ptr<DeviceCommunicator>> comms_;
  std::vector<char *> slotMem_;
  std::vector<void *> bufPtr_;
  List instrs_;
  /// Packing buffer of the axis-wise collectives (sized once, at load).
  char *staging_ = nullptr;
  /// Zeros copied over a moe_exchange's output on a device whose memory the
  /// host cannot write.
  std::vector<char> zeros_;
  /// moe_exchange's messages (on the expert-parallel communicators, which
  /// carry no pipeline messages).
  static constexpr int kMoeExchangeTag = 0;
  size_t stagingSize_ = 0;
  /// Where a gradient bucket's members are packed and reduced (the
  /// largest bucket; apart from staging_, which collectives between the
  /// members use).
  char *bucketBuffer_ = nullptr;
  size_t bucketBufferSize_ = 0;
  /// The buffer injectOverflowNextRun poisons (-1: none), after which
  /// instruction of the once-per-step list (-2: before the list after a
  /// pipeline's micro-batches), and whether the next run does.
  int overflowInstr_ = -1, overflowBuffer_ = -1;
  bool overflowArmed_ = false;
  void poisonGradient(bool afterCollective);
  uint64_t stagingAllocated_ = 0;
  /// Everything allocate() handed out, given back to the backend when the
  /// executor goes (also when its constructor fails).
  struct Allocations {
    Backend *backend = nullptr;
    std::vector<char *> ptrs;
    ~Allocations() {
      for (char *p : ptrs)
        backend->deallocate(p);
    }
  } allocations_;
  mutable ScratchMeter scratch_{*this};
  /// Declared bytes of the one-copy slots per category.
  uint64_t slotBytes_[kNumMemCategories] = {};
  mutable ExecStats stats_;
  // Streams: the collectives enqueued so far (a sequence number), the
  // latest one the compute stream waited for, and per slot the latest one
  // that reads or writes it; a kernel touching such a slot waits for it.
  uint64_t collectivesEnqueued_ = 0, computeWaitedFor_ = 0;
  std::vector<uint64_t> slotBusyUntil_;
  std::vector<Event *> collectiveDone_; ///< by sequence number, this run
  uint64_t runFirstCollective_ = 0;
  std::vector<std::unique_ptr<Event>> events_;
  size_t eventsUsed_ = 0;
  std::deque<Enqueued> enqueued_; ///< stable: backends fill `traffic` later
  /// A host copy that could not be written back (reported by run()).
  std::string viewError_;
  TraceWriter *trace_ = nullptr;
  friend class LocalTensor;
  // Pipelines: each chunk's three lists, the list after the micro-batches,
  // and the copies of micro-batch slots: for every chunk its slots (and a
  // slot's index among them), the copies in use per micro-batch and the
  // free ones kept for reuse (allocated once, so the allocator's
  // high-water is the most copies ever in flight).
  std::vector<std::array<List, 3>> chunkLists_;
  List finish_;
  std::vector<std::vector<int>> chunkSlots_;
  std::vector<int> indexInChunk_;
  std::map<std::pair<int, int>, std::vector<char *>> live_;
  std::vector<std::vector<std::vector<char *>>> spare_;
  uint64_t liveActivationBytes_ = 0;
  int liveMicrobatches_ = 0;
  /// Fill instructions' values, built once on the device (one per buffer
  /// size and value), copied from at every fill.
  std::map<std::pair<uint64_t, std::string>, char *> fillSources_;
};

} // namespace dtc::rt

#endif // DTC_RUNTIME_EXECUTOR_H
