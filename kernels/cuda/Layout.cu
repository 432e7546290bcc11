//===- Layout.cu - transpose, reductions, pad, fill_padding, softmax
//---------===//
//
// CUDA versions of the CPU kernels in kernels/cpu/Linalg.cpp (transpose),
// Loss.cpp (reduce_sum, reduce_mean), Shard.cpp (pad, fill_padding,
// reduce_max) and Norm.cpp (softmax, softmax_grad), with the same numerics:
//
// - transpose / pad move element bits (any dtype, by element size);
//   transposes that keep the innermost dim move whole rows in vectors of
//   up to 16 bytes.
// - reduce_sum / reduce_mean accumulate floats in double and round once to
//   f32 (then to the storage dtype, as the CPU's executor does); integers
//   sum with two's complement wrap-around. reduce_max starts at -inf and
//   propagates NaN. Each output's reduction is split into a fixed number
//   of chunks (a function of the shapes only), chunk results are combined
//   in order: deterministic, no atomics.
// - softmax: max (NaN ignored as std::max does), f32 exponentials summed in
//   double, y = e * float(1 / sum); softmax_grad: dot in double,
//   dx = y (dy - float(dot)) in f32.
//
//===----------------------------------------------------------------------===//
#include "Common.cuh"

#include <string>
#include <type_traits>
#include <vector>

