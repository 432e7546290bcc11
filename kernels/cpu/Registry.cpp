//===- Registry.cpp - name -> CPU kernel ----------------------------------===//
#include "Common.h"

#include <string>
#include <unordered_map>

namespace dtc::kernels::cpu {

RunFn findKernel(std::string_view name) {
  static const std::unordered_map<std::string, RunFn> table = [] {
    std::unordered_map<std::string, RunFn> t;
    for (const auto *list : {&elementwiseKernels(), &linalgKernels(), &attentionKernels(),
                             &normKernels(), &lossKernels(), &optimizerKernels(), &shardKernels()})
      for (const Entry &e : *list)
        t.emplace(e.name, e.fn);
    return t;
  }();
  auto it = table.find(std::string(name));
  return it == table.end() ? nullptr : it->second;
}

bool handlesLowPrecision(std::string_view name) {
  // Kernels that only move elements (any element size) or convert them.
  for (std::string_view k : {"copy", "reshape", "broadcast", "transpose", "pad", "cast"})
    if (name == k) return true;
  return false;
}

} // namespace dtc::kernels::cpu
