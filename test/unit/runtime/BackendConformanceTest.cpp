//===- BackendConformanceTest.cpp - what every registered backend does ----===//
//
// One suite, instantiated for every name the registry knows (backendNames():
// cpu, cuda where built, null, and the test-only "recording" of
// BackendTest.cpp), checks the contract of include/dtc/runtime/Backend.h as
// docs/backends.md states it: memory, copies, kernel binding, events and
// synchronisation, communicators on a group of one and of two, traffic,
// threads, errors, and the executor driving the backend as it drives cpu.
// A backend this machine cannot run (cuda without a GPU) is skipped with
// checkBackendAvailable's reason. What a backend does not claim (null
// computes no kernels) is checked the other way round.
//
//===----------------------------------------------------------------------===//
#include "TestArtifacts.h"

#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/Backend.h"
#include "dtc/runtime/Executor.h"
#include "dtc/runtime/LocalRunner.h"

#include "null/NullBackend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>

using namespace dtc::rt;
using dtc::test::json;
namespace kernels = dtc::kernels;

namespace {

/// What a backend claims beyond the interface.
struct Claims {
  /// Its kernels compute (null's only count their calls).
  bool computes = true;
  /// Its kernels are the CPU's, so results equal cpu's bit for bit.
  bool cpuKernels = false;
};

Claims claimsOf(const std::string &name) {
  Claims c;
  c.computes = name != "null";
  c.cpuKernels = name == "cpu" || name == "recording";
  return c;
}

class BackendConformance : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    try {
      checkBackendAvailable(GetParam());
    } catch (const Error &e) {
      GTEST_SKIP() << e.what();
    }
  }
  std::unique_ptr<Backend> make(BackendOptions o = {}) {
    return makeBackend(GetParam(), o);
  }
  Claims claims() const { return claimsOf(GetParam()); }
};

/// Device memory as the host sees it (through the backend's copies).
std::vector<char> download(Backend &be, const void *device, size_t bytes) {
  std::vector<char> host(bytes);
  be.copyToHost(host.data(), device, bytes, be.computeStream());
  return host;
}

void upload(Backend &be, void *device, const std::vector<char> &host) {
  be.copyFromHost(device, host.data(), host.size(), be.computeStream());
}

std::vector<char> pattern(size_t bytes, int seed) {
  std::vector<char> v(bytes);
  for (size_t i = 0; i < bytes; ++i)
    v[i] = char((i * 131 + size_t(seed) * 17) & 0xff);
  return v;
}

