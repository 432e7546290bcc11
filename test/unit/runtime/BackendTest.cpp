//===- BackendTest.cpp - the executor on a second, test-only backend
//-------===//
//
// "recording" is a backend that exists only here. It keeps what the CPU
// backend computes (it delegates kernels and collectives to it) but behaves
// like a device the host cannot touch:
//   - its device addresses are host addresses with bit 55 set, which no
//     host load or store accepts (non-canonical on x86-64, kernel space on
//     AArch64), and it refuses any address without that bit: so neither the
//     executor nor the trainer, checkpoints or LocalRunner may read or write
//     device memory other than through the backend;
//   - its communication stream is deferred: collectives and their packing
//     run only when the compute stream waits for one of their events or the
//     host synchronises; a kernel that reads a collective's result without
//     the executor having made it wait reads stale memory;
//   - it counts allocations, kernel calls per name, collectives, copies and
//     how much communication was still pending when a kernel ran.
// The executor does not know which backend it drives: the same artifacts
// give the same bits on "cpu" and "recording".
//
//===----------------------------------------------------------------------===//
#include "TestArtifacts.h"

#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/Backend.h"
#include "dtc/runtime/LocalRunner.h"
#include "dtc/runtime/Trainer.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace dtc::rt;
using dtc::test::json;

namespace {

constexpr uintptr_t kDeviceBit = uintptr_t(1) << 55;

/// What one recording backend saw (one per rank).
struct Log {
  std::mutex mu;
  int64_t allocations = 0, deallocations = 0;
  uint64_t liveBytes = 0, peakBytes = 0;
  std::map<std::string, int64_t> kernelCalls;
  int64_t collectives = 0, copiesToHost = 0, copiesFromHost = 0,
          synchronizations = 0;
  /// Most collectives or packing copies still queued when a kernel ran.
  size_t mostPendingAtKernel = 0;
  /// Kernels bound per name (at load).
  std::map<std::string, int64_t> kernelsBound;
  int rank = 0; ///< of the backend that wrote it
};

std::mutex gLogsMu;
std::vector<std::shared_ptr<Log>> gLogs;
/// Kernels the recording backend's table pretends not to have.
std::set<std::string> gMissingKernels;

/// The logs of the backends made since the last call, in rank order.
std::vector<std::shared_ptr<Log>> takeLogs() {
  std::lock_guard<std::mutex> lock(gLogsMu);
  std::vector<std::shared_ptr<Log>> out;
  out.swap(gLogs);
  std::stable_sort(out.begin(), out.end(), [](const auto &x, const auto &y) {
    return x->rank < y->rank;
  });
  return out;
}

void *toHost(const void *device) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(device);
  if (!(a & kDeviceBit))
    throw Error(
        "recording backend: a host address was passed as a device address");
  return reinterpret_cast<void *>(a & ~kDeviceBit);
}

void *toDevice(void *host) {
  return reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(host) |
                                  kDeviceBit);
}

class RecStream final : public Stream {
public:
  explicit RecStream(bool deferred) : deferred(deferred) {}
  const bool deferred;
  std::deque<std::function<void()>> queue;
  std::exception_ptr failure; ///< the first failure of deferred work
  /// Runs queued work in order until `until` says stop (or the queue is
  /// empty). After a failure, the rest is dropped: its inputs are suspect.
  void drain(const std::function<bool()> &until = nullptr) {
    while (!queue.empty() && !(until && until())) {
      std::function<void()> work = std::move(queue.front());
      queue.pop_front();
      if (failure)
        continue;
      try {
        work();
      } catch (...) {
        failure = std::current_exception();
      }
    }
  }
  void run(std::function<void()> work) {
    if (deferred)
      queue.push_back(std::move(work));
    else
      work();
  }
};

class RecEvent final : public Event {
public:
  bool done = false;
  RecStream *stream = nullptr;
  std::chrono::steady_clock::time_point at;
};

