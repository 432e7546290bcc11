//===- Loss.cu - embeddings and cross entropy (see CudaKernels.h) ---------===//
//
// embedding, embedding_grad, cross_entropy, cross_entropy_grad and the
// vocabulary-parallel pieces (embedding_shard, embedding_shard_grad,
// cross_entropy_shard_stats, cross_entropy_shard_grad) of docs/kernels.md,
// computed as kernels/cpu/Loss.cpp and Shard.cpp do:
//
// - ids and labels are checked by one single-block kernel that scans them in
//   order and reports the FIRST bad one (the position the CPU kernel throws
//   for); the computing kernels skip bad ids without touching memory.
// - embedding gradients are deterministic and bit-identical to the CPU's
//   order: the positions are stably sorted by their (local) row with CUB's
//   radix sort, then every output element (row, column) sums its row's
//   positions in position order in f32, starting from 0 (no atomics).
// - cross entropy: one block per row reads the row once (16-byte vectors,
//   a shared-memory copy for the later passes): the f32 max, the sum of f32
//   exponentials in double (f32 pairs within each vector, see "cross
//   entropy" below), the row's loss in double into the workspace, then one
//   block adds the rows (a fixed order); the gradient's rows are written
//   by the same block from its copy.
//   The shard statistics and gradient use double exponentials, as
//   kernels/cpu/Shard.cpp.
// - bf16/f16 results are rounded from the f32 value the CPU kernel computes
//   (the CPU executor rounds the f32 kernel's result the same way).
//
//===----------------------------------------------------------------------===//
#include "Common.cuh"

#define CCCL_DISABLE_NVTX
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cmath>