namespace dtc::kernels::cuda {
namespace {

// ---- index plans
// -------------------------------------------------------------
/// A row-major index space (dims outermost first) and N element strides per
/// dim: linear index -> N offsets. rank 0 is a single point (offset 0).
template <int N> struct Strides {
  int rank = 0;
  long long dims[kMaxDims] = {};
  long long strides[kMaxDims][N] = {};
  __device__ __forceinline__ void offsets(long long i,
                                          long long (&off)[N]) const {
    for (int k = 0; k < N; ++k)
      off[k] = 0;
    for (int d = rank - 1; d > 0; --d) {
      const long long q = i / dims[d], r = i - q * dims[d];
      for (int k = 0; k < N; ++k)
        off[k] += r * strides[d][k];
      i = q;
    }
    if (rank > 0)
      for (int k = 0; k < N; ++k)
        off[k] += i * strides[0][k];
  }
  __device__ __forceinline__ long long offset(long long i) const {
    long long off[N];
    offsets(i, off);
    return off[0];
  }
};

/// Builds a plan from dims and strides listed INNERMOST FIRST (how the
/// planners below collect them).
template <int N>
Strides<N>
makeStrides(const std::vector<long long> &dimsInnerFirst,
            const std::vector<std::array<long long, N>> &stridesInnerFirst,
            const char *what) {
  Strides<N> s;
  if (dimsInnerFirst.size() > size_t(kMaxDims))
    throw Error(std::string("cuda kernel ") + what +
                ": more than 8 dimensions after merging");
  s.rank = int(dimsInnerFirst.size());
  for (int d = 0; d < s.rank; ++d) {
    const size_t src = dimsInnerFirst.size() - 1 - size_t(d);
    s.dims[d] = dimsInnerFirst[src];
    for (int k = 0; k < N; ++k)
      s.strides[d][k] = stridesInnerFirst[src][size_t(k)];
  }
  return s;
}

/// Contiguous row-major strides of `shape`.
std::vector<long long> rowMajorStrides(const rt::Shape &shape) {
  std::vector<long long> st(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;)
    st[i - 1] = st[i] * shape[i];
  return st;
}

/// Calls f(U{}) with U an unsigned type of the dtype's element size.
template <class F> void dispatchBits(DType t, F &&f) {
  switch (rt::dtypeSize(t)) {
  case 2:
    f(uint16_t{});
    return;
  case 4:
    f(uint32_t{});
    return;
  case 8:
    f(static_cast<unsigned long long>(0));
    return;
  default:
    throw Error("cuda kernel: unexpected element size");
  }
}

__host__ __device__ __forceinline__ long long lmin(long long a, long long b) {
  return a < b ? a : b;
}
__host__ __device__ __forceinline__ long long lmax(long long a, long long b) {
  return a > b ? a : b;
}

// ---- group reductions
// ----------------------------------------------------------
struct SumOp {
  template <class A> __device__ __forceinline__ A operator()(A a, A b) const {
    return a + b;
  }
};
/// std::max(a, b)-like: a NaN operand is ignored (softmax's row maximum).
struct FMaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const {
    return fmaxf(a, b);
  }
};

/// Reduction over a group of kGroup threads: a warp (32, lanes of one warp)
/// or the whole block (blockDim.x == kGroup, a multiple of 32). Every thread
/// of the group gets the same result. For kGroup > 32 all threads of the
/// block must call it (it synchronises); `shm` holds 32 A.
template <int kGroup, class A, class Op>
__device__ A groupReduce(A v, A *shm, Op op, A identity) {
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (kGroup > 32) {
    static_assert(kGroup % 32 == 0 && kGroup <= 1024,
                  "block reductions need whole warps");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); // earlier readers of shm are done
    if (lane == 0)
      shm[warp] = v;
    __syncthreads();
    v = lane < kGroup / 32 ? shm[lane] : identity;
    for (int o = 16; o > 0; o >>= 1)
      v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

// ---- transpose
// ------------------------------------------------------------------- Every
// path plans on the output's dims with size-1 dims dropped and output-adjacent
// dims that are input-contiguous merged (as the CPU kernel), listed innermost
// first with their input strides (MergedDims).
//
// - rows: the output's innermost merged dim is the input's contiguous one
//   (input stride 1; e.g. the attention head split/merge [0, 2, 1, 3] on
//   [B, S, H, Dh]). The transpose then permutes contiguous rows of
//   R = inner extent x element size bytes: every input stride of the other
//   dims is a multiple of the inner extent (they are the input's dims
//   outside its innermost run), so each row starts R-aligned relative to
//   the base pointers. Rows are copied with the widest vector V of 16, 8,
//   4 or 2 bytes dividing R and both base pointers (the pointers are
//   checked at launch; none fits -> the element paths), by a group of G
//   threads (a power of two, min(32, vectors per row rounded up); longer
//   rows are split into segments of G vectors). A thread computes its
//   row's input offset once (precomputed strides in vectors; 32-bit index
//   math when the whole index space fits in 2^31), then moves one vector;
//   reads and writes are contiguous runs of R bytes. Each thread handles
//   kRowUnroll vectors, all loads issued before the stores.
//   Rows of exactly one 4-, 8- or 16-byte vector are elements of that wider
//   type instead: when the tiled kernel applies to the remaining dims, it
//   runs on them (a strided row of 4..16 bytes would waste most of each
//   32-byte sector the rows kernel reads).
// - tiled: the output's innermost dim is strided in the input and another
//   output dim is the input's contiguous one: 32 x 32 tiles through shared
//   memory, both reads and writes coalesced.
// - gather: anything else, one element per thread.

/// The output's dims (size-1 dropped, merged), innermost first, and their
/// input strides in elements.
struct MergedDims {
  std::vector<long long> dims, strides;
};

/// y[i] = x[in offset of output element i].
template <class U>
__global__ void transposeGather(const U *__restrict__ x, U *__restrict__ y,
                                Strides<1> plan, long long n) {
  DTC_GRID_STRIDE(i, n) y[i] = x[plan.offset(i)];
}

/// Output dim `k` has input stride 1 and the output's innermost dim `j`
/// (output stride 1) has input stride sj: 32 x 32 tiles through shared
/// memory, so both the reads (along k) and the writes (along j) are
/// coalesced. `batch` holds the remaining dims with their input (0) and
/// output (1) strides. Block (32, 8).
template <class U>
__global__ void transposeTiled(const U *__restrict__ x, U *__restrict__ y,
                               Strides<2> batch, long long nk, long long nj,
                               long long sj, long long ok, long long tilesK,
                               long long tilesJ, long long nTiles) {
  __shared__ U tile[32][33];
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  for (long long t = blockIdx.x; t < nTiles; t += gridDim.x) {
    const long long tj = t % tilesJ, rest = t / tilesJ;
    const long long tk = rest % tilesK, b = rest / tilesK;
    long long base[2];
    batch.offsets(b, base);
    const long long k0 = tk * 32, j0 = tj * 32;
    // tile[j - j0][k - k0]
    for (int r = ty; r < 32; r += 8) {
      const long long k = k0 + tx, j = j0 + r;
      if (k < nk && j < nj)
        tile[r][tx] = x[base[0] + k + j * sj];
    }
    __syncthreads();
    for (int r = ty; r < 32; r += 8) {
      const long long j = j0 + tx, k = k0 + r;
      if (k < nk && j < nj)
        y[base[1] + k * ok + j] = tile[tx][r];
    }
    __syncthreads(); // the tile is read before the next iteration refills it
  }
}

/// The output dim d >= 1 that is the input's contiguous one (stride 1)
/// when the tiled kernel applies to `m`: the output's innermost dim is
/// strided in the input and both dims are at least 8 long. -1 otherwise.
int tiledDim(const MergedDims &m) {
  int kDim = -1;
  for (size_t d = 1; d < m.dims.size(); ++d)
    if (m.strides[d] == 1)
      kDim = int(d);
  return kDim > 0 && m.dims[0] >= 8 && m.dims[size_t(kDim)] >= 8 ? kDim : -1;
}

/// Transposes n elements of type U: the tiled kernel when it applies, the
/// gather kernel otherwise.
template <class U>
void launchElements(const U *x, U *y, const MergedDims &m, long long n,
                    cudaStream_t stream) {
  const int kDim = tiledDim(m);
  if (kDim < 0) {
    std::vector<std::array<long long, 1>> st;
    for (long long s : m.strides)
      st.push_back({s});
    const Strides<1> plan = makeStrides<1>(m.dims, st, "transpose");
    transposeGather<U><<<gridFor(n), kThreads, 0, stream>>>(x, y, plan, n);
    checkLaunch("transpose");
    return;
  }
  // Output strides of the merged dims (innermost first).
  std::vector<long long> ostride(m.dims.size(), 1);
  for (size_t d = 1; d < m.dims.size(); ++d)
    ostride[d] = ostride[d - 1] * m.dims[d - 1];
  std::vector<long long> bdims;
  std::vector<std::array<long long, 2>> bst;
  for (size_t d = 1; d < m.dims.size(); ++d) {
    if (int(d) == kDim)
      continue;
    bdims.push_back(m.dims[d]);
    bst.push_back({m.strides[d], ostride[d]});
  }
  const Strides<2> batch = makeStrides<2>(bdims, bst, "transpose");
  const long long nj = m.dims[0], nk = m.dims[size_t(kDim)];
  const long long tilesJ = (nj + 31) / 32, tilesK = (nk + 31) / 32;
  const long long nTiles = tilesJ * tilesK * (n / (nj * nk));
  transposeTiled<U><<<cappedBlocks(nTiles), dim3(32, 8), 0, stream>>>(
      x, y, batch, nk, nj, m.strides[0], ostride[size_t(kDim)], tilesK, tilesJ,
      nTiles);
  checkLaunch("transpose");
}

/// Calls f(V{}) with V a type of `bytes` bytes (16, 8, 4 or 2) and that
/// alignment.
template <class F> void dispatchVec(int bytes, F &&f) {
  switch (bytes) {
  case 16:
    f(uint4{});
    return;
  case 8:
    f(uint2{});
    return;
  case 4:
    f(uint32_t{});
    return;
  case 2:
    f(uint16_t{});
    return;
  default:
    throw Error("cuda kernel transpose: unexpected vector size");
  }
}

/// The rows kernel's outer dims (outermost first) with their input strides
/// in vectors: output row index -> input vector offset of the row.
template <class Idx> struct RowPlan {
  int rank = 0;
  Idx dims[kMaxDims] = {};
  Idx strides[kMaxDims] = {};
  /// Unrolled with constant indices (a dynamically indexed parameter
  /// array is copied to local memory); the rank test is uniform.
  __device__ __forceinline__ Idx offset(Idx r) const {
    Idx off = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d > 0; --d)
      if (d < rank) {
        const Idx q = r / dims[d];
        off += (r - q * dims[d]) * strides[d];
        r = q;
      }
    if (rank > 0)
      off += r * strides[0];
    return off;
  }
};

/// Vectors per thread of the rows kernel (loads in flight per thread).
constexpr int kRowUnroll = 4;

/// Thread index t (of `total` = rows x segsPerRow x 2^logG) moves vector
/// col = segment x 2^logG + lane of output row `row` (when col < vpr):
/// y[row * vpr + col] = x[p.offset(row) + col]. Block kThreads; thread
/// indices base + u * kThreads (u < kRowUnroll) of one block iteration are
/// loaded first, then stored. Idx: uint32_t when total < 2^31 (no
/// intermediate reaches 2^32), else 64 bits.
template <class V, class Idx>
__global__ void __launch_bounds__(kThreads)
    transposeRowsKernel(const V *__restrict__ x, V *__restrict__ y,
                        RowPlan<Idx> p, Idx vpr, Idx segsPerRow, int logG,
                        Idx total) {
  const Idx laneMask = (Idx(1) << logG) - 1;
  const Idx chunk = Idx(kThreads) * Idx(kRowUnroll);
  const Idx step = Idx(gridDim.x) * chunk;
  for (Idx base = Idx(blockIdx.x) * chunk + Idx(threadIdx.x); base < total;
       base += step) {
    V v[kRowUnroll];
    Idx dst[kRowUnroll];
    bool live[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      const Idx t = base + Idx(u) * Idx(kThreads);
      const Idx seg = t >> logG;
      const Idx row = segsPerRow == 1 ? seg : seg / segsPerRow;
      const Idx col = ((seg - row * segsPerRow) << logG) + (t & laneMask);
      live[u] = t < total && col < vpr;
      v[u] = V{};
      dst[u] = 0;
      if (live[u]) {
        v[u] = x[p.offset(row) + col];
        dst[u] = row * vpr + col;
      }
    }
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u)
      if (live[u])
        y[dst[u]] = v[u];
  }
}

