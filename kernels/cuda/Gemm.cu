//===- Gemm.cu - matmul, matmul_bias, matmul_gelu on cuBLASLt
//-----------------===//
//
// The products of docs/kernels.md ("Model ops" matmul, "Fused ops"
// matmul_bias and matmul_gelu) through cuBLASLt, planned once per
// instruction at bind time (descriptors, layouts, the heuristic's algorithm)
// and launched with the operands' current addresses.
//
// Row-major to cuBLAS's column-major: a row-major C [M, N] is the
// column-major C^T [N, M] = op(B)^T op(A)^T, so cuBLASLt's "A" is our b,
// its "B" is our a, and m = N, n = M; transpose_b / transpose_a become the
// op flags of cuBLASLt's A / B.
//
// Batches (numpy broadcast over all dims but the last two) become a list
// of launches of one strided-batched product each: b a single matrix and a
// not transposed folds a's batch into the rows (one product); otherwise the
// output's batch dims, merged where the strides allow, give an inner
// strided batch (stride 0 on a broadcast side) and the rest a list of
// pointer offsets planned at bind time.
//
// f32 computes with CUBLAS_COMPUTE_32F (no TF32); bf16 / f16 operands with
// f32 accumulation and f32 scale (tensor cores), results rounded once
// (split-K partial sums only in f32: the heuristic's reduction schemes are
// limited to COMPUTE_TYPE for bf16 / f16).
//
// Epilogues: matmul_bias takes CUBLASLT_EPILOGUE_BIAS; matmul_gelu on
// bf16 / f16 takes GELU_AUX(_BIAS) (D = result, aux = pre_activation) for a
// single product whose N is a multiple of 8, else BIAS into the
// pre-activation and this file's GELU kernel (the CPU's tanh-form formula,
// kernels/cpu/VecMath.h); f32 always uses this file's GELU so that f32
// results stay within f32 rounding of the CPU's. Whatever cuBLASLt's
// heuristic refuses falls back to a plain product plus this file's bias /
// GELU kernels, and without any cuBLASLt algorithm (or K = 0) to a simple
// tiled kernel of this file with the epilogue built in: a valid instruction
// never fails.
//
// Alignment: the fast plan assumes 16-byte aligned base pointers (bias and
// pre-activation too); a launch whose pointers are less aligned uses a
// second plan made for element alignment and no cuBLASLt epilogue.
//
//===----------------------------------------------------------------------===//
#include "Common.cuh"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace dtc::kernels::cuda {

/// Achieved TFLOP/s of a row-major [m, k] x [k, n] product of `dtype` on
/// ctx.stream: the median of `reps` timed products after 3 warm-ups, on
/// operands of its own (random, allocated and freed here). Synchronises:
/// for benchmarks only. (To be declared in CudaKernels.h.)
double measureGemmTflops(int m, int n, int k, DType dtype, int reps,
                         const Context &ctx);
/// One line saying how a bound matmul / matmul_bias / matmul_gelu runs
/// (the cuBLASLt epilogue of each plan, or the fallback kernel); "" for any
/// other Launch. For tests and benchmark reports.
std::string gemmPlanSummary(const Launch &launch);

