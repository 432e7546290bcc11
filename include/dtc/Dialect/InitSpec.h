//===- InitSpec.h - parameter initializers of the model format --*- C++ -*-===//
#ifndef DTC_DIALECT_INITSPEC_H
#define DTC_DIALECT_INITSPEC_H

#include "llvm/ADT/StringRef.h"
#include <optional>
#include <string>

namespace mlir::dtc {

/// `normal(STD)`, `uniform(LO,HI)`, `zeros` or `ones` (model-format.md).
struct InitSpec {
  enum class Kind { Normal, Uniform, Zeros, Ones, Fill } kind = Kind::Normal;
  double a = 0.02; // std for normal, low for uniform
  double b = 0.0;  // high for uniform
  /// Canonical spelling, as the artifact carries it.
  std::string str() const;
};

/// The default when `dtc.init` is absent.
inline InitSpec defaultInitSpec() { return InitSpec{}; }

/// Parses `text`; on failure returns nullopt and explains in `error`.
std::optional<InitSpec> parseInitSpec(llvm::StringRef text, std::string &error);

} // namespace mlir::dtc

#endif // DTC_DIALECT_INITSPEC_H
