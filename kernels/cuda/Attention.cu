//===- Attention.cu - attention and attention_grad (CUDA)
//-------------------===//
//
// docs/kernels.md "Attention"; the reference is kernels/cpu/Attention.cpp.
// q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], all contiguous; scores
// s = (q k^T) * scale with scale = f32(1 / sqrt(f64(Dh))) as the CPU
// computes it; keys j > query i are masked under `causal` (Sq == Sk, so no
// row is ever fully masked). Neither kernel materialises the Sq x Sk scores:
// both walk key tiles with an online softmax (running maximum m and sum l,
// the output rescaled by e^(m_old - m_new)), FlashAttention-2 style.
//
// Two implementations, chosen at bind time:
//  - SIMT (every dtype, every Dh): CUDA cores, f32 arithmetic throughout,
//    the same formulas as the CPU kernel (expf of the scaled score minus the
//    running maximum, y * (1 / l) at the end). 32 x 32 tiles, 4 warps of 8
//    rows; the head dimension is staged through shared memory in chunks of
//    64, so any Dh works (the output columns of one block are capped, Dh
//    above that gets more blocks that each recompute the scores).
//  - Tensor cores (bf16/f16 with Dh 64 or 128, sm_80+): mma.sync m16n8k16
//    with f32 accumulators. The scores, the online softmax and the
//    probabilities stay in registers (the accumulator layout of mma.sync is
//    specified by the PTX ISA, unlike wmma's, which would force a round trip
//    through shared memory per tile); operands are staged with cp.async and
//    read with ldmatrix. The probabilities (and in the backward dS) are
//    rounded to the operand dtype for the second product, as every
//    FlashAttention does; the CPU keeps them in f32 (a difference well inside
//    the bf16/f16 tolerances). Used when every operand is 16-byte aligned
//    (checked per launch, else SIMT). DTC_CUDA_ATTENTION=simt (read once
//    per process, at the first bind) forces the SIMT path.
//
// attention_grad (FA2): pass 1 recomputes the row statistics per query tile
// into the workspace (logsumexp and D = rowsum(dy * y), B*H*Sq f32 each;
// the SIMT path keeps the natural-log logsumexp of the scaled scores, the
// tensor-core path its base-2 form), then one kernel per key tile
// accumulates dk and dv over the query tiles and one per query tile
// accumulates dq over the key tiles (9 tile products per pair where a
// single-pass FA2 with dq atomics needs 5). No atomics: the results are
// deterministic (bitwise repeatable).
//
// Measured on an H100 SXM (bf16, B 4, H 16, S 2048, causal, docs/kernels.md
// flop count): tensor cores Dh 64 fwd 241 TFLOP/s, bwd 132; Dh 128 fwd 267,
// bwd 140 (non-causal about 10% higher). SIMT: about 14 fwd, 8 bwd.
//
//===----------------------------------------------------------------------===//
#include "Common.cuh"
#include "dtc/kernels/BlockPositions.h"

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace dtc::kernels::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

/// Ring attention's block (attention_block, attention_block_grad): the query
/// and key blocks' first global positions, device scalars (null for a whole
/// attention: both 0), and their layout; read on the device so that
/// launching never waits for the host. Query row i sees keys
/// [0, mask.visible(i)) (kernels::CausalMask, the CPU kernels' rule).
struct Offsets {
  const long long *q = nullptr, *k = nullptr;
  long long stride = 1; ///< position_stride: rows at offset + row * stride
  long long zigzagLength = 0; ///< zigzag_length (0: not zigzag)

  __device__ __forceinline__ kernels::CausalMask mask(bool causal, int Sq,
                                                      int Sk) const {
    if (!q)
      return kernels::CausalMask::whole(causal, Sq, Sk);
    return kernels::CausalMask::make(causal, {*q, stride, zigzagLength, Sq},
                                     {*k, stride, zigzagLength, Sk});
  }
};

/// Keys [0, end) that query rows [q0, q0 + n) may see (positions rise with
/// the row: the tile's last row sees the most).
__device__ __forceinline__ int visibleEnd(const kernels::CausalMask &mask,
                                          int q0, int n) {
  const int64_t end = q0 + n < mask.queries.rows ? q0 + n : mask.queries.rows;
  return int(mask.visible(end - 1));
}

/// Whether query `row` sees key `key` (key < Sk included).
__device__ __forceinline__ bool sees(const kernels::CausalMask &mask, int row,
                                     int key) {
  return key < mask.visible(row);
}

/// Merges a block's row (logsumexp lb, output value yb) into the running
/// one (la, ya; ya null or la -inf: none yet), as kernels/cpu/Attention.cpp
/// mergeRow: returns the merged logsumexp and the factors fa, fb of the
/// running and the block's values (a row that saw no key keeps the running
/// values).
struct RowMerge {
  float lse, fa, fb;
};
__device__ __forceinline__ RowMerge mergeRows(bool hasAcc, float la, float lb) {
  if (lb == -INFINITY)
    return {hasAcc ? la : -INFINITY, hasAcc ? 1.0f : 0.0f, 0.0f};
  if (!hasAcc || la == -INFINITY)
    return {lb, 0.0f, 1.0f};
  const float mx = fmaxf(la, lb);
  const float lse = mx + logf(expf(la - mx) + expf(lb - mx));
  return {lse, expf(la - lse), expf(lb - lse)};
}

// =============================================================================
// SIMT path
// =============================================================================
constexpr int kSimtThreads = 128; // 4 warps
constexpr int kST = 32;           // query rows and keys per tile
constexpr int kSRows = 8;         // rows per warp (kST / 4)
constexpr int kSC = 64;       // head-dimension chunk staged in shared memory
constexpr int kFwdCols = 256; // output columns per block: forward, dq
constexpr int kKvCols =
    128; // output columns per block: dk/dv (two accumulators)

struct SimtSmem {
  float a[kST][kSC + 1]; // +1: a lane per row reads conflict-free
  float b[kST][kSC + 1];
  float p[kST][kST + 1];
  float p2[kST][kST + 1];
};

/// dst = rows [r0, r0 + n) x columns [d0, d0 + kSC) of a row-major [*, D]
/// matrix, zeros outside the rows < n and columns < D. All threads.
template <class T>
__device__ __forceinline__ void simtLoad(float (*dst)[kSC + 1], const T *src,
                                         int r0, int n, int D, int d0) {
  for (int e = threadIdx.x; e < kST * kSC; e += kSimtThreads) {
    const int r = e / kSC, c = e % kSC;
    float x = 0.0f;
    if (r < n && d0 + c < D)
      x = toF(src[(long long)(r0 + r) * D + d0 + c]);
    dst[r][c] = x;
  }
}

/// acc[i] = sum_d A[a0 + w*8 + i][d] * B[b0 + lane][d] (rows past na / nb
/// count as zeros). Called by all threads; starts and ends with the shared
/// buffers a, b free to reuse after the next __syncthreads.
template <class TA, class TB>
__device__ __forceinline__ void simtScores(float (&acc)[kSRows], SimtSmem &sm,
                                           const TA *A, int a0, int na,
                                           const TB *B, int b0, int nb, int D) {
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < kSRows; ++i)
    acc[i] = 0.0f;
  for (int d0 = 0; d0 < D; d0 += kSC) {
    __syncthreads(); // everyone is done with sm.a / sm.b
    simtLoad(sm.a, A, a0, na, D, d0);
    simtLoad(sm.b, B, b0, nb, D, d0);
    __syncthreads();
    const int dn = min(kSC, D - d0);
    for (int d = 0; d < dn; ++d) {
      const float bv = sm.b[lane][d];
#pragma unroll
      for (int i = 0; i < kSRows; ++i)
        acc[i] = fmaf(sm.a[w * kSRows + i][d], bv, acc[i]);
    }
  }
}

/// acc[i][c] += sum_j P[w*8 + i][j] * M[m0 + j][c0 + 32 c + lane] for the
/// kST rows j of M from m0 (rows past nm count as zeros). P lives in shared
/// memory and was written before the call. All threads.
template <int NC, class TM>
__device__ __forceinline__ void
simtAccumulate(float (&acc)[kSRows][NC], SimtSmem &sm,
               const float (*P)[kST + 1], const TM *M, int m0, int nm, int D,
               int c0) {
  static_assert(NC % 2 == 0, "columns come in chunks of 64");
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int cc = 0; cc < NC; cc += 2) {
    __syncthreads(); // P written; everyone is done with sm.a
    simtLoad(sm.a, M, m0, nm, D, c0 + cc * 32);
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < kST; ++j) {
      const float x0 = sm.a[j][lane], x1 = sm.a[j][lane + 32];
#pragma unroll
      for (int i = 0; i < kSRows; ++i) {
        const float p = P[w * kSRows + i][j];
        acc[i][cc] = fmaf(p, x0, acc[i][cc]);
        acc[i][cc + 1] = fmaf(p, x1, acc[i][cc + 1]);
      }
    }
  }
}

