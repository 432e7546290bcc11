//===- Registry.cpp - name -> CPU kernel ----------------------------------===//
#include "Common.h"

#include <string>
#include <unordered_map>

namespace dtc::kernels::cpu {

RunFn findKernel(std::string_view name) {
  static const std::unordered_map<std::string, RunFn> table = [] {
    std::unordered_map<std::string, RunFn> t;
    for (const auto *list :
         {&elementwiseKernels(), &linalgKernels(), &attentionKernels(),
          &normKernels(), &lossKernels(), &optimizerKernels(), &shardKernels(),
          &moeKernels()})
      for (const Entry &e : *list)
        t.emplace(e.name, e.fn);
    return t;
  }();
  auto it = table.find(std::string(name));
  return it == table.end() ? nullptr : it->second;
}

} // namespace dtc::kernels::cpu
