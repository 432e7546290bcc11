//===- Flops.cpp - floating-point work of the compute-bound kernels
//--------===//
#include "dtc/kernels/Kernel.h"

namespace dtc::kernels {

namespace {
// Query-key pairs an attention computes: all of them, or with a causal mask
// (Sq == Sk) the lower triangle with its diagonal.
double attentionPairs(const std::vector<TensorDesc> &in,
                      const nlohmann::json &attrs) {
  const Shape &q = in[0].shape, &k = in[1].shape;
  const double bh = double(q[0]) * double(q[1]), sq = double(q[2]),
               sk = double(k[2]);
  return attrBool(attrs, "causal") ? bh * sq * (sq + 1) / 2 : bh * sq * sk;
}
} // namespace

double flopCount(std::string_view name, const std::vector<TensorDesc> &in,
                 const std::vector<TensorDesc> &out,
                 const nlohmann::json &attrs) {
  // The fused epilogues count the product only: their GFLOP/s in --stats
  // read like a plain matmul's, and the epilogue's time shows as a lower
  // rate (its elementwise work is no flops the cost model charges a matmul).
  if (name == "matmul" || name == "matmul_bias" || name == "matmul_gelu") {
    const Shape &a = in[0].shape, &c = out[0].shape;
    const size_t ra = a.size();
    const double k = double(a[ra - (attrFlag(attrs, "transpose_a") ? 2 : 1)]);
    return 2.0 * double(rt::numel(c)) * k;
  }
  // Forward: q k^T and p v, 2 Dh multiply-adds per pair. Backward: the
  // scores again, dp = dy v^T, dv, dq and dk: 5 Dh per pair (the usual 2.5x
  // of the forward; a kernel that recomputes more is charged this much).
  if (name == "attention")
    return 4.0 * double(in[0].shape[3]) * attentionPairs(in, attrs);
  if (name == "attention_grad")
    return 10.0 * double(in[0].shape[3]) * attentionPairs(in, attrs);
  return 0.0;
}

} // namespace dtc::kernels
