//===- Convert.cpp - bulk f32 <-> bf16 / f16 conversions
//-------------------===//
//
// The storage types of mixed precision: every kernel on bf16 or f16 operands
// computes in f32 (the executor converts its operands here and rounds its
// results back), and the cast kernel converts through these loops too. The
// bf16 loops run through DTC_VECTOR_CLONES: on AVX-512 (x86-64-v4) and AVX2
// the bit arithmetic vectorizes; f16 uses the AVX-512F / F16C conversion
// instructions, chosen at run time; plain C++ elsewhere. All give the bits
// of the scalar functions in dtc/artifact/Types.h (round to nearest even,
// quiet NaN, overflow to infinity), which a unit test checks.
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "Parallel.h"
#include "VecMath.h"

#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dtc::kernels::cpu {

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DTC_HAVE_X86_F16 1
#else
#define DTC_HAVE_X86_F16 0
#endif

DTC_VECTOR_CLONES void bf16ToF32Loop(const uint16_t *src, float *dst,
                                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(src[i]) << 16;
    std::memcpy(dst + i, &u, 4);
  }
}

DTC_VECTOR_CLONES void f32ToBf16Loop(const float *src, uint16_t *dst,
                                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet = (u >> 16) | 0x40u;
    dst[i] = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
}

// f16: GCC does not vectorise _Float16 conversions in loops, so the
// conversion instructions are called explicitly (AVX-512F: 16 lanes, F16C:
// 8) and the CPU is asked once which it has; tails and other CPUs use the
// scalar functions, whose bits the instructions match (round to nearest
// even, quiet NaN, overflow to infinity).
void f16ToF32Scalar(const uint16_t *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = rt::f16ToF32(src[i]);
}
void f32ToF16Scalar(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = rt::f32ToF16(src[i]);
}

#if DTC_HAVE_X86_F16
// GCC 12's AVX-512 conversion intrinsics pass an undefined vector as the
// (unused) merge source, which -Wmaybe-uninitialized reports.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void f16ToF32Avx512(const uint16_t *src,
                                                       float *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(
                                  reinterpret_cast<const __m256i *>(src + i))));
  f16ToF32Scalar(src + i, dst + i, n - i);
}
__attribute__((target("avx512f"))) void
f32ToF16Avx512(const float *src, uint16_t *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(
        reinterpret_cast<__m256i *>(dst + i),
        _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  f32ToF16Scalar(src + i, dst + i, n - i);
}
#pragma GCC diagnostic pop
__attribute__((target("avx,f16c"))) void f16ToF32F16c(const uint16_t *src,
                                                      float *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i *>(src + i))));
  f16ToF32Scalar(src + i, dst + i, n - i);
}
__attribute__((target("avx,f16c"))) void
f32ToF16F16c(const float *src, uint16_t *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(
        reinterpret_cast<__m128i *>(dst + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  f32ToF16Scalar(src + i, dst + i, n - i);
}
#endif

using F16ToF32Fn = void (*)(const uint16_t *, float *, int64_t);
using F32ToF16Fn = void (*)(const float *, uint16_t *, int64_t);

struct F16Loops {
  F16ToF32Fn toF32 = f16ToF32Scalar;
  F32ToF16Fn fromF32 = f32ToF16Scalar;
  F16Loops() {
#if DTC_HAVE_X86_F16
    if (__builtin_cpu_supports("avx512f")) {
      toF32 = f16ToF32Avx512;
      fromF32 = f32ToF16Avx512;
    } else if (__builtin_cpu_supports("f16c") &&
               __builtin_cpu_supports("avx")) {
      toF32 = f16ToF32F16c;
      fromF32 = f32ToF16F16c;
    }
#endif
  }
};
const F16Loops &f16Loops() {
  static const F16Loops loops;
  return loops;
}

constexpr int64_t kGrain = int64_t(1) << 16;

} // namespace

void toF32(const KernelContext &ctx, DType from, const void *src, float *dst,
           int64_t n) {
  if (from == DType::F32) {
    if (static_cast<const void *>(dst) != src)
      std::memcpy(dst, src, size_t(n) * 4);
    return;
  }
  const uint16_t *s = static_cast<const uint16_t *>(src);
  parallelFor(ctx, n, kGrain, [&](int64_t b, int64_t e, int) {
    if (from == DType::BF16)
      bf16ToF32Loop(s + b, dst + b, e - b);
    else
      f16Loops().toF32(s + b, dst + b, e - b);
  });
}

void fromF32(const KernelContext &ctx, DType to, const float *src, void *dst,
             int64_t n) {
  if (to == DType::F32) {
    if (dst != static_cast<const void *>(src))
      std::memcpy(dst, src, size_t(n) * 4);
    return;
  }
  uint16_t *d = static_cast<uint16_t *>(dst);
  parallelFor(ctx, n, kGrain, [&](int64_t b, int64_t e, int) {
    if (to == DType::BF16)
      f32ToBf16Loop(src + b, d + b, e - b);
    else
      f16Loops().fromF32(src + b, d + b, e - b);
  });
}

} // namespace dtc::kernels::cpu