class RecKernel final : public BoundKernel {
public:
  RecKernel(std::unique_ptr<BoundKernel> inner, Stream &innerStream,
            std::string name, std::shared_ptr<Log> log, RecStream &comm)
      : inner_(std::move(inner)), innerStream_(innerStream),
        name_(std::move(name)), log_(std::move(log)), comm_(comm) {}
  void enqueue(const dtc::kernels::KernelArgs &args, Stream &stream) override {
    dtc::kernels::KernelArgs host = args;
    for (auto *list : {&host.in, &host.out})
      for (auto &t : *list)
        t.data = toHost(t.data);
    {
      std::lock_guard<std::mutex> lock(log_->mu);
      log_->kernelCalls[name_] += 1;
      log_->mostPendingAtKernel =
          std::max(log_->mostPendingAtKernel, comm_.queue.size());
    }
    static_cast<RecStream &>(stream).run([this, host = std::move(host)] {
      inner_->enqueue(host, innerStream_);
    });
  }

private:
  std::unique_ptr<BoundKernel> inner_;
  Stream &innerStream_;
  std::string name_;
  std::shared_ptr<Log> log_;
  RecStream &comm_;
};

class RecCommunicator final : public DeviceCommunicator {
public:
  RecCommunicator(std::unique_ptr<DeviceCommunicator> inner,
                  Stream &innerStream, std::shared_ptr<Log> log)
      : inner_(std::move(inner)), innerStream_(innerStream),
        log_(std::move(log)) {}
  int size() const override { return inner_->size(); }
  int rank() const override { return inner_->rank(); }
  void allReduce(const void *in, void *out, size_t count, DType dtype,
                 ReduceOp op, Stream &s, Traffic &traffic) override {
    submit(s, [=, &traffic] {
      inner_->allReduce(toHost(in), toHost(out), count, dtype, op, innerStream_,
                        traffic);
    });
  }
  void allGather(const void *in, void *out, size_t bytes, Stream &s,
                 Traffic &traffic) override {
    submit(s, [=, &traffic] {
      inner_->allGather(toHost(in), toHost(out), bytes, innerStream_, traffic);
    });
  }
  void reduceScatter(const void *in, void *out, size_t count, DType dtype,
                     ReduceOp op, Stream &s, Traffic &traffic) override {
    submit(s, [=, &traffic] {
      inner_->reduceScatter(toHost(in), toHost(out), count, dtype, op,
                            innerStream_, traffic);
    });
  }
  void allToAll(const void *in, void *out, size_t bytes, Stream &s,
                Traffic &traffic) override {
    submit(s, [=, &traffic] {
      inner_->allToAll(toHost(in), toHost(out), bytes, innerStream_, traffic);
    });
  }
  void shift(const void *in, void *out, size_t bytes, int offset, Stream &s,
             Traffic &traffic) override {
    submit(s, [=, &traffic] {
      inner_->shift(toHost(in), toHost(out), bytes, offset, innerStream_,
                    traffic);
    });
  }
  void send(const void *buf, size_t bytes, int peer, int tag, Stream &s,
            Traffic &traffic) override {
    submit(s, [=, &traffic] {
      inner_->send(toHost(buf), bytes, peer, tag, innerStream_, traffic);
    });
  }
  void recv(void *buf, size_t bytes, int peer, int tag, Stream &s,
            Traffic &traffic) override {
    submit(s, [=, &traffic] {
      inner_->recv(toHost(buf), bytes, peer, tag, innerStream_, traffic);
    });
  }
  void flushSends() override { inner_->flushSends(); }
  uint64_t scratchBytes() const override { return inner_->scratchBytes(); }
  void reserveScratch(size_t bytes) override { inner_->reserveScratch(bytes); }

private:
  void submit(Stream &s, std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(log_->mu);
      log_->collectives += 1;
    }
    static_cast<RecStream &>(s).run(std::move(work));
  }
  std::unique_ptr<DeviceCommunicator> inner_;
  Stream &innerStream_;
  std::shared_ptr<Log> log_;
};

class RecordingBackend final : public Backend {
public:
  explicit RecordingBackend(const BackendOptions &o)
      : cpu_(makeBackend("cpu", o)), log_(std::make_shared<Log>()) {
    log_->rank = o.rank;
    std::lock_guard<std::mutex> lock(gLogsMu);
    gLogs.push_back(log_);
  }
  std::string name() const override { return "recording"; }
  std::string description() const override {
    return "recording: " + cpu_->description();
  }
  std::vector<std::pair<std::string, std::string>> properties() const override {
    return {{"test_backend", "recording"}};
  }

