//===- Norm.cu - layer_norm, rms_norm and their gradients
//---------------------===//
//
// CUDA versions of kernels/cpu/Norm.cpp with the same numerics: rows of D
// (the last dim; leading dims flattened), row statistics accumulated in
// double with the CPU's formulas (two-pass mean / biased variance; layer
// norm's forward adds float(epsilon), the gradients and rms_norm double
// epsilon), the forward outputs computed in f32 from float(mean) and
// float(rstd), the gradients' dx in double and rounded once (to f32, as
// the CPU kernel, then to the storage dtype).
//
// Memory access: rows are read in 16-byte packs (8 bf16/f16 or 4 f32
// elements) when every row of every operand starts 16-byte aligned (the
// base pointers aligned and D * element size a multiple of 16); otherwise
// the same packs are gathered element by element (the tail pack of a row
// padded), so both paths do the same arithmetic in the same order and give
// the same bits.
//
// Row kernels (forward, dx): a row per warp when it has at most 256 packs
// (D <= 2048 bf16 / 1024 f32), else a row per block of 256 threads; lane
// `l` of a group of G handles packs l, l + G, ... and keeps up to kV of
// x's packs (and up to 4 of dy's) in registers, so x is read from memory
// once; rows of more than 2048 packs re-read them (from cache).
//
// Values go to double exactly by moving bits and scaling (withToDouble):
// the 64-bit conversion instruction's rate, a quarter of the double rate,
// would otherwise bound these kernels.
//
// dgamma / dbeta (sums over all rows) are deterministic: fixed chunks of
// rows (chunkLen, a function of R only) are summed per column in row order
// by one block each into double partials (workspace), and a last kernel
// adds each column's chunk partials in a fixed order. The column kernel
// (normParamTile) covers up to 2048 columns per block, 8 per thread (one
// or two 16-byte packs per row and operand), several rows' packs loaded
// at once; when D is narrower the block splits into slices that take every
// S-th row, combined in slice order at the end. It computes each row's
// statistics itself (a warp per row, the code and order the warp-per-row
// dx kernel uses, so the split and fused gradients give the same bits)
// when one block spans the row; wider rows (D > 2048 bf16 / 1024 f32) get
// their statistics from a separate row kernel (again the dx kernel's code).
//
//===----------------------------------------------------------------------===//
#include "Common.cuh"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

namespace dtc::kernels::cuda {
namespace {

template <int N> using IntC = std::integral_constant<int, N>;

// ---- 16-byte packs
// ---------------------------------------------------------------
/// Elements per 16-byte pack.
template <class T> constexpr int kW = int(16 / sizeof(T));

__device__ __forceinline__ unsigned bitsOf(float v) {
  return __float_as_uint(v);
}
__device__ __forceinline__ unsigned bitsOf(__nv_bfloat16 v) {
  return __bfloat16_as_ushort(v);
}
__device__ __forceinline__ unsigned bitsOf(__half v) {
  return __half_as_ushort(v);
}

/// Elements of pack v (elements v W .. v W + W - 1) inside a row of D.
template <class T>
__device__ __forceinline__ int packLen(long long v, long long D) {
  const long long n = D - v * kW<T>;
  return n < kW<T> ? int(n) : kW<T>;
}

/// Pack v of a row: one 16-byte load when `vec` (row 16-byte aligned, D a
/// multiple of W), else element loads; elements past D read as 0 bits.
template <class T>
__device__ __forceinline__ uint4 loadPack(const T *__restrict__ row,
                                          long long v, long long D, bool vec) {
  if (vec)
    return __ldg(reinterpret_cast<const uint4 *>(row) + v);
  unsigned w[4] = {0u, 0u, 0u, 0u};
  const int n = packLen<T>(v, D);
  const T *p = row + v * kW<T>;
#pragma unroll
  for (int k = 0; k < kW<T>; ++k)
    if (k < n) {
      if constexpr (kW<T> == 4)
        w[k] = bitsOf(p[k]);
      else
        w[k >> 1] |= bitsOf(p[k]) << (16 * (k & 1));
    }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// The f32 values of a pack's elements.
template <class T>
__device__ __forceinline__ void unpack(const uint4 &u, float (&f)[kW<T>]) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < kW<T>; ++k) {
    if constexpr (std::is_same_v<T, float>) {
      f[k] = __uint_as_float(w[k]);
    } else {
      const unsigned h = (w[k >> 1] >> (16 * (k & 1))) & 0xffffu;
      if constexpr (std::is_same_v<T, __nv_bfloat16>)
        f[k] = __uint_as_float(h << 16);
      else
        f[k] = __half2float(__ushort_as_half((unsigned short)h));
    }
  }
}

/// Stores pack v of a row (each value rounded once to T); elements past D
/// are not written.
template <class T>
__device__ __forceinline__ void storePack(T *__restrict__ row, long long v,
                                          long long D, bool vec,
                                          const float (&f)[kW<T>]) {
  if (vec) {
    unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int k = 0; k < kW<T>; ++k) {
      if constexpr (kW<T> == 4)
        w[k] = __float_as_uint(f[k]);
      else
        w[k >> 1] |= bitsOf(fromF<T>(f[k])) << (16 * (k & 1));
    }
    reinterpret_cast<uint4 *>(row)[v] = make_uint4(w[0], w[1], w[2], w[3]);
    return;
  }
  const int n = packLen<T>(v, D);
  T *p = row + v * kW<T>;
#pragma unroll
  for (int k = 0; k < kW<T>; ++k)
    if (k < n)
      p[k] = fromF<T>(f[k]);
}

