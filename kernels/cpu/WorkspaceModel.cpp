//===- WorkspaceModel.cpp - the memory the CPU kernels take ---------------===//
//
// Formulas only (library dtc_kernels_cpu_model: no oneDNN, no OpenMP), so
// the compiler's memory plan links them without the kernels. A kernel that
// changes what it allocates changes its formula here; the memory tests
// (planned vs. measured, MemoryPlanTest and memory-fit.test) fail otherwise.
//
//===----------------------------------------------------------------------===//
#include "Attention.h"
#include "dtc/kernels/CpuKernels.h"

#include <algorithm>

namespace dtc::kernels::cpu {

uint64_t contextWorkspaceBytes(std::string_view name,
                               const std::vector<TensorDesc> &in,
                               const std::vector<TensorDesc> &,
                               const nlohmann::json &, int threads) {
  const bool forward = name == "attention" || name == "attention_block";
  if (!forward && name != "attention_grad" && name != "attention_block_grad")
    return 0;
  // q [B, H, Sq, D], k [B, Hkv, Sk, D]: the forwards hand out one task per
  // row block of every query head, the backwards one per key/value head
  // (attentionForward / attentionBackward and their ring blocks').
  const AttentionBlocks b;
  const Shape &q = in[0].shape, &k = in[1].shape;
  const int64_t BH = q[0] * q[1], Sq = q[2], D = q[3];
  const int64_t tasks =
      forward ? BH * ((Sq + b.rows - 1) / b.rows) : q[0] * k[1];
  const int64_t workers =
      std::min<int64_t>(std::max(threads, 1), std::max<int64_t>(1, tasks));
  const uint64_t floats =
      uint64_t(attentionRowScratchFloats(b, D)) * uint64_t(workers);
  return (floats * sizeof(float) + 63) / 64 *
         64; // KernelContext::workspace's rounding
}

bool handlesLowPrecision(std::string_view name) {
  // Kernels that only move elements (any element size) or convert them.
  for (std::string_view k :
       {"copy", "reshape", "broadcast", "transpose", "pad", "cast"})
    if (name == k)
      return true;
  return false;
}

uint64_t f32CopyBytes(int64_t numel) {
  return (uint64_t(numel) * sizeof(float) + 63) / 64 * 64;
}

uint64_t lowPrecisionCopyBytes(std::string_view name,
                               const std::vector<TensorDesc> &in,
                               const std::vector<TensorDesc> &out) {
  if (handlesLowPrecision(name))
    return 0;
  uint64_t bytes = 0;
  for (const std::vector<TensorDesc> *list : {&in, &out})
    for (const TensorDesc &t : *list)
      if (rt::isLowPrecision(t.dtype))
        bytes += f32CopyBytes(rt::numel(t.shape));
  return bytes;
}

namespace {
class CpuWorkspaceModel final : public artifact::WorkspaceModel {
public:
  uint64_t contextBytes(std::string_view name,
                        const std::vector<TensorDesc> &in,
                        const std::vector<TensorDesc> &out,
                        const nlohmann::json &attrs,
                        int threads) const override {
    return contextWorkspaceBytes(name, in, out, attrs, threads);
  }
  uint64_t conversionBytes(std::string_view name,
                           const std::vector<TensorDesc> &in,
                           const std::vector<TensorDesc> &out) const override {
    return lowPrecisionCopyBytes(name, in, out);
  }
  uint64_t scratchBytes(std::string_view name,
                        const std::vector<TensorDesc> &in,
                        const std::vector<TensorDesc> &out,
                        const nlohmann::json &attrs,
                        int threads) const override {
    return kernels::scratchBytes(name, in, out, attrs, threads);
  }
};
} // namespace

const artifact::WorkspaceModel &workspaceModel() {
  static const CpuWorkspaceModel model;
  return model;
}

} // namespace dtc::kernels::cpu
