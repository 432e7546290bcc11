//===- Backend.cpp - the interface's out-of-line parts, shared pieces ----===//
//
// The registry that makes backends by name is Registry.cpp (it links every
// backend; this file links none).
//
//===----------------------------------------------------------------------===//
#include "dtc/runtime/Backend.h"

#include <cstdlib>

namespace dtc::rt {

Stream::~Stream() = default;
Event::~Event() = default;
BoundKernel::~BoundKernel() = default;
DeviceCommunicator::~DeviceCommunicator() = default;
Backend::~Backend() = default;

namespace {
/// The host communicator's own collectives, on host memory.
class HostMemoryCommunicator final : public DeviceCommunicator {
public:
  explicit HostMemoryCommunicator(std::unique_ptr<Communicator> group)
      : c_(std::move(group)) {}
  int size() const override { return c_->size(); }
  int rank() const override { return c_->rank(); }
  void allReduce(const void *in, void *out, size_t count, DType dtype,
                 ReduceOp op, Stream &, Traffic &traffic) override {
    CountTraffic counting(*c_, traffic);
    c_->allReduce(in, out, count, dtype, op);
  }
  void allGather(const void *in, void *out, size_t bytes, Stream &,
                 Traffic &traffic) override {
    CountTraffic counting(*c_, traffic);
    c_->allGather(in, out, bytes);
  }
  void reduceScatter(const void *in, void *out, size_t count, DType dtype,
                     ReduceOp op, Stream &, Traffic &traffic) override {
    CountTraffic counting(*c_, traffic);
    c_->reduceScatter(in, out, count, dtype, op);
  }
  void allToAll(const void *in, void *out, size_t bytes, Stream &,
                Traffic &traffic) override {
    CountTraffic counting(*c_, traffic);
    c_->allToAll(in, out, bytes);
  }
  void shift(const void *in, void *out, size_t bytes, int offset, Stream &,
             Traffic &traffic) override {
    CountTraffic counting(*c_, traffic);
    c_->shift(in, out, bytes, offset);
  }
  void send(const void *buf, size_t bytes, int peer, int tag, Stream &,
            Traffic &traffic) override {
    CountTraffic counting(*c_, traffic);
    c_->sendMessage(buf, bytes, peer, tag);
  }
  void recv(void *buf, size_t bytes, int peer, int tag, Stream &,
            Traffic &traffic) override {
    CountTraffic counting(*c_, traffic);
    c_->recvMessage(buf, bytes, peer, tag);
  }
  void flushSends() override { c_->flushSends(); }
  uint64_t scratchBytes() const override { return c_->scratchBytes(); }
  void reserveScratch(size_t bytes) override { c_->reserveScratch(bytes); }

private:
  std::unique_ptr<Communicator> c_;
};

} // namespace

std::unique_ptr<DeviceCommunicator>
makeHostMemoryCommunicator(std::unique_ptr<Communicator> group) {
  return std::make_unique<HostMemoryCommunicator>(std::move(group));
}

} // namespace dtc::rt
