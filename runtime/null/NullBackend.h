//===- NullBackend.h - a backend that computes nothing -----------*- C++
//-*-===//
//
// "null" runs the executor, the pipeline schedules and the trainer without
// kernels: its memory is host memory (zeroed, 64-byte aligned), copies are
// memcpy, and its collectives and pipeline messages are the host
// communicator's own (makeHostMemoryCommunicator: real bytes between real
// ranks, so a schedule that would deadlock still does, and traffic is
// counted). It binds every kernel of the shared table (kernels::findKernel)
// and refuses other names like any backend, but a bound kernel only counts
// its calls: outputs keep what they held. It counts every call of the
// interface (counts()), for tests of what the executor asks of a backend.
// docs/backends.md "The null backend".
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_NULL_NULLBACKEND_H
#define DTC_RUNTIME_NULL_NULLBACKEND_H

#include "dtc/runtime/Backend.h"

#include <map>
#include <memory>
#include <string>

namespace dtc::rt {

/// What one null backend was asked to do so far.
struct NullBackendCounts {
  int64_t allocations = 0, deallocations = 0;
  /// Bytes allocated and not freed yet, and their high-water mark.
  uint64_t liveBytes = 0, peakBytes = 0;
  /// Kernels bound per name (at load) and enqueued per name (per run).
  std::map<std::string, int64_t> kernelsBound, kernelCalls;
  int64_t copiesToHost = 0, copiesFromHost = 0, copies2D = 0;
  int64_t communicators = 0, eventsCreated = 0, records = 0, waits = 0,
          synchronizations = 0;
};

class NullBackend final : public Backend {
public:
  explicit NullBackend(const BackendOptions &options);
  ~NullBackend() override;

  const NullBackendCounts &counts() const { return counts_; }

  std::string name() const override { return "null"; }
  std::string description() const override;
  std::vector<std::pair<std::string, std::string>> properties() const override;

  void *allocate(size_t bytes) override;
  void deallocate(void *device) noexcept override;
  bool hostAddressable() const override { return true; }
  void copyToHost(void *host, const void *device, size_t bytes,
                  Stream &stream) override;
  void copyFromHost(void *device, const void *host, size_t bytes,
                    Stream &stream) override;
  void copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch,
              size_t rowBytes, size_t rows, Stream &stream) override;

  std::unique_ptr<BoundKernel> bindKernel(std::string_view name,
                                          kernels::KernelArgs &args) override;
  uint64_t kernelWorkspaceBytes() const override { return 0; }

  Stream &computeStream() override;
  Stream &commStream() override;
  std::unique_ptr<Event> createEvent() override;
  void record(Event &event, Stream &stream) override;
  void wait(Stream &stream, Event &event) override;
  void synchronize() override;
  double elapsedSeconds(const Event &from, const Event &to) override;

  std::unique_ptr<DeviceCommunicator>
  createCommunicator(std::unique_ptr<Communicator> group) override;

  void setThreads(int threads) override { threads_ = threads; }
  int threads() const override { return threads_; }
  void attachThread() override {}

private:
  struct Streams;
  std::unique_ptr<Streams> streams_;
  std::map<void *, size_t> sizes_;
  NullBackendCounts counts_;
  int threads_ = 1;
};

std::unique_ptr<Backend> makeNullBackend(const BackendOptions &options);

} // namespace dtc::rt

#endif // DTC_RUNTIME_NULL_NULLBACKEND_H
