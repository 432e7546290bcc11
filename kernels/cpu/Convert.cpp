//===- Convert.cpp - bulk f32 <-> bf16 / f16 conversions -------------------===//
//
// The storage types of mixed precision: every kernel on bf16 or f16 operands
// computes in f32 (the executor converts its operands here and rounds its
// results back), and the cast kernel converts through these loops too. Each
// loop runs through DTC_VECTOR_CLONES: on AVX-512 (x86-64-v4) and AVX2 the
// bf16 bit arithmetic vectorizes, and f16 uses the F16C / AVX-512 conversion
// instructions (through _Float16); the baseline clone is plain C++. All give
// the bits of the scalar functions in dtc/runtime/Types.h (round to nearest
// even, quiet NaN, overflow to infinity), which a unit test checks.
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "Parallel.h"
#include "VecMath.h"

#include <cstring>

namespace dtc::kernels::cpu {

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DTC_HAVE_FLOAT16 1
#else
#define DTC_HAVE_FLOAT16 0
#endif

DTC_VECTOR_CLONES void bf16ToF32Loop(const uint16_t *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(src[i]) << 16;
    std::memcpy(dst + i, &u, 4);
  }
}

DTC_VECTOR_CLONES void f32ToBf16Loop(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet = (u >> 16) | 0x40u;
    dst[i] = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
}

#if DTC_HAVE_FLOAT16
DTC_VECTOR_CLONES void f16ToF32Loop(const uint16_t *src, float *dst, int64_t n) {
  const _Float16 *h = reinterpret_cast<const _Float16 *>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = float(h[i]);
}
DTC_VECTOR_CLONES void f32ToF16Loop(const float *src, uint16_t *dst, int64_t n) {
  _Float16 *h = reinterpret_cast<_Float16 *>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = _Float16(src[i]);
}
#else
void f16ToF32Loop(const uint16_t *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = rt::f16ToF32(src[i]);
}
void f32ToF16Loop(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = rt::f32ToF16(src[i]);
}
#endif

constexpr int64_t kGrain = int64_t(1) << 16;

} // namespace

void toF32(const KernelContext &ctx, DType from, const void *src, float *dst, int64_t n) {
  if (from == DType::F32) {
    if (static_cast<const void *>(dst) != src) std::memcpy(dst, src, size_t(n) * 4);
    return;
  }
  const uint16_t *s = static_cast<const uint16_t *>(src);
  parallelFor(ctx, n, kGrain, [&](int64_t b, int64_t e, int) {
    if (from == DType::BF16)
      bf16ToF32Loop(s + b, dst + b, e - b);
    else
      f16ToF32Loop(s + b, dst + b, e - b);
  });
}

void fromF32(const KernelContext &ctx, DType to, const float *src, void *dst, int64_t n) {
  if (to == DType::F32) {
    if (dst != static_cast<const void *>(src)) std::memcpy(dst, src, size_t(n) * 4);
    return;
  }
  uint16_t *d = static_cast<uint16_t *>(dst);
  parallelFor(ctx, n, kGrain, [&](int64_t b, int64_t e, int) {
    if (to == DType::BF16)
      f32ToBf16Loop(src + b, d + b, e - b);
    else
      f32ToF16Loop(src + b, d + b, e - b);
  });
}

} // namespace dtc::kernels::cpu