/// double(f), exactly, for finite f without a conversion instruction: f's
/// sign, exponent and mantissa moved into a double's fields as they are
/// (exponent field e unchanged, mantissa shifted up 29) make 2^-896 f
/// (subnormal when f is zero or subnormal), and scaling by 2^896 is exact.
__device__ __forceinline__ double finiteToDouble(float f) {
  const unsigned u = __float_as_uint(f);
  const unsigned hi =
      unsigned(int(u) >> 3) & 0x8fffffffu; // sign, e, top 20 bits of m
  return __hiloint2double(int(hi), int(u << 29)) * 0x1p896;
}
/// Whether every value is finite: the sum of their products with 0 is 0
/// (NaN when any is inf or NaN).
template <int W>
__device__ __forceinline__ bool allFinite(const float (&f)[W]) {
  float t = 0.0f;
#pragma unroll
  for (int k = 0; k < W; ++k)
    t = __fmaf_rn(f[k], 0.0f, t);
  return t == 0.0f;
}
struct FiniteToDouble {
  __device__ __forceinline__ double operator()(float f) const {
    return finiteToDouble(f);
  }
};
struct CvtToDouble {
  __device__ __forceinline__ double operator()(float f) const {
    return double(f);
  }
};
/// body(cv) with cv(f) == double(f) for the values of these packs.
/// Conversions to and from 64-bit types issue at a quarter of the double
/// rate on sm_80 / sm_90 (16 a clock per SM), enough to bound these
/// kernels, so for packs of finite values cv is finiteToDouble (integer
/// instructions and one double multiply); a pack with an inf or NaN
/// converts. The same values either way.
template <class F, int W, class... More>
__device__ __forceinline__ void withToDouble(F &&body, const float (&f)[W],
                                             const More &...more) {
  if ((allFinite(f) && ... && allFinite(more)))
    body(FiniteToDouble{});
  else
    body(CvtToDouble{});
}

// ---- groups of threads per row
// ---------------------------------------------------
/// Sum over a group of G threads: a warp (32) or the whole block
/// (blockDim.x == G). Every thread of the group gets the same value.
/// For G > 32 every thread of the block must call it (it synchronises);
/// `shm` holds 32 doubles.
template <int G> __device__ double groupSum(double v, double *shm) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (G > 32) {
    static_assert(G % 32 == 0 && G <= 1024,
                  "block reductions need whole warps");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); // earlier readers of shm are done
    if (lane == 0)
      shm[warp] = v;
    __syncthreads();
    v = lane < G / 32 ? shm[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1)
      v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}
/// Two groupSums at once (the same additions in the same order); `shm`
/// holds 64 doubles.
template <int G> __device__ void groupSum2(double &a, double &b, double *shm) {
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if constexpr (G > 32) {
    static_assert(G % 32 == 0 && G <= 1024,
                  "block reductions need whole warps");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) {
      shm[warp] = a;
      shm[32 + warp] = b;
    }
    __syncthreads();
    a = lane < G / 32 ? shm[lane] : 0.0;
    b = lane < G / 32 ? shm[32 + lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) {
      a += __shfl_xor_sync(0xffffffffu, a, o);
      b += __shfl_xor_sync(0xffffffffu, b, o);
    }
  }
}

/// Rows of at most this many packs get a warp each, longer ones a block.
constexpr long long kWarpRowPacks = 256;

/// Calls f(i, v) for the packs v = lane + i G of a row of nv packs, in
/// increasing order: i < kV unrolled (kV > 0), or all of them (kV == 0).
template <int G, int kV, class F>
__device__ __forceinline__ void forPacks(long long nv, int lane, F &&f) {
  if constexpr (kV > 0) {
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const long long v = lane + (long long)i * G;
      if (v < nv)
        f(i, v);
    }
  } else {
#pragma unroll 4
    for (long long v = lane; v < nv; v += G)
      f(0, v);
  }
}

/// A lane's packs of one row operand: held in registers (kV > 0, the row
/// has at most kV G packs) or loaded on each use (kV == 0).
template <class T, int G, int kV> struct RowPacks {
  const T *row;
  long long D;
  bool vec;
  uint4 p[kV > 0 ? kV : 1];
  __device__ __forceinline__ RowPacks(const T *row_, long long nv, long long D_,
                                      int lane, bool vec_)
      : row(row_), D(D_), vec(vec_) {
    if constexpr (kV > 0) {
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        const long long v = lane + (long long)i * G;
        p[i] = v < nv ? loadPack(row, v, D, vec) : make_uint4(0u, 0u, 0u, 0u);
      }
    }
  }
  __device__ __forceinline__ void get(int i, long long v,
                                      float (&f)[kW<T>]) const {
    if constexpr (kV > 0)
      unpack<T>(p[i], f);
    else
      unpack<T>(loadPack(row, v, D, vec), f);
  }
};