namespace dtc::kernels::cuda {
namespace {

// ---- floats whose dtype is only known at run time (statistics, scalars) ----
enum FloatCode : int { kCodeF32 = 0, kCodeBF16 = 1, kCodeF16 = 2 };
int floatCode(DType t) {
  switch (t) {
  case DType::F32:
    return kCodeF32;
  case DType::BF16:
    return kCodeBF16;
  case DType::F16:
    return kCodeF16;
  default:
    throw Error("cuda kernel: expected a float dtype, got " +
                std::string(rt::dtypeName(t)));
  }
}
__device__ __forceinline__ float loadAny(const void *p, int code, long long i) {
  if (code == kCodeBF16)
    return toF(static_cast<const __nv_bfloat16 *>(p)[i]);
  if (code == kCodeF16)
    return toF(static_cast<const __half *>(p)[i]);
  return static_cast<const float *>(p)[i];
}
__device__ __forceinline__ void storeAny(void *p, int code, long long i,
                                         float v) {
  if (code == kCodeBF16)
    static_cast<__nv_bfloat16 *>(p)[i] = fromF<__nv_bfloat16>(v);
  else if (code == kCodeF16)
    static_cast<__half *>(p)[i] = fromF<__half>(v);
  else
    static_cast<float *>(p)[i] = v;
}

constexpr unsigned kMaxGrid = 65535u * 16u;
unsigned gridRows(long long rows) {
  return unsigned(std::max<long long>(1, std::min<long long>(rows, kMaxGrid)));
}
/// Threads of a block that works on one row of n elements (a multiple of 32).
int rowThreads(long long n) { return n >= 1024 ? 256 : n >= 128 ? 128 : 32; }
size_t alignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

// ---- the id / label check ---------------------------------------------------
constexpr int kScanUnroll = 4;

/// The cross entropies' `ignore_index`, when `set`: such a label is exempt
/// from the range check and contributes no loss and no gradient.
struct Ignored {
  int set = 0;
  long long value = 0;
};
Ignored ignoredOf(const nlohmann::json &attrs) {
  Ignored ig;
  if (auto it = attrs.find("ignore_index"); it != attrs.end()) {
    ig.set = 1;
    ig.value = it->get<long long>();
  }
  return ig;
}
__device__ __forceinline__ bool isIgnored(const Ignored &ig, long long l) {
  return ig.set && l == ig.value;
}

/// One block: scans ids in order, reports the first outside [0, c.bound).
template <class I>
__global__ void firstBadKernel(const I *ids, long long n, IndexCheck c,
                               Ignored ig, DeviceError *err) {
  __shared__ long long warpMin[32];
  const long long step = (long long)blockDim.x * kScanUnroll;
  for (long long base = 0; base < n; base += step) { // uniform over the block
    long long mine = LLONG_MAX;
#pragma unroll
    for (int k = 0; k < kScanUnroll; ++k) {
      const long long i = base + (long long)k * blockDim.x + threadIdx.x;
      if (i < n) {
        const long long v = (long long)ids[i];
        if ((v < 0 || v >= c.bound) && !isIgnored(ig, v) && i < mine)
          mine = i;
      }
    }
    if (__syncthreads_or(mine != LLONG_MAX)) { // the same for every thread
      long long m = mine;
      for (int o = 16; o > 0; o >>= 1) {
        const long long other = __shfl_xor_sync(0xffffffffu, m, o);
        m = other < m ? other : m;
      }
      if ((threadIdx.x & 31) == 0)
        warpMin[threadIdx.x >> 5] = m;
      __syncthreads();
      if (threadIdx.x == 0) {
        long long best = LLONG_MAX;
        for (int w = 0; w < int(blockDim.x >> 5); ++w)
          best = warpMin[w] < best ? warpMin[w] : best;
        reportBadIndex(err, c, (long long)ids[best], best);
      }
      return; // every thread of the block
    }
  }
}

/// Enqueues the check of `ids` against [0, bound) (nothing when empty).
void checkIndices(const TensorArg &ids, long long bound, const char *op,
                  const char *what, const Context &ctx, Ignored ig = {}) {
  if (ids.numel <= 0)
    return;
  const IndexCheck c = makeIndexCheck(op, what, ids.shape, bound);
  const int threads = ids.numel <= 256 * kScanUnroll ? 256 : 1024;
  dispatchInt(ids.dtype, [&](auto i) {
    using I = decltype(i);
    firstBadKernel<I><<<1, threads, 0, ctx.stream>>>(ids.as<I>(), ids.numel, c,
                                                     ig, ctx.error);
    checkLaunch(op);
  });
}

// ---- embedding, embedding_shard ---------------------------------------------
/// out[p, j] = table[ids[p] - offset, j] where that row is in [0, rows), 0
/// elsewhere; ids outside [0, bound) are skipped (reported by the check).
template <class T, class I>
__global__ void embeddingKernel(const T *table, const I *ids,
                                const int64_t *offset, long long rows,
                                long long bound, long long D, long long n,
                                T *out) {
  const long long off = offset ? (long long)*offset : 0;
  DTC_GRID_STRIDE(i, n) {
    const long long p = i / D, j = i - p * D;
    const long long id = (long long)ids[p];
    if (id < 0 || id >= bound)
      continue;
    const long long row = id - off;
    out[i] = (row >= 0 && row < rows) ? table[row * D + j] : fromF<T>(0.0f);
  }
}

void runEmbedding(const KernelArgs &a, const Context &ctx, const char *op,
                  bool shard) {
  const TensorArg &table = a.in[0], &ids = a.in[1], &y = a.out[0];
  const long long rows = table.shape[0], D = table.shape[1];
  const long long bound = shard ? attrInt(*a.attrs, "vocab") : rows;
  const int64_t *offset = shard ? a.in[2].as<int64_t>() : nullptr;
  checkIndices(ids, bound, op, "id", ctx);
  if (y.numel <= 0)
    return;
  dispatchFloat(table.dtype, [&](auto t) {
    using T = decltype(t);
    dispatchInt(ids.dtype, [&](auto i) {
      using I = decltype(i);
      embeddingKernel<T, I><<<gridFor(y.numel), kThreads, 0, ctx.stream>>>(
          table.as<T>(), ids.as<I>(), offset, rows, bound, D, y.numel,
          y.as<T>());
      checkLaunch(op);
    });
  });
}
void kEmbedding(const KernelArgs &a, const Context &ctx) {
  runEmbedding(a, ctx, "embedding", false);
}
void kEmbeddingShard(const KernelArgs &a, const Context &ctx) {
  runEmbedding(a, ctx, "embedding_shard", true);
}

// ---- embedding_grad, embedding_shard_grad
// ------------------------------------- Keys: the local row of each position
// (id - offset in [0, rows)), or `rows` for positions outside the table
// (another shard's, or a bad id); values: the positions. A stable radix sort on
// the key's bits groups each row's positions in position order.
using Key = uint32_t;
using Pos = int32_t;

int keyBits(long long rows) { // rows < 2^bits, so the sentinel `rows` fits
  int b = 1;
  while (b < 32 && (1LL << b) <= rows)
    ++b;
  return b;
}

struct SortPlan {
  long long n = 0; ///< positions
  int bits = 1;
  /// Byte offsets in the workspace; `starts`: rows + 1 int32, where each
  /// row's positions begin in the sorted order.
  size_t keysIn = 0, keysOut = 0, valsIn = 0, valsOut = 0, temp = 0,
         tempBytes = 0, starts = 0, total = 0;
};
/// The workspace layout for sorting n positions with keys in [0, rows].
SortPlan sortPlan(long long n, long long rows) {
  if (n > (long long)INT32_MAX)
    throw Error("embedding_grad: more than 2^31 - 1 ids");
  if (rows >= (long long)UINT32_MAX)
    throw Error("embedding_grad: a table of 2^32 rows or more");
  SortPlan s;
  s.n = n;
  s.bits = keyBits(rows);
  if (n <= 0)
    return s;
  check(cub::DeviceRadixSort::SortPairs(
            nullptr, s.tempBytes, (const Key *)nullptr, (Key *)nullptr,
            (const Pos *)nullptr, (Pos *)nullptr, int(n), 0, s.bits),
        "embedding_grad: sizing the sort");
  const size_t keys = alignUp(size_t(n) * sizeof(Key)),
               vals = alignUp(size_t(n) * sizeof(Pos));
  s.keysIn = 0;
  s.keysOut = s.keysIn + keys;
  s.valsIn = s.keysOut + keys;
  s.valsOut = s.valsIn + vals;
  s.temp = s.valsOut + vals;
  s.starts = s.temp + alignUp(std::max<size_t>(s.tempBytes, 1));
  s.total = s.starts + alignUp(size_t(rows + 1) * sizeof(int32_t));
  return s;
}

template <class I>
__global__ void rowKeysKernel(const I *ids, long long n, const int64_t *offset,
                              long long bound, long long rows, Key *keys,
                              Pos *pos) {
  const long long off = offset ? (long long)*offset : 0;
  DTC_GRID_STRIDE(p, n) {
    const long long id = (long long)ids[p];
    long long k = rows;
    if (id >= 0 && id < bound) {
      const long long row = id - off;
      if (row >= 0 && row < rows)
        k = row;
    }
    keys[p] = Key(k);
    pos[p] = Pos(p);
  }
}

/// First index in sorted[0, n) whose key is >= key.
__device__ __forceinline__ long long lowerBound(const Key *sorted, long long n,
                                                Key key) {
  long long lo = 0, hi = n;
  while (lo < hi) {
    const long long mid = lo + (hi - lo) / 2;
    if (sorted[mid] < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/// starts[v] = where row v's positions begin in the sorted keys (v <=
/// rows; starts[rows] = the end of the table's positions): one search per
/// row here, not one per thread of the row's block.
__global__ void rowStartsKernel(const Key *keys, long long n, long long rows,
                                int32_t *starts) {
  DTC_GRID_STRIDE(v, rows + 1) {
    starts[v] = int32_t(lowerBound(keys, n, Key(v)));
  }
}

/// One block per table row v: dtable[v, j] = sum over the row's positions
/// p (in order) of dy[p, j], in f32 from 0 (starts null: no positions).
/// With `vec` (D a multiple of a 16-byte pack, dy and dtable aligned) each
/// thread sums and stores whole packs; the same sums in the same order.
template <class T>
__global__ void rowSumsKernel(const int32_t *starts, const Pos *pos,
                              const T *dy, long long D, long long rows, T *dt,
                              bool vec) {
  constexpr int kPack = int(16 / sizeof(T));
  for (long long v = blockIdx.x; v < rows; v += gridDim.x) {
    const long long s = starts ? starts[v] : 0, e = starts ? starts[v + 1] : 0;
    if (vec) {
      for (long long c = threadIdx.x; c < D / kPack; c += blockDim.x) {
        float acc[kPack] = {};
        for (long long k = s; k < e; ++k) {
          const uint4 raw = *reinterpret_cast<const uint4 *>(
              dy + (long long)pos[k] * D + c * kPack);
          const T *x = reinterpret_cast<const T *>(&raw);
#pragma unroll
          for (int i = 0; i < kPack; ++i)
            acc[i] += toF(x[i]);
        }
        alignas(16) T packed[kPack];
#pragma unroll
        for (int i = 0; i < kPack; ++i)
          packed[i] = fromF<T>(acc[i]);
        *reinterpret_cast<uint4 *>(dt + v * D + c * kPack) =
            *reinterpret_cast<const uint4 *>(packed);
      }
      continue;
    }
    for (long long j = threadIdx.x; j < D; j += blockDim.x) {
      float acc = 0.0f;
      for (long long k = s; k < e; ++k)
        acc += toF(dy[(long long)pos[k] * D + j]);
      dt[v * D + j] = fromF<T>(acc);
    }
  }
}

void runEmbeddingGrad(const KernelArgs &a, const Context &ctx, const char *op,
                      bool shard) {
  const TensorArg &ids = a.in[0], &dy = a.in[1], &dt = a.out[0];
  const long long rows = dt.shape[0], D = dt.shape[1];
  const long long bound = shard ? attrInt(*a.attrs, "vocab") : rows;
  const int64_t *offset = shard ? a.in[2].as<int64_t>() : nullptr;
  checkIndices(ids, bound, op, "id", ctx);
  if (dt.numel <= 0)
    return;
  const long long n =
      D > 0 ? ids.numel : 0; // with D == 0 there is nothing to write
  const SortPlan plan = sortPlan(n, rows);
  Key *sortedKeys = nullptr;
  Pos *sortedPos = nullptr;
  int32_t *starts = nullptr;
  if (n > 0) {
    if (!ctx.workspace || ctx.workspaceBytes < plan.total)
      throw Error(std::string(op) +
                  ": the workspace is smaller than the kernel asked for");
    char *ws = static_cast<char *>(ctx.workspace);
    Key *keysIn = reinterpret_cast<Key *>(ws + plan.keysIn);
    sortedKeys = reinterpret_cast<Key *>(ws + plan.keysOut);
    Pos *posIn = reinterpret_cast<Pos *>(ws + plan.valsIn);
    sortedPos = reinterpret_cast<Pos *>(ws + plan.valsOut);
    dispatchInt(ids.dtype, [&](auto i) {
      using I = decltype(i);
      rowKeysKernel<I><<<gridFor(n), kThreads, 0, ctx.stream>>>(
          ids.as<I>(), n, offset, bound, rows, keysIn, posIn);
      checkLaunch(op);
    });
    size_t tempBytes = plan.tempBytes;
    check(cub::DeviceRadixSort::SortPairs(ws + plan.temp, tempBytes, keysIn,
                                          sortedKeys, posIn, sortedPos, int(n),
                                          0, plan.bits, ctx.stream),
          op);
    starts = reinterpret_cast<int32_t *>(ws + plan.starts);
    rowStartsKernel<<<gridFor(rows + 1), kThreads, 0, ctx.stream>>>(
        sortedKeys, n, rows, starts);
    checkLaunch(op);
  }
  dispatchFloat(dt.dtype, [&](auto t) {
    using T = decltype(t);
    constexpr long long kPack = 16 / sizeof(T);
    const bool vec =
        D % kPack == 0 && alignedTo(dy.data, 16) && alignedTo(dt.data, 16);
    rowSumsKernel<T>
        <<<gridRows(rows), rowThreads(vec ? D / kPack : D), 0, ctx.stream>>>(
            starts, sortedPos, dy.as<T>(), D, rows, dt.as<T>(), vec);
    checkLaunch(op);
  });
}
void kEmbeddingGrad(const KernelArgs &a, const Context &ctx) {
  runEmbeddingGrad(a, ctx, "embedding_grad", false);
}
void kEmbeddingShardGrad(const KernelArgs &a, const Context &ctx) {
  runEmbeddingGrad(a, ctx, "embedding_shard_grad", true);
}
size_t embeddingGradWorkspace(const KernelArgs &a) {
  const TensorArg &ids = a.in[0], &dt = a.out[0];
  if (dt.numel <= 0 || dt.shape[1] <= 0)
    return 0;
  return sortPlan(ids.numel, dt.shape[0]).total;
}

// ---- cross entropy
// -------------------------------------------------------------- One block per
// row (a grid-stride loop over the rows beyond the grid). The block reads its
// row from global memory ONCE, in 16-byte vectors (4 f32 or 8 bf16/f16, scalar
// head and tail around them: a row of an odd V starts anywhere), taking the max
// and, when the row fits (V * sizeof(T) up to the device's opt-in shared memory
// per block, 227 KiB on an H100: 50304 bf16 or f32 columns fit), copying it
// into shared memory; the sum of exponentials and the gradient then read the
// copy. cross_entropy thus reads the logits once, cross_entropy_grad reads them
// once and writes dlogits once. Wider rows read global memory again (L2, then
// HBM).
//
// Numerics, as the CPU's rowMaxF / logSumExpRow: mx is the exact f32 max
// (NaN never wins; any order gives the same value), the terms are
// expf(x - mx) with the same f32 subtraction. Each 16-byte vector's 4 or 8
// terms are added in f32 pairwise (a tree of depth 2 or 3), converted to
// double and added in double (per thread in vector order, then a fixed
// block tree; the fewer than 2 W scalar head/tail terms go to double
// singly).
// All terms are >= 0, so each f32 partial is within (1 + 2^-24)^3 - 1 <
// 1.8e-7 relative of its exact sum, and the double additions add ~1e-16 per
// term: the row's sum is within 2e-7 relative of the exact sum of the same
// terms (the CPU's double sum over 16 lanes: within ~1e-12). log(sum) moves
// by < 2e-7 absolute, the probabilities by < 2e-7 relative: far inside the
// tests' 1e-5 (CUDA's expf is within 2 ulp, the CPU's expF within 1.2e-7,
// as before). The f32 partials cut the f32->f64 conversions (16 per clock
// per SM on sm_80/sm_90, as many as the exponentials' MUFU.EX2) and double
// adds 4-8x. The thread mapping depends only on V: results are
// deterministic.
//
// Labels are checked first by checkIndices (a single-block scan of R labels
// reporting the FIRST bad one: a few microseconds at R = 8192); the rows
// kernel gives a bad label's row loss 0 / no one-hot term.

/// 16-byte vectors of T: W elements, converted with toF / fromF (the scalar
/// path's conversions). bf16/f16: element 2i in the low half of word i.
template <class T> __device__ __forceinline__ T fromBits(unsigned short b);
template <>
__device__ __forceinline__ __nv_bfloat16
fromBits<__nv_bfloat16>(unsigned short b) {
  return __ushort_as_bfloat16(b);
}
template <>
__device__ __forceinline__ __half fromBits<__half>(unsigned short b) {
  return __ushort_as_half(b);
}
__device__ __forceinline__ unsigned toBits(__nv_bfloat16 x) {
  return __bfloat16_as_ushort(x);
}
__device__ __forceinline__ unsigned toBits(__half x) {
  return __half_as_ushort(x);
}

template <class T> struct Vec16 { // bf16, f16
  static constexpr int W = 8;
  static __device__ __forceinline__ void unpack(const uint4 &u, float (&f)[W]) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = toF(fromBits<T>((unsigned short)(w[i] & 0xffffu)));
      f[2 * i + 1] = toF(fromBits<T>((unsigned short)(w[i] >> 16)));
    }
  }
  static __device__ __forceinline__ uint4 pack(const float (&f)[W]) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] =
          toBits(fromF<T>(f[2 * i])) | (toBits(fromF<T>(f[2 * i + 1])) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
};
template <> struct Vec16<float> {
  static constexpr int W = 4;
  static __device__ __forceinline__ void unpack(const uint4 &u, float (&f)[W]) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
  }
  static __device__ __forceinline__ uint4 pack(const float (&f)[W]) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]),
                      __float_as_uint(f[2]), __float_as_uint(f[3]));
  }
};

