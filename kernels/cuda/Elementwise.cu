//===- Elementwise.cu - elementwise, broadcast, cast and copy kernels -----===//
//
// The CUDA counterparts of kernels/cpu/Elementwise.cpp: binary ops with
// numpy broadcasting (F or I), unary ops (neg also on I), the activation
// gradients and max_grad, and the data movers copy, reshape, broadcast and
// cast. Every kernel is a grid-stride loop over the output's elements.
//
// Numerics follow the CPU kernels: bf16/f16 are loaded to f32, computed in
// f32 and rounded once to nearest even; integer arithmetic wraps (done in
// the unsigned type); integer div truncates, x / -1 wraps, and x / 0 is
// reported to the backend (DeviceError, "div: integer division by zero").
// tanh, gelu and gelu_grad use the CPU's own tanh approximation (the
// rational tanhF of kernels/cpu/VecMath.h, ported below, operation by
// operation without fused multiply-adds): GELU adds tanh to 1 for negative
// x, where the CPU's deviation from the true tanh (up to 4e-7) would
// otherwise show; exp, log, sqrt and the sigmoid of silu use CUDA's
// accurate expf/logf/sqrtf (<= 2 ulp; never the __expf intrinsics).
//
// Same-shape operands take a path with 16-byte vector accesses when every
// pointer is 16-byte aligned (a scalar tail handles the rest). Broadcasts
// index through a plan (Common.cuh's Bcast: size-1 dims dropped,
// contiguous runs merged) with 32-bit index arithmetic when every operand
// has fewer than 2^31 elements, 64-bit otherwise.
//
//===----------------------------------------------------------------------===//
#include "Common.cuh"

#include <cstdint>
#include <limits>
#include <type_traits>

