//===- Common.cuh - helpers shared by the CUDA kernels ------------*- CUDA
//-*-===//
//
// dtype traits and dispatch (f32, bf16, f16 computed in f32; i32, i64),
// broadcast and axis views as launch parameters, the device-side error
// report, block reductions and launch sizes. Every kernel computes as the
// CPU kernels do (docs/kernels.md): bf16/f16 are storage formats, each
// result is rounded once to nearest even, reductions accumulate in f32 (or
// double where the CPU kernel does).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_CUDA_COMMON_CUH
#define DTC_KERNELS_CUDA_COMMON_CUH

#include "CudaKernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>

namespace dtc::kernels::cuda {

using rt::DType;
using rt::Error;

// ---- dtypes
// ------------------------------------------------------------------
/// f32 value of a stored element, and the element nearest (ties to even) to
/// an f32 value.
__device__ __forceinline__ float toF(float x) { return x; }
__device__ __forceinline__ float toF(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float toF(__half x) { return __half2float(x); }
template <class T> __device__ __forceinline__ T fromF(float x);
template <> __device__ __forceinline__ float fromF<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 fromF<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half fromF<__half>(float x) {
  return __float2half_rn(x);
}

/// Calls f(T{}) with T the C++ type of the float dtype `t` (f32, bf16, f16).
template <class F> void dispatchFloat(DType t, F &&f) {
  switch (t) {
  case DType::F32:
    f(float{});
    return;
  case DType::BF16:
    f(__nv_bfloat16{});
    return;
  case DType::F16:
    f(__half{});
    return;
  default:
    throw Error("cuda kernel: expected a float dtype, got " +
                std::string(rt::dtypeName(t)));
  }
}
/// Any dtype: f32, bf16, f16, i32, i64.
template <class F> void dispatchAny(DType t, F &&f) {
  switch (t) {
  case DType::F32:
    f(float{});
    return;
  case DType::BF16:
    f(__nv_bfloat16{});
    return;
  case DType::F16:
    f(__half{});
    return;
  case DType::I32:
    f(int32_t{});
    return;
  case DType::I64:
    f(int64_t{});
    return;
  }
}
/// Integer dtypes (ids, labels).
template <class F> void dispatchInt(DType t, F &&f) {
  if (t == DType::I32)
    f(int32_t{});
  else if (t == DType::I64)
    f(int64_t{});
  else
    throw Error("cuda kernel: expected an integer dtype, got " +
                std::string(rt::dtypeName(t)));
}
template <class T>
constexpr bool kIsFloatType =
    std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16> ||
    std::is_same_v<T, __half>;

// ---- shapes as launch parameters
// ---------------------------------------------
constexpr int kMaxDims = 8;

/// A numpy broadcast of N inputs to a contiguous output, as a kernel
/// parameter: dims (outermost first) and each operand's element stride per
/// dim (0 where broadcast). Size-1 dims dropped, contiguous runs merged.
template <int N> struct Bcast {
  int rank = 1;
  long long dims[kMaxDims] = {1};
  long long strides[kMaxDims][N] = {};
  /// The offsets of output element `i` in each input.
  __device__ __forceinline__ void offsets(long long i,
                                          long long (&off)[N]) const {
    for (int k = 0; k < N; ++k)
      off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const long long q = i / dims[d], r = i - q * dims[d];
      for (int k = 0; k < N; ++k)
        off[k] += r * strides[d][k];
      i = q;
    }
  }
};
/// Builds the plan (host). Throws when more than kMaxDims dims remain.
template <int N>
Bcast<N> makeBcast(const rt::Shape &out,
                   const std::array<const rt::Shape *, N> &ins) {
  const size_t R = out.size();
  std::vector<std::array<long long, N>> full(R);
  for (int k = 0; k < N; ++k) {
    const rt::Shape &s = *ins[size_t(k)];
    long long stride = 1;
    for (size_t i = 0; i < R; ++i) {
      const size_t d = R - 1 - i;
      const long long dim = i < s.size() ? s[s.size() - 1 - i] : 1;
      full[d][size_t(k)] = (dim == out[d] && dim != 1) ? stride : 0;
      stride *= dim;
    }
  }
  std::vector<long long> dims;
  std::vector<std::array<long long, N>> strides;
  for (size_t i = 0; i < R; ++i) {
    const size_t d = R - 1 - i;
    if (out[d] == 1)
      continue;
    if (!dims.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k)
        merge = merge &&
                full[d][size_t(k)] == strides.back()[size_t(k)] * dims.back();
      if (merge) {
        dims.back() *= out[d];
        continue;
      }
    }
    dims.push_back(out[d]);
    strides.push_back(full[d]);
  }
  Bcast<N> b;
  if (dims.empty())
    return b;
  if (dims.size() > size_t(kMaxDims))
    throw Error("cuda kernel: broadcast over more than 8 dimensions");
  b.rank = int(dims.size());
  for (int d = 0; d < b.rank; ++d) {
    b.dims[d] = dims[dims.size() - 1 - size_t(d)];
    for (int k = 0; k < N; ++k)
      b.strides[d][k] = strides[strides.size() - 1 - size_t(d)][size_t(k)];
  }
  return b;
}