/// A row's elements: scalar [0, head), nvec 16-byte vectors from head,
/// scalar [tail, V). `off`: the row start's element offset from the 16-byte
/// boundary below it (the shared copy keeps it, so its vectors align too).
/// Without `vec`, every element is scalar.
struct RowSplit {
  int off = 0;
  long long head = 0, nvec = 0, tail = 0;
};
template <int W, class T>
__device__ __forceinline__ RowSplit splitRow(const T *row, long long V,
                                             bool vec) {
  RowSplit s;
  if (!vec) {
    s.head = s.tail = V;
    return s;
  }
  s.off = int((reinterpret_cast<uintptr_t>(row) & 15u) / sizeof(T));
  s.head = s.off ? W - s.off : 0;
  if (s.head > V)
    s.head = V;
  s.nvec = (V - s.head) / W;
  s.tail = s.head + s.nvec * W;
  return s;
}

/// f(j) for this thread's scalar elements of the row.
template <class F>
__device__ __forceinline__ void forScalars(const RowSplit &s, long long V,
                                           F &&f) {
  for (long long j = threadIdx.x; j < s.head; j += blockDim.x)
    f(j);
  for (long long j = s.tail + threadIdx.x; j < V; j += blockDim.x)
    f(j);
}

/// f(k, v[k]) for this thread's vectors k of v[0, n) (k = threadIdx.x mod
/// blockDim.x, increasing), kVecUnroll loads issued before they are used.
constexpr int kVecUnroll = 4;
template <class F>
__device__ __forceinline__ void forVectors(const uint4 *v, long long n, F &&f) {
  const long long step = (long long)kVecUnroll * blockDim.x;
  for (long long k0 = threadIdx.x; k0 < n; k0 += step) {
    uint4 u[kVecUnroll];
#pragma unroll
    for (int q = 0; q < kVecUnroll; ++q) {
      const long long k = k0 + (long long)q * blockDim.x;
      u[q] = k < n ? v[k] : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int q = 0; q < kVecUnroll; ++q) {
      const long long k = k0 + (long long)q * blockDim.x;
      if (k < n)
        f(k, u[q]);
    }
  }
}