namespace {

/// cuBLASLt's workspace, declared by every product (Entry::workspace).
constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;
/// The base-pointer alignment the fast plan assumes (bytes).
constexpr unsigned kFastAlign = 16;

enum class Op { Matmul, Bias, Gelu };
const char *opName(Op op) {
  return op == Op::Matmul ? "matmul"
         : op == Op::Bias ? "matmul_bias"
                          : "matmul_gelu";
}

/// The epilogue a cuBLASLt plan runs.
enum class Epi { Default, Bias, GeluAux, GeluAuxBias };
const char *epiName(Epi e) {
  switch (e) {
  case Epi::Default:
    return "DEFAULT";
  case Epi::Bias:
    return "BIAS";
  case Epi::GeluAux:
    return "GELU_AUX";
  case Epi::GeluAuxBias:
    return "GELU_AUX_BIAS";
  }
  return "?";
}
bool epiHasBias(Epi e) { return e == Epi::Bias || e == Epi::GeluAuxBias; }
bool epiHasAux(Epi e) { return e == Epi::GeluAux || e == Epi::GeluAuxBias; }
cublasLtEpilogue_t ltEpilogue(Epi e) {
  switch (e) {
  case Epi::Default:
    return CUBLASLT_EPILOGUE_DEFAULT;
  case Epi::Bias:
    return CUBLASLT_EPILOGUE_BIAS;
  case Epi::GeluAux:
    return CUBLASLT_EPILOGUE_GELU_AUX;
  case Epi::GeluAuxBias:
    return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

std::string statusText(cublasStatus_t s) {
  const char *name = cublasLtGetStatusName(s);
  return name ? std::string(name) : "cuBLAS status " + std::to_string(int(s));
}
/// Throws naming the kernel and the cuBLASLt call when `s` is not success.
void checkLt(cublasStatus_t s, const char *op, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string(op) + ": cuBLASLt " + what +
                " failed: " + statusText(s));
}

cudaDataType_t cudaType(DType t) {
  switch (t) {
  case DType::F32:
    return CUDA_R_32F;
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F16:
    return CUDA_R_16F;
  default:
    break;
  }
  throw Error(std::string("matmul: expected a float dtype, got ") +
              rt::dtypeName(t));
}

/// Largest power of two dividing v (v > 0), capped at `cap`; `cap` for 0.
long long lowBit(long long v, long long cap) {
  if (v == 0)
    return cap;
  const long long b = v & -v;
  return b < cap ? b : cap;
}

// ---- the products of one instruction
// ------------------------------------------
/// What one instruction computes, in row-major terms: launches of `batch`
/// products each, [M, K] (or [K, M] with ta) times [K, N] (or [N, K] with
/// tb) into [M, N]; consecutive products of a launch `stride*` elements
/// apart, launches at the element offsets of `launches` (a, b, c).
struct Problem {
  long long M = 0, N = 0, K = 0;
  bool ta = false, tb = false;
  long long batch = 1;
  long long strideA = 0, strideB = 0, strideC = 0;
  std::vector<std::array<long long, 3>> launches;
};

/// The same products with one product per launch.
Problem expand(const Problem &p) {
  Problem q = p;
  q.batch = 1;
  q.strideA = q.strideB = q.strideC = 0;
  q.launches.clear();
  q.launches.reserve(p.launches.size() * size_t(p.batch));
  for (const auto &o : p.launches)
    for (long long j = 0; j < p.batch; ++j)
      q.launches.push_back(
          {o[0] + j * p.strideA, o[1] + j * p.strideB, o[2] + j * p.strideC});
  return q;
}

bool flag(const KernelArgs &args, const char *key) {
  return args.attrs && attrFlag(*args.attrs, key);
}

/// The plan of launches for the operands of `args` (no launches when the
/// result is empty).
Problem makeProblem(const KernelArgs &args) {
  const TensorArg &A = args.in[0], &B = args.in[1], &C = args.out[0];
  Problem p;
  p.ta = flag(args, "transpose_a");
  p.tb = flag(args, "transpose_b");
  const size_t ra = A.shape.size(), rc = C.shape.size();
  p.M = C.shape[rc - 2];
  p.N = C.shape[rc - 1];
  p.K = A.shape[ra - (p.ta ? 2 : 1)];
  const rt::Shape batchA(A.shape.begin(), A.shape.end() - 2);
  const rt::Shape batchB(B.shape.begin(), B.shape.end() - 2);
  const rt::Shape batchC(C.shape.begin(), C.shape.end() - 2);
  const long long nb = rt::numel(batchC);
  if (nb == 0 || p.M == 0 || p.N == 0)
    return p; // nothing to compute
  const long long matA = p.M * p.K, matB = p.K * p.N, matC = p.M * p.N;
  // b one matrix, a not transposed and not broadcast: a's batch is rows.
  if (!p.ta && rt::numel(batchB) == 1 && rt::numel(batchA) == nb) {
    p.M *= nb;
    p.launches.push_back({0, 0, 0});
    return p;
  }
  // Per output batch dim (outermost first), a's and b's stride in matrices
  // (0 where broadcast), as in Common.cuh's makeBcast.
  const size_t R = batchC.size();
  std::vector<std::array<long long, 2>> full(R);
  for (int k = 0; k < 2; ++k) {
    const rt::Shape &s = k == 0 ? batchA : batchB;
    long long stride = 1;
    for (size_t i = 0; i < R; ++i) {
      const size_t d = R - 1 - i;
      const long long dim = i < s.size() ? s[s.size() - 1 - i] : 1;
      full[d][size_t(k)] = (dim == batchC[d] && dim != 1) ? stride : 0;
      stride *= dim;
    }
  }
  // Merged dims, innermost first; the output's strides are contiguous.
  std::vector<long long> dims;
  std::vector<std::array<long long, 2>> strides;
  for (size_t i = 0; i < R; ++i) {
    const size_t d = R - 1 - i;
    if (batchC[d] == 1)
      continue;
    if (!dims.empty() && full[d][0] == strides.back()[0] * dims.back() &&
        full[d][1] == strides.back()[1] * dims.back()) {
      dims.back() *= batchC[d];
      continue;
    }
    dims.push_back(batchC[d]);
    strides.push_back(full[d]);
  }
  if (dims.empty()) { // every batch dim is 1: one product
    p.launches.push_back({0, 0, 0});
    return p;
  }
  const long long inner = dims[0];
  p.batch = inner;
  p.strideA = strides[0][0] * matA;
  p.strideB = strides[0][1] * matB;
  p.strideC = matC;
  const long long outer = nb / inner;
  p.launches.reserve(size_t(outer));
  for (long long o = 0; o < outer; ++o) {
    long long rest = o, offA = 0, offB = 0;
    for (size_t d = 1; d < dims.size(); ++d) {
      const long long idx = rest % dims[d];
      rest /= dims[d];
      offA += idx * strides[d][0];
      offB += idx * strides[d][1];
    }
    p.launches.push_back({offA * matA, offB * matB, o * inner * matC});
  }
  if (p.batch > INT_MAX)
    return expand(p); // cuBLASLt's batch count is an int32
  return p;
}

// ---- device code
// --------------------------------------------------------------- The CPU's
// GELU (kernels/cpu/VecMath.h): tanh as its [13/6] rational function, the same
// constants and clamp (NaN propagates as in std::min/max).
__device__ __forceinline__ float tanhRational(float x) {
  constexpr float kClamp = 7.90531110763549805f;
  x = x < -kClamp ? -kClamp : x;
  x = kClamp < x ? kClamp : x;
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return p / q;
}
__device__ __forceinline__ float geluTanh(float x) {
  constexpr float kGeluC = 0.7978845608028654f; // sqrt(2/pi)
  constexpr float kGeluA = 0.044715f;
  return 0.5f * x * (1.0f + tanhRational(kGeluC * (x + kGeluA * x * x * x)));
}

/// out[i] += bias[i % n] (in f32, one rounding).
template <class T>
__global__ void addBiasKernel(T *out, const T *bias, long long total,
                              long long n) {
  DTC_GRID_STRIDE(i, total) out[i] = fromF<T>(toF(out[i]) + toF(bias[i % n]));
}

/// With bias: pre[i] += bias[i % n]. Then result[i] = gelu(pre[i]) of the
/// f32 value (before pre's rounding, as the CPU does).
template <class T>
__global__ void biasGeluKernel(T *pre, const T *bias, T *result,
                               long long total, long long n) {
  DTC_GRID_STRIDE(i, total) {
    float v = toF(pre[i]);
    if (bias) {
      v += toF(bias[i % n]);
      pre[i] = fromF<T>(v);
    }
    result[i] = fromF<T>(geluTanh(v));
  }
}

/// The fallback product: 16 x 16 output tiles, one thread per element,
/// f32 sums in k order; `batch` products `stride*` elements apart.
struct TileDims {
  long long M, N, K, batch, strideA, strideB, strideC, tilesM;
  int ta, tb;
};
constexpr int kTile = 16;

/// out = a b (+ bias); with `pre` (matmul_gelu): pre = a b (+ bias),
/// out = gelu(pre).
template <class T>
__global__ void __launch_bounds__(kTile *kTile)
    tileGemmKernel(const T *__restrict__ a, const T *__restrict__ b,
                   const T *__restrict__ bias, T *out, T *pre, TileDims d) {
  __shared__ float as[kTile][kTile + 1]; // as[m][k]
  __shared__ float bs[kTile][kTile + 1]; // bs[k][n]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const long long n = (long long)blockIdx.x * kTile + tx;
  // Every thread of the block runs the same trip counts (they depend on the
  // block's indices only), so the barriers are reached by all.
  for (long long z = blockIdx.z; z < d.batch; z += gridDim.z) {
    const T *az = a + z * d.strideA, *bz = b + z * d.strideB;
    for (long long tm = blockIdx.y; tm < d.tilesM; tm += gridDim.y) {
      const long long m = tm * kTile + ty;
      float acc = 0.0f;
      for (long long k0 = 0; k0 < d.K; k0 += kTile) {
        {
          const long long mm = tm * kTile + ty, kk = k0 + tx;
          as[ty][tx] = (mm < d.M && kk < d.K)
                           ? toF(az[d.ta ? kk * d.M + mm : mm * d.K + kk])
                           : 0.0f;
        }
        {
          const long long kk = k0 + ty, nn = (long long)blockIdx.x * kTile + tx;
          bs[ty][tx] = (kk < d.K && nn < d.N)
                           ? toF(bz[d.tb ? nn * d.K + kk : kk * d.N + nn])
                           : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTile; ++kk)
          acc = fmaf(as[ty][kk], bs[kk][tx], acc);
        __syncthreads();
      }
      if (m < d.M && n < d.N) {
        const long long at = z * d.strideC + m * d.N + n;
        const float v = bias ? acc + toF(bias[n]) : acc;
        if (pre) {
          pre[at] = fromF<T>(v);
          out[at] = fromF<T>(geluTanh(v));
        } else {
          out[at] = fromF<T>(v);
        }
      }
    }
  }
}

// ---- cuBLASLt plans
// --------------------------------------------------------------
/// One cuBLASLt configuration: descriptors, layouts and algorithm, and the
/// base-pointer alignment the run-time operands need for it.
struct LtPlan {
  Problem prob;
  Epi epi = Epi::Default;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layA = nullptr, layB = nullptr,
                         layD =
                             nullptr; // cuBLASLt's A (our b), B (our a), C = D
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  long long alignA = 1, alignB = 1,
            alignD = 1; // bytes, our a, b and the product's output
  long long alignBias = 1, alignAux = 1;
  LtPlan() = default;
  LtPlan(const LtPlan &) = delete;
  LtPlan &operator=(const LtPlan &) = delete;
  ~LtPlan() {
    // No throwing from a destructor: a failed destroy leaks the descriptor.
    if (layD)
      cublasLtMatrixLayoutDestroy(layD);
    if (layB)
      cublasLtMatrixLayoutDestroy(layB);
    if (layA)
      cublasLtMatrixLayoutDestroy(layA);
    if (desc)
      cublasLtMatmulDescDestroy(desc);
  }
};

struct PreferenceGuard {
  cublasLtMatmulPreference_t pref = nullptr;
  ~PreferenceGuard() {
    if (pref)
      cublasLtMatmulPreferenceDestroy(pref);
  }
};

template <class V>
void setDesc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
             const V &v, const char *op) {
  checkLt(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), op,
          "MatmulDescSetAttribute");
}
template <class V>
void setLayout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
               const V &v, const char *op) {
  checkLt(cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof(v)), op,
          "MatrixLayoutSetAttribute");
}
template <class V>
void setPref(cublasLtMatmulPreference_t p,
             cublasLtMatmulPreferenceAttributes_t attr, const V &v,
             const char *op) {
  checkLt(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)), op,
          "MatmulPreferenceSetAttribute");
}