/// [outer, n, inner] view of a shape around `axis` (as kernels/cpu's AxisView).
struct AxisView {
  long long outer = 1, n = 1, inner = 1;
};
inline AxisView axisView(const rt::Shape &s, int64_t axis) {
  AxisView v;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    if (i < axis)
      v.outer *= s[size_t(i)];
    else if (i == axis)
      v.n = s[size_t(i)];
    else
      v.inner *= s[size_t(i)];
  }
  return v;
}

// ---- data-dependent errors
// ---------------------------------------------------
/// What a kernel that checks indices passes to its launch: the op's name and
/// what the index is ("id", "label"), the index tensor's shape (for the
/// position in the message) and the exclusive bound.
struct IndexCheck {
  const char *op = nullptr, *what = nullptr;
  int rank = 0;
  long long dims[kMaxDims] = {};
  long long bound = 0;
};
inline IndexCheck makeIndexCheck(const char *op, const char *what,
                                 const rt::Shape &shape, long long bound) {
  IndexCheck c;
  c.op = op;
  c.what = what;
  c.rank = int(std::min<size_t>(shape.size(), kMaxDims));
  for (int d = 0; d < c.rank; ++d)
    c.dims[d] = shape[size_t(d)];
  c.bound = bound;
  return c;
}
/// Records the first bad index (later ones are dropped).
__device__ __forceinline__ void reportBadIndex(DeviceError *e,
                                               const IndexCheck &c,
                                               long long value,
                                               long long position) {
  if (atomicCAS(&e->flag, 0, -1) != 0)
    return;
  e->op = c.op;
  e->what = c.what;
  e->rank = c.rank;
  for (int d = 0; d < kMaxDims; ++d)
    e->dims[d] = c.dims[d];
  e->value = value;
  e->position = position;
  e->bound = c.bound;
  __threadfence_system();
  atomicExch(&e->flag, 1);
}
/// Records an integer division by zero in `op`.
__device__ __forceinline__ void reportDivByZero(DeviceError *e,
                                                const char *op) {
  if (atomicCAS(&e->flag, 0, -1) != 0)
    return;
  e->op = op;
  __threadfence_system();
  atomicExch(&e->flag, 2);
}

// ---- launches
// ----------------------------------------------------------------
/// Whether `p` is a multiple of `bytes` (the vector paths' precondition).
inline bool alignedTo(const void *p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

constexpr int kThreads = 256;
/// Blocks for a grid-stride loop over n elements.
/// At least one block, at most 65535 * 16 (grid-stride loops cover the rest).
inline unsigned cappedBlocks(long long blocks) {
  return unsigned(
      std::max<long long>(1, std::min<long long>(blocks, 65535LL * 16)));
}
inline unsigned gridFor(long long n, int threads = kThreads) {
  return cappedBlocks((n + threads - 1) / threads);
}

/// The group of the calling thread: first group index, group stride and
/// the thread's lane inside the group, for kGroup 32 (warps of the grid)
/// or kGroup == blockDim.x (blocks).
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
/// Blocks of kThreads for `groups` groups of kGroup threads.
template <int kGroup> unsigned blocksForGroups(long long groups) {
  return cappedBlocks(
      kGroup == 32 ? (groups + kThreads / 32 - 1) / (kThreads / 32) : groups);
}
#define DTC_GRID_STRIDE(i, n)                                                  \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;         \
       i < (n); i += (long long)gridDim.x * blockDim.x)

// ---- block reductions
// --------------------------------------------------------
template <class T> __device__ __forceinline__ T warpSum(T v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warpMax(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
/// thread gets the result. `shared` holds at least 32 T.
template <class T> __device__ T blockSum(T v, T *shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5,
            warps = (blockDim.x + 31) >> 5;
  v = warpSum(v);
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  total = warpSum(total);
  return total;
}
/// Max over the block (NaN propagates); every thread gets the result.
__device__ __forceinline__ float nanMax(float a, float b) {
  return (a != a || b != b) ? __int_as_float(0x7fc00000) : fmaxf(a, b);
}
__device__ __forceinline__ float blockMax(float v, float *shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5,
            warps = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1)
    v = nanMax(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  float total = lane < warps ? shared[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1)
    total = nanMax(total, __shfl_xor_sync(0xffffffffu, total, o));
  return total;
}

} // namespace dtc::kernels::cuda

#endif // DTC_KERNELS_CUDA_COMMON_CUH
