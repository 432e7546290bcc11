//===- Elementwise.cpp - elementwise, broadcast, cast and copy kernels ----===//
#include "Common.h"
#include "Parallel.h"
#include "VecMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace dtc::kernels::cpu {
namespace {

// ---- binary ops with numpy broadcasting -----------------------------------

// Elements per thread below which a loop stays on one thread.
constexpr int64_t kGrain = 1 << 14;

// The inner loops. Float ones get one clone per ISA level (VecMath.h);
// integer ones stay plain: they may throw (division by zero), and an
// exception must not unwind through a clone's dispatcher.
template <class T, class Op>
void runBothPlain(const T *xs, const T *ys, T *dst, int64_t len, Op op) {
  for (int64_t i = 0; i < len; ++i)
    dst[i] = op(xs[i], ys[i]);
}
template <class T, class Op>
DTC_VECTOR_CLONES void runBothVec(const T *xs, const T *ys, T *dst, int64_t len,
                                  Op op) {
  for (int64_t i = 0; i < len; ++i)
    dst[i] = op(xs[i], ys[i]);
}
template <class T, class Op>
void runBoth(const T *xs, const T *ys, T *dst, int64_t len, Op op) {
  if constexpr (std::is_floating_point_v<T>)
    runBothVec(xs, ys, dst, len, op);
  else
    runBothPlain(xs, ys, dst, len, op);
}
template <class T, class Op>
DTC_VECTOR_CLONES void runLeftVec(const T *xs, T yv, T *dst, int64_t len,
                                  Op op) {
  for (int64_t i = 0; i < len; ++i)
    dst[i] = op(xs[i], yv);
}
template <class T, class Op>
void runLeft(const T *xs, T yv, T *dst, int64_t len, Op op) {
  if constexpr (std::is_floating_point_v<T>) {
    runLeftVec(xs, yv, dst, len, op);
  } else {
    for (int64_t i = 0; i < len; ++i)
      dst[i] = op(xs[i], yv);
  }
}
template <class T, class Op>
DTC_VECTOR_CLONES void runRightVec(T xv, const T *ys, T *dst, int64_t len,
                                   Op op) {
  for (int64_t i = 0; i < len; ++i)
    dst[i] = op(xv, ys[i]);
}
template <class T, class Op>
void runRight(T xv, const T *ys, T *dst, int64_t len, Op op) {
  if constexpr (std::is_floating_point_v<T>) {
    runRightVec(xv, ys, dst, len, op);
  } else {
    for (int64_t i = 0; i < len; ++i)
      dst[i] = op(xv, ys[i]);
  }
}

template <class T, class Op> void binaryLoop(const KernelArgs &a, Op op) {
  const TensorArg &l = a.in[0], &r = a.in[1], &o = a.out[0];
  const T *x = l.as<T>(), *y = r.as<T>();
  T *z = o.as<T>();
  auto plan = planBroadcast<2>(o.shape, {&l.shape, &r.shape});
  // Same shapes (one contiguous run): split it across the threads.
  if (plan.dims.size() == 1 && plan.strides[0][0] == 1 &&
      plan.strides[0][1] == 1) {
    parallelFor(contextOf(a), o.numel, kGrain, [&](int64_t b, int64_t e, int) {
      runBoth(x + b, y + b, z + b, e - b, op);
    });
    return;
  }
  forEachBroadcast<2>(plan, [&](int64_t oo, const std::array<int64_t, 2> &io,
                                int64_t len, const std::array<int64_t, 2> &st) {
    T *dst = z + oo;
    const T *xs = x + io[0], *ys = y + io[1];
    if (st[0] == 1 && st[1] == 1) {
      runBoth(xs, ys, dst, len, op);
    } else if (st[0] == 1 && st[1] == 0) {
      runLeft(xs, *ys, dst, len, op);
    } else if (st[0] == 0 && st[1] == 1) {
      runRight(*xs, ys, dst, len, op);
    } else {
      for (int64_t i = 0; i < len; ++i)
        dst[i] = op(xs[i * st[0]], ys[i * st[1]]);
    }
  });
}

// Integer arithmetic wraps (two's complement) instead of being undefined.
template <class T> T wrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return T(U(a) + U(b));
}
template <class T> T wrapSub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return T(U(a) - U(b));
}
template <class T> T wrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return T(U(a) * U(b));
}
template <class T> T intDiv(T a, T b) {
  if (b == 0)
    throw Error("div: integer division by zero");
  if (b == T(-1))
    return wrapSub(T(0), a); // avoids the INT_MIN / -1 trap
  return a / b;
}
template <class T> T maxOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return (a > b || std::isnan(a)) ? a : b;
  else
    return a > b ? a : b;
}

