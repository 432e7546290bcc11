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
#include <cstdint>
#include <type_traits>

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

/// The per-launch scalars of one Adam step, evaluated once per thread.
struct AdamStep {
  double lr, bc1, bc2, invScale;
  bool skip;
};

__device__ __forceinline__ AdamStep adamStep(const AdamCoefs &c,
                                             const int64_t *step,
                                             const ScalingArgs &sc) {
  const double t = double(*step) + 1.0;
  return {c.schedule.at(*step), 1.0 - pow(c.b1, t), 1.0 - pow(c.b2, t),
          sc.invScale ? double(*sc.invScale) : 1.0,
          sc.foundInf && *sc.foundInf != 0.0f};
}

/// One element of PyTorch Adam / AdamW (docs/kernels.md) in double, from
/// the f32 values of its inputs; the new p, m, v before rounding.
__device__ __forceinline__ void adamElement(const AdamCoefs &c,
                                            const AdamStep &s, float p0,
                                            float g0, float m0, float v0,
                                            float &p1, float &m1, float &v1) {
  double pi = double(p0), gi = double(g0) * s.invScale;
  if (!c.decoupled)
    gi += c.wd * pi;
  const double mi = c.b1 * double(m0) + (1.0 - c.b1) * gi;
  const double vi = c.b2 * double(v0) + (1.0 - c.b2) * gi * gi;
  const double mh = mi / s.bc1, vh = vi / s.bc2;
  if (c.decoupled)
    pi -= s.lr * c.wd * pi;
  pi -= s.lr * mh / (sqrt(vh) + c.eps);
  p1 = float(pi);
  m1 = float(mi);
  v1 = float(vi);
}

// Any dtypes, one element per iteration.
template <class T, class G>
__global__ void adamKernel(const T *p, const G *g, const T *m, const T *v,
                           const int64_t *step, T *po, T *mo, T *vo,
                           long long n, AdamCoefs c, ScalingArgs sc) {
  const AdamStep s = adamStep(c, step, sc);
  DTC_GRID_STRIDE(i, n) {
    // Every input of element i is read before any output is written.
    const T p0 = p[i], m0 = m[i], v0 = v[i];
    if (s.skip) {
      po[i] = p0;
      mo[i] = m0;
      vo[i] = v0;
      continue;
    }
    float p1, m1, v1;
    adamElement(c, s, toF(p0), toF(g[i]), toF(m0), toF(v0), p1, m1, v1);
    mo[i] = fromF<T>(m1);
    vo[i] = fromF<T>(v1);
    po[i] = fromF<T>(p1);
  }
}

/// Four gradient elements from one aligned load (16 bytes of f32, 8 of
/// bf16/f16).
template <class G> struct Grad4;
template <> struct Grad4<float> {
  using Vec = float4;
  static __device__ __forceinline__ float4 load(const float *g, long long j) {
    return reinterpret_cast<const float4 *>(g)[j];
  }
};
template <class G16> struct Grad4Half {
  using Vec = uint2;
  static __device__ __forceinline__ float4 load(const G16 *g, long long j) {
    const uint2 raw = reinterpret_cast<const uint2 *>(g)[j];
    const G16 *h = reinterpret_cast<const G16 *>(&raw);
    return make_float4(toF(h[0]), toF(h[1]), toF(h[2]), toF(h[3]));
  }
};
template <> struct Grad4<__nv_bfloat16> : Grad4Half<__nv_bfloat16> {};
template <> struct Grad4<__half> : Grad4Half<__half> {};

/// f32 parameters and moments (mixed precision's masters, f32 training):
/// four elements per iteration through 16-byte loads and stores, the same
/// arithmetic per element as adamKernel (bitwise the same results). The
/// optimizer step is bound by memory (7 streams), and one load per operand
/// per four elements is what reaches the bandwidth. Needs n4 = n / 4
/// vectors and every pointer aligned; the tail goes to adamKernel.
template <class G>
__global__ void adamKernel4(const float *p, const G *g, const float *m,
                            const float *v, const int64_t *step, float *po,
                            float *mo, float *vo, long long n4, AdamCoefs c,
                            ScalingArgs sc) {
  const AdamStep s = adamStep(c, step, sc);
  DTC_GRID_STRIDE(j, n4) {
    const float4 p0 = reinterpret_cast<const float4 *>(p)[j],
                 m0 = reinterpret_cast<const float4 *>(m)[j],
                 v0 = reinterpret_cast<const float4 *>(v)[j];
    float4 p1 = p0, m1 = m0, v1 = v0;
    if (!s.skip) {
      const float4 g0 = Grad4<G>::load(g, j);
      adamElement(c, s, p0.x, g0.x, m0.x, v0.x, p1.x, m1.x, v1.x);
      adamElement(c, s, p0.y, g0.y, m0.y, v0.y, p1.y, m1.y, v1.y);
      adamElement(c, s, p0.z, g0.z, m0.z, v0.z, p1.z, m1.z, v1.z);
      adamElement(c, s, p0.w, g0.w, m0.w, v0.w, p1.w, m1.w, v1.w);
    }
    reinterpret_cast<float4 *>(mo)[j] = m1;
    reinterpret_cast<float4 *>(vo)[j] = v1;
    reinterpret_cast<float4 *>(po)[j] = p1;
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
      const T *pp = p.as<T>(), *mp = m.as<T>(), *vp = v.as<T>();
      const G *gp = g.as<G>();
      T *po = a.out[0].as<T>(), *mo = a.out[1].as<T>(), *vo = a.out[2].as<T>();
      long long done = 0;
      if constexpr (std::is_same_v<T, float>) {
        bool vec = alignedTo(gp, 4 * sizeof(G));
        for (const void *ptr :
             {(const void *)pp, (const void *)mp, (const void *)vp,
              (const void *)po, (const void *)mo, (const void *)vo})
          vec = vec && alignedTo(ptr, 16);
        if (vec && n >= 4) {
          const long long n4 = n / 4;
          adamKernel4<G><<<updateGrid(n4, ctx), kThreads, 0, ctx.stream>>>(
              pp, gp, mp, vp, step.as<int64_t>(), po, mo, vo, n4, c, sc);
          checkLaunch("adam_update");
          done = 4 * n4;
        }
      }
      if (done < n) {
        adamKernel<T, G>
            <<<updateGrid(n - done, ctx), kThreads, 0, ctx.stream>>>(
                pp + done, gp + done, mp + done, vp + done, step.as<int64_t>(),
                po + done, mo + done, vo + done, n - done, c, sc);
        checkLaunch("adam_update");
      }
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
