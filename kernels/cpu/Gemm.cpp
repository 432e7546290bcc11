//===- Gemm.cpp - sgemm on oneDNN or OpenBLAS, the kernel context
//----------===//
#include "Gemm.h"
#include "Parallel.h"

#include <climits>
#include <cstdlib>
#include <new>
#include <string>

#if DTC_GEMM_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#else
#include <cblas.h>
#endif

namespace dtc::kernels {

float *KernelContext::workspace(size_t floats) {
  if (floats > workspaceFloats_) {
    const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    // The old contents are not kept: free first, so the context never holds
    // both (its high-water is the largest workspace asked for).
    workspace_.reset();
    workspaceFloats_ = 0;
    void *p = std::aligned_alloc(64, bytes);
    if (!p)
      throw std::bad_alloc();
    workspace_.reset(static_cast<float *>(p));
    workspaceFloats_ = bytes / sizeof(float);
  }
  return workspace_.get();
}

void KernelContext::FreeAligned::operator()(float *p) const { std::free(p); }

} // namespace dtc::kernels

namespace dtc::kernels::cpu {

KernelContext &contextOf(const KernelArgs &a) {
  if (a.ctx)
    return *a.ctx;
  thread_local KernelContext single(1);
  return single;
}

void bindThreads(const KernelContext &ctx) {
  // OpenMP's thread count is per calling thread (an ICV), so ranks that are
  // threads of one process keep their own; oneDNN reads it per call.
  omp_set_num_threads(ctx.threads());
#if !DTC_GEMM_ONEDNN
  openblas_set_num_threads(ctx.threads());
#endif
}

const char *gemmLibrary() {
#if DTC_GEMM_ONEDNN
  static const std::string name = [] {
    const dnnl_version_t *v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." +
           std::to_string(v->minor) + "." + std::to_string(v->patch);
  }();
  return name.c_str();
#else
  return "OpenBLAS";
#endif
}

void sgemm(const KernelContext &ctx, bool transA, bool transB, int64_t M,
           int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
           const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) { // an empty sum (libraries differ on whether they touch C)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
#if DTC_GEMM_ONEDNN
  // The thread count oneDNN reads; inside a parallel region it runs serially.
  if (!omp_in_parallel())
    omp_set_num_threads(ctx.threads());
  const dnnl_status_t st =
      dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda,
                 B, ldb, beta, C, ldc);
  if (st != dnnl_success)
    throw rt::Error("matmul: oneDNN sgemm failed (status " +
                    std::to_string(int(st)) + ")");
#else
  (void)ctx;
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX ||
      ldb > INT_MAX || ldc > INT_MAX)
    throw rt::Error("matmul: a dimension exceeds OpenBLAS's 32-bit indices");
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, blasint(M), blasint(N),
              blasint(K), alpha, A, blasint(lda), B, blasint(ldb), beta, C,
              blasint(ldc));
#endif
}

} // namespace dtc::kernels::cpu