template <class T> std::vector<char> bytesOf(const std::vector<T> &v) {
  std::vector<char> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <class T> std::vector<T> as(const std::vector<char> &b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

/// An operand of a kernel bound by hand.
kernels::TensorArg operand(void *device, const Shape &shape) {
  kernels::TensorArg t;
  t.dtype = DType::F32;
  t.shape = shape;
  t.data = device;
  t.numel = numel(shape);
  return t;
}

// ---- names, memory, copies
// ----------------------------------------------------------

TEST_P(BackendConformance, NamesItselfAndDescribesItselfInOneLine) {
  auto be = make();
  EXPECT_EQ(be->name(), GetParam());
  const std::string d = be->description();
  EXPECT_EQ(d.rfind(GetParam() + ": ", 0), 0u) << d;
  EXPECT_EQ(d.find('\n'), std::string::npos) << d;
  for (const auto &[key, value] : be->properties())
    EXPECT_FALSE(key.empty()) << value;
}

TEST_P(BackendConformance, AllocationsAreZeroedAlignedAndDistinct) {
  auto be = make();
  std::vector<void *> mem;
  for (size_t bytes : {size_t(64), size_t(4096), size_t(64) * 1000 + 64}) {
    void *p = be->allocate(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    for (void *q : mem)
      EXPECT_NE(p, q);
    const std::vector<char> host = download(*be, p, bytes);
    EXPECT_EQ(std::count(host.begin(), host.end(), 0), ptrdiff_t(bytes));
    mem.push_back(p);
  }
  for (void *p : mem)
    be->deallocate(p);
}

TEST_P(BackendConformance, TooLargeAnAllocationIsAnError) {
  auto be = make();
  try {
    void *p = be->allocate(size_t(1) << 60);
    be->deallocate(p);
    FAIL() << "2^60 bytes were allocated";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("out of"), std::string::npos)
        << e.what();
  }
}

TEST_P(BackendConformance, UploadAndDownloadRoundTripAtOffsets) {
  auto be = make();
  char *p = static_cast<char *>(be->allocate(1024));
  const std::vector<char> whole = pattern(1024, 1), part = pattern(100, 2);
  upload(*be, p, whole);
  upload(*be, p + 128, part); // the executor adds byte offsets, nothing else
  std::vector<char> expected = whole;
  std::copy(part.begin(), part.end(), expected.begin() + 128);
  EXPECT_EQ(download(*be, p, 1024), expected);
  EXPECT_EQ(download(*be, p + 128, 100), part);
  if (be->hostAddressable()) {
    EXPECT_EQ(std::memcmp(p, expected.data(), 1024), 0)
        << "a host-addressable backend's memory is the buffer itself";
  }
  be->deallocate(p);
}

TEST_P(BackendConformance, Copy2DMovesRowsBetweenPitches) {
  auto be = make();
  // 3 rows of 16 bytes out of rows of 48 (offset 16) into rows of 16.
  char *src = static_cast<char *>(be->allocate(192));
  char *dst = static_cast<char *>(be->allocate(64));
  const std::vector<char> in = pattern(144, 3);
  upload(*be, src, in);
  be->copy2D(dst, 16, src + 16, 48, 16, 3, be->computeStream());
  be->synchronize();
  const std::vector<char> out = download(*be, dst, 48);
  for (size_t r = 0; r < 3; ++r)
    for (size_t i = 0; i < 16; ++i)
      EXPECT_EQ(out[r * 16 + i], in[16 + r * 48 + i]) << r << " " << i;
  be->deallocate(src);
  be->deallocate(dst);
}

// ---- kernels
// ------------------------------------------------------------------------

TEST_P(BackendConformance, AKernelOutsideTheTableIsNotBound) {
  auto be = make();
  void *p = be->allocate(64);
  kernels::KernelArgs args;
  args.in = {operand(p, {4})};
  args.out = {operand(p, {4})};
  const json attrs = json::object();
  args.attrs = &attrs;
  EXPECT_EQ(be->bindKernel("no_such_kernel", args), nullptr);
  be->deallocate(p);
}

TEST_P(BackendConformance, AddAndBroadcastAreBoundAndComputeWhereClaimed) {
  // The pipeline's accumulation (add, in place) and fill (broadcast of a
  // one-element device scalar) are every backend's own kernels.
  auto be = make();
  void *a = be->allocate(64), *b = be->allocate(64), *s = be->allocate(64);
  upload(*be, a, bytesOf(std::vector<float>{1, 2, 3, 4}));
  upload(*be, b, bytesOf(std::vector<float>{10, 20, 30, 40}));
  upload(*be, s, bytesOf(std::vector<float>{7}));
  const json attrs = json::object();
  kernels::KernelArgs add;
  add.in = {operand(a, {4}), operand(b, {4})};
  add.out = {operand(a, {4})};
  add.attrs = &attrs;
  auto addKernel = be->bindKernel("add", add);
  ASSERT_NE(addKernel, nullptr);
  kernels::KernelArgs fill;
  fill.in = {operand(s, {})};
  fill.in[0].numel = 1;
  fill.out = {operand(b, {4})};
  fill.attrs = &attrs;
  auto fillKernel = be->bindKernel("broadcast", fill);
  ASSERT_NE(fillKernel, nullptr);
  addKernel->enqueue(add, be->computeStream());
  fillKernel->enqueue(fill, be->computeStream());
  be->synchronize();
  const std::vector<float> sum = as<float>(download(*be, a, 16)),
                           filled = as<float>(download(*be, b, 16));
  if (claims().computes) {
    EXPECT_EQ(sum, (std::vector<float>{11, 22, 33, 44}));
    EXPECT_EQ(filled, (std::vector<float>{7, 7, 7, 7}));
  } else {
    EXPECT_EQ(sum, (std::vector<float>{1, 2, 3, 4})) << "outputs keep theirs";
    EXPECT_EQ(filled, (std::vector<float>{10, 20, 30, 40}));
  }
  for (void *p : {a, b, s})
    be->deallocate(p);
}

// ---- streams, events, threads
// -------------------------------------------------------

TEST_P(BackendConformance, EventsTimeTheWorkBetweenThemAndCanBeReused) {
  auto be = make();
  void *p = be->allocate(4096);
  auto start = be->createEvent(), end = be->createEvent();
  for (int round = 0; round < 2; ++round) {
    be->record(*start, be->computeStream());
    be->copyFromHost(p, pattern(4096, round).data(), 4096, be->computeStream());
    be->record(*end, be->computeStream());
    // Later work on the communication stream starts after `end`.
    be->wait(be->commStream(), *end);
    be->synchronize();
    const double seconds = be->elapsedSeconds(*start, *end);
    EXPECT_GE(seconds, 0);
    EXPECT_LT(seconds, 60);
  }
  be->deallocate(p);
}

TEST_P(BackendConformance, ThreadsAreTheOptionsUntilSet) {
  BackendOptions o;
  o.threads = 3;
  auto be = make(o);
  EXPECT_EQ(be->threads(), 3);
  be->setThreads(2);
  EXPECT_EQ(be->threads(), 2);
  be->attachThread();
}

// ---- communicators
// ------------------------------------------------------------------

TEST_P(BackendConformance, CollectivesOnAGroupOfOneCopyAndMoveNothing) {
  auto be = make();
  std::unique_ptr<World> world = makeLocalWorld();
  auto comm = be->createCommunicator(world->split(0, 0));
  ASSERT_EQ(comm->size(), 1);
  ASSERT_EQ(comm->rank(), 0);
  const std::vector<float> x = {1, -2, 3.5f, 4, 5, 6, 7, 8};
  void *in = be->allocate(64), *out = be->allocate(64);
  upload(*be, in, bytesOf(x));
  Stream &st = be->commStream();
  Traffic t;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Max}) {
    upload(*be, out, std::vector<char>(32, 0));
    comm->allReduce(in, out, 8, DType::F32, op, st, t);
    be->synchronize();
    EXPECT_EQ(as<float>(download(*be, out, 32)), x);
  }
  auto expectCopied = [&](const char *what) {
    be->synchronize();
    EXPECT_EQ(as<float>(download(*be, out, 32)), x) << what;
    upload(*be, out, std::vector<char>(32, 0));
  };
  comm->allGather(in, out, 32, st, t);
  expectCopied("all_gather");
  comm->reduceScatter(in, out, 8, DType::F32, ReduceOp::Sum, st, t);
  expectCopied("reduce_scatter");
  comm->allToAll(in, out, 32, st, t);
  expectCopied("all_to_all");
  comm->flushSends();
  EXPECT_EQ(t.sent, 0u);
  EXPECT_EQ(t.received, 0u);
  be->deallocate(in);
  be->deallocate(out);
}

