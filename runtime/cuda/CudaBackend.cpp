//===- CudaBackend.cpp - the CUDA backend (see CudaBackend.h)
//---------------===//
//
// One GPU per rank: device = rank % GPUs on the node. Kernels go to a
// compute stream, collectives to a communication stream; the executor
// orders them with events (docs/backends.md). Every CUDA, cuBLASLt and
// NCCL status is checked; asynchronous failures surface in synchronize().
//
//===----------------------------------------------------------------------===//
#include "CudaBackend.h"

#include "CudaKernels.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

namespace dtc::rt {

namespace {

using kernels::cuda::check;

void checkNccl(ncclResult_t status, const char *what) {
  if (status != ncclSuccess)
    throw CommFailure(std::string(what) + ": " + ncclGetErrorString(status));
}

class CudaStream final : public Stream {
public:
  cudaStream_t stream = nullptr;
};

class CudaEvent final : public Event {
public:
  explicit CudaEvent(int device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaEventCreate(&event), "cudaEventCreate");
  }
  ~CudaEvent() override { cudaEventDestroy(event); }
  cudaEvent_t event = nullptr;
};

cudaStream_t streamOf(Stream &s) { return static_cast<CudaStream &>(s).stream; }

ncclDataType_t ncclTypeOf(DType t) {
  switch (t) {
  case DType::F32:
    return ncclFloat32;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F16:
    return ncclFloat16;
  case DType::I32:
    return ncclInt32;
  case DType::I64:
    return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t ncclOpOf(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return ncclSum;
  case ReduceOp::Max:
    return ncclMax;
  case ReduceOp::Min:
    return ncclMin;
  case ReduceOp::Average:
    return ncclAvg;
  }
  return ncclSum;
}

/// The NCCL communicators of one backend, so that synchronize() can watch
/// them and abort them when a collective cannot complete.
struct NcclRegistry {
  std::mutex mu;
  std::vector<ncclComm_t> comms;
  void add(ncclComm_t c) {
    std::lock_guard<std::mutex> lock(mu);
    comms.push_back(c);
  }
  void remove(ncclComm_t c) {
    std::lock_guard<std::mutex> lock(mu);
    comms.erase(std::remove(comms.begin(), comms.end(), c), comms.end());
  }
  /// The first asynchronous error of a communicator, or "".
  std::string asyncError() {
    std::lock_guard<std::mutex> lock(mu);
    for (ncclComm_t c : comms) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(c, &state) != ncclSuccess ||
          state != ncclSuccess)
        return std::string("NCCL: ") + ncclGetErrorString(state);
    }
    return "";
  }
  void abortAll() {
    std::lock_guard<std::mutex> lock(mu);
    for (ncclComm_t c : comms)
      ncclCommAbort(c);
    comms.clear();
  }
};

/// Page-locked host memory that grows, for the host-staged collectives and
/// the pipeline transfers (reserved at load: reserveStaging).
class PinnedBuffer {
public:
  ~PinnedBuffer() {
    if (data_)
      cudaFreeHost(data_);
  }
  char *get(size_t bytes) {
    if (bytes > size_) {
      if (data_)
        check(cudaFreeHost(data_), "cudaFreeHost");
      data_ = nullptr;
      size_ = 0;
      check(cudaMallocHost(reinterpret_cast<void **>(&data_), bytes),
            "page-locked staging buffer for collectives");
      size_ = bytes;
    }
    return data_;
  }

private:
  char *data_ = nullptr;
  size_t size_ = 0;
};