/// Mean and biased variance of one row (two passes, double), as the CPU's
/// rowMeanVar. Each lane sums its packs' elements in order, then the group.
template <class T, int G, int kV>
__device__ __forceinline__ void rowMeanVar(const RowPacks<T, G, kV> &x,
                                           long long nv, int lane, double *shm,
                                           double &mean, double &var) {
  const long long D = x.D;
  double s = 0;
  forPacks<G, kV>(nv, lane, [&](int i, long long v) {
    float f[kW<T>];
    x.get(i, v, f);
    const int n = packLen<T>(v, D);
    withToDouble(
        [&](auto cv) {
#pragma unroll
          for (int k = 0; k < kW<T>; ++k)
            if (k < n)
              s += cv(f[k]);
        },
        f);
  });
  mean = groupSum<G>(s, shm) / double(D);
  double q = 0;
  forPacks<G, kV>(nv, lane, [&](int i, long long v) {
    float f[kW<T>];
    x.get(i, v, f);
    const int n = packLen<T>(v, D);
    withToDouble(
        [&](auto cv) {
#pragma unroll
          for (int k = 0; k < kW<T>; ++k)
            if (k < n) {
              const double d = cv(f[k]) - mean;
              q += d * d;
            }
        },
        f);
  });
  var = groupSum<G>(q, shm) / double(D);
}

/// Sum of squares of one row (double), summed over the group.
template <class T, int G, int kV>
__device__ __forceinline__ double
rowSumSq(const RowPacks<T, G, kV> &x, long long nv, int lane, double *shm) {
  const long long D = x.D;
  double ms = 0;
  forPacks<G, kV>(nv, lane, [&](int i, long long v) {
    float f[kW<T>];
    x.get(i, v, f);
    const int n = packLen<T>(v, D);
    withToDouble(
        [&](auto cv) {
#pragma unroll
          for (int k = 0; k < kW<T>; ++k)
            if (k < n) {
              const double e = cv(f[k]);
              ms += e * e;
            }
        },
        f);
  });
  return groupSum<G>(ms, shm);
}

template <class T>
__host__ __device__ __forceinline__ long long packsOf(long long D) {
  return (D + kW<T> - 1) / kW<T>;
}

// ---- forward
// ---------------------------------------------------------------------
template <class T, int G, int kV>
__global__ void __launch_bounds__(kThreads)
    layerNormRows(const T *__restrict__ x, const T *__restrict__ g,
                  const T *__restrict__ b, T *__restrict__ y, long long R,
                  long long D, float eps, bool vec) {
  __shared__ double shm[32];
  const GroupIndex<G> gi;
  const long long nv = packsOf<T>(D);
  for (long long r = gi.first; r < R; r += gi.step) {
    const RowPacks<T, G, kV> xr(x + r * D, nv, D, gi.lane, vec);
    T *yr = y + r * D;
    double mean, var;
    rowMeanVar(xr, nv, gi.lane, shm, mean, var);
    const float rstd = float(1.0 / sqrt(var + double(eps)));
    const float fm = float(mean);
    forPacks<G, kV>(nv, gi.lane, [&](int i, long long v) {
      float xf[kW<T>], gf[kW<T>], bf[kW<T>], o[kW<T>];
      xr.get(i, v, xf);
      unpack<T>(loadPack(g, v, D, vec), gf);
      unpack<T>(loadPack(b, v, D, vec), bf);
#pragma unroll
      for (int k = 0; k < kW<T>; ++k)
        o[k] = (xf[k] - fm) * rstd * gf[k] + bf[k];
      storePack(yr, v, D, vec, o);
    });
  }
}

template <class T, int G, int kV>
__global__ void __launch_bounds__(kThreads)
    rmsNormRows(const T *__restrict__ x, const T *__restrict__ g,
                T *__restrict__ y, long long R, long long D, double eps,
                bool vec) {
  __shared__ double shm[32];
  const GroupIndex<G> gi;
  const long long nv = packsOf<T>(D);
  for (long long r = gi.first; r < R; r += gi.step) {
    const RowPacks<T, G, kV> xr(x + r * D, nv, D, gi.lane, vec);
    T *yr = y + r * D;
    const double ms = rowSumSq(xr, nv, gi.lane, shm);
    const float rr = float(1.0 / sqrt(ms / double(D) + eps));
    forPacks<G, kV>(nv, gi.lane, [&](int i, long long v) {
      float xf[kW<T>], gf[kW<T>], o[kW<T>];
      xr.get(i, v, xf);
      unpack<T>(loadPack(g, v, D, vec), gf);
#pragma unroll
      for (int k = 0; k < kW<T>; ++k)
        o[k] = xf[k] * rr * gf[k];
      storePack(yr, v, D, vec, o);
    });
  }
}

// ---- gradients: dx
// ---------------------------------------------------------------
/// The dx kernels hold x's packs in registers (read four times) and dy's
/// (read twice) only up to 4 packs a lane: with 8, holding both would take
/// more than the 128 registers that let two blocks share an SM.
template <int kV> constexpr int kDyHeld = kV <= 4 ? kV : 0;

