//===- ShardKernelTest.cpp - the partitioner's local kernels -------------===//
//
// Padding kernels against naive loops; the vocabulary-shard kernels against
// the whole-vocabulary ones: shards of an uneven vocabulary (7 rows in
// pieces of 3: the last piece has one row and two of padding), combined as
// the partitioner combines them (sums and maxima across shards), must give
// the whole kernel's results.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"

#include "dtc/artifact/Types.h"

#include <algorithm>
#include <limits>

namespace {

using namespace dtc::test;
using dtc::rt::Error;

TEST(ShardKernels, PadCropsAndZeroFills) {
  HostTensor x = randF({2, 3, 4}, 1);
  HostTensor got = run1("pad", {x}, {DType::F32, {3, 2, 5}});
  for (int64_t i = 0; i < got.numel(); ++i) {
    Shape o = unravel(i, got.shape);
    bool inside = o[0] < 2 && o[1] < 3 && o[2] < 4;
    double want = inside ? x[(o[0] * 3 + o[1]) * 4 + o[2]] : 0.0;
    EXPECT_EQ(got[i], want) << "element " << i;
  }
  HostTensor ids = I64({5}, {1, 2, 3, 4, 5});
  EXPECT_EQ(run1("pad", {ids}, {DType::I64, {3}}).v,
            (std::vector<double>{1, 2, 3}));
  EXPECT_NE(checkKernel("pad", {x}, {{DType::F32, {2, 12}}}, {}), "");
}

TEST(ShardKernels, FillPaddingPastTheGlobalSize) {
  HostTensor x = randF({2, 4, 3}, 2);
  // This piece holds global positions 8..11 of a dimension of 10.
  for (const char *fill : {"zero", "-inf"}) {
    HostTensor got =
        run1("fill_padding", {x, I64({}, {8})}, {DType::F32, x.shape},
             {{"axis", 1}, {"size", 10}, {"fill", fill}});
    for (int64_t i = 0; i < x.numel(); ++i) {
      Shape o = unravel(i, x.shape);
      double want = 8 + o[1] >= 10 ? (fill[0] == 'z' ? 0.0 : -INFINITY) : x[i];
      EXPECT_EQ(got[i], want) << fill << " element " << i;
    }
  }
  EXPECT_NE(checkKernel("fill_padding", {x, I64({}, {0})},
                        {{DType::F32, x.shape}},
                        {{"axis", 1}, {"size", 10}, {"fill", "one"}}),
            "");
}

TEST(ShardKernels, ReduceMax) {
  HostTensor x = randF({3, 4, 5}, 3);
  HostTensor got = run1("reduce_max", {x}, {DType::F32, {4}},
                        {{"axes", {0, 2}}, {"keep_dims", false}});
  for (int64_t j = 0; j < 4; ++j) {
    double want = -INFINITY;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t k = 0; k < 5; ++k)
        want = std::max(want, x[(i * 4 + j) * 5 + k]);
    EXPECT_EQ(got[j], want);
  }
}

constexpr int64_t kVocab = 7, kPiece = 3, kShards = 3;

/// Rows [s*3, s*3+3) of a [7, D] table, padded with garbage rows.
HostTensor tableShard(const HostTensor &table, int64_t s) {
  const int64_t D = table.shape[1];
  HostTensor out{
      DType::F32, {kPiece, D}, std::vector<double>(size_t(kPiece * D), 123.0)};
  for (int64_t r = 0; r < kPiece && s * kPiece + r < kVocab; ++r)
    for (int64_t d = 0; d < D; ++d)
      out[r * D + d] = table[(s * kPiece + r) * D + d];
  return out;
}

TEST(ShardKernels, VocabShardEmbeddingSumsToTheLookup) {
  HostTensor table = randF({kVocab, 4}, 4);
  for (DType dt : {DType::I32, DType::I64}) {
    HostTensor ids{dt, {2, 3}, {6, 0, 3, 2, 5, 6}};
    HostTensor whole = run1("embedding", {table, ids}, {DType::F32, {2, 3, 4}});
    HostTensor sum{DType::F32, whole.shape,
                   std::vector<double>(size_t(whole.numel()), 0.0)};
    for (int64_t s = 0; s < kShards; ++s) {
      HostTensor part =
          run1("embedding_shard",
               {tableShard(table, s), ids, I64({}, {double(s * kPiece)})},
               {DType::F32, whole.shape}, {{"vocab", kVocab}});
      for (int64_t i = 0; i < sum.numel(); ++i)
        sum[i] += part[i];
    }
    expectNear(sum, whole, 0, 0, "sum of shards");
    // An id outside the vocabulary is an error on every shard, never a
    // silent zero.
    HostTensor bad{dt, {1}, {7}};
    EXPECT_THROW(run1("embedding_shard",
                      {tableShard(table, 0), bad, I64({}, {0})},
                      {DType::F32, {1, 4}}, {{"vocab", kVocab}}),
                 Error);
  }
}