namespace dtc::kernels::cuda {
namespace {

// ---- launch plumbing
// -----------------------------------------------------------

/// Elements of T in one 16-byte access.
template <class T> constexpr int kVec = int(16 / sizeof(T));
template <class T> struct alignas(16) Pack {
  T v[kVec<T>];
};

/// A Bcast<N> with Idx (unsigned 32 or 64 bit) dims and strides; the
/// outermost dim needs no division (the index is below its size).
template <int N, class Idx> struct Plan {
  using Index = Idx;
  int rank = 1;
  Idx dims[kMaxDims] = {};
  Idx strides[kMaxDims][N] = {};
  __device__ __forceinline__ void offsets(Idx i, Idx (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k)
      off[k] = 0;
    for (int d = rank - 1; d > 0; --d) {
      const Idx q = i / dims[d], r = i - q * dims[d];
#pragma unroll
      for (int k = 0; k < N; ++k)
        off[k] += r * strides[d][k];
      i = q;
    }
#pragma unroll
    for (int k = 0; k < N; ++k)
      off[k] += i * strides[0][k];
  }
};

template <int N, class Idx> Plan<N, Idx> toPlan(const Bcast<N> &b) {
  Plan<N, Idx> p;
  p.rank = b.rank;
  for (int d = 0; d < b.rank; ++d) {
    p.dims[d] = Idx(b.dims[d]);
    for (int k = 0; k < N; ++k)
      p.strides[d][k] = Idx(b.strides[d][k]);
  }
  return p;
}

/// Whether the plan is one contiguous run in every input (same shapes up
/// to size-1 dims): the caller takes the flat path.
template <int N> bool isFlat(const Bcast<N> &b) {
  if (b.rank != 1)
    return false;
  for (int k = 0; k < N; ++k)
    if (b.strides[0][k] != 1)
      return false;
  return true;
}

/// Calls launch(plan) with a 32-bit plan when the output and every input
/// have fewer than 2^31 elements (all offsets then fit), else a 64-bit one.
template <int N, class L>
void withPlan(const Bcast<N> &b, long long outNumel,
              const std::array<long long, N> &inNumel, L &&launch) {
  bool small = outNumel <= 0x7fffffffLL;
  for (long long m : inNumel)
    small = small && m <= 0x7fffffffLL;
  if (small)
    launch(toPlan<N, unsigned>(b));
  else
    launch(toPlan<N, unsigned long long>(b));
}

/// Grid-stride index in the plan's type (no overflow: n < 2^31 for the
/// 32-bit type and the stride is below 2^29).
#define DTC_PLAN_STRIDE(Idx, i, n)                                             \
  for (Idx i = Idx(blockIdx.x) * Idx(blockDim.x) + Idx(threadIdx.x); i < (n);  \
       i += Idx(gridDim.x) * Idx(blockDim.x))

// ---- flat (same-shape) maps
// ----------------------------------------------------------

/// y[i] = f(x[i]) for i < n; 16-byte accesses when `vec` (all pointers
/// 16-byte aligned). Each element is read and written by one thread.
template <class T, class F>
__global__ void map1Kernel(const T *x, T *y, long long n, bool vec, F f) {
  if (vec) {
    constexpr int V = kVec<T>;
    const long long packs = n / V;
    const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(x);
    Pack<T> *yp = reinterpret_cast<Pack<T> *>(y);
    DTC_GRID_STRIDE(j, packs) {
      const Pack<T> a = xp[j];
      Pack<T> r;
#pragma unroll
      for (int k = 0; k < V; ++k)
        r.v[k] = f(a.v[k]);
      yp[j] = r;
    }
    const long long start = packs * V;
    DTC_GRID_STRIDE(i, n - start) y[start + i] = f(x[start + i]);
  } else {
    DTC_GRID_STRIDE(i, n) y[i] = f(x[i]);
  }
}

/// z[i] = f(x[i], y[i]) for i < n; vector accesses as map1Kernel.
template <class T, class F>
__global__ void map2Kernel(const T *x, const T *y, T *z, long long n, bool vec,
                           F f) {
  if (vec) {
    constexpr int V = kVec<T>;
    const long long packs = n / V;
    const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(x);
    const Pack<T> *yp = reinterpret_cast<const Pack<T> *>(y);
    Pack<T> *zp = reinterpret_cast<Pack<T> *>(z);
    DTC_GRID_STRIDE(j, packs) {
      const Pack<T> a = xp[j], b = yp[j];
      Pack<T> r;
#pragma unroll
      for (int k = 0; k < V; ++k)
        r.v[k] = f(a.v[k], b.v[k]);
      zp[j] = r;
    }
    const long long start = packs * V;
    DTC_GRID_STRIDE(i, n - start) z[start + i] = f(x[start + i], y[start + i]);
  } else {
    DTC_GRID_STRIDE(i, n) z[i] = f(x[i], y[i]);
  }
}

template <class T, class F>
void launchMap1(const T *x, T *y, long long n, F f, const Context &ctx,
                const char *name) {
  if (n <= 0)
    return;
  const bool vec = alignedTo(x, 16) && alignedTo(y, 16);
  const long long work = vec ? (n + kVec<T> - 1) / kVec<T> : n;
  map1Kernel<T, F><<<gridFor(work), kThreads, 0, ctx.stream>>>(x, y, n, vec, f);
  checkLaunch(name);
}

template <class T, class F>
void launchMap2(const T *x, const T *y, T *z, long long n, F f,
                const Context &ctx, const char *name) {
  if (n <= 0)
    return;
  const bool vec = alignedTo(x, 16) && alignedTo(y, 16) && alignedTo(z, 16);
  const long long work = vec ? (n + kVec<T> - 1) / kVec<T> : n;
  map2Kernel<T, F>
      <<<gridFor(work), kThreads, 0, ctx.stream>>>(x, y, z, n, vec, f);
  checkLaunch(name);
}

// ---- the CPU's float functions (kernels/cpu/VecMath.h, Elementwise.cpp)
// --------

/// std::min(std::max(x, lo), hi) as the CPU evaluates it: NaN stays NaN.
__device__ __forceinline__ float clampLikeStd(float x, float lo, float hi) {
  x = (x < lo) ? lo : x;
  return (hi < x) ? hi : x;
}

// The CPU's GELU family is evaluated here operation by operation with
// explicitly rounded intrinsics (__fmul_rn, __fadd_rn: never contracted to
// a fused multiply-add), in the C++ source's order: the values of the CPU
// kernel's portable build. The rational tanh is ill-conditioned near its
// clamp (p/q of two nearly equal sums): contracting its Horner steps moves
// tanhF(+-7.905) from exactly +-1 to 1 - 2.4e-7, which shows in gelu and
// gelu_grad for |x| > 5 (|x| 1e-7 and more).
__device__ __forceinline__ float mul(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ float add(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ __forceinline__ float sub(float a, float b) {
  return __fsub_rn(a, b);
}

/// kernels/cpu/VecMath.h's tanhF: a [13/6] rational function on
/// [-7.905, 7.905], within 4e-7 of tanh.
__device__ __forceinline__ float tanhCpu(float x) {
  constexpr float kClamp = 7.90531110763549805f;
  x = clampLikeStd(x, -kClamp, kClamp);
  const float x2 = mul(x, x);
  float p = -2.76076847742355e-16f;
  p = add(mul(p, x2), 2.00018790482477e-13f);
  p = add(mul(p, x2), -8.60467152213735e-11f);
  p = add(mul(p, x2), 5.12229709037114e-08f);
  p = add(mul(p, x2), 1.48572235717979e-05f);
  p = add(mul(p, x2), 6.37261928875436e-04f);
  p = add(mul(p, x2), 4.89352455891786e-03f);
  p = mul(p, x);
  float q = 1.19825839466702e-06f;
  q = add(mul(q, x2), 1.18534705686654e-04f);
  q = add(mul(q, x2), 2.26843463243900e-03f);
  q = add(mul(q, x2), 4.89352518554385e-03f);
  return __fdiv_rn(p, q);
}

constexpr float kGeluC = 0.7978845608028654f; // sqrt(2/pi), as VecMath.h
constexpr float kGeluA = 0.044715f;
constexpr float kGelu3A = 3.0f * kGeluA; // folded in f32, as GCC does

/// tanh(kGeluC (x + kGeluA x^3)), the CPU's argument order.
__device__ __forceinline__ float geluTanh(float x) {
  return tanhCpu(mul(kGeluC, add(x, mul(mul(mul(kGeluA, x), x), x))));
}
/// 0.5 x (1 + t) (VecMath.h's geluF).
__device__ __forceinline__ float geluCpu(float x) {
  return mul(mul(0.5f, x), add(1.0f, geluTanh(x)));
}
/// 0.5 (1 + t) + 0.5 x (1 - t^2) kGeluC (1 + 3 kGeluA x^2) (Elementwise.cpp's
/// geluDeriv).
__device__ __forceinline__ float geluDerivCpu(float x) {
  const float t = geluTanh(x);
  const float a = mul(0.5f, add(1.0f, t));
  const float b = mul(mul(mul(mul(0.5f, x), sub(1.0f, mul(t, t))), kGeluC),
                      add(1.0f, mul(mul(kGelu3A, x), x)));
  return add(a, b);
}
/// 1 / (1 + e^-x) (the CPU's form; accurate for x << 0 too).
__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// ---- functors
// ------------------------------------------------------------------------

/// A float function applied to a stored element: load to f32, round once.
template <class T, class Op> struct Lift1 {
  Op op;
  __device__ __forceinline__ T operator()(T x) const {
    return fromF<T>(op(toF(x)));
  }
};
template <class T, class Op> struct Lift2 {
  Op op;
  __device__ __forceinline__ T operator()(T x, T y) const {
    return fromF<T>(op(toF(x), toF(y)));
  }
};

struct NegF {
  __device__ float operator()(float x) const { return -x; }
};
struct ExpF {
  __device__ float operator()(float x) const { return expf(x); }
};
struct LogF {
  __device__ float operator()(float x) const { return logf(x); }
};
struct TanhF {
  __device__ float operator()(float x) const { return tanhCpu(x); }
};
struct SqrtF {
  __device__ float operator()(float x) const { return sqrtf(x); }
};
struct RsqrtF { // 1 / sqrt(x) with two IEEE roundings, as the CPU (not rsqrtf)
  __device__ float operator()(float x) const { return 1.0f / sqrtf(x); }
};
struct ReluF {
  __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};
struct GeluF {
  __device__ float operator()(float x) const { return geluCpu(x); }
};
struct SiluF {
  __device__ float operator()(float x) const { return x * sigmoid(x); }
};
struct ReluGradF {
  __device__ float operator()(float x, float dy) const {
    return x > 0.0f ? dy : 0.0f;
  }
};
struct GeluGradF {
  __device__ float operator()(float x, float dy) const {
    return dy * geluDerivCpu(x);
  }
};
struct SiluGradF {
  __device__ float operator()(float x, float dy) const {
    const float s = sigmoid(x);
    return dy * s * (1.0f + x * (1.0f - s));
  }
};

template <class T> struct NegInt {
  __device__ T operator()(T x) const {
    using U = std::make_unsigned_t<T>;
    return T(U(0) - U(x));
  }
};

enum class Bin { Add, Sub, Mul, Div, Max };

template <Bin op> struct BinF {
  __device__ float operator()(float x, float y) const {
    if constexpr (op == Bin::Add)
      return x + y;
    else if constexpr (op == Bin::Sub)
      return x - y;
    else if constexpr (op == Bin::Mul)
      return x * y;
    else if constexpr (op == Bin::Div)
      return x / y;
    else
      return (x > y || x != x) ? x
                               : y; // the CPU's maxOf: NaN wins, ties give y
  }
};

/// Integer ops: wrap in the unsigned type; div reports a zero divisor to
/// `err` under the host string `name` and writes 0 for that element.
template <Bin op, class T> struct BinInt {
  DeviceError *err = nullptr;
  const char *name = nullptr; // a HOST string literal: stored, never read here
  __device__ T operator()(T a, T b) const {
    using U = std::make_unsigned_t<T>;
    if constexpr (op == Bin::Add)
      return T(U(a) + U(b));
    else if constexpr (op == Bin::Sub)
      return T(U(a) - U(b));
    else if constexpr (op == Bin::Mul)
      return T(U(a) * U(b));
    else if constexpr (op == Bin::Div) {
      if (b == T(0)) {
        if (err)
          reportDivByZero(err, name);
        return T(0);
      }
      if (b == T(-1))
        return T(U(0) - U(a)); // no INT_MIN / -1 trap
      return a / b;
    } else {
      return a > b ? a : b;
    }
  }
};

// ---- binary ops
// ------------------------------------------------------------------

template <class T, class F, class P>
__global__ void binaryBcastKernel(const T *x, const T *y, T *z,
                                  typename P::Index n,
                                  const __grid_constant__ P plan, F f) {
  using Idx = typename P::Index;
  DTC_PLAN_STRIDE(Idx, i, n) {
    Idx off[2];
    plan.offsets(i, off);
    z[i] = f(x[off[0]], y[off[1]]);
  }
}

template <class T, class F>
void launchBinary(const KernelArgs &a, const Context &ctx, F f,
                  const char *name) {
  const TensorArg &l = a.in[0], &r = a.in[1], &o = a.out[0];
  const long long n = o.numel;
  if (n <= 0)
    return;
  const T *x = l.as<T>(), *y = r.as<T>();
  T *z = o.as<T>();
  const Bcast<2> b = makeBcast<2>(o.shape, {&l.shape, &r.shape});
  if (isFlat(b)) {
    launchMap2(x, y, z, n, f, ctx, name);
    return;
  }
  withPlan<2>(b, n, {l.numel, r.numel}, [&](auto plan) {
    using P = decltype(plan);
    using Idx = typename P::Index;
    binaryBcastKernel<T, F, P>
        <<<gridFor(n), kThreads, 0, ctx.stream>>>(x, y, z, Idx(n), plan, f);
    checkLaunch(name);
  });
}

template <Bin op> constexpr const char *binName() {
  if constexpr (op == Bin::Add)
    return "add";
  else if constexpr (op == Bin::Sub)
    return "sub";
  else if constexpr (op == Bin::Mul)
    return "mul";
  else if constexpr (op == Bin::Div)
    return "div";
  else
    return "max";
}

template <Bin op> void kBinary(const KernelArgs &a, const Context &ctx) {
  const char *name =
      binName<op>(); // host address: DeviceError::op must be a host string
  dispatchAny(a.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloatType<T>) {
      launchBinary<T>(a, ctx, Lift2<T, BinF<op>>{}, name);
    } else {
      BinInt<op, T> f;
      f.err = ctx.error;
      f.name = name;
      launchBinary<T>(a, ctx, f, name);
    }
  });
}

// ---- unary ops and activation gradients
// ------------------------------------------

template <class Op>
void unaryFloat(const KernelArgs &a, const Context &ctx, const char *name) {
  dispatchFloat(a.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    launchMap1(a.in[0].as<T>(), a.out[0].as<T>(), a.in[0].numel, Lift1<T, Op>{},
               ctx, name);
  });
}

void kNeg(const KernelArgs &a, const Context &ctx) {
  dispatchAny(a.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloatType<T>)
      launchMap1(a.in[0].as<T>(), a.out[0].as<T>(), a.in[0].numel,
                 Lift1<T, NegF>{}, ctx, "neg");
    else
      launchMap1(a.in[0].as<T>(), a.out[0].as<T>(), a.in[0].numel, NegInt<T>{},
                 ctx, "neg");
  });
}
void kExp(const KernelArgs &a, const Context &ctx) {
  unaryFloat<ExpF>(a, ctx, "exp");
}
void kLog(const KernelArgs &a, const Context &ctx) {
  unaryFloat<LogF>(a, ctx, "log");
}
void kTanh(const KernelArgs &a, const Context &ctx) {
  unaryFloat<TanhF>(a, ctx, "tanh");
}
void kSqrt(const KernelArgs &a, const Context &ctx) {
  unaryFloat<SqrtF>(a, ctx, "sqrt");
}
void kRsqrt(const KernelArgs &a, const Context &ctx) {
  unaryFloat<RsqrtF>(a, ctx, "rsqrt");
}
void kRelu(const KernelArgs &a, const Context &ctx) {
  unaryFloat<ReluF>(a, ctx, "relu");
}
void kGelu(const KernelArgs &a, const Context &ctx) {
  unaryFloat<GeluF>(a, ctx, "gelu");
}
void kSilu(const KernelArgs &a, const Context &ctx) {
  unaryFloat<SiluF>(a, ctx, "silu");
}

