// cuBLAS's own bf16 GEMM rate on this device: the ceiling that dtc's CUDA
// matmuls are compared with (bench/gpu_step_bench.py).
//
//   cuda_gemm_rate M N K [reps] [NN|NT|TN|TT]
//
// C[M,N] = op(A) * op(B) in row-major terms (dtc's matmul: A is [M,K], or
// [K,M] with the first letter T; B is [K,N], or [N,K] with the second letter
// T), bf16 inputs and output, f32 accumulation and scale (cuBLASLt,
// CUBLAS_COMPUTE_32F), the first algorithm of cuBLASLt's heuristic with a
// 32 MiB workspace, as PyTorch uses it. Row-major is the usual operand swap:
// column-major C^T[N,M] = op(B)^T op(A)^T.
//
// Inputs are uniform in [-1, 1) in steps of 1/128 (a hash of the index,
// generated on the device, exact in bf16); 16 entries of the product are
// checked against the host's dot products, which catches a wrong layout.
// After 5 warm-up calls, each of `reps` calls (default 20) is timed
// with its own pair of CUDA events; the median is reported. Prints one line
// for people and one `json: {...}` line for scripts. Every CUDA and cuBLAS
// status is checked; any failure prints the call and exits 1.
//
// Build: part of the CMake build when the CUDA backend is (bench/, target
// dtc-cuda-gemm-rate), or alone:
//   nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90
//   bench/cuda_gemm_rate.cu
//        -lcublasLt -o cuda_gemm_rate
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void fail(const char *what, const char *call, const char *file, int line) {
  std::fprintf(stderr, "cuda_gemm_rate: %s:%d: %s failed: %s\n", file, line,
               call, what);
  std::exit(1);
}

