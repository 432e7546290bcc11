//===- Attention.cpp - blocked online-softmax attention and its gradient
//---===//
#include "Attention.h"
#include "Common.h"
#include "Gemm.h"
#include "Parallel.h"
#include "VecMath.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace dtc::kernels::cpu {
namespace {

constexpr int kLanes = 16;

// Row helpers, one clone per ISA level. Reductions keep kLanes partial
// results in a fixed order, so they vectorize without reassociating.
DTC_VECTOR_CLONES float rowMax(const float *s, int64_t n) {
  float m[kLanes];
  for (int l = 0; l < kLanes; ++l)
    m[l] = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      m[l] = s[j + l] > m[l] ? s[j + l] : m[l];
  for (int l = 0; j < n; ++j, ++l)
    m[l] = s[j] > m[l] ? s[j] : m[l];
  float r = m[0];
  for (int l = 1; l < kLanes; ++l)
    r = m[l] > r ? m[l] : r;
  return r;
}

// s[j] = e^(s[j] - shift) for j < n; returns their sum.
DTC_VECTOR_CLONES float expShiftSum(float *s, int64_t n, float shift) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float e = expF(s[j + l] - shift);
      s[j + l] = e;
      acc[l] += e;
    }
  for (int l = 0; j < n; ++j, ++l) {
    const float e = expF(s[j] - shift);
    s[j] = e;
    acc[l] += e;
  }
  float r = 0;
  for (int l = 0; l < kLanes; ++l)
    r += acc[l];
  return r;
}

DTC_VECTOR_CLONES void scaleRow(float *x, int64_t n, float f) {
  for (int64_t j = 0; j < n; ++j)
    x[j] *= f;
}

DTC_VECTOR_CLONES float dotRow(const float *a, const float *b, int64_t n) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      acc[l] += a[j + l] * b[j + l];
  for (int l = 0; j < n; ++j, ++l)
    acc[l] += a[j] * b[j];
  float r = 0;
  for (int l = 0; l < kLanes; ++l)
    r += acc[l];
  return r;
}

// ds[j] = p[j] * (ds[j] - d): the softmax gradient of one row (ds holds dp).
DTC_VECTOR_CLONES void softmaxGradRow(const float *p, float *ds, int64_t n,
                                      float d) {
  for (int64_t j = 0; j < n; ++j)
    ds[j] = p[j] * (ds[j] - d);
}

// Keys of tile [c0, c0 + nk) that query row `row` sees: all, or with a
// causal mask those at or before it (may be <= 0). Rows and keys are local
// indices; the mask knows their global positions.
inline int64_t visibleKeys(const CausalMask &mask, int64_t row, int64_t c0,
                           int64_t nk) {
  return std::min(nk, mask.visible(row) - c0);
}

// Keys the rows [r0, r0 + nq) attend to at all: [0, keyEnd) (positions rise
// with the row, so the last row sees the most).
inline int64_t keyEnd(const CausalMask &mask, int64_t r0, int64_t nq) {
  return mask.visible(r0 + nq - 1);
}

// Per-thread scratch of one block of query rows.
struct RowScratch {
  float *s;   // bq x bk tile: scores, then probabilities
  float *dp;  // bq x bk tile (backward): dp, then ds
  float *o;   // bq x D (backward): the recomputed output rows
  float *m;   // bq running maxima
  float *l;   // bq running sums
  float *aux; // bq (backward): rowsum(dy * y)
  // Each piece starts on its own 64-byte line.
  static size_t line(int64_t n) {
    return size_t((n + kLanes - 1) / kLanes * kLanes);
  }
  static size_t floats(const AttentionBlocks &b, int64_t D) {
    static_assert(kLanes == 16, "attentionRowScratchFloats' line");
    return attentionRowScratchFloats(b, D);
  }
  RowScratch(float *base, const AttentionBlocks &b, int64_t D) {
    auto take = [&](int64_t n) {
      float *p = base;
      base += line(n);
      return p;
    };
    s = take(b.rows * b.keys);
    dp = take(b.rows * b.keys);
    o = take(b.rows * D);
    m = take(b.rows);
    l = take(b.rows);
    aux = take(b.rows);
  }
};