/// Forward: one block per (query tile, b*h, chunk of output columns); the
/// tiles with the most keys (causal) are scheduled first.
template <class T, int NC>
__global__ void __launch_bounds__(kSimtThreads)
    attnFwdSimt(const T *__restrict__ q, const T *__restrict__ k,
                const T *__restrict__ v, T *__restrict__ out, int BH, int G,
                int Sq, int Sk, int D, int causal, float scale, int nQT,
                int nCC, Offsets off, const T *__restrict__ yacc,
                const float *__restrict__ lacc, float *__restrict__ lse) {
  __shared__ SimtSmem sm;
  long long blk = blockIdx.x;
  const int cc = int(blk % nCC);
  blk /= nCC;
  const int bh = int(blk % BH), qt = nQT - 1 - int(blk / BH);
  const int q0 = qt * kST, nq = min(kST, Sq - q0), c0 = cc * kFwdCols;
  const T *Q = q + (long long)bh * Sq * D,
          *K = k + (long long)(bh / G) * Sk * D,
          *V = v + (long long)(bh / G) * Sk * D;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const kernels::CausalMask mask = off.mask(causal, Sq, Sk);
  const int kEnd = visibleEnd(mask, q0, kST);

  float m[kSRows], l[kSRows], o[kSRows][NC], s[kSRows];
#pragma unroll
  for (int i = 0; i < kSRows; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c)
      o[i][c] = 0.0f;
  }
  for (int k0 = 0; k0 < kEnd; k0 += kST) {
    const int nk = min(kST, Sk - k0);
    simtScores(s, sm, Q, q0, nq, K, k0, nk, D);
    const int key = k0 + lane;
#pragma unroll
    for (int i = 0; i < kSRows; ++i) {
      const int row = q0 + w * kSRows + i;
      const bool vis = sees(mask, row, key);
      const float x = vis ? s[i] * scale : -INFINITY;
      const float mx =
          fmaxf(m[i], warpMax(x)); // -inf only while no key is visible
      const float p = vis ? expf(x - mx) : 0.0f;
      const float alpha = mx == -INFINITY ? 1.0f : expf(m[i] - mx);
      l[i] = l[i] * alpha + warpSum(p);
      m[i] = mx;
#pragma unroll
      for (int c = 0; c < NC; ++c)
        o[i][c] *= alpha;
      sm.p[w * kSRows + i][lane] = p;
    }
    simtAccumulate<NC>(o, sm, sm.p, V, k0, nk, D, c0);
  }
#pragma unroll
  for (int i = 0; i < kSRows; ++i) {
    const int row = q0 + w * kSRows + i;
    if (row >= Sq)
      continue;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    const long long at = (long long)bh * Sq + row;
    T *y = out + at * D;
    if (lse == nullptr) { // attention
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int d = c0 + c * 32 + lane;
        if (d < D)
          y[d] = fromF<T>(o[i][c] * inv);
      }
      continue;
    }
    // attention_block: merged with the running output and logsumexp.
    const RowMerge mg = mergeRows(yacc != nullptr, yacc ? lacc[at] : -INFINITY,
                                  l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY);
    const T *ya = yacc ? yacc + at * D : nullptr;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = c0 + c * 32 + lane;
      if (d < D)
        y[d] = fromF<T>((mg.fa != 0.0f ? toF(ya[d]) * mg.fa : 0.0f) +
                        o[i][c] * inv * mg.fb);
    }
    if (cc == 0 && lane == 0)
      lse[at] = mg.lse;
  }
}

/// Backward pass 1: per query row the logsumexp of its scaled scores and
/// D = rowsum(dy * y) = sum_j p_j (dy . v_j) / l (no output accumulator, so
/// any Dh). One block per (query tile, b*h).
template <class T>
__global__ void __launch_bounds__(kSimtThreads)
    attnStatsSimt(const T *__restrict__ q, const T *__restrict__ k,
                  const T *__restrict__ v, const T *__restrict__ dy,
                  float *__restrict__ lse, float *__restrict__ dsum, int BH,
                  int G, int Sq, int Sk, int D, int causal, float scale,
                  int nQT) {
  __shared__ SimtSmem sm;
  const int bh = int(blockIdx.x % unsigned(BH)),
            qt = nQT - 1 - int(blockIdx.x / unsigned(BH));
  const int q0 = qt * kST, nq = min(kST, Sq - q0);
  const long long hq = (long long)bh * Sq * D,
                  hk = (long long)(bh / G) * Sk * D;
  const T *Q = q + hq, *K = k + hk, *V = v + hk, *dY = dy + hq;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int kEnd = causal ? min(Sk, q0 + kST) : Sk;

  float m[kSRows], l[kSRows], acc[kSRows], s[kSRows], t[kSRows];
#pragma unroll
  for (int i = 0; i < kSRows; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
    acc[i] = 0.0f;
  }
  for (int k0 = 0; k0 < kEnd; k0 += kST) {
    const int nk = min(kST, Sk - k0);
    simtScores(s, sm, Q, q0, nq, K, k0, nk, D);
    simtScores(t, sm, dY, q0, nq, V, k0, nk, D);
    const int key = k0 + lane;
#pragma unroll
    for (int i = 0; i < kSRows; ++i) {
      const int row = q0 + w * kSRows + i;
      const bool vis = key < Sk && (!causal || key <= row);
      const float x = vis ? s[i] * scale : -INFINITY;
      const float mx = fmaxf(m[i], warpMax(x));
      const float p = vis ? expf(x - mx) : 0.0f;
      const float alpha = mx == -INFINITY ? 1.0f : expf(m[i] - mx);
      l[i] = l[i] * alpha + warpSum(p);
      acc[i] = acc[i] * alpha + warpSum(p * t[i]);
      m[i] = mx;
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < kSRows; ++i) {
      const int row = q0 + w * kSRows + i;
      if (row >= Sq)
        continue;
      const long long at = (long long)bh * Sq + row;
      lse[at] = l[i] > 0.0f ? m[i] + logf(l[i]) : 0.0f;
      dsum[at] = l[i] > 0.0f ? acc[i] * (1.0f / l[i]) : 0.0f;
    }
  }
}

/// dk and dv: one block per (key tile, key/value head, chunk of columns),
/// looping over the query tiles that see the keys of each of the G query
/// heads that read this key/value head. p = e^(s - lse), dv += p^T dy,
/// ds = p (dy . v - D), dk += scale ds^T q.
template <class T, int NC>
__global__ void __launch_bounds__(kSimtThreads)
    attnDkvSimt(const T *__restrict__ q, const T *__restrict__ k,
                const T *__restrict__ v, const T *__restrict__ dy,
                const float *__restrict__ lse, const float *__restrict__ dsum,
                T *__restrict__ dk, T *__restrict__ dv, int BH, int G, int Sq,
                int Sk, int D, int causal, float scale, int nCC, Offsets off) {
  __shared__ SimtSmem sm;
  long long blk = blockIdx.x;
  const int cc = int(blk % nCC);
  blk /= nCC;
  const int BHkv = BH / G;
  const int kvh = int(blk % BHkv),
            kt = int(blk / BHkv); // causal: the first key tiles have most work
  const int k0 = kt * kST, nk = min(kST, Sk - k0), c0 = cc * kKvCols;
  const long long hk = (long long)kvh * Sk * D;
  const T *K = k + hk, *V = v + hk;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const kernels::CausalMask mask = off.mask(causal, Sq, Sk);

  float gk[kSRows][NC], gv[kSRows][NC], s[kSRows], t[kSRows];
#pragma unroll
  for (int i = 0; i < kSRows; ++i)
#pragma unroll
    for (int c = 0; c < NC; ++c)
      gk[i][c] = gv[i][c] = 0.0f;
  for (int bh = kvh * G; bh < (kvh + 1) * G; ++bh) {
    const long long hq = (long long)bh * Sq * D;
    const T *Q = q + hq, *dY = dy + hq;
    const float *L = lse + (long long)bh * Sq, *Dq = dsum + (long long)bh * Sq;
    // Queries before the first that sees k0 see none of these keys.
    for (int q0 = int(mask.firstQuerySeeing(k0)); q0 < Sq; q0 += kST) {
      const int nq = min(kST, Sq - q0);
      simtScores(s, sm, K, k0, nk, Q, q0, nq, D); // s[i]: key w*8+i, query lane
      simtScores(t, sm, V, k0, nk, dY, q0, nq, D); // dp^T
      const int query = q0 + lane;
      const bool qok = query < Sq;
      const float lq = qok ? L[query] : 0.0f, dq = qok ? Dq[query] : 0.0f;
#pragma unroll
      for (int i = 0; i < kSRows; ++i) {
        const int key = k0 + w * kSRows + i;
        const bool vis = qok && sees(mask, query, key);
        const float p = vis ? expf(s[i] * scale - lq) : 0.0f;
        sm.p[w * kSRows + i][lane] = p;
        sm.p2[w * kSRows + i][lane] = p * (t[i] - dq);
      }
      simtAccumulate<NC>(gv, sm, sm.p, dY, q0, nq, D, c0);
      simtAccumulate<NC>(gk, sm, sm.p2, Q, q0, nq, D, c0);
    }
  }
#pragma unroll
  for (int i = 0; i < kSRows; ++i) {
    const int key = k0 + w * kSRows + i;
    if (key >= Sk)
      continue;
    const long long at = ((long long)kvh * Sk + key) * D;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = c0 + c * 32 + lane;
      if (d < D) {
        dk[at + d] = fromF<T>(gk[i][c] * scale);
        dv[at + d] = fromF<T>(gv[i][c]);
      }
    }
  }
}