template <class T, int G, int kV>
__global__ void __launch_bounds__(kThreads, 2)
    layerNormDxRows(const T *__restrict__ x, const T *__restrict__ g,
                    const T *__restrict__ dy, T *__restrict__ dx, long long R,
                    long long D, double eps, bool vec) {
  __shared__ double shm[64];
  const GroupIndex<G> gi;
  const long long nv = packsOf<T>(D);
  for (long long r = gi.first; r < R; r += gi.step) {
    const RowPacks<T, G, kV> xr(x + r * D, nv, D, gi.lane, vec);
    const RowPacks<T, G, kDyHeld<kV>> dyr(dy + r * D, nv, D, gi.lane, vec);
    T *dxr = dx + r * D;
    double mean, var;
    rowMeanVar(xr, nv, gi.lane, shm, mean, var);
    const double rstd = 1.0 / sqrt(var + eps);
    double a1 = 0, a2 = 0;
    forPacks<G, kV>(nv, gi.lane, [&](int i, long long v) {
      float xf[kW<T>], df[kW<T>], gf[kW<T>];
      xr.get(i, v, xf);
      dyr.get(i, v, df);
      unpack<T>(loadPack(g, v, D, vec), gf);
      const int n = packLen<T>(v, D);
      withToDouble(
          [&](auto cv) {
#pragma unroll
            for (int k = 0; k < kW<T>; ++k)
              if (k < n) {
                const double xhat = (cv(xf[k]) - mean) * rstd;
                const double dxhat = cv(df[k]) * cv(gf[k]);
                a1 += dxhat;
                a2 += dxhat * xhat;
              }
          },
          xf, df, gf);
    });
    groupSum2<G>(a1, a2, shm);
    const double m1 = a1 / double(D), m2 = a2 / double(D);
    forPacks<G, kV>(nv, gi.lane, [&](int i, long long v) {
      float xf[kW<T>], df[kW<T>], gf[kW<T>], o[kW<T>];
      xr.get(i, v, xf);
      dyr.get(i, v, df);
      unpack<T>(loadPack(g, v, D, vec), gf);
      withToDouble(
          [&](auto cv) {
#pragma unroll
            for (int k = 0; k < kW<T>; ++k) {
              const double xhat = (cv(xf[k]) - mean) * rstd;
              const double dxhat = cv(df[k]) * cv(gf[k]);
              o[k] = float(rstd * (dxhat - m1 - xhat * m2));
            }
          },
          xf, df, gf);
      storePack(dxr, v, D, vec, o);
    });
  }
}

template <class T, int G, int kV>
__global__ void __launch_bounds__(kThreads, 2)
    rmsNormDxRows(const T *__restrict__ x, const T *__restrict__ g,
                  const T *__restrict__ dy, T *__restrict__ dx, long long R,
                  long long D, double eps, bool vec) {
  __shared__ double shm[32];
  const GroupIndex<G> gi;
  const long long nv = packsOf<T>(D);
  for (long long r = gi.first; r < R; r += gi.step) {
    const RowPacks<T, G, kV> xr(x + r * D, nv, D, gi.lane, vec);
    const RowPacks<T, G, kDyHeld<kV>> dyr(dy + r * D, nv, D, gi.lane, vec);
    T *dxr = dx + r * D;
    const double ms = rowSumSq(xr, nv, gi.lane, shm);
    const double rr = 1.0 / sqrt(ms / double(D) + eps);
    double dot = 0;
    forPacks<G, kV>(nv, gi.lane, [&](int i, long long v) {
      float xf[kW<T>], df[kW<T>], gf[kW<T>];
      xr.get(i, v, xf);
      dyr.get(i, v, df);
      unpack<T>(loadPack(g, v, D, vec), gf);
      const int n = packLen<T>(v, D);
      withToDouble(
          [&](auto cv) {
#pragma unroll
            for (int k = 0; k < kW<T>; ++k)
              if (k < n)
                dot += cv(df[k]) * cv(gf[k]) * cv(xf[k]);
          },
          xf, df, gf);
    });
    dot = groupSum<G>(dot, shm);
    const double cc = rr * rr * dot / double(D);
    forPacks<G, kV>(nv, gi.lane, [&](int i, long long v) {
      float xf[kW<T>], df[kW<T>], gf[kW<T>], o[kW<T>];
      xr.get(i, v, xf);
      dyr.get(i, v, df);
      unpack<T>(loadPack(g, v, D, vec), gf);
      withToDouble(
          [&](auto cv) {
#pragma unroll
            for (int k = 0; k < kW<T>; ++k)
              o[k] = float(rr * (cv(df[k]) * cv(gf[k]) - cv(xf[k]) * cc));
          },
          xf, df, gf);
      storePack(dxr, v, D, vec, o);
    });
  }
}

