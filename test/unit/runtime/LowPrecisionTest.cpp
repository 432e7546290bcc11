//===- LowPrecisionTest.cpp - bf16 / f16 storage, f32 compute -------------===//
//
// The conversions against an independent reference (every 16-bit pattern
// decoded with ldexp; f32 -> 16 bits by a nearest-value search over the
// decoded table, ties to the even pattern), and kernels run by the executor
// on bf16/f16 operands against float64 references, with tolerances derived
// from the format's rounding: the stored result is the f32 result rounded
// to nearest, so it is within u = 2^-p (p = 8 for bf16, 11 for f16) of it,
// relative, and the f32 computation adds its own, much smaller, error.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"
#include "TestArtifacts.h"

#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/kernels/Kernel.h"
#include "dtc/runtime/LocalRunner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

using namespace dtc::rt;
using dtc::test::ArtifactBuilder;
using dtc::test::json;
using dtc::test::ProgramBuilder;

namespace {

/// The value of a 16-bit pattern, from the format's definition.
double decode(DType t, uint16_t h) {
  const int expBits = t == DType::BF16 ? 8 : 5,
            manBits = t == DType::BF16 ? 7 : 10;
  const int bias = (1 << (expBits - 1)) - 1;
  const int sign = h >> 15, exp = (h >> manBits) & ((1 << expBits) - 1);
  const int man = h & ((1 << manBits) - 1);
  double v;
  if (exp == (1 << expBits) - 1)
    v = man ? std::numeric_limits<double>::quiet_NaN()
            : std::numeric_limits<double>::infinity();
  else if (exp == 0)
    v = std::ldexp(double(man), 1 - bias - manBits);
  else
    v = std::ldexp(double(man + (1 << manBits)), exp - bias - manBits);
  return sign ? -v : v;
}

/// Round to nearest, ties to the even pattern, by search: the non-negative
/// finite values in pattern order, then infinity one ulp (of the largest
/// finite value) above it, as IEEE rounding treats overflow.
struct Reference {
  DType type;
  std::vector<double> values; // index = pattern, non-negative, inf last
  explicit Reference(DType t) : type(t) {
    const uint16_t inf = t == DType::BF16 ? 0x7f80 : 0x7c00;
    for (uint32_t h = 0; h < inf; ++h)
      values.push_back(decode(t, uint16_t(h)));
    values.push_back(2 * values.back() - values[values.size() - 2]);
  }
  uint16_t round(float f) const {
    if (std::isnan(f))
      return 0xffff; // any NaN; compared as "is NaN"
    const double a = std::fabs(double(f));
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    if (std::isinf(f))
      return uint16_t(sign | (values.size() - 1));
    auto hi = std::lower_bound(values.begin(), values.end(), a);
    if (hi == values.end())
      return uint16_t(sign | (values.size() - 1));
    size_t h = size_t(hi - values.begin());
    if (*hi != a && h > 0) {
      const double down = a - values[h - 1], up = *hi - a;
      if (down < up || (down == up && (h - 1) % 2 == 0))
        --h;
    }
    return uint16_t(sign | h);
  }
};

bool isNanPattern(DType t, uint16_t h) { return std::isnan(decode(t, h)); }

TEST(LowPrecision, DecodeEveryPattern) {
  for (DType t : {DType::BF16, DType::F16}) {
    std::vector<uint16_t> all(65536);
    for (uint32_t h = 0; h < 65536; ++h)
      all[h] = uint16_t(h);
    std::vector<float> bulk(all.size());
    dtc::kernels::KernelContext ctx(2);
    dtc::kernels::cpu::toF32(ctx, t, all.data(), bulk.data(),
                             int64_t(all.size()));
    for (uint32_t h = 0; h < 65536; ++h) {
      const double want = decode(t, uint16_t(h));
      const float scalar = lowToF32(t, uint16_t(h));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(scalar) && std::isnan(bulk[h]))
            << dtypeName(t) << " " << h;
        continue;
      }
      ASSERT_EQ(double(scalar), want) << dtypeName(t) << " pattern " << h;
      ASSERT_EQ(double(bulk[h]), want) << dtypeName(t) << " pattern " << h;
    }
  }
}