/// The rows path (the output's innermost merged dim m.dims[0] has input
/// stride 1). Returns false, launching nothing, when no vector size fits
/// the row size and both pointers.
bool transposeRows(const TensorArg &X, const TensorArg &Y, const MergedDims &m,
                   cudaStream_t stream) {
  const long long es = (long long)rt::dtypeSize(X.dtype);
  const long long E = m.dims[0], R = E * es, rows = Y.numel / E;
  const uintptr_t px = reinterpret_cast<uintptr_t>(X.data);
  const uintptr_t py = reinterpret_cast<uintptr_t>(Y.data);
  int vb = 0;
  for (int b : {16, 8, 4, 2})
    if (R % b == 0 && px % uintptr_t(b) == 0 && py % uintptr_t(b) == 0) {
      vb = b;
      break;
    }
  if (vb == 0)
    return false;
  const long long vpr = R / vb;
  const size_t outer = m.dims.size() - 1;
  // One-vector rows of 4..16 bytes: elements of the vector type, tiled
  // when the tiled kernel applies to the outer dims.
  if (vpr == 1 && vb >= 4 && outer > 0) {
    MergedDims w;
    for (size_t d = 1; d < m.dims.size(); ++d) {
      w.dims.push_back(m.dims[d]);
      w.strides.push_back(m.strides[d] / E);
    }
    if (tiledDim(w) >= 0) {
      dispatchVec(vb, [&](auto v) {
        using V = decltype(v);
        launchElements<V>(static_cast<const V *>(X.data),
                          static_cast<V *>(Y.data), w, rows, stream);
      });
      return true;
    }
  }
  if (outer > size_t(kMaxDims))
    throw Error("cuda kernel transpose: more than 8 dimensions after merging");
  int logG = 0;
  while (logG < 5 && (1LL << logG) < vpr)
    ++logG;
  const long long G = 1LL << logG;
  const long long segsPerRow = (vpr + G - 1) / G;
  const long long total = rows * segsPerRow * G;
  const long long perBlock = kThreads * kRowUnroll;
  const unsigned blocks = cappedBlocks((total + perBlock - 1) / perBlock);
  auto launch = [&](auto idx) {
    using Idx = decltype(idx);
    RowPlan<Idx> p;
    p.rank = int(outer);
    for (int d = 0; d < p.rank; ++d) {
      const size_t src = m.dims.size() - 1 - size_t(d); // outermost first
      p.dims[d] = Idx(m.dims[src]);
      // A multiple of E elements, so of R bytes, so of vb bytes.
      p.strides[d] = Idx(m.strides[src] * es / vb);
    }
    dispatchVec(vb, [&](auto v) {
      using V = decltype(v);
      transposeRowsKernel<V, Idx><<<blocks, kThreads, 0, stream>>>(
          static_cast<const V *>(X.data), static_cast<V *>(Y.data), p, Idx(vpr),
          Idx(segsPerRow), logG, Idx(total));
      checkLaunch("transpose");
    });
  };
  if (total < (1LL << 31))
    launch(uint32_t{});
  else
    launch(static_cast<unsigned long long>(0));
  return true;
}

