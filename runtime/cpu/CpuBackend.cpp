//===- CpuBackend.cpp - the CPU backend (see CpuBackend.h)
//------------------===//
#include "CpuBackend.h"
#include "dtc/kernels/CpuKernels.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace dtc::rt {

namespace {

using Clock = std::chrono::steady_clock;

/// Work runs as it is enqueued: one stream serves kernels and collectives.
class CpuStream final : public Stream {};

class CpuEvent final : public Event {
public:
  Clock::time_point at;
};

class CpuKernel final : public BoundKernel {
public:
  explicit CpuKernel(kernels::RunFn fn) : fn_(fn) {}
  void enqueue(const kernels::KernelArgs &args, Stream &) override {
    fn_(args);
  }

private:
  kernels::RunFn fn_;
};

/// f32 copies of bf16/f16 operands, shared by every kernel of the backend
/// (the CPU runs one kernel at a time): sized at bind time to the largest
/// instruction's need, allocated on first use.
class ConversionScratch {
public:
  void reserve(size_t bytes) { want_ = std::max(want_, bytes); }
  char *data() {
    if (have_ < want_) {
      mem_.reset(static_cast<char *>(std::aligned_alloc(64, want_)));
      if (!mem_)
        throw Error(
            "out of host memory for the f32 copies of bf16/f16 operands");
      have_ = want_;
    }
    return mem_.get();
  }
  size_t bytes() const { return have_; }

private:
  struct Free {
    void operator()(char *p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> mem_;
  size_t want_ = 0, have_ = 0;
};

/// A kernel computing in f32 on bf16/f16 operands (docs/kernels.md): each
/// such input is converted into an f32 copy, the kernel runs on the
/// copies, and each such output is rounded back to nearest even.
class CpuConvertingKernel final : public BoundKernel {
public:
  struct Operand {
    bool output;
    size_t index,
        offset; ///< into args.in / args.out; byte offset in the scratch
  };
  CpuConvertingKernel(kernels::RunFn fn, ConversionScratch &scratch,
                      std::vector<Operand> ops)
      : fn_(fn), scratch_(scratch), ops_(std::move(ops)) {}
  void enqueue(const kernels::KernelArgs &args, Stream &) override {
    kernels::KernelArgs wide = args;
    char *base = scratch_.data();
    for (const Operand &o : ops_) {
      kernels::TensorArg &t = o.output ? wide.out[o.index] : wide.in[o.index];
      float *copy = reinterpret_cast<float *>(base + o.offset);
      if (!o.output)
        kernels::cpu::toF32(*args.ctx, t.dtype, t.data, copy, t.numel);
      t.dtype = DType::F32;
      t.data = copy;
    }
    fn_(wide);
    for (const Operand &o : ops_)
      if (o.output) {
        const kernels::TensorArg &t = args.out[o.index];
        kernels::cpu::fromF32(*args.ctx, t.dtype, wide.out[o.index].as<float>(),
                              t.data, t.numel);
      }
  }

private:
  kernels::RunFn fn_;
  ConversionScratch &scratch_;
  std::vector<Operand> ops_;
};

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(const BackendOptions &o) : ctx_(o.threads) {}

  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "cpu: " + std::to_string(ctx_.threads()) + " thread" +
           (ctx_.threads() == 1 ? "" : "s") + ", matmuls on " +
           kernels::cpu::gemmLibrary();
  }
  std::vector<std::pair<std::string, std::string>> properties() const override {
    return {{"gemm_library", kernels::cpu::gemmLibrary()}};
  }

  void *allocate(size_t bytes) override {
    void *p = std::aligned_alloc(64, bytes);
    if (!p)
      throw Error("out of host memory");
    std::memset(p, 0, bytes);
    return p;
  }
  void deallocate(void *p) noexcept override { std::free(p); }
  bool hostAddressable() const override { return true; }
  void copyToHost(void *host, const void *device, size_t bytes,
                  Stream &) override {
    std::memcpy(host, device, bytes);
  }
  void copyFromHost(void *device, const void *host, size_t bytes,
                    Stream &) override {
    std::memcpy(device, host, bytes);
  }
  void copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch,
              size_t rowBytes, size_t rows, Stream &) override {
    char *d = static_cast<char *>(dst);
    const char *s = static_cast<const char *>(src);
    for (size_t r = 0; r < rows; ++r)
      std::memcpy(d + r * dstPitch, s + r * srcPitch, rowBytes);
  }

