//===- Norm.cpp - softmax, layer_norm, rms_norm and their gradients -------===//
#include "Common.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dtc::kernels::cpu {
namespace {

void kSoftmax(const KernelArgs &a) {
  const AxisView v = axisView(a.in[0].shape, attrInt(*a.attrs, "axis"));
  const float *x = a.in[0].as<float>();
  float *y = a.out[0].as<float>();
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t in = 0; in < v.inner; ++in) {
      const int64_t base = o * v.n * v.inner + in, st = v.inner;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < v.n; ++j) mx = std::max(mx, x[base + j * st]);
      double sum = 0;
      for (int64_t j = 0; j < v.n; ++j) {
        float e = std::exp(x[base + j * st] - mx);
        y[base + j * st] = e;
        sum += e;
      }
      const float inv = float(1.0 / sum);
      for (int64_t j = 0; j < v.n; ++j) y[base + j * st] *= inv;
    }
  }
}

void kSoftmaxGrad(const KernelArgs &a) {
  const AxisView v = axisView(a.in[0].shape, attrInt(*a.attrs, "axis"));
  const float *y = a.in[0].as<float>(), *dy = a.in[1].as<float>();
  float *dx = a.out[0].as<float>();
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t in = 0; in < v.inner; ++in) {
      const int64_t base = o * v.n * v.inner + in, st = v.inner;
      double dot = 0;
      for (int64_t j = 0; j < v.n; ++j)
        dot += double(dy[base + j * st]) * y[base + j * st];
      const float fd = float(dot);
      for (int64_t j = 0; j < v.n; ++j)
        dx[base + j * st] = y[base + j * st] * (dy[base + j * st] - fd);
    }
  }
}

// Mean and biased variance of one row, accumulated in double.
void rowMeanVar(const float *xr, int64_t D, double &mean, double &var) {
  mean = 0;
  for (int64_t j = 0; j < D; ++j) mean += xr[j];
  mean /= double(D);
  var = 0;
  for (int64_t j = 0; j < D; ++j) var += (xr[j] - mean) * (xr[j] - mean);
  var /= double(D);
}

void kLayerNorm(const KernelArgs &a) {
  const TensorArg &X = a.in[0];
  const int64_t D = X.shape.back(), R = X.numel / D;
  const float eps = float(attrNum(*a.attrs, "epsilon"));
  const float *x = X.as<float>(), *g = a.in[1].as<float>(), *b = a.in[2].as<float>();
  float *y = a.out[0].as<float>();
  for (int64_t r = 0; r < R; ++r) {
    const float *xr = x + r * D;
    float *yr = y + r * D;
    double mean, var;
    rowMeanVar(xr, D, mean, var);
    const float rstd = float(1.0 / std::sqrt(var + double(eps)));
    const float fm = float(mean);
    for (int64_t j = 0; j < D; ++j) yr[j] = (xr[j] - fm) * rstd * g[j] + b[j];
  }
}

void kLayerNormGrad(const KernelArgs &a) {
  const TensorArg &X = a.in[0];
  const int64_t D = X.shape.back(), R = X.numel / D;
  const double eps = attrNum(*a.attrs, "epsilon");
  const float *x = X.as<float>(), *g = a.in[1].as<float>(), *dy = a.in[2].as<float>();
  float *dx = a.out[0].as<float>();
  ScratchVector<double> dg(static_cast<size_t>(D), 0.0), db(static_cast<size_t>(D), 0.0), xhat(static_cast<size_t>(D)),
      dxhat(static_cast<size_t>(D));
  for (int64_t r = 0; r < R; ++r) {
    const float *xr = x + r * D, *dyr = dy + r * D;
    double mean, var;
    rowMeanVar(xr, D, mean, var);
    const double rstd = 1.0 / std::sqrt(var + eps);
    double m1 = 0, m2 = 0;
    for (int64_t j = 0; j < D; ++j) {
      xhat[size_t(j)] = (xr[j] - mean) * rstd;
      dxhat[size_t(j)] = double(dyr[j]) * g[j];
      m1 += dxhat[size_t(j)];
      m2 += dxhat[size_t(j)] * xhat[size_t(j)];
      dg[size_t(j)] += double(dyr[j]) * xhat[size_t(j)];
      db[size_t(j)] += dyr[j];
    }
    m1 /= double(D);
    m2 /= double(D);
    for (int64_t j = 0; j < D; ++j)
      dx[r * D + j] =
          float(rstd * (dxhat[size_t(j)] - m1 - xhat[size_t(j)] * m2));
  }
  float *pdg = a.out[1].as<float>(), *pdb = a.out[2].as<float>();
  for (int64_t j = 0; j < D; ++j) {
    pdg[j] = float(dg[size_t(j)]);
    pdb[j] = float(db[size_t(j)]);
  }
}

void kRmsNorm(const KernelArgs &a) {
  const TensorArg &X = a.in[0];
  const int64_t D = X.shape.back(), R = X.numel / D;
  const double eps = attrNum(*a.attrs, "epsilon");
  const float *x = X.as<float>(), *g = a.in[1].as<float>();
  float *y = a.out[0].as<float>();
  for (int64_t r = 0; r < R; ++r) {
    const float *xr = x + r * D;
    double ms = 0;
    for (int64_t j = 0; j < D; ++j) ms += double(xr[j]) * xr[j];
    const float rr = float(1.0 / std::sqrt(ms / double(D) + eps));
    for (int64_t j = 0; j < D; ++j) y[r * D + j] = xr[j] * rr * g[j];
  }
}

void kRmsNormGrad(const KernelArgs &a) {
  const TensorArg &X = a.in[0];
  const int64_t D = X.shape.back(), R = X.numel / D;
  const double eps = attrNum(*a.attrs, "epsilon");
  const float *x = X.as<float>(), *g = a.in[1].as<float>(), *dy = a.in[2].as<float>();
  float *dx = a.out[0].as<float>();
  ScratchVector<double> dg(static_cast<size_t>(D), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const float *xr = x + r * D, *dyr = dy + r * D;
    double ms = 0;
    for (int64_t j = 0; j < D; ++j) ms += double(xr[j]) * xr[j];
    const double rr = 1.0 / std::sqrt(ms / double(D) + eps);
    double dot = 0; // sum(dxhat * x)
    for (int64_t j = 0; j < D; ++j) {
      dot += double(dyr[j]) * g[j] * xr[j];
      dg[size_t(j)] += double(dyr[j]) * xr[j] * rr;
    }
    const double c = rr * rr * dot / double(D);
    for (int64_t j = 0; j < D; ++j)
      dx[r * D + j] = float(rr * (double(dyr[j]) * g[j] - xr[j] * c));
  }
  float *pdg = a.out[1].as<float>();
  for (int64_t j = 0; j < D; ++j) pdg[j] = float(dg[size_t(j)]);
}

} // namespace

const std::vector<Entry> &normKernels() {
  static const std::vector<Entry> e = {
      {"softmax", kSoftmax},       {"softmax_grad", kSoftmaxGrad},
      {"layer_norm", kLayerNorm},  {"layer_norm_grad", kLayerNormGrad},
      {"rms_norm", kRmsNorm},      {"rms_norm_grad", kRmsNormGrad},
  };
  return e;
}

} // namespace dtc::kernels::cpu
