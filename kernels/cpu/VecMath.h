//===- VecMath.h - vectorizable float math for the CPU kernels ----*- C++
//-*-===//
//
// Plain float arithmetic that GCC vectorizes (libm's expf is a scalar call).
// Loops over these run through DTC_VECTOR_CLONES functions: one clone per
// ISA level (AVX-512, AVX2, baseline), picked at load time by the CPU's
// features, so one binary runs everywhere and uses 16 lanes where it can.
// Within a clone every element gets the same operations whether it falls in
// a vector body or a scalar tail, so results do not depend on how a tensor
// is split across threads or ranks.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_CPU_VECMATH_H
#define DTC_KERNELS_CPU_VECMATH_H

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DTC_VECTOR_CLONES                                                      \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DTC_VECTOR_CLONES
#endif

namespace dtc::kernels::cpu {

/// e^x within 1.2e-7 relative for x in [-87.3, 88.3] (Cody-Waite reduction
/// and Cephes' degree-6 polynomial); 0 below (so e^-inf = 0), NaN stays NaN.
/// Used where x <= 0 (softmax-like rows after subtracting the maximum).
inline float expF(float x) {
  constexpr float kLo = -87.33654475f, kHi = 88.3762626647949f;
  // kLo first: std::max returns its first argument for a NaN, so a NaN
  // becomes kLo here and the integer conversion below stays defined (the
  // NaN is returned as it came, below).
  const float xc = std::min(std::max(kLo, x), kHi);
  // Round to nearest by the 1.5 * 2^23 trick (no rounding call to vectorize).
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  return x < kLo ? 0.0f : x == x ? y * __builtin_bit_cast(float, bits) : x;
}

// tanh as a [13/6] rational function of x on [-7.905, 7.905] (beyond it
// tanh rounds to +-1 in f32), within 4e-7 relative of tanh. Plain float
// arithmetic: loops over it vectorize, and every element gets the same
// operations whether it falls in a vector body or a scalar tail, so results
// do not depend on how a tensor is split across ranks. libm's tanhf
// is a scalar call and made GELU a third of a GPT step.
inline float tanhF(float x) {
  constexpr float kClamp = 7.90531110763549805f;
  x = std::min(std::max(x, -kClamp), kClamp);
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return p / q;
}

constexpr float kGeluC = 0.7978845608028654f; // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;

/// GELU, tanh form: the `gelu` kernel and the fused matmul epilogues share
/// this one definition, so both give the same bits.
inline float geluF(float x) {
  return 0.5f * x * (1.0f + tanhF(kGeluC * (x + kGeluA * x * x * x)));
}

} // namespace dtc::kernels::cpu

#endif // DTC_KERNELS_CPU_VECMATH_H
