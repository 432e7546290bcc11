//===- Loss.cpp - embedding, cross_entropy, reductions
//---------------------===//
#include "Common.h"
#include "Parallel.h"
#include "VecMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace dtc::kernels::cpu {
namespace {

std::string positionStr(const Shape &shape, int64_t linear) {
  Shape idx(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = linear % shape[i];
    linear /= shape[i];
  }
  return rt::shapeStr(idx);
}

void kEmbedding(const KernelArgs &a) {
  const TensorArg &table = a.in[0], &ids = a.in[1];
  const int64_t V = table.shape[0], D = table.shape[1];
  const float *t = table.as<float>();
  float *y = a.out[0].as<float>();
  for (int64_t p = 0; p < ids.numel; ++p) {
    const int64_t id = intAt(ids, p);
    if (id < 0 || id >= V)
      throw Error("embedding: id " + std::to_string(id) + " at position " +
                  positionStr(ids.shape, p) + " is outside [0, " +
                  std::to_string(V) + ")");
    std::memcpy(y + p * D, t + id * D, size_t(D) * sizeof(float));
  }
}

void kEmbeddingGrad(const KernelArgs &a) {
  const TensorArg &ids = a.in[0], &dy = a.in[1], &dt = a.out[0];
  const int64_t V = dt.shape[0], D = dt.shape[1];
  float *out = dt.as<float>();
  const float *g = dy.as<float>();
  std::fill(out, out + V * D, 0.0f);
  for (int64_t p = 0; p < ids.numel; ++p) {
    const int64_t id = intAt(ids, p);
    if (id < 0 || id >= V)
      throw Error("embedding_grad: id " + std::to_string(id) + " at position " +
                  positionStr(ids.shape, p) + " is outside [0, " +
                  std::to_string(V) + ")");
    float *row = out + id * D;
    const float *gr = g + p * D;
    for (int64_t j = 0; j < D; ++j)
      row[j] += gr[j];
  }
}

int64_t checkedLabel(const TensorArg &labels, int64_t p, int64_t V,
                     const char *op) {
  const int64_t l = intAt(labels, p);
  if (l < 0 || l >= V)
    throw Error(std::string(op) + ": label " + std::to_string(l) +
                " at position " + positionStr(labels.shape, p) +
                " is outside [0, " + std::to_string(V) + ")");
  return l;
}

// log sum_j e^(row[j] - mx) of one row of logits, and (when `probs`) the
// probabilities e^(row[j] - mx) / sum. f32 exponentials (VecMath.h, within
// 1.2e-7), summed over 16 lanes in double.
DTC_VECTOR_CLONES double logSumExpRow(const float *row, int64_t V, float mx,
                                      float *probs) {
  constexpr int kLanes = 16;
  double acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= V; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      acc[l] += double(expF(row[j + l] - mx));
  for (int l = 0; j < V; ++j, ++l)
    acc[l] += double(expF(row[j] - mx));
  double s = 0;
  for (int l = 0; l < kLanes; ++l)
    s += acc[l];
  if (probs) {
    const float inv = float(1.0 / s);
    for (int64_t k = 0; k < V; ++k)
      probs[k] = expF(row[k] - mx) * inv;
  }
  return std::log(s);
}

DTC_VECTOR_CLONES float rowMaxF(const float *row, int64_t V) {
  constexpr int kLanes = 16;
  float m[kLanes];
  for (int l = 0; l < kLanes; ++l)
    m[l] = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= V; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      m[l] = row[j + l] > m[l] ? row[j + l] : m[l];
  for (int l = 0; j < V; ++j, ++l)
    m[l] = row[j] > m[l] ? row[j] : m[l];
  float r = m[0];
  for (int l = 1; l < kLanes; ++l)
    r = m[l] > r ? m[l] : r;
  return r;
}

DTC_VECTOR_CLONES void scaleInto(const float *p, float *d, int64_t V,
                                 float coef) {
  for (int64_t j = 0; j < V; ++j)
    d[j] = p[j] * coef;
}

// Rows per chunk of the loss sum: chunks are summed in order, so the result
// does not depend on the thread count.
constexpr int64_t kRowChunk = 64;

// The loss summed over the kept label positions, then "mean" (over the
// kept positions; 0 when none is kept and some are ignored) or "sum".
void kCrossEntropy(const KernelArgs &a) {
  const TensorArg &logits = a.in[0], &labels = a.in[1];
  const int64_t V = logits.shape.back(), R = labels.numel;
  const float *z = logits.as<float>();
  const IgnoredLabel ignored(*a.attrs);
  const int64_t chunks = (R + kRowChunk - 1) / kRowChunk;
  ScratchVector<double> partial(size_t(chunks), 0.0);
  parallelFor(contextOf(a), chunks, 1, [&](int64_t c0, int64_t c1, int) {
    for (int64_t c = c0; c < c1; ++c) {
      double total = 0;
      for (int64_t r = c * kRowChunk; r < std::min(R, (c + 1) * kRowChunk);
           ++r) {
        if (ignored(intAt(labels, r)))
          continue;
        const int64_t l = checkedLabel(labels, r, V, "cross_entropy");
        const float *row = z + r * V;
        const float mx = rowMaxF(row, V);
        total += logSumExpRow(row, V, mx, nullptr) + mx - row[l];
      }
      partial[size_t(c)] = total;
    }
  });
  double total = 0;
  for (double p : partial)
    total += p;
  const auto reduction = a.attrs->find("reduction");
  if (reduction != a.attrs->end() && *reduction == "sum") {
    a.out[0].as<float>()[0] = float(total);
    return;
  }
  int64_t kept = R;
  if (ignored.set)
    for (int64_t r = 0; r < R; ++r)
      kept -= ignored(intAt(labels, r));
  a.out[0].as<float>()[0] =
      ignored.set && kept == 0 ? 0.0f : float(total / double(kept));
}

void kLabelMask(const KernelArgs &a) {
  const TensorArg &labels = a.in[0];
  const int64_t ignore = attrInt(*a.attrs, "ignore_index");
  float *mask = a.out[0].as<float>();
  for (int64_t r = 0; r < labels.numel; ++r)
    mask[r] = intAt(labels, r) == ignore ? 0.0f : 1.0f;
}

void kCrossEntropyGrad(const KernelArgs &a) {
  const TensorArg &logits = a.in[0], &labels = a.in[1];
  const int64_t V = logits.shape.back(), R = labels.numel;
  const float *z = logits.as<float>();
  const double coef =
      double(a.in[2].as<float>()[0]) * attrNum(*a.attrs, "scale");
  float *dz = a.out[0].as<float>();
  const IgnoredLabel ignored(*a.attrs);
  parallelFor(contextOf(a), R, 16, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      float *drow = dz + r * V;
      if (ignored(intAt(labels, r))) {
        std::fill(drow, drow + V, 0.0f);
        continue;
      }
      const int64_t l = checkedLabel(labels, r, V, "cross_entropy_grad");
      const float *row = z + r * V;
      logSumExpRow(row, V, rowMaxF(row, V), drow); // drow = softmax(row)
      const float pl = drow[l];
      scaleInto(drow, drow, V, float(coef));
      drow[l] = float((double(pl) - 1.0) * coef);
    }
  });
}

