//===- RandomTest.cpp - Philox KATs, determinism, sharded generation ------===//
#include "dtc/runtime/Random.h"
#include "dtc/artifact/ArtifactFormat.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace dtc::rt;

namespace {

TEST(Random, PhiloxKnownAnswers) {
  // Random123 kat_vectors, philox4x32 with 10 rounds.
  EXPECT_EQ(
      philox4x32_10({0, 0, 0, 0}, {0, 0}),
      (PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(
      philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                    {0xffffffffu, 0xffffffffu}),
      (PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(
      philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                    {0xa4093822u, 0x299f31d0u}),
      (PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Random, SplitmixAndFnv) {
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
  const uint64_t k = splitmix64(7 ^ fnv1a64("w"));
  EXPECT_EQ(tensorKey(7, "w"), (PhiloxKey{uint32_t(k), uint32_t(k >> 32)}));
}

TEST(Random, ValuesFollowTheDocumentedFormula) {
  const PhiloxKey key = tensorKey(3, "h.0.w");
  const uint64_t i = 0x100000005ull; // exercises the high counter word
  const PhiloxCounter x = philox4x32_10({5, 1, 0, 0}, key);
  const double u = double(x[0] >> 8) / 16777216.0,
               u2 = double((x[1] >> 8) + 1) / 16777216.0;
  InitSpec normal{InitSpec::Normal, 0.02, 0};
  EXPECT_EQ(
      initValue(normal, key, i, kInitStream),
      float(0.02 * std::sqrt(-2 * std::log(u2)) * std::cos(2 * M_PI * u)));
  InitSpec uni{InitSpec::Uniform, -1, 3};
  EXPECT_EQ(initValue(uni, key, i, kInitStream), float(-1 + 4 * u));
  // The synthetic input of step 4 uses stream 5.
  const PhiloxCounter y = philox4x32_10({5, 1, 5, 0}, key);
  EXPECT_EQ(intValue(1000, key, i, inputStream(4)),
            int64_t(std::floor(double(y[0] >> 8) / 16777216.0 * 1000)));
}

TEST(Random, DeterministicAndNameDependent) {
  const Shape g{16, 8};
  Mesh mesh({1});
  Piece whole = pieceOf(mesh, {{}, {}}, g, {0});
  std::vector<float> a(128), b(128), c(128), d(128);
  InitSpec n{InitSpec::Normal, 1.0, 0};
  fillInit(a.data(), n, 42, "w", g, whole);
  fillInit(b.data(), n, 42, "w", g, whole);
  fillInit(c.data(), n, 42, "v", g, whole);
  fillInit(d.data(), n, 43, "w", g, whole);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
}

TEST(Random, Distributions) {
  const int64_t N = 200000;
  const Shape g{N};
  Piece whole{{N}, {0}, {N}};
  std::vector<float> v(static_cast<size_t>(N));
  fillInit(v.data(), {InitSpec::Normal, 2.0, 0}, 1, "n", g, whole);
  double mean = 0, sq = 0;
  for (float x : v)
    mean += x / double(N);
  for (float x : v)
    sq += (x - mean) * (x - mean) / double(N);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(sq), 2.0, 0.02);
  fillInit(v.data(), {InitSpec::Uniform, -3.0, 5.0}, 1, "u", g, whole);
  double lo = 1e9, hi = -1e9;
  mean = 0;
  for (float x : v) {
    lo = std::min(lo, double(x));
    hi = std::max(hi, double(x));
    mean += x / double(N);
  }
  EXPECT_GE(lo, -3.0);
  EXPECT_LT(hi, 5.0);
  EXPECT_NEAR(mean, 1.0, 0.05);
  std::vector<int32_t> ids(static_cast<size_t>(N));
  fillSynthetic(ids.data(), DType::I32, 7, 1, "ids", g, whole, 0);
  std::vector<int> counts(7, 0);
  for (int32_t x : ids) {
    ASSERT_GE(x, 0);
    ASSERT_LT(x, 7);
    ++counts[size_t(x)];
  }
  for (int c : counts)
    EXPECT_NEAR(double(c) / double(N), 1.0 / 7, 0.01);
}

// Each rank's piece, generated locally at global indices, equals the slice of
// the tensor generated whole.
TEST(Random, ShardedPieceEqualsSliceOfGlobal) {
  const Mesh mesh({2, 3});
  const Shape g{6, 4, 9};
  const std::vector<Sharding> shardings = {{{0}, {}, {1}},
                                           {{1, 0}, {}, {}},
                                           {{}, {0}, {1}},
                                           {{}, {}, {}},
                                           {{1}, {0}, {}}};
  std::vector<float> whole(static_cast<size_t>(numel(g)));
  InitSpec init{InitSpec::Normal, 1.0, 0};
  fillInit(whole.data(), init, 9, "t", g, Piece{g, {0, 0, 0}, g});
  std::vector<int64_t> wholeInts(static_cast<size_t>(numel(g)));
  fillSynthetic(wholeInts.data(), DType::I64, 1000, 9, "x", g,
                Piece{g, {0, 0, 0}, g}, 3);
  for (const Sharding &s : shardings) {
    std::vector<int> covered(whole.size(), 0);
    for (int64_t r = 0; r < mesh.devices(); ++r) {
      Piece p = pieceOf(mesh, s, g, mesh.coords(r));
      std::vector<float> local(static_cast<size_t>(numel(p.local)));
      fillInit(local.data(), init, 9, "t", g, p);
      std::vector<int64_t> localInts(static_cast<size_t>(numel(p.local)));
      fillSynthetic(localInts.data(), DType::I64, 1000, 9, "x", g, p, 3);
      for (int64_t i = 0; i < numel(p.local); ++i) {
        int64_t rem = i, gi = 0;
        Shape li(3);
        for (int d = 2; d >= 0; --d) {
          li[size_t(d)] = rem % p.local[size_t(d)];
          rem /= p.local[size_t(d)];
        }
        gi = 0;
        for (int d = 0; d < 3; ++d)
          gi = gi * g[size_t(d)] + p.offset[size_t(d)] + li[size_t(d)];
        ASSERT_EQ(local[size_t(i)], whole[size_t(gi)]);
        ASSERT_EQ(localInts[size_t(i)], wholeInts[size_t(gi)]);
        covered[size_t(gi)] = 1;
      }
    }
    for (int c : covered)
      ASSERT_EQ(c, 1);
  }
}

TEST(Random, InitSpecParsing) {
  InitSpec s;
  EXPECT_TRUE(parseInitSpec("normal(0.02)", s));
  EXPECT_EQ(s.kind, InitSpec::Normal);
  EXPECT_DOUBLE_EQ(s.a, 0.02);
  EXPECT_TRUE(parseInitSpec("uniform(-0.1, 0.1)", s));
  EXPECT_EQ(s.kind, InitSpec::Uniform);
  EXPECT_DOUBLE_EQ(s.b, 0.1);
  EXPECT_TRUE(parseInitSpec("zeros", s));
  EXPECT_TRUE(parseInitSpec("ones", s));
  for (const char *bad :
       {"normal()", "normal(x)", "normal(1,2)", "uniform(1)", "uniform(2,1)",
        "gauss(1)", "normal(-1)", "zeros()", "", "normal(1"})
    EXPECT_FALSE(parseInitSpec(bad, s)) << bad;
}

} // namespace
