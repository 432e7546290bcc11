//===- Flops.h - floating-point work of the compute-bound kernels -*- C++
//-*-===//
//
// One formula per kernel, shared by the compiler's cost interface
// (CostOpInterface::getFlopCount on the dtc ops) and the runtime's per-kernel
// rates (--stats, traces). MLIR-free.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_FLOPS_H
#define DTC_KERNELS_FLOPS_H

#include <cstdint>

namespace dtc::kernels {

/// The product of a matmul: 2 M N K per batch, i.e. 2 K per output element.
inline double matmulProductFlops(int64_t outputElements, int64_t k) {
  return 2.0 * double(outputElements) * double(k);
}

/// Query-key pairs an attention computes: all of them, or with a causal mask
/// (Sq == Sk) the lower triangle with its diagonal.
inline double attentionPairs(int64_t batch, int64_t heads, int64_t sq,
                             int64_t sk, bool causal) {
  const double bh = double(batch) * double(heads);
  return causal ? bh * double(sq) * double(sq + 1) / 2
                : bh * double(sq) * double(sk);
}

/// Forward: q k^T and p v (2 Dh multiply-adds per pair) and the softmax
/// (max, exp, sum, scale: 5 per pair). Backward: the scores again, dp = dy
/// v^T, dv, dq and dk (5 Dh multiply-adds per pair, the usual 2.5x of the
/// forward) and the softmax's gradient (8 per pair). A kernel that
/// recomputes more is charged this much.
inline double attentionFlops(int64_t batch, int64_t heads, int64_t sq,
                             int64_t sk, int64_t headDim, bool causal,
                             bool gradient) {
  const double pairs = attentionPairs(batch, heads, sq, sk, causal);
  return gradient ? (10.0 * double(headDim) + 8.0) * pairs
                  : (4.0 * double(headDim) + 5.0) * pairs;
}

/// One block of ring attention (attention_block, and with `gradient` its
/// gradient): a causal block's visible pairs depend on its positions
/// (operands, not shapes), so it is charged half, which is exact summed over
/// a ring's n blocks of equal chunks (n^2 blocks hold the (n c)^2 / 2 causal
/// pairs).
inline double attentionBlockFlops(int64_t batch, int64_t heads, int64_t sq,
                                  int64_t sk, int64_t headDim, bool causal,
                                  bool gradient) {
  return (causal ? 0.5 : 1.0) *
         attentionFlops(batch, heads, sq, sk, headDim, false, gradient);
}

} // namespace dtc::kernels

#endif // DTC_KERNELS_FLOPS_H
