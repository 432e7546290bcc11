//===- InitSpec.cpp - parameter initializers of the model format ---------===//
#include "dtc/Dialect/InitSpec.h"
#include "dtc/Dialect/Utils.h"
#include "dtc/artifact/InitSpec.h"

#include "llvm/Support/raw_ostream.h"

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

std::optional<InitSpec> mlir::dtc::parseInitSpec(llvm::StringRef text,
                                                 std::string &error) {
  // The artifact library's parser: the runtime accepts exactly these.
  ::dtc::artifact::InitSpec parsed;
  if (!::dtc::artifact::parseInitSpec(
          std::string_view(text.data(), text.size()), parsed, &error))
    return std::nullopt;
  InitSpec spec;
  switch (parsed.kind) {
  case ::dtc::artifact::InitSpec::Zeros:
    spec.kind = InitSpec::Kind::Zeros;
    break;
  case ::dtc::artifact::InitSpec::Ones:
    spec.kind = InitSpec::Kind::Ones;
    break;
  case ::dtc::artifact::InitSpec::Normal:
    spec.kind = InitSpec::Kind::Normal;
    break;
  case ::dtc::artifact::InitSpec::Uniform:
    spec.kind = InitSpec::Kind::Uniform;
    break;
  case ::dtc::artifact::InitSpec::Fill:
    spec.kind = InitSpec::Kind::Fill;
    break;
  }
  spec.a = parsed.a;
  spec.b = parsed.b;
  return spec;
}