/// dx = f(x, dy), all one shape.
template <class Op>
void gradFloat(const KernelArgs &a, const Context &ctx, const char *name) {
  dispatchFloat(a.in[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    launchMap2(a.in[0].as<T>(), a.in[1].as<T>(), a.out[0].as<T>(),
               a.in[0].numel, Lift2<T, Op>{}, ctx, name);
  });
}
void kReluGrad(const KernelArgs &a, const Context &ctx) {
  gradFloat<ReluGradF>(a, ctx, "relu_grad");
}
void kGeluGrad(const KernelArgs &a, const Context &ctx) {
  gradFloat<GeluGradF>(a, ctx, "gelu_grad");
}
void kSiluGrad(const KernelArgs &a, const Context &ctx) {
  gradFloat<SiluGradF>(a, ctx, "silu_grad");
}

/// dlhs = dy where lhs >= rhs, drhs = dy where rhs > lhs (0 elsewhere; NaN
/// compares false both ways), lhs and rhs broadcast to dy's shape.
template <class T, class P>
__global__ void maxGradKernel(const T *x, const T *y, const T *dy, T *dl, T *dr,
                              typename P::Index n,
                              const __grid_constant__ P plan) {
  using Idx = typename P::Index;
  DTC_PLAN_STRIDE(Idx, i, n) {
    Idx off[2];
    plan.offsets(i, off);
    const float lv = toF(x[off[0]]), rv = toF(y[off[1]]), g = toF(dy[i]);
    dl[i] = fromF<T>(lv >= rv ? g : 0.0f);
    dr[i] = fromF<T>(rv > lv ? g : 0.0f);
  }
}

