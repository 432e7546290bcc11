//===- Backend.h - what the executor needs from a device ----------*- C++
//-*-===//
//
// The executor (Executor.h) runs one rank's program of an artifact through a
// Backend and never touches device memory itself: it allocates slots from
// the backend (and counts them per memory category), binds every kernel
// instruction to the backend's kernel table, enqueues kernels on a compute
// stream and collectives on a communication stream with events between them,
// and synchronises at the end of a step and before the host reads or writes
// a tensor. docs/backends.md explains the contract for someone writing a
// backend; the CPU backend (runtime/cpu) is one implementation.
//
// Device addresses are `void *` that only the backend interprets (the
// executor adds byte offsets to them, nothing else), as CUDA's are.
//
// Internal to the runtime: throws dtc::rt::Error (and CommFailure from
// communication).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_BACKEND_H
#define DTC_RUNTIME_BACKEND_H

#include "dtc/artifact/MemoryPlan.h"
#include "dtc/kernels/Kernel.h"
#include "dtc/runtime/Artifact.h"
#include "dtc/runtime/Communicator.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtc::rt {

/// An ordered queue of work on the device. Work enqueued on one stream runs
/// in order; work on two streams may overlap unless an event orders it.
class Stream {
public:
  virtual ~Stream();
};

/// A point in a stream's work: complete once everything enqueued on the
/// stream before it is; it carries the time at which that happened.
class Event {
public:
  virtual ~Event();
};

/// One kernel of a backend's table, bound to one instruction's operand
/// dtypes, shapes and attributes (which never change afterwards).
class BoundKernel {
public:
  virtual ~BoundKernel();
  /// Enqueues the kernel on `stream`. `args` holds the operands' current
  /// device addresses (they may differ from one call to the next, e.g. per
  /// micro-batch) and the fields bindKernel() filled.
  virtual void enqueue(const kernels::KernelArgs &args, Stream &stream) = 0;
  /// What the binding chose, where the backend chooses (a GEMM's library
  /// plan and epilogue), for tests and diagnostics; "" otherwise.
  virtual std::string plan() const { return {}; }
};

/// Bytes one collective call sent and received on this member: what really
/// passed through the transport, filled in by the time the work completed
/// (Backend::synchronize() returned).
struct Traffic {
  uint64_t sent = 0, received = 0;
};

/// Adds to `traffic` what a host communicator's counters moved while it
/// lives: the backends whose collectives run on a host Communicator (the
/// CPU's, the CUDA backend's staged mode) count through it.
class CountTraffic {
public:
  CountTraffic(const Communicator &c, Traffic &t)
      : c_(c), t_(t), sent0_(c.bytesSent()), received0_(c.bytesReceived()) {}
  ~CountTraffic() {
    t_.sent += c_.bytesSent() - sent0_;
    t_.received += c_.bytesReceived() - received0_;
  }
  CountTraffic(const CountTraffic &) = delete;
  CountTraffic &operator=(const CountTraffic &) = delete;

private:
  const Communicator &c_;
  Traffic &t_;
  uint64_t sent0_, received0_;
};

