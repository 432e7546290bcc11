//===- Scratch.cpp - scratch memory of the CPU kernels ---------------------===//
//
// What each kernel's implementation holds in ScratchVector per call, stated
// next to nothing else so the compiler can plan it without the backend. A
// kernel that changes its temporaries changes its line here; the memory test
// (report vs. measured workspace) fails otherwise.
//
//===----------------------------------------------------------------------===//
#include "dtc/kernels/Kernel.h"

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

uint64_t scratchBytes(std::string_view name, const std::vector<TensorDesc> &in,
                      const std::vector<TensorDesc> &out, const nlohmann::json &) {
  // q [B, H, Sq, D], k [B, H, Sk, D]: one Sq x Sk f32 score matrix (two
  // for the gradient: P and dP).
  if (name == "attention" || name == "attention_grad") {
    const uint64_t scores = uint64_t(in[0].shape[2]) * uint64_t(in[1].shape[2]) * 4;
    return name == "attention" ? scores : 2 * scores;
  }
  // Per-column f64 accumulators of the last dimension D.
  if (name == "layer_norm_grad")
    return 4 * uint64_t(in[0].shape.back()) * 8;
  if (name == "rms_norm_grad")
    return uint64_t(in[0].shape.back()) * 8;
  // One f64/i64 accumulator per output element.
  if (name == "reduce_sum" || name == "reduce_mean")
    return elements(out[0].shape) * 8;
  return 0;
}

} // namespace dtc::kernels