// Rows [r0, r0 + nq) of one head: y rows (ldy = D) = softmax(q k^T scale) v,
// with m and l the final row maximum and sum (logsumexp = m + log l).
void forwardRows(const KernelContext &ctx, const float *q, const float *k,
                 const float *v, float *y, int64_t r0, int64_t nq, int64_t D,
                 const CausalMask &mask, float scale, const AttentionBlocks &b,
                 RowScratch &w) {
  const int64_t kEnd = keyEnd(mask, r0, nq);
  std::memset(y, 0, size_t(nq * D) * sizeof(float));
  for (int64_t i = 0; i < nq; ++i) {
    w.m[i] = -std::numeric_limits<float>::infinity();
    w.l[i] = 0.0f;
  }
  for (int64_t c0 = 0; c0 < kEnd; c0 += b.keys) {
    const int64_t nk = std::min(b.keys, kEnd - c0);
    sgemm(ctx, false, true, nq, nk, D, scale, q + r0 * D, D, k + c0 * D, D,
          0.0f, w.s, b.keys);
    for (int64_t i = 0; i < nq; ++i) {
      float *s = w.s + i * b.keys;
      const int64_t lim = visibleKeys(mask, r0 + i, c0, nk);
      if (lim <= 0) {
        std::memset(s, 0, size_t(nk) * sizeof(float));
        continue;
      }
      const float mx = std::max(w.m[i], rowMax(s, lim));
      const float alpha = expF(w.m[i] - mx);
      const float sum = expShiftSum(s, lim, mx);
      if (lim < nk)
        std::memset(s + lim, 0, size_t(nk - lim) * sizeof(float));
      w.l[i] = w.l[i] * alpha + sum;
      if (alpha != 1.0f)
        scaleRow(y + i * D, D, alpha);
      w.m[i] = mx;
    }
    sgemm(ctx, false, false, nq, D, nk, 1.0f, w.s, b.keys, v + c0 * D, D, 1.0f,
          y, D);
  }
  for (int64_t i = 0; i < nq; ++i)
    if (w.l[i] > 0.0f)
      scaleRow(y + i * D, D, 1.0f / w.l[i]);
}

void checkBlocks(const AttentionBlocks &b, int64_t BH, int64_t group) {
  if (b.rows < 1 || b.keys < 1)
    throw Error("attention: block sizes must be positive");
  if (group < 1 || BH % group != 0)
    throw Error("attention: the query heads must divide into groups");
}

// The gradient terms of rows [r0, r0 + nq) of one query head against keys
// [0, kEnd), given each row's logsumexp in w.m and rowsum(dy * y) in w.aux:
// dq rows (overwritten), and the key/value head's dk and dv (added to).
void gradientRows(const KernelContext &ctx, const float *Q, const float *K,
                  const float *V, const float *dY, float *dQ, float *dK,
                  float *dV, int64_t r0, int64_t nq, int64_t D,
                  const CausalMask &mask, float scale, const AttentionBlocks &b,
                  RowScratch &w) {
  const int64_t kEnd = keyEnd(mask, r0, nq);
  std::memset(dQ + r0 * D, 0, size_t(nq * D) * sizeof(float));
  const float *dYb = dY + r0 * D, *Qb = Q + r0 * D;
  for (int64_t c0 = 0; c0 < kEnd; c0 += b.keys) {
    const int64_t nk = std::min(b.keys, kEnd - c0);
    sgemm(ctx, false, true, nq, nk, D, scale, Qb, D, K + c0 * D, D, 0.0f, w.s,
          b.keys);
    for (int64_t i = 0; i < nq; ++i) {
      float *s = w.s + i * b.keys;
      // A row that sees no key at all (logsumexp -inf) has no gradient.
      const int64_t lim =
          w.m[i] == -std::numeric_limits<float>::infinity()
              ? 0
              : std::max<int64_t>(0, visibleKeys(mask, r0 + i, c0, nk));
      expShiftSum(s, lim, w.m[i]); // probabilities
      if (lim < nk)
        std::memset(s + lim, 0, size_t(nk - lim) * sizeof(float));
    }
    // dv += p^T dy ; dp = dy v^T ; ds = p (dp - rowsum(dy y))
    sgemm(ctx, true, false, nk, D, nq, 1.0f, w.s, b.keys, dYb, D, 1.0f,
          dV + c0 * D, D);
    sgemm(ctx, false, true, nq, nk, D, 1.0f, dYb, D, V + c0 * D, D, 0.0f, w.dp,
          b.keys);
    for (int64_t i = 0; i < nq; ++i)
      softmaxGradRow(w.s + i * b.keys, w.dp + i * b.keys, nk, w.aux[i]);
    // dq += scale ds k ; dk += scale ds^T q
    sgemm(ctx, false, false, nq, D, nk, scale, w.dp, b.keys, K + c0 * D, D,
          1.0f, dQ + r0 * D, D);
    sgemm(ctx, true, false, nk, D, nq, scale, w.dp, b.keys, Qb, D, 1.0f,
          dK + c0 * D, D);
  }
}

