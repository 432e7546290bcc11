//===- InitSpec.cpp - parameter initializers of the model format ---------===//
#include "dtc/Dialect/InitSpec.h"
#include "dtc/Dialect/Utils.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace mlir::dtc;

std::string InitSpec::str() const {
  std::string out;
  llvm::raw_string_ostream os(out);
  switch (kind) {
  case Kind::Normal:
    os << "normal(" << formatNumber(a) << ")";
    break;
  case Kind::Uniform:
    os << "uniform(" << formatNumber(a) << "," << formatNumber(b) << ")";
    break;
  case Kind::Zeros:
    os << "zeros";
    break;
  case Kind::Ones:
    os << "ones";
    break;
  case Kind::Fill:
    os << "fill(" << formatNumber(a) << ")";
    break;
  }
  return out;
}

static bool parseNumber(llvm::StringRef text, double &value) {
  text = text.trim();
  if (text.empty() || text.getAsDouble(value))
    return false;
  return std::isfinite(value);
}

std::optional<InitSpec> mlir::dtc::parseInitSpec(llvm::StringRef text,
                                                 std::string &error) {
  text = text.trim();
  InitSpec spec;
  if (text == "zeros") {
    spec.kind = InitSpec::Kind::Zeros;
    return spec;
  }
  if (text == "ones") {
    spec.kind = InitSpec::Kind::Ones;
    return spec;
  }
  auto open = text.find('(');
  if (open == llvm::StringRef::npos || !text.ends_with(")")) {
    error = "expected normal(STD), uniform(LO,HI), fill(V), zeros or ones";
    return std::nullopt;
  }
  llvm::StringRef fn = text.take_front(open).trim();
  llvm::StringRef args = text.drop_front(open + 1).drop_back();
  llvm::SmallVector<llvm::StringRef, 2> parts;
  args.split(parts, ',');
  if (fn == "normal") {
    if (parts.size() != 1 || !parseNumber(parts[0], spec.a)) {
      error = "normal takes one number, the standard deviation";
      return std::nullopt;
    }
    if (spec.a < 0) {
      error = "normal's standard deviation must be non-negative";
      return std::nullopt;
    }
    spec.kind = InitSpec::Kind::Normal;
    return spec;
  }
  if (fn == "fill") {
    if (parts.size() != 1 || !parseNumber(parts[0], spec.a)) {
      error = "fill takes one number, the value";
      return std::nullopt;
    }
    spec.kind = InitSpec::Kind::Fill;
    return spec;
  }
  if (fn == "uniform") {
    if (parts.size() != 2 || !parseNumber(parts[0], spec.a) ||
        !parseNumber(parts[1], spec.b)) {
      error = "uniform takes two numbers, LO and HI";
      return std::nullopt;
    }
    if (spec.a > spec.b) {
      error = "uniform needs LO <= HI";
      return std::nullopt;
    }
    spec.kind = InitSpec::Kind::Uniform;
    return spec;
  }
  error = "unknown initializer '" + fn.str() +
          "' (expected normal, uniform, fill, zeros or ones)";
  return std::nullopt;
}
