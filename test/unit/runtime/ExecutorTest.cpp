//===- ExecutorTest.cpp - collectives, multi-rank numerics, LocalRunner ---===//
//
// Multi-rank artifacts run in process: LocalRunner plays each rank on a
// thread with a ThreadWorld communicator.
//
//===----------------------------------------------------------------------===//
#include "TestArtifacts.h"

#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/Communicator.h"
#include "dtc/runtime/LocalRunner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

using namespace dtc::rt;
using dtc::test::json;

namespace {

std::unique_ptr<LocalRunner> load(const json &body,
                                  const std::string &label = "t.dtc") {
  std::string err;
  auto r = LocalRunner::loadBytes(encodeArtifact(body), label, err);
  EXPECT_TRUE(r) << err;
  return r;
}

std::vector<float> losses(LocalRunner &r, int steps, uint64_t seed = 0) {
  std::string err;
  EXPECT_TRUE(r.initialize(seed, err)) << err;
  std::vector<float> l;
  EXPECT_TRUE(r.train(steps, l, err)) << err;
  return l;
}

std::vector<float> tensor(LocalRunner &r, const std::string &name) {
  std::vector<float> v;
  std::string err;
  EXPECT_TRUE(r.getTensor(name, v, err)) << err;
  return v;
}

void expectClose(const std::vector<float> &a, const std::vector<float> &b,
                 double tol, const std::string &what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], tol * (1 + std::fabs(b[i])))
        << what << " [" << i << "]";
}

/// Loads `body` and runs one step on synthetic inputs (seed 5).
std::unique_ptr<LocalRunner> loadAndStep(const json &body) {
  auto r = load(body);
  if (!r)
    return r;
  std::string err;
  EXPECT_TRUE(r->initialize(5, err)) << err;
  EXPECT_TRUE(r->fillSyntheticInputs(0, err)) << err;
  EXPECT_TRUE(r->runStep(err)) << err;
  return r;
}

TEST(Collectives, EveryKindOnSeveralCommunicators) {
  auto r = loadAndStep(dtc::test::collectivesArtifact());
  ASSERT_EQ(r->ranks(), 4);
  std::string err;
  const std::vector<float> X = tensor(*r, "x");
  ASSERT_EQ(X.size(), 24u);
  double sum = 0;
  for (float x : X)
    sum += x;
  float loss;
  ASSERT_TRUE(r->loss(loss, err));
  EXPECT_NEAR(loss, sum, 1e-5);
  for (const auto &[name, want] : dtc::test::collectivesExpected(X))
    expectClose(tensor(*r, name), want, 1e-6, name);
  // Counters: calls and bytes of one step.
  LocalRunStats s = r->stats();
  EXPECT_EQ(s.collectiveCallsPerStep["all_reduce"], 5u);
  EXPECT_EQ(s.collectiveCallsPerStep["all_gather"], 2u);
  EXPECT_EQ(s.collectiveCallsPerStep["reduce_scatter"], 2u);
  EXPECT_EQ(s.collectiveCallsPerStep["all_to_all"], 2u);
  EXPECT_EQ(s.collectiveCallsPerStep["all_slice"], 1u);
  EXPECT_EQ(s.collectiveCallsPerStep["shift"], 2u);
  // shift: each sends its [2, 3] floats once per call.
  EXPECT_EQ(s.collectiveBytesPerStep["shift"], 48u);
  // all_gather D: out [4,3] + [2,6] floats = 96 bytes.
  EXPECT_EQ(s.collectiveBytesPerStep["all_gather"], 96u);
}

