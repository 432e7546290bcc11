//===- CudaCommunicatorTest.cpp - the CUDA backend's collectives
//-----------===//
//
// Every collective of the CUDA backend's DeviceCommunicator on device
// memory: staged through the host (--collectives mpi) and on the GPU
// (--collectives local) between ranks that are threads sharing the one GPU,
// and on NCCL for a group of one (NCCL needs a
// GPU per rank; a group of one still runs every NCCL call with its dtypes,
// reductions and pointers). Expected values are computed on the host.
// Skipped, with the backend's reason, without a GPU.
//
//===----------------------------------------------------------------------===//
#include "CudaDevice.h"

#include "dtc/runtime/Backend.h"
#include "dtc/runtime/Communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

namespace dtc::test {
namespace {

using rt::DType;

/// Device copies of host vectors, read back after the backend synchronised.
struct Device {
  rt::Backend &be;
  std::vector<void *> owned;
  ~Device() {
    for (void *p : owned)
      be.deallocate(p);
  }
  template <class T> void *put(const std::vector<T> &v) {
    void *p = be.allocate((v.size() * sizeof(T) + 63) / 64 * 64 + 64);
    owned.push_back(p);
    if (!v.empty())
      be.copyFromHost(p, v.data(), v.size() * sizeof(T), be.computeStream());
    be.synchronize(); // the collectives run on the communication stream
    return p;
  }
  template <class T> std::vector<T> get(const void *p, size_t n) {
    std::vector<T> v(n);
    be.synchronize();
    be.copyToHost(v.data(), p, n * sizeof(T), be.computeStream());
    return v;
  }
};

/// Rank r's collectives on a group of `n`, checked against host values.
void exerciseCollectives(rt::Backend &be, rt::DeviceCommunicator &c, int n,
                         int r) {
  Device d{be, {}};
  rt::Stream &s = be.commStream();
  rt::Traffic t;
  // All-reduce (sum, max, average) of f32, and a sum of i64.
  std::vector<float> x = {float(r + 1), float(-r), 0.5f * float(r), 3.0f};
  void *xin = d.put(x), *xout = d.put(std::vector<float>(4, -9.f));
  c.allReduce(xin, xout, 4, DType::F32, rt::ReduceOp::Sum, s, t);
  const float sumR = float(n * (n - 1) / 2);
  EXPECT_EQ(d.get<float>(xout, 4),
            (std::vector<float>{sumR + float(n), -sumR, 0.5f * sumR,
                                3.0f * float(n)}));
  c.allReduce(xin, xout, 4, DType::F32, rt::ReduceOp::Max, s, t);
  EXPECT_EQ(d.get<float>(xout, 4),
            (std::vector<float>{float(n), 0.f, 0.5f * float(n - 1), 3.f}));
  c.allReduce(xin, xout, 4, DType::F32, rt::ReduceOp::Average, s, t);
  EXPECT_FLOAT_EQ(d.get<float>(xout, 4)[0], (sumR + float(n)) / float(n));
  std::vector<int64_t> k = {int64_t(r) << 40, 7};
  void *kin = d.put(k);
  c.allReduce(kin, kin, 2, DType::I64, rt::ReduceOp::Sum, s, t); // in place
  EXPECT_EQ(d.get<int64_t>(kin, 2),
            (std::vector<int64_t>{int64_t(sumR) << 40, 7 * n}));
  // All-gather of 3 bytes per member, in member order.
  std::vector<char> g = {char('a' + r), char('A' + r), char(r)};
  void *gin = d.put(g), *gout = d.put(std::vector<char>(size_t(3 * n), 0));
  c.allGather(gin, gout, 3, s, t);
  std::vector<char> gathered = d.get<char>(gout, size_t(3 * n));
  for (int m = 0; m < n; ++m) {
    EXPECT_EQ(gathered[size_t(3 * m)], char('a' + m));
    EXPECT_EQ(gathered[size_t(3 * m + 2)], char(m));
  }
  // Reduce-scatter: piece j of every member summed, member r keeps piece r.
  std::vector<float> rs(size_t(2 * n));
  for (int j = 0; j < 2 * n; ++j)
    rs[size_t(j)] = float(100 * r + j);
  void *rsin = d.put(rs), *rsout = d.put(std::vector<float>(2, 0.f));
  c.reduceScatter(rsin, rsout, 2, DType::F32, rt::ReduceOp::Sum, s, t);
  EXPECT_EQ(d.get<float>(rsout, 2),
            (std::vector<float>{100.f * sumR + float(n * 2 * r),
                                100.f * sumR + float(n * (2 * r + 1))}));
  // All-to-all: piece j of member r goes to member j.
  std::vector<int32_t> a(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j)
    a[size_t(j)] = 10 * r + j;
  void *ain = d.put(a), *aout = d.put(std::vector<int32_t>(size_t(n), -1));
  c.allToAll(ain, aout, sizeof(int32_t), s, t);
  std::vector<int32_t> got = d.get<int32_t>(aout, size_t(n));
  for (int j = 0; j < n; ++j)
    EXPECT_EQ(got[size_t(j)], 10 * j + r);
  // Point to point around a ring (pipelines' sends never wait).
  if (n > 1) {
    std::vector<float> msg = {float(r), 2.f * float(r)};
    void *send = d.put(msg), *recv = d.put(std::vector<float>(2, 0.f));
    c.send(send, sizeof(float) * 2, (r + 1) % n, 5, s, t);
    c.recv(recv, sizeof(float) * 2, (r + n - 1) % n, 5, s, t);
    be.synchronize();
    c.flushSends();
    const float from = float((r + n - 1) % n);
    EXPECT_EQ(d.get<float>(recv, 2), (std::vector<float>{from, 2.f * from}));
  }
}

/// Three ranks as threads, each with its own backend `name`.
void collectivesOnThreads(const std::string &name,
                          const std::string &collectives) {
  const int n = 3;
  rt::ThreadWorld tw(n, /*timeoutSeconds=*/60);
  std::vector<std::string> errors(n);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      try {
        rt::BackendOptions o;
        o.rank = r;
        o.ranksOnNode = n;
        o.collectives = collectives;
        std::unique_ptr<rt::Backend> be = rt::makeBackend(name, o);
        be->attachThread();
        std::unique_ptr<rt::DeviceCommunicator> c =
            be->createCommunicator(tw.rankView(r).split(0, r));
        c->reserveStaging(4096); // as the executor does at load
        exerciseCollectives(*be, *c, n, r);
      } catch (const std::exception &e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (std::thread &t : ranks)
    t.join();
  for (const std::string &e : errors)
    EXPECT_EQ(e, "");
}

TEST(CudaCommunicator, StagedThroughTheHostBetweenThreads) {
  std::string why;
  if (!cudaDeviceAvailable(why))
    GTEST_SKIP() << why;
  collectivesOnThreads("cuda", "mpi");
}

/// --collectives local: the all-reduces by a kernel over the three ranks'
/// device buffers (ordered by events), the rest staged as with mpi.
TEST(CudaCommunicator, LocalAllReducesOnTheGpuBetweenThreads) {
  std::string why;
  if (!cudaDeviceAvailable(why))
    GTEST_SKIP() << why;
  collectivesOnThreads("cuda", "local");
}

/// The same checks on the CPU backend (runs everywhere: it holds the
/// expectations themselves to a backend that the rest of the suite checks).
TEST(CudaCommunicator, SameChecksPassOnTheCpuBackend) {
  collectivesOnThreads("cpu", "");
}

TEST(CudaCommunicator, NcclGroupOfOne) {
  std::string why;
  if (!cudaDeviceAvailable(why))
    GTEST_SKIP() << why;
  std::unique_ptr<rt::World> world = rt::makeLocalWorld();
  rt::BackendOptions o;
  o.collectives = "nccl";
  std::unique_ptr<rt::Backend> be = rt::makeBackend("cuda", o);
  be->attachThread();
  std::unique_ptr<rt::DeviceCommunicator> c =
      be->createCommunicator(world->split(0, 0));
  exerciseCollectives(*be, *c, 1, 0);
}

TEST(CudaCommunicator, NcclRefusesRanksSharingAGpu) {
  std::string why;
  if (!cudaDeviceAvailable(why))
    GTEST_SKIP() << why;
  rt::BackendOptions o;
  o.ranksOnNode = 64;
  try {
    rt::makeBackend("cuda", o);
    FAIL() << "64 ranks were given NCCL on this node";
  } catch (const rt::Error &e) {
    EXPECT_NE(std::string(e.what()).find("use --collectives mpi"),
              std::string::npos)
        << e.what();
  }
}

} // namespace
} // namespace dtc::test
