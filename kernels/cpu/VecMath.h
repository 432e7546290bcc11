//===- VecMath.h - vectorizable float math for the CPU kernels ----*- C++ -*-===//
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
#define DTC_VECTOR_CLONES                                                                    \
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
  const float xc = std::min(std::max(x, kLo), kHi);
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
  return x < kLo ? 0.0f : y * __builtin_bit_cast(float, bits);
}

} // namespace dtc::kernels::cpu

#endif // DTC_KERNELS_CPU_VECMATH_H
