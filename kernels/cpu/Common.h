//===- Common.h - helpers shared by the CPU kernels --------------*- C++
//-*-===//
#ifndef DTC_KERNELS_CPU_COMMON_H
#define DTC_KERNELS_CPU_COMMON_H

#include "dtc/kernels/CpuKernels.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace dtc::kernels::cpu {

using rt::Error;

/// A numpy-broadcast iteration plan: the output (contiguous, row-major) and N
/// inputs, with dimensions of size 1 dropped and contiguous runs coalesced.
/// strides[d][k] is operand k's element stride along plan dimension d (0 when
/// broadcast).
template <int N> struct BcastPlan {
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, N>> strides;
};

template <int N>
BcastPlan<N> planBroadcast(const Shape &out,
                           const std::array<const Shape *, N> &ins) {
  const size_t R = out.size();
  std::vector<std::array<int64_t, N>> full(R);
  for (int k = 0; k < N; ++k) {
    const Shape &s = *ins[size_t(k)];
    int64_t stride = 1;
    for (size_t i = 0; i < R; ++i) {
      size_t d = R - 1 - i;
      int64_t dim = i < s.size() ? s[s.size() - 1 - i] : 1;
      full[d][size_t(k)] = (dim == out[d] && dim != 1) ? stride : 0;
      stride *= dim;
    }
  }
  BcastPlan<N> plan;
  // Walk from the innermost dimension outwards, dropping size-1 dims and
  // merging a dim into the current innermost run when every operand is
  // contiguous across the boundary.
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, N>> strides;
  for (size_t i = 0; i < R; ++i) {
    size_t d = R - 1 - i;
    if (out[d] == 1)
      continue;
    if (!dims.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k)
        merge = merge &&
                full[d][size_t(k)] == strides.back()[size_t(k)] * dims.back();
      if (merge) {
        dims.back() *= out[d];
        continue;
      }
    }
    dims.push_back(out[d]);
    strides.push_back(full[d]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    strides.push_back({});
  }
  plan.dims.assign(dims.rbegin(), dims.rend());
  plan.strides.assign(strides.rbegin(), strides.rend());
  return plan;
}

/// Calls f(outOffset, inOffsets, len, innerStrides) for every innermost run.
template <int N, class F> void forEachBroadcast(const BcastPlan<N> &p, F &&f) {
  const size_t R = p.dims.size();
  const int64_t len = p.dims[R - 1];
  const std::array<int64_t, N> inner = p.strides[R - 1];
  std::vector<int64_t> idx(R, 0);
  std::array<int64_t, N> off{};
  int64_t outOff = 0;
  while (true) {
    f(outOff, off, len, inner);
    outOff += len;
    // Increment the multi-index over dims [0, R-1).
    size_t d = R - 1;
    while (d > 0) {
      --d;
      ++idx[d];
      for (int k = 0; k < N; ++k)
        off[size_t(k)] += p.strides[d][size_t(k)];
      if (idx[d] < p.dims[d])
        goto next;
      for (int k = 0; k < N; ++k)
        off[size_t(k)] -= p.strides[d][size_t(k)] * p.dims[d];
      idx[d] = 0;
    }
    return;
  next:;
  }
}

/// [outer, n, inner] view of a shape around `axis`.
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};
inline AxisView axisView(const Shape &s, int64_t axis) {
  AxisView v;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    if (i < axis)
      v.outer *= s[size_t(i)];
    else if (i == axis)
      v.n = s[size_t(i)];
    else
      v.inner *= s[size_t(i)];
  }
  return v;
}

/// Reads element i of an integer tensor (i32 or i64) as int64.
inline int64_t intAt(const TensorArg &t, int64_t i) {
  return t.dtype == DType::I32 ? int64_t(t.as<int32_t>()[i])
                               : t.as<int64_t>()[i];
}

/// The cross entropies' `ignore_index` (docs/kernels.md), when given: a
/// label equal to it contributes no loss and no gradient.
struct IgnoredLabel {
  bool set = false;
  int64_t value = 0;
  explicit IgnoredLabel(const nlohmann::json &attrs) {
    if (auto it = attrs.find("ignore_index"); it != attrs.end()) {
      set = true;
      value = it->get<int64_t>();
    }
  }
  bool operator()(int64_t label) const { return set && label == value; }
};

// Per-file registration tables.
struct Entry {
  const char *name;
  RunFn fn;
};
const std::vector<Entry> &elementwiseKernels();
const std::vector<Entry> &linalgKernels();
const std::vector<Entry> &attentionKernels();
const std::vector<Entry> &normKernels();
const std::vector<Entry> &lossKernels();
const std::vector<Entry> &optimizerKernels();
const std::vector<Entry> &shardKernels();
const std::vector<Entry> &moeKernels();

} // namespace dtc::kernels::cpu

#endif // DTC_KERNELS_CPU_COMMON_H