// ---- gradients: parameters
// -------------------------------------------------------
/// One row's statistics as the parameter sums use them: layer norm's mean
/// and rstd (a, b), rms norm's 1 / rms (a). Every lane of the group has them.
template <class T, int G, bool kLayer>
__device__ __forceinline__ void rowStats(const T *xr, long long nv, long long D,
                                         int lane, double eps, bool vec,
                                         double *shm, double &a, double &b) {
  const RowPacks<T, G, 0> xp(xr, nv, D, lane, vec);
  if constexpr (kLayer) {
    double var;
    rowMeanVar(xp, nv, lane, shm, a, var);
    b = 1.0 / sqrt(var + eps);
  } else {
    const double ms = rowSumSq(xp, nv, lane, shm);
    a = 1.0 / sqrt(ms / double(D) + eps);
    b = 0;
  }
}

/// Each row's statistics into stats[P r], stats[P r + 1] (P = 2, layer
/// norm: mean, rstd) or stats[r] (P = 1, rms norm: 1 / rms), for rows too
/// wide for normParamTile to compute them itself.
template <class T, int G, bool kLayer>
__global__ void __launch_bounds__(kThreads)
    normStatsRows(const T *__restrict__ x, double *__restrict__ stats,
                  long long R, long long D, double eps, bool vec) {
  __shared__ double shm[32];
  const GroupIndex<G> gi;
  const long long nv = packsOf<T>(D);
  for (long long r = gi.first; r < R; r += gi.step) {
    double a, b;
    rowStats<T, G, kLayer>(x + r * D, nv, D, gi.lane, eps, vec, shm, a, b);
    if (gi.lane == 0) {
      if constexpr (kLayer) {
        stats[2 * r] = a;
        stats[2 * r + 1] = b;
      } else {
        stats[r] = a;
      }
    }
  }
}

constexpr int kTileCols = 8; ///< columns per thread in normParamTile
constexpr int kSub = 16;     ///< rows whose statistics a block holds at once
constexpr int kUnroll = 4;   ///< rows a thread loads at once

/// Partial dgamma (and, kLayer, dbeta) sums of one chunk of rows
/// [c chunkLen, (c + 1) chunkLen), c = blockIdx.y, over the columns of
/// blockIdx.x: dgamma's into partial[c P D + j], dbeta's into
/// partial[(c P + 1) D + j] (P = 2 layer norm, 1 rms norm).
///
/// The block's threads are S = kThreads / ct slices of ct column threads
/// (ct a multiple of 32); column thread i owns packs
/// blockIdx.x ct NV + q ct + i (q < NV, NV = 8 / W), so 8 columns, and
/// slice s sums rows s, s + S, ... of each sub-tile of kSub rows in order;
/// the slices' sums are added in slice order at the end. kFuse: the block
/// computes the sub-tile's row statistics first (a warp per row, as the
/// warp-per-row kernels do); otherwise it reads them from `stats`.
template <class T, bool kLayer, bool kFuse>
__global__ void __launch_bounds__(kThreads, 2)
    normParamTile(const T *__restrict__ x, const T *__restrict__ dy,
                  const double *__restrict__ stats,
                  double *__restrict__ partial, long long R, long long D,
                  long long chunkLen, int ct, double eps, bool vec) {
  constexpr int W = kW<T>, NV = kTileCols / W;
  constexpr long long P = kLayer ? 2 : 1;
  static_assert(NV * W == kTileCols, "a thread's columns are whole packs");
  __shared__ double sA[kSub], sB[kSub];
  __shared__ double buf[kTileCols * (kThreads / 2)];
  const long long nv = packsOf<T>(D);
  const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
  const int S = kThreads / ct, s = t / ct, ci = t % ct;
  const long long c = blockIdx.y, r0 = c * chunkLen;
  const long long r1 = r0 + chunkLen < R ? r0 + chunkLen : R;
  long long vq[NV];
#pragma unroll
  for (int q = 0; q < NV; ++q)
    vq[q] = (long long)blockIdx.x * ct * NV + (long long)q * ct + ci;
  double dg[kTileCols], db[kTileCols];
#pragma unroll
  for (int e = 0; e < kTileCols; ++e)
    dg[e] = db[e] = 0;

  for (long long rs = r0; rs < r1; rs += kSub) {
    const int nr = int(r1 - rs < kSub ? r1 - rs : kSub);
    if constexpr (kFuse) {
      for (int h = warp; h < nr; h += kThreads / 32) { // warp-uniform
        // Start fetching the row's dy into L2 for the column sums below.
        const char *dyb = reinterpret_cast<const char *>(dy + (rs + h) * D);
        const long long bytes = D * (long long)sizeof(T);
        for (long long o = (long long)lane * 128; o < bytes; o += 32 * 128)
          asm volatile("prefetch.global.L2 [%0];" ::"l"(
              __cvta_generic_to_global(dyb + o)));
        double a, b;
        rowStats<T, 32, kLayer>(x + (rs + h) * D, nv, D, lane, eps, vec,
                                nullptr, a, b);
        if (lane == 0) {
          sA[h] = a;
          sB[h] = b;
        }
      }
    } else {
      if (t < nr) {
        sA[t] = stats[P * (rs + t)];
        sB[t] = kLayer ? stats[P * (rs + t) + P - 1] : 0.0;
      }
    }
    __syncthreads();
    if (s < S) {
      for (int h0 = s; h0 < nr; h0 += S * kUnroll) {
        uint4 px[kUnroll][NV], pd[kUnroll][NV];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int h = h0 + u * S;
          const long long off = (rs + h) * D;
#pragma unroll
          for (int q = 0; q < NV; ++q) {
            if (h < nr && vq[q] < nv) {
              px[u][q] = loadPack(x + off, vq[q], D, vec);
              pd[u][q] = loadPack(dy + off, vq[q], D, vec);
            } else {
              px[u][q] = pd[u][q] = make_uint4(0u, 0u, 0u, 0u);
            }
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int h = h0 + u * S;
          if (h < nr) {
            const double a = sA[h], b = sB[h];
#pragma unroll
            for (int q = 0; q < NV; ++q) {
              float xf[W], df[W];
              unpack<T>(px[u][q], xf);
              unpack<T>(pd[u][q], df);
              withToDouble(
                  [&](auto cv) {
#pragma unroll
                    for (int k = 0; k < W; ++k) {
                      const double xv = cv(xf[k]), dv = cv(df[k]);
                      if constexpr (kLayer) {
                        const double xhat = (xv - a) * b;
                        dg[q * W + k] += dv * xhat;
                        db[q * W + k] += dv;
                      } else {
                        dg[q * W + k] += dv * xv * a;
                      }
                    }
                  },
                  xf, df);
            }
          }
        }
      }
    }
    __syncthreads(); // sA / sB are rewritten next
  }

  // Slices 1 .. S - 1 (only when ct <= kThreads / 2) into slice 0, in order.
  for (int s2 = 1; s2 < S; ++s2) {
    if (s == s2) {
#pragma unroll
      for (int e = 0; e < kTileCols; ++e)
        buf[e * (kThreads / 2) + ci] = dg[e];
    }
    __syncthreads();
    if (s == 0) {
#pragma unroll
      for (int e = 0; e < kTileCols; ++e)
        dg[e] += buf[e * (kThreads / 2) + ci];
    }
    __syncthreads();
    if constexpr (kLayer) {
      if (s == s2) {
#pragma unroll
        for (int e = 0; e < kTileCols; ++e)
          buf[e * (kThreads / 2) + ci] = db[e];
      }
      __syncthreads();
      if (s == 0) {
#pragma unroll
        for (int e = 0; e < kTileCols; ++e)
          db[e] += buf[e * (kThreads / 2) + ci];
      }
      __syncthreads();
    }
  }
  if (s != 0)
    return;
#pragma unroll
  for (int q = 0; q < NV; ++q)
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const long long j = vq[q] * W + k;
      if (vq[q] < nv && j < D) {
        partial[c * P * D + j] = dg[q * W + k];
        if constexpr (kLayer)
          partial[(c * P + 1) * D + j] = db[q * W + k];
      }
    }
}