// A bucket of gathers and one of reduce-scatters, along different axes:
// each member gets its own result, as when it runs alone, from one
// collective per bucket.
TEST(Collectives, BucketsOfGathersAndReduceScatters) {
  for (bool bucketed : {false, true}) {
    SCOPED_TRACE(bucketed ? "bucketed" : "one collective each");
    auto r = loadAndStep(dtc::test::bucketsArtifact(bucketed));
    const std::vector<float> X = tensor(*r, "x");
    ASSERT_EQ(X.size(), 24u);
    std::map<std::string, std::vector<float>> want =
        dtc::test::collectivesExpected(X);
    // ag0 on rank (c0, c1): the pieces of (c0, 0) and (c0, 1) stacked.
    std::vector<float> &ag0 = want["ag0"];
    for (int rank = 0; rank < 4; ++rank)
      for (int c1 = 0; c1 < 2; ++c1)
        for (int64_t i = 0; i < 2; ++i)
          for (int64_t j = 0; j < 3; ++j)
            ag0.push_back(X[size_t((2 * (rank / 2) + i) * 6 + 3 * c1 + j)]);
    for (const char *name : {"xc", "ag0", "rs", "rs0"})
      expectClose(tensor(*r, name), want[name], 1e-6, name);
    LocalRunStats s = r->stats();
    EXPECT_EQ(s.collectiveCallsPerStep["all_gather"], bucketed ? 1u : 2u);
    EXPECT_EQ(s.collectiveCallsPerStep["reduce_scatter"], bucketed ? 1u : 2u);
    // The bytes of the larger side, the same either way: [2,6] + [4,3].
    EXPECT_EQ(s.collectiveBytesPerStep["all_gather"], 96u);
    EXPECT_EQ(s.collectiveBytesPerStep["reduce_scatter"], 96u);
  }
}

// The ring and pairwise algorithms on n threads: exact results, and the
// bytes each member counts are what the algorithm sends (all-reduce: every
// chunk but (r+1)%n, then every chunk but (r+2)%n; the others n-1 pieces).
TEST(Collectives, RingAlgorithmsAndTheirCountedBytes) {
  for (int n : {1, 2, 3, 4}) {
    for (size_t count : {size_t(1), size_t(5), size_t(7), size_t(64)}) {
      SCOPED_TRACE("n=" + std::to_string(n) +
                   " count=" + std::to_string(count));
      ThreadWorld tw(n);
      const size_t ranks = size_t(n);
      std::vector<std::vector<float>> sum(ranks), mx(ranks), gathered(ranks),
          scattered(ranks), exchanged(ranks);
      std::vector<uint64_t> sent(ranks), received(ranks);
      auto input = [&](int r, size_t i) {
        return float(r * 1000 + int(i)) * 0.5f;
      };
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
          Communicator &c = tw.rankView(r).world();
          std::vector<float> in(count);
          for (size_t i = 0; i < count; ++i)
            in[i] = input(r, i);
          sum[size_t(r)].resize(count);
          c.allReduce(in.data(), sum[size_t(r)].data(), count, DType::F32,
                      ReduceOp::Sum);
          mx[size_t(r)] = in;
          c.allReduce(mx[size_t(r)].data(), mx[size_t(r)].data(), count,
                      DType::F32, ReduceOp::Max);
          gathered[size_t(r)].resize(count * size_t(n));
          c.allGather(in.data(), gathered[size_t(r)].data(), count * 4);
          std::vector<float> pieces(count * size_t(n));
          for (size_t i = 0; i < pieces.size(); ++i)
            pieces[i] = input(r, i);
          scattered[size_t(r)].resize(count);
          c.reduceScatter(pieces.data(), scattered[size_t(r)].data(), count,
                          DType::F32, ReduceOp::Sum);
          exchanged[size_t(r)].resize(count * size_t(n));
          c.allToAll(pieces.data(), exchanged[size_t(r)].data(), count * 4);
          sent[size_t(r)] = c.bytesSent();
          received[size_t(r)] = c.bytesReceived();
        });
      for (auto &t : threads)
        t.join();
      auto chunk = [&](int j) {
        return count / size_t(n) + (size_t(j % n) < count % size_t(n));
      };
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) {
          float s = 0, m = -1e30f;
          for (int q = 0; q < n; ++q) {
            s += input(q, i);
            m = std::max(m, input(q, i));
          }
          EXPECT_NEAR(sum[size_t(r)][i], s, 1e-3f);
          EXPECT_EQ(mx[size_t(r)][i], m);
          for (int q = 0; q < n; ++q) {
            EXPECT_EQ(gathered[size_t(r)][size_t(q) * count + i], input(q, i));
            EXPECT_EQ(exchanged[size_t(r)][size_t(q) * count + i],
                      input(q, size_t(r) * count + i));
          }
          float piece = 0;
          for (int q = 0; q < n; ++q)
            piece += input(q, size_t(r) * count + i);
          EXPECT_NEAR(scattered[size_t(r)][i], piece, 1e-3f);
        }
        // Two all-reduces, then gather, reduce-scatter, all-to-all.
        // ... and receives every chunk but r, then every chunk but r+1.
        uint64_t ringSent =
            n == 1 ? 0 : 2 * count - chunk(r + 1) - chunk(r + 2);
        uint64_t ringReceived =
            n == 1 ? 0 : 2 * count - chunk(r) - chunk(r + 1);
        uint64_t others = 3 * uint64_t(n - 1) * count;
        EXPECT_EQ(sent[size_t(r)], 4 * (2 * ringSent + others)) << "rank " << r;
        EXPECT_EQ(received[size_t(r)], 4 * (2 * ringReceived + others))
            << "rank " << r;
      }
    }
  }
}