void kTranspose(const KernelArgs &a, const Context &ctx) {
  const TensorArg &X = a.in[0], &Y = a.out[0];
  if (Y.numel == 0)
    return;
  const std::vector<int64_t> perm = attrInts(*a.attrs, "permutation");
  const rt::Shape &ys = Y.shape;
  const std::vector<long long> xstride = rowMajorStrides(X.shape);
  MergedDims m;
  for (size_t i = ys.size(); i-- > 0;) {
    const long long d = ys[i], s = xstride[size_t(perm[i])];
    if (d == 1)
      continue;
    if (!m.dims.empty() && s == m.strides.back() * m.dims.back()) {
      m.dims.back() *= d;
      continue;
    }
    m.dims.push_back(d);
    m.strides.push_back(s);
  }
  if (!m.dims.empty() && m.strides[0] == 1 &&
      transposeRows(X, Y, m, ctx.stream))
    return;
  const long long n = Y.numel;
  dispatchBits(X.dtype, [&](auto u) {
    using U = decltype(u);
    launchElements<U>(static_cast<const U *>(X.data), static_cast<U *>(Y.data),
                      m, n, ctx.stream);
  });
}

// ---- reductions
// ------------------------------------------------------------------
enum ReduceKind { kSum, kMean, kMax };

/// Accumulation of one reduction kind over elements of type T, as the CPU
/// does: floats in double (sum, mean) or f32 (max); integers in 64 bits
/// with wrap-around.
template <class T, int kKind> struct ReduceOp {
  static constexpr bool kInt = !kIsFloatType<T>;
  using Acc =
      std::conditional_t<kInt, unsigned long long,
                         std::conditional_t<kKind == kMax, float, double>>;
  __device__ __forceinline__ static Acc identity() {
    if constexpr (kKind == kMax)
      return -INFINITY;
    else
      return Acc(0);
  }
  __device__ __forceinline__ static Acc load(T v) {
    if constexpr (kInt)
      return (unsigned long long)(long long)v;
    else if constexpr (kKind == kMax)
      return toF(v);
    else
      return double(toF(v));
  }
  __device__ __forceinline__ Acc operator()(Acc a, Acc b) const {
    if constexpr (kKind == kMax)
      return nanMax(a, b);
    else
      return a + b;
  }
  __device__ __forceinline__ static T finish(Acc a, long long count) {
    if constexpr (kInt)
      return T((long long)a); // wraps to T's width
    else if constexpr (kKind == kMean)
      return fromF<T>(float(a / double(count)));
    else
      return fromF<T>(float(a));
  }
};

