//===- Linalg.cpp - matmul, attention and transpose (cblas_sgemm) ---------===//
#include "Common.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

namespace dtc::kernels::cpu {
namespace {

// C[M,N] = alpha * op(A) op(B) + beta * C, row-major.
inline void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 float alpha, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float beta, float *C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, blasint(M), blasint(N),
              blasint(K), alpha, A, blasint(lda), B, blasint(ldb), beta, C,
              blasint(ldc));
}

void kMatmul(const KernelArgs &a) {
  const TensorArg &A = a.in[0], &B = a.in[1], &C = a.out[0];
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
  if (!ta && rt::numel(batchB) == 1 && rt::numel(batchA) == nb && nb * M <= INT_MAX) {
    gemm(false, tb, nb * M, N, K, 1.0f, pa, lda, pb, ldb, 0.0f, pc, N);
    return;
  }
  auto plan = planBroadcast<2>(batchC, {&batchA, &batchB});
  forEachBroadcast<2>(plan, [&](int64_t oo, const std::array<int64_t, 2> &io,
                                int64_t len, const std::array<int64_t, 2> &st) {
    for (int64_t i = 0; i < len; ++i) {
      const float *ma = pa + (io[0] + i * st[0]) * M * K;
      const float *mb = pb + (io[1] + i * st[1]) * K * N;
      float *mc = pc + (oo + i) * M * N;
      gemm(ta, tb, M, N, K, 1.0f, ma, lda, mb, ldb, 0.0f, mc, N);
    }
  });
}

// Row-wise softmax of a [Sq, Sk] score matrix, in place; with `causal`
// (Sq == Sk) the entries j > i are masked out (become 0).
void softmaxRows(float *P, int64_t Sq, int64_t Sk, bool causal) {
  for (int64_t i = 0; i < Sq; ++i) {
    float *row = P + i * Sk;
    const int64_t lim = causal ? i + 1 : Sk;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < lim; ++j) mx = std::max(mx, row[j]);
    double sum = 0;
    for (int64_t j = 0; j < lim; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = float(1.0 / sum);
    for (int64_t j = 0; j < lim; ++j) row[j] *= inv;
    for (int64_t j = lim; j < Sk; ++j) row[j] = 0.0f;
  }
}

// q [B, H, Sq, D], k and v [B, H, Sk, D].
void kAttention(const KernelArgs &a) {
  const TensorArg &q = a.in[0], &k = a.in[1], &v = a.in[2];
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const int64_t Sk = k.shape[2];
  const bool causal = attrBool(*a.attrs, "causal");
  const float scale = float(1.0 / std::sqrt(double(D)));
  ScratchVector<float> P(static_cast<size_t>(Sq * Sk));
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t qoff = bh * Sq * D, koff = bh * Sk * D;
    gemm(false, true, Sq, Sk, D, scale, q.as<float>() + qoff, D, k.as<float>() + koff,
         D, 0.0f, P.data(), Sk);
    softmaxRows(P.data(), Sq, Sk, causal);
    gemm(false, false, Sq, D, Sk, 1.0f, P.data(), Sk, v.as<float>() + koff, D, 0.0f,
         a.out[0].as<float>() + qoff, D);
  }
}

void kAttentionGrad(const KernelArgs &a) {
  const TensorArg &q = a.in[0], &k = a.in[1], &v = a.in[2], &dy = a.in[3];
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const int64_t Sk = k.shape[2];
  const bool causal = attrBool(*a.attrs, "causal");
  const float scale = float(1.0 / std::sqrt(double(D)));
  ScratchVector<float> P(static_cast<size_t>(Sq * Sk)), dP(static_cast<size_t>(Sq * Sk));
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t qoff = bh * Sq * D, koff = bh * Sk * D;
    const float *pq = q.as<float>() + qoff, *pk = k.as<float>() + koff,
                *pv = v.as<float>() + koff, *pdy = dy.as<float>() + qoff;
    float *dq = a.out[0].as<float>() + qoff, *dk = a.out[1].as<float>() + koff,
          *dv = a.out[2].as<float>() + koff;
    gemm(false, true, Sq, Sk, D, scale, pq, D, pk, D, 0.0f, P.data(), Sk);
    softmaxRows(P.data(), Sq, Sk, causal);
    // dV = P^T dY
    gemm(true, false, Sk, D, Sq, 1.0f, P.data(), Sk, pdy, D, 0.0f, dv, D);
    // dP = dY V^T
    gemm(false, true, Sq, Sk, D, 1.0f, pdy, D, pv, D, 0.0f, dP.data(), Sk);
    // dS = P * (dP - rowsum(dP * P)); masked entries have P = 0.
    for (int64_t i = 0; i < Sq; ++i) {
      float *pr = P.data() + i * Sk, *dr = dP.data() + i * Sk;
      double dot = 0;
      for (int64_t j = 0; j < Sk; ++j) dot += double(pr[j]) * dr[j];
      const float fd = float(dot);
      for (int64_t j = 0; j < Sk; ++j) dr[j] = pr[j] * (dr[j] - fd);
    }
    // dQ = scale * dS K ; dK = scale * dS^T Q
    gemm(false, false, Sq, D, Sk, scale, dP.data(), Sk, pk, D, 0.0f, dq, D);
    gemm(true, false, Sk, D, Sq, scale, dP.data(), Sk, pq, D, 0.0f, dk, D);
  }
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
    if (st == 1) std::memcpy(y + out, x + in, size_t(len) * sizeof(T));
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
  if (rt::dtypeSize(a.in[0].dtype) == 8) transposeLoop<uint64_t>(a, perm);
  else transposeLoop<uint32_t>(a, perm);
}

} // namespace

const std::vector<Entry> &linalgKernels() {
  static const std::vector<Entry> e = {
      {"matmul", kMatmul},
      {"attention", kAttention},
      {"attention_grad", kAttentionGrad},
      {"transpose", kTranspose},
  };
  return e;
}

void setBlasThreads(int threads) { openblas_set_num_threads(threads < 1 ? 1 : threads); }

} // namespace dtc::kernels::cpu
