//===- Norm.cpp - softmax, layer_norm, rms_norm and their gradients -------===//
#include "Common.h"
#include "Parallel.h"
#include "VecMath.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dtc::kernels::cpu {
namespace {

void kSoftmax(const KernelArgs &a) {
  const AxisView v = axisView(a.in[0].shape, attrInt(*a.attrs, "axis"));
  const float *x = a.in[0].as<float>();
  float *y = a.out[0].as<float>();
  // Rows (outer x inner of them, each v.n long with stride v.inner) split
  // across the threads.
  parallelFor(contextOf(a), v.outer * v.inner, std::max<int64_t>(1, 4096 / v.n),
              [&](int64_t r0, int64_t r1, int) {
                for (int64_t r = r0; r < r1; ++r) {
                  const int64_t o = r / v.inner, in = r % v.inner;
                  const int64_t base = o * v.n * v.inner + in, st = v.inner;
                  float mx = -std::numeric_limits<float>::infinity();
                  for (int64_t j = 0; j < v.n; ++j)
                    mx = std::max(mx, x[base + j * st]);
                  double sum = 0;
                  for (int64_t j = 0; j < v.n; ++j) {
                    float e = std::exp(x[base + j * st] - mx);
                    y[base + j * st] = e;
                    sum += e;
                  }
                  const float inv = float(1.0 / sum);
                  for (int64_t j = 0; j < v.n; ++j)
                    y[base + j * st] *= inv;
                }
              });
}

void kSoftmaxGrad(const KernelArgs &a) {
  const AxisView v = axisView(a.in[0].shape, attrInt(*a.attrs, "axis"));
  const float *y = a.in[0].as<float>(), *dy = a.in[1].as<float>();
  float *dx = a.out[0].as<float>();
  parallelFor(contextOf(a), v.outer * v.inner, std::max<int64_t>(1, 4096 / v.n),
              [&](int64_t r0, int64_t r1, int) {
                for (int64_t r = r0; r < r1; ++r) {
                  const int64_t o = r / v.inner, in = r % v.inner;
                  const int64_t base = o * v.n * v.inner + in, st = v.inner;
                  double dot = 0;
                  for (int64_t j = 0; j < v.n; ++j)
                    dot += double(dy[base + j * st]) * y[base + j * st];
                  const float fd = float(dot);
                  for (int64_t j = 0; j < v.n; ++j)
                    dx[base + j * st] =
                        y[base + j * st] * (dy[base + j * st] - fd);
                }
              });
}

constexpr int kLanes = 8; // doubles per AVX-512 vector

// sum(term(j)) for j < D in double over kLanes partial sums, element j in
// lane j % kLanes, the lanes added in order: a fixed order (the same result
// on any thread) of independent adds, where one accumulator would make
// every add wait for the one before (rms_norm's sums ran at a third of
// layer_norm's rate so). Inlined into each vector clone of its caller.
template <class Term>
[[gnu::always_inline]] inline double laneSum(int64_t D, Term term) {
  double acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= D; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      acc[l] += term(j + l);
  for (int l = 0; j < D; ++j, ++l)
    acc[l] += term(j);
  double sum = 0;
  for (int l = 0; l < kLanes; ++l)
    sum += acc[l];
  return sum;
}

// Mean and biased variance of one row.
DTC_VECTOR_CLONES void rowMeanVar(const float *xr, int64_t D, double &mean,
                                  double &var) {
  mean = laneSum(D, [&](int64_t j) { return double(xr[j]); }) / double(D);
  var = laneSum(D, [&](int64_t j) { return (xr[j] - mean) * (xr[j] - mean); }) /
        double(D);
}

DTC_VECTOR_CLONES void layerNormRow(const float *xr, const float *g,
                                    const float *b, float *yr, int64_t D,
                                    float eps) {
  double mean, var;
  rowMeanVar(xr, D, mean, var);
  const float rstd = float(1.0 / std::sqrt(var + double(eps)));
  const float fm = float(mean);
  for (int64_t j = 0; j < D; ++j)
    yr[j] = (xr[j] - fm) * rstd * g[j] + b[j];
}

void kLayerNorm(const KernelArgs &a) {
  const TensorArg &X = a.in[0];
  const int64_t D = X.shape.back(), R = X.numel / D;
  const float eps = float(attrNum(*a.attrs, "epsilon"));
  const float *x = X.as<float>(), *g = a.in[1].as<float>(),
              *b = a.in[2].as<float>();
  float *y = a.out[0].as<float>();
  parallelFor(contextOf(a), R,
              std::max<int64_t>(1, 8192 / std::max<int64_t>(D, 1)),
              [&](int64_t r0, int64_t r1, int) {
                for (int64_t r = r0; r < r1; ++r)
                  layerNormRow(x + r * D, g, b, y + r * D, D, eps);
              });
}

// One row of layer_norm's gradient: dx when dxr is non-null; dg and db
// (double, D each) accumulate this row's share when dg is non-null. The
// same arithmetic in every variant, so the split input / parameter kernels
// reproduce the fused one bit for bit.
DTC_VECTOR_CLONES void layerNormGradRow(const float *xr, const float *g,
                                        const float *dyr, float *dxr, int64_t D,
                                        double eps, double *dg, double *db,
                                        double *xhat, double *dxhat) {
  double mean, var;
  rowMeanVar(xr, D, mean, var);
  const double rstd = 1.0 / std::sqrt(var + eps);
  for (int64_t j = 0; j < D; ++j)
    xhat[j] = (xr[j] - mean) * rstd;
  if (dg)
    for (int64_t j = 0; j < D; ++j) {
      dg[j] += double(dyr[j]) * xhat[j];
      db[j] += dyr[j];
    }
  if (!dxr)
    return;
  for (int64_t j = 0; j < D; ++j)
    dxhat[j] = double(dyr[j]) * g[j];
  const double m1 = laneSum(D, [&](int64_t j) { return dxhat[j]; }) / double(D),
               m2 = laneSum(D, [&](int64_t j) { return dxhat[j] * xhat[j]; }) /
                    double(D);
  for (int64_t k = 0; k < D; ++k)
    dxr[k] = float(rstd * (dxhat[k] - m1 - xhat[k] * m2));
}

// Rows per chunk of dgamma/dbeta: chunk sums are added in order, so the
// result does not depend on the thread count.
constexpr int64_t kRowChunk = 32;

// The exact gradient of layer_norm; dx, or dgamma and dbeta, may be null
// (the split kernels).
void layerNormGrad(const KernelArgs &a, const float *g, const float *dy,
                   float *dx, float *pdg, float *pdb) {
  const TensorArg &X = a.in[0];
  const int64_t D = X.shape.back(), R = X.numel / D;
  const double eps = attrNum(*a.attrs, "epsilon");
  const float *x = X.as<float>();
  const int64_t chunks = std::max<int64_t>(1, (R + kRowChunk - 1) / kRowChunk);
  // Per chunk: dg and db partial sums (2 D each).
  ScratchVector<double> partial(pdg ? size_t(chunks * 2 * D) : 0, 0.0);
  const int workers = workersFor(contextOf(a), chunks);
  ScratchVector<double> rowScratch(size_t(workers * 2 * D));
  parallelFor(contextOf(a), chunks, 1, [&](int64_t c0, int64_t c1, int w) {
    double *xhat = rowScratch.data() + size_t(w) * 2 * size_t(D),
           *dxhat = xhat + D;
    for (int64_t c = c0; c < c1; ++c) {
      double *dg = pdg ? partial.data() + size_t(c) * 2 * size_t(D) : nullptr;
      double *db = pdg ? dg + D : nullptr;
      for (int64_t r = c * kRowChunk; r < std::min(R, (c + 1) * kRowChunk); ++r)
        layerNormGradRow(x + r * D, g, dy + r * D, dx ? dx + r * D : nullptr, D,
                         eps, dg, db, xhat, dxhat);
    }
  });
  if (!pdg)
    return;
  for (int64_t j = 0; j < D; ++j) {
    double sg = 0, sb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      sg += partial[size_t((c * 2) * D + j)];
      sb += partial[size_t((c * 2 + 1) * D + j)];
    }
    pdg[j] = float(sg);
    pdb[j] = float(sb);
  }
}