constexpr int kFinishCols = 32, kFinishLanes = 32; ///< normParamFinish's block

/// dgamma[j] (and dbeta[j]) = the chunks' partials in a fixed order: lane
/// y of the block sums chunks y, y + 32, ... in order, then the lanes'
/// sums are added in lane order. Block (32 columns, 32 lanes).
template <class T, bool kLayer>
__global__ void __launch_bounds__(kFinishCols *kFinishLanes)
    normParamFinish(const double *__restrict__ partial, T *__restrict__ dgamma,
                    T *__restrict__ dbeta, long long D, long long chunks) {
  constexpr long long P = kLayer ? 2 : 1;
  __shared__ double sg[kFinishLanes][kFinishCols + 1],
      sb[kFinishLanes][kFinishCols + 1];
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const long long j = (long long)blockIdx.x * kFinishCols + tx;
  double g = 0, b = 0;
  if (j < D)
    for (long long c = ty; c < chunks; c += kFinishLanes) {
      g += partial[c * P * D + j];
      if constexpr (kLayer)
        b += partial[(c * P + 1) * D + j];
    }
  sg[ty][tx] = g;
  sb[ty][tx] = b;
  __syncthreads();
  if (ty != 0 || j >= D)
    return;
  double tg = 0, tb = 0;
  for (int y = 0; y < kFinishLanes; ++y) {
    tg += sg[y][tx];
    tb += sb[y][tx];
  }
  dgamma[j] = fromF<T>(float(tg));
  if constexpr (kLayer)
    dbeta[j] = fromF<T>(float(tb));
}

// ---- host
// ------------------------------------------------------------------------
/// Whether every row of these operands (rows of D, or one row of D) starts
/// 16-byte aligned; null operands are ignored.
template <class T>
bool packsAligned(long long D, std::initializer_list<const void *> ptrs) {
  if (D % kW<T> != 0)
    return false;
  for (const void *p : ptrs)
    if (p && !alignedTo(p, 16))
      return false;
  return true;
}

