//===- KernelThreadsTest.cpp - kernels give the same bits on any thread count
//-===//
//
// The CPU kernels split rows, tiles and element ranges across threads and
// sum cross-row reductions in fixed chunks, so 1, 2 and 3 threads must give
// identical bytes (mesh-N runs compare against mesh 1, and a rank's thread
// count depends on the machine). Shapes are large enough to be split.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"

using namespace dtc::test;

namespace {

void expectSameBits(const std::string &name, const std::vector<HostTensor> &ins,
                    const std::vector<OutSpec> &outs,
                    const json &attrs = json::object()) {
  const std::vector<HostTensor> one = runKernel(name, ins, outs, attrs, 1);
  for (int threads : {2, 3}) {
    const std::vector<HostTensor> many =
        runKernel(name, ins, outs, attrs, threads);
    for (size_t o = 0; o < outs.size(); ++o) {
      ASSERT_EQ(one[o].v.size(), many[o].v.size());
      size_t diff = 0;
      for (size_t i = 0; i < one[o].v.size(); ++i)
        diff += one[o].v[i] != many[o].v[i];
      EXPECT_EQ(diff, 0u) << name << " output " << o << " with " << threads
                          << " threads";
    }
  }
}

TEST(KernelThreads, SameBitsOnAnyThreadCount) {
  const Shape big{3, 97, 257}; // 74,687 elements: several ranges of 16K
  HostTensor x = randF(big, 1, -3, 3), y = randF(big, 2, -3, 3);
  const OutSpec f{DType::F32, big};
  expectSameBits("add", {x, y}, {f});
  expectSameBits("mul", {x, randF({257}, 3)}, {f});
  expectSameBits("gelu", {x}, {f});
  expectSameBits("gelu_grad", {x, y}, {f});
  expectSameBits("silu_grad", {x, y}, {f});

  // Rows: 291 of 257 logits (chunks of 64 rows for the mean).
  HostTensor labels = randInt(DType::I32, {3, 97}, 4, 257);
  expectSameBits("cross_entropy", {x, labels}, {{DType::F32, {}}});
  expectSameBits("cross_entropy_grad", {x, labels, F({}, {0.7})}, {f},
                 {{"scale", 1.0 / 291}});

  HostTensor g = randF({257}, 5), b = randF({257}, 6);
  expectSameBits("layer_norm", {x, g, b}, {f}, {{"epsilon", 1e-5}});
  expectSameBits("layer_norm_grad", {x, g, y},
                 {f, {DType::F32, {257}}, {DType::F32, {257}}},
                 {{"epsilon", 1e-5}});

  expectSameBits("rms_norm", {x, g}, {f}, {{"epsilon", 1e-5}});
  expectSameBits("rms_norm_grad", {x, g, y}, {f, {DType::F32, {257}}},
                 {{"epsilon", 1e-5}});
  for (int axis : {1, 2}) {
    HostTensor p = run1("softmax", {x}, f, {{"axis", axis}});
    expectSameBits("softmax", {x}, {f}, {{"axis", axis}});
    expectSameBits("softmax_grad", {p, y}, {f}, {{"axis", axis}});
  }

  HostTensor m = randF(big, 7), v = randF(big, 8, 0, 1);
  expectSameBits("adam_update", {x, y, m, v, I64({}, {4})}, {f, f, f},
                 {{"lr", 1e-3},
                  {"beta1", 0.9},
                  {"beta2", 0.999},
                  {"eps", 1e-8},
                  {"weight_decay", 0.01},
                  {"decoupled", true}});

  // Batched matmul: one product per thread at a time.
  HostTensor a = randF({6, 33, 17}, 9), w = randF({6, 17, 29}, 10);
  expectSameBits("matmul", {a, w}, {{DType::F32, {6, 33, 29}}});

  const Shape s{2, 3, 150, 16};
  HostTensor q = randF(s, 11), k = randF(s, 12), vv = randF(s, 13),
             dy = randF(s, 14);
  for (bool causal : {true, false}) {
    expectSameBits("attention", {q, k, vv}, {{DType::F32, s}},
                   {{"causal", causal}});
    expectSameBits("attention_grad", {q, k, vv, dy},
                   {{DType::F32, s}, {DType::F32, s}, {DType::F32, s}},
                   {{"causal", causal}});
  }
}

} // namespace