/// dq: one block per (query tile, b*h, chunk of columns), looping over the
/// key tiles: ds = p (dy . v - D), dq += scale ds k.
template <class T, int NC>
__global__ void __launch_bounds__(kSimtThreads)
    attnDqSimt(const T *__restrict__ q, const T *__restrict__ k,
               const T *__restrict__ v, const T *__restrict__ dy,
               const float *__restrict__ lse, const float *__restrict__ dsum,
               T *__restrict__ dq, int BH, int G, int Sq, int Sk, int D,
               int causal, float scale, int nQT, int nCC, Offsets off) {
  __shared__ SimtSmem sm;
  long long blk = blockIdx.x;
  const int cc = int(blk % nCC);
  blk /= nCC;
  const int bh = int(blk % BH), qt = nQT - 1 - int(blk / BH);
  const int q0 = qt * kST, nq = min(kST, Sq - q0), c0 = cc * kFwdCols;
  const long long hq = (long long)bh * Sq * D,
                  hk = (long long)(bh / G) * Sk * D;
  const T *Q = q + hq, *K = k + hk, *V = v + hk, *dY = dy + hq;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const kernels::CausalMask mask = off.mask(causal, Sq, Sk);
  const int kEnd = visibleEnd(mask, q0, kST);

  float g[kSRows][NC], lr[kSRows], dr[kSRows], s[kSRows], t[kSRows];
#pragma unroll
  for (int i = 0; i < kSRows; ++i) {
    const int row = q0 + w * kSRows + i;
    lr[i] = row < Sq ? lse[(long long)bh * Sq + row] : 0.0f;
    dr[i] = row < Sq ? dsum[(long long)bh * Sq + row] : 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c)
      g[i][c] = 0.0f;
  }
  for (int k0 = 0; k0 < kEnd; k0 += kST) {
    const int nk = min(kST, Sk - k0);
    simtScores(s, sm, Q, q0, nq, K, k0, nk, D);
    simtScores(t, sm, dY, q0, nq, V, k0, nk, D);
    const int key = k0 + lane;
#pragma unroll
    for (int i = 0; i < kSRows; ++i) {
      const int row = q0 + w * kSRows + i;
      const bool vis = sees(mask, row, key);
      const float p = vis ? expf(s[i] * scale - lr[i]) : 0.0f;
      sm.p[w * kSRows + i][lane] = p * (t[i] - dr[i]);
    }
    simtAccumulate<NC>(g, sm, sm.p, K, k0, nk, D, c0);
  }
#pragma unroll
  for (int i = 0; i < kSRows; ++i) {
    const int row = q0 + w * kSRows + i;
    if (row >= Sq)
      continue;
    T *y = dq + ((long long)bh * Sq + row) * D;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = c0 + c * 32 + lane;
      if (d < D)
        y[d] = fromF<T>(g[i][c] * scale);
    }
  }
}

// =============================================================================
// Tensor-core path: bf16/f16, Dh in {64, 128}
// =============================================================================
// Fragments of mma.sync.m16n8k16 (PTX ISA), lane = 4 g + t:
//   A 16x16 (row-major): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3
//   (g+8, 2t+8..) B 16x8 (k x n):      b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
//   C 16x8 f32:          c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
// so a C tile pair converts to an A fragment in registers (P, dS).
// Shared tiles are row-major with a row stride of Dh + 8 elements: the 8 rows
// an ldmatrix reads start 16 bytes apart modulo 128, conflict-free.
constexpr int kTcPad = 8;

__device__ __forceinline__ unsigned smemAddr(const void *p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
/// 16 bytes global -> shared, zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cpAsync16(unsigned dst, const void *src,
                                          bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cpAsync4(unsigned dst, const void *src,
                                         bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst),
               "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/// Waits until at most N of this thread's committed groups are pending.
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm4(unsigned (&r)[4], unsigned addr) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(addr));
}
__device__ __forceinline__ void ldsm4t(unsigned (&r)[4], unsigned addr) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(addr));
}
// Lane addresses for ldmatrix.x4 on a row-major tile with row stride LD,
// 16 x 16 block at (r0, c0):
//  A fragment (rows m, cols k), or B from a [k][n] tile with .trans giving
//  the b0,b1 of n-tiles c0 and c0 + 8:
template <int LD>
__device__ __forceinline__ int offA(int r0, int c0, int lane) {
  return (r0 + (lane & 15)) * LD + c0 + (lane >> 4) * 8;
}
//  B from an [n][k] tile (no .trans): b0,b1 of n-tile r0, then of r0 + 8.
template <int LD>
__device__ __forceinline__ int offB(int r0, int c0, int lane) {
  return (r0 + (lane & 7) + ((lane >> 4) << 3)) * LD + c0 +
         ((lane >> 3) & 1) * 8;
}

template <class T> struct Mma;
template <> struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void
  run(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&h);
  }
  static __device__ __forceinline__ float2 unpack(__nv_bfloat162 h) {
    return __bfloat1622float2(h);
  }
  using Pair = __nv_bfloat162;
};
template <> struct Mma<__half> {
  static __device__ __forceinline__ void
  run(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&h);
  }
  static __device__ __forceinline__ float2 unpack(__half2 h) {
    return __half22float2(h);
  }
  using Pair = __half2;
};

/// The A fragment of keys/queries [16 kk, 16 kk + 16) from C tiles 2kk, 2kk+1.
template <class T, int N>
__device__ __forceinline__ void toA(unsigned (&a)[4], const float (&c)[N][4],
                                    int kk) {
  a[0] = Mma<T>::pack(c[2 * kk][0], c[2 * kk][1]);
  a[1] = Mma<T>::pack(c[2 * kk][2], c[2 * kk][3]);
  a[2] = Mma<T>::pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = Mma<T>::pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/// Rows [r0, r0 + ROWS) of a row-major [nRows, D] matrix g into a shared
/// tile (row stride D + kTcPad) with cp.async; rows >= nRows zero-filled.
template <int ROWS, int D, int NT, class T>
__device__ __forceinline__ void tcLoad(T *sm, const T *g, int r0, int nRows) {
  constexpr int CPR = D / 8; // 16-byte pieces per row
  static_assert((ROWS * CPR) % NT == 0, "tile pieces divide among the threads");
#pragma unroll
  for (int i = 0; i < ROWS * CPR / NT; ++i) {
    const int e = threadIdx.x + i * NT, r = e / CPR, c = e % CPR;
    const bool ok = r0 + r < nRows;
    cpAsync16(
        smemAddr(sm + r * (D + kTcPad) + c * 8),
        ok ? static_cast<const void *>(g + ((long long)(r0 + r) * D + c * 8))
           : static_cast<const void *>(g),
        ok);
  }
}

/// Writes this warp's 16 x D f32 accumulator tile (rows row0.. of a
/// [nRows, D] matrix), times f, through the warp's rows of a shared tile
/// (which nobody else reads any more): coalesced 16-byte stores.
template <class T, int D>
__device__ __forceinline__ void tcStore(T *stage, T *dst, int row0, int nRows,
                                        const float (&acc)[D / 8][4], float f0,
                                        float f1) {
  constexpr int LD = D + kTcPad, CPR = D / 8;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    *reinterpret_cast<unsigned *>(stage + g * LD + nt * 8 + 2 * t) =
        Mma<T>::pack(acc[nt][0] * f0, acc[nt][1] * f0);
    *reinterpret_cast<unsigned *>(stage + (g + 8) * LD + nt * 8 + 2 * t) =
        Mma<T>::pack(acc[nt][2] * f1, acc[nt][3] * f1);
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16 * CPR / 32; ++i) {
    const int e = lane + i * 32, r = e / CPR, c = e % CPR;
    if (row0 + r < nRows)
      *reinterpret_cast<uint4 *>(dst + (long long)(row0 + r) * D + c * 8) =
          *reinterpret_cast<const uint4 *>(stage + r * LD + c * 8);
  }
}