/// How a reduction runs: the kept dims (one per output element, row-major)
/// and the reduced dims with their input strides; each output's nRed
/// elements split into `chunks` chunks of chunkLen.
struct ReducePlan {
  Strides<1> kept, red;
  long long nOut = 0, nRed = 1;
  bool rows = false; ///< the input's innermost (non-1) dim is reduced
  int group = 32;    ///< threads per (output, chunk) in the rows case
  long long chunks = 1, chunkLen = 1;
  size_t workspace() const {
    return chunks > 1 ? size_t(chunks * nOut) * 8 : 0;
  }
};

ReducePlan planReduce(const KernelArgs &a) {
  const rt::Shape &xs = a.in[0].shape;
  std::vector<bool> reduced(xs.size(), false);
  for (int64_t ax : attrInts(*a.attrs, "axes"))
    reduced[size_t(ax)] = true;
  const std::vector<long long> xstride = rowMajorStrides(xs);
  // Innermost first; adjacent (ignoring size-1 dims) dims of one class merge.
  std::vector<long long> kd, rd;
  std::vector<std::array<long long, 1>> ks, rs;
  int prev = -1; // class of the last dim taken: 0 kept, 1 reduced
  for (size_t i = xs.size(); i-- > 0;) {
    if (xs[i] == 1)
      continue;
    const int cls = reduced[i] ? 1 : 0;
    std::vector<long long> &d = cls ? rd : kd;
    std::vector<std::array<long long, 1>> &s = cls ? rs : ks;
    if (prev == cls)
      d.back() *= xs[i];
    else {
      d.push_back(xs[i]);
      s.push_back({xstride[i]});
    }
    prev = cls;
  }
  ReducePlan p;
  p.kept = makeStrides<1>(kd, ks, "reduce");
  p.red = makeStrides<1>(rd, rs, "reduce");
  p.nOut = 1;
  for (long long d : kd)
    p.nOut *= d;
  p.nRed = 1;
  for (long long d : rd)
    p.nRed *= d;
  p.rows = !rd.empty() && rs.front()[0] == 1;
  constexpr long long kTargetThreads = 1 << 18;
  long long want;
  if (p.rows) {
    p.group = p.nRed >= 4096 ? kThreads : 32;
    const long long perGroup = std::max<long long>(1, p.nOut * p.group);
    want = std::min<long long>(
        (p.nRed + p.group * 8 - 1) / (p.group * 8),
        perGroup >= kTargetThreads ? 1 : kTargetThreads / perGroup);
  } else {
    want = std::min<long long>((p.nRed + 15) / 16,
                               p.nOut >= kTargetThreads
                                   ? 1
                                   : kTargetThreads /
                                         std::max<long long>(p.nOut, 1));
  }
  want = std::max<long long>(1, std::min<long long>(want, 4096));
  p.chunkLen = std::max<long long>(1, (p.nRed + want - 1) / want);
  p.chunks = p.nRed > 0 ? (p.nRed + p.chunkLen - 1) / p.chunkLen : 1;
  return p;
}

/// Rows case: a group (warp or block) per (output, chunk), consecutive
/// threads on consecutive reduced elements.
template <class T, int kKind, int kGroup>
__global__ void
reduceRows(const T *__restrict__ x, typename ReduceOp<T, kKind>::Acc *partial,
           T *__restrict__ y, Strides<1> kept, Strides<1> red, long long nOut,
           long long nRed, long long chunks, long long chunkLen) {
  using Op = ReduceOp<T, kKind>;
  using Acc = typename Op::Acc;
  __shared__ Acc shm[32];
  const GroupIndex<kGroup> gi;
  const long long groups = nOut * chunks;
  for (long long g = gi.first; g < groups; g += gi.step) {
    const long long o = g / chunks, c = g - o * chunks;
    const long long base = kept.offset(o);
    const long long r0 = c * chunkLen, r1 = lmin(nRed, r0 + chunkLen);
    Acc acc = Op::identity();
    for (long long r = r0 + gi.lane; r < r1; r += kGroup)
      acc = Op()(acc, Op::load(x[base + red.offset(r)]));
    acc = groupReduce<kGroup>(acc, shm, Op(), Op::identity());
    if (gi.lane == 0) {
      if (chunks == 1)
        y[o] = Op::finish(acc, nRed);
      else
        partial[c * nOut + o] = acc;
    }
  }
}