  void *allocate(size_t bytes) override {
    void *p = cpu_->allocate(bytes);
    std::lock_guard<std::mutex> lock(log_->mu);
    log_->allocations += 1;
    log_->liveBytes += bytes;
    log_->peakBytes = std::max(log_->peakBytes, log_->liveBytes);
    sizes_[p] = bytes;
    return toDevice(p);
  }
  void deallocate(void *device) noexcept override {
    void *p = reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(device) &
                                       ~kDeviceBit);
    {
      std::lock_guard<std::mutex> lock(log_->mu);
      log_->deallocations += 1;
      log_->liveBytes -= sizes_[p];
      sizes_.erase(p);
    }
    cpu_->deallocate(p);
  }
  bool hostAddressable() const override { return false; }
  void copyToHost(void *host, const void *device, size_t bytes,
                  Stream &s) override {
    {
      std::lock_guard<std::mutex> lock(log_->mu);
      log_->copiesToHost += 1;
    }
    drainBefore(s);
    cpu_->copyToHost(host, toHost(device), bytes, cpu_->computeStream());
  }
  void copyFromHost(void *device, const void *host, size_t bytes,
                    Stream &s) override {
    {
      std::lock_guard<std::mutex> lock(log_->mu);
      log_->copiesFromHost += 1;
    }
    drainBefore(s);
    cpu_->copyFromHost(toHost(device), host, bytes, cpu_->computeStream());
  }
  void copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch,
              size_t rowBytes, size_t rows, Stream &s) override {
    void *d = toHost(dst), *sr = toHost(src);
    static_cast<RecStream &>(s).run([=] {
      cpu_->copy2D(d, dstPitch, sr, srcPitch, rowBytes, rows,
                   cpu_->computeStream());
    });
  }

  std::unique_ptr<BoundKernel>
  bindKernel(std::string_view name, dtc::kernels::KernelArgs &args) override {
    if (gMissingKernels.count(std::string(name)))
      return nullptr;
    auto inner = cpu_->bindKernel(name, args);
    if (!inner)
      return nullptr;
    {
      std::lock_guard<std::mutex> lock(log_->mu);
      log_->kernelsBound[std::string(name)] += 1;
    }
    return std::make_unique<RecKernel>(std::move(inner), cpu_->computeStream(),
                                       std::string(name), log_, comm_);
  }
  // The CPU kernels' context (and its workspace) is the inner backend's.
  uint64_t kernelWorkspaceBytes() const override {
    return cpu_->kernelWorkspaceBytes();
  }
  uint64_t scratchBytes() const override { return cpu_->scratchBytes(); }

  Stream &computeStream() override { return compute_; }
  Stream &commStream() override { return comm_; }
  std::unique_ptr<Event> createEvent() override {
    return std::make_unique<RecEvent>();
  }
  void record(Event &e, Stream &s) override {
    auto &ev = static_cast<RecEvent &>(e);
    auto &st = static_cast<RecStream &>(s);
    ev.done = false;
    ev.stream = &st;
    st.run([&ev] {
      ev.at = std::chrono::steady_clock::now();
      ev.done = true;
    });
  }
  void wait(Stream &s, Event &e) override {
    auto &ev = static_cast<RecEvent &>(e);
    // The compute stream runs at once: it can only wait by running the
    // deferred stream up to the event. (The deferred stream waiting for the
    // compute stream finds its events complete.)
    if (!static_cast<RecStream &>(s).deferred && !ev.done)
      ev.stream->drain([&ev] { return ev.done; });
  }
  void synchronize() override {
    {
      std::lock_guard<std::mutex> lock(log_->mu);
      log_->synchronizations += 1;
    }
    comm_.drain();
    if (comm_.failure) {
      std::exception_ptr f = comm_.failure;
      comm_.failure = nullptr;
      std::rethrow_exception(f);
    }
  }
  double elapsedSeconds(const Event &from, const Event &to) override {
    auto &a = static_cast<const RecEvent &>(from),
         &b = static_cast<const RecEvent &>(to);
    if (!a.done || !b.done)
      throw Error("recording backend: elapsed time of an unfinished event");
    return std::chrono::duration<double>(b.at - a.at).count();
  }

  std::unique_ptr<DeviceCommunicator>
  createCommunicator(std::unique_ptr<Communicator> group) override {
    return std::make_unique<RecCommunicator>(
        cpu_->createCommunicator(std::move(group)), cpu_->commStream(), log_);
  }

  void setThreads(int threads) override { cpu_->setThreads(threads); }
  int threads() const override { return cpu_->threads(); }
  void attachThread() override { cpu_->attachThread(); }

private:
  /// A copy on a stream comes after that stream's earlier work.
  void drainBefore(Stream &s) {
    auto &st = static_cast<RecStream &>(s);
    if (st.deferred)
      st.drain();
  }
  std::unique_ptr<Backend> cpu_;
  std::shared_ptr<Log> log_;
  RecStream compute_{false}, comm_{true};
  std::map<void *, size_t> sizes_;
};