/// The collectives of one group: on NCCL, or staged through host memory and
/// the host communicator (the test mode for several ranks on one GPU), or,
/// with --collectives local (ranks that are threads of this process on one
/// GPU), all-reduces as a kernel over the members' device buffers.
/// Pipeline sends and receives always go through host memory and the host
/// communicator: a send must not wait for its receiver (docs/backends.md),
/// which an ncclSend on the communication stream would.
class CudaCommunicator final : public DeviceCommunicator {
public:
  CudaCommunicator(std::unique_ptr<Communicator> group, int device,
                   bool useNccl, std::shared_ptr<NcclRegistry> registry,
                   bool local)
      : c_(std::move(group)), device_(device), registry_(std::move(registry)) {
    if (local && c_->size() > 1)
      joinLocalPeers();
    if (!useNccl)
      return;
    ncclUniqueId id;
    if (c_->rank() == 0)
      checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    c_->broadcast(&id, sizeof id, 0);
    check(cudaSetDevice(device_), "cudaSetDevice");
    checkNccl(ncclCommInitRank(&nccl_, c_->size(), id, c_->rank()),
              "ncclCommInitRank");
    registry_->add(nccl_);
  }
  ~CudaCommunicator() override {
    if (local_) {
      cudaSetDevice(device_);
      cudaEventDestroy(inputReady_);
      cudaEventDestroy(readDone_);
      if (scratch_)
        cudaFree(scratch_);
    }
    if (nccl_) {
      registry_->remove(nccl_);
      ncclCommDestroy(nccl_);
    }
  }

  int size() const override { return c_->size(); }
  int rank() const override { return c_->rank(); }

  void allReduce(const void *in, void *out, size_t count, DType dtype,
                 ReduceOp op, Stream &stream, Traffic &traffic) override {
    const size_t bytes = count * dtypeSize(dtype);
    if (nccl_) {
      checkNccl(ncclAllReduce(in, out, count, ncclTypeOf(dtype), ncclOpOf(op),
                              nccl_, streamOf(stream)),
                "ncclAllReduce");
      // A ring: every member sends and receives 2 (n - 1) / n of the data.
      count2(traffic, 2 * ringShare(bytes));
      return;
    }
    if (local_) {
      allReduceLocal(in, out, count, dtype, op, streamOf(stream));
      count2(traffic, 2 * ringShare(bytes)); // as a ring would move it
      return;
    }
    char *h = staging_.get(bytes);
    toHost(h, in, bytes, stream);
    {
      CountTraffic counting(*c_, traffic);
      c_->allReduce(h, h, count, dtype, op);
    }
    toDevice(out, h, bytes, stream);
  }

  void allGather(const void *in, void *out, size_t bytes, Stream &stream,
                 Traffic &traffic) override {
    const size_t n = size_t(c_->size());
    if (nccl_) {
      checkNccl(
          ncclAllGather(in, out, bytes, ncclInt8, nccl_, streamOf(stream)),
          "ncclAllGather");
      count2(traffic, (n - 1) * bytes);
      return;
    }
    char *h = staging_.get(bytes * (n + 1));
    toHost(h, in, bytes, stream);
    {
      CountTraffic counting(*c_, traffic);
      c_->allGather(h, h + bytes, bytes);
    }
    toDevice(out, h + bytes, bytes * n, stream);
  }

  void reduceScatter(const void *in, void *out, size_t count, DType dtype,
                     ReduceOp op, Stream &stream, Traffic &traffic) override {
    const size_t n = size_t(c_->size()), piece = count * dtypeSize(dtype);
    if (nccl_) {
      checkNccl(ncclReduceScatter(in, out, count, ncclTypeOf(dtype),
                                  ncclOpOf(op), nccl_, streamOf(stream)),
                "ncclReduceScatter");
      count2(traffic, (n - 1) * piece);
      return;
    }
    char *h = staging_.get(piece * (n + 1));
    toHost(h, in, piece * n, stream);
    {
      CountTraffic counting(*c_, traffic);
      c_->reduceScatter(h, h + piece * n, count, dtype, op);
    }
    toDevice(out, h + piece * n, piece, stream);
  }