/// Runs `f(rank, backend, communicator)` on two ranks as threads, each with
/// its own backend and a communicator over both; collectives through host
/// memory where the backend has a choice ("mpi": two ranks may share a GPU).
void onTwoRanks(
    const std::string &name,
    const std::function<void(int, Backend &, DeviceCommunicator &)> &f) {
  ThreadWorld threads(2, /*timeoutSeconds=*/60);
  std::string errors[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        BackendOptions o;
        o.rank = r;
        o.ranksOnNode = 2;
        o.collectives = "mpi";
        auto be = makeBackend(name, o);
        World &w = threads.rankView(r);
        auto comm = be->createCommunicator(w.split(0, r));
        be->attachThread();
        f(r, *be, *comm);
      } catch (const std::exception &e) {
        errors[r] = e.what();
        threads.abort(e.what());
      }
    });
  for (std::thread &t : ranks)
    t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST_P(BackendConformance, TwoRanksReduceAndCountWhatTheyMove) {
  constexpr size_t kCount = 1024;
  Traffic traffic[2];
  std::vector<float> results[2];
  uint64_t scratchBefore[2] = {}, scratchAfter[2] = {};
  onTwoRanks(GetParam(), [&](int r, Backend &be, DeviceCommunicator &comm) {
    // Reserved at load, so nothing grows while steps run.
    comm.reserveScratch(Communicator::allReduceScratch(kCount, 4, 2));
    scratchBefore[r] = comm.scratchBytes();
    void *buf = be.allocate(kCount * 4);
    upload(be, buf, bytesOf(std::vector<float>(kCount, float(r + 1))));
    comm.allReduce(buf, buf, kCount, DType::F32, ReduceOp::Sum, be.commStream(),
                   traffic[r]);
    be.synchronize();
    results[r] = as<float>(download(be, buf, kCount * 4));
    scratchAfter[r] = comm.scratchBytes();
    be.deallocate(buf);
  });
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(results[r], std::vector<float>(kCount, 3.0f));
    EXPECT_GT(traffic[r].sent, 0u);
    EXPECT_EQ(traffic[r].sent, traffic[r].received);
    EXPECT_EQ(scratchAfter[r], scratchBefore[r]);
  }
}

