//===- NullBackend.cpp - a backend that computes nothing (NullBackend.h) --===//
#include "NullBackend.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace dtc::rt {

namespace {

using Clock = std::chrono::steady_clock;

/// Work is done when it is enqueued; two stream objects all the same, so
/// the executor drives it as it drives a device with two streams.
class NullStream final : public Stream {};

class NullEvent final : public Event {
public:
  Clock::time_point at = Clock::now();
};

class NullKernel final : public BoundKernel {
public:
  explicit NullKernel(int64_t &calls) : calls_(calls) {}
  void enqueue(const kernels::KernelArgs &, Stream &) override { ++calls_; }

private:
  int64_t &calls_;
};

} // namespace

struct NullBackend::Streams {
  NullStream compute, comm;
};

NullBackend::NullBackend(const BackendOptions &options)
    : streams_(std::make_unique<Streams>()),
      threads_(std::max(1, options.threads)) {}

NullBackend::~NullBackend() {
  for (auto &[p, bytes] : sizes_)
    std::free(p);
}

std::string NullBackend::description() const {
  return "null: no kernels (outputs keep what they held), host memory";
}

std::vector<std::pair<std::string, std::string>>
NullBackend::properties() const {
  return {{"kernels", "none"}};
}

void *NullBackend::allocate(size_t bytes) {
  void *p = std::aligned_alloc(64, bytes);
  if (!p)
    throw Error("out of host memory");
  std::memset(p, 0, bytes);
  sizes_[p] = bytes;
  ++counts_.allocations;
  counts_.liveBytes += bytes;
  counts_.peakBytes = std::max(counts_.peakBytes, counts_.liveBytes);
  return p;
}

void NullBackend::deallocate(void *device) noexcept {
  auto it = sizes_.find(device);
  if (it == sizes_.end())
    return;
  ++counts_.deallocations;
  counts_.liveBytes -= it->second;
  sizes_.erase(it);
  std::free(device);
}

void NullBackend::copyToHost(void *host, const void *device, size_t bytes,
                             Stream &) {
  ++counts_.copiesToHost;
  std::memcpy(host, device, bytes);
}

void NullBackend::copyFromHost(void *device, const void *host, size_t bytes,
                               Stream &) {
  ++counts_.copiesFromHost;
  std::memcpy(device, host, bytes);
}

void NullBackend::copy2D(void *dst, size_t dstPitch, const void *src,
                         size_t srcPitch, size_t rowBytes, size_t rows,
                         Stream &) {
  ++counts_.copies2D;
  char *d = static_cast<char *>(dst);
  const char *s = static_cast<const char *>(src);
  for (size_t r = 0; r < rows; ++r)
    std::memcpy(d + r * dstPitch, s + r * srcPitch, rowBytes);
}

std::unique_ptr<BoundKernel> NullBackend::bindKernel(std::string_view name,
                                                     kernels::KernelArgs &) {
  if (!kernels::findKernel(name))
    return nullptr;
  const std::string key(name);
  ++counts_.kernelsBound[key];
  return std::make_unique<NullKernel>(counts_.kernelCalls[key]);
}

Stream &NullBackend::computeStream() { return streams_->compute; }
Stream &NullBackend::commStream() { return streams_->comm; }

std::unique_ptr<Event> NullBackend::createEvent() {
  ++counts_.eventsCreated;
  return std::make_unique<NullEvent>();
}

void NullBackend::record(Event &event, Stream &) {
  ++counts_.records;
  static_cast<NullEvent &>(event).at = Clock::now();
}

void NullBackend::wait(Stream &, Event &) { ++counts_.waits; }

void NullBackend::synchronize() { ++counts_.synchronizations; }

double NullBackend::elapsedSeconds(const Event &from, const Event &to) {
  return std::chrono::duration<double>(static_cast<const NullEvent &>(to).at -
                                       static_cast<const NullEvent &>(from).at)
      .count();
}

std::unique_ptr<DeviceCommunicator>
NullBackend::createCommunicator(std::unique_ptr<Communicator> group) {
  ++counts_.communicators;
  return makeHostMemoryCommunicator(std::move(group));
}

std::unique_ptr<Backend> makeNullBackend(const BackendOptions &options) {
  return std::make_unique<NullBackend>(options);
}

} // namespace dtc::rt