/// A pointer value with exactly `align` bytes of alignment, for the
/// heuristic (which reads the bias / aux pointers' alignment, never their
/// memory); run-time pointers are checked against it.
const void *alignedProbe(long long align) {
  return reinterpret_cast<const void *>((uintptr_t(1) << 40) +
                                        uintptr_t(align));
}

/// The plan for `prob` with epilogue `epi`, assuming base pointers aligned to
/// `want` bytes (each operand's offsets may lower it), or nullptr when the
/// heuristic has no algorithm for it.
std::unique_ptr<LtPlan> tryPlan(cublasLtHandle_t lt, const Problem &prob,
                                DType dtype, Epi epi, long long want,
                                const char *op) {
  auto plan = std::make_unique<LtPlan>();
  plan->prob = prob;
  plan->epi = epi;
  const cudaDataType_t type = cudaType(dtype);
  const long long elt = (long long)rt::dtypeSize(dtype);
  const long long M = prob.M, N = prob.N, K = prob.K;

  // What each operand's matrices are aligned to, given an aligned base.
  long long gA = want, gB = want, gC = want;
  for (const auto &o : prob.launches) {
    gA = lowBit(o[0] * elt, gA);
    gB = lowBit(o[1] * elt, gB);
    gC = lowBit(o[2] * elt, gC);
  }
  if (prob.batch > 1) {
    gA = lowBit(prob.strideA * elt, gA);
    gB = lowBit(prob.strideB * elt, gB);
    gC = lowBit(prob.strideC * elt, gC);
  }
  // Base pointers aligned to these keep every matrix pointer aligned to them.
  plan->alignA = gA;
  plan->alignB = gB;
  plan->alignD = gC;
  plan->alignBias = epiHasBias(epi) ? want : 1;
  plan->alignAux = epiHasAux(epi) ? want : 1;

  checkLt(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
          op, "MatmulDescCreate");
  // cuBLASLt's A is our b, its B our a (see the file comment).
  const cublasOperation_t opA = prob.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = prob.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  setDesc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, opA, op);
  setDesc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, opB, op);
  const uint32_t epilogue = uint32_t(ltEpilogue(epi));
  setDesc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, op);
  if (epiHasBias(epi)) {
    // Bias [N]: one per row of the column-major D [N, M], D's dtype.
    setDesc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, alignedProbe(want),
            op);
    setDesc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(type), op);
    setDesc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, int64_t(0), op);
  }
  if (epiHasAux(epi)) {
    // The pre-activation laid out as D (ld N, a multiple of 8), D's dtype.
    setDesc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
            alignedProbe(want), op);
    setDesc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(N), op);
    setDesc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
            int32_t(type), op);
  }

  // Column-major layouts of the stored matrices.
  const uint64_t rowsA = uint64_t(prob.tb ? K : N),
                 colsA = uint64_t(prob.tb ? N : K);
  const uint64_t rowsB = uint64_t(prob.ta ? M : K),
                 colsB = uint64_t(prob.ta ? K : M);
  checkLt(cublasLtMatrixLayoutCreate(&plan->layA, type, rowsA, colsA,
                                     int64_t(rowsA)),
          op, "MatrixLayoutCreate");
  checkLt(cublasLtMatrixLayoutCreate(&plan->layB, type, rowsB, colsB,
                                     int64_t(rowsB)),
          op, "MatrixLayoutCreate");
  checkLt(cublasLtMatrixLayoutCreate(&plan->layD, type, uint64_t(N),
                                     uint64_t(M), int64_t(N)),
          op, "MatrixLayoutCreate");
  if (prob.batch > 1) {
    const int32_t count = int32_t(prob.batch);
    setLayout(plan->layA, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count, op);
    setLayout(plan->layB, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count, op);
    setLayout(plan->layD, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count, op);
    setLayout(plan->layA, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
              int64_t(prob.strideB), op);
    setLayout(plan->layB, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
              int64_t(prob.strideA), op);
    setLayout(plan->layD, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
              int64_t(prob.strideC), op);
  }

  PreferenceGuard pg;
  checkLt(cublasLtMatmulPreferenceCreate(&pg.pref), op,
          "MatmulPreferenceCreate");
  setPref(pg.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
          uint64_t(kLtWorkspaceBytes), op);
  setPref(pg.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t(gB),
          op);
  setPref(pg.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t(gA),
          op);
  setPref(pg.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, uint32_t(gC),
          op);
  setPref(pg.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, uint32_t(gC),
          op);
  // Split-K partial sums in f32 only: the INPLACE and OUTPUT_TYPE reductions
  // keep them in the output's dtype, which rounds a bf16 / f16 result
  // several times (seen: errors of several bf16 units with K = 1024).
  const uint32_t reductions =
      rt::isLowPrecision(dtype)
          ? uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
          : uint32_t(CUBLASLT_REDUCTION_SCHEME_MASK);
  setPref(pg.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions, op);

  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
      lt, plan->desc, plan->layA, plan->layB, plan->layD, plan->layD, pg.pref,
      1, &result, &returned);
  // No algorithm for this configuration (NOT_SUPPORTED, or a combination
  // this cuBLASLt refuses): the caller tries the next one.
  if (s != CUBLAS_STATUS_SUCCESS || returned < 1 ||
      result.state != CUBLAS_STATUS_SUCCESS)
    return nullptr;
  if (result.workspaceSize > kLtWorkspaceBytes)
    return nullptr;
  plan->algo = result.algo;
  plan->workspace = result.workspaceSize;
  return plan;
}

