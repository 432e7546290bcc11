//===- Attention.h - the blocked attention kernels' entry points --*- C++
//-*-===//
//
// attention and attention_grad (docs/kernels.md) as blocked, online-softmax
// kernels in the style of FlashAttention: the forward walks key blocks per
// block of query rows, keeping a running row maximum and sum, so no
// Sq x Sk score matrix exists, only one bq x bk tile per thread; the
// backward recomputes the probabilities tile by tile (and the output, for
// the rowsum(dy * y) term). Causal masks skip tiles wholly above the
// diagonal. Products are f32 with f32 accumulation in the matrix library;
// row sums accumulate in f32 over 16 lanes.
//
// Exposed with the block sizes as parameters for the unit tests, which use
// small blocks to put block edges everywhere.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_CPU_ATTENTION_H
#define DTC_KERNELS_CPU_ATTENTION_H

#include "dtc/kernels/BlockPositions.h"
#include "dtc/kernels/Kernel.h"

#include <cstddef>
#include <cstdint>

namespace dtc::kernels::cpu {

struct AttentionBlocks {
  // 64 x 128 measured best (or within noise of it) of 32..128 square and
  // oblong blocks on the benchmark GPTs' heads (Dh 32, seq 128; Dh 64,
  // seq 256): docs/kernels.md.
  int64_t rows = 64;  ///< query rows per block (bq)
  int64_t keys = 128; ///< keys per tile (bk)
};

/// Floats of one thread's tiles for a block of query rows: two bq x bk
/// tiles, bq x D recomputed output rows and three rows of bq, each on its
/// own 64-byte line (16 floats). The kernels carve their workspace this way
/// and the memory plan counts it (contextWorkspaceBytes).
inline size_t attentionRowScratchFloats(const AttentionBlocks &b, int64_t D) {
  auto line = [](int64_t n) { return size_t((n + 15) / 16 * 16); };
  return 2 * line(b.rows * b.keys) + line(b.rows * D) + 3 * line(b.rows);
}

/// q [B, H, Sq, D], k and v [B, Hkv, Sk, D] -> y [B, H, Sq, D], BH = B·H.
/// `group` = H / Hkv query heads share each key/value head: query head h
/// reads key/value head h / group (grouped-query attention; 1: ordinary).
void attentionForward(KernelContext &ctx, const float *q, const float *k,
                      const float *v, float *y, int64_t BH, int64_t Sq,
                      int64_t Sk, int64_t D, bool causal,
                      AttentionBlocks blocks, int64_t group = 1);
/// dq, dk, dv of attention for the upstream gradient dy (shaped like q); dk
/// and dv of a shared head sum its query heads' shares.
void attentionBackward(KernelContext &ctx, const float *q, const float *k,
                       const float *v, const float *dy, float *dq, float *dk,
                       float *dv, int64_t BH, int64_t Sq, int64_t Sk, int64_t D,
                       bool causal, AttentionBlocks blocks, int64_t group = 1);

/// attention_block: q's rows against one block of keys and values, for ring
/// attention over a split sequence. Query row i sees keys
/// [0, mask.visible(i)) (local indices; under a causal mask those at
/// global positions up to the query's). The block's normalized output and row
/// logsumexp are merged into the running (yAcc, lseAcc) when given (null:
/// the first block), giving y and lse; a row that sees no key has lse -inf.
void attentionBlockForward(KernelContext &ctx, const float *q, const float *k,
                           const float *v, const float *yAcc,
                           const float *lseAcc, float *y, float *lse,
                           int64_t BH, int64_t Sq, int64_t Sk, int64_t D,
                           const CausalMask &mask, AttentionBlocks blocks,
                           int64_t group = 1);
/// attention_block_grad: one key block's terms of attention's gradient,
/// from the whole attention's output y and row logsumexp lse: q's rows'
/// dq terms and the block's dk and dv (overwritten, not accumulated).
void attentionBlockBackward(KernelContext &ctx, const float *q, const float *k,
                            const float *v, const float *dy, const float *y,
                            const float *lse, float *dq, float *dk, float *dv,
                            int64_t BH, int64_t Sq, int64_t Sk, int64_t D,
                            const CausalMask &mask, AttentionBlocks blocks,
                            int64_t group = 1);

} // namespace dtc::kernels::cpu

#endif // DTC_KERNELS_CPU_ATTENTION_H