/// Sum of W >= 0 terms as a balanced tree (depth log2 W).
template <int W> __device__ __forceinline__ float pairwiseSum(float (&e)[W]) {
#pragma unroll
  for (int h = W / 2; h >= 1; h /= 2) {
#pragma unroll
    for (int i = 0; i < h; ++i)
      e[i] = e[i] + e[i + h];
  }
  return e[0];
}

/// Max over the block ignoring NaN (as the CPU's rowMaxF: NaN never wins,
/// -inf when there is nothing else); every thread gets the result.
__device__ float blockMaxF(float v, float *shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5,
            warps = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  float total = lane < warps ? shared[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1)
    total = fmaxf(total, __shfl_xor_sync(0xffffffffu, total, o));
  return total;
}

constexpr int kRowMaxThreads = 1024;

/// One block per row r: mx, s = sum expf(x - mx) (see above); then
/// - cross_entropy (!Grad): rowLoss[r] = log s + mx - x[label] (0 for a bad
///   label);
/// - cross_entropy_grad (Grad): dz = (softmax - onehot(label)) dloss scale
///   as the CPU: p = expf(x - mx) * float(1 / s); p * float(coef) off the
///   label, float((double(p) - 1) coef) on it.
/// `cache`: the dynamic shared memory holds the row (V + W elements,
/// 16-byte aligned). `vec`: 16-byte accesses (z, and dz for the gradient,
/// element-aligned with the same offset from 16 bytes).
template <class T, class I, bool Grad>
__global__ void __launch_bounds__(kRowMaxThreads)
    crossEntropyRowKernel(const T *z, const I *labels, long long R, long long V,
                          int cache, int vec, double *rowLoss,
                          const void *dloss, int dlossCode, double scale, T *dz,
                          Ignored ig) {
  using VT = Vec16<T>;
  constexpr int W = VT::W;
  extern __shared__ uint4 rowCopy[];
  __shared__ float sm[32];
  __shared__ double sd[32];
  double coef = 0.0;
  if constexpr (Grad)
    coef = double(loadAny(dloss, dlossCode, 0)) * scale;
  const float coefF = float(coef);
  for (long long r = blockIdx.x; r < R;
       r += gridDim.x) { // uniform over the block
    const T *row = z + r * V;
    const RowSplit sp = splitRow<W>(row, V, vec != 0);
    T *copy = reinterpret_cast<T *>(rowCopy) +
              sp.off; // copy[j] = row[j] (when cache)

    // Pass 1, over global memory: the max, and the copy.
    float m = -INFINITY;
    forScalars(sp, V, [&](long long j) {
      const T x = row[j];
      if (cache)
        copy[j] = x;
      m = fmaxf(m, toF(x));
    });
    uint4 *copyVec =
        reinterpret_cast<uint4 *>(copy + sp.head); // 16-byte aligned
    forVectors(reinterpret_cast<const uint4 *>(row + sp.head), sp.nvec,
               [&](long long k, const uint4 &u) {
                 if (cache)
                   copyVec[k] = u;
                 float f[W];
                 VT::unpack(u, f);
#pragma unroll
                 for (int e = 0; e < W; ++e)
                   m = fmaxf(m, f[e]);
               });
    const float mx = blockMaxF(m, sm);
    __syncthreads(); // the copy is complete before anyone reads it

    // Pass 2, over the copy (or global memory): the sum of exponentials.
    const T *src = cache ? copy : row;
    const uint4 *srcVec = reinterpret_cast<const uint4 *>(src + sp.head);
    double s = 0.0;
    forScalars(sp, V,
               [&](long long j) { s += double(expf(toF(src[j]) - mx)); });
    forVectors(srcVec, sp.nvec, [&](long long, const uint4 &u) {
      float f[W];
      VT::unpack(u, f);
#pragma unroll
      for (int e = 0; e < W; ++e)
        f[e] = expf(f[e] - mx);
      s += double(pairwiseSum(f));
    });
    s = blockSum(s, sd);

    // An ignored label: no target, no loss, a zero gradient row.
    const bool skip = isIgnored(ig, (long long)labels[r]);
    const long long l = skip ? -1 : (long long)labels[r];
    if constexpr (!Grad) {
      if (threadIdx.x == 0)
        rowLoss[r] =
            (l >= 0 && l < V) ? log(s) + double(mx) - double(toF(src[l])) : 0.0;
    } else {
      // Pass 3: the gradient, from the copy (or global memory) to dz.
      const float inv = float(1.0 / s);
      const double rowCoef = skip ? 0.0 : coef;
      const float rowCoefF = skip ? 0.0f : coefF;
      auto grad = [&](long long j, float x) {
        const float p = expf(x - mx) * inv;
        return j == l ? float((double(p) - 1.0) * rowCoef) : p * rowCoefF;
      };
      T *drow = dz + r * V;
      forScalars(sp, V, [&](long long j) {
        drow[j] = fromF<T>(grad(j, toF(src[j])));
      });
      uint4 *dVec =
          reinterpret_cast<uint4 *>(drow + sp.head); // aligned as row + head
      forVectors(srcVec, sp.nvec, [&](long long k, const uint4 &u) {
        float f[W];
        VT::unpack(u, f);
        const long long j0 = sp.head + k * W;
#pragma unroll
        for (int e = 0; e < W; ++e)
          f[e] = grad(j0 + e, f[e]);
        dVec[k] = VT::pack(f);
      });
    }
    __syncthreads(); // the copy, sm and sd are read before the next row writes
                     // them
  }
}

