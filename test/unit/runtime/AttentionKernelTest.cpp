//===- AttentionKernelTest.cpp - blocked attention vs the unfused path ----===//
//
// The blocked online-softmax kernels (kernels/cpu/Attention.h) against the
// unfused computation in double: scores s = q k^T / sqrt(D), p = softmax(s)
// with the causal mask, y = p v; dv = p^T dy, dp = dy v^T,
// ds = p (dp - rowsum(dp p)), dq = ds k / sqrt(D), dk = ds^T q / sqrt(D).
// Block sizes are small and odd so that block edges fall everywhere: rows
// and keys not a multiple of the block, tiles cut by the diagonal, tiles
// wholly masked, one-row and one-key blocks. Thread counts 1 and 3 must
// give the same bits.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"
#include "cpu/Attention.h"

#include <cmath>
#include <vector>

using namespace dtc::test;
using dtc::kernels::KernelContext;
using dtc::kernels::cpu::AttentionBlocks;

namespace {

struct Dims {
  int64_t BH, Sq, Sk, D;
};

struct Grads {
  std::vector<double> dq, dk, dv;
};

// The unfused path in double: the full Sq x Sk probability matrix per head.
std::vector<double> probabilities(const std::vector<float> &q,
                                  const std::vector<float> &k, const Dims &d,
                                  bool causal, int64_t bh) {
  std::vector<double> p(size_t(d.Sq * d.Sk), 0.0);
  const double scale = 1.0 / std::sqrt(double(d.D));
  for (int64_t i = 0; i < d.Sq; ++i) {
    const int64_t lim = causal ? i + 1 : d.Sk;
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < lim; ++j) {
      double s = 0;
      for (int64_t x = 0; x < d.D; ++x)
        s += double(q[size_t((bh * d.Sq + i) * d.D + x)]) *
             k[size_t((bh * d.Sk + j) * d.D + x)];
      p[size_t(i * d.Sk + j)] = s * scale;
      mx = std::max(mx, s * scale);
    }
    for (int64_t j = 0; j < lim; ++j)
      sum += (p[size_t(i * d.Sk + j)] = std::exp(p[size_t(i * d.Sk + j)] - mx));
    for (int64_t j = 0; j < lim; ++j)
      p[size_t(i * d.Sk + j)] /= sum;
  }
  return p;
}

std::vector<double> refForward(const std::vector<float> &q,
                               const std::vector<float> &k,
                               const std::vector<float> &v, const Dims &d,
                               bool causal) {
  std::vector<double> y(size_t(d.BH * d.Sq * d.D), 0.0);
  for (int64_t bh = 0; bh < d.BH; ++bh) {
    const std::vector<double> p = probabilities(q, k, d, causal, bh);
    for (int64_t i = 0; i < d.Sq; ++i)
      for (int64_t j = 0; j < d.Sk; ++j)
        for (int64_t x = 0; x < d.D; ++x)
          y[size_t((bh * d.Sq + i) * d.D + x)] +=
              p[size_t(i * d.Sk + j)] * v[size_t((bh * d.Sk + j) * d.D + x)];
  }
  return y;
}

Grads refBackward(const std::vector<float> &q, const std::vector<float> &k,
                  const std::vector<float> &v, const std::vector<float> &dy,
                  const Dims &d, bool causal) {
  Grads g{std::vector<double>(q.size(), 0.0),
          std::vector<double>(k.size(), 0.0),
          std::vector<double>(v.size(), 0.0)};
  const double scale = 1.0 / std::sqrt(double(d.D));
  for (int64_t bh = 0; bh < d.BH; ++bh) {
    const std::vector<double> p = probabilities(q, k, d, causal, bh);
    auto Q = [&](int64_t i, int64_t x) {
      return double(q[size_t((bh * d.Sq + i) * d.D + x)]);
    };
    auto K = [&](int64_t j, int64_t x) {
      return double(k[size_t((bh * d.Sk + j) * d.D + x)]);
    };
    auto V = [&](int64_t j, int64_t x) {
      return double(v[size_t((bh * d.Sk + j) * d.D + x)]);
    };
    auto DY = [&](int64_t i, int64_t x) {
      return double(dy[size_t((bh * d.Sq + i) * d.D + x)]);
    };
    for (int64_t i = 0; i < d.Sq; ++i) {
      std::vector<double> dp(size_t(d.Sk));
      double rowsum = 0;
      for (int64_t j = 0; j < d.Sk; ++j) {
        double s = 0;
        for (int64_t x = 0; x < d.D; ++x)
          s += DY(i, x) * V(j, x);
        dp[size_t(j)] = s;
        rowsum += s * p[size_t(i * d.Sk + j)];
      }
      for (int64_t j = 0; j < d.Sk; ++j) {
        const double pij = p[size_t(i * d.Sk + j)],
                     ds = pij * (dp[size_t(j)] - rowsum);
        for (int64_t x = 0; x < d.D; ++x) {
          g.dv[size_t((bh * d.Sk + j) * d.D + x)] += pij * DY(i, x);
          g.dq[size_t((bh * d.Sq + i) * d.D + x)] += ds * K(j, x) * scale;
          g.dk[size_t((bh * d.Sk + j) * d.D + x)] += ds * Q(i, x) * scale;
        }
      }
    }
  }
  return g;
}

