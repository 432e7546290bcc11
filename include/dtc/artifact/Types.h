//===- Types.h - dtypes, shapes and the error type --------------*- C++ -*-===//
//
// The element types and shapes of the artifact's tensors and buffers, shared
// by the artifact library, the kernels and the runtime. Plain C++17,
// header-only, no exceptions thrown from inline code: this header may be
// included by code built with -fno-exceptions.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_ARTIFACT_TYPES_H
#define DTC_ARTIFACT_TYPES_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dtc::artifact {

/// Element types of artifact buffers and tensors (docs/artifact.md). bf16
/// and f16 are storage types: kernels compute in f32 and round results to
/// nearest even (docs/kernels.md).
enum class DType : uint8_t { F32, I32, I64, BF16, F16 };

inline const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::I32:
    return "i32";
  case DType::I64:
    return "i64";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  }
  return "?";
}

inline size_t dtypeSize(DType t) {
  return t == DType::I64 ? 8 : (t == DType::BF16 || t == DType::F16) ? 2 : 4;
}
inline bool isFloat(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}
/// bf16 or f16: stored in 16 bits, computed in f32.
inline bool isLowPrecision(DType t) {
  return t == DType::BF16 || t == DType::F16;
}
inline bool isInt(DType t) { return t == DType::I32 || t == DType::I64; }

/// Parses "f32", "i32", "i64", "bf16", "f16". Returns false for anything else.
inline bool parseDType(std::string_view s, DType &out) {
  if (s == "f32") {
    out = DType::F32;
    return true;
  }
  if (s == "i32") {
    out = DType::I32;
    return true;
  }
  if (s == "i64") {
    out = DType::I64;
    return true;
  }
  if (s == "bf16") {
    out = DType::BF16;
    return true;
  }
  if (s == "f16") {
    out = DType::F16;
    return true;
  }
  return false;
}

// Scalar conversions between f32 and the 16-bit floats, round to nearest
// even, NaN stays NaN (quiet), overflow to infinity; the bulk converters
// of the CPU kernels (kernels::cpu::toF32 / fromF32) give the same bits.
inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float bf16ToF32(uint16_t h) { return bitsFloat(uint32_t(h) << 16); }
inline uint16_t f32ToBf16(float f) {
  const uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x40u); // quiet NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float f16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu,
                 man = h & 0x3ffu;
  if (exp == 0x1f)
    return bitsFloat(sign | 0x7f800000u | (man << 13)); // inf, NaN
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24, exact in f32.
    const float v = float(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((exp + 112) << 23) | (man << 13));
}
inline uint16_t f32ToF16(float f) {
  const uint32_t u = floatBits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); // NaN
  if (a >= 0x477ff000u)
    return uint16_t(sign | 0x7c00u);    // rounds to >= 65520: inf
  if (a >= 0x38800000u) {               // normal in f16 (>= 2^-14)
    const uint32_t r = a - 0x38000000u; // rebias the exponent (127 - 15)
    return uint16_t(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  if (a < 0x33000000u)
    return sign; // below half the smallest subnormal: 0
  // Subnormal: the significand with its implicit bit, shifted into place,
  // rounded to nearest even.
  const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e; // 14..24
  const uint32_t half = 1u << (shift - 1), rest = m & ((1u << shift) - 1);
  uint32_t h = m >> shift;
  if (rest > half || (rest == half && (h & 1u)))
    ++h;
  return uint16_t(sign | h);
}
/// f32 value of a low-precision element.
inline float lowToF32(DType t, uint16_t h) {
  return t == DType::BF16 ? bf16ToF32(h) : f16ToF32(h);
}
inline uint16_t f32ToLow(DType t, float f) {
  return t == DType::BF16 ? f32ToBf16(f) : f32ToF16(f);
}

/// A row-major shape; `{}` is a scalar.
using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

/// "[2, 3]" / "[]".
inline std::string shapeStr(const Shape &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i)
      r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

/// The one exception type of the runtime and the kernels' check rules. The
/// artifact library throws it only internally: its entry points catch it
/// and return the message. what() is a complete, human readable message
/// without the "dtc-run: error: " prefix.
class Error : public std::runtime_error {
public:
  explicit Error(const std::string &msg) : std::runtime_error(msg) {}
};

} // namespace dtc::artifact

// The runtime's names (dtc::rt::DType, ...) for the artifact library's.
namespace dtc::rt {
using namespace ::dtc::artifact;
} // namespace dtc::rt

#endif // DTC_ARTIFACT_TYPES_H
