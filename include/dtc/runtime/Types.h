//===- Types.h - dtypes, shapes and the runtime error type -------*- C++ -*-===//
//
// Plain C++17, header-only, no exceptions thrown from inline code: this
// header may be included by code built with -fno-exceptions.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TYPES_H
#define DTC_RUNTIME_TYPES_H

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dtc::rt {

/// Element types of artifact buffers and tensors (docs/artifact.md).
enum class DType : uint8_t { F32, I32, I64 };

inline const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32: return "f32";
  case DType::I32: return "i32";
  case DType::I64: return "i64";
  }
  return "?";
}

inline size_t dtypeSize(DType t) { return t == DType::I64 ? 8 : 4; }
inline bool isFloat(DType t) { return t == DType::F32; }
inline bool isInt(DType t) { return t == DType::I32 || t == DType::I64; }

/// Parses "f32", "i32", "i64". Returns false for anything else.
inline bool parseDType(std::string_view s, DType &out) {
  if (s == "f32") { out = DType::F32; return true; }
  if (s == "i32") { out = DType::I32; return true; }
  if (s == "i64") { out = DType::I64; return true; }
  return false;
}

/// A row-major shape; `{}` is a scalar.
using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

/// "[2, 3]" / "[]".
inline std::string shapeStr(const Shape &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

/// The one exception type of the runtime. what() is a complete, human
/// readable message without the "dtc-run: error: " prefix.
class Error : public std::runtime_error {
public:
  explicit Error(const std::string &msg) : std::runtime_error(msg) {}
};

} // namespace dtc::rt

#endif // DTC_RUNTIME_TYPES_H