std::vector<float> randomFloats(size_t n, uint32_t seed, double amplitude) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-amplitude, amplitude);
  std::vector<float> x(n);
  for (float &f : x)
    f = float(u(gen));
  return x;
}

void expectClose(const std::vector<float> &got, const std::vector<double> &want,
                 double tol, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    if (!(err <= tol * (1.0 + std::fabs(want[i])))) {
      if (++bad <= 3)
        ADD_FAILURE() << what << " element " << i << ": got " << got[i]
                      << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

struct Case {
  Dims d;
  bool causal;
  AttentionBlocks blocks;
};

std::string label(const Case &c, int threads) {
  return "BH=" + std::to_string(c.d.BH) + " Sq=" + std::to_string(c.d.Sq) +
         " Sk=" + std::to_string(c.d.Sk) + " D=" + std::to_string(c.d.D) +
         (c.causal ? " causal" : " full") + " blocks " +
         std::to_string(c.blocks.rows) + "x" + std::to_string(c.blocks.keys) +
         " threads " + std::to_string(threads);
}

std::vector<Case> cases() {
  std::vector<Case> cs;
  for (bool causal : {true, false})
    for (AttentionBlocks b :
         {AttentionBlocks{64, 64}, AttentionBlocks{4, 3}, AttentionBlocks{5, 8},
          AttentionBlocks{1, 1}, AttentionBlocks{7, 16}}) {
      cs.push_back({{3, 13, 13, 5}, causal, b});
      cs.push_back({{2, 67, 67, 16}, causal, b});
      cs.push_back({{1, 1, 1, 3}, causal, b});
      if (!causal)
        cs.push_back({{2, 9, 21, 4}, causal, b}); // cross attention
    }
  cs.push_back({{2, 130, 130, 32}, true, {64, 64}});
  cs.push_back({{1, 200, 200, 8}, true, {32, 48}});
  return cs;
}

TEST(AttentionKernel, ForwardMatchesUnfused) {
  for (const Case &c : cases()) {
    const Dims &d = c.d;
    // Amplitude 2: scores up to ~4 sqrt(D), so the running maximum moves.
    const auto q = randomFloats(size_t(d.BH * d.Sq * d.D), 1, 2.0),
               k = randomFloats(size_t(d.BH * d.Sk * d.D), 2, 2.0),
               v = randomFloats(size_t(d.BH * d.Sk * d.D), 3, 1.0);
    const std::vector<double> want = refForward(q, k, v, d, c.causal);
    std::vector<float> first;
    for (int threads : {1, 3}) {
      KernelContext ctx(threads);
      std::vector<float> y(q.size(), std::nanf(""));
      dtc::kernels::cpu::attentionForward(ctx, q.data(), k.data(), v.data(),
                                          y.data(), d.BH, d.Sq, d.Sk, d.D,
                                          c.causal, c.blocks);
      expectClose(y, want, 2e-6, label(c, threads));
      if (first.empty())
        first = y;
      else
        EXPECT_EQ(std::memcmp(first.data(), y.data(), y.size() * 4), 0)
            << label(c, threads);
    }
  }
}

TEST(AttentionKernel, BackwardMatchesUnfused) {
  for (const Case &c : cases()) {
    const Dims &d = c.d;
    const auto q = randomFloats(size_t(d.BH * d.Sq * d.D), 4, 2.0),
               k = randomFloats(size_t(d.BH * d.Sk * d.D), 5, 2.0),
               v = randomFloats(size_t(d.BH * d.Sk * d.D), 6, 1.0),
               dy = randomFloats(size_t(d.BH * d.Sq * d.D), 7, 1.0);
    const Grads want = refBackward(q, k, v, dy, d, c.causal);
    std::vector<float> firstDq;
    for (int threads : {1, 3}) {
      KernelContext ctx(threads);
      std::vector<float> dq(q.size(), std::nanf("")),
          dk(k.size(), std::nanf("")), dv(v.size(), std::nanf(""));
      dtc::kernels::cpu::attentionBackward(
          ctx, q.data(), k.data(), v.data(), dy.data(), dq.data(), dk.data(),
          dv.data(), d.BH, d.Sq, d.Sk, d.D, c.causal, c.blocks);
      expectClose(dq, want.dq, 1e-5, "dq " + label(c, threads));
      expectClose(dk, want.dk, 1e-5, "dk " + label(c, threads));
      expectClose(dv, want.dv, 1e-5, "dv " + label(c, threads));
      if (firstDq.empty())
        firstDq = dq;
      else
        EXPECT_EQ(std::memcmp(firstDq.data(), dq.data(), dq.size() * 4), 0)
            << label(c, threads);
    }
  }
}

// Grouped-query attention: query head bh reads key/value head bh / group.
// The same as ordinary attention on keys and values repeated per query
// head, with dk and dv the sums of the repeated heads' gradients.
TEST(AttentionKernel, GroupedKeysAndValues) {
  const AttentionBlocks blocks{5, 7};
  for (int64_t group : {2, 3}) {
    for (bool causal : {false, true}) {
      const int64_t kvHeads = 2; // B * Hkv
      const Dims d{kvHeads * group, 19, 19, 6};
      const auto q = randomFloats(size_t(d.BH * d.Sq * d.D), 11, 2.0),
                 k = randomFloats(size_t(kvHeads * d.Sk * d.D), 12, 2.0),
                 v = randomFloats(size_t(kvHeads * d.Sk * d.D), 13, 1.0),
                 dy = randomFloats(size_t(d.BH * d.Sq * d.D), 14, 1.0);
      std::vector<float> kRep, vRep;
      for (int64_t bh = 0; bh < d.BH; ++bh) {
        const size_t at = size_t(bh / group * d.Sk * d.D),
                     n = size_t(d.Sk * d.D);
        kRep.insert(kRep.end(), k.begin() + long(at), k.begin() + long(at + n));
        vRep.insert(vRep.end(), v.begin() + long(at), v.begin() + long(at + n));
      }
      const std::vector<double> wantY = refForward(q, kRep, vRep, d, causal);
      const Grads rep = refBackward(q, kRep, vRep, dy, d, causal);
      std::vector<double> wantDk(k.size(), 0.0), wantDv(v.size(), 0.0);
      for (int64_t bh = 0; bh < d.BH; ++bh)
        for (int64_t e = 0; e < d.Sk * d.D; ++e) {
          wantDk[size_t(bh / group * d.Sk * d.D + e)] +=
              rep.dk[size_t(bh * d.Sk * d.D + e)];
          wantDv[size_t(bh / group * d.Sk * d.D + e)] +=
              rep.dv[size_t(bh * d.Sk * d.D + e)];
        }
      for (int threads : {1, 3}) {
        const std::string what = "group " + std::to_string(group) +
                                 (causal ? " causal" : "") + " threads " +
                                 std::to_string(threads);
        KernelContext ctx(threads);
        std::vector<float> y(q.size(), std::nanf(""));
        dtc::kernels::cpu::attentionForward(ctx, q.data(), k.data(), v.data(),
                                            y.data(), d.BH, d.Sq, d.Sk, d.D,
                                            causal, blocks, group);
        expectClose(y, wantY, 2e-6, "y " + what);
        std::vector<float> dq(q.size(), std::nanf("")),
            dk(k.size(), std::nanf("")), dv(v.size(), std::nanf(""));
        dtc::kernels::cpu::attentionBackward(
            ctx, q.data(), k.data(), v.data(), dy.data(), dq.data(), dk.data(),
            dv.data(), d.BH, d.Sq, d.Sk, d.D, causal, blocks, group);
        expectClose(dq, rep.dq, 1e-5, "dq " + what);
        expectClose(dk, wantDk, 1e-5, "dk " + what);
        expectClose(dv, wantDv, 1e-5, "dv " + what);
      }
    }
  }
}

// Scores far apart (a row whose maximum arrives in a late tile rescales
// everything before it): still no overflow, no NaN.
TEST(AttentionKernel, LargeScoresRescaleStably) {
  const Dims d{1, 40, 40, 4};
  auto q = randomFloats(size_t(d.Sq * d.D), 8, 1.0),
       k = randomFloats(size_t(d.Sk * d.D), 9, 1.0),
       v = randomFloats(size_t(d.Sk * d.D), 10, 1.0);
  for (int64_t x = 0; x < d.D; ++x) {
    q[size_t(39 * d.D + x)] *= 60.0f; // last row: huge scores
    k[size_t(37 * d.D + x)] =
        q[size_t(39 * d.D + x)] / 30.0f; // its maximum is key 37
  }
  for (bool causal : {true, false}) {
    KernelContext ctx(1);
    std::vector<float> y(q.size());
    dtc::kernels::cpu::attentionForward(ctx, q.data(), k.data(), v.data(),
                                        y.data(), d.BH, d.Sq, d.Sk, d.D, causal,
                                        {8, 5});
    expectClose(y, refForward(q, k, v, d, causal), 2e-6,
                causal ? "causal" : "full");
  }
}

// The forward keeps tiles, never a Sq x Sk matrix: its scratch does not grow
// with the sequence.
TEST(AttentionKernel, ScratchDoesNotGrowWithSequence) {
  const int64_t D = 16;
  size_t scratch[2] = {};
  int i = 0;
  for (int64_t S : {256, 1024}) {
    const auto q = randomFloats(size_t(S * D), 11, 1.0);
    std::vector<float> y(q.size());
    KernelContext ctx(1);
    dtc::kernels::cpu::attentionForward(ctx, q.data(), q.data(), q.data(),
                                        y.data(), 1, S, S, D, true, {});
    scratch[i++] = ctx.workspaceFloats();
  }
  EXPECT_EQ(scratch[0], scratch[1]);
  EXPECT_LT(scratch[1], size_t(256 * 256));
}

// The registered kernels use the blocked path (with default blocks) for
// shapes that span several blocks.
TEST(AttentionKernel, RegisteredKernelsMatchUnfused) {
  const Dims d{2, 100, 100, 8};
  const Shape s{1, 2, 100, 8};
  HostTensor q = randF(s, 12, -2, 2), k = randF(s, 13, -2, 2), v = randF(s, 14),
             dy = randF(s, 15);
  auto toF = [](const HostTensor &t) {
    return std::vector<float>(t.v.begin(), t.v.end());
  };
  for (bool causal : {true, false}) {
    const json at = {{"causal", causal}};
    HostTensor y = run1("attention", {q, k, v}, {DType::F32, s}, at);
    expectClose(toF(y), refForward(toF(q), toF(k), toF(v), d, causal), 2e-6,
                "attention");
    auto g = runKernel("attention_grad", {q, k, v, dy},
                       {{DType::F32, s}, {DType::F32, s}, {DType::F32, s}}, at);
    const Grads want = refBackward(toF(q), toF(k), toF(v), toF(dy), d, causal);
    expectClose(toF(g[0]), want.dq, 1e-5, "dq");
    expectClose(toF(g[1]), want.dk, 1e-5, "dk");
    expectClose(toF(g[2]), want.dv, 1e-5, "dv");
  }
}

// Ring attention as the compiler lowers it (attention_block,
// attention_block_grad): the sequence in n chunks of c, "rank" r holding
// chunk r of q, k, v; at ring step t it sees the key chunk of rank
// (r - t) mod n at that chunk's position. The merged forward and the summed
// backward terms must equal whole attention, causal or not, with grouped
// heads and uneven query blocks.
HostTensor chunkOf(const HostTensor &x, int64_t r, int64_t c) {
  // x [1, H, S, D] -> rows [r c, (r + 1) c) of every head.
  const int64_t H = x.shape[1], S = x.shape[2], D = x.shape[3];
  HostTensor out = F({1, H, c, D}, std::vector<double>(size_t(H * c * D)));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < c; ++i)
      for (int64_t x2 = 0; x2 < D; ++x2)
        out[(h * c + i) * D + x2] = x[(h * S + r * c + i) * D + x2];
  return out;
}

void addChunk(std::vector<double> &whole, const HostTensor &part, int64_t r,
              int64_t S) {
  const int64_t H = part.shape[1], c = part.shape[2], D = part.shape[3];
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < c; ++i)
      for (int64_t x = 0; x < D; ++x)
        whole[size_t((h * S + r * c + i) * D + x)] += part[(h * c + i) * D + x];
}