TEST(LowPrecision, RoundToNearestEven) {
  std::mt19937 gen(7);
  for (DType t : {DType::BF16, DType::F16}) {
    const Reference ref(t);
    std::vector<float> x;
    // Random bit patterns over the whole f32 range, and values near the
    // format's own range (its subnormals, halfway points, the overflow edge).
    for (int i = 0; i < 200000; ++i)
      x.push_back(bitsFloat(uint32_t(gen())));
    std::uniform_real_distribution<double> mag(-30, 20);
    for (int i = 0; i < 200000; ++i)
      x.push_back(float((i % 2 ? -1 : 1) * std::exp2(mag(gen))));
    for (size_t h = 1; h + 1 < ref.values.size(); ++h) {
      const double mid = (ref.values[h - 1] + ref.values[h]) / 2;
      x.push_back(float(mid)); // exact in f32 for both formats
      x.push_back(std::nextafter(float(mid), 0.0f));
      x.push_back(std::nextafter(float(mid), 1e30f));
    }
    for (float special :
         {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 3.3895314e38f,
          3.4028235e38f, std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::quiet_NaN(), 1e-45f, 5.9604645e-8f,
          2.9802322e-8f, 2.9802326e-8f})
      x.push_back(special);
    // A length no vector width divides, over more than one thread's grain.
    std::vector<uint16_t> bulk(x.size());
    dtc::kernels::KernelContext ctx(2);
    dtc::kernels::cpu::fromF32(ctx, t, x.data(), bulk.data(),
                               int64_t(x.size()));
    int checked = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t want = ref.round(x[i]), scalar = f32ToLow(t, x[i]);
      if (std::isnan(x[i])) {
        EXPECT_TRUE(isNanPattern(t, scalar) && isNanPattern(t, bulk[i]));
        continue;
      }
      ASSERT_EQ(scalar, want) << dtypeName(t) << " rounding " << x[i];
      ASSERT_EQ(bulk[i], want) << dtypeName(t) << " bulk rounding " << x[i];
      ++checked;
    }
    EXPECT_GT(checked, 400000);
  }
}

// ---- kernels on bf16/f16 operands, through the executor -------------------

std::vector<float> lowRandom(DType t, size_t n, uint32_t seed, double lo = -1,
                             double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = lowToF32(t, f32ToLow(t, float(d(gen))));
  return v;
}

/// Unit roundoff of the format: half an ulp, relative.
double unitRoundoff(DType t) {
  return t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}

/// |got - want| <= u |want| + absolute, element by element (the stored
/// value is the f32 result rounded to nearest; `absolute` bounds the f32
/// computation's own error). Also: every result is a value of the format.
void expectRounded(DType t, const std::vector<float> &got,
                   const std::vector<double> &want, double absolute,
                   const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double u = unitRoundoff(t);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " [" << i << "]";
    EXPECT_EQ(lowToF32(t, f32ToLow(t, got[i])), got[i])
        << what << " [" << i << "] not stored";
    const double err = std::fabs(double(got[i]) - want[i]);
    EXPECT_LE(err, u * std::fabs(want[i]) * (1 + 1e-6) + absolute)
        << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
    worst = std::max(worst, err / (std::fabs(want[i]) + 1e-30));
  }
  // The rounding really happens (a kernel left in f32 would be exact).
  EXPECT_GT(worst, u / 16) << what;
}

class LowPrecisionKernels : public ::testing::TestWithParam<DType> {};

