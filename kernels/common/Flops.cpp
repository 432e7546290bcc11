//===- Flops.cpp - floating-point work of the compute-bound kernels
//--------===//
#include "dtc/kernels/Flops.h"
#include "dtc/kernels/Kernel.h"

namespace dtc::kernels {

double flopCount(std::string_view name, const std::vector<TensorDesc> &in,
                 const std::vector<TensorDesc> &out,
                 const nlohmann::json &attrs) {
  // The fused epilogues count the product only: their GFLOP/s in --stats
  // read like a plain matmul's, and the epilogue's time shows as a lower
  // rate. (The ops' cost interface adds the epilogue's elementwise work.)
  if (name == "matmul" || name == "matmul_bias" || name == "matmul_gelu") {
    const Shape &a = in[0].shape, &c = out[0].shape;
    const size_t ra = a.size();
    return matmulProductFlops(rt::numel(c),
                              a[ra - (attrFlag(attrs, "transpose_a") ? 2 : 1)]);
  }
  if (name == "attention" || name == "attention_grad") {
    const Shape &q = in[0].shape, &k = in[1].shape;
    return attentionFlops(q[0], q[1], q[2], k[2], q[3],
                          attrBool(attrs, "causal"), name == "attention_grad");
  }
  if (name == "attention_block" || name == "attention_block_grad") {
    const Shape &q = in[0].shape, &k = in[1].shape;
    return attentionBlockFlops(q[0], q[1], q[2], k[2], q[3],
                               attrBool(attrs, "causal"),
                               name == "attention_block_grad");
  }
  return 0.0;
}

} // namespace dtc::kernels