/// Columns case: a thread per (output, chunk), consecutive threads on
/// consecutive outputs (the input's innermost dim is kept).
template <class T, int kKind>
__global__ void
reduceCols(const T *__restrict__ x, typename ReduceOp<T, kKind>::Acc *partial,
           T *__restrict__ y, Strides<1> kept, Strides<1> red, long long nOut,
           long long nRed, long long chunks, long long chunkLen) {
  using Op = ReduceOp<T, kKind>;
  using Acc = typename Op::Acc;
  for (long long c = blockIdx.y; c < chunks; c += gridDim.y) {
    const long long r0 = c * chunkLen, r1 = lmin(nRed, r0 + chunkLen);
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
         o < nOut; o += (long long)gridDim.x * blockDim.x) {
      const long long base = kept.offset(o);
      Acc acc = Op::identity();
      for (long long r = r0; r < r1; ++r)
        acc = Op()(acc, Op::load(x[base + red.offset(r)]));
      if (chunks == 1)
        y[o] = Op::finish(acc, nRed);
      else
        partial[c * nOut + o] = acc;
    }
  }
}

/// Combines the chunks of every output in order.
template <class T, int kKind>
__global__ void
reduceFinish(const typename ReduceOp<T, kKind>::Acc *__restrict__ partial,
             T *__restrict__ y, long long nOut, long long nRed,
             long long chunks) {
  using Op = ReduceOp<T, kKind>;
  DTC_GRID_STRIDE(o, nOut) {
    typename Op::Acc acc = Op::identity();
    for (long long c = 0; c < chunks; ++c)
      acc = Op()(acc, partial[c * nOut + o]);
    y[o] = Op::finish(acc, nRed);
  }
}

template <class T, int kKind>
void runReduce(const KernelArgs &a, const Context &ctx, const char *name) {
  using Acc = typename ReduceOp<T, kKind>::Acc;
  const ReducePlan p = planReduce(a);
  if (p.nOut == 0 || a.out[0].numel == 0)
    return;
  const T *x = static_cast<const T *>(a.in[0].data);
  T *y = static_cast<T *>(a.out[0].data);
  Acc *partial = nullptr;
  if (p.chunks > 1) {
    if (ctx.workspaceBytes < p.workspace() || !ctx.workspace)
      throw Error(std::string("cuda kernel ") + name + ": workspace too small");
    partial = static_cast<Acc *>(ctx.workspace);
  }
  if (p.rows) {
    const long long groups = p.nOut * p.chunks;
    if (p.group == 32)
      reduceRows<T, kKind, 32>
          <<<blocksForGroups<32>(groups), kThreads, 0, ctx.stream>>>(
              x, partial, y, p.kept, p.red, p.nOut, p.nRed, p.chunks,
              p.chunkLen);
    else
      reduceRows<T, kKind, kThreads>
          <<<blocksForGroups<kThreads>(groups), kThreads, 0, ctx.stream>>>(
              x, partial, y, p.kept, p.red, p.nOut, p.nRed, p.chunks,
              p.chunkLen);
  } else {
    const dim3 grid(gridFor(p.nOut),
                    unsigned(std::min<long long>(p.chunks, 65535)));
    reduceCols<T, kKind><<<grid, kThreads, 0, ctx.stream>>>(
        x, partial, y, p.kept, p.red, p.nOut, p.nRed, p.chunks, p.chunkLen);
  }
  checkLaunch(name);
  if (p.chunks > 1) {
    reduceFinish<T, kKind><<<gridFor(p.nOut), kThreads, 0, ctx.stream>>>(
        partial, y, p.nOut, p.nRed, p.chunks);
    checkLaunch(name);
  }
}

size_t wsReduce(const KernelArgs &a) { return planReduce(a).workspace(); }

void kReduceSum(const KernelArgs &a, const Context &ctx) {
  dispatchAny(a.in[0].dtype, [&](auto t) {
    runReduce<decltype(t), kSum>(a, ctx, "reduce_sum");
  });
}
void kReduceMean(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    runReduce<decltype(t), kMean>(a, ctx, "reduce_mean");
  });
}
void kReduceMax(const KernelArgs &a, const Context &ctx) {
  dispatchFloat(a.in[0].dtype, [&](auto t) {
    runReduce<decltype(t), kMax>(a, ctx, "reduce_max");
  });
}

// ---- pad
// -----------------------------------------------------------------------
/// Output dims (outermost first) with the input's extent and stride per dim.
struct PadPlan {
  int rank = 0;
  long long outDims[kMaxDims] = {}, inDims[kMaxDims] = {},
            inStrides[kMaxDims] = {};
};

template <class U>
__global__ void padKernel(const U *__restrict__ x, U *__restrict__ y, PadPlan p,
                          long long n) {
  DTC_GRID_STRIDE(i, n) {
    long long rest = i, off = 0;
    bool inside = true;
    for (int d = p.rank - 1; d >= 0; --d) {
      const long long q = rest / p.outDims[d], idx = rest - q * p.outDims[d];
      rest = q;
      inside = inside && idx < p.inDims[d];
      off += idx * p.inStrides[d];
    }
    y[i] = inside ? x[off] : U(0);
  }
}