bool aligned(const void *p, long long align) {
  return align <= 1 || alignedTo(p, size_t(align));
}

// ---- the bound kernel
// --------------------------------------------------------------
class GemmLaunch final : public Launch {
public:
  GemmLaunch(const KernelArgs &args, const Context &ctx, Op op)
      : op_(op), dtype_(args.in[0].dtype), hasBias_(args.in.size() > 2),
        prob_(makeProblem(args)) {
    (void)cudaType(dtype_); // float dtypes only
    if (prob_.launches.empty() || prob_.K == 0 || !ctx.lt)
      return; // fallback kernel (or nothing)
    const long long elt = (long long)rt::dtypeSize(dtype_);
    const bool low = rt::isLowPrecision(dtype_);
    std::vector<Problem> candidates{prob_};
    if (prob_.batch > 1)
      candidates.push_back(expand(prob_));
    for (const Problem &p : candidates) {
      // Fast: 16-byte aligned pointers, the most fused epilogue cuBLASLt takes.
      std::vector<Epi> order;
      if (op_ == Op::Gelu && low && p.batch == 1 && p.launches.size() == 1 &&
          p.N % 8 == 0)
        order.push_back(hasBias_ ? Epi::GeluAuxBias : Epi::GeluAux);
      if (hasBias_)
        order.push_back(Epi::Bias);
      order.push_back(Epi::Default);
      for (Epi e : order)
        if ((fast_ = tryPlan(ctx.lt, p, dtype_, e, kFastAlign, opName(op_))))
          break;
      // Safe: element-aligned pointers, no cuBLASLt epilogue.
      safe_ = tryPlan(ctx.lt, p, dtype_, Epi::Default, elt, opName(op_));
      if (fast_ || safe_)
        break;
    }
  }

