//===- Flags.h - the flag parser of dtc's commands ---------------*- C++
//-*-===//
#ifndef DTC_TOOLS_DTC_FLAGS_H
#define DTC_TOOLS_DTC_FLAGS_H

#include "Commands.h"
#include "dtc/runtime/Suggest.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

/// Minimal strict flag parser: --name VALUE, --name=VALUE, boolean --name.
class Flags {
public:
  using Handler = std::function<bool(const std::string &)>;
  void value(const std::string &name, Handler handler) {
    values[name] = handler;
  }
  void boolean(const std::string &name, std::function<void()> handler) {
    booleans[name] = handler;
  }
  void alias(const std::string &from, const std::string &to) {
    aliases[from] = to;
  }
  /// Whether `name` was on the command line (after parse).
  bool given(const std::string &name) const { return seen.count(name) != 0; }

  /// Returns false after printing an error.
  bool parse(const std::vector<std::string> &args,
             std::vector<std::string> &positional, const std::string &command) {
    for (size_t i = 0; i < args.size(); ++i) {
      std::string arg = args[i];
      if (arg.size() < 2 || arg[0] != '-') {
        positional.push_back(arg);
        continue;
      }
      std::string name = arg, inlineValue;
      bool hasInline = false;
      if (auto eq = arg.find('=');
          eq != std::string::npos && arg.rfind("--", 0) == 0) {
        name = arg.substr(0, eq);
        inlineValue = arg.substr(eq + 1);
        hasInline = true;
      }
      if (aliases.count(name))
        name = aliases[name];
      seen.insert(name);
      if (auto b = booleans.find(name); b != booleans.end()) {
        if (hasInline) {
          fail(name + " takes no value");
          return false;
        }
        b->second();
        continue;
      }
      auto v = values.find(name);
      if (v == values.end()) {
        fail("unknown flag " + name + " for 'dtc " + command + "'" +
             dtc::didYouMean(name, names()) + " (see dtc " + command +
             " --help)");
        return false;
      }
      std::string value;
      if (hasInline) {
        value = inlineValue;
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        fail(name + " needs a value");
        return false;
      }
      if (!v->second(value))
        return false;
    }
    return true;
  }

  /// Every long flag, for "did you mean".
  std::vector<std::string> names() const {
    std::vector<std::string> all;
    for (const auto &entry : values)
      all.push_back(entry.first);
    for (const auto &entry : booleans)
      all.push_back(entry.first);
    return all;
  }

private:
  std::map<std::string, Handler> values;
  std::map<std::string, std::function<void()>> booleans;
  std::map<std::string, std::string> aliases;
  std::set<std::string> seen;
};

#endif // DTC_TOOLS_DTC_FLAGS_H