/// Calls f(IntC<G>, IntC<kV>) with the row kernels' group size and the
/// packs each lane keeps in registers for rows of D elements.
template <class T, class F> void withRowPlan(long long D, F &&f) {
  const long long nv = packsOf<T>(D);
  if (nv <= 32 * 4)
    f(IntC<32>{}, IntC<4>{});
  else if (nv <= kWarpRowPacks)
    f(IntC<32>{}, IntC<8>{});
  else if (nv <= kThreads * 4LL)
    f(IntC<kThreads>{}, IntC<4>{});
  else if (nv <= kThreads * 8LL)
    f(IntC<kThreads>{}, IntC<8>{});
  else
    f(IntC<kThreads>{}, IntC<0>{});
}

/// Rows, row length, the parameter sums' chunking and column tiling, and
/// the workspace layout: [row stats | partials], each part 256-byte aligned.
struct NormPlan {
  long long R = 0, D = 0, nv = 0, chunks = 1, chunkLen = 1, tiles = 1;
  int ct = kThreads; ///< column threads per slice of normParamTile
  bool fuse = true;  ///< normParamTile computes the row statistics
  size_t statsBytes = 0, partialBytes = 0;
  size_t total() const { return statsBytes + partialBytes; }
};
size_t align256(size_t n) { return (n + 255) / 256 * 256; }

NormPlan planNorm(const KernelArgs &a, bool layer) {
  NormPlan p;
  const TensorArg &X = a.in[0];
  const long long W = X.dtype == DType::F32 ? 4 : 8; // kW of the float dtypes
  const long long NV = kTileCols / W;
  p.D = X.shape.back();
  p.R = p.D > 0 ? X.numel / p.D : 0;
  p.nv = (p.D + W - 1) / W;
  // Chunks of at least 32 rows (a multiple of kSub), at most 256 chunks:
  // a function of R only, so the sums' order never depends on the device.
  long long len = std::max<long long>(32, (p.R + 255) / 256);
  len = (len + kSub - 1) / kSub * kSub;
  p.chunkLen = len;
  p.chunks = p.R > 0 ? (p.R + len - 1) / len : 1;
  const long long colThreads = (p.nv + NV - 1) / NV;
  if (colThreads >= kThreads) {
    p.ct = kThreads;
    p.tiles = (colThreads + kThreads - 1) / kThreads;
  } else {
    p.ct = int(std::max<long long>(32, (colThreads + 31) / 32 * 32));
    p.tiles = 1;
  }
  p.fuse = p.tiles == 1 && p.nv <= kWarpRowPacks;
  const size_t perRow = layer ? 2 : 1;
  p.statsBytes = align256(size_t(p.R) * perRow * sizeof(double));
  p.partialBytes =
      align256(size_t(p.chunks) * perRow * size_t(p.D) * sizeof(double));
  return p;
}

size_t wsLayerNormParams(const KernelArgs &a) {
  return planNorm(a, true).total();
}
size_t wsRmsNormParams(const KernelArgs &a) {
  return planNorm(a, false).total();
}

/// The whole layer_norm / rms_norm gradient: dx when `dx` is non-null,
/// dgamma (and dbeta for layer norm) when `dgamma` is non-null.
template <class T, bool kLayer>
void normGrad(const KernelArgs &a, const Context &ctx, const T *g, const T *dy,
              T *dx, T *dgamma, T *dbeta, const char *name) {
  const NormPlan p = planNorm(a, kLayer);
  if (p.D == 0)
    return; // every operand is empty
  const T *x = static_cast<const T *>(a.in[0].data);
  const double eps = attrNum(*a.attrs, "epsilon");
  if (dx && p.R > 0) {
    const bool vec = packsAligned<T>(p.D, {x, g, dy, dx});
    withRowPlan<T>(p.D, [&](auto gTag, auto vTag) {
      constexpr int G = decltype(gTag)::value, kV = decltype(vTag)::value;
      if constexpr (kLayer)
        layerNormDxRows<T, G, kV>
            <<<blocksForGroups<G>(p.R), kThreads, 0, ctx.stream>>>(
                x, g, dy, dx, p.R, p.D, eps, vec);
      else
        rmsNormDxRows<T, G, kV>
            <<<blocksForGroups<G>(p.R), kThreads, 0, ctx.stream>>>(
                x, g, dy, dx, p.R, p.D, eps, vec);
      checkLaunch(name);
    });
  }
  if (!dgamma)
    return;
  if (!ctx.workspace || ctx.workspaceBytes < p.total())
    throw Error(std::string("cuda kernel ") + name + ": workspace too small");
  if (p.tiles > 0x7fffffffLL)
    throw Error(std::string("cuda kernel ") + name + ": rows too long");
  double *stats = static_cast<double *>(ctx.workspace);
  double *partial = reinterpret_cast<double *>(
      static_cast<char *>(ctx.workspace) + p.statsBytes);
  const bool vec = packsAligned<T>(p.D, {x, dy});
  const dim3 grid(unsigned(p.tiles), unsigned(p.chunks));
  if (p.fuse) {
    normParamTile<T, kLayer, true><<<grid, kThreads, 0, ctx.stream>>>(
        x, dy, nullptr, partial, p.R, p.D, p.chunkLen, p.ct, eps, vec);
    checkLaunch(name);
  } else {
    if (p.R > 0) {
      // The statistics as the dx kernel computes them: !fuse means more
      // than kWarpRowPacks packs (tiles > 1 needs more than kThreads
      // column threads), so a block per row there too.
      normStatsRows<T, kThreads, kLayer>
          <<<blocksForGroups<kThreads>(p.R), kThreads, 0, ctx.stream>>>(
              x, stats, p.R, p.D, eps, vec);
      checkLaunch(name);
    }
    normParamTile<T, kLayer, false><<<grid, kThreads, 0, ctx.stream>>>(
        x, dy, stats, partial, p.R, p.D, p.chunkLen, p.ct, eps, vec);
    checkLaunch(name);
  }
  normParamFinish<T, kLayer>
      <<<unsigned((p.D + kFinishCols - 1) / kFinishCols),
         dim3(kFinishCols, kFinishLanes), 0, ctx.stream>>>(
          partial, dgamma, dbeta, p.D, p.chunks);
  checkLaunch(name);
}