  void run(const KernelArgs &args, const Context &ctx) override {
    if (prob_.launches.empty())
      return; // an empty result
    const LtPlan *plan = nullptr;
    if (!ltFailed_) {
      if (fast_ && fits(*fast_, args))
        plan = fast_.get();
      else if (safe_)
        plan = safe_.get();
    }
    if (plan) {
      if (runLt(*plan, args, ctx)) {
        epilogueAfter(plan->epi, args, ctx);
        return;
      }
      ltFailed_ = true; // from now on the fallback kernel, for every call
      std::fprintf(stderr,
                   "dtc: %s: cuBLASLt refused a planned product; using the "
                   "fallback kernel\n",
                   opName(op_));
    }
    runFallback(args, ctx);
  }

  std::string summary() const {
    std::string s = std::string(opName(op_)) + " " + rt::dtypeName(dtype_) +
                    ": M=" + std::to_string(prob_.M) +
                    " N=" + std::to_string(prob_.N) +
                    " K=" + std::to_string(prob_.K) +
                    " batch=" + std::to_string(prob_.batch) +
                    " launches=" + std::to_string(prob_.launches.size());
    auto one = [](const char *what, const std::unique_ptr<LtPlan> &p) {
      if (!p)
        return std::string("; ") + what + " none";
      return std::string("; ") + what + " " + epiName(p->epi) +
             " batch=" + std::to_string(p->prob.batch) +
             " launches=" + std::to_string(p->prob.launches.size()) +
             " ws=" + std::to_string(p->workspace);
    };
    if (prob_.launches.empty())
      return s + "; empty";
    return s + one("fast", fast_) + one("safe", safe_) +
           (ltFailed_ ? "; cuBLASLt failed" : "");
  }

private:
  /// The pointer cuBLASLt writes its D to.
  void *productOut(Epi epi, const KernelArgs &args) const {
    if (op_ == Op::Gelu && !epiHasAux(epi))
      return args.out[1].data; // pre-activation
    return args.out[0].data;
  }