  void allToAll(const void *in, void *out, size_t bytes, Stream &stream,
                Traffic &traffic) override {
    const int n = c_->size();
    if (nccl_) {
      const char *src = static_cast<const char *>(in);
      char *dst = static_cast<char *>(out);
      checkNccl(ncclGroupStart(), "ncclGroupStart");
      for (int p = 0; p < n; ++p) {
        checkNccl(ncclSend(src + size_t(p) * bytes, bytes, ncclInt8, p, nccl_,
                           streamOf(stream)),
                  "ncclSend");
        checkNccl(ncclRecv(dst + size_t(p) * bytes, bytes, ncclInt8, p, nccl_,
                           streamOf(stream)),
                  "ncclRecv");
      }
      checkNccl(ncclGroupEnd(), "ncclGroupEnd");
      count2(traffic, size_t(n - 1) * bytes);
      return;
    }
    const size_t total = bytes * size_t(n);
    char *h = staging_.get(2 * total);
    toHost(h, in, total, stream);
    {
      CountTraffic counting(*c_, traffic);
      c_->allToAll(h, h + total, bytes);
    }
    toDevice(out, h + total, total, stream);
  }

  void shift(const void *in, void *out, size_t bytes, int offset,
             Stream &stream, Traffic &traffic) override {
    const int n = c_->size(), r = c_->rank();
    const int step = ((offset % n) + n) % n;
    if (nccl_ && step != 0) {
      checkNccl(ncclGroupStart(), "ncclGroupStart");
      checkNccl(ncclSend(in, bytes, ncclInt8, (r + step) % n, nccl_,
                         streamOf(stream)),
                "ncclSend");
      checkNccl(ncclRecv(out, bytes, ncclInt8, (r - step + n) % n, nccl_,
                         streamOf(stream)),
                "ncclRecv");
      checkNccl(ncclGroupEnd(), "ncclGroupEnd");
      count2(traffic, bytes);
      return;
    }
    char *h = staging_.get(2 * bytes);
    toHost(h, in, bytes, stream);
    {
      CountTraffic counting(*c_, traffic);
      c_->shift(h, h + bytes, bytes, offset);
    }
    toDevice(out, h + bytes, bytes, stream);
  }