// ---- entries
// ---------------------------------------------------------------------
template <class T> const T *in(const KernelArgs &a, size_t i) {
  return static_cast<const T *>(a.in[i].data);
}
template <class T> T *out(const KernelArgs &a, size_t i) {
  return static_cast<T *>(a.out[i].data);
}

void kLayerNorm(const KernelArgs &a, const Context &ctx) {
  const TensorArg &X = a.in[0];
  if (X.numel == 0)
    return;
  const long long D = X.shape.back(), R = X.numel / D;
  const float eps = float(attrNum(*a.attrs, "epsilon"));
  dispatchFloat(X.dtype, [&](auto t) {
    using T = decltype(t);
    const T *x = in<T>(a, 0), *g = in<T>(a, 1), *b = in<T>(a, 2);
    T *y = out<T>(a, 0);
    const bool vec = packsAligned<T>(D, {x, g, b, y});
    withRowPlan<T>(D, [&](auto gTag, auto vTag) {
      constexpr int G = decltype(gTag)::value, kV = decltype(vTag)::value;
      layerNormRows<T, G, kV>
          <<<blocksForGroups<G>(R), kThreads, 0, ctx.stream>>>(x, g, b, y, R, D,
                                                               eps, vec);
      checkLaunch("layer_norm");
    });
  });
}

void kRmsNorm(const KernelArgs &a, const Context &ctx) {
  const TensorArg &X = a.in[0];
  if (X.numel == 0)
    return;
  const long long D = X.shape.back(), R = X.numel / D;
  const double eps = attrNum(*a.attrs, "epsilon");
  dispatchFloat(X.dtype, [&](auto t) {
    using T = decltype(t);
    const T *x = in<T>(a, 0), *g = in<T>(a, 1);
    T *y = out<T>(a, 0);
    const bool vec = packsAligned<T>(D, {x, g, y});
    withRowPlan<T>(D, [&](auto gTag, auto vTag) {
      constexpr int G = decltype(gTag)::value, kV = decltype(vTag)::value;
      rmsNormRows<T, G, kV><<<blocksForGroups<G>(R), kThreads, 0, ctx.stream>>>(
          x, g, y, R, D, eps, vec);
      checkLaunch("rms_norm");
    });
  });
}

// in: x, gamma, dy -> dx, dgamma, dbeta
void kLayerNormGrad(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    normGrad<T, true>(a, ctx, in<T>(a, 1), in<T>(a, 2), out<T>(a, 0),
                      out<T>(a, 1), out<T>(a, 2), "layer_norm_grad");
  });
}
// in: x, gamma, dy -> dx
void kLayerNormInputGrad(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    normGrad<T, true>(a, ctx, in<T>(a, 1), in<T>(a, 2), out<T>(a, 0), nullptr,
                      nullptr, "layer_norm_input_grad");
  });
}
// in: x, dy -> dgamma, dbeta
void kLayerNormParamGrad(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    normGrad<T, true>(a, ctx, nullptr, in<T>(a, 1), nullptr, out<T>(a, 0),
                      out<T>(a, 1), "layer_norm_param_grad");
  });
}
// in: x, gamma, dy -> dx, dgamma
void kRmsNormGrad(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    normGrad<T, false>(a, ctx, in<T>(a, 1), in<T>(a, 2), out<T>(a, 0),
                       out<T>(a, 1), nullptr, "rms_norm_grad");
  });
}
// in: x, gamma, dy -> dx
void kRmsNormInputGrad(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    normGrad<T, false>(a, ctx, in<T>(a, 1), in<T>(a, 2), out<T>(a, 0), nullptr,
                       nullptr, "rms_norm_input_grad");
  });
}
// in: x, dy -> dgamma
void kRmsNormParamGrad(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    using T = decltype(t);
    normGrad<T, false>(a, ctx, nullptr, in<T>(a, 1), nullptr, out<T>(a, 0),
                       nullptr, "rms_norm_param_grad");
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
      {"layer_norm_param_grad", kLayerNormParamGrad, nullptr,
       wsLayerNormParams},
      {"rms_norm_input_grad", kRmsNormInputGrad},
      {"rms_norm_param_grad", kRmsNormParamGrad, nullptr, wsRmsNormParams},
  };
  return entries;
}

} // namespace dtc::kernels::cuda