void kMaxGrad(const KernelArgs &a, const Context &ctx) {
  const TensorArg &l = a.in[0], &r = a.in[1], &dy = a.in[2];
  const long long n = dy.numel;
  if (n <= 0)
    return;
  const Bcast<2> b = makeBcast<2>(dy.shape, {&l.shape, &r.shape});
  dispatchFloat(dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    withPlan<2>(b, n, {l.numel, r.numel}, [&](auto plan) {
      using P = decltype(plan);
      using Idx = typename P::Index;
      maxGradKernel<T, P><<<gridFor(n), kThreads, 0, ctx.stream>>>(
          l.as<T>(), r.as<T>(), dy.as<T>(), a.out[0].as<T>(), a.out[1].as<T>(),
          Idx(n), plan);
      checkLaunch("max_grad");
    });
  });
}

// ---- data movement
// ----------------------------------------------------------------

/// Device-to-device copy of `bytes` on the stream (nothing when in place).
void copyBytes(void *dst, const void *src, size_t bytes, const Context &ctx,
               const char *what) {
  if (bytes == 0 || dst == src)
    return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.stream),
        what);
}

void kCopy(const KernelArgs &a, const Context &ctx) {
  copyBytes(a.out[0].data, a.in[0].data,
            size_t(a.in[0].numel) * rt::dtypeSize(a.in[0].dtype), ctx,
            "cuda kernel copy: cudaMemcpyAsync");
}
/// Same elements in row-major order; in place (out == in) does nothing.
void kReshape(const KernelArgs &a, const Context &ctx) {
  copyBytes(a.out[0].data, a.in[0].data,
            size_t(a.in[0].numel) * rt::dtypeSize(a.in[0].dtype), ctx,
            "cuda kernel reshape: cudaMemcpyAsync");
}

