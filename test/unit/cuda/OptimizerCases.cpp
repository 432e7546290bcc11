//===- OptimizerCases.cpp - CUDA kernel cases (see KernelCases.h)
//---------------===//
//
// kernels/cuda/Optimizer.cu: sgd_update and adam_update for every dtype pair
// the rule allows (g as wide as p or narrower: bf16/f16 gradients of f32
// master weights, bf16 and f16 parameters), Adam and AdamW at steps 0, 1
// and 6, with and without the loss-scaling inputs (found_inf 0: the step
// runs with inv_scale; found_inf non-zero: the outputs are the inputs), in
// place and not; loss_scale_update's growth, no growth and backoff, in
// place and not.
//
// Scalars are fixed with lo = hi.
//
//===----------------------------------------------------------------------===//
#include "KernelCases.h"

namespace dtc::test {
namespace {
using rt::DType;
using rt::Shape;

constexpr DType F32 = DType::F32, BF16 = DType::BF16, F16 = DType::F16,
                I64 = DType::I64;

OperandSpec op(DType t, Shape s, double lo = -1.0, double hi = 1.0) {
  return OperandSpec{t, std::move(s), lo, hi};
}
OperandSpec fixed(DType t, double v) { return op(t, {}, v, v); }

/// inv_scale drawn in [0.25, 1], found_inf fixed.
std::vector<OperandSpec> scaling(double foundInf) {
  return {op(F32, {}, 0.25, 1.0), fixed(F32, foundInf)};
}

KernelCase sgd(std::string label, DType p, DType g, Shape s, double wd = 0.01,
               std::vector<OperandSpec> extra = {}) {
  KernelCase c{std::move(label),
               "sgd_update",
               {op(p, s), op(g, s)},
               {op(p, s)},
               {{"lr", 0.1}, {"weight_decay", wd}}};
  for (OperandSpec &e : extra)
    c.in.push_back(std::move(e));
  return c;
}

KernelCase adam(std::string label, DType p, DType g, Shape s, int64_t step,
                bool decoupled, double wd = 0.01,
                std::vector<OperandSpec> extra = {}) {
  KernelCase c{std::move(label),
               "adam_update",
               {op(p, s), op(g, s), op(p, s, -0.1, 0.1), op(p, s, 0.0, 0.01),
                fixed(I64, double(step))},
               {op(p, s), op(p, s), op(p, s)},
               {{"lr", 1e-3},
                {"beta1", 0.9},
                {"beta2", 0.999},
                {"eps", 1e-8},
                {"weight_decay", wd},
                {"decoupled", decoupled}}};
  for (OperandSpec &e : extra)
    c.in.push_back(std::move(e));
  return c;
}

/// The case under a learning-rate schedule (warmup 2, decay to 0.1·lr at
/// update 9) at `step`; sgd_update then takes the step as input 2.
KernelCase scheduled(KernelCase c, const char *kind, int64_t step) {
  const double lr = c.attrs["lr"].get<double>();
  c.attrs.update({{"lr_schedule", kind},
                  {"warmup_steps", 2},
                  {"decay_steps", 9},
                  {"min_lr", 0.1 * lr}});
  if (c.kernel == "sgd_update")
    c.in.insert(c.in.begin() + 2, fixed(I64, double(step)));
  c.label += std::string(" ") + kind + " step " + std::to_string(step);
  return c;
}

KernelCase inPlace(KernelCase c, std::vector<std::pair<int, int>> pairs) {
  c.inPlace = std::move(pairs);
  return c;
}
const std::vector<std::pair<int, int>> kAdamInPlace = {{0, 0}, {1, 2}, {2, 3}};

KernelCase lossScale(std::string label, double scale, int64_t good,
                     int64_t skipped, double found, int64_t interval) {
  return {std::move(label),
          "loss_scale_update",
          {fixed(F32, scale), fixed(I64, double(good)),
           fixed(I64, double(skipped)), fixed(F32, found)},
          {op(F32, {}), op(I64, {}), op(I64, {})},
          {{"growth_factor", 2.0},
           {"backoff_factor", 0.5},
           {"growth_interval", interval}}};
}

AddKernelCases cases({
    // ---- sgd_update ----
    sgd("sgd_update f32 [1000]", F32, F32, {1000}),
    sgd("sgd_update f32 [33, 17] no decay", F32, F32, {33, 17}, 0.0),
    sgd("sgd_update f32 [1]", F32, F32, {1}),
    sgd("sgd_update f32 rank 4", F32, F32, {2, 3, 5, 7}),
    sgd("sgd_update bf16 g f32 p", F32, BF16, {33, 17}),
    sgd("sgd_update f16 g f32 p", F32, F16, {33, 17}),
    sgd("sgd_update bf16", BF16, BF16, {513}),
    sgd("sgd_update f16", F16, F16, {513}),
    sgd("sgd_update f16 g bf16 p", BF16, F16, {100}),
    sgd("sgd_update bf16 g f16 p", F16, BF16, {100}),
    sgd("sgd_update scaled", F32, F32, {1000}, 0.01, scaling(0)),
    sgd("sgd_update scaled bf16 g", F32, BF16, {1000}, 0.01, scaling(0)),
    sgd("sgd_update found_inf skips", F32, F32, {1000}, 0.01, scaling(1)),
    sgd("sgd_update found_inf skips bf16", BF16, BF16, {300}, 0.01, scaling(3)),
    inPlace(sgd("sgd_update in place", F32, F32, {777}), {{0, 0}}),
    inPlace(sgd("sgd_update in place bf16 g", F32, BF16, {777}), {{0, 0}}),
    inPlace(sgd("sgd_update in place scaled", F32, F32, {777}, 0.01,
                scaling(0)),
            {{0, 0}}),
    inPlace(sgd("sgd_update in place found_inf", F32, F32, {777}, 0.01,
                scaling(1)),
            {{0, 0}}),
    sgd("sgd_update realistic", F32, F32, {1 << 20}),
    scheduled(sgd("sgd_update", F32, F32, {1000}), "cosine", 0),
    scheduled(sgd("sgd_update", F32, F32, {1000}), "cosine", 5),
    scheduled(sgd("sgd_update", BF16, BF16, {513}), "linear", 12),
    scheduled(sgd("sgd_update scaled", F32, F32, {1000}, 0.01, scaling(0)),
              "cosine", 4),
    scheduled(sgd("sgd_update found_inf skips", F32, F32, {300}, 0.01,
                  scaling(1)),
              "linear", 4),

    // ---- adam_update ----
    scheduled(adam("adam_update", F32, F32, {1000}, 1, true), "cosine", 1),
    scheduled(adam("adam_update", F32, F32, {1000}, 6, false), "cosine", 6),
    scheduled(adam("adam_update scaled", F32, BF16, {1000}, 6, true, 0.01,
                   scaling(0)),
              "linear", 6),
    adam("adam_update step 0 adam", F32, F32, {1000}, 0, false),
    adam("adam_update step 0 adamw", F32, F32, {1000}, 0, true),
    adam("adam_update step 1 adam", F32, F32, {33, 17}, 1, false),
    adam("adam_update step 1 adamw", F32, F32, {33, 17}, 1, true),
    adam("adam_update step 6 adam", F32, F32, {3, 5, 7}, 6, false),
    adam("adam_update step 6 adamw", F32, F32, {3, 5, 7}, 6, true),
    adam("adam_update no decay", F32, F32, {257}, 6, true, 0.0),
    adam("adam_update [1]", F32, F32, {1}, 1, false),
    adam("adam_update bf16 g f32 p", F32, BF16, {2, 3, 5, 7}, 1, true),
    // f32 masters take the four-wide path: a realistic size with a tail of
    // 3, and f16 gradients.
    adam("adam_update realistic bf16 g", F32, BF16, {1 << 20 | 3}, 6, true),
    adam("adam_update four wide f16 g", F32, F16, {4, 64}, 6, false),
    adam("adam_update f16 g f32 p", F32, F16, {2, 3, 5, 7}, 6, false),
    adam("adam_update bf16", BF16, BF16, {513}, 1, true),
    adam("adam_update f16", F16, F16, {513}, 6, false),
    adam("adam_update bf16 g f16 p", F16, BF16, {100}, 1, true),
    adam("adam_update scaled adam", F32, F32, {1000}, 1, false, 0.01,
         scaling(0)),
    adam("adam_update scaled adamw bf16 g", F32, BF16, {1000}, 6, true, 0.01,
         scaling(0)),
    adam("adam_update found_inf skips", F32, F32, {1000}, 1, true, 0.01,
         scaling(1)),
    adam("adam_update found_inf skips bf16", BF16, BF16, {300}, 0, false, 0.01,
         scaling(2)),
    inPlace(adam("adam_update in place adamw", F32, F32, {1000}, 1, true),
            kAdamInPlace),
    inPlace(adam("adam_update in place adam bf16 g", F32, BF16, {1000}, 6,
                 false),
            kAdamInPlace),
    inPlace(adam("adam_update in place scaled", F32, F32, {1000}, 1, true, 0.01,
                 scaling(0)),
            kAdamInPlace),
    inPlace(adam("adam_update in place found_inf", F32, F32, {1000}, 1, true,
                 0.01, scaling(1)),
            kAdamInPlace),
    inPlace(adam("adam_update in place p only", F32, F32, {500}, 0, true),
            {{0, 0}}),
    adam("adam_update realistic", F32, BF16, {1 << 20}, 6, true),

    // ---- loss_scale_update ----
    lossScale("loss_scale_update grows", 1024, 3, 2, 0, 4),
    lossScale("loss_scale_update counts", 1024, 3, 2, 0, 10),
    lossScale("loss_scale_update backs off", 1024, 3, 2, 1, 4),
    lossScale("loss_scale_update backs off any non-zero", 65536, 7, 0, -5, 100),
    inPlace(lossScale("loss_scale_update in place grows", 512, 0, 1, 0, 1),
            {{0, 0}, {1, 1}, {2, 2}}),
    inPlace(lossScale("loss_scale_update in place backs off", 512, 9, 1, 1, 10),
            {{0, 0}, {1, 1}, {2, 2}}),
});

} // namespace
} // namespace dtc::test
