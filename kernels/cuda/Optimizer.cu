//===- Optimizer.cu - sgd_update, adam_update, loss_scale_update
//-------------===//
//
// As kernels/cpu/Optimizer.cpp: each element is updated in double from the
// f32 values of its operands (g may be narrower than p) and rounded to f32
// (then to p's dtype when that is bf16/f16, as the CPU executor rounds the
// f32 kernel's results). The step, inv_scale and found_inf are device
// scalars read by every thread. Unless found_inf is exactly 0 (NaN is not)
// the step does nothing: the outputs get the inputs' bits. In place (p' = p,
// m' = m, v' = v) each thread reads its element's inputs before writing its
// outputs.
//
//===----------------------------------------------------------------------===//
#include "Common.cuh"

#include "dtc/kernels/LearningRate.h"

#include <cmath>

namespace dtc::kernels::cuda {
namespace {

/// Blocks of the update loops: enough to fill the GPU, each thread loops (and
/// evaluates the per-launch scalars once).
unsigned updateGrid(long long n, const Context &ctx) {
  const long long cap = std::max(1, ctx.smCount) * 16LL;
  return unsigned(std::min<long long>(gridFor(n), cap));
}

/// The optional loss-scaling inputs at `first` (nullptr when absent).
struct ScalingArgs {
  const float *invScale = nullptr, *foundInf = nullptr;
};
ScalingArgs scalingArgs(const KernelArgs &a, size_t first) {
  ScalingArgs s;
  if (a.in.size() >= first + 2) {
    s.invScale = a.in[first].as<float>();
    s.foundInf = a.in[first + 1].as<float>();
  }
  return s;
}

// p' = p - lr (g inv_scale + wd p). `step` is null when the rate is constant.
template <class T, class G>
__global__ void sgdKernel(const T *p, const G *g, T *out, long long n,
                          LearningRateSchedule schedule, const int64_t *step,
                          double wd, ScalingArgs sc) {
  const bool skip = sc.foundInf && *sc.foundInf != 0.0f;
  const double invScale = sc.invScale ? double(*sc.invScale) : 1.0;
  const double lr = schedule.at(step ? *step : 0);
  DTC_GRID_STRIDE(i, n) {
    if (skip) {
      out[i] = p[i];
      continue;
    }
    const double pi = double(toF(p[i]));
    const double gi = double(toF(g[i]));
    out[i] = fromF<T>(float(pi - lr * (gi * invScale + wd * pi)));
  }
}

void kSgd(const KernelArgs &a, const Context &ctx) {
  const TensorArg &p = a.in[0], &g = a.in[1];
  const long long n = p.numel;
  if (n <= 0)
    return;
  const LearningRateSchedule schedule = learningRateSchedule(*a.attrs);
  const bool stepped = schedule.varies();
  const int64_t *step = stepped ? a.in[2].as<int64_t>() : nullptr;
  const double wd = attrNum(*a.attrs, "weight_decay");
  const ScalingArgs sc = scalingArgs(a, stepped ? 3 : 2);
  dispatchFloat(p.dtype, [&](auto pt) {
    using T = decltype(pt);
    dispatchFloat(g.dtype, [&](auto gt) {
      using G = decltype(gt);
      sgdKernel<T, G><<<updateGrid(n, ctx), kThreads, 0, ctx.stream>>>(
          p.as<T>(), g.as<G>(), a.out[0].as<T>(), n, schedule, step, wd, sc);
      checkLaunch("sgd_update");
    });
  });
}

struct AdamCoefs {
  LearningRateSchedule schedule;
  double b1, b2, eps, wd;
  bool decoupled;
};

// PyTorch Adam / AdamW (docs/kernels.md), element by element in double.
template <class T, class G>
__global__ void adamKernel(const T *p, const G *g, const T *m, const T *v,
                           const int64_t *step, T *po, T *mo, T *vo,
                           long long n, AdamCoefs c, ScalingArgs sc) {
  const bool skip = sc.foundInf && *sc.foundInf != 0.0f;
  const double invScale = sc.invScale ? double(*sc.invScale) : 1.0;
  const double lr = c.schedule.at(*step);
  const double t = double(*step) + 1.0;
  const double bc1 = 1.0 - pow(c.b1, t), bc2 = 1.0 - pow(c.b2, t);
  DTC_GRID_STRIDE(i, n) {
    // Every input of element i is read before any output is written.
    const T p0 = p[i], m0 = m[i], v0 = v[i];
    if (skip) {
      po[i] = p0;
      mo[i] = m0;
      vo[i] = v0;
      continue;
    }
    double pi = double(toF(p0)), gi = double(toF(g[i])) * invScale;
    if (!c.decoupled)
      gi += c.wd * pi;
    const double mi = c.b1 * double(toF(m0)) + (1.0 - c.b1) * gi;
    const double vi = c.b2 * double(toF(v0)) + (1.0 - c.b2) * gi * gi;
    const double mh = mi / bc1, vh = vi / bc2;
    if (c.decoupled)
      pi -= lr * c.wd * pi;
    pi -= lr * mh / (sqrt(vh) + c.eps);
    mo[i] = fromF<T>(float(mi));
    vo[i] = fromF<T>(float(vi));
    po[i] = fromF<T>(float(pi));
  }
}

void kAdam(const KernelArgs &a, const Context &ctx) {
  const TensorArg &p = a.in[0], &g = a.in[1], &m = a.in[2], &v = a.in[3],
                  &step = a.in[4];
  const long long n = p.numel;
  if (n <= 0)
    return;
  const nlohmann::json &at = *a.attrs;
  const AdamCoefs c{learningRateSchedule(*a.attrs), attrNum(at, "beta1"),
                    attrNum(at, "beta2"),           attrNum(at, "eps"),
                    attrNum(at, "weight_decay"),    attrBool(at, "decoupled")};
  const ScalingArgs sc = scalingArgs(a, 5);
  dispatchFloat(p.dtype, [&](auto pt) {
    using T = decltype(pt);
    dispatchFloat(g.dtype, [&](auto gt) {
      using G = decltype(gt);
      adamKernel<T, G><<<updateGrid(n, ctx), kThreads, 0, ctx.stream>>>(
          p.as<T>(), g.as<G>(), m.as<T>(), v.as<T>(), step.as<int64_t>(),
          a.out[0].as<T>(), a.out[1].as<T>(), a.out[2].as<T>(), n, c, sc);
      checkLaunch("adam_update");
    });
  });
}

// PyTorch's GradScaler update on the rank's scalars (one thread; every input
// is read before an output is written, so in place is safe).
__global__ void lossScaleKernel(const float *scale, const int64_t *good,
                                const int64_t *skipped, const float *found,
                                float *scaleOut, int64_t *goodOut,
                                int64_t *skippedOut, double growth,
                                double backoff, long long interval) {
  const float s = *scale, f = *found;
  long long gd = (long long)*good, sk = (long long)*skipped;
  float next = s;
  if (f != 0.0f) { // an overflow (NaN compares unequal too)
    next = float(double(s) * backoff);
    gd = 0;
    ++sk;
  } else if (++gd >= interval) {
    next = float(double(s) * growth);
    gd = 0;
  }
  *scaleOut = next;
  *goodOut = gd;
  *skippedOut = sk;
}

void kLossScaleUpdate(const KernelArgs &a, const Context &ctx) {
  lossScaleKernel<<<1, 1, 0, ctx.stream>>>(
      a.in[0].as<float>(), a.in[1].as<int64_t>(), a.in[2].as<int64_t>(),
      a.in[3].as<float>(), a.out[0].as<float>(), a.out[1].as<int64_t>(),
      a.out[2].as<int64_t>(), attrNum(*a.attrs, "growth_factor"),
      attrNum(*a.attrs, "backoff_factor"),
      (long long)attrInt(*a.attrs, "growth_interval"));
  checkLaunch("loss_scale_update");
}

} // namespace

const std::vector<Entry> &optimizerKernels() {
  static const std::vector<Entry> entries = {
      {"sgd_update", kSgd},
      {"adam_update", kAdam},
      {"loss_scale_update", kLossScaleUpdate},
  };
  return entries;
}

} // namespace dtc::kernels::cuda