/// y[i] = x[offset of i], elements moved as raw words of their size.
template <class W, class P>
__global__ void broadcastKernel(const W *x, W *y, typename P::Index n,
                                const __grid_constant__ P plan) {
  using Idx = typename P::Index;
  DTC_PLAN_STRIDE(Idx, i, n) {
    Idx off[1];
    plan.offsets(i, off);
    y[i] = x[off[0]];
  }
}

template <class W>
void broadcastAs(const TensorArg &in, const TensorArg &out,
                 const Context &ctx) {
  const long long n = out.numel;
  if (n <= 0)
    return;
  const Bcast<1> b = makeBcast<1>(out.shape, {&in.shape});
  if (isFlat(b)) { // nothing broadcast: the same elements
    copyBytes(out.data, in.data, size_t(n) * sizeof(W), ctx,
              "cuda kernel broadcast: cudaMemcpyAsync");
    return;
  }
  withPlan<1>(b, n, {in.numel}, [&](auto plan) {
    using P = decltype(plan);
    using Idx = typename P::Index;
    broadcastKernel<W, P><<<gridFor(n), kThreads, 0, ctx.stream>>>(
        in.as<W>(), out.as<W>(), Idx(n), plan);
    checkLaunch("broadcast");
  });
}

void kBroadcast(const KernelArgs &a, const Context &ctx) {
  switch (rt::dtypeSize(a.in[0].dtype)) {
  case 8:
    broadcastAs<unsigned long long>(a.in[0], a.out[0], ctx);
    break;
  case 2:
    broadcastAs<uint16_t>(a.in[0], a.out[0], ctx);
    break;
  default:
    broadcastAs<uint32_t>(a.in[0], a.out[0], ctx);
    break;
  }
}

