//===- MoeCases.cpp - CUDA kernel cases (see KernelCases.h) --------------===//
//
// kernels/cuda/Moe.cu against kernels/cpu/Moe.cpp. Random probabilities
// route (both backends break ties alike); the slot kernels take random
// experts and positions (-1: dropped). Dispatch writes each slot's row, so
// its slots must own distinct rows, which random draws cannot promise but
// one slot can; the end-to-end GPU plans (test/gpu, the gptmoe model) run
// every kernel on real routes. A slot naming an expert past E is the same
// error on both.
//
//===----------------------------------------------------------------------===//
#include "KernelCases.h"

namespace dtc::test {
namespace {
using rt::DType;
using rt::Shape;

constexpr DType F32 = DType::F32, BF16 = DType::BF16, I32 = DType::I32;

OperandSpec op(DType t, Shape s, double lo = -1.0, double hi = 1.0) {
  return OperandSpec{t, std::move(s), lo, hi};
}

KernelCase route(std::string label, DType t, int64_t T, int64_t E, int64_t k,
                 int64_t capacity) {
  return {std::move(label),
          "moe_route",
          {op(t, {T, E}, 0.0, 1.0)},
          {op(I32, {T, k}), op(I32, {T, k}), op(t, {T, k})},
          {{"top_k", k}, {"capacity", capacity}}};
}

KernelCase routeGrad(std::string label, DType t, int64_t T, int64_t E) {
  // One slot per token (k = 1): any expert is a valid, distinct choice.
  return {std::move(label),
          "moe_route_grad",
          {op(t, {T, E}, 0.05, 1.0), op(I32, {T, 1}, 0, double(E - 1)),
           op(t, {T, 1})},
          {op(t, {T, E})}};
}

/// One token, one slot, a position in [-1, C).
KernelCase dispatchCase(std::string label, DType t, int64_t D) {
  return {std::move(label),
          "moe_dispatch",
          {op(t, {1, D}), op(I32, {1, 1}, 0, 3), op(I32, {1, 1}, -1, 2),
           op(t, {1, 1})},
          {op(t, {4, 3, D})}};
}

KernelCase combine(std::string label, DType t, int64_t T, int64_t k, int64_t E,
                   int64_t C, int64_t D) {
  return {std::move(label),
          "moe_combine",
          {op(t, {E, C, D}), op(I32, {T, k}, 0, double(E - 1)),
           op(I32, {T, k}, -1, double(C - 1)), op(t, {T, k})},
          {op(t, {T, D})}};
}

KernelCase slotDot(std::string label, DType t, int64_t T, int64_t k, int64_t E,
                   int64_t C, int64_t D) {
  return {std::move(label),
          "moe_slot_dot",
          {op(t, {T, D}), op(t, {E, C, D}), op(I32, {T, k}, 0, double(E - 1)),
           op(I32, {T, k}, -1, double(C - 1))},
          {op(t, {T, k})}};
}

KernelCase withError(KernelCase c, std::string message) {
  c.expectError = std::move(message);
  return c;
}

std::vector<KernelCase> moeCases() {
  std::vector<KernelCase> cases = {
      route("moe_route top-2 of 8, capacity drops", F32, 64, 8, 2, 12),
      route("moe_route top-1 bf16", BF16, 40, 4, 1, 40),
      route("moe_route top-4 of 4", F32, 9, 4, 4, 9),
      routeGrad("moe_route_grad f32", F32, 50, 6),
      routeGrad("moe_route_grad bf16", BF16, 17, 3),
      dispatchCase("moe_dispatch one slot", F32, 130),
      dispatchCase("moe_dispatch one slot bf16", BF16, 8),
      combine("moe_combine top-2", F32, 37, 2, 4, 6, 33),
      combine("moe_combine bf16", BF16, 10, 3, 5, 2, 64),
      slotDot("moe_slot_dot wide rows", F32, 21, 2, 3, 4, 300),
      slotDot("moe_slot_dot bf16", BF16, 12, 1, 2, 5, 40),
      {"moe_first_choice_fraction",
       "moe_first_choice_fraction",
       {op(I32, {100, 2}, 0, 6)},
       {op(F32, {7})}},
  };
  KernelCase bad =
      combine("moe_combine expert out of range", F32, 1, 1, 2, 2, 4);
  bad.in[1].lo = bad.in[1].hi = 2;
  bad.in[2].lo = bad.in[2].hi = 0;
  cases.push_back(withError(
      bad, "moe_combine: expert 2 at position [0, 0] is outside [0, 2)"));
  return cases;
}

AddKernelCases cases(moeCases());

} // namespace
} // namespace dtc::test