#define CUDA_CHECK(x)                                                          \
  do {                                                                         \
    cudaError_t err_ = (x);                                                    \
    if (err_ != cudaSuccess)                                                   \
      fail(cudaGetErrorString(err_), #x, __FILE__, __LINE__);                  \
  } while (0)

#define LT_CHECK(x)                                                            \
  do {                                                                         \
    cublasStatus_t st_ = (x);                                                  \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                        \
      char buf_[64];                                                           \
      std::snprintf(buf_, sizeof buf_, "cublasStatus %d",                      \
                    static_cast<int>(st_));                                    \
      fail(buf_, #x, __FILE__, __LINE__);                                      \
    }                                                                          \
  } while (0)

// Element i of the input with this seed: uniform in [-1, 1), exactly
// representable in bf16 (8 significant bits), so the host can recompute it.
__host__ __device__ inline float uniformAt(size_t i, uint64_t seed) {
  uint64_t z = i + seed * 0x9E3779B97F4A7C15ull; // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<int>(z >> 56) - 128) * (1.0f / 128.0f);
}

__global__ void fillUniform(__nv_bfloat16 *p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(uniformAt(i, seed));
}

bool parseCount(const char *s, long long *out) {
  char *end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  if (errno || end == s || *end || v <= 0 || v > (1ll << 31))
    return false;
  *out = v;
  return true;
}

int usage() {
  std::fprintf(
      stderr,
      "usage: cuda_gemm_rate M N K [reps] [NN|NT|TN|TT]\n"
      "  bf16 C[M,N] = op(A) op(B), row-major, f32 accumulation (cuBLASLt);\n"
      "  reps: timed calls after 5 warm-ups (default 20); T: that operand\n"
      "  is stored transposed (A as [K,M], B as [N,K])\n");
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 4 || argc > 6)
    return usage();
  long long M, N, K, reps = 20;
  if (!parseCount(argv[1], &M) || !parseCount(argv[2], &N) ||
      !parseCount(argv[3], &K)) {
    std::fprintf(
        stderr,
        "cuda_gemm_rate: M, N and K must be positive integers below 2^31\n");
    return usage();
  }
  if (argc >= 5 && (!parseCount(argv[4], &reps) || reps > 100000)) {
    std::fprintf(stderr, "cuda_gemm_rate: reps must be a positive integer\n");
    return usage();
  }
  std::string layout = argc >= 6 ? argv[5] : "NN";
  if (layout.size() != 2 || (layout[0] != 'N' && layout[0] != 'T') ||
      (layout[1] != 'N' && layout[1] != 'T')) {
    std::fprintf(stderr, "cuda_gemm_rate: layout must be NN, NT, TN or TT\n");
    return usage();
  }
  const bool ta = layout[0] == 'T', tb = layout[1] == 'T';

  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));

  const size_t nA = static_cast<size_t>(M) * K, nB = static_cast<size_t>(K) * N,
               nC = static_cast<size_t>(M) * N;
  __nv_bfloat16 *A = nullptr, *B = nullptr, *C = nullptr;
  void *workspace = nullptr;
  const size_t workspaceBytes = 32u << 20;
  CUDA_CHECK(cudaMalloc(&A, nA * sizeof(__nv_bfloat16)));
  CUDA_CHECK(cudaMalloc(&B, nB * sizeof(__nv_bfloat16)));
  CUDA_CHECK(cudaMalloc(&C, nC * sizeof(__nv_bfloat16)));
  CUDA_CHECK(cudaMalloc(&workspace, workspaceBytes));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  fillUniform<<<1024, 256, 0, stream>>>(A, nA, 1);
  CUDA_CHECK(cudaGetLastError());
  fillUniform<<<1024, 256, 0, stream>>>(B, nB, 2);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemsetAsync(C, 0, nC * sizeof(__nv_bfloat16), stream));

  cublasLtHandle_t lt;
  LT_CHECK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t desc;
  LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major: D^T[N,M] = op(B)^T [N,K] * op(A)^T [K,M]. The first
  // cuBLAS operand is B's memory, the second A's.
  const cublasOperation_t opFirst = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opSecond = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                          &opFirst, sizeof opFirst));
  LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                          &opSecond, sizeof opSecond));
  // B row-major [K,N] is column-major [N,K] (ld N); transposed, B is
  // row-major [N,K], column-major [K,N] (ld K). Likewise A.
  cublasLtMatrixLayout_t lFirst, lSecond, lOut;
  LT_CHECK(cublasLtMatrixLayoutCreate(&lFirst, CUDA_R_16BF, tb ? K : N,
                                      tb ? N : K, tb ? K : N));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lSecond, CUDA_R_16BF, ta ? M : K,
                                      ta ? K : M, ta ? M : K));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lOut, CUDA_R_16BF, N, M, N));

  cublasLtMatmulPreference_t pref;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspaceBytes;
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t heuristic;
  int found = 0;
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, lFirst, lSecond, lOut, lOut,
                                          pref, 1, &heuristic, &found));
  if (found < 1) {
    std::fprintf(
        stderr,
        "cuda_gemm_rate: cuBLASLt has no algorithm for %lldx%lldx%lld %s\n", M,
        N, K, layout.c_str());
    return 1;
  }

  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&] {
    LT_CHECK(cublasLtMatmul(lt, desc, &alpha, B, lFirst, A, lSecond, &beta, C,
                            lOut, C, lOut, &heuristic.algo, workspace,
                            workspaceBytes, stream));
  };
  for (int i = 0; i < 5; ++i)
    gemm();
  CUDA_CHECK(cudaStreamSynchronize(stream));

  std::vector<cudaEvent_t> start(reps), stop(reps);
  for (long long i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventCreate(&start[i]));
    CUDA_CHECK(cudaEventCreate(&stop[i]));
  }
  for (long long i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(start[i], stream));
    gemm();
    CUDA_CHECK(cudaEventRecord(stop[i], stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms(reps);
  for (long long i = 0; i < reps; ++i) {
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, start[i], stop[i]));
    ms[i] = t;
  }
  // Check the product (and so the layouts) at a few places against a dot
  // product in double on the host: the inputs are exact in bf16, so the
  // only differences are f32 accumulation and the output's bf16 rounding.
  int checked = 0;
  for (int s = 0; s < 16; ++s) {
    const long long m = (s * 7919ll) % M, n = (s * 104729ll + 13) % N;
    double ref = 0, mag = 0;
    for (long long k = 0; k < K; ++k) {
      const double a = uniformAt(ta ? static_cast<size_t>(k) * M + m
                                    : static_cast<size_t>(m) * K + k,
                                 1);
      const double b = uniformAt(tb ? static_cast<size_t>(n) * K + k
                                    : static_cast<size_t>(k) * N + n,
                                 2);
      ref += a * b;
      mag += std::fabs(a * b);
    }
    __nv_bfloat16 got;
    CUDA_CHECK(cudaMemcpy(&got, C + static_cast<size_t>(m) * N + n, sizeof got,
                          cudaMemcpyDeviceToHost));
    const double g = __bfloat162float(got);
    if (!(std::fabs(g - ref) <= std::fabs(ref) / 128.0 + 1e-5 * mag + 1e-6)) {
      std::fprintf(
          stderr,
          "cuda_gemm_rate: wrong product: C[%lld][%lld] = %g, expected %g\n", m,
          n, g, ref);
      return 1;
    }
    ++checked;
  }

  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = reps % 2
                            ? sorted[reps / 2]
                            : 0.5 * (sorted[reps / 2 - 1] + sorted[reps / 2]);
  const double flops = 2.0 * M * N * K;
  const double tflops = flops / (median * 1e-3) / 1e12;
  const double best = flops / (sorted.front() * 1e-3) / 1e12;
  std::printf("%s: bf16 GEMM %lldx%lldx%lld %s (f32 accumulate, cuBLASLt): "
              "median %.4f ms, "
              "%.1f TFLOP/s (best %.1f) over %lld reps; %d entries checked\n",
              prop.name, M, N, K, layout.c_str(), median, tflops, best, reps,
              checked);
  std::printf(
      "json: "
      "{\"device\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"layout\":\"%s\","
      "\"median_ms\":%.6f,\"min_ms\":%.6f,\"tflops\":%.3f,\"best_tflops\":%.3f,"
      "\"reps\":%lld,"
      "\"cublaslt_version\":%zu}\n",
      prop.name, M, N, K, layout.c_str(), median, sorted.front(), tflops, best,
      reps, cublasLtGetVersion());

  for (long long i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventDestroy(start[i]));
    CUDA_CHECK(cudaEventDestroy(stop[i]));
  }
  LT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  LT_CHECK(cublasLtMatrixLayoutDestroy(lFirst));
  LT_CHECK(cublasLtMatrixLayoutDestroy(lSecond));
  LT_CHECK(cublasLtMatrixLayoutDestroy(lOut));
  LT_CHECK(cublasLtMatmulDescDestroy(desc));
  LT_CHECK(cublasLtDestroy(lt));
  CUDA_CHECK(cudaStreamDestroy(stream));
  CUDA_CHECK(cudaFree(A));
  CUDA_CHECK(cudaFree(B));
  CUDA_CHECK(cudaFree(C));
  CUDA_CHECK(cudaFree(workspace));
  return 0;
}