/// The collectives of one group of ranks on device memory, enqueued on a
/// stream. Semantics (element order, reductions, piece order) are those of
/// Communicator (Communicator.h); every member enqueues the same sequence.
class DeviceCommunicator {
public:
  virtual ~DeviceCommunicator();
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void allReduce(const void *in, void *out, size_t count, DType dtype,
                         ReduceOp op, Stream &stream, Traffic &traffic) = 0;
  virtual void allGather(const void *in, void *out, size_t bytes,
                         Stream &stream, Traffic &traffic) = 0;
  virtual void reduceScatter(const void *in, void *out, size_t count,
                             DType dtype, ReduceOp op, Stream &stream,
                             Traffic &traffic) = 0;
  virtual void allToAll(const void *in, void *out, size_t bytes, Stream &stream,
                        Traffic &traffic) = 0;
  /// Communicator::shift: `bytes` to member (m + offset) mod size(), from
  /// member (m - offset) mod size(). in != out.
  virtual void shift(const void *in, void *out, size_t bytes, int offset,
                     Stream &stream, Traffic &traffic) = 0;
  /// Pipelines: point to point between two members (Communicator's
  /// sendMessage / recvMessage semantics: a send never waits for its
  /// receiver; messages of one sender and tag arrive in order; a receive
  /// waits at most the world's timeout, then CommFailure).
  virtual void send(const void *buf, size_t bytes, int peer, int tag,
                    Stream &stream, Traffic &traffic) = 0;
  virtual void recv(void *buf, size_t bytes, int peer, int tag, Stream &stream,
                    Traffic &traffic) = 0;
  /// Completes this member's sends still in flight; at the end of a step.
  virtual void flushSends() = 0;
  /// Device memory this communicator holds for its algorithms now
  /// (counted as collective staging).
  virtual uint64_t scratchBytes() const = 0;
  /// Keeps at least `bytes` of that memory from now on. The executor
  /// reserves, at load, the most any of its collectives on this
  /// communicator takes (MemoryPlan.h's collectiveScratchBytes), so nothing
  /// grows while steps run and the plan's staging is what is held.
  virtual void reserveScratch(size_t bytes) = 0;
  /// A backend that stages collectives and messages through memory of its
  /// own (the CUDA backend's host-staged modes and --collectives local's
  /// device scratch) takes it now rather than while steps run, as
  /// reserveScratch: at most `bytes` for one call, its input and output
  /// together (the executor passes each collective's and message's).
  virtual void reserveStaging(size_t bytes) { (void)bytes; }
};

/// The host communicator's own collectives (dtc's ring algorithms over MPI
/// or threads) on host memory, every byte counted through CountTraffic: the
/// data plane of a backend whose device memory is host memory (CPU, null).
/// Ignores the stream: a collective is complete when the call returns.
std::unique_ptr<DeviceCommunicator>
makeHostMemoryCommunicator(std::unique_ptr<Communicator> group);

/// What a backend is created with.
struct BackendOptions {
  /// Host threads the kernels of this rank may use (>= 1).
  int threads = 1;
  /// This rank, and how many ranks share its node (a GPU backend picks its
  /// device from them).
  int rank = 0;
  int ranksOnNode = 1;
  /// How a device backend runs collectives: "" (its default), "nccl", or
  /// "mpi" (through host memory and the host communicator: MPI ranks, or
  /// threads under LocalRunner and dtc-run --local-ranks). The CPU backend
  /// has only the host communicator and accepts "" and "mpi".
  std::string collectives;
  /// Longest wait for the device in synchronize() before a collective that
  /// cannot complete is abandoned with CommFailure (0 = none); --timeout.
  double timeoutSeconds = 0;
};

/// Kernel threads per rank when none are asked for (BackendOptions::threads
/// when --threads is not given): the artifact library's rule, which the
/// compiler's memory plan assumes too.
using ::dtc::artifact::defaultKernelThreads;

class Backend {
public:
  virtual ~Backend();
  /// The name --backend selects ("cpu").
  virtual std::string name() const = 0;
  /// One line for people: "cpu: 2 threads, matmuls on oneDNN 2.6.3".
  virtual std::string description() const = 0;
  /// Facts for --stats, e.g. {"gemm_library", "oneDNN 2.6.3"}.
  virtual std::vector<std::pair<std::string, std::string>>
  properties() const = 0;

  // ---- memory
  // ----------------------------------------------------------------
  /// `bytes` (> 0, a multiple of 64) of zeroed device memory, 64-byte
  /// aligned. Throws Error when there is not enough.
  virtual void *allocate(size_t bytes) = 0;
  virtual void deallocate(void *device) noexcept = 0;
  /// Whether device addresses are host addresses: then the host reads and
  /// writes tensors in place, without copies or synchronisation.
  virtual bool hostAddressable() const = 0;
  /// Copies after the work enqueued on `stream` so far; when the call
  /// returns, the host side of the copy is complete (`host` may be read, or
  /// reused).
  virtual void copyToHost(void *host, const void *device, size_t bytes,
                          Stream &stream) = 0;
  virtual void copyFromHost(void *device, const void *host, size_t bytes,
                            Stream &stream) = 0;
  /// Enqueues a copy within device memory of `rows` rows of `rowBytes`,
  /// row i from `src + i * srcPitch` to `dst + i * dstPitch` (the packing
  /// of axis-wise collectives). The ranges never overlap.
  virtual void copy2D(void *dst, size_t dstPitch, const void *src,
                      size_t srcPitch, size_t rowBytes, size_t rows,
                      Stream &stream) = 0;