TEST_P(LowPrecisionKernels, MatchFloat64References) {
  const DType t = GetParam();
  const int64_t M = 8, K = 96, N = 12, R = 6, V = 40, D = 32;
  ArtifactBuilder ab({1});
  ProgramBuilder pb("spmd", {0});
  auto input = [&](const std::string &name, DType d, Shape s, int64_t max = 0) {
    json none = json::array();
    for (size_t i = 0; i < s.size(); ++i)
      none.push_back(json::array());
    ab.input(name, d, s, none, max);
    return pb.buffer(d, s, "input", name);
  };
  auto output = [&](const std::string &name, DType d, Shape s) {
    json none = json::array();
    for (size_t i = 0; i < s.size(); ++i)
      none.push_back(json::array());
    ab.tensor({{"name", name},
               {"role", "output"},
               {"dtype", dtypeName(d)},
               {"shape", s},
               {"sharding", none}});
    return pb.buffer(d, s, "activation", name);
  };
  const int a = input("a", t, {M, K}), b = input("b", t, {K, N});
  const int x = input("x", t, {R, D}), gamma = input("gamma", t, {D}),
            beta = input("beta", t, {D});
  const int logits = input("logits", t, {R, V}),
            labels = input("labels", DType::I32, {R}, V);
  const int mm = output("mm", t, {M, N}), sm = output("sm", t, {R, D}),
            ln = output("ln", t, {R, D}), ge = output("ge", t, {R, D}),
            rs = output("rs", t, {R}), sum = output("sum", t, {R, D});
  ab.scalar("loss", "loss", DType::F32);
  const int loss = pb.buffer(DType::F32, {}, "scalar", "loss");
  pb.op("matmul", {a, b}, {mm});
  pb.op("softmax", {x}, {sm}, {{"axis", 1}});
  pb.op("layer_norm", {x, gamma, beta}, {ln}, {{"epsilon", 1e-5}});
  pb.op("gelu", {x}, {ge});
  pb.op("reduce_sum", {x}, {rs}, {{"axes", {1}}, {"keep_dims", false}});
  pb.op("add", {x, gamma}, {sum});
  pb.op("cross_entropy", {logits, labels}, {loss});
  ab.program(pb);

  std::string err;
  auto run = LocalRunner::loadBytes(encodeArtifact(ab.body()), "low.dtc", err);
  ASSERT_TRUE(run) << err;
  ASSERT_TRUE(run->initialize(0, err)) << err;
  const std::vector<float> A = lowRandom(t, M * K, 1),
                           B = lowRandom(t, K * N, 2),
                           X = lowRandom(t, R * D, 3, -3, 3),
                           G = lowRandom(t, D, 4, 0.5, 1.5),
                           Be = lowRandom(t, D, 5),
                           L = lowRandom(t, R * V, 6, -4, 4);
  std::vector<int32_t> Y(R);
  for (int64_t r = 0; r < R; ++r)
    Y[size_t(r)] = int32_t((r * 7) % V);
  for (auto [name, v] : {std::pair{"a", &A},
                         {"b", &B},
                         {"x", &X},
                         {"gamma", &G},
                         {"beta", &Be},
                         {"logits", &L}})
    ASSERT_TRUE(run->setTensor(name, *v, err)) << err;
  ASSERT_TRUE(run->setTensor("labels", Y, err)) << err;
  ASSERT_TRUE(run->runStep(err)) << err;
  auto get = [&](const std::string &name) {
    std::vector<float> v;
    EXPECT_TRUE(run->getTensor(name, v, err)) << err;
    return v;
  };
  const double f32eps = std::ldexp(1.0, -24);

  // matmul: the K-term dot products accumulate in f32 (|error| <=
  // K eps32 sum|a b|), then round once.
  std::vector<double> want(size_t(M * N));
  double bound = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, s1 = 0;
      for (int64_t k = 0; k < K; ++k) {
        s += double(A[size_t(i * K + k)]) * B[size_t(k * N + j)];
        s1 += std::fabs(double(A[size_t(i * K + k)]) * B[size_t(k * N + j)]);
      }
      want[size_t(i * N + j)] = s;
      bound = std::max(bound, double(K) * f32eps * s1);
    }
  expectRounded(t, get("mm"), want, bound, "matmul");

  // softmax, layer_norm, gelu, row sums, a broadcast add: f32 inside, a few
  // f32 roundings per element.
  std::vector<double> smW(size_t(R * D)), lnW(smW.size()), geW(smW.size()),
      addW(smW.size());
  std::vector<double> rsW(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    double mx = -1e300, z = 0, mean = 0, var = 0, s = 0;
    for (int64_t d = 0; d < D; ++d)
      mx = std::max(mx, double(X[size_t(r * D + d)]));
    for (int64_t d = 0; d < D; ++d)
      z += std::exp(X[size_t(r * D + d)] - mx);
    for (int64_t d = 0; d < D; ++d)
      mean += X[size_t(r * D + d)] / double(D);
    for (int64_t d = 0; d < D; ++d)
      var += std::pow(X[size_t(r * D + d)] - mean, 2) / double(D);
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = size_t(r * D + d);
      const double xv = X[i];
      smW[i] = std::exp(xv - mx) / z;
      lnW[i] =
          (xv - mean) / std::sqrt(var + 1e-5) * G[size_t(d)] + Be[size_t(d)];
      geW[i] =
          0.5 * xv *
          (1 + std::tanh(std::sqrt(2 / M_PI) * (xv + 0.044715 * xv * xv * xv)));
      addW[i] = xv + G[size_t(d)];
      s += xv;
    }
    rsW[size_t(r)] = s;
  }
  expectRounded(t, get("sm"), smW, 64 * f32eps, "softmax");
  expectRounded(t, get("ln"), lnW, 64 * f32eps * 4, "layer_norm");
  expectRounded(t, get("ge"), geW, 64 * f32eps * 4, "gelu");
  expectRounded(t, get("rs"), rsW, double(D) * f32eps * 3 * double(D),
                "reduce_sum");
  expectRounded(t, get("sum"), addW, 0, "add");

  // cross entropy: an f32 loss from low-precision logits, no rounding to
  // the low format (reductions stay f32).
  double ce = 0;
  for (int64_t r = 0; r < R; ++r) {
    double mx = -1e300, z = 0;
    for (int64_t v = 0; v < V; ++v)
      mx = std::max(mx, double(L[size_t(r * V + v)]));
    for (int64_t v = 0; v < V; ++v)
      z += std::exp(L[size_t(r * V + v)] - mx);
    ce += (std::log(z) + mx - L[size_t(r * V + Y[size_t(r)])]) / double(R);
  }
  float got;
  ASSERT_TRUE(run->loss(got, err)) << err;
  EXPECT_NEAR(got, ce, 1e-5 * std::fabs(ce));
}