// in: x, gamma, dy -> dx, dgamma, dbeta
void kLayerNormGrad(const KernelArgs &a) {
  layerNormGrad(a, a.in[1].as<float>(), a.in[2].as<float>(),
                a.out[0].as<float>(), a.out[1].as<float>(),
                a.out[2].as<float>());
}

// in: x, gamma, dy -> dx
void kLayerNormInputGrad(const KernelArgs &a) {
  layerNormGrad(a, a.in[1].as<float>(), a.in[2].as<float>(),
                a.out[0].as<float>(), nullptr, nullptr);
}

// in: x, dy -> dgamma, dbeta
void kLayerNormParamGrad(const KernelArgs &a) {
  layerNormGrad(a, nullptr, a.in[1].as<float>(), nullptr, a.out[0].as<float>(),
                a.out[1].as<float>());
}

// 1 / sqrt(mean(x^2) + eps) of one row.
[[gnu::always_inline]] inline double rowRms(const float *xr, int64_t D,
                                            double eps) {
  const double squares =
      laneSum(D, [&](int64_t j) { return double(xr[j]) * xr[j]; });
  return 1.0 / std::sqrt(squares / double(D) + eps);
}

DTC_VECTOR_CLONES void rmsNormRow(const float *xr, const float *g, float *yr,
                                  int64_t D, double eps) {
  const float rr = float(rowRms(xr, D, eps));
  for (int64_t j = 0; j < D; ++j)
    yr[j] = xr[j] * rr * g[j];
}