  // ---- kernels
  // -----------------------------------------------------------------
  /// Kernel `name` (docs/kernels.md) from this backend's table for the
  /// operands of `args` (dtypes, shapes and attributes already accepted by
  /// the kernel's check rule), or nullptr when the table has none. May fill
  /// the backend's own fields of `args` (the CPU backend sets `ctx`); must
  /// not keep its device addresses.
  virtual std::unique_ptr<BoundKernel>
  bindKernel(std::string_view name, kernels::KernelArgs &args) = 0;
  /// Memory the backend keeps for its kernels' temporaries now (the CPU
  /// backend: its KernelContext's workspace, which bindKernel sizes for the
  /// largest kernel bound, kernels::cpu::contextWorkspaceBytes). The
  /// executor counts it as workspace; 0 for a backend that keeps none.
  virtual uint64_t kernelWorkspaceBytes() const = 0;

  // ---- streams and events
  // --------------------------------------------------------
  /// Where kernels go, and where collectives go (may be the same stream).
  virtual Stream &computeStream() = 0;
  virtual Stream &commStream() = 0;
  virtual std::unique_ptr<Event> createEvent() = 0;
  /// Marks the current end of `stream`'s work.
  virtual void record(Event &event, Stream &stream) = 0;
  /// Work enqueued on `stream` from now on starts after `event` completed.
  virtual void wait(Stream &stream, Event &event) = 0;
  /// The host waits for all work enqueued on every stream. Throws Error for
  /// a failure of enqueued work (a kernel's data-dependent error) and
  /// CommFailure for a collective that could not complete.
  virtual void synchronize() = 0;
  /// Seconds from `from` to `to`, both recorded and complete.
  virtual double elapsedSeconds(const Event &from, const Event &to) = 0;

  // ---- communicators
  // -----------------------------------------------------------
  /// The data plane for the ranks of `group` (a host communicator created
  /// by World::split, which the result owns and may use to set itself up:
  /// a GPU backend exchanges its own communicator's id over it).
  virtual std::unique_ptr<DeviceCommunicator>
  createCommunicator(std::unique_ptr<Communicator> group) = 0;

  // ---- host threads
  // --------------------------------------------------------------
  virtual void setThreads(int threads) = 0;
  virtual int threads() const = 0;
  /// Called on the thread that runs the rank's steps, before each step
  /// (binds thread pools, or the device, to it).
  virtual void attachThread() = 0;

  // ---- memory of its own
  // ---------------------------------------------------------
  /// High-water bytes the backend allocated for itself beyond allocate()
  /// (e.g. the CPU backend's f32 copies of bf16/f16 operands); reported as
  /// staging.
  virtual uint64_t scratchBytes() const { return 0; }
};

/// Throws Error unless --backend NAME can run in this build and on this
/// machine: "cuda" says when this build has none or the machine no usable
/// GPU, an unknown name lists the known ones.
void checkBackendAvailable(const std::string &name);
/// A backend by name ("cpu", or one registered by registerBackend).
std::unique_ptr<Backend> makeBackend(const std::string &name,
                                     const BackendOptions &options);
using BackendFactory =
    std::function<std::unique_ptr<Backend>(const BackendOptions &)>;
/// Makes `name` available to makeBackend (e.g. a test backend). Replaces an
/// earlier registration of the same name.
void registerBackend(const std::string &name, BackendFactory factory);
/// The names makeBackend accepts, "cpu" first.
std::vector<std::string> backendNames();

} // namespace dtc::rt

#endif // DTC_RUNTIME_BACKEND_H