/// One element converted as kernels/cpu's convert: float to int truncates
/// toward zero, NaN gives 0, out-of-range values saturate; int to int
/// saturates; to a float dtype through the f32 value (int to f32 rounds to
/// nearest even), then rounded once to bf16/f16.
template <class To, class From> __device__ __forceinline__ To castOne(From v) {
  if constexpr (kIsFloatType<From>) {
    const float f = toF(v);
    if constexpr (kIsFloatType<To>) {
      return fromF<To>(f);
    } else {
      if (f != f)
        return To(0);
      const double t = trunc(double(f));
      if (t <= double(std::numeric_limits<To>::min()))
        return std::numeric_limits<To>::min();
      if (t >= double(std::numeric_limits<To>::max()))
        return std::numeric_limits<To>::max();
      return To(t);
    }
  } else {
    if constexpr (kIsFloatType<To>) {
      return fromF<To>(float(v)); // cvt.rn: round to nearest even
    } else {
      if (v < From(0) &&
          (long long)v < (long long)std::numeric_limits<To>::min())
        return std::numeric_limits<To>::min();
      if ((long long)v > (long long)std::numeric_limits<To>::max())
        return std::numeric_limits<To>::max();
      return To(v);
    }
  }
}

template <class To, class From>
__global__ void castKernel(const From *x, To *y, long long n) {
  DTC_GRID_STRIDE(i, n) y[i] = castOne<To, From>(x[i]);
}