[[maybe_unused]] const bool gRegistered = [] {
  registerBackend("recording", [](const BackendOptions &o) {
    return std::make_unique<RecordingBackend>(o);
  });
  return true;
}();

// ---- helpers
// -------------------------------------------------------------------------

struct Outcome {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> params;
  LocalRunStats stats;
};

Outcome trainOn(const std::string &backend, const json &body, int steps) {
  LocalRunnerOptions o;
  o.backend = backend;
  o.timeoutSeconds = 60;
  std::string err;
  auto r = LocalRunner::loadBytes(encodeArtifact(body), "t.dtc", err, o);
  Outcome out;
  if (!r) {
    ADD_FAILURE() << err;
    return out;
  }
  EXPECT_TRUE(r->initialize(7, err)) << err;
  EXPECT_TRUE(r->train(steps, out.losses, err)) << err;
  for (const std::string &name : r->tensorNames("param"))
    EXPECT_TRUE(r->getTensor(name, out.params[name], err)) << err;
  out.stats = r->stats();
  return out;
}

/// Kernel instructions of each rank's program (neither collectives nor
/// shard_offset, which the executor writes itself).
/// Per rank: the kernels its program binds, and the kernel calls of one
/// step (pipelines: a chunk's lists once per schedule action running them;
/// accumulations and fills are the backend's add and broadcast kernels).
struct KernelCount {
  int64_t bound = 0, callsPerStep = 0;
};
std::vector<KernelCount> kernelInstructions(const json &body) {
  Artifact a = parseArtifact(body, "t.dtc");
  auto kernels = [](const std::vector<InstrDecl> &list) {
    int64_t n = 0;
    for (const InstrDecl &ins : list)
      n += !ins.isCollective && ins.op != "shard_offset" &&
           ins.pipe != PipeOp::Send && ins.pipe != PipeOp::Recv &&
           ins.pipe != PipeOp::MicrobatchSlice;
    return n;
  };
  std::vector<KernelCount> perRank;
  for (int64_t r = 0; r < a.devices; ++r) {
    const ProgramDecl &p = a.programs[size_t(a.programOf(int(r)))];
    KernelCount k;
    k.bound = kernels(p.instructions) + kernels(p.finish);
    k.callsPerStep = k.bound;
    for (const ChunkDecl &c : p.chunks)
      k.bound += kernels(c.forward) + kernels(c.backwardInput) +
                 kernels(c.backwardWeight);
    for (const dtc::sched::Action &act : p.schedule) {
      const ChunkDecl &c = p.chunks[size_t(act.chunk)];
      switch (act.kind) {
      case dtc::sched::Kind::Forward:
        k.callsPerStep += kernels(c.forward);
        break;
      case dtc::sched::Kind::Backward:
        k.callsPerStep += kernels(c.backwardInput);
        break;
      case dtc::sched::Kind::Weight:
        k.callsPerStep += kernels(c.backwardWeight);
        break;
      case dtc::sched::Kind::BackwardWeight:
        k.callsPerStep += kernels(c.backwardInput) + kernels(c.backwardWeight);
        break;
      }
    }
    perRank.push_back(k);
  }
  return perRank;
}

struct Case {
  std::string name;
  json body;
};

std::vector<Case> cases() {
  dtc::test::MlpConfig dp4;
  dp4.mesh = {4};
  dp4.dpAxes = {0};
  dtc::test::MlpConfig tp;
  tp.mesh = {2, 2};
  tp.dpAxes = {0};
  tp.tpAxis = 1;
  dtc::test::LmConfig lm;
  lm.mesh = {2};
  return {
      {"mlp, one rank", dtc::test::mlpArtifact({})},
      {"mlp, dp 4", dtc::test::mlpArtifact(dp4)},
      {"mlp, dp 2 x tp 2", dtc::test::mlpArtifact(tp)},
      {"lm, dp 2", dtc::test::lmArtifact(lm)},
      {"every collective kind", dtc::test::collectivesArtifact()},
      {"pipeline, 2 stages x 4 micro-batches", dtc::test::pipelineArtifact()}};
}

// ---- tests
// ---------------------------------------------------------------------------

