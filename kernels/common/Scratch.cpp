//===- Scratch.cpp - scratch memory of the CPU kernels
//---------------------===//
//
// What each CPU kernel holds in ScratchVector per call (kernels/cpu: the
// norms' per-chunk partial sums and per-worker rows, the cross-entropy's
// chunk sums, reduce's accumulators, batched matmul's offsets), so the
// compiler can plan it; the fused attention's tiles live in the kernel
// context's workspace instead (kernels::cpu::contextWorkspaceBytes). A kernel
// that changes its temporaries changes its line here; the memory tests
// (planned vs. measured workspace, MemoryPlanTest and memory-fit.test) fail
// otherwise.
//
//===----------------------------------------------------------------------===//
#include "dtc/kernels/Kernel.h"

#include <algorithm>

namespace dtc::kernels {

namespace {
thread_local ScratchCounter *counter = nullptr;

uint64_t elements(const Shape &s) { return uint64_t(rt::numel(s)); }
} // namespace

ScratchCounter *setThreadScratchCounter(ScratchCounter *c) {
  ScratchCounter *previous = counter;
  counter = c;
  return previous;
}

ScratchCounter *threadScratchCounter() { return counter; }

bool matmulComputesTransposed(bool transposeA, bool transposeB,
                              int64_t products, int64_t M, int64_t N) {
  // Measured on the benchmark GPTs' weight gradients (one core, oneDNN
  // 2.6): M 2048, N 512, K 4096 ran at 109 GFLOP/s as a^T b and 142 as
  // (b^T a)^T; at M <= 4N below 1024 rows both ran alike. The scratch is
  // capped at 16 MiB (4M elements): larger products were not measured, and
  // their scratch would raise the plan's peak (a 7B LLaMA's down-projection
  // gradient would take 180 MB).
  return transposeA && !transposeB && products == 1 && M >= 1024 &&
         M >= 2 * N && M * N <= (int64_t(1) << 22);
}

uint64_t scratchBytes(std::string_view name, const std::vector<TensorDesc> &in,
                      const std::vector<TensorDesc> &out,
                      const nlohmann::json &attrs, int threads) {
  threads = threads < 1 ? 1 : threads;
  // Row chunks of the norms' parameter gradients (32 rows) and of the
  // cross-entropy sum (64 rows): fixed, so results do not depend on threads.
  auto chunksOf = [](const Shape &x, uint64_t rowsPerChunk) {
    const uint64_t D = uint64_t(x.back()),
                   R = D ? uint64_t(rt::numel(x)) / D : 0;
    return std::max<uint64_t>(1, (R + rowsPerChunk - 1) / rowsPerChunk);
  };
  const bool layer = name.rfind("layer_norm", 0) == 0,
             rms = name.rfind("rms_norm", 0) == 0;
  if ((layer || rms) && name.find("grad") != std::string_view::npos) {
    const uint64_t D = uint64_t(in[0].shape.back()),
                   chunks = chunksOf(in[0].shape, 32);
    const bool paramGrad = name.find("input_grad") == std::string_view::npos;
    // f64 partial sums per chunk: dgamma and dbeta (2 D) or dgamma (D).
    uint64_t bytes = paramGrad ? chunks * (layer ? 2 : 1) * D * 8 : 0;
    // layer_norm: x-hat and its gradient rows (2 D f64) per worker.
    if (layer)
      bytes += std::min<uint64_t>(uint64_t(threads), chunks) * 2 * D * 8;
    return bytes;
  }
  // One f64 partial sum per chunk of 64 label rows.
  if (name == "cross_entropy")
    return (uint64_t(rt::numel(in[1].shape)) + 63) / 64 * 8;
  // One f64/i64 accumulator per output element.
  if (name == "reduce_sum" || name == "reduce_mean")
    return elements(out[0].shape) * 8;
  // A batch of products that does not fold into one GEMM: an offset pair
  // (2 x i64) per product (the fused epilogues run the same products).
  if (name == "matmul" || name == "matmul_bias" || name == "matmul_gelu") {
    const Shape &a = in[0].shape, &b = in[1].shape, &c = out[0].shape;
    auto batch = [](const Shape &s) {
      return uint64_t(rt::numel(Shape(s.begin(), s.end() - 2)));
    };
    const bool ta = attrFlag(attrs, "transpose_a"),
               tb = attrFlag(attrs, "transpose_b");
    const uint64_t nb = batch(c);
    if (!ta && batch(b) == 1 && batch(a) == nb)
      return 0;
    // Plus the transposed product, held beside the offsets.
    const int64_t M = c[c.size() - 2], N = c.back();
    const uint64_t transposed =
        matmulComputesTransposed(ta, tb, int64_t(nb), M, N)
            ? uint64_t(M) * uint64_t(N) * 4
            : 0;
    return nb * 16 + transposed;
  }
  return 0;
}

} // namespace dtc::kernels