/// How the rows kernel runs for rows of V elements of `elemBytes`.
struct RowPlan {
  int threads = 32;
  bool cache = false, vec = false;
  size_t smem = 0; ///< dynamic shared memory (the row's copy)
};
constexpr long long kStaticSmemReserve =
    1024; // the kernel's own sm, sd: 384 bytes

/// `vec`: 16-byte accesses are possible (see crossEntropyRowKernel). Raises
/// the kernel's dynamic shared memory limit (to the same per-device value
/// every time) when the copy needs more than 48 KiB.
template <class K>
RowPlan rowPlan(K *kernel, long long V, int elemBytes, bool vec,
                const char *op) {
  RowPlan p;
  p.vec = vec;
  const long long W = 16 / elemBytes;
  int dev = 0, optin = 0, perSM = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                               dev),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(
            &perSM, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev),
        "cudaDeviceGetAttribute");
  const long long copyBytes = ((V + W) * elemBytes + 15) / 16 * 16;
  const long long limit = (long long)optin - kStaticSmemReserve;
  p.cache = copyBytes <= std::max(limit, 48LL * 1024 - kStaticSmemReserve);
  if (p.cache) {
    p.smem = size_t(copyBytes);
    if (copyBytes > 48LL * 1024 - kStaticSmemReserve)
      check(cudaFuncSetAttribute(kernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(limit)),
            op);
  }
  // About 4 vectors per thread, 32 to 512 threads; 1024 when a row's copy
  // leaves room for one block per SM (1 KiB per block is the system's).
  long long want = (V + 4 * W - 1) / (4 * W);
  want = (want + 31) / 32 * 32;
  const bool oneBlockPerSM =
      p.cache && 2 * (copyBytes + kStaticSmemReserve + 1024) > perSM;
  p.threads =
      int(std::max(32LL, std::min(want, oneBlockPerSM ? 1024LL : 512LL)));
  return p;
}

