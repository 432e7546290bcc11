//===- Gemm.h - the CPU kernels' matrix multiply ------------------*- C++
//-*-===//
//
// One entry point for every matrix product of the CPU kernels, row-major,
// transposes passed as flags (never materialised). The library is chosen at
// build time (docs/kernels.md has the measurements behind the choice):
// oneDNN's sgemm when CMake finds it, else OpenBLAS's cblas_sgemm.
//
// Called outside a parallel region, the library uses ctx.threads() threads;
// called from inside one (attention's tiles), it runs on the calling thread.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_CPU_GEMM_H
#define DTC_KERNELS_CPU_GEMM_H

#include "dtc/kernels/CpuKernels.h"

#include <cstdint>

namespace dtc::kernels::cpu {

/// C[M,N] = alpha * op(A) op(B) + beta * C, row-major; op(A) is A^T when
/// transA (A then holds [K, M]); lda/ldb/ldc are row strides in elements.
void sgemm(const KernelContext &ctx, bool transA, bool transB, int64_t M,
           int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
           const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

} // namespace dtc::kernels::cpu

#endif // DTC_KERNELS_CPU_GEMM_H
