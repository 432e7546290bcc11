//===- Linalg.cpp - matmul and transpose
//-----------------------------------===//
#include "Common.h"
#include "Gemm.h"
#include "Parallel.h"
#include "VecMath.h"

#include <algorithm>
#include <cstring>

namespace dtc::kernels::cpu {
namespace {

/// y [cols, rows] = x^T for x [rows, cols], in 32 x 32 tiles, row bands
/// of y split among the threads.
void transposeInto(const KernelContext &ctx, const float *x, int64_t rows,
                   int64_t cols, float *y) {
  constexpr int64_t kTile = 32;
  const int64_t bands = (cols + kTile - 1) / kTile;
  parallelFor(ctx, bands, 1, [&](int64_t b0, int64_t b1, int) {
    for (int64_t j0 = b0 * kTile; j0 < std::min(cols, b1 * kTile); j0 += kTile)
      for (int64_t i0 = 0; i0 < rows; i0 += kTile)
        for (int64_t j = j0; j < std::min(cols, j0 + kTile); ++j)
          for (int64_t i = i0; i < std::min(rows, i0 + kTile); ++i)
            y[j * rows + i] = x[i * cols + j];
  });
}

/// The product of a.in[0] and a.in[1] (transposes from the attributes) into
/// pc, [..., M, N]. `epilogue(rows, count, serial)` runs on each block of
/// `count` output rows of N right after the block is computed; `serial`
/// when it is called from inside a parallel region (one product per thread).
template <class Epilogue>
void matmulInto(const KernelArgs &a, float *pc, bool hasEpilogue,
                Epilogue &&epilogue) {
  const TensorArg &A = a.in[0], &B = a.in[1], &C = a.out[0];
  const KernelContext &ctx = contextOf(a);
  // Transposed operands hold [..., K, M] (a) or [..., N, K] (b).
  const bool ta = attrFlag(*a.attrs, "transpose_a"),
             tb = attrFlag(*a.attrs, "transpose_b");
  const size_t ra = A.shape.size();
  const int64_t M = C.shape[C.shape.size() - 2], N = C.shape.back();
  const int64_t K = A.shape[ra - (ta ? 2 : 1)];
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  const Shape batchA(A.shape.begin(), A.shape.end() - 2);
  const Shape batchB(B.shape.begin(), B.shape.end() - 2);
  const Shape batchC(C.shape.begin(), C.shape.end() - 2);
  const float *pa = A.as<float>(), *pb = B.as<float>();
  const int64_t nb = rt::numel(batchC);
  // One big GEMM when b is a single matrix and a is not broadcast: fold a's
  // batch dims into M. The epilogue runs after the whole product: the same
  // GEMM call as the unfused matmul's, so the same bits on every ISA (split
  // into row blocks, oneDNN's AVX2 sgemm rounds some rows differently).
  if (!ta && rt::numel(batchB) == 1 && rt::numel(batchA) == nb) {
    const int64_t rows = nb * M;
    sgemm(ctx, false, tb, rows, N, K, 1.0f, pa, lda, pb, ldb, 0.0f, pc, N);
    if (hasEpilogue)
      epilogue(pc, rows, false);
    return;
  }
  // A batch of products: each a matrix offset pair from the broadcast plan.
  ScratchVector<std::pair<int64_t, int64_t>> offsets;
  offsets.reserve(size_t(nb));
  auto plan = planBroadcast<2>(batchC, {&batchA, &batchB});
  forEachBroadcast<2>(plan, [&](int64_t, const std::array<int64_t, 2> &io,
                                int64_t len, const std::array<int64_t, 2> &st) {
    for (int64_t i = 0; i < len; ++i)
      offsets.push_back({io[0] + i * st[0], io[1] + i * st[1]});
  });
  // A tall a^T b (a weight gradient): b^T a into scratch, then transposed
  // into place (the library is much faster that way round; kernels.md).
  const bool swapped = matmulComputesTransposed(ta, tb, nb, M, N);
  ScratchVector<float> transposed;
  if (swapped)
    transposed.resize(size_t(M * N));
  auto one = [&](int64_t i, bool serial) {
    const float *ai = pa + offsets[size_t(i)].first * M * K;
    const float *bi = pb + offsets[size_t(i)].second * K * N;
    float *ci = pc + i * M * N;
    if (swapped) {
      sgemm(ctx, true, false, N, M, K, 1.0f, bi, N, ai, M, 0.0f,
            transposed.data(), M);
      transposeInto(ctx, transposed.data(), N, M, ci);
    } else {
      sgemm(ctx, ta, tb, M, N, K, 1.0f, ai, lda, bi, ldb, 0.0f, ci, N);
    }
    if (hasEpilogue)
      epilogue(ci, M, serial);
  };
  // Enough products to keep every thread busy: one product per thread at a
  // time, each single-threaded; else one after another, each threaded.
  if (nb >= ctx.threads() && ctx.threads() > 1)
    parallelTasks(ctx, nb, [&](int64_t i, int) { one(i, true); });
  else
    for (int64_t i = 0; i < nb; ++i)
      one(i, false);
}

void kMatmul(const KernelArgs &a) {
  matmulInto(a, a.out[0].as<float>(), false, [](float *, int64_t, bool) {});
}

// The epilogues' inner loops, one clone per ISA level (VecMath.h). The bias
// add and the GELU are the `add` and `gelu` kernels' own operations on the
// same values, so the fused result has their bits.
DTC_VECTOR_CLONES void addBiasRows(float *rows, const float *bias,
                                   int64_t count, int64_t n) {
  for (int64_t r = 0; r < count; ++r) {
    float *row = rows + r * n;
    for (int64_t j = 0; j < n; ++j)
      row[j] = row[j] + bias[j];
  }
}
DTC_VECTOR_CLONES void geluRows(const float *pre, float *y, int64_t count,
                                int64_t n) {
  for (int64_t i = 0; i < count * n; ++i)
    y[i] = geluF(pre[i]);
}
DTC_VECTOR_CLONES void biasGeluRows(float *pre, const float *bias, float *y,
                                    int64_t count, int64_t n) {
  for (int64_t r = 0; r < count; ++r) {
    float *p = pre + r * n, *o = y + r * n;
    for (int64_t j = 0; j < n; ++j) {
      const float x = p[j] + bias[j];
      p[j] = x;
      o[j] = geluF(x);
    }
  }
}

// Splits an epilogue over rows among the threads, unless already on one.
template <class F>
void epilogueRows(const KernelArgs &a, int64_t count, int64_t n, bool serial,
                  F &&f) {
  // About 16k elements per thread, like the elementwise kernels.
  const int64_t grain =
      std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(n, 1));
  if (serial)
    f(int64_t(0), count);
  else
    parallelFor(contextOf(a), count, grain,
                [&](int64_t b, int64_t e, int) { f(b, e - b); });
}

void kMatmulBias(const KernelArgs &a) {
  const float *bias = a.in[2].as<float>();
  float *out = a.out[0].as<float>();
  const int64_t n = a.out[0].shape.back();
  matmulInto(a, out, true, [&](float *rows, int64_t count, bool serial) {
    epilogueRows(a, count, n, serial, [&](int64_t r, int64_t c) {
      addBiasRows(rows + r * n, bias, c, n);
    });
  });
}

void kMatmulGelu(const KernelArgs &a) {
  const float *bias = a.in.size() > 2 ? a.in[2].as<float>() : nullptr;
  float *out = a.out[0].as<float>(), *pre = a.out[1].as<float>();
  const int64_t n = a.out[0].shape.back();
  // The product goes into the pre-activation; the GELU reads it from there.
  matmulInto(a, pre, true, [&](float *rows, int64_t count, bool serial) {
    float *y = out + (rows - pre);
    epilogueRows(a, count, n, serial, [&](int64_t r, int64_t c) {
      if (bias)
        biasGeluRows(rows + r * n, bias, y + r * n, c, n);
      else
        geluRows(rows + r * n, y + r * n, c, n);
    });
  });
}

template <class T>
void transposeLoop(const KernelArgs &a, const std::vector<int64_t> &perm) {
  const Shape &xs = a.in[0].shape, &ys = a.out[0].shape;
  const size_t R = xs.size();
  std::vector<int64_t> xstride(R, 1);
  for (size_t i = R; i-- > 1;)
    xstride[i - 1] = xstride[i] * xs[i];
  // Coalesce output dims whose input strides are contiguous.
  std::vector<int64_t> dims, strides;
  for (size_t i = R; i-- > 0;) {
    int64_t d = ys[i], s = xstride[size_t(perm[i])];
    if (d == 1)
      continue;
    if (!dims.empty() && s == strides.back() * dims.back()) {
      dims.back() *= d;
      continue;
    }
    dims.push_back(d);
    strides.push_back(s);
  }
  if (dims.empty()) {
    dims.push_back(1);
    strides.push_back(1);
  }
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
    if (st == 1 && len >= 256)
      std::memcpy(y + out, x + in, size_t(len) * sizeof(T));
    else if (st == 1)
      for (int64_t i = 0; i < len; ++i)
        y[out + i] = x[in + i];
    else
      for (int64_t i = 0; i < len; ++i)
        y[out + i] = x[in + i * st];
    out += len;
    size_t d = D - 1;
    bool done = true;
    while (d > 0) {
      --d;
      ++idx[d];
      in += strides[d];
      if (idx[d] < dims[d]) {
        done = false;
        break;
      }
      in -= strides[d] * dims[d];
      idx[d] = 0;
    }
    if (done)
      return;
  }
}

void kTranspose(const KernelArgs &a) {
  std::vector<int64_t> perm = attrInts(*a.attrs, "permutation");
  switch (rt::dtypeSize(a.in[0].dtype)) {
  case 8:
    transposeLoop<uint64_t>(a, perm);
    break;
  case 2:
    transposeLoop<uint16_t>(a, perm);
    break;
  default:
    transposeLoop<uint32_t>(a, perm);
    break;
  }
}

} // namespace

const std::vector<Entry> &linalgKernels() {
  static const std::vector<Entry> e = {
      {"matmul", kMatmul},
      {"matmul_bias", kMatmulBias},
      {"matmul_gelu", kMatmulGelu},
      {"transpose", kTranspose},
  };
  return e;
}

} // namespace dtc::kernels::cpu