namespace {

// Cross-row sums over many chunks (and a last partial one) against double
// references: the loss mean of cross_entropy, dgamma/dbeta of layer_norm_grad.
TEST(KernelThreads, ChunkedRowSumsMatchReference) {
  const int64_t R = 7 * 64 + 13, V = 19, D = 11;
  HostTensor z = randF({R, V}, 21, -4, 4);
  HostTensor labels = randInt(DType::I64, {R}, 22, V);
  double want = 0;
  for (int64_t r = 0; r < R; ++r) {
    double mx = -1e300, s = 0;
    for (int64_t j = 0; j < V; ++j)
      mx = std::max(mx, z[r * V + j]);
    for (int64_t j = 0; j < V; ++j)
      s += std::exp(z[r * V + j] - mx);
    want += std::log(s) + mx - z[r * V + int64_t(labels[r])];
  }
  want /= double(R);
  for (int threads : {1, 3}) {
    HostTensor got = runKernel("cross_entropy", {z, labels}, {{DType::F32, {}}},
                               {}, threads)[0];
    EXPECT_NEAR(got[0], want, 1e-6 * std::fabs(want)) << threads << " threads";
  }

  HostTensor x = randF({R, D}, 23, -2, 2), g = randF({D}, 24),
             dy = randF({R, D}, 25);
  std::vector<double> dg(size_t(D), 0.0), db(size_t(D), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < D; ++j)
      mean += x[r * D + j] / double(D);
    for (int64_t j = 0; j < D; ++j)
      var += (x[r * D + j] - mean) * (x[r * D + j] - mean) / double(D);
    for (int64_t j = 0; j < D; ++j) {
      dg[size_t(j)] +=
          dy[r * D + j] * (x[r * D + j] - mean) / std::sqrt(var + 1e-5);
      db[size_t(j)] += dy[r * D + j];
    }
  }
  for (int threads : {1, 3}) {
    auto out =
        runKernel("layer_norm_grad", {x, g, dy},
                  {{DType::F32, {R, D}}, {DType::F32, {D}}, {DType::F32, {D}}},
                  {{"epsilon", 1e-5}}, threads);
    for (int64_t j = 0; j < D; ++j) {
      EXPECT_NEAR(out[1][j], dg[size_t(j)],
                  1e-5 * (1 + std::fabs(dg[size_t(j)])))
          << "dgamma " << j;
      EXPECT_NEAR(out[2][j], db[size_t(j)],
                  1e-5 * (1 + std::fabs(db[size_t(j)])))
          << "dbeta " << j;
    }
  }

  std::vector<double> rdg(size_t(D), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < D; ++j)
      ms += x[r * D + j] * x[r * D + j] / double(D);
    for (int64_t j = 0; j < D; ++j)
      rdg[size_t(j)] += dy[r * D + j] * x[r * D + j] / std::sqrt(ms + 1e-5);
  }
  for (int threads : {1, 3}) {
    auto out = runKernel("rms_norm_grad", {x, g, dy},
                         {{DType::F32, {R, D}}, {DType::F32, {D}}},
                         {{"epsilon", 1e-5}}, threads);
    for (int64_t j = 0; j < D; ++j)
      EXPECT_NEAR(out[1][j], rdg[size_t(j)],
                  1e-5 * (1 + std::fabs(rdg[size_t(j)])))
          << "rms dgamma " << j;
  }
}

} // namespace

namespace {

// matmul with transpose flags, on the folded path and the batched one (with
// broadcast batch dims, more products than threads), and an empty sum.
TEST(KernelThreads, MatmulTransposedBatchedAndEmpty) {
  struct Case {
    Shape a, b, out;
    bool ta, tb;
  };
  const Case cases[] = {
      {{2, 7, 5}, {5, 3}, {2, 7, 3}, false, false},   // folded into one product
      {{2, 7, 5}, {3, 5}, {2, 7, 3}, false, true},    // folded, b transposed
      {{4, 5, 7}, {4, 5, 3}, {4, 7, 3}, true, false}, // batched, a transposed
      {{4, 7, 5},
       {1, 3, 5},
       {4, 7, 3},
       false,
       true}, // b broadcast over the batch
      {{3, 1, 5, 7},
       {4, 3, 5},
       {3, 4, 7, 3},
       true,
       true},                                       // both, broadcast both ways
      {{2, 3, 0}, {0, 4}, {2, 3, 4}, false, false}, // K = 0: zeros
  };
  uint32_t seed = 30;
  for (const Case &c : cases) {
    HostTensor a = randF(c.a, seed++), b = randF(c.b, seed++);
    const json at = {{"transpose_a", c.ta}, {"transpose_b", c.tb}};
    const std::string err =
        checkKernel("matmul", {a, b}, {{DType::F32, c.out}}, at);
    if (!err.empty()) {
      ADD_FAILURE() << dtc::rt::shapeStr(c.a) << ": " << err;
      continue;
    }
    const int64_t M = c.out[c.out.size() - 2], N = c.out.back();
    const int64_t K = c.a[c.a.size() - (c.ta ? 2 : 1)];
    HostTensor want{DType::F32, c.out,
                    std::vector<double>(size_t(dtc::rt::numel(c.out)), 0.0)};
    const Shape batch(c.out.begin(), c.out.end() - 2);
    const Shape ba(c.a.begin(), c.a.end() - 2), bb(c.b.begin(), c.b.end() - 2);
    for (int64_t o = 0; o < dtc::rt::numel(batch); ++o) {
      const Shape idx = unravel(o, batch);
      const int64_t ia = ba.empty() ? 0 : bcastIndex(idx, ba),
                    ib = bb.empty() ? 0 : bcastIndex(idx, bb);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += a[ia * M * K + (c.ta ? k * M + i : i * K + k)] *
                 b[ib * K * N + (c.tb ? j * K + k : k * N + j)];
          want[(o * M + i) * N + j] = s;
        }
    }
    for (int threads : {1, 3})
      expectNear(
          runKernel("matmul", {a, b}, {{DType::F32, c.out}}, at, threads)[0],
          want, 1e-5, 1e-5,
          "matmul " + dtc::rt::shapeStr(c.a) + " x " + dtc::rt::shapeStr(c.b));
  }
}

} // namespace