// One query head's share of attention_grad: its dq, and its terms of the
// (possibly shared) key/value head's dk and dv, added to them. The
// statistics come from a recomputed forward.
void backwardHead(const KernelContext &ctx, const float *Q, const float *K,
                  const float *V, const float *dY, float *dQ, float *dK,
                  float *dV, int64_t Sq, int64_t Sk, int64_t D, bool causal,
                  float scale, const AttentionBlocks &b, RowScratch &w) {
  const CausalMask mask = CausalMask::whole(causal, Sq, Sk);
  for (int64_t r0 = 0; r0 < Sq; r0 += b.rows) {
    const int64_t nq = std::min(b.rows, Sq - r0);
    // The output rows and logsumexp again; rowsum(dy * y) per row.
    forwardRows(ctx, Q, K, V, w.o, r0, nq, D, mask, scale, b, w);
    for (int64_t i = 0; i < nq; ++i) {
      w.aux[i] = dotRow(dY + (r0 + i) * D, w.o + i * D, D);
      w.m[i] += std::log(w.l[i]); // logsumexp
    }
    gradientRows(ctx, Q, K, V, dY, dQ, dK, dV, r0, nq, D, mask, scale, b, w);
  }
}

// Logsumexp of a row from its running maximum and sum (-inf: no key seen).
inline float rowLogSumExp(float m, float l) {
  return l > 0.0f ? m + std::log(l) : -std::numeric_limits<float>::infinity();
}

// Merges a block's normalized output row yb with logsumexp lb into the
// running (ya, la) (either may be empty: -inf), writing y and returning the
// merged logsumexp. y may be ya.
DTC_VECTOR_CLONES float mergeRow(const float *ya, float la, const float *yb,
                                 float lb, float *y, int64_t D) {
  constexpr float none = -std::numeric_limits<float>::infinity();
  if (lb == none) {
    for (int64_t j = 0; j < D; ++j)
      y[j] = ya ? ya[j] : 0.0f;
    return la;
  }
  if (!ya || la == none) {
    for (int64_t j = 0; j < D; ++j)
      y[j] = yb[j];
    return lb;
  }
  const float mx = std::max(la, lb);
  const float lse = mx + std::log(expF(la - mx) + expF(lb - mx));
  const float fa = expF(la - lse), fb = expF(lb - lse);
  for (int64_t j = 0; j < D; ++j)
    y[j] = ya[j] * fa + yb[j] * fb;
  return lse;
}

// Runs `rows(w, bh, kv, r0, nq)` for every block of query rows [r0, r0 + nq)
// of every query head bh, as parallel tasks each with its worker's scratch
// w; kv is the key/value head that query head reads.
template <class Fn>
void forEachRowBlock(KernelContext &ctx, const AttentionBlocks &b, int64_t BH,
                     int64_t Sq, int64_t D, int64_t group, Fn rows) {
  checkBlocks(b, BH, group);
  const int64_t rowBlocks = (Sq + b.rows - 1) / b.rows, tasks = BH * rowBlocks;
  const size_t per = RowScratch::floats(b, D);
  float *ws = ctx.workspace(per * size_t(workersFor(ctx, tasks)));
  parallelTasks(ctx, tasks, [&](int64_t task, int worker) {
    RowScratch w(ws + per * size_t(worker), b, D);
    const int64_t bh = task / rowBlocks, r0 = (task % rowBlocks) * b.rows;
    const int64_t nq = std::min(b.rows, Sq - r0);
    rows(w, bh, bh / group, r0, nq); // (b, h) -> (b, h / group)
  });
}