TEST_P(BackendConformance, TwoRanksShiftTheirBlocks) {
  constexpr size_t kBytes = 4096;
  std::vector<char> received[2];
  Traffic traffic[2];
  onTwoRanks(GetParam(), [&](int r, Backend &be, DeviceCommunicator &comm) {
    void *in = be.allocate(kBytes), *out = be.allocate(kBytes);
    upload(be, in, pattern(kBytes, 10 + r));
    comm.shift(in, out, kBytes, 1, be.commStream(), traffic[r]);
    be.synchronize();
    received[r] = download(be, out, kBytes);
    be.deallocate(in);
    be.deallocate(out);
  });
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(received[r], pattern(kBytes, 10 + (1 - r)));
    EXPECT_EQ(traffic[r].sent, kBytes);
    EXPECT_EQ(traffic[r].received, kBytes);
  }
}

TEST_P(BackendConformance, PipelineMessagesDoNotWaitForTheReceiver) {
  constexpr size_t kBytes = 4096;
  std::vector<char> received;
  Traffic traffic[2];
  onTwoRanks(GetParam(), [&](int r, Backend &be, DeviceCommunicator &comm) {
    void *buf = be.allocate(kBytes);
    if (r == 0) {
      upload(be, buf, pattern(kBytes, 5));
      // Two sends before the receiver takes either: neither may block.
      for (int tag : {3, 4})
        comm.send(buf, kBytes, 1, tag, be.commStream(), traffic[0]);
      be.synchronize();
      comm.flushSends();
    } else {
      for (int tag : {3, 4})
        comm.recv(buf, kBytes, 0, tag, be.commStream(), traffic[1]);
      be.synchronize();
      received = download(be, buf, kBytes);
    }
    be.deallocate(buf);
  });
  EXPECT_EQ(received, pattern(kBytes, 5));
  EXPECT_GE(traffic[0].sent, 2 * kBytes);
  EXPECT_GE(traffic[1].received, 2 * kBytes);
}

// ---- the executor on the backend
// ---------------------------------------------------------

struct Trained {
  std::vector<float> losses;
  LocalRunStats stats;
};

Trained train(const std::string &backend, const json &body, int steps) {
  LocalRunnerOptions o;
  o.backend = backend;
  o.collectives = "mpi";
  o.timeoutSeconds = 60;
  std::string err;
  auto r = LocalRunner::loadBytes(encodeArtifact(body), "t.dtc", err, o);
  Trained out;
  if (!r) {
    ADD_FAILURE() << err;
    return out;
  }
  EXPECT_TRUE(r->initialize(7, err)) << err;
  EXPECT_TRUE(r->train(steps, out.losses, err)) << err;
  out.stats = r->stats();
  return out;
}