  void send(const void *buf, size_t bytes, int peer, int tag, Stream &stream,
            Traffic &traffic) override {
    char *h = staging_.get(bytes);
    toHost(h, buf, bytes, stream);
    CountTraffic counting(*c_, traffic);
    c_->sendMessage(h, bytes, peer,
                    tag); // copies: never waits for the receiver
  }
  void recv(void *buf, size_t bytes, int peer, int tag, Stream &stream,
            Traffic &traffic) override {
    char *h = staging_.get(bytes);
    {
      CountTraffic counting(*c_, traffic);
      c_->recvMessage(h, bytes, peer, tag);
    }
    toDevice(buf, h, bytes, stream);
  }
  void flushSends() override { c_->flushSends(); }
  /// The host ring's scratch in the staged mode (host memory, counted as the
  /// CPU backend counts it); NCCL's own buffers are not visible here.
  uint64_t scratchBytes() const override {
    return nccl_ ? 0 : c_->scratchBytes();
  }
  void reserveScratch(size_t bytes) override {
    if (!nccl_)
      c_->reserveScratch(bytes);
  }
  void reserveStaging(size_t bytes) override {
    if (nccl_)
      return;
    staging_.get(bytes);
    if (local_ && bytes > scratchBytes_) { // at load: nothing in flight
      check(cudaSetDevice(device_), "cudaSetDevice");
      if (scratch_)
        check(cudaFree(scratch_), "cudaFree");
      scratch_ = nullptr;
      scratchBytes_ = 0;
      if (cudaMalloc(reinterpret_cast<void **>(&scratch_), bytes) !=
          cudaSuccess) {
        cudaGetLastError();
        throw Error("out of GPU memory for --collectives local's scratch (" +
                    std::to_string(bytes) + " bytes)");
      }
      scratchBytes_ = bytes;
    }
  }

private:
  /// --collectives local: the members swap their communicators' addresses
  /// (threads of one process), and must share this GPU.
  void joinLocalPeers() {
    peers_.assign(size_t(c_->size()), nullptr);
    CudaCommunicator *self = this;
    c_->allGather(&self, peers_.data(), sizeof self);
    for (CudaCommunicator *p : peers_)
      if (p->device_ != device_)
        throw Error("--collectives local: the members of a group are on "
                    "GPUs " +
                    std::to_string(device_) + " and " +
                    std::to_string(p->device_) +
                    " (it needs the ranks of dtc-run --local-ranks on one "
                    "GPU)");
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaEventCreateWithFlags(&inputReady_, cudaEventDisableTiming),
          "cudaEventCreate");
    check(cudaEventCreateWithFlags(&readDone_, cudaEventDisableTiming),
          "cudaEventCreate");
    local_ = true;
  }

  /// out = the members' inputs reduced, by a kernel on each member's stream
  /// that reads every member's input. The members meet on the host only to
  /// publish their input and an event (never waiting for the device), and
  /// CUDA events order the rest: each reads the others' inputs after their
  /// events, reduces into its scratch, and writes `out` (which may be its
  /// input) only after every member has read its input.
  void allReduceLocal(const void *in, void *out, size_t count, DType dtype,
                      ReduceOp op, cudaStream_t s) {
    const size_t bytes = count * dtypeSize(dtype);
    if (bytes > scratchBytes_)
      throw Error("--collectives local: an all-reduce of " +
                  std::to_string(bytes) + " bytes, more than the " +
                  std::to_string(scratchBytes_) + " reserved at load");
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaEventRecord(inputReady_, s), "cudaEventRecord");
    published_ = in;
    c_->barrier(); // every member's input and event are published
    const int me = c_->rank();
    std::vector<const void *> inputs(peers_.size());
    for (size_t m = 0; m < peers_.size(); ++m) {
      inputs[m] = peers_[m]->published_;
      if (int(m) != me)
        check(cudaStreamWaitEvent(s, peers_[m]->inputReady_, 0),
              "cudaStreamWaitEvent");
    }
    kernels::cuda::reduceBuffers(inputs.data(), int(inputs.size()), scratch_,
                                 (long long)count, dtype, op, s);
    check(cudaEventRecord(readDone_, s), "cudaEventRecord");
    c_->barrier(); // every member has recorded that it read the inputs
    for (size_t m = 0; m < peers_.size(); ++m)
      if (int(m) != me)
        check(cudaStreamWaitEvent(s, peers_[m]->readDone_, 0),
              "cudaStreamWaitEvent");
    if (bytes)
      check(cudaMemcpyAsync(out, scratch_, bytes, cudaMemcpyDeviceToDevice, s),
            "cudaMemcpyAsync");
  }

  size_t ringShare(size_t bytes) const {
    const size_t n = size_t(c_->size());
    return n <= 1 ? 0 : bytes / n * (n - 1);
  }
  static void count2(Traffic &t, size_t bytes) {
    t.sent += bytes;
    t.received += bytes;
  }
  /// The staged mode runs on the host after everything enqueued on the
  /// communication stream so far (the executor made that stream wait for
  /// the collective's inputs).
  void toHost(char *host, const void *device, size_t bytes, Stream &stream) {
    check(cudaSetDevice(device_), "cudaSetDevice");
    const cudaStream_t s = streamOf(stream);
    if (bytes)
      check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s),
            "staging copy to the host");
    check(cudaStreamSynchronize(s), "staging copy to the host");
  }
  void toDevice(void *device, const char *host, size_t bytes, Stream &stream) {
    const cudaStream_t s = streamOf(stream);
    if (bytes)
      check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s),
            "staging copy to the device");
    // The staging buffer is reused by the next call.
    check(cudaStreamSynchronize(s), "staging copy to the device");
  }

  std::unique_ptr<Communicator> c_;
  int device_;
  std::shared_ptr<NcclRegistry> registry_;
  ncclComm_t nccl_ = nullptr;
  PinnedBuffer staging_;
  // --collectives local: every member's communicator (this process's
  // threads), what this one publishes for the all-reduce in progress, and
  // the device scratch it reduces into.
  bool local_ = false;
  std::vector<CudaCommunicator *> peers_;
  const void *published_ = nullptr;
  cudaEvent_t inputReady_ = nullptr, readDone_ = nullptr;
  char *scratch_ = nullptr;
  size_t scratchBytes_ = 0;
};

