//===- Norm.cu - layer_norm, rms_norm and their gradients ---------------------===//
//
// CUDA versions of kernels/cpu/Norm.cpp with the same numerics: rows of D
// (the last dim; leading dims flattened), row statistics accumulated in
// double with the CPU's formulas (two-pass mean / biased variance; layer
// norm's forward adds float(epsilon), the gradients and rms_norm double
// epsilon), the forward outputs computed in f32 from float(mean) and
// float(rstd), the gradients' dx in double and rounded once.
//
// A row per warp (D <= 1024) or per block of 256 threads (longer rows).
// dgamma / dbeta (sums over all rows) are deterministic: the row kernel
// writes each row's statistics to the workspace, a column kernel sums
// fixed chunks of rows in order per column into per-chunk partials
// (double, workspace), and a last kernel adds the chunks in order. The
// split kernels (input / param grads) run the same code as the fused
// ones, so they give the same bits.
//
//===----------------------------------------------------------------------===//
#include "Common.cuh"

#include <string>
#include <vector>

namespace dtc::kernels::cuda {
namespace {

unsigned cappedBlocks(long long blocks) {
  return unsigned(std::max<long long>(1, std::min<long long>(blocks, 65535LL * 16)));
}

/// Sum over a group of kGroup threads: a warp (32) or the whole block
/// (blockDim.x == kGroup). Every thread of the group gets the same value.
/// For kGroup > 32 every thread of the block must call it (it
/// synchronises); `shm` holds 32 doubles.
template <int kGroup> __device__ double groupSum(double v, double *shm) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (kGroup > 32) {
    static_assert(kGroup % 32 == 0 && kGroup <= 1024, "block reductions need whole warps");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); // earlier readers of shm are done
    if (lane == 0) shm[warp] = v;
    __syncthreads();
    v = lane < kGroup / 32 ? shm[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

/// The calling thread's first row, row stride and lane: warps of the grid
/// (kGroup 32) or blocks (kGroup == blockDim.x).
template <int kGroup> struct GroupIndex {
  long long first, step;
  int lane;
  __device__ __forceinline__ GroupIndex() {
    if constexpr (kGroup == 32) {
      first = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
      step = ((long long)gridDim.x * blockDim.x) >> 5;
      lane = int(threadIdx.x & 31);
    } else {
      first = blockIdx.x;
      step = gridDim.x;
      lane = int(threadIdx.x);
    }
  }
};
template <int kGroup> unsigned blocksForGroups(long long groups) {
  return cappedBlocks(kGroup == 32 ? (groups + kThreads / 32 - 1) / (kThreads / 32) : groups);
}
/// Rows longer than this get a block each, shorter ones a warp.
constexpr long long kWarpRowMax = 1024;

/// Mean and biased variance of one row (two passes, double), as the CPU's
/// rowMeanVar.
template <int kGroup, class T>
__device__ __forceinline__ void rowMeanVar(const T *xr, long long D, int lane, double *shm,
                                           double &mean, double &var) {
  double s = 0;
  for (long long j = lane; j < D; j += kGroup) s += double(toF(xr[j]));
  mean = groupSum<kGroup>(s, shm) / double(D);
  double q = 0;
  for (long long j = lane; j < D; j += kGroup) {
    const double d = double(toF(xr[j])) - mean;
    q += d * d;
  }
  var = groupSum<kGroup>(q, shm) / double(D);
}

// ---- forward ---------------------------------------------------------------------
template <class T, int kGroup>
__global__ void layerNormRows(const T *__restrict__ x, const T *__restrict__ g,
                              const T *__restrict__ b, T *__restrict__ y, long long R, long long D,
                              float eps) {
  __shared__ double shm[32];
  const GroupIndex<kGroup> gi;
  for (long long r = gi.first; r < R; r += gi.step) {
    const T *xr = x + r * D;
    T *yr = y + r * D;
    double mean, var;
    rowMeanVar<kGroup>(xr, D, gi.lane, shm, mean, var);
    const float rstd = float(1.0 / sqrt(var + double(eps)));
    const float fm = float(mean);
    for (long long j = gi.lane; j < D; j += kGroup)
      yr[j] = fromF<T>((toF(xr[j]) - fm) * rstd * toF(g[j]) + toF(b[j]));
  }
}

template <class T, int kGroup>
__global__ void rmsNormRows(const T *__restrict__ x, const T *__restrict__ g, T *__restrict__ y,
                            long long R, long long D, double eps) {
  __shared__ double shm[32];
  const GroupIndex<kGroup> gi;
  for (long long r = gi.first; r < R; r += gi.step) {
    const T *xr = x + r * D;
    T *yr = y + r * D;
    double ms = 0;
    for (long long j = gi.lane; j < D; j += kGroup) {
      const double v = double(toF(xr[j]));
      ms += v * v;
    }
    ms = groupSum<kGroup>(ms, shm);
    const float rr = float(1.0 / sqrt(ms / double(D) + eps));
    for (long long j = gi.lane; j < D; j += kGroup)
      yr[j] = fromF<T>(toF(xr[j]) * rr * toF(g[j]));
  }
}

// ---- gradients: rows -------------------------------------------------------------
/// layer_norm's gradient per row: dx (kDx) and/or the row's mean and rstd
/// into stats[2r], stats[2r + 1] (kStats, for the parameter gradients).
template <class T, int kGroup, bool kDx, bool kStats>
__global__ void layerNormGradRows(const T *__restrict__ x, const T *__restrict__ g,
                                  const T *__restrict__ dy, T *__restrict__ dx,
                                  double *__restrict__ stats, long long R, long long D,
                                  double eps) {
  __shared__ double shm[32];
  const GroupIndex<kGroup> gi;
  for (long long r = gi.first; r < R; r += gi.step) {
    const T *xr = x + r * D;
    double mean, var;
    rowMeanVar<kGroup>(xr, D, gi.lane, shm, mean, var);
    const double rstd = 1.0 / sqrt(var + eps);
    if constexpr (kStats) {
      if (gi.lane == 0) {
        stats[2 * r] = mean;
        stats[2 * r + 1] = rstd;
      }
    }
    if constexpr (kDx) {
      const T *dyr = dy + r * D;
      T *dxr = dx + r * D;
      double a1 = 0, a2 = 0;
      for (long long j = gi.lane; j < D; j += kGroup) {
        const double xhat = (double(toF(xr[j])) - mean) * rstd;
        const double dxhat = double(toF(dyr[j])) * double(toF(g[j]));
        a1 += dxhat;
        a2 += dxhat * xhat;
      }
      const double m1 = groupSum<kGroup>(a1, shm) / double(D);
      const double m2 = groupSum<kGroup>(a2, shm) / double(D);
      for (long long j = gi.lane; j < D; j += kGroup) {
        const double xhat = (double(toF(xr[j])) - mean) * rstd;
        const double dxhat = double(toF(dyr[j])) * double(toF(g[j]));
        dxr[j] = fromF<T>(float(rstd * (dxhat - m1 - xhat * m2)));
      }
    }
  }
}

/// rms_norm's gradient per row: dx (kDx) and/or the row's 1 / rms into
/// stats[r] (kStats).
template <class T, int kGroup, bool kDx, bool kStats>
__global__ void rmsNormGradRows(const T *__restrict__ x, const T *__restrict__ g,
                                const T *__restrict__ dy, T *__restrict__ dx,
                                double *__restrict__ stats, long long R, long long D, double eps) {
  __shared__ double shm[32];
  const GroupIndex<kGroup> gi;
  for (long long r = gi.first; r < R; r += gi.step) {
    const T *xr = x + r * D;
    double ms = 0;
    for (long long j = gi.lane; j < D; j += kGroup) {
      const double v = double(toF(xr[j]));
      ms += v * v;
    }
    ms = groupSum<kGroup>(ms, shm);
    const double rr = 1.0 / sqrt(ms / double(D) + eps);
    if constexpr (kStats) {
      if (gi.lane == 0) stats[r] = rr;
    }
    if constexpr (kDx) {
      const T *dyr = dy + r * D;
      T *dxr = dx + r * D;
      double dot = 0;
      for (long long j = gi.lane; j < D; j += kGroup)
        dot += double(toF(dyr[j])) * double(toF(g[j])) * double(toF(xr[j]));
      dot = groupSum<kGroup>(dot, shm);
      const double cc = rr * rr * dot / double(D);
      for (long long j = gi.lane; j < D; j += kGroup)
        dxr[j] = fromF<T>(
            float(rr * (double(toF(dyr[j])) * double(toF(g[j])) - double(toF(xr[j])) * cc)));
    }
  }
}

// ---- gradients: parameters -------------------------------------------------------
constexpr int kColThreads = 128;

/// Per chunk c of rows [c chunkLen, (c + 1) chunkLen) and column j, in row
/// order: dgamma's share into partial[c * P * D + j] and (kLayer) dbeta's
/// into partial[(c * P + 1) * D + j], P = 2 for layer norm, 1 for rms norm.
/// Grid (column blocks, chunks), block kColThreads.
template <class T, bool kLayer>
__global__ void normParamPartial(const T *__restrict__ x, const T *__restrict__ dy,
                                 const double *__restrict__ stats, double *__restrict__ partial,
                                 long long R, long long D, long long chunks, long long chunkLen) {
  constexpr long long P = kLayer ? 2 : 1;
  for (long long c = blockIdx.y; c < chunks; c += gridDim.y) {
    const long long r0 = c * chunkLen, r1 = r0 + chunkLen < R ? r0 + chunkLen : R;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < D;
         j += (long long)gridDim.x * blockDim.x) {
      double dg = 0, db = 0;
      for (long long r = r0; r < r1; ++r) {
        const double dyv = double(toF(dy[r * D + j])), xv = double(toF(x[r * D + j]));
        if constexpr (kLayer) {
          const double xhat = (xv - stats[2 * r]) * stats[2 * r + 1];
          dg += dyv * xhat;
          db += dyv;
        } else {
          dg += dyv * xv * stats[r];
        }
      }
      partial[c * P * D + j] = dg;
      if constexpr (kLayer) partial[(c * P + 1) * D + j] = db;
    }
  }
}

/// dgamma[j] (and dbeta[j]) = the chunks' partials added in order.
template <class T, bool kLayer>
__global__ void normParamFinish(const double *__restrict__ partial, T *__restrict__ dgamma,
                                T *__restrict__ dbeta, long long D, long long chunks) {
  constexpr long long P = kLayer ? 2 : 1;
  DTC_GRID_STRIDE(j, D) {
    double sg = 0, sb = 0;
    for (long long c = 0; c < chunks; ++c) {
      sg += partial[c * P * D + j];
      if constexpr (kLayer) sb += partial[(c * P + 1) * D + j];
    }
    dgamma[j] = fromF<T>(float(sg));
    if constexpr (kLayer) dbeta[j] = fromF<T>(float(sb));
  }
}

/// Rows, row length, chunking of the parameter sums and the workspace
/// layout: [row stats | partials], each part 256-byte aligned.
struct NormPlan {
  long long R = 0, D = 0, chunks = 1, chunkLen = 1;
  size_t statsBytes = 0, partialBytes = 0;
  size_t total() const { return statsBytes + partialBytes; }
};
size_t align256(size_t n) { return (n + 255) / 256 * 256; }

NormPlan planNorm(const KernelArgs &a, bool layer) {
  NormPlan p;
  const TensorArg &X = a.in[0];
  p.D = X.shape.back();
  p.R = p.D > 0 ? X.numel / p.D : 0;
  // Chunks of at least 32 rows, at most 256 chunks (the CPU uses 32-row
  // chunks; the sums are in double either way).
  const long long want = std::max<long long>(1, std::min<long long>((p.R + 31) / 32, 256));
  p.chunkLen = std::max<long long>(1, (p.R + want - 1) / want);
  p.chunks = p.R > 0 ? (p.R + p.chunkLen - 1) / p.chunkLen : 1;
  const size_t perRow = layer ? 2 : 1;
  p.statsBytes = align256(size_t(p.R) * perRow * sizeof(double));
  p.partialBytes = align256(size_t(p.chunks) * perRow * size_t(p.D) * sizeof(double));
  return p;
}

size_t wsLayerNormParams(const KernelArgs &a) { return planNorm(a, true).total(); }
size_t wsRmsNormParams(const KernelArgs &a) { return planNorm(a, false).total(); }

template <int kGroup> unsigned rowBlocks(long long R) { return blocksForGroups<kGroup>(R); }

/// The whole layer_norm / rms_norm gradient: dx when `dx` is non-null,
/// dgamma (and dbeta for layer norm) when `dgamma` is non-null.
template <class T, bool kLayer>
void normGrad(const KernelArgs &a, const Context &ctx, const T *g, const T *dy, T *dx, T *dgamma,
              T *dbeta, const char *name) {
  const NormPlan p = planNorm(a, kLayer);
  if (p.D == 0) return; // every operand is empty
  const T *x = static_cast<const T *>(a.in[0].data);
  const double eps = attrNum(*a.attrs, "epsilon");
  double *stats = nullptr, *partial = nullptr;
  if (dgamma) {
    if (!ctx.workspace || ctx.workspaceBytes < p.total())
      throw Error(std::string("cuda kernel ") + name + ": workspace too small");
    stats = static_cast<double *>(ctx.workspace);
    partial = reinterpret_cast<double *>(static_cast<char *>(ctx.workspace) + p.statsBytes);
  }
  const bool warp = p.D <= kWarpRowMax;
  auto rows = [&](auto kDxTag, auto kStatsTag) {
    constexpr bool kDx = decltype(kDxTag)::value, kStats = decltype(kStatsTag)::value;
    if (p.R == 0) return;
    if (warp) {
      if constexpr (kLayer)
        layerNormGradRows<T, 32, kDx, kStats><<<rowBlocks<32>(p.R), kThreads, 0, ctx.stream>>>(
            x, g, dy, dx, stats, p.R, p.D, eps);
      else
        rmsNormGradRows<T, 32, kDx, kStats><<<rowBlocks<32>(p.R), kThreads, 0, ctx.stream>>>(
            x, g, dy, dx, stats, p.R, p.D, eps);
    } else {
      if constexpr (kLayer)
        layerNormGradRows<T, kThreads, kDx, kStats>
            <<<rowBlocks<kThreads>(p.R), kThreads, 0, ctx.stream>>>(x, g, dy, dx, stats, p.R, p.D,
                                                                    eps);
      else
        rmsNormGradRows<T, kThreads, kDx, kStats>
            <<<rowBlocks<kThreads>(p.R), kThreads, 0, ctx.stream>>>(x, g, dy, dx, stats, p.R, p.D,
                                                                    eps);
    }
    checkLaunch(name);
  };
  if (dx && dgamma) rows(std::true_type{}, std::true_type{});
  else if (dx) rows(std::true_type{}, std::false_type{});
  else rows(std::false_type{}, std::true_type{});
  if (!dgamma) return;
  const dim3 grid(unsigned(std::min<long long>((p.D + kColThreads - 1) / kColThreads, 65535LL * 16)),
                  unsigned(std::min<long long>(p.chunks, 65535)));
  normParamPartial<T, kLayer><<<grid, kColThreads, 0, ctx.stream>>>(x, dy, stats, partial, p.R,
                                                                    p.D, p.chunks, p.chunkLen);
  checkLaunch(name);
  normParamFinish<T, kLayer><<<gridFor(p.D), kThreads, 0, ctx.stream>>>(partial, dgamma, dbeta,
                                                                       p.D, p.chunks);
  checkLaunch(name);
}

// ---- entries ---------------------------------------------------------------------
template <class T> const T *in(const KernelArgs &a, size_t i) {
  return static_cast<const T *>(a.in[i].data);
}
template <class T> T *out(const KernelArgs &a, size_t i) { return static_cast<T *>(a.out[i].data); }

void kLayerNorm(const KernelArgs &a, const Context &ctx) {
  const TensorArg &X = a.in[0];
  if (X.numel == 0) return;
  const long long D = X.shape.back(), R = X.numel / D;
  const float eps = float(attrNum(*a.attrs, "epsilon"));
  dispatchFloat(X.dtype, [&](auto t) {
    using T = decltype(t);
    if (D <= kWarpRowMax)
      layerNormRows<T, 32><<<rowBlocks<32>(R), kThreads, 0, ctx.stream>>>(
          in<T>(a, 0), in<T>(a, 1), in<T>(a, 2), out<T>(a, 0), R, D, eps);
    else
      layerNormRows<T, kThreads><<<rowBlocks<kThreads>(R), kThreads, 0, ctx.stream>>>(
          in<T>(a, 0), in<T>(a, 1), in<T>(a, 2), out<T>(a, 0), R, D, eps);
    checkLaunch("layer_norm");
  });
}

void kRmsNorm(const KernelArgs &a, const Context &ctx) {
  const TensorArg &X = a.in[0];
  if (X.numel == 0) return;
  const long long D = X.shape.back(), R = X.numel / D;
  const double eps = attrNum(*a.attrs, "epsilon");
  dispatchFloat(X.dtype, [&](auto t) {
    using T = decltype(t);
    if (D <= kWarpRowMax)
      rmsNormRows<T, 32><<<rowBlocks<32>(R), kThreads, 0, ctx.stream>>>(in<T>(a, 0), in<T>(a, 1),
                                                                        out<T>(a, 0), R, D, eps);
    else
      rmsNormRows<T, kThreads><<<rowBlocks<kThreads>(R), kThreads, 0, ctx.stream>>>(
          in<T>(a, 0), in<T>(a, 1), out<T>(a, 0), R, D, eps);
    checkLaunch("rms_norm");
  });
}

// in: x, gamma, dy -> dx, dgamma, dbeta
void kLayerNormGrad(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    normGrad<T, true>(a, ctx, in<T>(a, 1), in<T>(a, 2), out<T>(a, 0), out<T>(a, 1), out<T>(a, 2),
                      "layer_norm_grad");
  });
}
// in: x, gamma, dy -> dx
void kLayerNormInputGrad(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    normGrad<T, true>(a, ctx, in<T>(a, 1), in<T>(a, 2), out<T>(a, 0), nullptr, nullptr,
                      "layer_norm_input_grad");
  });
}
// in: x, dy -> dgamma, dbeta
void kLayerNormParamGrad(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    normGrad<T, true>(a, ctx, nullptr, in<T>(a, 1), nullptr, out<T>(a, 0), out<T>(a, 1),
                      "layer_norm_param_grad");
  });
}
// in: x, gamma, dy -> dx, dgamma
void kRmsNormGrad(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    normGrad<T, false>(a, ctx, in<T>(a, 1), in<T>(a, 2), out<T>(a, 0), out<T>(a, 1), nullptr,
                       "rms_norm_grad");
  });
}
// in: x, gamma, dy -> dx
void kRmsNormInputGrad(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    normGrad<T, false>(a, ctx, in<T>(a, 1), in<T>(a, 2), out<T>(a, 0), nullptr, nullptr,
                       "rms_norm_input_grad");
  });
}
// in: x, dy -> dgamma
void kRmsNormParamGrad(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    normGrad<T, false>(a, ctx, nullptr, in<T>(a, 1), nullptr, out<T>(a, 0), nullptr,
                       "rms_norm_param_grad");
  });
}

} // namespace

const std::vector<Entry> &normKernels() {
  static const std::vector<Entry> entries = {
      {"layer_norm", kLayerNorm},
      {"rms_norm", kRmsNorm},
      {"layer_norm_grad", kLayerNormGrad, nullptr, wsLayerNormParams},
      {"rms_norm_grad", kRmsNormGrad, nullptr, wsRmsNormParams},
      {"layer_norm_input_grad", kLayerNormInputGrad},
      {"layer_norm_param_grad", kLayerNormParamGrad, nullptr, wsLayerNormParams},
      {"rms_norm_input_grad", kRmsNormInputGrad},
      {"rms_norm_param_grad", kRmsNormParamGrad, nullptr, wsRmsNormParams},
  };
  return entries;
}

} // namespace dtc::kernels::cuda