/// The executor's counts depend on the artifact, not on the backend: slot
/// memory per category, collectives and their traffic (host-staged), the
/// pipeline's activation peak and micro-batches in flight.
void expectSameCounts(const LocalRunStats &got, const LocalRunStats &cpu) {
  for (const auto &[kind, bytes] : cpu.memoryBytes) {
    // The backend's own memory (kernel workspace, conversion copies) differs.
    if (kind != "workspace" && kind != "staging" && kind != "total") {
      EXPECT_EQ(got.memoryBytes.at(kind), bytes) << kind;
    }
  }
  EXPECT_EQ(got.collectiveCallsPerStep, cpu.collectiveCallsPerStep);
  EXPECT_EQ(got.collectiveBytesPerStep, cpu.collectiveBytesPerStep);
  EXPECT_EQ(got.collectiveSentBytesPerStep, cpu.collectiveSentBytesPerStep);
  EXPECT_EQ(got.stageOfRank, cpu.stageOfRank);
  EXPECT_EQ(got.activationPeakBytes, cpu.activationPeakBytes);
  EXPECT_EQ(got.microbatchesPeak, cpu.microbatchesPeak);
}

TEST_P(BackendConformance, TheExecutorCountsWhatItCountsOnCpu) {
  dtc::test::MlpConfig dp2;
  dp2.mesh = {2};
  dp2.dpAxes = {0};
  const std::pair<const char *, json> artifacts[] = {
      {"mlp, one rank", dtc::test::mlpArtifact({})},
      {"mlp, dp 2", dtc::test::mlpArtifact(dp2)},
      {"every collective kind", dtc::test::collectivesArtifact()},
      {"pipeline", dtc::test::pipelineArtifact()}};
  for (const auto &[label, body] : artifacts) {
    SCOPED_TRACE(label);
    const Trained cpu = train("cpu", body, 2), got = train(GetParam(), body, 2);
    ASSERT_EQ(got.losses.size(), 2u);
    expectSameCounts(got.stats, cpu.stats);
    if (claims().cpuKernels) {
      EXPECT_EQ(got.losses, cpu.losses);
    } else if (claims().computes) {
      for (size_t k = 0; k < cpu.losses.size(); ++k)
        EXPECT_NEAR(got.losses[k], cpu.losses[k],
                    1e-4 * std::fabs(cpu.losses[k]) + 1e-6);
    }
  }
}

std::string backendName(const ::testing::TestParamInfo<std::string> &info) {
  return info.param;
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, BackendConformance,
                         ::testing::ValuesIn(backendNames()), backendName);

// ---- the null backend's own claims
// ----------------------------------------------------------

TEST(NullBackend, CountsEveryCallAndComputesNothing) {
  std::unique_ptr<World> world = makeLocalWorld();
  const Artifact a = parseArtifact(dtc::test::mlpArtifact({}), "t.dtc");
  RankExecutor exec(a, *world, makeBackend("null", {}));
  auto &null = dynamic_cast<NullBackend &>(exec.backend());
  int64_t kernelInstructions = 0;
  for (const InstrDecl &ins : exec.program().instructions)
    kernelInstructions += !ins.isCollective && ins.op != "shard_offset";
  int64_t bound = 0;
  for (const auto &[name, n] : null.counts().kernelsBound)
    bound += n;
  EXPECT_EQ(bound, kernelInstructions);
  exec.initPersistent(7);
  exec.fillSyntheticInputs(7, 0);
  for (int step = 0; step < 3; ++step)
    ASSERT_EQ(exec.run(), "");
  int64_t calls = 0;
  for (const auto &[name, n] : null.counts().kernelCalls)
    calls += n;
  EXPECT_EQ(calls, 3 * kernelInstructions);
  EXPECT_EQ(exec.loss(), 0.0f) << "no kernel wrote the loss";
  EXPECT_EQ(null.counts().allocations, int64_t(exec.program().slots.size()));
  EXPECT_EQ(null.counts().deallocations, 0);
  EXPECT_GT(null.counts().records, 0);
  EXPECT_GT(null.counts().synchronizations, 0);
}

TEST(NullBackend, FreesWhatItAllocated) {
  auto be = makeBackend("null", {});
  auto &null = dynamic_cast<NullBackend &>(*be);
  void *p = be->allocate(128), *q = be->allocate(64);
  EXPECT_EQ(null.counts().liveBytes, 192u);
  be->deallocate(p);
  EXPECT_EQ(null.counts().liveBytes, 64u);
  EXPECT_EQ(null.counts().peakBytes, 192u);
  be->deallocate(q);
  EXPECT_EQ(null.counts().deallocations, 2);
}

} // namespace