TEST(ShardKernels, VocabShardEmbeddingGradConcatenatesToTheGradient) {
  HostTensor ids = I32({2, 3}, {6, 0, 3, 6, 5, 0});
  HostTensor dy = randF({2, 3, 4}, 5);
  HostTensor whole =
      run1("embedding_grad", {ids, dy}, {DType::F32, {kVocab, 4}});
  for (int64_t s = 0; s < kShards; ++s) {
    HostTensor part =
        run1("embedding_shard_grad", {ids, dy, I64({}, {double(s * kPiece)})},
             {DType::F32, {kPiece, 4}}, {{"vocab", kVocab}});
    for (int64_t r = 0; r < kPiece; ++r)
      for (int64_t d = 0; d < 4; ++d) {
        int64_t g = s * kPiece + r;
        double want =
            g < kVocab ? whole[g * 4 + d] : 0.0; // padding rows stay zero
        EXPECT_EQ(part[r * 4 + d], want) << "shard " << s << " row " << r;
      }
  }
}

TEST(ShardKernels, VocabParallelCrossEntropyEqualsTheWholeOne) {
  const Shape lead{2, 3};
  HostTensor z = randF({2, 3, kVocab}, 6, -3, 3);
  HostTensor y = randInt(DType::I32, lead, 7, kVocab);
  y[0] = 6; // a label in the last, padded piece
  auto shard = [&](int64_t s) {
    HostTensor out{DType::F32,
                   {2, 3, kPiece},
                   std::vector<double>(size_t(6 * kPiece), 50.0)};
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t j = 0; j < kPiece && s * kPiece + j < kVocab; ++j)
        out[r * kPiece + j] = z[r * kVocab + s * kPiece + j];
    return out;
  };
  // The row maximum over shards (padding excluded by fill_padding -inf).
  HostTensor mx{DType::F32, lead, std::vector<double>(6, -INFINITY)};
  for (int64_t s = 0; s < kShards; ++s) {
    HostTensor masked =
        run1("fill_padding", {shard(s), I64({}, {double(s * kPiece)})},
             {DType::F32, {2, 3, kPiece}},
             {{"axis", 2}, {"size", kVocab}, {"fill", "-inf"}});
    HostTensor local = run1("reduce_max", {masked}, {DType::F32, lead},
                            {{"axes", {2}}, {"keep_dims", false}});
    for (int64_t r = 0; r < 6; ++r)
      mx[r] = std::max(mx[r], local[r]);
  }
  HostTensor sumExp{DType::F32, lead, std::vector<double>(6, 0.0)},
      target = sumExp;
  for (int64_t s = 0; s < kShards; ++s) {
    std::vector<HostTensor> st = runKernel(
        "cross_entropy_shard_stats",
        {shard(s), y, mx, I64({}, {double(s * kPiece)})},
        {{DType::F32, lead}, {DType::F32, lead}}, {{"vocab", kVocab}});
    for (int64_t r = 0; r < 6; ++r) {
      sumExp[r] += st[0][r];
      target[r] += st[1][r];
    }
  }
  double loss = 0;
  for (int64_t r = 0; r < 6; ++r)
    loss += (std::log(sumExp[r]) + mx[r] - target[r]) / 6;
  EXPECT_NEAR(loss, run1("cross_entropy", {z, y}, {DType::F32, {}})[0], 1e-6);

  const json attrs = {{"scale", 0.25}};
  HostTensor dloss = F({}, {0.5});
  HostTensor whole =
      run1("cross_entropy_grad", {z, y, dloss}, {DType::F32, z.shape}, attrs);
  for (int64_t s = 0; s < kShards; ++s) {
    HostTensor part = run1(
        "cross_entropy_shard_grad",
        {shard(s), y, mx, sumExp, dloss, I64({}, {double(s * kPiece)})},
        {DType::F32, {2, 3, kPiece}}, {{"vocab", kVocab}, {"scale", 0.25}});
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t j = 0; j < kPiece; ++j) {
        int64_t g = s * kPiece + j;
        double want =
            g < kVocab ? whole[r * kVocab + g] : 0.0; // padding: no gradient
        EXPECT_NEAR(part[r * kPiece + j], want, 1e-7)
            << "shard " << s << " row " << r << " col " << j;
      }
  }
}

} // namespace