class CudaBackend;

class CudaBoundKernel final : public BoundKernel {
public:
  CudaBoundKernel(std::unique_ptr<kernels::cuda::Launch> launch,
                  const kernels::cuda::Context &ctx)
      : launch_(std::move(launch)), ctx_(ctx) {}
  void enqueue(const kernels::KernelArgs &args, Stream &stream) override {
    kernels::cuda::Context c = ctx_;
    c.stream = streamOf(stream);
    launch_->run(args, c);
  }
  std::string plan() const override {
    return kernels::cuda::gemmPlanSummary(*launch_);
  }

private:
  std::unique_ptr<kernels::cuda::Launch> launch_;
  /// The backend's context: its workspace fields are read at each launch.
  const kernels::cuda::Context &ctx_;
};

std::string cudaVersionString(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

class CudaBackend final : public Backend {
public:
  explicit CudaBackend(const BackendOptions &o) : options_(o) {
    checkCudaDevices();
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    device_ = o.rank % count;
    if (o.collectives.empty() || o.collectives == "nccl") {
      useNccl_ = true;
      if (o.ranksOnNode > count)
        throw Error(std::to_string(o.ranksOnNode) +
                    " ranks on this node share " + std::to_string(count) +
                    " GPU" + (count == 1 ? "" : "s") +
                    ": NCCL needs a GPU per rank; use --collectives mpi "
                    "(collectives staged "
                    "through host memory, a test mode)");
    } else if (o.collectives == "local") {
      local_ = true;
    } else if (o.collectives != "mpi") {
      throw Error("--collectives: expected nccl, mpi or local, got '" +
                  o.collectives + "'");
    }
    check(cudaSetDevice(device_), "cudaSetDevice");
    cudaDeviceProp prop;
    check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
    deviceName_ = prop.name;
    ctx_.smCount = prop.multiProcessorCount;
    ctx_.computeCapability = prop.major * 10 + prop.minor;
    check(cudaStreamCreateWithFlags(&compute_.stream, cudaStreamNonBlocking),
          "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&comm_.stream, cudaStreamNonBlocking),
          "cudaStreamCreate");
    if (cublasLtCreate(&ctx_.lt) != CUBLAS_STATUS_SUCCESS)
      throw Error("cublasLtCreate failed");
    check(cudaHostAlloc(reinterpret_cast<void **>(&errorHost_),
                        sizeof(kernels::cuda::DeviceError),
                        cudaHostAllocMapped | cudaHostAllocPortable),
          "cudaHostAlloc (kernel error report)");
    *errorHost_ = kernels::cuda::DeviceError{};
    check(cudaHostGetDevicePointer(reinterpret_cast<void **>(&ctx_.error),
                                   errorHost_, 0),
          "cudaHostGetDevicePointer");
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    int nccl = 0;
    ncclGetVersion(&nccl);
    description_ =
        "cuda: " + deviceName_ + " (sm_" +
        std::to_string(ctx_.computeCapability) + ", " +
        std::to_string(ctx_.smCount) + " SMs), GPU " + std::to_string(device_) +
        ", CUDA " + cudaVersionString(runtime) + ", matmuls on " +
        kernels::cuda::gemmLibrary() + ", collectives on " +
        (useNccl_
             ? "NCCL " + std::to_string(nccl / 10000) + "." +
                   std::to_string(nccl / 100 % 100) + "." +
                   std::to_string(nccl % 100)
             : std::string("host memory + the host communicator (test mode") +
                   (local_ ? "; all-reduces on this GPU across the local ranks)"
                           : ")"));
  }
  ~CudaBackend() override {
    cudaSetDevice(device_);
    cudaDeviceSynchronize();
    if (ctx_.workspace)
      cudaFree(ctx_.workspace);
    if (ctx_.lt)
      cublasLtDestroy(ctx_.lt);
    if (compute_.stream)
      cudaStreamDestroy(compute_.stream);
    if (comm_.stream)
      cudaStreamDestroy(comm_.stream);
    if (errorHost_)
      cudaFreeHost(errorHost_);
  }

  std::string name() const override { return "cuda"; }
  std::string description() const override { return description_; }
  std::vector<std::pair<std::string, std::string>> properties() const override {
    return {{"gemm_library", kernels::cuda::gemmLibrary()},
            {"device", deviceName_},
            {"compute_capability", std::to_string(ctx_.computeCapability)},
            {"collectives", useNccl_ ? "nccl"
                            : local_ ? "local"
                                     : "mpi"}};
  }

  void *allocate(size_t bytes) override {
    check(cudaSetDevice(device_), "cudaSetDevice");
    void *p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status != cudaSuccess) {
      cudaGetLastError(); // not sticky: clear it
      throw Error("out of GPU memory (" + std::to_string(bytes) +
                  " bytes: " + cudaGetErrorString(status) + ")");
    }
    check(cudaMemsetAsync(p, 0, bytes, compute_.stream), "cudaMemset");
    return p;
  }
  void deallocate(void *p) noexcept override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(compute_.stream);
    cudaStreamSynchronize(comm_.stream);
    cudaFree(p);
  }
  bool hostAddressable() const override { return false; }
  void copyToHost(void *host, const void *device, size_t bytes,
                  Stream &stream) override {
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost,
                          streamOf(stream)),
          "copy to the host");
    check(cudaStreamSynchronize(streamOf(stream)), "copy to the host");
  }
  void copyFromHost(void *device, const void *host, size_t bytes,
                    Stream &stream) override {
    check(cudaSetDevice(device_), "cudaSetDevice");
    // From pageable memory the call returns once the host bytes are taken
    // (staged), so `host` may be reused at once, as the interface asks.
    check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice,
                          streamOf(stream)),
          "copy to the device");
  }
  void copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch,
              size_t rowBytes, size_t rows, Stream &stream) override {
    if (rows == 0 || rowBytes == 0)
      return;
    check(cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, rowBytes, rows,
                            cudaMemcpyDeviceToDevice, streamOf(stream)),
          "cudaMemcpy2DAsync");
  }

  std::unique_ptr<BoundKernel> bindKernel(std::string_view name,
                                          kernels::KernelArgs &args) override {
    check(cudaSetDevice(device_), "cudaSetDevice");
    const size_t need = kernels::cuda::workspaceBytes(name, args);
    if (need > ctx_.workspaceBytes) {
      // Bound before the steps run: nothing uses the old workspace now.
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      if (ctx_.workspace)
        check(cudaFree(ctx_.workspace), "cudaFree");
      ctx_.workspace = nullptr;
      ctx_.workspaceBytes = 0;
      const size_t bytes = (need + 255) / 256 * 256;
      const cudaError_t status = cudaMalloc(&ctx_.workspace, bytes);
      if (status != cudaSuccess) {
        cudaGetLastError();
        throw Error("out of GPU memory for kernel '" + std::string(name) +
                    "''s workspace (" + std::to_string(bytes) + " bytes)");
      }
      ctx_.workspaceBytes = bytes;
    }
    std::unique_ptr<kernels::cuda::Launch> launch =
        kernels::cuda::bindKernel(name, args, ctx_);
    if (!launch)
      return nullptr;
    return std::make_unique<CudaBoundKernel>(std::move(launch), ctx_);
  }
  uint64_t kernelWorkspaceBytes() const override { return ctx_.workspaceBytes; }

  Stream &computeStream() override { return compute_; }
  Stream &commStream() override { return comm_; }
  std::unique_ptr<Event> createEvent() override {
    return std::make_unique<CudaEvent>(device_);
  }
  void record(Event &e, Stream &s) override {
    check(cudaEventRecord(static_cast<CudaEvent &>(e).event, streamOf(s)),
          "cudaEventRecord");
  }
  void wait(Stream &s, Event &e) override {
    check(
        cudaStreamWaitEvent(streamOf(s), static_cast<CudaEvent &>(e).event, 0),
        "cudaStreamWaitEvent");
  }
  void synchronize() override {
    check(cudaSetDevice(device_), "cudaSetDevice");
    waitFor(compute_.stream);
    waitFor(comm_.stream);
    // Written by the device: read the flag through volatile.
    if (*reinterpret_cast<volatile int *>(&errorHost_->flag) != 0) {
      const std::string msg = kernels::cuda::describeDeviceError(*errorHost_);
      *errorHost_ = kernels::cuda::DeviceError{};
      throw Error(msg);
    }
  }
  double elapsedSeconds(const Event &from, const Event &to) override {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, static_cast<const CudaEvent &>(from).event,
                               static_cast<const CudaEvent &>(to).event),
          "cudaEventElapsedTime");
    return double(ms) * 1e-3;
  }

  std::unique_ptr<DeviceCommunicator>
  createCommunicator(std::unique_ptr<Communicator> group) override {
    return std::make_unique<CudaCommunicator>(std::move(group), device_,
                                              useNccl_, nccl_, local_);
  }

  void setThreads(int threads) override { threads_ = std::max(1, threads); }
  int threads() const override { return threads_; }
  void attachThread() override {
    check(cudaSetDevice(device_), "cudaSetDevice");
  }