// Runs `head(w, kv, bh)` for every query head bh of every key/value head
// kv, one task per key/value head: its dk and dv (zeroed first) gather
// every query head's share of its group.
template <class Fn>
void forEachKeyValueHead(KernelContext &ctx, const AttentionBlocks &b,
                         int64_t BH, int64_t Sk, int64_t D, int64_t group,
                         float *dk, float *dv, Fn head) {
  checkBlocks(b, BH, group);
  const size_t per = RowScratch::floats(b, D);
  const int64_t kvHeads = BH / group;
  float *ws = ctx.workspace(per * size_t(workersFor(ctx, kvHeads)));
  parallelTasks(ctx, kvHeads, [&](int64_t kv, int worker) {
    RowScratch w(ws + per * size_t(worker), b, D);
    std::memset(dk + kv * Sk * D, 0, size_t(Sk * D) * sizeof(float));
    std::memset(dv + kv * Sk * D, 0, size_t(Sk * D) * sizeof(float));
    for (int64_t bh = kv * group; bh < (kv + 1) * group; ++bh)
      head(w, kv, bh);
  });
}

float softmaxScale(int64_t D) { return float(1.0 / std::sqrt(double(D))); }

} // namespace

void attentionForward(KernelContext &ctx, const float *q, const float *k,
                      const float *v, float *y, int64_t BH, int64_t Sq,
                      int64_t Sk, int64_t D, bool causal, AttentionBlocks b,
                      int64_t group) {
  const float scale = softmaxScale(D);
  forEachRowBlock(
      ctx, b, BH, Sq, D, group,
      [&](RowScratch &w, int64_t bh, int64_t kv, int64_t r0, int64_t nq) {
        forwardRows(ctx, q + bh * Sq * D, k + kv * Sk * D, v + kv * Sk * D,
                    y + (bh * Sq + r0) * D, r0, nq, D,
                    CausalMask::whole(causal, Sq, Sk), scale, b, w);
      });
}

void attentionBackward(KernelContext &ctx, const float *q, const float *k,
                       const float *v, const float *dy, float *dq, float *dk,
                       float *dv, int64_t BH, int64_t Sq, int64_t Sk, int64_t D,
                       bool causal, AttentionBlocks b, int64_t group) {
  const float scale = softmaxScale(D);
  forEachKeyValueHead(
      ctx, b, BH, Sk, D, group, dk, dv,
      [&](RowScratch &w, int64_t kv, int64_t bh) {
        backwardHead(ctx, q + bh * Sq * D, k + kv * Sk * D, v + kv * Sk * D,
                     dy + bh * Sq * D, dq + bh * Sq * D, dk + kv * Sk * D,
                     dv + kv * Sk * D, Sq, Sk, D, causal, scale, b, w);
      });
}

void attentionBlockForward(KernelContext &ctx, const float *q, const float *k,
                           const float *v, const float *yAcc,
                           const float *lseAcc, float *y, float *lse,
                           int64_t BH, int64_t Sq, int64_t Sk, int64_t D,
                           const CausalMask &mask, AttentionBlocks b,
                           int64_t group) {
  const float scale = softmaxScale(D);
  forEachRowBlock(
      ctx, b, BH, Sq, D, group,
      [&](RowScratch &w, int64_t bh, int64_t kv, int64_t r0, int64_t nq) {
        // The block's own output into w.o, then merged row by row.
        forwardRows(ctx, q + bh * Sq * D, k + kv * Sk * D, v + kv * Sk * D, w.o,
                    r0, nq, D, mask, scale, b, w);
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t row = bh * Sq + r0 + i;
          constexpr float none = -std::numeric_limits<float>::infinity();
          lse[row] = mergeRow(yAcc ? yAcc + row * D : nullptr,
                              lseAcc ? lseAcc[row] : none, w.o + i * D,
                              rowLogSumExp(w.m[i], w.l[i]), y + row * D, D);
        }
      });
}