enum class BinOp { Add, Sub, Mul, Div, Max };

template <BinOp op> void binary(const KernelArgs &a) {
  switch (a.in[0].dtype) {
  case DType::F32:
    binaryLoop<float>(a, [](float x, float y) {
      if constexpr (op == BinOp::Add)
        return x + y;
      else if constexpr (op == BinOp::Sub)
        return x - y;
      else if constexpr (op == BinOp::Mul)
        return x * y;
      else if constexpr (op == BinOp::Div)
        return x / y;
      else
        return maxOf(x, y);
    });
    break;
  case DType::I32:
  case DType::I64: {
    auto run = [&](auto tag) {
      using T = decltype(tag);
      binaryLoop<T>(a, [](T x, T y) {
        if constexpr (op == BinOp::Add)
          return wrapAdd(x, y);
        else if constexpr (op == BinOp::Sub)
          return wrapSub(x, y);
        else if constexpr (op == BinOp::Mul)
          return wrapMul(x, y);
        else if constexpr (op == BinOp::Div)
          return intDiv(x, y);
        else
          return maxOf(x, y);
      });
    };
    if (a.in[0].dtype == DType::I32)
      run(int32_t());
    else
      run(int64_t());
    break;
  }
  case DType::BF16:
  case DType::F16:
    break; // never here: the backend hands 16-bit operands over as f32
  }
}

// ---- unary ops --------------------------------------------------------------

template <class F>
DTC_VECTOR_CLONES void mapUnary(const float *x, float *y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = f(x[i]);
}
template <class F> void unaryF32(const KernelArgs &a, F f) {
  const float *x = a.in[0].as<float>();
  float *y = a.out[0].as<float>();
  parallelFor(
      contextOf(a), a.in[0].numel, kGrain,
      [&](int64_t b, int64_t e, int) { mapUnary(x + b, y + b, e - b, f); });
}