json mlp(std::vector<int64_t> mesh, std::vector<int> dp, int tp = -1,
         std::string opt = "adam") {
  dtc::test::MlpConfig c;
  c.mesh = mesh;
  c.dpAxes = dp;
  c.tpAxis = tp;
  c.optimizer = opt;
  return dtc::test::mlpArtifact(c);
}

/// The data-parallel gradients' all-reduces of mlp() (the last three) as
/// one gradient bucket.
json bucketed(json body) {
  std::vector<json *> reduces;
  for (json &i : body["programs"][0]["instructions"])
    if (i["op"] == "all_reduce")
      reduces.push_back(&i);
  for (size_t k = reduces.size() - 3; k < reduces.size(); ++k)
    (*reduces[k])["attrs"]["bucket"] = 0;
  return body;
}

// Every mesh and sharding trains the same numbers as one device.
TEST(MultiRank, MlpLossesAndParamsMatchOneDevice) {
  for (const std::string opt : {"adam", "adamw", "sgd"}) {
    auto one = load(mlp({1}, {}, -1, opt));
    const std::vector<float> ref = losses(*one, 6, 11);
    struct Variant {
      const char *name;
      json body;
    };
    const std::vector<Variant> variants = {
        {"dp2", mlp({2}, {0}, -1, opt)},
        {"dp4 over a 2x2 mesh", mlp({2, 2}, {0, 1}, -1, opt)},
        {"dp2 x tp2", mlp({2, 2}, {0}, 1, opt)},
        {"tp2 x dp2 (tp outer)", mlp({2, 2}, {1}, 0, opt)},
        {"tp4", mlp({4}, {}, 0, opt)},
        {"dp2 x tp2, the gradients in one bucket",
         bucketed(mlp({2, 2}, {0}, 1, opt))},
        {"dp4, the gradients in one bucket", bucketed(mlp({4}, {0}, -1, opt))},
    };
    for (const Variant &v : variants) {
      auto r = load(v.body);
      expectClose(losses(*r, 6, 11), ref, 2e-5, opt + " " + v.name + " losses");
      for (const char *p : {"w1", "b1", "w2"})
        expectClose(tensor(*r, p), tensor(*one, p), 2e-5,
                    opt + " " + v.name + " " + p);
    }
  }
}

TEST(MultiRank, LmMatchesOneDevice) {
  dtc::test::LmConfig c;
  auto one = load(dtc::test::lmArtifact(c));
  const std::vector<float> ref = losses(*one, 4, 3);
  for (std::vector<int64_t> mesh :
       {std::vector<int64_t>{2}, std::vector<int64_t>{2, 2}}) {
    c.mesh = mesh;
    auto r = load(dtc::test::lmArtifact(c));
    expectClose(losses(*r, 4, 3), ref, 2e-5, "lm losses");
    expectClose(tensor(*r, "emb"), tensor(*one, "emb"), 2e-5, "emb");
  }
}