  bool fits(const LtPlan &p, const KernelArgs &args) const {
    return aligned(args.in[0].data, p.alignA) &&
           aligned(args.in[1].data, p.alignB) &&
           aligned(productOut(p.epi, args), p.alignD) &&
           (!epiHasBias(p.epi) || aligned(args.in[2].data, p.alignBias)) &&
           (!epiHasAux(p.epi) || aligned(args.out[1].data, p.alignAux));
  }

  /// Enqueues the plan's products; false when cuBLASLt refuses them.
  bool runLt(const LtPlan &p, const KernelArgs &args, const Context &ctx) {
    const char *op = opName(op_);
    if (p.workspace > 0 && (!ctx.workspace || ctx.workspaceBytes < p.workspace))
      throw Error(std::string(op) + ": cuBLASLt needs " +
                  std::to_string(p.workspace) +
                  " bytes of workspace, the context has " +
                  std::to_string(ctx.workspaceBytes));
    if (epiHasBias(p.epi))
      setDesc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
              static_cast<const void *>(args.in[2].data), op);
    if (epiHasAux(p.epi))
      setDesc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
              args.out[1].data, op);
    const size_t elt = rt::dtypeSize(dtype_);
    const char *a = static_cast<const char *>(args.in[0].data);
    const char *b = static_cast<const char *>(args.in[1].data);
    char *d = static_cast<char *>(productOut(p.epi, args));
    const float alpha = 1.0f, beta = 0.0f;
    void *ws = ctx.workspace;
    const size_t wsBytes = ws ? ctx.workspaceBytes : 0;
    for (const auto &o : p.prob.launches) {
      const void *pa = a + size_t(o[0]) * elt, *pb = b + size_t(o[1]) * elt;
      void *pd = d + size_t(o[2]) * elt;
      const cublasStatus_t s = cublasLtMatmul(
          ctx.lt, p.desc, &alpha, pb, p.layA, pa, p.layB, &beta, pd, p.layD, pd,
          p.layD, &p.algo, ws, wsBytes, ctx.stream);
      if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE)
        return false;
      checkLt(s, op, "Matmul");
    }
    return true;
  }

  /// This file's bias / GELU kernels for what the plan's epilogue left out.
  void epilogueAfter(Epi epi, const KernelArgs &args,
                     const Context &ctx) const {
    const long long total = args.out[0].numel, n = prob_.N;
    if (total == 0)
      return;
    const void *bias = hasBias_ ? args.in[2].data : nullptr;
    if (op_ == Op::Bias && epi == Epi::Default) {
      dispatchFloat(dtype_, [&](auto tag) {
        using T = decltype(tag);
        addBiasKernel<T><<<gridFor(total), kThreads, 0, ctx.stream>>>(
            static_cast<T *>(args.out[0].data), static_cast<const T *>(bias),
            total, n);
      });
      checkLaunch(opName(op_));
    } else if (op_ == Op::Gelu && !epiHasAux(epi)) {
      const void *b =
          epi == Epi::Default ? bias : nullptr; // BIAS added it already
      dispatchFloat(dtype_, [&](auto tag) {
        using T = decltype(tag);
        biasGeluKernel<T><<<gridFor(total), kThreads, 0, ctx.stream>>>(
            static_cast<T *>(args.out[1].data), static_cast<const T *>(b),
            static_cast<T *>(args.out[0].data), total, n);
      });
      checkLaunch(opName(op_));
    }
  }

  void runFallback(const KernelArgs &args, const Context &ctx) const {
    const Problem &p = prob_;
    TileDims d{p.M,          p.N,         p.K,       p.batch,
               p.strideA,    p.strideB,   p.strideC, (p.M + kTile - 1) / kTile,
               p.ta ? 1 : 0, p.tb ? 1 : 0};
    const dim3 block(kTile, kTile);
    const dim3 grid(unsigned((p.N + kTile - 1) / kTile),
                    unsigned(std::min<long long>(d.tilesM, 65535)),
                    unsigned(std::min<long long>(p.batch, 65535)));
    const bool gelu = op_ == Op::Gelu;
    dispatchFloat(dtype_, [&](auto tag) {
      using T = decltype(tag);
      const T *a = static_cast<const T *>(args.in[0].data);
      const T *b = static_cast<const T *>(args.in[1].data);
      const T *bias =
          hasBias_ ? static_cast<const T *>(args.in[2].data) : nullptr;
      T *out = static_cast<T *>(args.out[0].data);
      T *pre = gelu ? static_cast<T *>(args.out[1].data) : nullptr;
      for (const auto &o : p.launches) {
        tileGemmKernel<T><<<grid, block, 0, ctx.stream>>>(
            a + o[0], b + o[1], bias, out + o[2], pre ? pre + o[2] : nullptr,
            d);
        checkLaunch(opName(op_));
      }
    });
  }

  Op op_;
  DType dtype_;
  bool hasBias_;
  Problem prob_;
  std::unique_ptr<LtPlan> fast_, safe_;
  bool ltFailed_ = false;
};