/// 16-byte accesses: x element-aligned, y (when given) at the same offset
/// from 16 bytes (rows of both then start equally misaligned).
bool vecOk(const void *x, const void *y, size_t elemBytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(x),
                  b = reinterpret_cast<uintptr_t>(y ? y : x);
  return a % elemBytes == 0 && (a - b) % 16 == 0;
}

/// One block: out = the sum of rowLoss, over R (the mean), over the kept
/// labels (with ignore_index; 0 when none is kept) or alone (`sum`). Thread
/// t adds rows t, t + blockDim.x, ... in double, then a fixed tree
/// (deterministic; the CPU's order of 64-row chunks differs only in double
/// rounding).
template <class I>
__global__ void crossEntropyReduceKernel(const double *rowLoss, const I *labels,
                                         long long R, Ignored ig, int sum,
                                         void *out, int outCode) {
  __shared__ double sd[32];
  double acc = 0.0, kept = 0.0;
#pragma unroll 4
  for (long long r = threadIdx.x; r < R; r += blockDim.x) {
    acc += rowLoss[r];
    kept += isIgnored(ig, (long long)labels[r]) ? 0.0 : 1.0;
  }
  acc = blockSum(acc, sd);
  __syncthreads(); // sd is reused
  kept = blockSum(kept, sd);
  if (threadIdx.x == 0) {
    const double loss = sum         ? acc
                        : !ig.set   ? acc / double(R)
                        : kept == 0 ? 0.0
                                    : acc / kept;
    storeAny(out, outCode, 0, float(loss));
  }
}