// With a fixed batch the hand-written training programs must learn: a check
// that their backward passes are wired right.
TEST(MultiRank, FixedBatchLossDecreases) {
  for (const json &body : {mlp({2, 2}, {0}, 1), dtc::test::lmArtifact({})}) {
    auto r = load(body);
    std::string err;
    ASSERT_TRUE(r->initialize(1, err));
    ASSERT_TRUE(r->fillSyntheticInputs(0, err));
    std::vector<float> l;
    for (int k = 0; k < 30; ++k) {
      ASSERT_TRUE(r->setOptimizerStep(k, err));
      ASSERT_TRUE(r->runStep(err)) << err;
      float v;
      ASSERT_TRUE(r->loss(v, err));
      l.push_back(v);
    }
    EXPECT_LT(l.back(), 0.5 * l.front()) << l.front() << " -> " << l.back();
  }
}

TEST(MultiRank, ShardedInitIsTheSameGlobalTensor) {
  auto one = load(mlp({1}, {}));
  auto tp = load(mlp({2, 2}, {0}, 1));
  std::string err;
  ASSERT_TRUE(one->initialize(7, err));
  ASSERT_TRUE(tp->initialize(7, err));
  for (const char *p : {"w1", "b1", "w2"})
    EXPECT_EQ(tensor(*one, p), tensor(*tp, p)) << p;
  // Rank 1 (c = (0, 1)) holds columns 16..31 of w1.
  std::vector<float> local, w1 = tensor(*one, "w1");
  ASSERT_TRUE(tp->getLocalTensor(1, "w1", local, err)) << err;
  ASSERT_EQ(local.size(), 16u * 16u);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      EXPECT_EQ(local[size_t(i * 16 + j)], w1[size_t(i * 32 + 16 + j)]);
  // Synthetic inputs too.
  ASSERT_TRUE(one->fillSyntheticInputs(4, err));
  ASSERT_TRUE(tp->fillSyntheticInputs(4, err));
  EXPECT_EQ(tensor(*one, "x"), tensor(*tp, "x"));
  std::vector<int64_t> y1, y2;
  ASSERT_TRUE(one->getTensor("y", y1, err));
  ASSERT_TRUE(tp->getTensor("y", y2, err));
  EXPECT_EQ(y1, y2);
}

TEST(LocalRunner, SetGetAndStepByStep) {
  auto r = load(mlp({2, 2}, {0}, 1));
  std::string err;
  ASSERT_TRUE(r->initialize(0, err));
  std::vector<float> w(16 * 32);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = float(i) * 0.001f;
  ASSERT_TRUE(r->setTensor("w1", w, err)) << err;
  EXPECT_EQ(tensor(*r, "w1"), w);
  std::vector<float> x(8 * 16, 0.5f);
  std::vector<int32_t> y = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE(r->setTensor("x", x, err)) << err;
  ASSERT_TRUE(r->setTensor("y", y, err)) << err;
  ASSERT_TRUE(r->setOptimizerStep(0, err));
  ASSERT_TRUE(r->runStep(err)) << err;
  float l1, l2;
  ASSERT_TRUE(r->loss(l1, err));
  EXPECT_TRUE(std::isfinite(l1));
  // The same data on one device gives the same loss.
  auto one = load(mlp({1}, {}));
  ASSERT_TRUE(one->initialize(0, err));
  ASSERT_TRUE(one->setTensor("w1", w, err));
  ASSERT_TRUE(one->setTensor("x", x, err));
  ASSERT_TRUE(one->setTensor("y", y, err));
  ASSERT_TRUE(one->setOptimizerStep(0, err));
  ASSERT_TRUE(one->runStep(err));
  ASSERT_TRUE(one->loss(l2, err));
  EXPECT_NEAR(l1, l2, 1e-5);
  EXPECT_EQ(r->tensorNames("param"),
            (std::vector<std::string>{"w1", "b1", "w2"}));
  EXPECT_EQ(r->tensorNames("input"), (std::vector<std::string>{"x", "y"}));
  // Errors come back as messages.
  EXPECT_FALSE(r->setTensor("w1", std::vector<float>(3), err));
  EXPECT_NE(err.find("got 12 bytes"), std::string::npos) << err;
  EXPECT_FALSE(r->setTensor("y", x, err));
  EXPECT_NE(err.find("the tensor is i32"), std::string::npos) << err;
  EXPECT_FALSE(r->setTensor("nope", x, err));
  EXPECT_NE(err.find("no tensor named 'nope'"), std::string::npos) << err;
  std::vector<float> out;
  EXPECT_FALSE(r->getTensor("y", out, err));
  EXPECT_FALSE(r->getLocalTensor(9, "w1", out, err));
}

