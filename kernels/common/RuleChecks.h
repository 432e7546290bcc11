//===- RuleChecks.h - the checks kernel rules are written in ----*- C++ -*-===//
//
// Shared by the rule files of kernels/common (Rules.cpp, MoeRules.cpp).
// Each check throws dtc::rt::Error with a message that says what is wrong.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_COMMON_RULECHECKS_H
#define DTC_KERNELS_COMMON_RULECHECKS_H

#include "dtc/kernels/Kernel.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace dtc::kernels::rules {

using json = nlohmann::json;
using rt::Error;
using rt::shapeStr;
using Descs = std::vector<TensorDesc>;

[[noreturn]] inline void fail(const std::string &msg) { throw Error(msg); }

inline std::string desc(const TensorDesc &t) {
  return std::string(rt::dtypeName(t.dtype)) + shapeStr(t.shape);
}

// Rules are dtype-generic: "float" is every float dtype the kernels know
// (rt::isFloat), and operands that combine must agree on theirs.
inline void needFloat(const TensorDesc &t, const char *what) {
  if (!rt::isFloat(t.dtype))
    fail(std::string(what) + " must have a float dtype, got " + desc(t));
}
inline void needInt(const TensorDesc &t, const char *what) {
  if (!rt::isInt(t.dtype))
    fail(std::string(what) + " must be i32 or i64, got " + desc(t));
}
inline void needDtype(const TensorDesc &t, DType d, const char *what) {
  if (t.dtype != d)
    fail(std::string(what) + " must be " + rt::dtypeName(d) + ", got " +
         desc(t));
}
inline void needShape(const TensorDesc &t, const Shape &s, const char *what) {
  if (t.shape != s)
    fail(std::string(what) + " must have shape " + shapeStr(s) + ", got " +
         desc(t));
}
inline void needLike(const TensorDesc &t, const TensorDesc &ref,
                     const char *what, const char *refName) {
  if (t.dtype != ref.dtype || t.shape != ref.shape)
    fail(std::string(what) + " must match " + refName + " (" + desc(ref) +
         "), got " + desc(t));
}
inline void needRankAtLeast(const TensorDesc &t, size_t r, const char *what) {
  if (t.shape.size() < r)
    fail(std::string(what) + " must have rank >= " + std::to_string(r) +
         ", got " + desc(t));
}

inline const json *attr(const json &attrs, const char *key) {
  if (!attrs.is_object())
    fail("attributes must be a JSON object");
  auto it = attrs.find(key);
  if (it == attrs.end())
    fail(std::string("missing attribute '") + key + "'");
  return &*it;
}
/// An optional attribute: null when absent (also with no attributes at all).
inline const json *optAttr(const json &attrs, const char *key) {
  if (attrs.is_null())
    return nullptr;
  if (!attrs.is_object())
    fail("attributes must be a JSON object");
  auto it = attrs.find(key);
  return it == attrs.end() ? nullptr : &*it;
}
inline int64_t reqInt(const json &attrs, const char *key) {
  const json *v = attr(attrs, key);
  if (!v->is_number_integer() ||
      (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)))
    fail(std::string("attribute '") + key + "' must be an integer");
  return v->get<int64_t>();
}
inline double reqNum(const json &attrs, const char *key) {
  const json *v = attr(attrs, key);
  if (!v->is_number())
    fail(std::string("attribute '") + key + "' must be a number");
  double d = v->get<double>();
  if (!std::isfinite(d))
    fail(std::string("attribute '") + key + "' must be finite");
  return d;
}
inline bool optBool(const json &attrs, const char *key) {
  auto it = attrs.find(key);
  if (it == attrs.end())
    return false;
  if (!it->is_boolean())
    fail(std::string("attribute '") + key + "' must be a boolean");
  return it->get<bool>();
}
inline bool reqBool(const json &attrs, const char *key) {
  const json *v = attr(attrs, key);
  if (!v->is_boolean())
    fail(std::string("attribute '") + key + "' must be a boolean");
  return v->get<bool>();
}
inline std::string reqStr(const json &attrs, const char *key) {
  const json *v = attr(attrs, key);
  if (!v->is_string())
    fail(std::string("attribute '") + key + "' must be a string");
  return v->get<std::string>();
}
inline std::vector<int64_t> reqInts(const json &attrs, const char *key) {
  const json *v = attr(attrs, key);
  if (!v->is_array())
    fail(std::string("attribute '") + key + "' must be an array of integers");
  std::vector<int64_t> r;
  for (const json &e : *v) {
    if (!e.is_number_integer() ||
        (e.is_number_unsigned() && e.get<uint64_t>() > uint64_t(INT64_MAX)))
      fail(std::string("attribute '") + key + "' must be an array of integers");
    r.push_back(e.get<int64_t>());
  }
  return r;
}
inline int64_t reqAxis(const json &attrs, const char *key, size_t rank) {
  int64_t a = reqInt(attrs, key);
  if (a < 0 || a >= int64_t(rank))
    fail(std::string("attribute '") + key + "' = " + std::to_string(a) +
         " is out of range for a rank-" + std::to_string(rank) + " operand");
  return a;
}

inline int64_t reqPositive(const json &attrs, const char *key) {
  int64_t v = reqInt(attrs, key);
  if (v < 1)
    fail(std::string("attribute '") + key + "' must be >= 1");
  return v;
}

/// The rules of the mixture-of-experts kernels (MoeRules.cpp).
std::vector<KernelInfo> moeKernels();

} // namespace dtc::kernels::rules

#endif // DTC_KERNELS_COMMON_RULECHECKS_H