void kCrossEntropy(const KernelArgs &a, const Context &ctx) {
  const TensorArg &logits = a.in[0], &labels = a.in[1];
  const long long V = logits.shape.back(), R = labels.numel;
  const Ignored ig = ignoredOf(*a.attrs);
  const auto reduction = a.attrs->find("reduction");
  const int sum = reduction != a.attrs->end() && *reduction == "sum";
  checkIndices(labels, V, "cross_entropy", "label", ctx, ig);
  double *rowLoss = nullptr;
  if (R > 0) {
    if (!ctx.workspace || ctx.workspaceBytes < size_t(R) * sizeof(double))
      throw Error(
          "cross_entropy: the workspace is smaller than the kernel asked for");
    rowLoss = static_cast<double *>(ctx.workspace);
    dispatchFloat(logits.dtype, [&](auto t) {
      using T = decltype(t);
      dispatchInt(labels.dtype, [&](auto i) {
        using I = decltype(i);
        auto *kernel = crossEntropyRowKernel<T, I, false>;
        const RowPlan p =
            rowPlan(kernel, V, int(sizeof(T)),
                    vecOk(logits.data, nullptr, sizeof(T)), "cross_entropy");
        kernel<<<gridRows(R), p.threads, p.smem, ctx.stream>>>(
            logits.as<T>(), labels.as<I>(), R, V, int(p.cache), int(p.vec),
            rowLoss, nullptr, kCodeF32, 0.0, nullptr, ig);
        checkLaunch("cross_entropy");
      });
    });
  }
  // R == 0: 0 / 0, NaN, as the CPU (a sum: 0).
  dispatchInt(labels.dtype, [&](auto i) {
    using I = decltype(i);
    crossEntropyReduceKernel<I>
        <<<1, 1024, 0, ctx.stream>>>(rowLoss, labels.as<I>(), R, ig, sum,
                                     a.out[0].data, floatCode(a.out[0].dtype));
  });
  checkLaunch("cross_entropy");
}
size_t crossEntropyWorkspace(const KernelArgs &a) {
  return size_t(std::max<int64_t>(a.in[1].numel, 1)) * sizeof(double);
}

void kCrossEntropyGrad(const KernelArgs &a, const Context &ctx) {
  const TensorArg &logits = a.in[0], &labels = a.in[1], &dloss = a.in[2];
  const long long V = logits.shape.back(), R = labels.numel;
  const Ignored ig = ignoredOf(*a.attrs);
  checkIndices(labels, V, "cross_entropy_grad", "label", ctx, ig);
  if (R <= 0 || V <= 0)
    return;
  const double scale = attrNum(*a.attrs, "scale");
  dispatchFloat(logits.dtype, [&](auto t) {
    using T = decltype(t);
    dispatchInt(labels.dtype, [&](auto i) {
      using I = decltype(i);
      auto *kernel = crossEntropyRowKernel<T, I, true>;
      const RowPlan p = rowPlan(kernel, V, int(sizeof(T)),
                                vecOk(logits.data, a.out[0].data, sizeof(T)),
                                "cross_entropy_grad");
      kernel<<<gridRows(R), p.threads, p.smem, ctx.stream>>>(
          logits.as<T>(), labels.as<I>(), R, V, int(p.cache), int(p.vec),
          nullptr, dloss.data, floatCode(dloss.dtype), scale, a.out[0].as<T>(),
          ig);
      checkLaunch("cross_entropy_grad");
    });
  });
}

// ---- vocabulary-parallel cross entropy
// --------------------------------------------
/// Columns of the shard inside the vocabulary (the rest is padding).
__device__ __forceinline__ long long
validColumns(long long cols, long long vocab, long long off) {
  const long long v = vocab - off;
  return v < 0 ? 0 : (v < cols ? v : cols);
}

/// One block per row: sum_exp = sum over the valid columns of exp(double(x)
/// - max) in double; target = the label's logit where it is in the shard.
template <class T, class I>
__global__ void shardStatsKernel(const T *z, const I *labels, long long R,
                                 long long cols, const void *mx, int mxCode,
                                 const int64_t *offset, long long vocab,
                                 void *sumExp, int sumCode, void *target,
                                 int targetCode, Ignored ig) {
  __shared__ double sd[32];
  const long long off = (long long)*offset;
  const long long valid = validColumns(cols, vocab, off);
  for (long long r = blockIdx.x; r < R;
       r += gridDim.x) { // uniform over the block
    const T *row = z + r * cols;
    const double m = double(loadAny(mx, mxCode, r));
    double s = 0.0;
    for (long long j = threadIdx.x; j < valid; j += blockDim.x)
      s += exp(double(toF(row[j])) - m);
    s = blockSum(s, sd);
    if (threadIdx.x == 0) {
      const long long l = (long long)labels[r];
      storeAny(sumExp, sumCode, r, float(s));
      float t = 0.0f;
      if (l >= 0 && l < vocab && !isIgnored(ig, l)) {
        const long long col = l - off;
        if (col >= 0 && col < valid)
          t = toF(row[col]);
      }
      storeAny(target, targetCode, r, t);
    }
  }
}