void kRmsNorm(const KernelArgs &a) {
  const TensorArg &X = a.in[0];
  const int64_t D = X.shape.back(), R = X.numel / D;
  const double eps = attrNum(*a.attrs, "epsilon");
  const float *x = X.as<float>(), *g = a.in[1].as<float>();
  float *y = a.out[0].as<float>();
  parallelFor(contextOf(a), R,
              std::max<int64_t>(1, 8192 / std::max<int64_t>(D, 1)),
              [&](int64_t r0, int64_t r1, int) {
                for (int64_t r = r0; r < r1; ++r)
                  rmsNormRow(x + r * D, g, y + r * D, D, eps);
              });
}

// One row of rms_norm's gradient: dx when dxr is non-null; dg (double, D)
// accumulates this row's share when non-null. The same arithmetic in every
// variant, so the split kernels reproduce the fused one bit for bit.
DTC_VECTOR_CLONES void rmsNormGradRow(const float *xr, const float *g,
                                      const float *dyr, float *dxr, int64_t D,
                                      double eps, double *dg) {
  const double rr = rowRms(xr, D, eps);
  if (dg)
    for (int64_t j = 0; j < D; ++j)
      dg[j] += double(dyr[j]) * xr[j] * rr;
  if (!dxr)
    return;
  // sum(dxhat * x), dxhat = dy * gamma.
  const double dot =
      laneSum(D, [&](int64_t j) { return double(dyr[j]) * g[j] * xr[j]; });
  const double cc = rr * rr * dot / double(D);
  for (int64_t k = 0; k < D; ++k)
    dxr[k] = float(rr * (double(dyr[k]) * g[k] - xr[k] * cc));
}

// The exact gradient of rms_norm; dx or dgamma may be null (the split
// kernels, bit for bit the fused one's outputs).
void rmsNormGrad(const KernelArgs &a, const float *g, const float *dy,
                 float *dx, float *pdg) {
  const TensorArg &X = a.in[0];
  const int64_t D = X.shape.back(), R = X.numel / D;
  const double eps = attrNum(*a.attrs, "epsilon");
  const float *x = X.as<float>();
  // dgamma per fixed chunk of rows, chunks added in order (as layer_norm_grad).
  const int64_t chunks = std::max<int64_t>(1, (R + kRowChunk - 1) / kRowChunk);
  ScratchVector<double> partial(pdg ? size_t(chunks * D) : 0, 0.0);
  parallelFor(contextOf(a), chunks, 1, [&](int64_t c0, int64_t c1, int) {
    for (int64_t c = c0; c < c1; ++c) {
      double *dg = pdg ? partial.data() + size_t(c * D) : nullptr;
      for (int64_t r = c * kRowChunk; r < std::min(R, (c + 1) * kRowChunk); ++r)
        rmsNormGradRow(x + r * D, g, dy + r * D, dx ? dx + r * D : nullptr, D,
                       eps, dg);
    }
  });
  if (!pdg)
    return;
  for (int64_t j = 0; j < D; ++j) {
    double sg = 0;
    for (int64_t c = 0; c < chunks; ++c)
      sg += partial[size_t(c * D + j)];
    pdg[j] = float(sg);
  }
}

// in: x, gamma, dy -> dx, dgamma
void kRmsNormGrad(const KernelArgs &a) {
  rmsNormGrad(a, a.in[1].as<float>(), a.in[2].as<float>(), a.out[0].as<float>(),
              a.out[1].as<float>());
}

// in: x, gamma, dy -> dx
void kRmsNormInputGrad(const KernelArgs &a) {
  rmsNormGrad(a, a.in[1].as<float>(), a.in[2].as<float>(), a.out[0].as<float>(),
              nullptr);
}

// in: x, dy -> dgamma
void kRmsNormParamGrad(const KernelArgs &a) {
  rmsNormGrad(a, nullptr, a.in[1].as<float>(), nullptr, a.out[0].as<float>());
}

} // namespace

const std::vector<Entry> &normKernels() {
  static const std::vector<Entry> e = {
      {"softmax", kSoftmax},
      {"softmax_grad", kSoftmaxGrad},
      {"layer_norm", kLayerNorm},
      {"layer_norm_grad", kLayerNormGrad},
      {"rms_norm", kRmsNorm},
      {"rms_norm_grad", kRmsNormGrad},
      {"layer_norm_input_grad", kLayerNormInputGrad},
      {"layer_norm_param_grad", kLayerNormParamGrad},
      {"rms_norm_input_grad", kRmsNormInputGrad},
      {"rms_norm_param_grad", kRmsNormParamGrad},
  };
  return e;
}

} // namespace dtc::kernels::cpu
