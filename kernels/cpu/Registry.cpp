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
  for (std::string_view k :
       {"copy", "reshape", "broadcast", "transpose", "pad", "cast"})
    if (name == k)
      return true;
  return false;
}

uint64_t f32CopyBytes(int64_t numel) {
  return (uint64_t(numel) * sizeof(float) + 63) / 64 * 64;
}

uint64_t lowPrecisionCopyBytes(std::string_view name,
                               const std::vector<TensorDesc> &in,
                               const std::vector<TensorDesc> &out) {
  if (handlesLowPrecision(name))
    return 0;
  uint64_t bytes = 0;
  for (const std::vector<TensorDesc> *list : {&in, &out})
    for (const TensorDesc &t : *list)
      if (rt::isLowPrecision(t.dtype))
        bytes += f32CopyBytes(rt::numel(t.shape));
  return bytes;
}

} // namespace dtc::kernels::cpu