void kCrossEntropyShardStats(const KernelArgs &a, const Context &ctx) {
  const TensorArg &logits = a.in[0], &labels = a.in[1], &mx = a.in[2],
                  &offset = a.in[3];
  const long long cols = logits.shape.back(), R = labels.numel;
  const long long vocab = attrInt(*a.attrs, "vocab");
  const Ignored ig = ignoredOf(*a.attrs);
  checkIndices(labels, vocab, "cross_entropy_shard_stats", "label", ctx, ig);
  if (R <= 0)
    return;
  dispatchFloat(logits.dtype, [&](auto t) {
    using T = decltype(t);
    dispatchInt(labels.dtype, [&](auto i) {
      using I = decltype(i);
      shardStatsKernel<T, I><<<gridRows(R), rowThreads(cols), 0, ctx.stream>>>(
          logits.as<T>(), labels.as<I>(), R, cols, mx.data, floatCode(mx.dtype),
          offset.as<int64_t>(), vocab, a.out[0].data, floatCode(a.out[0].dtype),
          a.out[1].data, floatCode(a.out[1].dtype), ig);
      checkLaunch("cross_entropy_shard_stats");
    });
  });
}

/// Elementwise: dz = (exp(double(x) - max) / sum_exp - onehot(label -
/// offset)) * dloss * scale on the valid columns, 0 on the padding.
template <class T, class I>
__global__ void
shardGradKernel(const T *z, const I *labels, long long n, long long cols,
                const void *mx, int mxCode, const void *sumExp, int sumCode,
                const void *dloss, int dlossCode, double scale,
                const int64_t *offset, long long vocab, T *dz, Ignored ig) {
  const long long off = (long long)*offset;
  const long long valid = validColumns(cols, vocab, off);
  const double coef = double(loadAny(dloss, dlossCode, 0)) * scale;
  DTC_GRID_STRIDE(i, n) {
    const long long r = i / cols, j = i - r * cols;
    if (j >= valid || isIgnored(ig, (long long)labels[r])) {
      dz[i] = fromF<T>(0.0f);
      continue;
    }
    const double inv = 1.0 / double(loadAny(sumExp, sumCode, r));
    double p = exp(double(toF(z[i])) - double(loadAny(mx, mxCode, r))) * inv;
    const long long l = (long long)labels[r];
    if (l >= 0 && l < vocab && j == l - off)
      p -= 1.0;
    dz[i] = fromF<T>(float(p * coef));
  }
}

void kCrossEntropyShardGrad(const KernelArgs &a, const Context &ctx) {
  const TensorArg &logits = a.in[0], &labels = a.in[1], &mx = a.in[2],
                  &sumExp = a.in[3], &dloss = a.in[4], &offset = a.in[5];
  const long long cols = logits.shape.back(), n = logits.numel;
  const long long vocab = attrInt(*a.attrs, "vocab");
  const Ignored ig = ignoredOf(*a.attrs);
  checkIndices(labels, vocab, "cross_entropy_shard_grad", "label", ctx, ig);
  if (n <= 0)
    return;
  const double scale = attrNum(*a.attrs, "scale");
  dispatchFloat(logits.dtype, [&](auto t) {
    using T = decltype(t);
    dispatchInt(labels.dtype, [&](auto i) {
      using I = decltype(i);
      shardGradKernel<T, I><<<gridFor(n), kThreads, 0, ctx.stream>>>(
          logits.as<T>(), labels.as<I>(), n, cols, mx.data, floatCode(mx.dtype),
          sumExp.data, floatCode(sumExp.dtype), dloss.data,
          floatCode(dloss.dtype), scale, offset.as<int64_t>(), vocab,
          a.out[0].as<T>(), ig);
      checkLaunch("cross_entropy_shard_grad");
    });
  });
}

/// mask[i] = 0 where labels[i] == ignore_index, 1 elsewhere (f32).
template <class I>
__global__ void labelMaskKernel(const I *labels, long long n, long long ignore,
                                float *mask) {
  DTC_GRID_STRIDE(i, n) {
    mask[i] = (long long)labels[i] == ignore ? 0.0f : 1.0f;
  }
}

void kLabelMask(const KernelArgs &a, const Context &ctx) {
  const TensorArg &labels = a.in[0];
  const long long n = labels.numel;
  if (n <= 0)
    return;
  dispatchInt(labels.dtype, [&](auto i) {
    using I = decltype(i);
    labelMaskKernel<I><<<gridFor(n), kThreads, 0, ctx.stream>>>(
        labels.as<I>(), n, attrInt(*a.attrs, "ignore_index"),
        a.out[0].as<float>());
    checkLaunch("label_mask");
  });
}

} // namespace

const std::vector<Entry> &lossKernels() {
  static const std::vector<Entry> entries = {
      {"embedding", kEmbedding},
      {"embedding_grad", kEmbeddingGrad, nullptr, embeddingGradWorkspace},
      {"cross_entropy", kCrossEntropy, nullptr, crossEntropyWorkspace},
      {"cross_entropy_grad", kCrossEntropyGrad},
      {"label_mask", kLabelMask},
      {"embedding_shard", kEmbeddingShard},
      {"embedding_shard_grad", kEmbeddingShardGrad, nullptr,
       embeddingGradWorkspace},
      {"cross_entropy_shard_stats", kCrossEntropyShardStats},
      {"cross_entropy_shard_grad", kCrossEntropyShardGrad},
  };
  return entries;
}

} // namespace dtc::kernels::cuda