void kPad(const KernelArgs &a, const Context &ctx) {
  const TensorArg &X = a.in[0], &Y = a.out[0];
  if (Y.numel == 0)
    return;
  const rt::Shape &in = X.shape, &out = Y.shape;
  // Innermost first. A dim merges into the (outer end of the) inner block
  // when that block is neither padded nor cropped: then "index < extent"
  // of the merged dim is exactly "index < extent" of the outer dim.
  std::vector<long long> od, id, is;
  long long stride = 1;
  for (size_t d = in.size(); d-- > 0;) {
    if (in[d] == 1 && out[d] == 1)
      continue;
    if (!od.empty() && od.back() == id.back()) {
      od.back() *= out[d];
      id.back() *= in[d];
    } else {
      od.push_back(out[d]);
      id.push_back(in[d]);
      is.push_back(stride);
    }
    stride *= in[d];
  }
  if (od.size() > size_t(kMaxDims))
    throw Error("cuda kernel pad: more than 8 dimensions after merging");
  PadPlan p;
  p.rank = int(od.size());
  for (int d = 0; d < p.rank; ++d) {
    const size_t src = od.size() - 1 - size_t(d);
    p.outDims[d] = od[src];
    p.inDims[d] = id[src];
    p.inStrides[d] = is[src];
  }
  const long long n = Y.numel;
  dispatchBits(X.dtype, [&](auto u) {
    using U = decltype(u);
    padKernel<U><<<gridFor(n), kThreads, 0, ctx.stream>>>(
        static_cast<const U *>(X.data), static_cast<U *>(Y.data), p, n);
    checkLaunch("pad");
  });
}

// ---- fill_padding
// ----------------------------------------------------------------
/// y = x with elements at axis index i, offset + i >= size, set to `fill`.
/// x and y may be the same buffer: each thread reads its element before
/// writing it and touches no other.
template <class T>
__global__ void fillPaddingKernel(const T *x, T *y, const int64_t *offset,
                                  long long n, long long inner, long long total,
                                  long long size, float fill) {
  const long long first = lmax(0, lmin(n, size - (long long)*offset));
  const T f = fromF<T>(fill);
  DTC_GRID_STRIDE(i, total) {
    const long long k = (i / inner) % n;
    y[i] = k >= first ? f : x[i];
  }
}

void kFillPadding(const KernelArgs &a, const Context &ctx) {
  const TensorArg &X = a.in[0], &Y = a.out[0];
  if (Y.numel == 0)
    return;
  const AxisView v = axisView(X.shape, attrInt(*a.attrs, "axis"));
  const long long size = attrInt(*a.attrs, "size");
  const float fill =
      a.attrs->at("fill").get<std::string>() == "zero" ? 0.0f : -INFINITY;
  const int64_t *offset = static_cast<const int64_t *>(a.in[1].data);
  dispatchFloat(X.dtype, [&](auto t) {
    using T = decltype(t);
    fillPaddingKernel<T><<<gridFor(Y.numel), kThreads, 0, ctx.stream>>>(
        static_cast<const T *>(X.data), static_cast<T *>(Y.data), offset, v.n,
        v.inner, Y.numel, size, fill);
    checkLaunch("fill_padding");
  });
}

// ---- softmax
// --------------------------------------------------------------------- Rows of
// n contiguous elements (axis innermost): a group (warp or block) per row. Rows
// with stride `inner` > 1: a thread per row (consecutive threads on consecutive
// columns), the CPU's loop order exactly.

template <class T, int kGroup>
__global__ void softmaxRows(const T *__restrict__ x, T *__restrict__ y,
                            long long rows, long long n) {
  __shared__ float shmF[32];
  __shared__ double shmD[32];
  const GroupIndex<kGroup> gi;
  for (long long r = gi.first; r < rows; r += gi.step) {
    const T *xr = x + r * n;
    T *yr = y + r * n;
    float mx = -INFINITY;
    for (long long j = gi.lane; j < n; j += kGroup)
      mx = fmaxf(mx, toF(xr[j]));
    mx = groupReduce<kGroup>(mx, shmF, FMaxOp(), -INFINITY);
    double sum = 0;
    for (long long j = gi.lane; j < n; j += kGroup)
      sum += double(expf(toF(xr[j]) - mx));
    sum = groupReduce<kGroup>(sum, shmD, SumOp(), 0.0);
    const float inv = float(1.0 / sum);
    for (long long j = gi.lane; j < n; j += kGroup)
      yr[j] = fromF<T>(expf(toF(xr[j]) - mx) * inv);
  }
}

template <class T>
__global__ void softmaxStrided(const T *__restrict__ x, T *__restrict__ y,
                               long long rows, long long n, long long inner) {
  DTC_GRID_STRIDE(r, rows) {
    const long long o = r / inner, in = r - o * inner;
    const long long base = o * n * inner + in;
    float mx = -INFINITY;
    for (long long j = 0; j < n; ++j)
      mx = fmaxf(mx, toF(x[base + j * inner]));
    double sum = 0;
    for (long long j = 0; j < n; ++j)
      sum += double(expf(toF(x[base + j * inner]) - mx));
    const float inv = float(1.0 / sum);
    for (long long j = 0; j < n; ++j)
      y[base + j * inner] = fromF<T>(expf(toF(x[base + j * inner]) - mx) * inv);
  }
}

