//===- Linalg.cpp - matmul and transpose -----------------------------------===//
#include "Common.h"
#include "Gemm.h"
#include "Parallel.h"

#include <algorithm>
#include <cstring>

namespace dtc::kernels::cpu {
namespace {

void kMatmul(const KernelArgs &a) {
  const TensorArg &A = a.in[0], &B = a.in[1], &C = a.out[0];
  const KernelContext &ctx = contextOf(a);
  // Transposed operands hold [..., K, M] (a) or [..., N, K] (b).
  const bool ta = attrFlag(*a.attrs, "transpose_a"), tb = attrFlag(*a.attrs, "transpose_b");
  const size_t ra = A.shape.size();
  const int64_t M = C.shape[C.shape.size() - 2], N = C.shape.back();
  const int64_t K = A.shape[ra - (ta ? 2 : 1)];
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  const Shape batchA(A.shape.begin(), A.shape.end() - 2);
  const Shape batchB(B.shape.begin(), B.shape.end() - 2);
  const Shape batchC(C.shape.begin(), C.shape.end() - 2);
  const float *pa = A.as<float>(), *pb = B.as<float>();
  float *pc = C.as<float>();
  const int64_t nb = rt::numel(batchC);
  // One big GEMM when b is a single matrix and a is not broadcast: fold a's
  // batch dims into M.
  if (!ta && rt::numel(batchB) == 1 && rt::numel(batchA) == nb) {
    sgemm(ctx, false, tb, nb * M, N, K, 1.0f, pa, lda, pb, ldb, 0.0f, pc, N);
    return;
  }
  // A batch of products: each a matrix offset pair from the broadcast plan.
  ScratchVector<std::pair<int64_t, int64_t>> offsets;
  offsets.reserve(size_t(nb));
  auto plan = planBroadcast<2>(batchC, {&batchA, &batchB});
  forEachBroadcast<2>(plan, [&](int64_t, const std::array<int64_t, 2> &io, int64_t len,
                                const std::array<int64_t, 2> &st) {
    for (int64_t i = 0; i < len; ++i) offsets.push_back({io[0] + i * st[0], io[1] + i * st[1]});
  });
  auto one = [&](int64_t i) {
    sgemm(ctx, ta, tb, M, N, K, 1.0f, pa + offsets[size_t(i)].first * M * K, lda,
          pb + offsets[size_t(i)].second * K * N, ldb, 0.0f, pc + i * M * N, N);
  };
  // Enough products to keep every thread busy: one product per thread at a
  // time, each single-threaded; else one after another, each threaded.
  if (nb >= ctx.threads() && ctx.threads() > 1)
    parallelTasks(ctx, nb, [&](int64_t i, int) { one(i); });
  else
    for (int64_t i = 0; i < nb; ++i) one(i);
}

template <class T> void transposeLoop(const KernelArgs &a, const std::vector<int64_t> &perm) {
  const Shape &xs = a.in[0].shape, &ys = a.out[0].shape;
  const size_t R = xs.size();
  std::vector<int64_t> xstride(R, 1);
  for (size_t i = R; i-- > 1;) xstride[i - 1] = xstride[i] * xs[i];
  // Coalesce output dims whose input strides are contiguous.
  std::vector<int64_t> dims, strides;
  for (size_t i = R; i-- > 0;) {
    int64_t d = ys[i], s = xstride[size_t(perm[i])];
    if (d == 1) continue;
    if (!dims.empty() && s == strides.back() * dims.back()) {
      dims.back() *= d;
      continue;
    }
    dims.push_back(d);
    strides.push_back(s);
  }
  if (dims.empty()) { dims.push_back(1); strides.push_back(1); }
  std::reverse(dims.begin(), dims.end());
  std::reverse(strides.begin(), strides.end());
  const T *x = a.in[0].as<T>();
  T *y = a.out[0].as<T>();
  const size_t D = dims.size();
  const int64_t len = dims[D - 1], st = strides[D - 1];
  std::vector<int64_t> idx(D, 0);
  int64_t in = 0, out = 0;
  while (true) {
    // Short contiguous runs (a head's Dh values) copy inline: a memcpy call
    // per 32 floats cost more than the copy.
    if (st == 1 && len >= 256) std::memcpy(y + out, x + in, size_t(len) * sizeof(T));
    else if (st == 1) for (int64_t i = 0; i < len; ++i) y[out + i] = x[in + i];
    else for (int64_t i = 0; i < len; ++i) y[out + i] = x[in + i * st];
    out += len;
    size_t d = D - 1;
    bool done = true;
    while (d > 0) {
      --d;
      ++idx[d];
      in += strides[d];
      if (idx[d] < dims[d]) { done = false; break; }
      in -= strides[d] * dims[d];
      idx[d] = 0;
    }
    if (done) return;
  }
}

void kTranspose(const KernelArgs &a) {
  std::vector<int64_t> perm = attrInts(*a.attrs, "permutation");
  switch (rt::dtypeSize(a.in[0].dtype)) {
  case 8: transposeLoop<uint64_t>(a, perm); break;
  case 2: transposeLoop<uint16_t>(a, perm); break;
  default: transposeLoop<uint32_t>(a, perm); break;
  }
}

} // namespace

const std::vector<Entry> &linalgKernels() {
  static const std::vector<Entry> e = {
      {"matmul", kMatmul},
      {"transpose", kTranspose},
  };
  return e;
}

} // namespace dtc::kernels::cpu