TEST(Backend, TheExecutorGivesTheSameBitsOnAnotherBackend) {
  constexpr int kSteps = 3;
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.name);
    takeLogs();
    const Outcome cpu = trainOn("cpu", c.body, kSteps);
    EXPECT_TRUE(takeLogs().empty()) << "the cpu run used the test backend";
    const Outcome rec = trainOn("recording", c.body, kSteps);
    const std::vector<std::shared_ptr<Log>> logs = takeLogs();

    ASSERT_EQ(rec.losses.size(), size_t(kSteps));
    for (size_t i = 0; i < rec.losses.size(); ++i) {
      EXPECT_FALSE(std::isnan(rec.losses[i]));
      EXPECT_EQ(rec.losses[i], cpu.losses[i]) << "step " << i;
    }
    EXPECT_EQ(rec.params, cpu.params);
    // The executor counts the same memory and traffic whatever it drives.
    EXPECT_EQ(rec.stats.memoryBytes, cpu.stats.memoryBytes);
    EXPECT_EQ(rec.stats.collectiveCallsPerStep,
              cpu.stats.collectiveCallsPerStep);
    EXPECT_EQ(rec.stats.collectiveBytesPerStep,
              cpu.stats.collectiveBytesPerStep);
    EXPECT_EQ(rec.stats.collectiveSentBytesPerStep,
              cpu.stats.collectiveSentBytesPerStep);
    EXPECT_EQ(rec.stats.activationPeakBytes, cpu.stats.activationPeakBytes);
    EXPECT_EQ(rec.stats.microbatchesPeak, cpu.stats.microbatchesPeak);

    // Everything went through the backend, and nothing leaked.
    const std::vector<KernelCount> kernels = kernelInstructions(c.body);
    ASSERT_EQ(logs.size(), kernels.size()) << "one backend per rank";
    for (size_t r = 0; r < logs.size(); ++r) {
      const Log &log = *logs[r];
      int64_t calls = 0, bound = 0;
      for (const auto &[name, n] : log.kernelCalls)
        calls += n;
      for (const auto &[name, n] : log.kernelsBound)
        bound += n;
      EXPECT_EQ(bound, kernels[r].bound) << "rank " << r;
      EXPECT_EQ(calls, kernels[r].callsPerStep * kSteps) << "rank " << r;
      EXPECT_GT(log.allocations, 0);
      EXPECT_EQ(log.deallocations, log.allocations) << "rank " << r;
      EXPECT_EQ(log.liveBytes, 0u);
      // What the executor counted: the slots (per category) from the
      // backend, plus staging (a packing buffer from the backend, and the
      // communicators' scratch). The counts are maxima over ranks: their
      // sum bounds a rank's peak from below where every rank runs the same
      // program (pipeline stages differ).
      uint64_t slots = 0;
      for (const auto &[category, bytes] : rec.stats.memoryBytes)
        if (category != "staging" && category != "workspace" &&
            category != "total")
          slots += bytes;
      if (parseArtifact(c.body, "t.dtc").programs.size() == 1) {
        EXPECT_GE(log.peakBytes, slots) << "rank " << r;
      }
      EXPECT_LE(log.peakBytes, rec.stats.memoryBytes.at("total"))
          << "rank " << r;
      EXPECT_GT(log.copiesToHost + log.copiesFromHost, 0) << "host views copy";
    }
  }
}

TEST(Backend, CollectivesOverlapKernelsAndTheirResultsAreAwaited) {
  // Data parallelism: each gradient's all-reduce is enqueued as soon as the
  // gradient exists, and the backward pass goes on while it is pending; the
  // optimizer's update waits for it. Same bits as above prove the waits.
  dtc::test::MlpConfig dp4;
  dp4.mesh = {4};
  dp4.dpAxes = {0};
  takeLogs();
  const Outcome rec = trainOn("recording", dtc::test::mlpArtifact(dp4), 2);
  const std::vector<std::shared_ptr<Log>> logs = takeLogs();
  ASSERT_EQ(logs.size(), 4u);
  for (const auto &log : logs) {
    EXPECT_GT(log->collectives, 0);
    EXPECT_GT(log->mostPendingAtKernel, 0u)
        << "kernels never ran while a collective was pending";
  }
  const Outcome cpu = trainOn("cpu", dtc::test::mlpArtifact(dp4), 2);
  EXPECT_EQ(rec.losses, cpu.losses);
}

