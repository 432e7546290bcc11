//===- InitSpec.h - parameter initializers ----------------------*- C++ -*-===//
//
// The initializer grammar of the model format's `dtc.init` and the
// artifact's `init` (docs/model-format.md, docs/artifact.md):
//
//   normal(STD) | uniform(LO,HI) | fill(V) | zeros | ones
//
// One parser for both sides: the dialect's verifier and the runtime's loader
// accept exactly the same strings. Whitespace (any of " \t\n\v\f\r") may
// surround the whole text, the function name and every number; the numbers
// are what strtod reads, finite; STD >= 0 and LO <= HI.
//
// Plain C++17, MLIR-free, nothing throws.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_ARTIFACT_INITSPEC_H
#define DTC_ARTIFACT_INITSPEC_H

#include <string>
#include <string_view>

namespace dtc::artifact {

struct InitSpec {
  enum Kind { Zeros, Ones, Normal, Uniform, Fill } kind = Zeros;
  double a = 0, b = 0; ///< normal: a = STD; uniform: [a, b); fill: a = V
};

/// Parses `text` into `out`. On failure returns false, leaves `out` as it
/// was and, when `error` is given, explains ("uniform takes two numbers, LO
/// and HI").
bool parseInitSpec(std::string_view text, InitSpec &out,
                   std::string *error = nullptr) noexcept;

} // namespace dtc::artifact

namespace dtc::rt {
using namespace ::dtc::artifact;
} // namespace dtc::rt

#endif // DTC_ARTIFACT_INITSPEC_H