inline float geluDeriv(float x) {
  float t = tanhF(kGeluC * (x + kGeluA * x * x * x));
  return 0.5f * (1.0f + t) +
         0.5f * x * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * x * x);
}
// e^x within about 2 ulp, in plain float arithmetic (it vectorizes like
// tanhF): x = k ln2 + r with |r| <= ln2/2 (ln2 split in two so k ln2 is
// exact), e^r by its degree-7 Taylor polynomial (remainder < 3e-9
// relative), 2^k through the exponent bits. Inputs are clamped to where
// e^x is a normal float (results below 1.2e-38 become that).
inline float expF(float in) {
  // -87 first: std::max returns its first argument for a NaN, so a NaN
  // becomes -87 here and the integer conversion below stays defined (the
  // NaN is returned as it came).
  const float x = std::min(std::max(-87.0f, in), 88.0f);
  // Round to nearest without a call: adding 1.5 * 2^23 leaves no fraction bits.
  constexpr float kRound = 12582912.0f;
  const float k = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - k * 0.693145751953125f) - k * 1.428606765330187045e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (int32_t(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return in == in ? p * scale : in;
}
// 1 / (1 + e^-x): accurate to a few ulp everywhere. (The tanh form
// (1 + tanh(x/2)) / 2 cancels for x << 0: 2.4e-4 relative at x = -8, and 0
// instead of 1e-7 below x = -15.8.)
inline float sigmoidF(float x) { return 1.0f / (1.0f + expF(-x)); }

void kNeg(const KernelArgs &a) {
  const int64_t n = a.in[0].numel;
  switch (a.in[0].dtype) {
  case DType::F32:
    unaryF32(a, [](float x) { return -x; });
    break;
  case DType::I32: {
    const int32_t *x = a.in[0].as<int32_t>();
    int32_t *y = a.out[0].as<int32_t>();
    for (int64_t i = 0; i < n; ++i)
      y[i] = wrapSub(int32_t(0), x[i]);
    break;
  }
  case DType::I64: {
    const int64_t *x = a.in[0].as<int64_t>();
    int64_t *y = a.out[0].as<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      y[i] = wrapSub(int64_t(0), x[i]);
    break;
  }
  case DType::BF16:
  case DType::F16:
    break; // never here: the backend hands 16-bit operands over as f32
  }
}
void kExp(const KernelArgs &a) {
  unaryF32(a, [](float x) { return std::exp(x); });
}
void kLog(const KernelArgs &a) {
  unaryF32(a, [](float x) { return std::log(x); });
}
void kTanh(const KernelArgs &a) {
  unaryF32(a, [](float x) { return tanhF(x); });
}
void kSqrt(const KernelArgs &a) {
  unaryF32(a, [](float x) { return std::sqrt(x); });
}
void kRsqrt(const KernelArgs &a) {
  unaryF32(a, [](float x) { return 1.0f / std::sqrt(x); });
}
void kRelu(const KernelArgs &a) {
  unaryF32(a, [](float x) { return x > 0.0f ? x : 0.0f; });
}
void kGelu(const KernelArgs &a) {
  unaryF32(a, [](float x) { return geluF(x); });
}
void kSilu(const KernelArgs &a) {
  unaryF32(a, [](float x) { return x * sigmoidF(x); });
}

// ---- activation gradients
// ------------------------------------------------------

template <class F> void gradF32(const KernelArgs &a, F f) {
  const float *x = a.in[0].as<float>(), *dy = a.in[1].as<float>();
  float *dx = a.out[0].as<float>();
  parallelFor(contextOf(a), a.in[0].numel, kGrain,
              [&](int64_t b, int64_t e, int) {
                runBoth(x + b, dy + b, dx + b, e - b, f);
              });
}
void kReluGrad(const KernelArgs &a) {
  gradF32(a, [](float x, float dy) { return x > 0.0f ? dy : 0.0f; });
}
void kGeluGrad(const KernelArgs &a) {
  gradF32(a, [](float x, float dy) { return dy * geluDeriv(x); });
}
void kSiluGrad(const KernelArgs &a) {
  gradF32(a, [](float x, float dy) {
    float s = sigmoidF(x);
    return dy * s * (1.0f + x * (1.0f - s));
  });
}

void kMaxGrad(const KernelArgs &a) {
  const TensorArg &l = a.in[0], &r = a.in[1], &dy = a.in[2];
  const float *x = l.as<float>(), *y = r.as<float>(), *g = dy.as<float>();
  float *dl = a.out[0].as<float>(), *dr = a.out[1].as<float>();
  auto plan = planBroadcast<2>(dy.shape, {&l.shape, &r.shape});
  forEachBroadcast<2>(plan, [&](int64_t oo, const std::array<int64_t, 2> &io,
                                int64_t len, const std::array<int64_t, 2> &st) {
    for (int64_t i = 0; i < len; ++i) {
      float lv = x[io[0] + i * st[0]], rv = y[io[1] + i * st[1]],
            gv = g[oo + i];
      dl[oo + i] = lv >= rv ? gv : 0.0f;
      dr[oo + i] = rv > lv ? gv : 0.0f;
    }
  });
}

// ---- data movement
// -------------------------------------------------------------

template <class T>
void broadcastCopy(const TensorArg &in, const TensorArg &out) {
  const T *x = in.as<T>();
  T *y = out.as<T>();
  auto plan = planBroadcast<1>(out.shape, {&in.shape});
  forEachBroadcast<1>(plan, [&](int64_t oo, const std::array<int64_t, 1> &io,
                                int64_t len, const std::array<int64_t, 1> &st) {
    if (st[0] == 1) {
      std::memcpy(y + oo, x + io[0], size_t(len) * sizeof(T));
    } else {
      const T v = x[io[0]];
      for (int64_t i = 0; i < len; ++i)
        y[oo + i] = v;
    }
  });
}

void kBroadcast(const KernelArgs &a) {
  switch (rt::dtypeSize(a.in[0].dtype)) {
  case 8:
    broadcastCopy<uint64_t>(a.in[0], a.out[0]);
    break;
  case 2:
    broadcastCopy<uint16_t>(a.in[0], a.out[0]);
    break;
  default:
    broadcastCopy<uint32_t>(a.in[0], a.out[0]);
    break;
  }
}

void kCopy(const KernelArgs &a) {
  if (a.out[0].data != a.in[0].data)
    std::memcpy(a.out[0].data, a.in[0].data,
                size_t(a.in[0].numel) * rt::dtypeSize(a.in[0].dtype));
}

// Float to integer: truncate toward zero; NaN gives 0; values outside the
// target's range saturate. Integer to integer: saturate as well.
template <class To, class From> To convert(From v) {
  if constexpr (std::is_floating_point_v<To>) {
    return To(v);
  } else if constexpr (std::is_floating_point_v<From>) {
    if (std::isnan(v))
      return 0;
    double t = std::trunc(double(v));
    if (t <= double(std::numeric_limits<To>::min()))
      return std::numeric_limits<To>::min();
    if (t >= double(std::numeric_limits<To>::max()))
      return std::numeric_limits<To>::max();
    return To(t);
  } else {
    if (v < From(0) && int64_t(v) < int64_t(std::numeric_limits<To>::min()))
      return std::numeric_limits<To>::min();
    if (int64_t(v) > int64_t(std::numeric_limits<To>::max()))
      return std::numeric_limits<To>::max();
    return To(v);
  }
}

template <class To, class From> void castLoop(const KernelArgs &a) {
  const From *x = a.in[0].as<From>();
  To *y = a.out[0].as<To>();
  const int64_t n = a.in[0].numel;
  for (int64_t i = 0; i < n; ++i)
    y[i] = convert<To>(x[i]);
}

template <class To> void castTo(const KernelArgs &a) {
  switch (a.in[0].dtype) {
  case DType::F32:
    castLoop<To, float>(a);
    break;
  case DType::I32:
    castLoop<To, int32_t>(a);
    break;
  case DType::I64:
    castLoop<To, int64_t>(a);
    break;
  case DType::BF16:
  case DType::F16: {
    // Through the input's exact f32 values.
    std::vector<float> f(size_t(a.in[0].numel));
    toF32(contextOf(a), a.in[0].dtype, a.in[0].data, f.data(), a.in[0].numel);
    To *y = a.out[0].as<To>();
    for (int64_t i = 0; i < a.in[0].numel; ++i)
      y[i] = convert<To>(f[size_t(i)]);
    break;
  }
  }
}

// A cast to bf16 or f16 computes the f32 value (as a cast to f32 would) and
// rounds it to nearest even.
void castToLow(const KernelArgs &a) {
  const TensorArg &x = a.in[0], &y = a.out[0];
  if (x.dtype == DType::F32) {
    fromF32(contextOf(a), y.dtype, x.as<float>(), y.data, x.numel);
    return;
  }
  std::vector<float> f(size_t(x.numel));
  KernelArgs toF = a;
  toF.out[0].dtype = DType::F32;
  toF.out[0].data = f.data();
  castTo<float>(toF);
  fromF32(contextOf(a), y.dtype, f.data(), y.data, x.numel);
}

void kCast(const KernelArgs &a) {
  switch (a.out[0].dtype) {
  case DType::F32:
    if (rt::isLowPrecision(a.in[0].dtype))
      toF32(contextOf(a), a.in[0].dtype, a.in[0].data, a.out[0].as<float>(),
            a.in[0].numel);
    else
      castTo<float>(a);
    break;
  case DType::I32:
    castTo<int32_t>(a);
    break;
  case DType::I64:
    castTo<int64_t>(a);
    break;
  case DType::BF16:
  case DType::F16:
    castToLow(a);
    break;
  }
}

} // namespace

const std::vector<Entry> &elementwiseKernels() {
  static const std::vector<Entry> e = {
      {"add", binary<BinOp::Add>},
      {"sub", binary<BinOp::Sub>},
      {"mul", binary<BinOp::Mul>},
      {"div", binary<BinOp::Div>},
      {"max", binary<BinOp::Max>},
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
      {"reshape", kCopy},
      {"cast", kCast},
  };
  return e;
}

} // namespace dtc::kernels::cpu