TEST(Backend, KernelErrorsAreTheSameOnEveryBackend) {
  dtc::test::LmConfig c;
  c.idsMax = 80; // ids beyond the vocabulary of 50
  std::string cpuErr, recErr;
  for (auto [backend, err] :
       {std::pair{"cpu", &cpuErr}, std::pair{"recording", &recErr}}) {
    LocalRunnerOptions o;
    o.backend = backend;
    std::string e;
    auto r = LocalRunner::loadJson(dtc::test::lmArtifact(c), "lm.dtc", e, o);
    ASSERT_TRUE(r) << e;
    std::vector<float> l;
    ASSERT_TRUE(r->initialize(0, e)) << e;
    bool ok = true;
    for (int i = 0; i < 20 && ok; ++i)
      ok = r->train(1, l, e);
    ASSERT_FALSE(ok) << backend << ": no step saw an id out of range";
    *err = e;
  }
  EXPECT_NE(cpuErr.find("is outside [0, 50)"), std::string::npos) << cpuErr;
  EXPECT_EQ(recErr, cpuErr);
  takeLogs();
}

// Checkpoints and token data reach device memory only through host views.
TEST(Backend, TrainerCheckpointsThroughHostViews) {
  const std::string dir = dtc::test::scratchDir("dtc-backend-test");
  dtc::test::MlpConfig tp;
  tp.mesh = {2, 2};
  tp.dpAxes = {0};
  tp.tpAxis = 1;
  TrainOptions o;
  o.artifactPath = dir + "/tp.dtc";
  std::string err;
  ASSERT_TRUE(
      writeArtifactFile(o.artifactPath, dtc::test::mlpArtifact(tp), err))
      << err;
  o.seed = 5;
  o.threads = 1;
  o.timeoutSeconds = 60;
  auto trainAll = [&](const TrainOptions &opts) {
    ThreadWorld tw(4);
    std::vector<float> losses;
    std::string error;
    std::mutex mu;
    std::vector<std::thread> ts;
    for (int r = 0; r < 4; ++r)
      ts.emplace_back([&, r] {
        try {
          Trainer t(tw.rankView(r), opts);
          t.run([&](const StepReport &s) { losses.push_back(s.loss); });
        } catch (const std::exception &e) {
          tw.abort(e.what());
          std::lock_guard<std::mutex> lock(mu);
          if (error.empty())
            error = e.what();
        }
      });
    for (auto &t : ts)
      t.join();
    EXPECT_EQ(error, "");
    return losses;
  };
  o.steps = 6;
  const std::vector<float> straight = trainAll(o);
  o.backend = "recording";
  o.steps = 3;
  o.savePath = dir + "/half.st";
  std::vector<float> resumed = trainAll(o);
  o.savePath.clear();
  o.loadPath = dir + "/half.st";
  const std::vector<float> second = trainAll(o);
  resumed.insert(resumed.end(), second.begin(), second.end());
  EXPECT_EQ(resumed, straight);
  takeLogs();
}

TEST(Backend, AKernelMissingFromTheTableIsALoadErrorAndLeaksNothing) {
  takeLogs();
  gMissingKernels = {"matmul"};
  LocalRunnerOptions o;
  o.backend = "recording";
  std::string err;
  auto r = LocalRunner::loadJson(dtc::test::mlpArtifact({}), "mlp.dtc", err, o);
  gMissingKernels.clear();
  EXPECT_FALSE(r);
  EXPECT_EQ(err, "mlp.dtc: kernel 'matmul' has no recording implementation");
  const std::vector<std::shared_ptr<Log>> logs = takeLogs();
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_GT(logs[0]->allocations, 0);
  EXPECT_EQ(logs[0]->deallocations, logs[0]->allocations);
}

TEST(BackendDeathTest, DeviceAddressesAreNotHostAddresses) {
  auto backend = makeBackend("recording", {});
  void *device = backend->allocate(64);
  EXPECT_DEATH(*static_cast<volatile char *>(device) = 1, "");
  EXPECT_THROW(toHost(reinterpret_cast<void *>(uintptr_t(4096))), Error);
  backend->deallocate(device);
  takeLogs();
}

TEST(Backend, NamesAndTheMissingCudaBackend) {
  const std::vector<std::string> names = backendNames();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0], "cpu");
  try {
    makeBackend("cuda", {});
    FAIL() << "a CUDA backend on a machine without a GPU";
  } catch (const Error &e) {
    // No CUDA backend in the build, or no GPU for it: either says so.
    EXPECT_NE(std::string(e.what()).find("; use --backend cpu"),
              std::string::npos)
        << e.what();
  }
  try {
    makeBackend("tpu", {});
    FAIL() << "an unknown backend was made";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("unknown backend 'tpu'"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

} // namespace