std::unique_ptr<Launch> bindMatmul(const KernelArgs &a, const Context &ctx) {
  return std::make_unique<GemmLaunch>(a, ctx, Op::Matmul);
}
std::unique_ptr<Launch> bindMatmulBias(const KernelArgs &a,
                                       const Context &ctx) {
  return std::make_unique<GemmLaunch>(a, ctx, Op::Bias);
}
std::unique_ptr<Launch> bindMatmulGelu(const KernelArgs &a,
                                       const Context &ctx) {
  return std::make_unique<GemmLaunch>(a, ctx, Op::Gelu);
}
size_t gemmWorkspace(const KernelArgs &) { return kLtWorkspaceBytes; }

// ---- measureGemmTflops
// -------------------------------------------------------------
/// Uniform values in [-1, 1) from a hash of the index and the seed.
template <class T>
__global__ void fillRandomKernel(T *x, long long n, unsigned seed) {
  DTC_GRID_STRIDE(i, n) {
    unsigned long long h = (unsigned long long)i * 0x9E3779B97F4A7C15ull + seed;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    x[i] = fromF<T>(float(h >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
}

struct DeviceBuffer {
  void *p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    check(cudaMalloc(&p, bytes ? bytes : 1), "measureGemmTflops: cudaMalloc");
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() {
    if (p)
      cudaFree(p);
  }
};
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    check(cudaEventCreate(&start), "measureGemmTflops: cudaEventCreate");
    check(cudaEventCreate(&stop), "measureGemmTflops: cudaEventCreate");
  }
  EventPair(const EventPair &) = delete;
  EventPair &operator=(const EventPair &) = delete;
  ~EventPair() {
    if (stop)
      cudaEventDestroy(stop);
    if (start)
      cudaEventDestroy(start);
  }
};

} // namespace

