//===- Optimizer.cpp - sgd_update and adam_update ---------------------------===//
#include "Common.h"
#include "Parallel.h"
#include "VecMath.h"

#include <cmath>

namespace dtc::kernels::cpu {
namespace {

// p' = p - lr (g + wd p). p' may be p (in place).
void kSgd(const KernelArgs &a) {
  const double lr = attrNum(*a.attrs, "lr"), wd = attrNum(*a.attrs, "weight_decay");
  const float *p = a.in[0].as<float>(), *g = a.in[1].as<float>();
  float *out = a.out[0].as<float>();
  const int64_t n = a.in[0].numel;
  for (int64_t i = 0; i < n; ++i)
    out[i] = float(double(p[i]) - lr * (double(g[i]) + wd * double(p[i])));
}

struct AdamCoefs {
  double lr, b1, b2, eps, wd, bc1, bc2;
  bool decoupled;
};

template <bool Decoupled>
DTC_VECTOR_CLONES void adamRange(AdamCoefs c, const float *p, const float *g, const float *m,
                                 const float *v, float *po, float *mo, float *vo, int64_t n) {
  const double lr = c.lr, b1 = c.b1, b2 = c.b2, eps = c.eps, wd = c.wd, bc1 = c.bc1,
               bc2 = c.bc2;
  // Each iteration reads and writes element i only, so it vectorizes also
  // in place (p' = p, m' = m, v' = v: the usual case), which the compiler's
  // own overlap check would send to the scalar loop.
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    double pi = p[i], gi = g[i];
    if (!Decoupled) gi += wd * pi;
    const double mi = b1 * double(m[i]) + (1.0 - b1) * gi;
    const double vi = b2 * double(v[i]) + (1.0 - b2) * gi * gi;
    const double mh = mi / bc1, vh = vi / bc2;
    if (Decoupled) pi -= lr * wd * pi;
    pi -= lr * mh / (std::sqrt(vh) + eps);
    mo[i] = float(mi);
    vo[i] = float(vi);
    po[i] = float(pi);
  }
}

// PyTorch Adam / AdamW (docs/kernels.md), element by element in double.
void kAdam(const KernelArgs &a) {
  const nlohmann::json &at = *a.attrs;
  const double lr = attrNum(at, "lr"), b1 = attrNum(at, "beta1"),
               b2 = attrNum(at, "beta2"), eps = attrNum(at, "eps"),
               wd = attrNum(at, "weight_decay");
  const bool decoupled = attrBool(at, "decoupled");
  const int64_t step = a.in[4].as<int64_t>()[0];
  const double t = double(step) + 1.0;
  const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
  const float *p = a.in[0].as<float>(), *g = a.in[1].as<float>(),
              *m = a.in[2].as<float>(), *v = a.in[3].as<float>();
  float *po = a.out[0].as<float>(), *mo = a.out[1].as<float>(),
        *vo = a.out[2].as<float>();
  const AdamCoefs c{lr, b1, b2, eps, wd, bc1, bc2, decoupled};
  parallelFor(contextOf(a), a.in[0].numel, 1 << 14, [&](int64_t b, int64_t e, int) {
    if (decoupled) adamRange<true>(c, p + b, g + b, m + b, v + b, po + b, mo + b, vo + b, e - b);
    else adamRange<false>(c, p + b, g + b, m + b, v + b, po + b, mo + b, vo + b, e - b);
  });
}

} // namespace

const std::vector<Entry> &optimizerKernels() {
  static const std::vector<Entry> e = {
      {"sgd_update", kSgd},
      {"adam_update", kAdam},
  };
  return e;
}

} // namespace dtc::kernels::cpu