TEST(LocalRunner, LoadErrorsAndStats) {
  std::string err;
  EXPECT_EQ(LocalRunner::loadBytes("garbage", "g.dtc", err), nullptr);
  EXPECT_NE(err.find("g.dtc: not a dtc artifact"), std::string::npos) << err;
  EXPECT_EQ(LocalRunner::loadFile("/nonexistent/x.dtc", err), nullptr);
  EXPECT_NE(err.find("/nonexistent/x.dtc: cannot open"), std::string::npos)
      << err;
  json bad = mlp({1}, {});
  bad["programs"][0]["instructions"][0]["op"] = "conv2d";
  EXPECT_EQ(LocalRunner::loadJson(bad, "b.dtc", err), nullptr);
  EXPECT_NE(
      err.find("b.dtc: program 'spmd': instruction 0 (conv2d): unknown kernel"),
      std::string::npos)
      << err;
  LocalRunnerOptions cuda;
  cuda.backend = "cuda";
  EXPECT_EQ(LocalRunner::loadJson(mlp({1}, {}), "c.dtc", err, cuda), nullptr);
  EXPECT_NE(err.find("; use --backend cpu"), std::string::npos) << err;

  auto r = LocalRunner::loadJson(mlp({2}, {0}), "s.dtc", err);
  ASSERT_TRUE(r) << err;
  ASSERT_TRUE(r->initialize(1, err)) << err;
  ASSERT_TRUE(r->runStep(err)) << err;
  LocalRunStats s = r->stats();
  // What the allocator really handed out: each slot 64-byte aligned plus a
  // 64-byte guard. Per rank: params w1 16x32, b1 32, w2 32x10; Adam m and v.
  auto aligned = [](uint64_t b) { return (b + 63) / 64 * 64 + 64; };
  const uint64_t params =
      aligned(16 * 32 * 4) + aligned(32 * 4) + aligned(32 * 10 * 4);
  EXPECT_EQ(s.memoryBytes["param"], params);
  EXPECT_EQ(s.memoryBytes["grad"], params);
  EXPECT_EQ(s.memoryBytes["optimizer"], 2 * params);
  EXPECT_EQ(s.memoryBytes["input"], aligned(4u * 16 * 4) + aligned(4 * 4));
  EXPECT_EQ(s.collectiveCallsPerStep["all_reduce"], 4u); // loss + 3 grads
  const uint64_t data = 4 + (16 * 32 + 32 + 32 * 10) * 4;
  EXPECT_EQ(s.collectiveBytesPerStep["all_reduce"], data);
  // A ring all-reduce over two ranks sends each element once.
  EXPECT_EQ(s.collectiveSentBytesPerStep["all_reduce"], data);
}

TEST(LocalRunner, RunTimeKernelErrorOnSomeRanksDoesNotHang) {
  dtc::test::LmConfig c;
  c.mesh = {2, 2};
  c.idsMax = 500; // synthetic ids up to 499 with a vocabulary of 50
  std::string err;
  auto r = LocalRunner::loadJson(dtc::test::lmArtifact(c), "lm.dtc", err);
  ASSERT_TRUE(r) << err;
  std::vector<float> l;
  ASSERT_TRUE(r->initialize(0, err));
  EXPECT_FALSE(r->train(2, l, err));
  EXPECT_NE(
      err.find(
          "lm.dtc: program 'spmd' instruction 0 (embedding): embedding: id "),
      std::string::npos)
      << err;
  EXPECT_NE(err.find("is outside [0, 50)"), std::string::npos) << err;
}

} // namespace