/// Four elements moved as one aligned access (8 or 16 bytes).
template <class T> struct alignas(4 * sizeof(T)) Four {
  T v[4];
};

/// castKernel four elements at a time: one load and one store per four
/// (mixed precision casts every parameter every step, a memory-bound
/// stream whose 2- and 4-byte accesses left bandwidth unused). The same
/// castOne per element.
template <class To, class From>
__global__ void castKernel4(const Four<From> *x, Four<To> *y, long long n4) {
  DTC_GRID_STRIDE(j, n4) {
    const Four<From> in = x[j];
    Four<To> out;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      out.v[k] = castOne<To, From>(in.v[k]);
    y[j] = out;
  }
}

void kCast(const KernelArgs &a, const Context &ctx) {
  const long long n = a.in[0].numel;
  if (n <= 0)
    return;
  dispatchAny(a.in[0].dtype, [&](auto fromTag) {
    using From = decltype(fromTag);
    dispatchAny(a.out[0].dtype, [&](auto toTag) {
      using To = decltype(toTag);
      const From *x = a.in[0].as<From>();
      To *y = a.out[0].as<To>();
      long long done = 0;
      if constexpr (sizeof(From) <= 4 && sizeof(To) <= 4) {
        if (n >= 4 && alignedTo(x, sizeof(Four<From>)) &&
            alignedTo(y, sizeof(Four<To>))) {
          const long long n4 = n / 4;
          castKernel4<To, From><<<gridFor(n4), kThreads, 0, ctx.stream>>>(
              reinterpret_cast<const Four<From> *>(x),
              reinterpret_cast<Four<To> *>(y), n4);
          checkLaunch("cast");
          done = 4 * n4;
        }
      }
      if (done < n) {
        castKernel<To, From><<<gridFor(n - done), kThreads, 0, ctx.stream>>>(
            x + done, y + done, n - done);
        checkLaunch("cast");
      }
    });
  });
}

} // namespace

const std::vector<Entry> &elementwiseKernels() {
  static const std::vector<Entry> entries = {
      {"add", kBinary<Bin::Add>},
      {"sub", kBinary<Bin::Sub>},
      {"mul", kBinary<Bin::Mul>},
      {"div", kBinary<Bin::Div>},
      {"max", kBinary<Bin::Max>},
      {"neg", kNeg},
      {"exp", kExp},
      {"log", kLog},
      {"tanh", kTanh},
      {"sqrt", kSqrt},
      {"rsqrt", kRsqrt},
      {"relu", kRelu},
      {"gelu", kGelu},
      {"silu", kSilu},
      {"relu_grad", kReluGrad},
      {"gelu_grad", kGeluGrad},
      {"silu_grad", kSiluGrad},
      {"max_grad", kMaxGrad},
      {"broadcast", kBroadcast},
      {"copy", kCopy},
      {"reshape", kReshape},
      {"cast", kCast},
  };
  return entries;
}

} // namespace dtc::kernels::cuda
