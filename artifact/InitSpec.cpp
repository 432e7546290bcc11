//===- InitSpec.cpp - parameter initializers ------------------------------===//
#include "dtc/artifact/InitSpec.h"

#include <cmath>
#include <cstdlib>
#include <vector>

namespace dtc::artifact {

namespace {

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
         c == '\r';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && isSpace(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && isSpace(s.back()))
    s.remove_suffix(1);
  return s;
}

/// A finite number that is the whole of `text` (surrounding whitespace
/// aside).
bool parseNumber(std::string_view text, double &value) {
  const std::string s(trim(text));
  if (s.empty())
    return false;
  char *end = nullptr;
  value = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(value);
}

/// The comma-separated arguments between the parentheses.
std::vector<std::string_view> splitArguments(std::string_view args) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t comma = args.find(',');
    parts.push_back(args.substr(0, comma));
    if (comma == std::string_view::npos)
      return parts;
    args.remove_prefix(comma + 1);
  }
}

bool failWith(std::string *error, const std::string &message) {
  if (error)
    *error = message;
  return false;
}

bool parseCall(std::string_view text, InitSpec &out, std::string *error) {
  const size_t open = text.find('(');
  if (open == std::string_view::npos || text.back() != ')')
    return failWith(
        error, "expected normal(STD), uniform(LO,HI), fill(V), zeros or ones");
  const std::string_view fn = trim(text.substr(0, open));
  const std::vector<std::string_view> parts =
      splitArguments(text.substr(open + 1, text.size() - open - 2));
  InitSpec spec;
  if (fn == "normal") {
    if (parts.size() != 1 || !parseNumber(parts[0], spec.a))
      return failWith(error, "normal takes one number, the standard deviation");
    if (spec.a < 0)
      return failWith(error,
                      "normal's standard deviation must be non-negative");
    spec.kind = InitSpec::Normal;
  } else if (fn == "fill") {
    if (parts.size() != 1 || !parseNumber(parts[0], spec.a))
      return failWith(error, "fill takes one number, the value");
    spec.kind = InitSpec::Fill;
  } else if (fn == "uniform") {
    if (parts.size() != 2 || !parseNumber(parts[0], spec.a) ||
        !parseNumber(parts[1], spec.b))
      return failWith(error, "uniform takes two numbers, LO and HI");
    if (spec.a > spec.b)
      return failWith(error, "uniform needs LO <= HI");
    spec.kind = InitSpec::Uniform;
  } else {
    return failWith(error,
                    "unknown initializer '" + std::string(fn) +
                        "' (expected normal, uniform, fill, zeros or ones)");
  }
  out = spec;
  return true;
}

} // namespace

bool parseInitSpec(std::string_view text, InitSpec &out,
                   std::string *error) noexcept {
  try {
    text = trim(text);
    if (text == "zeros" || text == "ones") {
      out = {text == "zeros" ? InitSpec::Zeros : InitSpec::Ones, 0, 0};
      return true;
    }
    return parseCall(text, out, error);
  } catch (...) { // out of memory for a message
    return false;
  }
}

} // namespace dtc::artifact