constexpr float kLog2e = 1.44269504088896341f;

template <int D, int BQ, int BK> constexpr int fwdTcSmem() {
  return (BQ + 2 * BK) * (D + kTcPad) * 2;
}
template <int D> constexpr int dkvTcRows() { return D == 128 ? 32 : 64; }
template <int D> constexpr int dkvTcSmem() {
  return (2 * 64 + 4 * dkvTcRows<D>()) * (D + kTcPad) * 2 +
         4 * dkvTcRows<D>() * 4;
}
template <int D, int BQ, int BK> constexpr int dqTcSmem() {
  return (2 * BQ + 4 * BK) * (D + kTcPad) * 2;
}

/// What the tensor-core forward writes.
enum FwdMode : int {
  kFwdOut = 0,   ///< attention: out
  kFwdStats = 1, ///< attention_grad pass 1: log2-domain logsumexp lse2 =
                 ///< m scale log2(e) + log2(l) and D = rowsum(dy * y)
  kFwdBlock = 2, ///< attention_block: out and lse merged with yacc, lacc
};

/// Forward (MODE kFwdOut or kFwdBlock) or backward pass 1 (kFwdStats: the
/// row statistics into the workspace). One block of NW warps per (query tile of
/// 16 MT NW rows, b*h), each warp MT m-tiles of 16 rows (an ldmatrix'd K or V
/// fragment feeds MT products); key tiles of BK, K(j+1) and V(j) loads overlap
/// the products (FA2's pipeline). Q fragments stay in registers when they fit.
template <class T, int D, int NW, int MT, int BK, int MODE>
__global__ void __launch_bounds__(NW * 32)
    attnFwdTc(const T *__restrict__ q, const T *__restrict__ k,
              const T *__restrict__ v, T *__restrict__ out,
              const T *__restrict__ dy, float *__restrict__ lse2,
              float *__restrict__ dsum, int BH, int G, int Sq, int Sk,
              int causal, float scale, int nQT, Offsets off,
              const T *__restrict__ yacc, const float *__restrict__ lacc) {
  constexpr int BQ = 16 * MT * NW, NT = NW * 32, LD = D + kTcPad, WR = 16 * MT;
  constexpr bool kQReg =
      MT * D <= 128; // Q fragments in registers (else reread per k-step)
  extern __shared__ __align__(16) unsigned char tcSmem[];
  T *sQ = reinterpret_cast<T *>(tcSmem), *sK = sQ + BQ * LD, *sV = sK + BK * LD;
  const int bh = int(blockIdx.x % unsigned(BH)),
            qt = nQT - 1 - int(blockIdx.x / unsigned(BH));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2,
            t4 = lane & 3;
  const int q0 = qt * BQ;
  const long long hq = (long long)bh * Sq * D,
                  hk = (long long)(bh / G) * Sk * D;
  const T *Q = q + hq, *K = k + hk, *V = v + hk;
  const kernels::CausalMask mask = off.mask(causal, Sq, Sk);
  const int kEnd = visibleEnd(mask, q0, BQ), nKT = (kEnd + BK - 1) / BK;
  const float c = scale * kLog2e;
  const int wr0 = warp * WR; // the warp's first row in the tile
  // Row of accumulator element e of m-tile mt: q0 + wr0 + 16 mt + g + 8 (e >>
  // 1).

  tcLoad<BQ, D, NT>(sQ, Q, q0, Sq);
  if (nKT > 0)
    tcLoad<BK, D, NT>(sK, K, 0, Sk);
  cpAsyncCommit();

  unsigned qf[kQReg ? MT : 1][kQReg ? D / 16 : 1][4];
  float o[MT][D / 8][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }

  for (int kt = 0; kt < nKT; ++kt) {
    const int k0 = kt * BK;
    cpAsyncWait<0>(); // K(kt) (and Q) landed
    __syncthreads();  // ... for every thread; everyone is done with V(kt-1)
    if constexpr (kQReg) {
      if (kt == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk)
            ldsm4(qf[mt][kk],
                  smemAddr(sQ + offA<LD>(wr0 + 16 * mt, kk * 16, lane)));
      }
    }
    tcLoad<BK, D, NT>(sV, V, k0, Sk);
    cpAsyncCommit();

    float s[MT][BK / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt)
        s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      unsigned a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (kQReg) {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            a[mt][e] = qf[mt][kk][e];
        } else {
          ldsm4(a[mt], smemAddr(sQ + offA<LD>(wr0 + 16 * mt, kk * 16, lane)));
        }
      }
#pragma unroll
      for (int np = 0; np < BK / 16; ++np) {
        unsigned b[4];
        ldsm4(b, smemAddr(sK + offB<LD>(np * 16, kk * 16, lane)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Mma<T>::run(s[mt][2 * np], a[mt], b[0], b[1]);
          Mma<T>::run(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
    // Some key of the tile is hidden from the warp's first row (or past Sk).
    if (k0 + BK > mask.visible(q0 + wr0)) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = k0 + nt * 8 + 2 * t4 + (e & 1);
            const int row = q0 + wr0 + 16 * mt + g + (e >> 1) * 8;
            if (!sees(mask, row, key))
              s[mt][nt][e] = -INFINITY;
          }
    }
    // Online softmax on the raw scores (scale > 0 commutes with the max).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = m[mt][h];
#pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt)
          mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
        const float mUse =
            mx == -INFINITY ? 0.0f : mx; // no key visible yet: p = 0
        const float alpha = exp2f((m[mt][h] - mUse) * c);
        m[mt][h] = mx;
        l[mt][h] *= alpha;
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) {
          o[mt][nt][2 * h] *= alpha;
          o[mt][nt][2 * h + 1] *= alpha;
        }
        const float mc = mUse * c;
#pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            const float p = exp2f(fmaf(s[mt][nt][e], c, -mc));
            s[mt][nt][e] = p;
            l[mt][h] += p;
          }
      }
    cpAsyncWait<0>(); // V(kt) landed
    __syncthreads();  // ... for every thread; everyone is done with K(kt)
    if (kt + 1 < nKT)
      tcLoad<BK, D, NT>(sK, K, k0 + BK, Sk);
    cpAsyncCommit();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      unsigned a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        toA<T>(a[mt], s[mt], kk);
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        unsigned b[4];
        ldsm4t(b, smemAddr(sV + offA<LD>(kk * 16, np * 16, lane)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Mma<T>::run(o[mt][2 * np], a[mt], b[0], b[1]);
          Mma<T>::run(o[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }
  cpAsyncWait<0>();
  __syncthreads(); // every load landed; nobody reads sQ any more
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[mt][h] += __shfl_xor_sync(kFullMask, l[mt][h], 1);
      l[mt][h] += __shfl_xor_sync(kFullMask, l[mt][h], 2);
      inv[h] = l[mt][h] > 0.0f ? 1.0f / l[mt][h] : 0.0f;
    }
    const int r0 = wr0 + 16 * mt; // the m-tile's first row in the tile
    if constexpr (MODE == kFwdOut) {
      tcStore<T, D>(sQ + r0 * LD, out + hq, q0 + r0, Sq, o[mt], inv[0], inv[1]);
    } else if constexpr (MODE == kFwdBlock) {
      using Pair = typename Mma<T>::Pair;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = q0 + r0 + g + 8 * h;
        if (row >= Sq)
          continue;
        const long long at = (long long)bh * Sq + row;
        // m is the raw scores' maximum: the logsumexp of the scaled scores
        // is m scale + ln(l).
        const RowMerge mg = mergeRows(
            yacc != nullptr, yacc ? lacc[at] : -INFINITY,
            l[mt][h] > 0.0f ? m[mt][h] * scale + logf(l[mt][h]) : -INFINITY);
        const Pair *ya =
            yacc ? reinterpret_cast<const Pair *>(yacc + at * D) : nullptr;
        Pair *y = reinterpret_cast<Pair *>(out + at * D);
        const float fb = inv[h] * mg.fb;
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) {
          float2 a = make_float2(0.0f, 0.0f);
          if (mg.fa != 0.0f)
            a = Mma<T>::unpack(ya[nt * 4 + t4]);
          const unsigned packed =
              Mma<T>::pack(a.x * mg.fa + o[mt][nt][2 * h] * fb,
                           a.y * mg.fa + o[mt][nt][2 * h + 1] * fb);
          y[nt * 4 + t4] = *reinterpret_cast<const Pair *>(&packed);
        }
        if (t4 == 0)
          lse2[at] = mg.lse; // the block's lse output (natural log)
      }
    } else {
      using Pair = typename Mma<T>::Pair;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = q0 + r0 + g + 8 * h;
        float part = 0.0f;
        if (row < Sq) {
          const Pair *dyr =
              reinterpret_cast<const Pair *>(dy + hq + (long long)row * D);
#pragma unroll
          for (int nt = 0; nt < D / 8; ++nt) {
            const float2 d2 = Mma<T>::unpack(dyr[nt * 4 + t4]);
            part = fmaf(d2.x, o[mt][nt][2 * h] * inv[h], part);
            part = fmaf(d2.y, o[mt][nt][2 * h + 1] * inv[h], part);
          }
        }
        part += __shfl_xor_sync(kFullMask, part, 1);
        part += __shfl_xor_sync(kFullMask, part, 2);
        if (t4 == 0 && row < Sq) {
          const long long at = (long long)bh * Sq + row;
          lse2[at] = l[mt][h] > 0.0f ? m[mt][h] * c + log2f(l[mt][h]) : 0.0f;
          dsum[at] = part;
        }
      }
    }
  }
}