TEST(AttentionKernel, RingOfBlocksMatchesWholeAttention) {
  const int64_t n = 4, c = 37, S = n * c, D = 8;
  for (int64_t kvHeads : {2, 1}) {
    const Shape qs{1, 2, S, D}, ks{1, kvHeads, S, D};
    HostTensor q = randF(qs, 21, -2, 2), k = randF(ks, 22, -2, 2),
               v = randF(ks, 23), dy = randF(qs, 24);
    auto toF = [](const HostTensor &t) {
      return std::vector<float>(t.v.begin(), t.v.end());
    };
    for (bool causal : {true, false}) {
      const json at = {{"causal", causal}};
      const std::string what = std::string(causal ? "causal" : "full") +
                               " kv heads " + std::to_string(kvHeads);
      // The whole attention through the registered kernels.
      HostTensor yWhole = run1("attention", {q, k, v}, {DType::F32, qs}, at);
      auto gWhole =
          runKernel("attention_grad", {q, k, v, dy},
                    {{DType::F32, qs}, {DType::F32, ks}, {DType::F32, ks}}, at);
      std::vector<double> y(size_t(dtc::rt::numel(qs))), dq(y.size()),
          dk(size_t(dtc::rt::numel(ks))), dv(dk.size());
      const Shape cq{1, 2, c, D}, ck{1, kvHeads, c, D}, stats{1, 2, c};
      for (int64_t r = 0; r < n; ++r) {
        HostTensor qr = chunkOf(q, r, c), dyr = chunkOf(dy, r, c);
        HostTensor qOff = I64({}, {double(r * c)});
        HostTensor acc, lse;
        for (int64_t t = 0; t < n; ++t) {
          const int64_t src = (r - t + n) % n;
          HostTensor kOff = I64({}, {double(src * c)});
          std::vector<HostTensor> in = {qr, chunkOf(k, src, c),
                                        chunkOf(v, src, c), qOff, kOff};
          if (t > 0) {
            in.push_back(acc);
            in.push_back(lse);
          }
          auto out = runKernel("attention_block", in,
                               {{DType::F32, cq}, {DType::F32, stats}}, at);
          acc = out[0];
          lse = out[1];
        }
        addChunk(y, acc, r, S);
        // The backward from the merged output and logsumexp, in any order.
        for (int64_t t = 0; t < n; ++t) {
          const int64_t src = (r + t) % n;
          auto g = runKernel(
              "attention_block_grad",
              {qr, chunkOf(k, src, c), chunkOf(v, src, c), qOff,
               I64({}, {double(src * c)}), dyr, acc, lse},
              {{DType::F32, cq}, {DType::F32, ck}, {DType::F32, ck}}, at);
          addChunk(dq, g[0], r, S);
          addChunk(dk, g[1], src, S);
          addChunk(dv, g[2], src, S);
        }
      }
      auto wide = [](const HostTensor &t) {
        return std::vector<double>(t.v.begin(), t.v.end());
      };
      expectClose(toF(F(qs, y)), wide(yWhole), 2e-6, "y " + what);
      expectClose(toF(F(qs, dq)), wide(gWhole[0]), 2e-5, "dq " + what);
      expectClose(toF(F(ks, dk)), wide(gWhole[1]), 2e-5, "dk " + what);
      expectClose(toF(F(ks, dv)), wide(gWhole[2]), 2e-5, "dv " + what);
    }
  }
}

// A causal block wholly after its queries contributes nothing: the running
// output and logsumexp pass through, and its gradient terms are zero.
TEST(AttentionKernel, MaskedBlockPassesThrough) {
  const Shape s{1, 1, 5, 4}, st{1, 1, 5};
  HostTensor q = randF(s, 31), k = randF(s, 32), v = randF(s, 33),
             acc = randF(s, 34), lse = randF(st, 35), dy = randF(s, 36);
  const json at = {{"causal", true}};
  auto out = runKernel("attention_block",
                       {q, k, v, I64({}, {0}), I64({}, {5}), acc, lse},
                       {{DType::F32, s}, {DType::F32, st}}, at);
  EXPECT_EQ(out[0].v, acc.v);
  for (int64_t i = 0; i < 5; ++i)
    EXPECT_FLOAT_EQ(float(out[1][i]), float(lse[i]));
  auto g = runKernel("attention_block_grad",
                     {q, k, v, I64({}, {0}), I64({}, {5}), dy, acc, lse},
                     {{DType::F32, s}, {DType::F32, s}, {DType::F32, s}}, at);
  for (const HostTensor &t : g)
    for (double x : t.v)
      EXPECT_EQ(x, 0.0);
}

} // namespace