double measureGemmTflops(int m, int n, int k, DType dtype, int reps,
                         const Context &ctx) {
  if (m <= 0 || n <= 0 || k <= 0 || reps <= 0)
    throw Error("measureGemmTflops: m, n, k and reps must be positive");
  const size_t elt = rt::dtypeSize(dtype);
  (void)cudaType(dtype);
  DeviceBuffer a(size_t(m) * size_t(k) * elt), b(size_t(k) * size_t(n) * elt),
      c(size_t(m) * size_t(n) * elt);
  std::unique_ptr<DeviceBuffer> ws;
  Context local = ctx;
  if (!local.workspace || local.workspaceBytes < kLtWorkspaceBytes) {
    ws = std::make_unique<DeviceBuffer>(kLtWorkspaceBytes);
    local.workspace = ws->p;
    local.workspaceBytes = kLtWorkspaceBytes;
  }
  dispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    const long long na = (long long)m * k, nb = (long long)k * n;
    fillRandomKernel<T><<<gridFor(na), kThreads, 0, local.stream>>>(
        static_cast<T *>(a.p), na, 1u);
    checkLaunch("measureGemmTflops");
    fillRandomKernel<T><<<gridFor(nb), kThreads, 0, local.stream>>>(
        static_cast<T *>(b.p), nb, 2u);
    checkLaunch("measureGemmTflops");
  });
  const nlohmann::json attrs = nlohmann::json::object();
  KernelArgs args;
  args.attrs = &attrs;
  TensorArg ta, tb, tc;
  ta.dtype = tb.dtype = tc.dtype = dtype;
  ta.shape = {m, k};
  tb.shape = {k, n};
  tc.shape = {m, n};
  ta.numel = (int64_t)m * k;
  tb.numel = (int64_t)k * n;
  tc.numel = (int64_t)m * n;
  ta.data = a.p;
  tb.data = b.p;
  tc.data = c.p;
  args.in = {ta, tb};
  args.out = {tc};
  GemmLaunch launch(args, local, Op::Matmul);
  EventPair ev;
  for (int i = 0; i < 3; ++i)
    launch.run(args, local);
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(ev.start, local.stream),
          "measureGemmTflops: cudaEventRecord");
    launch.run(args, local);
    check(cudaEventRecord(ev.stop, local.stream),
          "measureGemmTflops: cudaEventRecord");
    check(cudaEventSynchronize(ev.stop),
          "measureGemmTflops: cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, ev.start, ev.stop),
          "measureGemmTflops: cudaEventElapsedTime");
    ms.push_back(t);
  }
  check(cudaStreamSynchronize(local.stream),
        "measureGemmTflops: cudaStreamSynchronize");
  std::sort(ms.begin(), ms.end());
  const double median =
      reps % 2
          ? ms[size_t(reps / 2)]
          : 0.5 * (double(ms[size_t(reps / 2 - 1)]) + ms[size_t(reps / 2)]);
  if (!(median > 0))
    throw Error("measureGemmTflops: the product took no measurable time");
  return 2.0 * double(m) * double(n) * double(k) / (median * 1e-3) / 1e12;
}

std::string gemmPlanSummary(const Launch &launch) {
  const auto *g = dynamic_cast<const GemmLaunch *>(&launch);
  return g ? g->summary() : std::string();
}

const std::vector<Entry> &gemmKernels() {
  static const std::vector<Entry> entries = {
      {"matmul", nullptr, bindMatmul, gemmWorkspace},
      {"matmul_bias", nullptr, bindMatmulBias, gemmWorkspace},
      {"matmul_gelu", nullptr, bindMatmulGelu, gemmWorkspace},
  };
  return entries;
}

} // namespace dtc::kernels::cuda