/// dk, dv: one block of 4 warps per (key tile of 64, key/value head), each
/// warp 16 keys; loops over the query tiles of BQ of each of the G query
/// heads that read the key/value head (double-buffered), computing the
/// transposed scores S^T = K Q^T and dP^T = V dY^T, so P^T and dS^T are A
/// fragments in registers for dv += P^T dY and dk += dS^T Q.
template <class T, int D>
__global__ void __launch_bounds__(128)
    attnDkvTc(const T *__restrict__ q, const T *__restrict__ k,
              const T *__restrict__ v, const T *__restrict__ dy,
              const float *__restrict__ lse2, const float *__restrict__ dsum,
              T *__restrict__ dk, T *__restrict__ dv, int BH, int G, int Sq,
              int Sk, int causal, float scale, Offsets off) {
  constexpr int BK = 64, BQ = dkvTcRows<D>(), NT = 128, LD = D + kTcPad;
  extern __shared__ __align__(16) unsigned char tcSmem[];
  T *sK = reinterpret_cast<T *>(tcSmem), *sV = sK + BK * LD, *sQ = sV + BK * LD,
    *sY = sQ + 2 * BQ * LD;
  float *sL = reinterpret_cast<float *>(sY + 2 * BQ * LD), *sD = sL + 2 * BQ;
  const unsigned BHkv = unsigned(BH / G);
  const int kvh = int(blockIdx.x % BHkv), kt = int(blockIdx.x / BHkv);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2,
            t4 = lane & 3;
  const int k0 = kt * BK;
  const long long hk = (long long)kvh * Sk * D;
  const T *K = k + hk, *V = v + hk;
  const float c = scale * kLog2e;
  const kernels::CausalMask mask = off.mask(causal, Sq, Sk);
  // Query tiles before the one holding the first query that sees k0 see
  // none of these keys.
  const int qStart = int(mask.firstQuerySeeing(k0)) / BQ * BQ;
  const int nQ = Sq > qStart ? (Sq - qStart + BQ - 1) / BQ : 0;
  // Iteration it: query tile it % nQ of query head kvh * G + it / nQ.
  const int nIt = nQ * G;
  const int keyA = k0 + warp * 16 + g; // keys of c0,c1; keyA + 8: c2,c3

  auto loadQ = [&](int it) {
    const int qb = qStart + it % nQ * BQ, buf = it & 1;
    const long long bh = (long long)kvh * G + it / nQ;
    const T *Q = q + bh * Sq * D, *dY = dy + bh * Sq * D;
    const float *L = lse2 + bh * Sq, *Dr = dsum + bh * Sq;
    tcLoad<BQ, D, NT>(sQ + buf * BQ * LD, Q, qb, Sq);
    tcLoad<BQ, D, NT>(sY + buf * BQ * LD, dY, qb, Sq);
    for (int i = threadIdx.x; i < BQ; i += NT) {
      const bool ok = qb + i < Sq;
      cpAsync4(smemAddr(sL + buf * BQ + i), ok ? L + qb + i : L, ok);
      cpAsync4(smemAddr(sD + buf * BQ + i), ok ? Dr + qb + i : Dr, ok);
    }
  };
  tcLoad<BK, D, NT>(sK, K, k0, Sk);
  tcLoad<BK, D, NT>(sV, V, k0, Sk);
  if (nIt > 0)
    loadQ(0);
  cpAsyncCommit();

  float gk[D / 8][4], gv[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      gk[nt][e] = gv[nt][e] = 0.0f;

  for (int it = 0; it < nIt; ++it) {
    const int buf = it & 1, qb = qStart + it % nQ * BQ;
    if (it + 1 < nIt)
      loadQ(it + 1); // into the other buffer, free since the last iteration
    cpAsyncCommit();
    cpAsyncWait<1>(); // everything but the prefetch landed
    __syncthreads();
    const T *cQ = sQ + buf * BQ * LD, *cY = sY + buf * BQ * LD;
    const float *cL = sL + buf * BQ, *cD = sD + buf * BQ;
    float s[BQ / 8][4], dp[BQ / 8][4];
#pragma unroll
    for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[nt][e] = dp[nt][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      unsigned ak[4], av[4];
      ldsm4(ak, smemAddr(sK + offA<LD>(warp * 16, kk * 16, lane)));
      ldsm4(av, smemAddr(sV + offA<LD>(warp * 16, kk * 16, lane)));
#pragma unroll
      for (int np = 0; np < BQ / 16; ++np) {
        unsigned b[4];
        ldsm4(b, smemAddr(cQ + offB<LD>(np * 16, kk * 16, lane)));
        Mma<T>::run(s[2 * np], ak, b[0], b[1]);
        Mma<T>::run(s[2 * np + 1], ak, b[2], b[3]);
        ldsm4(b, smemAddr(cY + offB<LD>(np * 16, kk * 16, lane)));
        Mma<T>::run(dp[2 * np], av, b[0], b[1]);
        Mma<T>::run(dp[2 * np + 1], av, b[2], b[3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nt * 8 + 2 * t4 + (e & 1), query = qb + qi,
                  key = keyA + (e >> 1) * 8;
        const bool vis = query < Sq && sees(mask, query, key);
        const float p = vis ? exp2f(fmaf(s[nt][e], c, -cL[qi])) : 0.0f;
        s[nt][e] = p;
        dp[nt][e] = p * (dp[nt][e] - cD[qi]);
      }
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk) {
      unsigned ap[4], as[4];
      toA<T>(ap, s, kk);
      toA<T>(as, dp, kk);
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        unsigned b[4];
        ldsm4t(b, smemAddr(cY + offA<LD>(kk * 16, np * 16, lane)));
        Mma<T>::run(gv[2 * np], ap, b[0], b[1]);
        Mma<T>::run(gv[2 * np + 1], ap, b[2], b[3]);
        ldsm4t(b, smemAddr(cQ + offA<LD>(kk * 16, np * 16, lane)));
        Mma<T>::run(gk[2 * np], as, b[0], b[1]);
        Mma<T>::run(gk[2 * np + 1], as, b[2], b[3]);
      }
    }
    __syncthreads(); // everyone is done with this buffer before it is refilled
  }
  cpAsyncWait<0>();
  __syncthreads(); // every load landed; each warp now owns its rows of sK, sV
  tcStore<T, D>(sK + warp * 16 * LD, dk + hk, k0 + warp * 16, Sk, gk, scale,
                scale);
  tcStore<T, D>(sV + warp * 16 * LD, dv + hk, k0 + warp * 16, Sk, gv, 1.0f,
                1.0f);
}

/// dq: one block of 4 warps per (query tile of 64 MT, b*h), each warp MT
/// m-tiles of 16 rows; loops over key tiles of BK (double-buffered):
/// S = Q K^T, dP = dY V^T, dS = P (dP - D) in registers, dq += dS K.
template <class T, int D, int MT, int BK>
__global__ void __launch_bounds__(128)
    attnDqTc(const T *__restrict__ q, const T *__restrict__ k,
             const T *__restrict__ v, const T *__restrict__ dy,
             const float *__restrict__ lse2, const float *__restrict__ dsum,
             T *__restrict__ dq, int BH, int G, int Sq, int Sk, int causal,
             float scale, int nQT, Offsets off) {
  constexpr int BQ = 64 * MT, NT = 128, LD = D + kTcPad, WR = 16 * MT;
  extern __shared__ __align__(16) unsigned char tcSmem[];
  T *sQ = reinterpret_cast<T *>(tcSmem), *sY = sQ + BQ * LD, *sK = sY + BQ * LD,
    *sV = sK + 2 * BK * LD;
  const int bh = int(blockIdx.x % unsigned(BH)),
            qt = nQT - 1 - int(blockIdx.x / unsigned(BH));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2,
            t4 = lane & 3;
  const int q0 = qt * BQ, wr0 = warp * WR;
  const long long hq = (long long)bh * Sq * D,
                  hk = (long long)(bh / G) * Sk * D;
  const T *Q = q + hq, *K = k + hk, *V = v + hk, *dY = dy + hq;
  const float c = scale * kLog2e;
  const kernels::CausalMask mask = off.mask(causal, Sq, Sk);
  const int kEnd = visibleEnd(mask, q0, BQ), nIt = (kEnd + BK - 1) / BK;

  tcLoad<BQ, D, NT>(sQ, Q, q0, Sq);
  tcLoad<BQ, D, NT>(sY, dY, q0, Sq);
  if (nIt > 0) {
    tcLoad<BK, D, NT>(sK, K, 0, Sk);
    tcLoad<BK, D, NT>(sV, V, 0, Sk);
  }
  cpAsyncCommit();
  float lr[MT][2], dr[MT][2];
  float gq[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = q0 + wr0 + 16 * mt + g + 8 * h;
      lr[mt][h] = row < Sq ? lse2[(long long)bh * Sq + row] : 0.0f;
      dr[mt][h] = row < Sq ? dsum[(long long)bh * Sq + row] : 0.0f;
    }
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      gq[mt][nt][0] = gq[mt][nt][1] = gq[mt][nt][2] = gq[mt][nt][3] = 0.0f;
  }

  for (int it = 0; it < nIt; ++it) {
    const int buf = it & 1, k0 = it * BK;
    if (it + 1 < nIt) { // into the other buffer, free since the last iteration
      tcLoad<BK, D, NT>(sK + (buf ^ 1) * BK * LD, K, k0 + BK, Sk);
      tcLoad<BK, D, NT>(sV + (buf ^ 1) * BK * LD, V, k0 + BK, Sk);
    }
    cpAsyncCommit();
    cpAsyncWait<1>();
    __syncthreads();
    const T *cK = sK + buf * BK * LD, *cV = sV + buf * BK * LD;
    float s[MT][BK / 8][4], dp[MT][BK / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[mt][nt][e] = dp[mt][nt][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      unsigned aq[MT][4], ay[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ldsm4(aq[mt], smemAddr(sQ + offA<LD>(wr0 + 16 * mt, kk * 16, lane)));
        ldsm4(ay[mt], smemAddr(sY + offA<LD>(wr0 + 16 * mt, kk * 16, lane)));
      }
#pragma unroll
      for (int np = 0; np < BK / 16; ++np) {
        unsigned b[4];
        ldsm4(b, smemAddr(cK + offB<LD>(np * 16, kk * 16, lane)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Mma<T>::run(s[mt][2 * np], aq[mt], b[0], b[1]);
          Mma<T>::run(s[mt][2 * np + 1], aq[mt], b[2], b[3]);
        }
        ldsm4(b, smemAddr(cV + offB<LD>(np * 16, kk * 16, lane)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Mma<T>::run(dp[mt][2 * np], ay[mt], b[0], b[1]);
          Mma<T>::run(dp[mt][2 * np + 1], ay[mt], b[2], b[3]);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + nt * 8 + 2 * t4 + (e & 1), h = e >> 1;
          const int row = q0 + wr0 + 16 * mt + g + 8 * h;
          const bool vis = sees(mask, row, key);
          const float p = vis ? exp2f(fmaf(s[mt][nt][e], c, -lr[mt][h])) : 0.0f;
          s[mt][nt][e] = p * (dp[mt][nt][e] - dr[mt][h]);
        }
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      unsigned a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        toA<T>(a[mt], s[mt], kk);
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        unsigned b[4];
        ldsm4t(b, smemAddr(cK + offA<LD>(kk * 16, np * 16, lane)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Mma<T>::run(gq[mt][2 * np], a[mt], b[0], b[1]);
          Mma<T>::run(gq[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads(); // everyone is done with this buffer before it is refilled
  }
  cpAsyncWait<0>();
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    tcStore<T, D>(sQ + (wr0 + 16 * mt) * LD, dq + hq, q0 + wr0 + 16 * mt, Sq,
                  gq[mt], scale, scale);
}

// =============================================================================
// Host side
// =============================================================================
/// DTC_CUDA_ATTENTION=simt forces the SIMT kernels (read once per process).
bool simtForced() {
  static const bool forced = [] {
    const char *e = std::getenv("DTC_CUDA_ATTENTION");
    return e != nullptr && std::strcmp(e, "simt") == 0;
  }();
  return forced;
}

/// Tile shapes of the tensor-core kernels per head dimension: forward (and
/// backward pass 1) blocks of fwdWarps warps, each fwdMT m-tiles of 16 rows,
/// key tiles of fwdBK; dq blocks of 4 warps of dqMT m-tiles, key tiles of
/// dqBK. The best of the variants measured on an H100 (bf16, B 4, H 16,
/// S 2048, causal and full; every variant passed the same accuracy checks):
///   Dh 64:  fwd 8x1 warps/m-tiles 229 TFLOP/s causal, 4x2 (chosen) 241;
///           dq 2 m-tiles x 32 keys was slower than 1 x 64.
///   Dh 128: fwd 4x1 239, 8x1 232, 4x2 with 32-key tiles (chosen) 267;
///           4x2 with 64-key tiles spills.
template <int D> struct TcTiles;
template <> struct TcTiles<64> {
  static constexpr int fwdWarps = 4, fwdMT = 2, fwdBK = 64, dqMT = 1, dqBK = 64;
};
template <> struct TcTiles<128> {
  static constexpr int fwdWarps = 4, fwdMT = 2, fwdBK = 32, dqMT = 1, dqBK = 64;
};

struct Dims {
  /// G: query heads per key/value head (grouped-query attention; 1:
  /// ordinary); k and v hold BH / G heads.
  int BH = 0, G = 1, Sq = 0, Sk = 0, D = 0;
  bool causal = false;
  DType dtype = DType::F32;
  float scale = 1.0f;
};

int toInt(long long x, const char *what) {
  if (x < 0 || x > INT_MAX)
    throw Error(std::string("cuda attention: ") + what + " " +
                std::to_string(x) +
                " does not fit the kernels' 32-bit indices");
  return int(x);
}

Dims dimsOf(const KernelArgs &a) {
  const TensorArg &q = a.in[0], &k = a.in[1];
  Dims d;
  d.BH = toInt((long long)q.shape[0] * q.shape[1], "B*H");
  d.G = toInt(q.shape[1] / k.shape[1], "H/Hkv"); // the rule: Hkv divides H
  d.Sq = toInt(q.shape[2], "Sq");
  d.Sk = toInt(k.shape[2], "Sk");
  d.D = toInt(q.shape[3], "Dh");
  d.causal = attrBool(*a.attrs, "causal");
  d.dtype = q.dtype;
  d.scale = float(1.0 / std::sqrt(double(d.D))); // as kernels/cpu/Attention.cpp
  // Every row (and B*H*S*Dh element offset within a head) fits 32 bits;
  // offsets across heads are 64-bit in the kernels.
  toInt((long long)std::max(d.Sq, d.Sk) * d.D, "S*Dh");
  return d;
}

unsigned blocksFor(long long n, const char *kernel) {
  if (n > INT_MAX)
    throw Error(std::string("cuda ") + kernel + ": too many blocks");
  return unsigned(n);
}

size_t gradWorkspace(const KernelArgs &a) {
  const TensorArg &q = a.in[0];
  return size_t(2) * size_t(q.shape[0] * q.shape[1] * q.shape[2]) *
         sizeof(float);
}

/// The four kernels of this file, as bound.
enum class Kind { Forward, Grad, BlockForward, BlockGrad };
bool isGrad(Kind k) { return k == Kind::Grad || k == Kind::BlockGrad; }

/// attention_block_grad's row statistics from the whole attention's y and
/// logsumexp (no recomputation): dsum = rowsum(dy * y), and the logsumexp
/// in the form the backward kernels read (natural log for SIMT, times
/// log2(e) for tensor cores). A row that saw no key (-inf) becomes +inf, so
/// every p = e^(s - lse) of it is 0: no gradient, as on the CPU. One warp
/// per row.
template <class T>
__global__ void
blockGradStats(const T *__restrict__ dy, const T *__restrict__ y,
               const float *__restrict__ lse, float *__restrict__ lseOut,
               float *__restrict__ dsum, long long rows, int D,
               float lseFactor) {
  const long long row =
      (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows)
    return;
  const T *a = dy + row * D, *b = y + row * D;
  float acc = 0.0f;
  for (int d = lane; d < D; d += 32)
    acc = fmaf(toF(a[d]), toF(b[d]), acc);
  acc = warpSum(acc);
  if (lane == 0) {
    const float l = lse[row];
    dsum[row] = acc;
    lseOut[row] = l == -INFINITY ? INFINITY : l * lseFactor;
  }
}

/// Raises the dynamic shared memory limit of the tensor-core kernels for
/// (T, D) on the current device; false when the device cannot hold them.
template <class T, int D, class C = TcTiles<D>> bool prepareTc(Kind kind) {
  int dev = 0, optin = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                               dev),
        "cudaDeviceGetAttribute");
  constexpr int fwdBytes =
      fwdTcSmem<D, 16 * C::fwdMT * C::fwdWarps, C::fwdBK>();
  constexpr int dqBytes = dqTcSmem<D, 64 * C::dqMT, C::dqBK>();
  const int need = isGrad(kind) ? std::max({kind == Kind::Grad ? fwdBytes : 0,
                                            dkvTcSmem<D>(), dqBytes})
                                : fwdBytes;
  if (optin < need)
    return false;
  auto fwd = [&](auto kernel, const char *what) {
    check(cudaFuncSetAttribute(
              kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, fwdBytes),
          what);
  };
  switch (kind) {
  case Kind::Forward:
    fwd(attnFwdTc<T, D, C::fwdWarps, C::fwdMT, C::fwdBK, kFwdOut>,
        "cudaFuncSetAttribute(attention)");
    return true;
  case Kind::BlockForward:
    fwd(attnFwdTc<T, D, C::fwdWarps, C::fwdMT, C::fwdBK, kFwdBlock>,
        "cudaFuncSetAttribute(attention_block)");
    return true;
  case Kind::Grad:
    fwd(attnFwdTc<T, D, C::fwdWarps, C::fwdMT, C::fwdBK, kFwdStats>,
        "cudaFuncSetAttribute(attention_grad stats)");
    break;
  case Kind::BlockGrad:
    break;
  }
  check(cudaFuncSetAttribute(attnDkvTc<T, D>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             dkvTcSmem<D>()),
        "cudaFuncSetAttribute(attention_grad dk dv)");
  check(cudaFuncSetAttribute(attnDqTc<T, D, C::dqMT, C::dqBK>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             dqBytes),
        "cudaFuncSetAttribute(attention_grad dq)");
  return true;
}

/// attention_block's extra operands (all null for attention).
template <class T> struct BlockIo {
  Offsets off;
  const T *yacc = nullptr; ///< the running output, or null
  const float *lacc = nullptr;
  float *lse = nullptr; ///< the merged logsumexp (attention_block's output)
};

// ---- SIMT launches
// -----------------------------------------------------------
template <class T>
void runFwdSimt(const Dims &d, const T *q, const T *k, const T *v, T *out,
                const BlockIo<T> &io, cudaStream_t st) {
  const int nQT = (d.Sq + kST - 1) / kST, nCC = (d.D + kFwdCols - 1) / kFwdCols;
  const int width = std::min(d.D, kFwdCols), NC = 2 * ((width + kSC - 1) / kSC);
  const unsigned blocks = blocksFor((long long)nQT * d.BH * nCC, "attention");
  auto go = [&](auto kernel) {
    kernel<<<blocks, kSimtThreads, 0, st>>>(
        q, k, v, out, d.BH, d.G, d.Sq, d.Sk, d.D, int(d.causal), d.scale, nQT,
        nCC, io.off, io.yacc, io.lacc, io.lse);
  };
  switch (NC) {
  case 2:
    go(attnFwdSimt<T, 2>);
    break;
  case 4:
    go(attnFwdSimt<T, 4>);
    break;
  case 6:
    go(attnFwdSimt<T, 6>);
    break;
  default:
    go(attnFwdSimt<T, 8>);
    break;
  }
  checkLaunch("attention");
}

/// The dk/dv and dq kernels of the SIMT backward, from the row statistics
/// (natural-log logsumexp and dsum) already in the workspace.
template <class T>
void runGradSimtTail(const Dims &d, const T *q, const T *k, const T *v,
                     const T *dy, T *dq, T *dk, T *dv, const float *lse,
                     const float *dsum, Offsets off, cudaStream_t st) {
  const int nQT = (d.Sq + kST - 1) / kST, nKT = (d.Sk + kST - 1) / kST;
  if (d.Sk > 0) {
    const int nCC = (d.D + kKvCols - 1) / kKvCols;
    const int width = std::min(d.D, kKvCols),
              NC = 2 * ((width + kSC - 1) / kSC);
    const unsigned blocks =
        blocksFor((long long)nKT * (d.BH / d.G) * nCC, "attention_grad");
    auto go = [&](auto kernel) {
      kernel<<<blocks, kSimtThreads, 0, st>>>(q, k, v, dy, lse, dsum, dk, dv,
                                              d.BH, d.G, d.Sq, d.Sk, d.D,
                                              int(d.causal), d.scale, nCC, off);
    };
    if (NC == 2)
      go(attnDkvSimt<T, 2>);
    else
      go(attnDkvSimt<T, 4>);
    checkLaunch("attention_grad");
  }
  if (d.Sq > 0) {
    const int nCC = (d.D + kFwdCols - 1) / kFwdCols;
    const int width = std::min(d.D, kFwdCols),
              NC = 2 * ((width + kSC - 1) / kSC);
    const unsigned blocks =
        blocksFor((long long)nQT * d.BH * nCC, "attention_grad");
    auto go = [&](auto kernel) {
      kernel<<<blocks, kSimtThreads, 0, st>>>(
          q, k, v, dy, lse, dsum, dq, d.BH, d.G, d.Sq, d.Sk, d.D, int(d.causal),
          d.scale, nQT, nCC, off);
    };
    switch (NC) {
    case 2:
      go(attnDqSimt<T, 2>);
      break;
    case 4:
      go(attnDqSimt<T, 4>);
      break;
    case 6:
      go(attnDqSimt<T, 6>);
      break;
    default:
      go(attnDqSimt<T, 8>);
      break;
    }
    checkLaunch("attention_grad");
  }
}

template <class T>
void runGradSimt(const Dims &d, const T *q, const T *k, const T *v, const T *dy,
                 T *dq, T *dk, T *dv, float *lse, float *dsum,
                 cudaStream_t st) {
  const int nQT = (d.Sq + kST - 1) / kST;
  if (d.Sq > 0) {
    const unsigned blocks = blocksFor((long long)nQT * d.BH, "attention_grad");
    attnStatsSimt<T><<<blocks, kSimtThreads, 0, st>>>(
        q, k, v, dy, lse, dsum, d.BH, d.G, d.Sq, d.Sk, d.D, int(d.causal),
        d.scale, nQT);
    checkLaunch("attention_grad");
  }
  runGradSimtTail<T>(d, q, k, v, dy, dq, dk, dv, lse, dsum, Offsets{}, st);
}

// ---- tensor-core launches
// ----------------------------------------------------
template <class T, int D, class C = TcTiles<D>>
void runFwdTc(const Dims &d, const T *q, const T *k, const T *v, T *out,
              const BlockIo<T> &io, cudaStream_t st) {
  constexpr int BQ = 16 * C::fwdMT * C::fwdWarps;
  const int nQT = (d.Sq + BQ - 1) / BQ;
  const unsigned blocks = blocksFor((long long)nQT * d.BH, "attention");
  auto go = [&](auto kernel) {
    kernel<<<blocks, C::fwdWarps * 32, fwdTcSmem<D, BQ, C::fwdBK>(), st>>>(
        q, k, v, out, nullptr, io.lse, nullptr, d.BH, d.G, d.Sq, d.Sk,
        int(d.causal), d.scale, nQT, io.off, io.yacc, io.lacc);
  };
  if (io.lse)
    go(attnFwdTc<T, D, C::fwdWarps, C::fwdMT, C::fwdBK, kFwdBlock>);
  else
    go(attnFwdTc<T, D, C::fwdWarps, C::fwdMT, C::fwdBK, kFwdOut>);
  checkLaunch("attention");
}

/// The dk/dv and dq kernels of the tensor-core backward, from the log2
/// row statistics already in the workspace.
template <class T, int D, class C = TcTiles<D>>
void runGradTcTail(const Dims &d, const T *q, const T *k, const T *v,
                   const T *dy, T *dq, T *dk, T *dv, const float *lse2,
                   const float *dsum, Offsets off, cudaStream_t st) {
  if (d.Sk > 0) {
    const int nKT = (d.Sk + 63) / 64;
    const unsigned blocks =
        blocksFor((long long)nKT * (d.BH / d.G), "attention_grad");
    attnDkvTc<T, D><<<blocks, 128, dkvTcSmem<D>(), st>>>(
        q, k, v, dy, lse2, dsum, dk, dv, d.BH, d.G, d.Sq, d.Sk, int(d.causal),
        d.scale, off);
    checkLaunch("attention_grad");
  }
  if (d.Sq > 0) {
    constexpr int BQ = 64 * C::dqMT;
    const int nQT = (d.Sq + BQ - 1) / BQ;
    const unsigned blocks = blocksFor((long long)nQT * d.BH, "attention_grad");
    attnDqTc<T, D, C::dqMT, C::dqBK>
        <<<blocks, 128, dqTcSmem<D, BQ, C::dqBK>(), st>>>(
            q, k, v, dy, lse2, dsum, dq, d.BH, d.G, d.Sq, d.Sk, int(d.causal),
            d.scale, nQT, off);
    checkLaunch("attention_grad");
  }
}

template <class T, int D, class C = TcTiles<D>>
void runGradTc(const Dims &d, const T *q, const T *k, const T *v, const T *dy,
               T *dq, T *dk, T *dv, float *lse2, float *dsum, cudaStream_t st) {
  if (d.Sq > 0) {
    constexpr int BQ = 16 * C::fwdMT * C::fwdWarps;
    const int nQT = (d.Sq + BQ - 1) / BQ;
    const unsigned blocks = blocksFor((long long)nQT * d.BH, "attention_grad");
    attnFwdTc<T, D, C::fwdWarps, C::fwdMT, C::fwdBK, kFwdStats>
        <<<blocks, C::fwdWarps * 32, fwdTcSmem<D, BQ, C::fwdBK>(), st>>>(
            q, k, v, nullptr, dy, lse2, dsum, d.BH, d.G, d.Sq, d.Sk,
            int(d.causal), d.scale, nQT, Offsets{}, nullptr, nullptr);
    checkLaunch("attention_grad");
  }
  runGradTcTail<T, D>(d, q, k, v, dy, dq, dk, dv, lse2, dsum, Offsets{}, st);
}

// ---- the bound kernels
// -------------------------------------------------------
/// Operands: attention (q, k, v) -> y; attention_grad (q, k, v, dy) -> dq,
/// dk, dv; attention_block (q, k, v, q_offset, k_offset[, y_acc, lse_acc])
/// -> y, lse; attention_block_grad (q, k, v, q_offset, k_offset, dy, y, lse)
/// -> dq, dk, dv.
class AttentionLaunch final : public Launch {
public:
  AttentionLaunch(const KernelArgs &a, const Context &ctx, Kind kind)
      : kind_(kind), d_(dimsOf(a)) {
    tc_ = !simtForced() && ctx.computeCapability >= 80 &&
          (d_.dtype == DType::BF16 || d_.dtype == DType::F16) &&
          (d_.D == 64 || d_.D == 128);
    if (tc_) {
      if (d_.dtype == DType::BF16)
        tc_ = d_.D == 64 ? prepareTc<__nv_bfloat16, 64>(kind)
                         : prepareTc<__nv_bfloat16, 128>(kind);
      else
        tc_ = d_.D == 64 ? prepareTc<__half, 64>(kind)
                         : prepareTc<__half, 128>(kind);
    }
  }

  void run(const KernelArgs &a, const Context &ctx) override {
    if (isGrad(kind_))
      runGrad(a, ctx);
    else
      runFwd(a, ctx);
  }

private:
  bool block() const {
    return kind_ == Kind::BlockForward || kind_ == Kind::BlockGrad;
  }
  /// The tensor-core kernels read the q/k/v-typed operands 16 bytes at a
  /// time (the offsets and row statistics are read one element at a time).
  bool useTc(const KernelArgs &a) const {
    if (!tc_)
      return false;
    for (const TensorArg &t : a.in)
      if (t.dtype == d_.dtype && !alignedTo(t.data, 16))
        return false;
    for (const TensorArg &t : a.out)
      if (t.dtype == d_.dtype && !alignedTo(t.data, 16))
        return false;
    return true;
  }
  Offsets offsets(const KernelArgs &a) const {
    if (!block())
      return {};
    return {a.in[3].as<long long>(), a.in[4].as<long long>(),
            attrIntOr(*a.attrs, "position_stride", 1),
            attrIntOr(*a.attrs, "zigzag_length", 0)};
  }

  void runFwd(const KernelArgs &a, const Context &ctx) {
    if (a.out[0].numel == 0)
      return;
    const bool tc = useTc(a);
    dispatchFloat(d_.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T *q = a.in[0].as<T>(), *k = a.in[1].as<T>(), *v = a.in[2].as<T>();
      T *out = a.out[0].as<T>();
      BlockIo<T> io;
      if (block()) {
        io.off = offsets(a);
        if (a.in.size() > 5) {
          io.yacc = a.in[5].as<T>();
          io.lacc = a.in[6].as<float>();
        }
        io.lse = a.out[1].as<float>();
      }
      if constexpr (!std::is_same_v<T, float>) {
        if (tc) {
          if (d_.D == 64)
            runFwdTc<T, 64>(d_, q, k, v, out, io, ctx.stream);
          else
            runFwdTc<T, 128>(d_, q, k, v, out, io, ctx.stream);
          return;
        }
      }
      runFwdSimt<T>(d_, q, k, v, out, io, ctx.stream);
    });
  }

  void runGrad(const KernelArgs &a, const Context &ctx) {
    if (a.out[0].numel == 0 && a.out[1].numel == 0)
      return; // B*H*Dh == 0 or Sq == Sk == 0
    const size_t need = gradWorkspace(a);
    if (need > 0 && (ctx.workspace == nullptr || ctx.workspaceBytes < need))
      throw Error(std::string("cuda ") +
                  (block() ? "attention_block_grad" : "attention_grad") +
                  ": the workspace holds " +
                  std::to_string(ctx.workspaceBytes) + " bytes, needs " +
                  std::to_string(need));
    float *lse = static_cast<float *>(ctx.workspace);
    float *dsum = lse + (long long)d_.BH * d_.Sq;
    const bool tc = useTc(a);
    dispatchFloat(d_.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T *q = a.in[0].as<T>(), *k = a.in[1].as<T>(), *v = a.in[2].as<T>();
      T *dq = a.out[0].as<T>(), *dk = a.out[1].as<T>(), *dv = a.out[2].as<T>();
      if (block()) {
        const T *dy = a.in[5].as<T>(), *y = a.in[6].as<T>();
        const long long rows = (long long)d_.BH * d_.Sq;
        if (rows > 0) {
          constexpr int kWarps = 8;
          blockGradStats<T><<<blocksFor((rows + kWarps - 1) / kWarps,
                                        "attention_block_grad"),
                              kWarps * 32, 0, ctx.stream>>>(
              dy, y, a.in[7].as<float>(), lse, dsum, rows, d_.D,
              tc ? kLog2e : 1.0f);
          checkLaunch("attention_block_grad");
        }
        if constexpr (!std::is_same_v<T, float>) {
          if (tc) {
            if (d_.D == 64)
              runGradTcTail<T, 64>(d_, q, k, v, dy, dq, dk, dv, lse, dsum,
                                   offsets(a), ctx.stream);
            else
              runGradTcTail<T, 128>(d_, q, k, v, dy, dq, dk, dv, lse, dsum,
                                    offsets(a), ctx.stream);
            return;
          }
        }
        runGradSimtTail<T>(d_, q, k, v, dy, dq, dk, dv, lse, dsum, offsets(a),
                           ctx.stream);
        return;
      }
      const T *dy = a.in[3].as<T>();
      if constexpr (!std::is_same_v<T, float>) {
        if (tc) {
          if (d_.D == 64)
            runGradTc<T, 64>(d_, q, k, v, dy, dq, dk, dv, lse, dsum,
                             ctx.stream);
          else
            runGradTc<T, 128>(d_, q, k, v, dy, dq, dk, dv, lse, dsum,
                              ctx.stream);
          return;
        }
      }
      runGradSimt<T>(d_, q, k, v, dy, dq, dk, dv, lse, dsum, ctx.stream);
    });
  }

  Kind kind_;
  Dims d_;
  bool tc_ = false;
};

std::unique_ptr<Launch> bindAttention(const KernelArgs &a, const Context &ctx) {
  return std::make_unique<AttentionLaunch>(a, ctx, Kind::Forward);
}
std::unique_ptr<Launch> bindAttentionGrad(const KernelArgs &a,
                                          const Context &ctx) {
  return std::make_unique<AttentionLaunch>(a, ctx, Kind::Grad);
}
std::unique_ptr<Launch> bindAttentionBlock(const KernelArgs &a,
                                           const Context &ctx) {
  return std::make_unique<AttentionLaunch>(a, ctx, Kind::BlockForward);
}
std::unique_ptr<Launch> bindAttentionBlockGrad(const KernelArgs &a,
                                               const Context &ctx) {
  return std::make_unique<AttentionLaunch>(a, ctx, Kind::BlockGrad);
}

} // namespace

const std::vector<Entry> &attentionKernels() {
  static const std::vector<Entry> entries = {
      {"attention", nullptr, bindAttention, nullptr},
      {"attention_grad", nullptr, bindAttentionGrad, gradWorkspace},
      {"attention_block", nullptr, bindAttentionBlock, nullptr},
      {"attention_block_grad", nullptr, bindAttentionBlockGrad, gradWorkspace},
  };
  return entries;
}

} // namespace dtc::kernels::cuda
