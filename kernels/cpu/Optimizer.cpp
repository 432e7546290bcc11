//===- Optimizer.cpp - sgd_update and adam_update
//---------------------------===//
#include "Common.h"
#include "Parallel.h"
#include "VecMath.h"

#include "dtc/kernels/LearningRate.h"

#include <cmath>
#include <cstring>
#include <initializer_list>

namespace dtc::kernels::cpu {
namespace {

// Dynamic loss scaling gives the updates two more inputs, at `first`:
// inv_scale (the gradient is multiplied by it, in double) and found_inf (the
// step is skipped unless it is exactly 0; NaN compares unequal too).
// Skipping copies the state inputs to the outputs (nothing to do in place).
struct Scaling {
  double invScale = 1.0;
  bool skip = false;
};
Scaling scalingOf(const KernelArgs &a, size_t first,
                  std::initializer_list<std::pair<size_t, size_t>> keep) {
  Scaling s;
  if (a.in.size() <= first)
    return s;
  s.invScale = double(a.in[first].as<float>()[0]);
  s.skip = a.in[first + 1].as<float>()[0] != 0.0f;
  if (s.skip)
    for (auto [out, in] : keep)
      if (a.out[out].data != a.in[in].data)
        std::memcpy(a.out[out].data, a.in[in].data,
                    size_t(a.in[in].numel) * sizeof(float));
  return s;
}

// p' = p - lr (g + wd p). p' may be p (in place). The optimizer step is
// input 2 when the rate changes with it, before the loss-scaling inputs.
void kSgd(const KernelArgs &a) {
  const LearningRateSchedule schedule = learningRateSchedule(*a.attrs);
  const bool stepped = schedule.varies();
  const Scaling sc = scalingOf(a, stepped ? 3 : 2, {{0, 0}});
  if (sc.skip)
    return;
  const double lr = schedule.at(stepped ? a.in[2].as<int64_t>()[0] : 0),
               wd = attrNum(*a.attrs, "weight_decay");
  const float *p = a.in[0].as<float>(), *g = a.in[1].as<float>();
  float *out = a.out[0].as<float>();
  const int64_t n = a.in[0].numel;
  for (int64_t i = 0; i < n; ++i)
    out[i] = float(double(p[i]) -
                   lr * (double(g[i]) * sc.invScale + wd * double(p[i])));
}

struct AdamCoefs {
  double lr, b1, b2, eps, wd, bc1, bc2, invScale;
  bool decoupled;
};

template <bool Decoupled>
DTC_VECTOR_CLONES void adamRange(AdamCoefs c, const float *p, const float *g,
                                 const float *m, const float *v, float *po,
                                 float *mo, float *vo, int64_t n) {
  // The bias corrections multiply by their reciprocals: a double division
  // per element costs more than the rest of the update (one core: 9.1 ms
  // for 3.2M elements with three divisions, 6.4 ms with one), and the f32
  // results round alike (no element of 3.2M differed).
  const double lr = c.lr, b1 = c.b1, b2 = c.b2, eps = c.eps, wd = c.wd,
               inverseBc1 = 1.0 / c.bc1, inverseBc2 = 1.0 / c.bc2,
               invScale = c.invScale;
  // Each iteration reads and writes element i only, so it vectorizes also
  // in place (p' = p, m' = m, v' = v: the usual case), which the compiler's
  // own overlap check would send to the scalar loop.
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    double pi = p[i], gi = double(g[i]) * invScale;
    if (!Decoupled)
      gi += wd * pi;
    const double mi = b1 * double(m[i]) + (1.0 - b1) * gi;
    const double vi = b2 * double(v[i]) + (1.0 - b2) * gi * gi;
    const double mh = mi * inverseBc1, vh = vi * inverseBc2;
    if (Decoupled)
      pi -= lr * wd * pi;
    pi -= lr * mh / (std::sqrt(vh) + eps);
    mo[i] = float(mi);
    vo[i] = float(vi);
    po[i] = float(pi);
  }
}

// PyTorch Adam / AdamW (docs/kernels.md), element by element in double.
void kAdam(const KernelArgs &a) {
  const Scaling sc = scalingOf(a, 5, {{0, 0}, {1, 2}, {2, 3}});
  if (sc.skip)
    return;
  const nlohmann::json &at = *a.attrs;
  const int64_t step = a.in[4].as<int64_t>()[0];
  const double lr = learningRateSchedule(*a.attrs).at(step),
               b1 = attrNum(at, "beta1"), b2 = attrNum(at, "beta2"),
               eps = attrNum(at, "eps"), wd = attrNum(at, "weight_decay");
  const bool decoupled = attrBool(at, "decoupled");
  const double t = double(step) + 1.0;
  const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
  const float *p = a.in[0].as<float>(), *g = a.in[1].as<float>(),
              *m = a.in[2].as<float>(), *v = a.in[3].as<float>();
  float *po = a.out[0].as<float>(), *mo = a.out[1].as<float>(),
        *vo = a.out[2].as<float>();
  const AdamCoefs c{lr, b1, b2, eps, wd, bc1, bc2, sc.invScale, decoupled};
  parallelFor(contextOf(a), a.in[0].numel, 1 << 14,
              [&](int64_t b, int64_t e, int) {
                if (decoupled)
                  adamRange<true>(c, p + b, g + b, m + b, v + b, po + b, mo + b,
                                  vo + b, e - b);
                else
                  adamRange<false>(c, p + b, g + b, m + b, v + b, po + b,
                                   mo + b, vo + b, e - b);
              });
}

// PyTorch's GradScaler update, on one rank's replicated scalars.
void kLossScaleUpdate(const KernelArgs &a) {
  const float scale = a.in[0].as<float>()[0], found = a.in[3].as<float>()[0];
  int64_t good = a.in[1].as<int64_t>()[0],
          skippedSteps = a.in[2].as<int64_t>()[0];
  float next = scale;
  if (found != 0.0f) { // an overflow (NaN compares unequal too)
    next = float(double(scale) * attrNum(*a.attrs, "backoff_factor"));
    good = 0;
    ++skippedSteps;
  } else if (++good >= attrInt(*a.attrs, "growth_interval")) {
    next = float(double(scale) * attrNum(*a.attrs, "growth_factor"));
    good = 0;
  }
  a.out[0].as<float>()[0] = next;
  a.out[1].as<int64_t>()[0] = good;
  a.out[2].as<int64_t>()[0] = skippedSteps;
}

} // namespace

const std::vector<Entry> &optimizerKernels() {
  static const std::vector<Entry> e = {
      {"sgd_update", kSgd},
      {"adam_update", kAdam},
      {"loss_scale_update", kLossScaleUpdate},
  };
  return e;
}

} // namespace dtc::kernels::cpu