template <class T, int kGroup>
__global__ void softmaxGradRows(const T *__restrict__ yv,
                                const T *__restrict__ dy, T *__restrict__ dx,
                                long long rows, long long n) {
  __shared__ double shmD[32];
  const GroupIndex<kGroup> gi;
  for (long long r = gi.first; r < rows; r += gi.step) {
    const T *yr = yv + r * n, *dyr = dy + r * n;
    T *dxr = dx + r * n;
    double dot = 0;
    for (long long j = gi.lane; j < n; j += kGroup)
      dot += double(toF(dyr[j])) * double(toF(yr[j]));
    dot = groupReduce<kGroup>(dot, shmD, SumOp(), 0.0);
    const float fd = float(dot);
    for (long long j = gi.lane; j < n; j += kGroup)
      dxr[j] = fromF<T>(toF(yr[j]) * (toF(dyr[j]) - fd));
  }
}

template <class T>
__global__ void softmaxGradStrided(const T *__restrict__ yv,
                                   const T *__restrict__ dy, T *__restrict__ dx,
                                   long long rows, long long n,
                                   long long inner) {
  DTC_GRID_STRIDE(r, rows) {
    const long long o = r / inner, in = r - o * inner;
    const long long base = o * n * inner + in;
    double dot = 0;
    for (long long j = 0; j < n; ++j)
      dot +=
          double(toF(dy[base + j * inner])) * double(toF(yv[base + j * inner]));
    const float fd = float(dot);
    for (long long j = 0; j < n; ++j) {
      const long long e = base + j * inner;
      dx[e] = fromF<T>(toF(yv[e]) * (toF(dy[e]) - fd));
    }
  }
}

/// Rows longer than this get a block each, shorter ones a warp.
constexpr long long kWarpRowMax = 1024;

void kSoftmax(const KernelArgs &a, const Context &ctx) {
  const TensorArg &X = a.in[0], &Y = a.out[0];
  if (Y.numel == 0)
    return;
  const AxisView v = axisView(X.shape, attrInt(*a.attrs, "axis"));
  const long long rows = v.outer * v.inner;
  dispatchFloat(X.dtype, [&](auto t) {
    using T = decltype(t);
    const T *x = static_cast<const T *>(X.data);
    T *y = static_cast<T *>(Y.data);
    if (v.inner > 1)
      softmaxStrided<T><<<gridFor(rows), kThreads, 0, ctx.stream>>>(
          x, y, rows, v.n, v.inner);
    else if (v.n <= kWarpRowMax)
      softmaxRows<T, 32>
          <<<blocksForGroups<32>(rows), kThreads, 0, ctx.stream>>>(x, y, rows,
                                                                   v.n);
    else
      softmaxRows<T, kThreads>
          <<<blocksForGroups<kThreads>(rows), kThreads, 0, ctx.stream>>>(
              x, y, rows, v.n);
    checkLaunch("softmax");
  });
}

void kSoftmaxGrad(const KernelArgs &a, const Context &ctx) {
  const TensorArg &Yv = a.in[0], &DY = a.in[1], &DX = a.out[0];
  if (DX.numel == 0)
    return;
  const AxisView v = axisView(Yv.shape, attrInt(*a.attrs, "axis"));
  const long long rows = v.outer * v.inner;
  dispatchFloat(Yv.dtype, [&](auto t) {
    using T = decltype(t);
    const T *y = static_cast<const T *>(Yv.data),
            *dy = static_cast<const T *>(DY.data);
    T *dx = static_cast<T *>(DX.data);
    if (v.inner > 1)
      softmaxGradStrided<T><<<gridFor(rows), kThreads, 0, ctx.stream>>>(
          y, dy, dx, rows, v.n, v.inner);
    else if (v.n <= kWarpRowMax)
      softmaxGradRows<T, 32>
          <<<blocksForGroups<32>(rows), kThreads, 0, ctx.stream>>>(y, dy, dx,
                                                                   rows, v.n);
    else
      softmaxGradRows<T, kThreads>
          <<<blocksForGroups<kThreads>(rows), kThreads, 0, ctx.stream>>>(
              y, dy, dx, rows, v.n);
    checkLaunch("softmax_grad");
  });
}

} // namespace

const std::vector<Entry> &layoutKernels() {
  static const std::vector<Entry> entries = {
      {"transpose", kTranspose},
      {"reduce_sum", kReduceSum, nullptr, wsReduce},
      {"reduce_mean", kReduceMean, nullptr, wsReduce},
      {"reduce_max", kReduceMax, nullptr, wsReduce},
      {"pad", kPad},
      {"fill_padding", kFillPadding},
      {"softmax", kSoftmax},
      {"softmax_grad", kSoftmaxGrad},
  };
  return entries;
}

} // namespace dtc::kernels::cuda
