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
// - cross entropy: per row, the f32 max, the sum of f32 exponentials in
//   double (as logSumExpRow), the row's loss in double into the workspace,
//   then one block adds the rows (64-row chunks, then a fixed tree).
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
  case DType::F32: return kCodeF32;
  case DType::BF16: return kCodeBF16;
  case DType::F16: return kCodeF16;
  default: throw Error("cuda kernel: expected a float dtype, got " + std::string(rt::dtypeName(t)));
  }
}
__device__ __forceinline__ float loadAny(const void *p, int code, long long i) {
  if (code == kCodeBF16) return toF(static_cast<const __nv_bfloat16 *>(p)[i]);
  if (code == kCodeF16) return toF(static_cast<const __half *>(p)[i]);
  return static_cast<const float *>(p)[i];
}
__device__ __forceinline__ void storeAny(void *p, int code, long long i, float v) {
  if (code == kCodeBF16) static_cast<__nv_bfloat16 *>(p)[i] = fromF<__nv_bfloat16>(v);
  else if (code == kCodeF16) static_cast<__half *>(p)[i] = fromF<__half>(v);
  else static_cast<float *>(p)[i] = v;
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

/// One block: scans ids in order, reports the first outside [0, c.bound).
template <class I>
__global__ void firstBadKernel(const I *ids, long long n, IndexCheck c, DeviceError *err) {
  __shared__ long long warpMin[32];
  const long long step = (long long)blockDim.x * kScanUnroll;
  for (long long base = 0; base < n; base += step) { // uniform over the block
    long long mine = LLONG_MAX;
#pragma unroll
    for (int k = 0; k < kScanUnroll; ++k) {
      const long long i = base + (long long)k * blockDim.x + threadIdx.x;
      if (i < n) {
        const long long v = (long long)ids[i];
        if ((v < 0 || v >= c.bound) && i < mine) mine = i;
      }
    }
    if (__syncthreads_or(mine != LLONG_MAX)) { // the same for every thread
      long long m = mine;
      for (int o = 16; o > 0; o >>= 1) {
        const long long other = __shfl_xor_sync(0xffffffffu, m, o);
        m = other < m ? other : m;
      }
      if ((threadIdx.x & 31) == 0) warpMin[threadIdx.x >> 5] = m;
      __syncthreads();
      if (threadIdx.x == 0) {
        long long best = LLONG_MAX;
        for (int w = 0; w < int(blockDim.x >> 5); ++w) best = warpMin[w] < best ? warpMin[w] : best;
        reportBadIndex(err, c, (long long)ids[best], best);
      }
      return; // every thread of the block
    }
  }
}

/// Enqueues the check of `ids` against [0, bound) (nothing when empty).
void checkIndices(const TensorArg &ids, long long bound, const char *op, const char *what,
                  const Context &ctx) {
  if (ids.numel <= 0) return;
  const IndexCheck c = makeIndexCheck(op, what, ids.shape, bound);
  const int threads = ids.numel <= 256 * kScanUnroll ? 256 : 1024;
  dispatchInt(ids.dtype, [&](auto i) {
    using I = decltype(i);
    firstBadKernel<I><<<1, threads, 0, ctx.stream>>>(ids.as<I>(), ids.numel, c, ctx.error);
    checkLaunch(op);
  });
}

// ---- embedding, embedding_shard ---------------------------------------------
/// out[p, j] = table[ids[p] - offset, j] where that row is in [0, rows), 0
/// elsewhere; ids outside [0, bound) are skipped (reported by the check).
template <class T, class I>
__global__ void embeddingKernel(const T *table, const I *ids, const int64_t *offset, long long rows,
                                long long bound, long long D, long long n, T *out) {
  const long long off = offset ? (long long)*offset : 0;
  DTC_GRID_STRIDE(i, n) {
    const long long p = i / D, j = i - p * D;
    const long long id = (long long)ids[p];
    if (id < 0 || id >= bound) continue;
    const long long row = id - off;
    out[i] = (row >= 0 && row < rows) ? table[row * D + j] : fromF<T>(0.0f);
  }
}

void runEmbedding(const KernelArgs &a, const Context &ctx, const char *op, bool shard) {
  const TensorArg &table = a.in[0], &ids = a.in[1], &y = a.out[0];
  const long long rows = table.shape[0], D = table.shape[1];
  const long long bound = shard ? attrInt(*a.attrs, "vocab") : rows;
  const int64_t *offset = shard ? a.in[2].as<int64_t>() : nullptr;
  checkIndices(ids, bound, op, "id", ctx);
  if (y.numel <= 0) return;
  dispatchFloat(table.dtype, [&](auto t) {
    using T = decltype(t);
    dispatchInt(ids.dtype, [&](auto i) {
      using I = decltype(i);
      embeddingKernel<T, I><<<gridFor(y.numel), kThreads, 0, ctx.stream>>>(
          table.as<T>(), ids.as<I>(), offset, rows, bound, D, y.numel, y.as<T>());
      checkLaunch(op);
    });
  });
}
void kEmbedding(const KernelArgs &a, const Context &ctx) { runEmbedding(a, ctx, "embedding", false); }
void kEmbeddingShard(const KernelArgs &a, const Context &ctx) {
  runEmbedding(a, ctx, "embedding_shard", true);
}

// ---- embedding_grad, embedding_shard_grad -------------------------------------
// Keys: the local row of each position (id - offset in [0, rows)), or `rows`
// for positions outside the table (another shard's, or a bad id); values:
// the positions. A stable radix sort on the key's bits groups each row's
// positions in position order.
using Key = uint32_t;
using Pos = int32_t;

int keyBits(long long rows) { // rows < 2^bits, so the sentinel `rows` fits
  int b = 1;
  while (b < 32 && (1LL << b) <= rows) ++b;
  return b;
}

struct SortPlan {
  long long n = 0; ///< positions
  int bits = 1;
  size_t keysIn = 0, keysOut = 0, valsIn = 0, valsOut = 0, temp = 0, tempBytes = 0, total = 0;
};
/// The workspace layout for sorting n positions with keys in [0, rows].
SortPlan sortPlan(long long n, long long rows) {
  if (n > (long long)INT32_MAX) throw Error("embedding_grad: more than 2^31 - 1 ids");
  if (rows >= (long long)UINT32_MAX) throw Error("embedding_grad: a table of 2^32 rows or more");
  SortPlan s;
  s.n = n;
  s.bits = keyBits(rows);
  if (n <= 0) return s;
  check(cub::DeviceRadixSort::SortPairs(nullptr, s.tempBytes, (const Key *)nullptr, (Key *)nullptr,
                                        (const Pos *)nullptr, (Pos *)nullptr, int(n), 0, s.bits),
        "embedding_grad: sizing the sort");
  const size_t keys = alignUp(size_t(n) * sizeof(Key)), vals = alignUp(size_t(n) * sizeof(Pos));
  s.keysIn = 0;
  s.keysOut = s.keysIn + keys;
  s.valsIn = s.keysOut + keys;
  s.valsOut = s.valsIn + vals;
  s.temp = s.valsOut + vals;
  s.total = s.temp + alignUp(std::max<size_t>(s.tempBytes, 1));
  return s;
}

template <class I>
__global__ void rowKeysKernel(const I *ids, long long n, const int64_t *offset, long long bound,
                              long long rows, Key *keys, Pos *pos) {
  const long long off = offset ? (long long)*offset : 0;
  DTC_GRID_STRIDE(p, n) {
    const long long id = (long long)ids[p];
    long long k = rows;
    if (id >= 0 && id < bound) {
      const long long row = id - off;
      if (row >= 0 && row < rows) k = row;
    }
    keys[p] = Key(k);
    pos[p] = Pos(p);
  }
}

/// First index in sorted[0, n) whose key is >= key.
__device__ __forceinline__ long long lowerBound(const Key *sorted, long long n, Key key) {
  long long lo = 0, hi = n;
  while (lo < hi) {
    const long long mid = lo + (hi - lo) / 2;
    if (sorted[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/// One block per table row v: dtable[v, j] = sum over the row's positions
/// p (in order) of dy[p, j], in f32 from 0.
template <class T>
__global__ void rowSumsKernel(const Key *keys, const Pos *pos, long long n, const T *dy, long long D,
                              long long rows, T *dt) {
  for (long long v = blockIdx.x; v < rows; v += gridDim.x) {
    const long long s = lowerBound(keys, n, Key(v)), e = lowerBound(keys, n, Key(v + 1));
    for (long long j = threadIdx.x; j < D; j += blockDim.x) {
      float acc = 0.0f;
      for (long long k = s; k < e; ++k) acc += toF(dy[(long long)pos[k] * D + j]);
      dt[v * D + j] = fromF<T>(acc);
    }
  }
}

void runEmbeddingGrad(const KernelArgs &a, const Context &ctx, const char *op, bool shard) {
  const TensorArg &ids = a.in[0], &dy = a.in[1], &dt = a.out[0];
  const long long rows = dt.shape[0], D = dt.shape[1];
  const long long bound = shard ? attrInt(*a.attrs, "vocab") : rows;
  const int64_t *offset = shard ? a.in[2].as<int64_t>() : nullptr;
  checkIndices(ids, bound, op, "id", ctx);
  if (dt.numel <= 0) return;
  const long long n = D > 0 ? ids.numel : 0; // with D == 0 there is nothing to write
  const SortPlan plan = sortPlan(n, rows);
  Key *sortedKeys = nullptr;
  Pos *sortedPos = nullptr;
  if (n > 0) {
    if (!ctx.workspace || ctx.workspaceBytes < plan.total)
      throw Error(std::string(op) + ": the workspace is smaller than the kernel asked for");
    char *ws = static_cast<char *>(ctx.workspace);
    Key *keysIn = reinterpret_cast<Key *>(ws + plan.keysIn);
    sortedKeys = reinterpret_cast<Key *>(ws + plan.keysOut);
    Pos *posIn = reinterpret_cast<Pos *>(ws + plan.valsIn);
    sortedPos = reinterpret_cast<Pos *>(ws + plan.valsOut);
    dispatchInt(ids.dtype, [&](auto i) {
      using I = decltype(i);
      rowKeysKernel<I><<<gridFor(n), kThreads, 0, ctx.stream>>>(ids.as<I>(), n, offset, bound, rows,
                                                                keysIn, posIn);
      checkLaunch(op);
    });
    size_t tempBytes = plan.tempBytes;
    check(cub::DeviceRadixSort::SortPairs(ws + plan.temp, tempBytes, keysIn, sortedKeys, posIn,
                                          sortedPos, int(n), 0, plan.bits, ctx.stream),
          op);
  }
  dispatchFloat(dt.dtype, [&](auto t) {
    using T = decltype(t);
    rowSumsKernel<T><<<gridRows(rows), rowThreads(D), 0, ctx.stream>>>(
        sortedKeys, sortedPos, n, dy.as<T>(), D, rows, dt.as<T>());
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
  if (dt.numel <= 0 || dt.shape[1] <= 0) return 0;
  return sortPlan(ids.numel, dt.shape[0]).total;
}

// ---- cross entropy --------------------------------------------------------------
/// Max over the block ignoring NaN (as the CPU's rowMaxF: NaN never wins,
/// -inf when there is nothing else); every thread gets the result.
__device__ float blockMaxF(float v, float *shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = lane < warps ? shared[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) total = fmaxf(total, __shfl_xor_sync(0xffffffffu, total, o));
  return total;
}

/// Per row (one block): the max mx and the double sum of expf(x - mx).
template <class T>
__device__ void rowSoftmaxStats(const T *row, long long V, float *sm, double *sd, float &mx,
                                double &sum) {
  float m = -INFINITY;
  for (long long j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, toF(row[j]));
  mx = blockMaxF(m, sm);
  double s = 0.0;
  for (long long j = threadIdx.x; j < V; j += blockDim.x) s += double(expf(toF(row[j]) - mx));
  sum = blockSum(s, sd);
}

/// rowLoss[r] = log sum exp(x - mx) + mx - x[label] (0 for a bad label).
template <class T, class I>
__global__ void crossEntropyRowsKernel(const T *z, const I *labels, long long R, long long V,
                                       double *rowLoss) {
  __shared__ float sm[32];
  __shared__ double sd[32];
  for (long long r = blockIdx.x; r < R; r += gridDim.x) { // uniform over the block
    const T *row = z + r * V;
    float mx;
    double s;
    rowSoftmaxStats(row, V, sm, sd, mx, s);
    if (threadIdx.x == 0) {
      const long long l = (long long)labels[r];
      rowLoss[r] = (l >= 0 && l < V) ? log(s) + double(mx) - double(toF(row[l])) : 0.0;
    }
  }
}

constexpr long long kRowChunk = 64; // as the CPU kernel's chunks

/// One block: out = (sum of rowLoss) / R.
__global__ void crossEntropyMeanKernel(const double *rowLoss, long long R, void *out, int outCode) {
  __shared__ double sd[32];
  double acc = 0.0;
  const long long chunks = (R + kRowChunk - 1) / kRowChunk;
  for (long long c = threadIdx.x; c < chunks; c += blockDim.x) {
    double chunk = 0.0;
    const long long end = (c + 1) * kRowChunk < R ? (c + 1) * kRowChunk : R;
    for (long long r = c * kRowChunk; r < end; ++r) chunk += rowLoss[r];
    acc += chunk;
  }
  acc = blockSum(acc, sd);
  if (threadIdx.x == 0) storeAny(out, outCode, 0, float(acc / double(R)));
}

void kCrossEntropy(const KernelArgs &a, const Context &ctx) {
  const TensorArg &logits = a.in[0], &labels = a.in[1];
  const long long V = logits.shape.back(), R = labels.numel;
  checkIndices(labels, V, "cross_entropy", "label", ctx);
  double *rowLoss = nullptr;
  if (R > 0) {
    if (!ctx.workspace || ctx.workspaceBytes < size_t(R) * sizeof(double))
      throw Error("cross_entropy: the workspace is smaller than the kernel asked for");
    rowLoss = static_cast<double *>(ctx.workspace);
    dispatchFloat(logits.dtype, [&](auto t) {
      using T = decltype(t);
      dispatchInt(labels.dtype, [&](auto i) {
        using I = decltype(i);
        crossEntropyRowsKernel<T, I><<<gridRows(R), rowThreads(V), 0, ctx.stream>>>(
            logits.as<T>(), labels.as<I>(), R, V, rowLoss);
        checkLaunch("cross_entropy");
      });
    });
  }
  // R == 0: 0 / 0, NaN, as the CPU.
  crossEntropyMeanKernel<<<1, 256, 0, ctx.stream>>>(rowLoss, R, a.out[0].data,
                                                     floatCode(a.out[0].dtype));
  checkLaunch("cross_entropy");
}
size_t crossEntropyWorkspace(const KernelArgs &a) {
  return size_t(std::max<int64_t>(a.in[1].numel, 1)) * sizeof(double);
}

/// dz = (softmax(z) - onehot(label)) * dloss * scale, one block per row, as
/// the CPU: p = expf(x - mx) * float(1 / sum); p * float(coef) off the
/// label, float((double(p) - 1) coef) on it.
template <class T, class I>
__global__ void crossEntropyGradKernel(const T *z, const I *labels, long long R, long long V,
                                       const void *dloss, int dlossCode, double scale, T *dz) {
  __shared__ float sm[32];
  __shared__ double sd[32];
  const double coef = double(loadAny(dloss, dlossCode, 0)) * scale;
  const float coefF = float(coef);
  for (long long r = blockIdx.x; r < R; r += gridDim.x) { // uniform over the block
    const T *row = z + r * V;
    float mx;
    double s;
    rowSoftmaxStats(row, V, sm, sd, mx, s);
    const float inv = float(1.0 / s);
    const long long l = (long long)labels[r];
    T *drow = dz + r * V;
    for (long long j = threadIdx.x; j < V; j += blockDim.x) {
      const float p = expf(toF(row[j]) - mx) * inv;
      drow[j] = fromF<T>(j == l ? float((double(p) - 1.0) * coef) : p * coefF);
    }
  }
}

void kCrossEntropyGrad(const KernelArgs &a, const Context &ctx) {
  const TensorArg &logits = a.in[0], &labels = a.in[1], &dloss = a.in[2];
  const long long V = logits.shape.back(), R = labels.numel;
  checkIndices(labels, V, "cross_entropy_grad", "label", ctx);
  if (R <= 0 || V <= 0) return;
  const double scale = attrNum(*a.attrs, "scale");
  dispatchFloat(logits.dtype, [&](auto t) {
    using T = decltype(t);
    dispatchInt(labels.dtype, [&](auto i) {
      using I = decltype(i);
      crossEntropyGradKernel<T, I><<<gridRows(R), rowThreads(V), 0, ctx.stream>>>(
          logits.as<T>(), labels.as<I>(), R, V, dloss.data, floatCode(dloss.dtype), scale,
          a.out[0].as<T>());
      checkLaunch("cross_entropy_grad");
    });
  });
}

// ---- vocabulary-parallel cross entropy --------------------------------------------
/// Columns of the shard inside the vocabulary (the rest is padding).
__device__ __forceinline__ long long validColumns(long long cols, long long vocab, long long off) {
  const long long v = vocab - off;
  return v < 0 ? 0 : (v < cols ? v : cols);
}

/// One block per row: sum_exp = sum over the valid columns of exp(double(x)
/// - max) in double; target = the label's logit where it is in the shard.
template <class T, class I>
__global__ void shardStatsKernel(const T *z, const I *labels, long long R, long long cols,
                                 const void *mx, int mxCode, const int64_t *offset, long long vocab,
                                 void *sumExp, int sumCode, void *target, int targetCode) {
  __shared__ double sd[32];
  const long long off = (long long)*offset;
  const long long valid = validColumns(cols, vocab, off);
  for (long long r = blockIdx.x; r < R; r += gridDim.x) { // uniform over the block
    const T *row = z + r * cols;
    const double m = double(loadAny(mx, mxCode, r));
    double s = 0.0;
    for (long long j = threadIdx.x; j < valid; j += blockDim.x) s += exp(double(toF(row[j])) - m);
    s = blockSum(s, sd);
    if (threadIdx.x == 0) {
      const long long l = (long long)labels[r];
      storeAny(sumExp, sumCode, r, float(s));
      float t = 0.0f;
      if (l >= 0 && l < vocab) {
        const long long col = l - off;
        if (col >= 0 && col < valid) t = toF(row[col]);
      }
      storeAny(target, targetCode, r, t);
    }
  }
}

void kCrossEntropyShardStats(const KernelArgs &a, const Context &ctx) {
  const TensorArg &logits = a.in[0], &labels = a.in[1], &mx = a.in[2], &offset = a.in[3];
  const long long cols = logits.shape.back(), R = labels.numel;
  const long long vocab = attrInt(*a.attrs, "vocab");
  checkIndices(labels, vocab, "cross_entropy_shard_stats", "label", ctx);
  if (R <= 0) return;
  dispatchFloat(logits.dtype, [&](auto t) {
    using T = decltype(t);
    dispatchInt(labels.dtype, [&](auto i) {
      using I = decltype(i);
      shardStatsKernel<T, I><<<gridRows(R), rowThreads(cols), 0, ctx.stream>>>(
          logits.as<T>(), labels.as<I>(), R, cols, mx.data, floatCode(mx.dtype),
          offset.as<int64_t>(), vocab, a.out[0].data, floatCode(a.out[0].dtype), a.out[1].data,
          floatCode(a.out[1].dtype));
      checkLaunch("cross_entropy_shard_stats");
    });
  });
}

/// Elementwise: dz = (exp(double(x) - max) / sum_exp - onehot(label -
/// offset)) * dloss * scale on the valid columns, 0 on the padding.
template <class T, class I>
__global__ void shardGradKernel(const T *z, const I *labels, long long n, long long cols,
                                const void *mx, int mxCode, const void *sumExp, int sumCode,
                                const void *dloss, int dlossCode, double scale,
                                const int64_t *offset, long long vocab, T *dz) {
  const long long off = (long long)*offset;
  const long long valid = validColumns(cols, vocab, off);
  const double coef = double(loadAny(dloss, dlossCode, 0)) * scale;
  DTC_GRID_STRIDE(i, n) {
    const long long r = i / cols, j = i - r * cols;
    if (j >= valid) {
      dz[i] = fromF<T>(0.0f);
      continue;
    }
    const double inv = 1.0 / double(loadAny(sumExp, sumCode, r));
    double p = exp(double(toF(z[i])) - double(loadAny(mx, mxCode, r))) * inv;
    const long long l = (long long)labels[r];
    if (l >= 0 && l < vocab && j == l - off) p -= 1.0;
    dz[i] = fromF<T>(float(p * coef));
  }
}

void kCrossEntropyShardGrad(const KernelArgs &a, const Context &ctx) {
  const TensorArg &logits = a.in[0], &labels = a.in[1], &mx = a.in[2], &sumExp = a.in[3],
                  &dloss = a.in[4], &offset = a.in[5];
  const long long cols = logits.shape.back(), n = logits.numel;
  const long long vocab = attrInt(*a.attrs, "vocab");
  checkIndices(labels, vocab, "cross_entropy_shard_grad", "label", ctx);
  if (n <= 0) return;
  const double scale = attrNum(*a.attrs, "scale");
  dispatchFloat(logits.dtype, [&](auto t) {
    using T = decltype(t);
    dispatchInt(labels.dtype, [&](auto i) {
      using I = decltype(i);
      shardGradKernel<T, I><<<gridFor(n), kThreads, 0, ctx.stream>>>(
          logits.as<T>(), labels.as<I>(), n, cols, mx.data, floatCode(mx.dtype), sumExp.data,
          floatCode(sumExp.dtype), dloss.data, floatCode(dloss.dtype), scale,
          offset.as<int64_t>(), vocab, a.out[0].as<T>());
      checkLaunch("cross_entropy_shard_grad");
    });
  });
}

} // namespace

const std::vector<Entry> &lossKernels() {
  static const std::vector<Entry> entries = {
      {"embedding", kEmbedding},
      {"embedding_grad", kEmbeddingGrad, nullptr, embeddingGradWorkspace},
      {"cross_entropy", kCrossEntropy, nullptr, crossEntropyWorkspace},
      {"cross_entropy_grad", kCrossEntropyGrad},
      {"embedding_shard", kEmbeddingShard},
      {"embedding_shard_grad", kEmbeddingShardGrad, nullptr, embeddingGradWorkspace},
      {"cross_entropy_shard_stats", kCrossEntropyShardStats},
      {"cross_entropy_shard_grad", kCrossEntropyShardGrad},
  };
  return entries;
}

} // namespace dtc::kernels::cuda
