//===- LossCases.cpp - CUDA kernel cases (see KernelCases.h)
//---------------===//
//
// kernels/cuda/Loss.cu: embedding and its gradient (i32 and i64 ids, rank-0
// to rank-2 ids, repeated ids summed in order, unused rows), cross entropy
// and its gradient (one to many 64-row chunks, rows over 1024 columns, f32
// losses of bf16/f16 logits, language-model rows of 50304 and odd 50257
// columns, rows wider than shared memory, gradients held to a tight
// absolute tolerance), the vocabulary-parallel pieces (offset as an
// i64 scalar fixed with lo = hi, shards with padding columns past the
// vocabulary, a shard entirely past it, f32 statistics beside bf16 logits)
// and the out-of-range id and label errors with the CPU's exact message.
//
// The generator draws every id of an error case equal (lo = hi), so the
// first bad position, the one both backends report, is the first element.
// Error cases keep fewer than 16 rows so the CPU kernels run on one thread
// and report the first position too.
//
//===----------------------------------------------------------------------===//
#include "KernelCases.h"

namespace dtc::test {
namespace {
using rt::DType;
using rt::Shape;

constexpr DType F32 = DType::F32, BF16 = DType::BF16, F16 = DType::F16,
                I32 = DType::I32, I64 = DType::I64;

OperandSpec op(DType t, Shape s, double lo = -1.0, double hi = 1.0) {
  return OperandSpec{t, std::move(s), lo, hi};
}
/// Ids or labels in [0, bound).
OperandSpec ids(DType t, Shape s, int64_t bound) {
  return op(t, std::move(s), 0, double(bound - 1));
}
/// An offset operand: the i64 scalar `value`.
OperandSpec offset(int64_t value) {
  return op(I64, {}, double(value), double(value));
}
Shape with(Shape s, int64_t last) {
  s.push_back(last);
  return s;
}

KernelCase embedding(std::string label, DType t, DType it, Shape idShape,
                     int64_t V, int64_t D) {
  return {std::move(label),
          "embedding",
          {op(t, {V, D}), ids(it, idShape, V)},
          {op(t, with(idShape, D))}};
}
KernelCase embeddingGrad(std::string label, DType t, DType it, Shape idShape,
                         int64_t V, int64_t D, int64_t idBound = -1) {
  return {
      std::move(label),
      "embedding_grad",
      {ids(it, idShape, idBound < 0 ? V : idBound), op(t, with(idShape, D))},
      {op(t, {V, D})}};
}
KernelCase crossEntropy(std::string label, DType t, DType it, DType outType,
                        Shape lead, int64_t V, double lo = -1, double hi = 1) {
  return {std::move(label),
          "cross_entropy",
          {op(t, with(lead, V), lo, hi), ids(it, lead, V)},
          {op(outType, {})}};
}
KernelCase crossEntropyGrad(std::string label, DType t, DType it,
                            DType dlossType, Shape lead, int64_t V,
                            double scale, double lo = -1, double hi = 1) {
  return {std::move(label),
          "cross_entropy_grad",
          {op(t, with(lead, V), lo, hi), ids(it, lead, V),
           op(dlossType, {}, 0.5, 1.5)},
          {op(t, with(lead, V))},
          {{"scale", scale}}};
}
KernelCase embeddingShard(std::string label, DType t, DType it, Shape idShape,
                          int64_t rows, int64_t D, int64_t vocab, int64_t off) {
  return {std::move(label),
          "embedding_shard",
          {op(t, {rows, D}), ids(it, idShape, vocab), offset(off)},
          {op(t, with(idShape, D))},
          {{"vocab", vocab}}};
}
KernelCase embeddingShardGrad(std::string label, DType t, DType it,
                              Shape idShape, int64_t rows, int64_t D,
                              int64_t vocab, int64_t off) {
  return {std::move(label),
          "embedding_shard_grad",
          {ids(it, idShape, vocab), op(t, with(idShape, D)), offset(off)},
          {op(t, {rows, D})},
          {{"vocab", vocab}}};
}
/// Statistics in `st` (the max operand, sum_exp and target).
KernelCase shardStats(std::string label, DType t, DType it, DType st,
                      Shape lead, int64_t cols, int64_t vocab, int64_t off) {
  return {std::move(label),
          "cross_entropy_shard_stats",
          {op(t, with(lead, cols), -2, 2), ids(it, lead, vocab),
           op(st, lead, 1, 2), offset(off)},
          {op(st, lead), op(st, lead)},
          {{"vocab", vocab}}};
}
/// max in `mt`, sum_exp in `st`, dloss in `dt`.
KernelCase shardGrad(std::string label, DType t, DType it, DType mt, DType st,
                     DType dt, Shape lead, int64_t cols, int64_t vocab,
                     int64_t off, double scale) {
  return {std::move(label),
          "cross_entropy_shard_grad",
          {op(t, with(lead, cols), -2, 2), ids(it, lead, vocab),
           op(mt, lead, 1, 2), op(st, lead, 5, 20), op(dt, {}, 0.5, 1.5),
           offset(off)},
          {op(t, with(lead, cols))},
          {{"vocab", vocab}, {"scale", scale}}};
}
/// A gradient case held to `atol` instead of the dtype's default: the
/// default 1e-6 (f32) or 1e-2 (bf16) is above every probability of a wide
/// row (about 1 / V times dloss scale), which would go unchecked.
KernelCase tight(KernelCase c, double atol) {
  c.atol = atol;
  return c;
}
/// The case with `ignore_index` = `ignore` (and `reduction`, when given):
/// labels drawn from [lo, hi] hit it often (small vocabularies) or, set to
/// a value outside [0, V) with allIds, everywhere.
KernelCase ignoring(KernelCase c, int64_t ignore, const char *reduction = "") {
  c.attrs["ignore_index"] = ignore;
  if (*reduction)
    c.attrs["reduction"] = reduction;
  c.label += " ignore " + std::to_string(ignore) +
             (*reduction ? std::string(" ") + reduction : std::string());
  return c;
}
KernelCase labelMask(std::string label, DType it, Shape s, int64_t bound,
                     int64_t ignore) {
  return {std::move(label),
          "label_mask",
          {ids(it, s, bound)},
          {op(F32, s)},
          {{"ignore_index", ignore}}};
}
KernelCase withError(KernelCase c, std::string message) {
  c.expectError = std::move(message);
  return c;
}
/// Every id (operand `index`) equal to `value`.
KernelCase allIds(KernelCase c, size_t index, int64_t value) {
  c.in[index].lo = c.in[index].hi = double(value);
  return c;
}

AddKernelCases cases({
    // ---- embedding ----
    embedding("embedding f32 i32 ids [4, 7]", F32, I32, {4, 7}, 50, 33),
    embedding("embedding f32 i64 ids [300]", F32, I64, {300}, 1000, 64),
    embedding("embedding scalar id", F32, I64, {}, 9, 5),
    embedding("embedding rank-3 ids", F32, I32, {2, 3, 5}, 17, 3),
    embedding("embedding one row table", F32, I32, {3}, 1, 5),
    embedding("embedding wide rows", F32, I64, {2, 9}, 40, 1500),
    embedding("embedding D 1", F32, I32, {37}, 11, 1),
    embedding("embedding bf16", BF16, I32, {4, 7}, 50, 33),
    embedding("embedding f16", F16, I64, {5, 3}, 30, 70),
    embedding("embedding realistic", F32, I32, {8, 256}, 2000, 256),
    withError(allIds(embedding("embedding id == V", F32, I32, {2, 3}, 50, 8), 1,
                     50),
              "embedding: id 50 at position [0, 0] is outside [0, 50)"),
    withError(allIds(embedding("embedding negative id", BF16, I64, {4}, 20, 8),
                     1, -1),
              "embedding: id -1 at position [0] is outside [0, 20)"),
    withError(allIds(embedding("embedding bad scalar id", F32, I64, {}, 20, 8),
                     1, 20),
              "embedding: id 20 at position [] is outside [0, 20)"),

    // ---- embedding_grad ----
    embeddingGrad("embedding_grad repeats, unused rows", F32, I32, {4, 7}, 10,
                  33, 6),
    embeddingGrad("embedding_grad i64 [2, 300]", F32, I64, {2, 300}, 50, 70),
    embeddingGrad("embedding_grad wide rows", F32, I32, {64}, 4, 1100),
    allIds(embeddingGrad("embedding_grad one id 500 times", F32, I64, {500}, 4,
                         8),
           0, 2),
    embeddingGrad("embedding_grad scalar id", F32, I32, {}, 3, 40),
    embeddingGrad("embedding_grad D 1", F32, I64, {3, 11}, 7, 1),
    embeddingGrad("embedding_grad one row", F32, I32, {9}, 1, 65),
    embeddingGrad("embedding_grad bf16", BF16, I32, {6, 20}, 12, 48),
    embeddingGrad("embedding_grad f16", F16, I64, {6, 20}, 12, 48),
    embeddingGrad("embedding_grad realistic", F32, I32, {8, 256}, 1000, 256),
    // 16-byte packs (D a multiple of 8 bf16 / 4 f32), and a GPT's table.
    embeddingGrad("embedding_grad packs f32", F32, I64, {3, 50}, 40, 12),
    embeddingGrad("embedding_grad packs bf16 GPT", BF16, I32, {4, 512}, 50304,
                  256),
    embeddingGrad("embedding_grad bf16 D 20", BF16, I32, {6, 20}, 12, 20),
    withError(allIds(embeddingGrad("embedding_grad id == V", F32, I32, {5}, 10,
                                   4),
                     0, 10),
              "embedding_grad: id 10 at position [0] is outside [0, 10)"),
    withError(allIds(embeddingGrad("embedding_grad negative id", F16, I64,
                                   {2, 2}, 10, 4),
                     0, -3),
              "embedding_grad: id -3 at position [0, 0] is outside [0, 10)"),

    // ---- cross_entropy ----
    crossEntropy("cross_entropy [6, 10]", F32, I32, F32, {6}, 10),
    crossEntropy("cross_entropy [3, 5, 1500] i64", F32, I64, F32, {3, 5}, 1500,
                 -4, 4),
    crossEntropy("cross_entropy 200 rows", F32, I32, F32, {200}, 50, -3, 3),
    crossEntropy("cross_entropy rank 1", F32, I64, F32, {}, 7),
    crossEntropy("cross_entropy V 1", F32, I32, F32, {5}, 1),
    crossEntropy("cross_entropy bf16 logits f32 loss", BF16, I32, F32, {4, 9},
                 130, -4, 4),
    crossEntropy("cross_entropy bf16 logits bf16 loss", BF16, I64, BF16, {4, 9},
                 130, -4, 4),
    crossEntropy("cross_entropy f16 logits f32 loss", F16, I32, F32, {70}, 33),
    crossEntropy("cross_entropy f16 logits f16 loss", F16, I32, F16, {70}, 33),
    crossEntropy("cross_entropy f32 logits bf16 loss", F32, I32, BF16, {10},
                 20),
    crossEntropy("cross_entropy realistic", F32, I32, F32, {256}, 4096, -5, 5),
    // Language-model rows: 16-byte vectors, the row copied into shared
    // memory (50304 f32 or bf16 columns fit an H100's 227 KiB; f32 takes
    // the one-block-per-SM plan); odd V puts every row start at another
    // offset from 16 bytes (8 rows: all offsets of a bf16/f16 row, 4 of an
    // f32 one); V 3 has rows shorter than their scalar head; rows of more
    // than 227 KiB are read from global memory twice.
    crossEntropy("cross_entropy realistic bf16 [2, 1024, 50304]", BF16, I32,
                 F32, {2, 1024}, 50304, -4, 4),
    crossEntropy("cross_entropy bf16 odd V 50257", BF16, I64, F32, {16}, 50257,
                 -4, 4),
    crossEntropy("cross_entropy f16 odd V 50257", F16, I32, F32, {2, 8}, 50257,
                 -4, 4),
    crossEntropy("cross_entropy f32 odd V 50257", F32, I32, F32, {8}, 50257, -4,
                 4),
    crossEntropy("cross_entropy f32 V 50304", F32, I64, F32, {8}, 50304, -4, 4),
    crossEntropy("cross_entropy bf16 V 3", BF16, I32, F32, {20}, 3, -4, 4),
    crossEntropy("cross_entropy f16 V 13 f16 loss", F16, I64, F16, {24}, 13, -4,
                 4),
    crossEntropy("cross_entropy f32 wider than shared memory", F32, I32, F32,
                 {5}, 70001, -4, 4),
    crossEntropy("cross_entropy bf16 wider than shared memory", BF16, I64, F32,
                 {8}, 120001, -4, 4),
    withError(allIds(crossEntropy("cross_entropy label == V", F32, I32, F32,
                                  {3, 4}, 10),
                     1, 10),
              "cross_entropy: label 10 at position [0, 0] is outside [0, 10)"),
    withError(allIds(crossEntropy("cross_entropy negative label", BF16, I64,
                                  F32, {5}, 10),
                     1, -1),
              "cross_entropy: label -1 at position [0] is outside [0, 10)"),

    // ignore_index: mean over the kept labels, their sum, no label kept
    ignoring(crossEntropy("cross_entropy", F32, I32, F32, {40}, 5), 2),
    ignoring(crossEntropy("cross_entropy", BF16, I64, F32, {6, 7}, 9), 0,
             "sum"),
    ignoring(allIds(crossEntropy("cross_entropy all ignored", F32, I32, F32,
                                 {8}, 10),
                    1, -100),
             -100),
    ignoring(allIds(crossEntropy("cross_entropy all ignored", F32, I64, F32,
                                 {8}, 10),
                    1, -100),
             -100, "sum"),
    ignoring(
        crossEntropyGrad("cross_entropy_grad", F32, I32, F32, {40}, 5, 0.5), 2),
    ignoring(
        crossEntropyGrad("cross_entropy_grad", F16, I64, F32, {30}, 6, 1.0), 5),
    ignoring(shardStats("cross_entropy_shard_stats", F32, I32, F32, {24}, 4, 8,
                        4),
             5),
    ignoring(shardGrad("cross_entropy_shard_grad", F32, I64, F32, F32, F32,
                       {24}, 4, 8, 4, 1.0),
             5),
    labelMask("label_mask i32", I32, {4, 9}, 6, 3),
    labelMask("label_mask i64 nothing ignored", I64, {100}, 6, -100),

    // ---- cross_entropy_grad ----
    crossEntropyGrad("cross_entropy_grad [6, 10]", F32, I32, F32, {6}, 10,
                     1.0 / 6),
    crossEntropyGrad("cross_entropy_grad [3, 5, 1500] i64", F32, I64, F32,
                     {3, 5}, 1500, 0.25, -4, 4),
    crossEntropyGrad("cross_entropy_grad rank 1", F32, I32, F32, {}, 7, 1.0),
    crossEntropyGrad("cross_entropy_grad V 1", F32, I64, F32, {4}, 1, 0.5),
    crossEntropyGrad("cross_entropy_grad 100 rows bf16 dloss", F32, I32, BF16,
                     {100}, 37, 0.01),
    crossEntropyGrad("cross_entropy_grad bf16", BF16, I32, F32, {4, 9}, 130,
                     1.0 / 36, -4, 4),
    crossEntropyGrad("cross_entropy_grad f16", F16, I64, F16, {70}, 33,
                     1.0 / 70),
    crossEntropyGrad("cross_entropy_grad realistic", F32, I32, F32, {256}, 4096,
                     1.0 / 256, -5, 5),
    // As the cross_entropy cases above, held to 1e-15 absolute (f32, bf16:
    // every probability, down to e^-8 / V dloss scale ~ 1e-13, is compared
    // relatively) or 1e-7 (f16: its subnormal spacing is 6e-8).
    tight(crossEntropyGrad("cross_entropy_grad realistic bf16 [2, 1024, 50304]",
                           BF16, I32, F32, {2, 1024}, 50304, 1.0 / 2048, -4, 4),
          1e-15),
    tight(crossEntropyGrad("cross_entropy_grad bf16 odd V 50257", BF16, I64,
                           F32, {16}, 50257, 1.0 / 16, -4, 4),
          1e-15),
    tight(crossEntropyGrad("cross_entropy_grad f16 odd V 50257", F16, I32, F16,
                           {2, 8}, 50257, 1.0, -4, 4),
          1e-7),
    tight(crossEntropyGrad("cross_entropy_grad f32 odd V 50257", F32, I32, F32,
                           {8}, 50257, 1.0 / 8, -4, 4),
          1e-15),
    tight(crossEntropyGrad("cross_entropy_grad f32 V 50304 bf16 dloss", F32,
                           I64, BF16, {8}, 50304, 1.0 / 8, -4, 4),
          1e-15),
    tight(crossEntropyGrad("cross_entropy_grad bf16 V 3", BF16, I32, F32, {20},
                           3, 0.05, -4, 4),
          1e-15),
    tight(crossEntropyGrad("cross_entropy_grad f16 V 13", F16, I64, F32, {24},
                           13, 1.0 / 24, -4, 4),
          1e-7),
    tight(crossEntropyGrad("cross_entropy_grad f32 wider than shared memory",
                           F32, I32, F32, {5}, 70001, 0.2, -4, 4),
          1e-15),
    tight(crossEntropyGrad("cross_entropy_grad bf16 wider than shared memory",
                           BF16, I64, F32, {8}, 120001, 0.125, -4, 4),
          1e-15),
    withError(
        allIds(crossEntropyGrad("cross_entropy_grad label == V", F32, I64, F32,
                                {2, 3}, 10, 1.0),
               1, 10),
        "cross_entropy_grad: label 10 at position [0, 0] is outside [0, 10)"),
    withError(
        allIds(crossEntropyGrad("cross_entropy_grad negative label", F16, I32,
                                F32, {4}, 10, 1.0),
               1, -2),
        "cross_entropy_grad: label -2 at position [0] is outside [0, 10)"),

    // ---- embedding_shard (vocab 40 in pieces of 16: [0, 16), [16, 32), [32,
    // 48) padded) ----
    embeddingShard("embedding_shard middle shard", F32, I32, {5, 6}, 16, 12, 40,
                   16),
    embeddingShard("embedding_shard first shard i64", F32, I64, {5, 6}, 16, 12,
                   40, 0),
    embeddingShard("embedding_shard padded last shard", F32, I32, {5, 6}, 16,
                   12, 40, 32),
    embeddingShard("embedding_shard wide rows", F32, I64, {7}, 16, 1100, 40,
                   16),
    embeddingShard("embedding_shard bf16", BF16, I32, {4, 9}, 16, 24, 40, 32),
    embeddingShard("embedding_shard f16", F16, I64, {4, 9}, 16, 24, 40, 16),
    withError(allIds(embeddingShard("embedding_shard id == vocab", F32, I32,
                                    {2, 3}, 16, 4, 40, 32),
                     1, 40),
              "embedding_shard: id 40 at position [0, 0] is outside [0, 40)"),

    // ---- embedding_shard_grad ----
    embeddingShardGrad("embedding_shard_grad middle shard", F32, I32, {5, 6},
                       16, 12, 40, 16),
    embeddingShardGrad("embedding_shard_grad first shard i64", F32, I64,
                       {20, 6}, 16, 12, 40, 0),
    embeddingShardGrad("embedding_shard_grad padded last shard", F32, I32,
                       {20, 6}, 16, 12, 40, 32),
    embeddingShardGrad("embedding_shard_grad wide rows", F32, I64, {30}, 16,
                       1100, 40, 16),
    embeddingShardGrad("embedding_shard_grad bf16", BF16, I32, {8, 9}, 16, 24,
                       40, 32),
    embeddingShardGrad("embedding_shard_grad f16", F16, I64, {8, 9}, 16, 24, 40,
                       16),
    withError(allIds(embeddingShardGrad("embedding_shard_grad negative id", F32,
                                        I64, {3}, 16, 4, 40, 16),
                     0, -1),
              "embedding_shard_grad: id -1 at position [0] is outside [0, 40)"),

    // ---- cross_entropy_shard_stats ----
    shardStats("cross_entropy_shard_stats middle shard", F32, I32, F32, {4, 6},
               16, 40, 16),
    shardStats("cross_entropy_shard_stats first shard i64", F32, I64, F32,
               {4, 6}, 16, 40, 0),
    shardStats("cross_entropy_shard_stats padded last shard", F32, I32, F32,
               {4, 6}, 16, 40, 32),
    shardStats("cross_entropy_shard_stats shard past the vocab", F32, I32, F32,
               {5}, 16, 40, 48),
    shardStats("cross_entropy_shard_stats wide rows", F32, I64, F32, {8}, 1500,
               2900, 1500),
    shardStats("cross_entropy_shard_stats bf16 logits f32 stats", BF16, I32,
               F32, {4, 6}, 16, 40, 32),
    shardStats("cross_entropy_shard_stats bf16 logits bf16 stats", BF16, I64,
               BF16, {4, 6}, 16, 40, 16),
    shardStats("cross_entropy_shard_stats f16 logits f32 stats", F16, I32, F32,
               {30}, 100, 150, 100),
    shardStats("cross_entropy_shard_stats realistic", F32, I32, F32, {256},
               2048, 4000, 2048),
    // f32 logits with bf16 statistics (the rule allows any float results).
    {"cross_entropy_shard_stats mixed results",
     "cross_entropy_shard_stats",
     {op(BF16, {3, 16}, -2, 2), ids(I32, {3}, 40), op(F32, {3}, 1, 2),
      offset(16)},
     {op(F32, {3}), op(BF16, {3})},
     {{"vocab", 40}}},
    withError(allIds(shardStats("cross_entropy_shard_stats label == vocab", F32,
                                I32, F32, {2, 3}, 16, 40, 16),
                     1, 40),
              "cross_entropy_shard_stats: label 40 at position [0, 0] is "
              "outside [0, 40)"),

    // ---- cross_entropy_shard_grad ----
    shardGrad("cross_entropy_shard_grad middle shard", F32, I32, F32, F32, F32,
              {4, 6}, 16, 40, 16, 0.1),
    shardGrad("cross_entropy_shard_grad first shard i64", F32, I64, F32, F32,
              F32, {4, 6}, 16, 40, 0, 0.1),
    shardGrad("cross_entropy_shard_grad padded last shard", F32, I32, F32, F32,
              F32, {4, 6}, 16, 40, 32, 0.1),
    shardGrad("cross_entropy_shard_grad shard past the vocab", F32, I32, F32,
              F32, F32, {5}, 16, 40, 48, 1.0),
    shardGrad("cross_entropy_shard_grad wide rows", F32, I64, F32, F32, F32,
              {8}, 1500, 2900, 1500, 0.125),
    shardGrad("cross_entropy_shard_grad bf16 logits f32 stats", BF16, I32, F32,
              F32, F32, {4, 6}, 16, 40, 32, 0.1),
    shardGrad("cross_entropy_shard_grad bf16 logits mixed stats", BF16, I64,
              BF16, F32, BF16, {4, 6}, 16, 40, 16, 0.1),
    shardGrad("cross_entropy_shard_grad f16 logits f32 stats", F16, I32, F32,
              F32, F16, {30}, 100, 150, 100, 0.05),
    shardGrad("cross_entropy_shard_grad realistic", F32, I32, F32, F32, F32,
              {256}, 2048, 4000, 2048, 1.0 / 256),
    withError(allIds(shardGrad("cross_entropy_shard_grad negative label", F32,
                               I64, F32, F32, F32, {3}, 16, 40, 0, 1.0),
                     1, -5),
              "cross_entropy_shard_grad: label -5 at position [0] is outside "
              "[0, 40)"),
});

} // namespace
} // namespace dtc::test