// Loss scaling's inputs of the updates: inv_scale unscales the gradient
// (in double, before everything else), a non-zero found_inf keeps the state.
TEST(LowPrecision, UpdatesUnscaleAndSkip) {
  using namespace dtc::test;
  const HostTensor p = randF({33}, 1), g = randF({33}, 2),
                   m = randF({33}, 3, 0, 0.1), v = randF({33}, 4, 0, 0.1),
                   step = I64({}, {4});
  HostTensor scaledG = g;
  for (double &x : scaledG.v)
    x *= 1024.0; // exact in f32
  const json adam = {{"lr", 0.01},          {"beta1", 0.9},
                     {"beta2", 0.999},      {"eps", 1e-8},
                     {"weight_decay", 0.1}, {"decoupled", false}};
  const std::vector<OutSpec> outs(3, OutSpec{DType::F32, {33}});
  const auto plain = runKernel("adam_update", {p, g, m, v, step}, outs, adam);
  const auto unscaled = runKernel(
      "adam_update", {p, scaledG, m, v, step, F({}, {1.0 / 1024}), F({}, {0})},
      outs, adam);
  for (size_t k = 0; k < 3; ++k)
    EXPECT_EQ(unscaled[k].v, plain[k].v) << "output " << k;
  const auto skipped = runKernel(
      "adam_update",
      {p, scaledG, m, v, step, F({}, {1.0 / 1024}), F({}, {NAN})}, outs, adam);
  EXPECT_EQ(skipped[0].v, p.v);
  EXPECT_EQ(skipped[1].v, m.v);
  EXPECT_EQ(skipped[2].v, v.v);
  const json sgd = {{"lr", 0.5}, {"weight_decay", 0.0}};
  const auto sgdPlain =
      runKernel("sgd_update", {p, g}, {{DType::F32, {33}}}, sgd);
  EXPECT_EQ(runKernel("sgd_update",
                      {p, scaledG, F({}, {1.0 / 1024}), F({}, {0})},
                      {{DType::F32, {33}}}, sgd)[0]
                .v,
            sgdPlain[0].v);
  EXPECT_EQ(runKernel("sgd_update",
                      {p, scaledG, F({}, {1.0 / 1024}), F({}, {INFINITY})},
                      {{DType::F32, {33}}}, sgd)[0]
                .v,
            p.v);
  // One of the pair alone is rejected.
  EXPECT_NE(checkKernel("sgd_update", {p, g, F({}, {1.0})},
                        {{DType::F32, {33}}}, sgd),
            "");
}

// PyTorch's GradScaler: halve and restart the run on an overflow, double
// after growth_interval good steps in a row.
TEST(LowPrecision, LossScaleUpdate) {
  using namespace dtc::test;
  const json attrs = {
      {"growth_factor", 2.0}, {"backoff_factor", 0.5}, {"growth_interval", 3}};
  const std::vector<OutSpec> outs = {
      {DType::F32, {}}, {DType::I64, {}}, {DType::I64, {}}};
  auto step = [&](double scale, double good, double skipped, double found) {
    const auto r = runKernel(
        "loss_scale_update",
        {F({}, {scale}), I64({}, {good}), I64({}, {skipped}), F({}, {found})},
        outs, attrs);
    return std::vector<double>{r[0][0], r[1][0], r[2][0]};
  };
  EXPECT_EQ(step(1024, 0, 0, 0), (std::vector<double>{1024, 1, 0}));
  EXPECT_EQ(step(1024, 2, 0, 0), (std::vector<double>{2048, 0, 0}));
  EXPECT_EQ(step(1024, 2, 5, NAN), (std::vector<double>{512, 0, 6}));
  EXPECT_EQ(step(1024, 1, 0, INFINITY), (std::vector<double>{512, 0, 1}));
}

INSTANTIATE_TEST_SUITE_P(Formats, LowPrecisionKernels,
                         ::testing::Values(DType::BF16, DType::F16),
                         [](const auto &info) {
                           return std::string(dtypeName(info.param));
                         });

} // namespace