  std::unique_ptr<BoundKernel> bindKernel(std::string_view name,
                                          kernels::KernelArgs &args) override {
    kernels::RunFn fn = kernels::cpu::findKernel(name);
    if (!fn)
      return nullptr;
    args.ctx = &ctx_;
    // The workspace for the largest kernel bound, now: it never grows
    // while steps run, and the plan's workspace is what is held.
    std::vector<kernels::TensorDesc> in, out;
    for (const kernels::TensorArg &t : args.in)
      in.push_back({t.dtype, t.shape});
    for (const kernels::TensorArg &t : args.out)
      out.push_back({t.dtype, t.shape});
    const nlohmann::json attrs =
        args.attrs ? *args.attrs : nlohmann::json::object();
    if (kernels::cpu::contextWorkspaceBytes(name, in, out, attrs, 1) > 0) {
      withWorkspace_.push_back(
          {std::string(name), std::move(in), std::move(out), attrs});
      reserveWorkspace();
    }
    // The kernels compute in f32: bf16/f16 operands go through f32 copies,
    // unless the kernel only moves or converts elements.
    std::vector<CpuConvertingKernel::Operand> ops;
    size_t bytes = 0;
    if (!kernels::cpu::handlesLowPrecision(name))
      for (bool output : {false, true}) {
        const std::vector<kernels::TensorArg> &list =
            output ? args.out : args.in;
        for (size_t i = 0; i < list.size(); ++i)
          if (isLowPrecision(list[i].dtype)) {
            ops.push_back({output, i, bytes});
            bytes += size_t(kernels::cpu::f32CopyBytes(list[i].numel));
          }
      }
    if (ops.empty())
      return std::make_unique<CpuKernel>(fn);
    conversion_.reserve(bytes);
    return std::make_unique<CpuConvertingKernel>(fn, conversion_,
                                                 std::move(ops));
  }
  uint64_t kernelWorkspaceBytes() const override {
    return uint64_t(ctx_.workspaceFloats()) * sizeof(float);
  }
  uint64_t scratchBytes() const override { return conversion_.bytes(); }

  Stream &computeStream() override { return stream_; }
  Stream &commStream() override { return stream_; }
  std::unique_ptr<Event> createEvent() override {
    return std::make_unique<CpuEvent>();
  }
  void record(Event &e, Stream &) override {
    static_cast<CpuEvent &>(e).at = Clock::now();
  }
  void wait(Stream &, Event &) override {}
  void synchronize() override {}
  double elapsedSeconds(const Event &from, const Event &to) override {
    return std::chrono::duration<double>(static_cast<const CpuEvent &>(to).at -
                                         static_cast<const CpuEvent &>(from).at)
        .count();
  }

  std::unique_ptr<DeviceCommunicator>
  createCommunicator(std::unique_ptr<Communicator> group) override {
    return makeHostMemoryCommunicator(std::move(group));
  }

  void setThreads(int threads) override {
    ctx_.setThreads(threads);
    reserveWorkspace(); // the tiles are per thread
  }
  int threads() const override { return ctx_.threads(); }
  void attachThread() override { kernels::cpu::bindThreads(ctx_); }

private:
  /// The kernels bound so far that take workspace, and sizing it for the
  /// largest with the current threads.
  struct Bound {
    std::string name;
    std::vector<kernels::TensorDesc> in, out;
    nlohmann::json attrs;
  };
  void reserveWorkspace() {
    uint64_t most = 0;
    for (const Bound &b : withWorkspace_)
      most = std::max(most, kernels::cpu::contextWorkspaceBytes(
                                b.name, b.in, b.out, b.attrs, ctx_.threads()));
    if (most > 0)
      ctx_.workspace(size_t(most / sizeof(float)));
  }
  std::vector<Bound> withWorkspace_;
  kernels::KernelContext ctx_;
  CpuStream stream_;
  ConversionScratch conversion_;
};

} // namespace

std::unique_ptr<Backend> makeCpuBackend(const BackendOptions &options) {
  return std::make_unique<CpuBackend>(options);
}

} // namespace dtc::rt