template <class T, class Acc>
void reduceLoop(const KernelArgs &a, const Shape &keep, bool mean) {
  const TensorArg &X = a.in[0];
  const int64_t outN = rt::numel(keep);
  ScratchVector<Acc> acc(static_cast<size_t>(outN), Acc(0));
  const T *x = X.as<T>();
  auto plan = planBroadcast<1>(X.shape, {&keep});
  forEachBroadcast<1>(plan, [&](int64_t xo, const std::array<int64_t, 1> &ko,
                                int64_t len, const std::array<int64_t, 1> &st) {
    if (st[0] == 0) {
      Acc s = 0;
      for (int64_t i = 0; i < len; ++i)
        s += Acc(x[xo + i]);
      acc[size_t(ko[0])] += s;
    } else {
      for (int64_t i = 0; i < len; ++i)
        acc[size_t(ko[0] + i)] += Acc(x[xo + i]);
    }
  });
  T *y = a.out[0].as<T>();
  const Acc count = Acc(X.numel / outN);
  for (int64_t i = 0; i < outN; ++i)
    y[i] = mean ? T(acc[size_t(i)] / count) : T(acc[size_t(i)]);
}

Shape keepShape(const KernelArgs &a) {
  Shape keep = a.in[0].shape;
  for (int64_t ax : attrInts(*a.attrs, "axes"))
    keep[size_t(ax)] = 1;
  return keep;
}

void kReduceSum(const KernelArgs &a) {
  const Shape keep = keepShape(a);
  switch (a.in[0].dtype) {
  case DType::F32:
    reduceLoop<float, double>(a, keep, false);
    break;
  case DType::I32:
    reduceLoop<int32_t, int64_t>(a, keep, false);
    break;
  case DType::I64:
    reduceLoop<int64_t, int64_t>(a, keep, false);
    break;
  case DType::BF16:
  case DType::F16:
    break; // never here: the backend hands 16-bit operands over as f32
  }
}

void kReduceMean(const KernelArgs &a) {
  reduceLoop<float, double>(a, keepShape(a), true);
}

} // namespace

const std::vector<Entry> &lossKernels() {
  static const std::vector<Entry> e = {
      {"embedding", kEmbedding},
      {"embedding_grad", kEmbeddingGrad},
      {"cross_entropy", kCrossEntropy},
      {"cross_entropy_grad", kCrossEntropyGrad},
      {"label_mask", kLabelMask},
      {"reduce_sum", kReduceSum},
      {"reduce_mean", kReduceMean},
  };
  return e;
}

} // namespace dtc::kernels::cpu