void attentionBlockBackward(KernelContext &ctx, const float *q, const float *k,
                            const float *v, const float *dy, const float *y,
                            const float *lse, float *dq, float *dk, float *dv,
                            int64_t BH, int64_t Sq, int64_t Sk, int64_t D,
                            const CausalMask &mask, AttentionBlocks b,
                            int64_t group) {
  const float scale = softmaxScale(D);
  forEachKeyValueHead(
      ctx, b, BH, Sk, D, group, dk, dv,
      [&](RowScratch &w, int64_t kv, int64_t bh) {
        for (int64_t r0 = 0; r0 < Sq; r0 += b.rows) {
          const int64_t nq = std::min(b.rows, Sq - r0);
          // The whole attention's statistics instead of a
          // recomputation.
          for (int64_t i = 0; i < nq; ++i) {
            const int64_t row = bh * Sq + r0 + i;
            w.m[i] = lse[row];
            w.aux[i] = dotRow(dy + row * D, y + row * D, D);
          }
          gradientRows(ctx, q + bh * Sq * D, k + kv * Sk * D, v + kv * Sk * D,
                       dy + bh * Sq * D, dq + bh * Sq * D, dk + kv * Sk * D,
                       dv + kv * Sk * D, r0, nq, D, mask, scale, b, w);
        }
      });
}

namespace {

void kAttention(const KernelArgs &a) {
  const TensorArg &q = a.in[0], &k = a.in[1], &v = a.in[2];
  attentionForward(contextOf(a), q.as<float>(), k.as<float>(), v.as<float>(),
                   a.out[0].as<float>(), q.shape[0] * q.shape[1], q.shape[2],
                   k.shape[2], q.shape[3], attrBool(*a.attrs, "causal"),
                   AttentionBlocks{}, q.shape[1] / k.shape[1]);
}

void kAttentionGrad(const KernelArgs &a) {
  const TensorArg &q = a.in[0], &k = a.in[1], &v = a.in[2], &dy = a.in[3];
  attentionBackward(contextOf(a), q.as<float>(), k.as<float>(), v.as<float>(),
                    dy.as<float>(), a.out[0].as<float>(), a.out[1].as<float>(),
                    a.out[2].as<float>(), q.shape[0] * q.shape[1], q.shape[2],
                    k.shape[2], q.shape[3], attrBool(*a.attrs, "causal"),
                    AttentionBlocks{}, q.shape[1] / k.shape[1]);
}

// The positions of a block's queries and keys: operands 3 and 4 hold the
// first row's position (under zigzag, the first chunk's), the attributes the
// layout (docs/design.md "Causal load balancing").
CausalMask blockMask(const KernelArgs &a) {
  const int64_t stride = attrIntOr(*a.attrs, "position_stride", 1),
                zigzag = attrIntOr(*a.attrs, "zigzag_length", 0);
  return CausalMask::make(
      attrBool(*a.attrs, "causal"),
      {a.in[3].as<int64_t>()[0], stride, zigzag, a.in[0].shape[2]},
      {a.in[4].as<int64_t>()[0], stride, zigzag, a.in[1].shape[2]});
}

void kAttentionBlock(const KernelArgs &a) {
  const TensorArg &q = a.in[0], &k = a.in[1], &v = a.in[2];
  const bool merge = a.in.size() > 5;
  attentionBlockForward(
      contextOf(a), q.as<float>(), k.as<float>(), v.as<float>(),
      merge ? a.in[5].as<float>() : nullptr,
      merge ? a.in[6].as<float>() : nullptr, a.out[0].as<float>(),
      a.out[1].as<float>(), q.shape[0] * q.shape[1], q.shape[2], k.shape[2],
      q.shape[3], blockMask(a), AttentionBlocks{}, q.shape[1] / k.shape[1]);
}

void kAttentionBlockGrad(const KernelArgs &a) {
  const TensorArg &q = a.in[0], &k = a.in[1], &v = a.in[2];
  attentionBlockBackward(
      contextOf(a), q.as<float>(), k.as<float>(), v.as<float>(),
      a.in[5].as<float>(), a.in[6].as<float>(), a.in[7].as<float>(),
      a.out[0].as<float>(), a.out[1].as<float>(), a.out[2].as<float>(),
      q.shape[0] * q.shape[1], q.shape[2], k.shape[2], q.shape[3], blockMask(a),
      AttentionBlocks{}, q.shape[1] / k.shape[1]);
}

} // namespace

const std::vector<Entry> &attentionKernels() {
  static const std::vector<Entry> e = {
      {"attention", kAttention},
      {"attention_grad", kAttentionGrad},
      {"attention_block", kAttentionBlock},
      {"attention_block_grad", kAttentionBlockGrad},
  };
  return e;
}

} // namespace dtc::kernels::cpu