private:
  /// Waits for `s`, watching the NCCL communicators: an asynchronous NCCL
  /// error, or no completion within the timeout, aborts them (the
  /// collective can never complete) and throws CommFailure.
  void waitFor(cudaStream_t s) {
    const auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::microseconds(5);
    while (true) {
      const cudaError_t status = cudaStreamQuery(s);
      if (status == cudaSuccess)
        return;
      if (status != cudaErrorNotReady)
        check(status, "a kernel failed");
      if (useNccl_) {
        const std::string failed = nccl_->asyncError();
        if (!failed.empty()) {
          nccl_->abortAll();
          throw CommFailure(failed);
        }
      }
      const double waited = std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - start)
                                .count();
      if (options_.timeoutSeconds > 0 && waited > options_.timeoutSeconds) {
        if (useNccl_)
          nccl_->abortAll();
        throw CommFailure("the GPU's work did not complete within " +
                          std::to_string(int64_t(options_.timeoutSeconds)) +
                          " s (--timeout): a collective is blocked" +
                          (useNccl_ ? "; NCCL communicators aborted" : ""));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(50));
    }
  }

  BackendOptions options_;
  int device_ = 0;
  bool useNccl_ = false;
  std::string deviceName_, description_;
  int threads_ = 1;
  CudaStream compute_, comm_;
  kernels::cuda::Context ctx_;
  kernels::cuda::DeviceError *errorHost_ = nullptr;
  std::shared_ptr<NcclRegistry> nccl_ = std::make_shared<NcclRegistry>();
  bool local_ = false; ///< --collectives local
};

} // namespace

void checkCudaDevices() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess)
    throw Error(std::string("this machine has no usable CUDA device (CUDA: ") +
                cudaGetErrorString(status) + "); use --backend cpu");
  if (count == 0)
    throw Error("this machine has no CUDA device; use --backend cpu");
}

std::unique_ptr<Backend> makeCudaBackend(const BackendOptions &options) {
  return std::make_unique<CudaBackend>(options);
}

} // namespace dtc::rt
