//===- Shard.cpp - kernels of the partitioner's local ops
//------------------===//
//
// What one device runs for sharded ops: padding of uneven pieces,
// vocabulary-shard lookups and the vocab-parallel cross entropy pieces
// (docs/kernels.md "Local ops"). shard_offset is not here: it depends on
// the rank, so the executor computes it.
//
//===----------------------------------------------------------------------===//
#include "Common.h"

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

int64_t offsetOf(const TensorArg &t) { return t.as<int64_t>()[0]; }

/// An id or label in [0, vocab), or a run-time error naming it.
int64_t checkedId(const TensorArg &ids, int64_t p, int64_t vocab,
                  const char *op, const char *what) {
  const int64_t id = intAt(ids, p);
  if (id < 0 || id >= vocab)
    throw Error(std::string(op) + ": " + what + " " + std::to_string(id) +
                " at position " + positionStr(ids.shape, p) +
                " is outside [0, " + std::to_string(vocab) + ")");
  return id;
}

/// Copies the common leading block of every dimension, zero elsewhere.
void padRecursive(const char *src, const Shape &in, char *dst, const Shape &out,
                  size_t dim, size_t elem) {
  size_t inner = elem, outInner = elem;
  for (size_t d = dim + 1; d < in.size(); ++d) {
    inner *= size_t(in[d]);
    outInner *= size_t(out[d]);
  }
  const int64_t common = std::min(in[dim], out[dim]);
  if (dim + 1 == in.size()) {
    std::memcpy(dst, src, size_t(common) * elem);
    std::memset(dst + size_t(common) * elem, 0,
                size_t(out[dim] - common) * elem);
    return;
  }
  for (int64_t i = 0; i < common; ++i)
    padRecursive(src + size_t(i) * inner, in, dst + size_t(i) * outInner, out,
                 dim + 1, elem);
  std::memset(dst + size_t(common) * outInner, 0,
              size_t(out[dim] - common) * outInner);
}

void kPad(const KernelArgs &a) {
  const TensorArg &x = a.in[0], &y = a.out[0];
  const size_t elem = rt::dtypeSize(x.dtype);
  if (x.shape.empty()) {
    std::memcpy(y.data, x.data, elem);
    return;
  }
  padRecursive(static_cast<const char *>(x.data), x.shape,
               static_cast<char *>(y.data), y.shape, 0, elem);
}

void kFillPadding(const KernelArgs &a) {
  const TensorArg &x = a.in[0], &y = a.out[0];
  const int64_t axis = attrInt(*a.attrs, "axis"),
                size = attrInt(*a.attrs, "size");
  const float fill = a.attrs->at("fill").get<std::string>() == "zero"
                         ? 0.0f
                         : -std::numeric_limits<float>::infinity();
  if (y.data != x.data)
    std::memcpy(y.data, x.data, size_t(x.numel) * sizeof(float));
  const AxisView v = axisView(x.shape, axis);
  const int64_t first =
      std::max<int64_t>(0, std::min(v.n, size - offsetOf(a.in[1])));
  float *out = y.as<float>();
  for (int64_t o = 0; o < v.outer; ++o)
    std::fill(out + (o * v.n + first) * v.inner, out + (o + 1) * v.n * v.inner,
              fill);
}

void kReduceMax(const KernelArgs &a) {
  const TensorArg &x = a.in[0], &y = a.out[0];
  std::vector<bool> reduced(x.shape.size(), false);
  for (int64_t ax : attrInts(*a.attrs, "axes"))
    reduced[size_t(ax)] = true;
  float *out = y.as<float>();
  std::fill(out, out + y.numel, -std::numeric_limits<float>::infinity());
  const float *in = x.as<float>();
  // Output index of every input element: strides of kept dims.
  std::vector<int64_t> ostride(x.shape.size(), 0);
  int64_t s = 1;
  for (size_t d = x.shape.size(); d-- > 0;)
    if (!reduced[d]) {
      ostride[d] = s;
      s *= x.shape[d];
    }
  std::vector<int64_t> idx(x.shape.size(), 0);
  for (int64_t i = 0; i < x.numel; ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      o += idx[d] * ostride[d];
    const float v = in[i];
    if (v > out[o] || std::isnan(v))
      out[o] = v;
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < x.shape[d])
        break;
      idx[d] = 0;
    }
  }
}

void kEmbeddingShard(const KernelArgs &a) {
  const TensorArg &table = a.in[0], &ids = a.in[1];
  const int64_t rows = table.shape[0], D = table.shape[1],
                off = offsetOf(a.in[2]);
  const int64_t vocab = attrInt(*a.attrs, "vocab");
  const float *t = table.as<float>();
  float *y = a.out[0].as<float>();
  for (int64_t p = 0; p < ids.numel; ++p) {
    const int64_t row = checkedId(ids, p, vocab, "embedding_shard", "id") - off;
    if (row >= 0 && row < rows)
      std::memcpy(y + p * D, t + row * D, size_t(D) * sizeof(float));
    else
      std::fill(y + p * D, y + (p + 1) * D, 0.0f);
  }
}

void kEmbeddingShardGrad(const KernelArgs &a) {
  const TensorArg &ids = a.in[0], &dy = a.in[1], &dt = a.out[0];
  const int64_t rows = dt.shape[0], D = dt.shape[1], off = offsetOf(a.in[2]);
  const int64_t vocab = attrInt(*a.attrs, "vocab");
  float *out = dt.as<float>();
  const float *g = dy.as<float>();
  std::fill(out, out + rows * D, 0.0f);
  for (int64_t p = 0; p < ids.numel; ++p) {
    const int64_t row =
        checkedId(ids, p, vocab, "embedding_shard_grad", "id") - off;
    if (row < 0 || row >= rows)
      continue;
    float *dst = out + row * D;
    const float *src = g + p * D;
    for (int64_t j = 0; j < D; ++j)
      dst[j] += src[j];
  }
}

/// Columns of the shard inside the vocabulary (the rest is padding).
int64_t validColumns(int64_t cols, int64_t vocab, int64_t off) {
  return std::max<int64_t>(0, std::min(cols, vocab - off));
}

void kCrossEntropyShardStats(const KernelArgs &a) {
  const TensorArg &logits = a.in[0], &labels = a.in[1];
  const int64_t cols = logits.shape.back(), R = labels.numel,
                off = offsetOf(a.in[3]);
  const int64_t vocab = attrInt(*a.attrs, "vocab"),
                valid = validColumns(cols, vocab, off);
  const float *z = logits.as<float>(), *mx = a.in[2].as<float>();
  float *sumExp = a.out[0].as<float>(), *target = a.out[1].as<float>();
  const IgnoredLabel ignored(*a.attrs);
  for (int64_t r = 0; r < R; ++r) {
    // An ignored label has no target (its row's loss is masked out after).
    const int64_t col = ignored(intAt(labels, r))
                            ? -1
                            : checkedId(labels, r, vocab,
                                        "cross_entropy_shard_stats", "label") -
                                  off;
    const float *row = z + r * cols;
    double s = 0;
    for (int64_t j = 0; j < valid; ++j)
      s += std::exp(double(row[j]) - mx[r]);
    sumExp[r] = float(s);
    target[r] = col >= 0 && col < valid ? row[col] : 0.0f;
  }
}

void kCrossEntropyShardGrad(const KernelArgs &a) {
  const TensorArg &logits = a.in[0], &labels = a.in[1];
  const int64_t cols = logits.shape.back(), R = labels.numel,
                off = offsetOf(a.in[5]);
  const int64_t vocab = attrInt(*a.attrs, "vocab"),
                valid = validColumns(cols, vocab, off);
  const float *z = logits.as<float>(), *mx = a.in[2].as<float>(),
              *sumExp = a.in[3].as<float>();
  const double coef =
      double(a.in[4].as<float>()[0]) * attrNum(*a.attrs, "scale");
  float *dz = a.out[0].as<float>();
  const IgnoredLabel ignored(*a.attrs);
  for (int64_t r = 0; r < R; ++r) {
    float *drow = dz + r * cols;
    if (ignored(intAt(labels, r))) {
      std::fill(drow, drow + cols, 0.0f);
      continue;
    }
    const int64_t col =
        checkedId(labels, r, vocab, "cross_entropy_shard_grad", "label") - off;
    const float *row = z + r * cols;
    const double inv = 1.0 / double(sumExp[r]);
    for (int64_t j = 0; j < valid; ++j) {
      double p = std::exp(double(row[j]) - mx[r]) * inv;
      if (j == col)
        p -= 1.0;
      drow[j] = float(p * coef);
    }
    std::fill(drow + valid, drow + cols, 0.0f);
  }
}

} // namespace

const std::vector<Entry> &shardKernels() {
  static const std::vector<Entry> e = {
      {"pad", kPad},
      {"fill_padding", kFillPadding},
      {"reduce_max", kReduceMax},
      {"embedding_shard", kEmbeddingShard},
      {"embedding_shard_grad", kEmbeddingShardGrad},
      {"cross_entropy_shard_stats", kCrossEntropyShardStats},
      {"cross_entropy_shard_grad", kCrossEntropyShardGrad},
  };
  return e;
}

} // namespace dtc::kernels::cpu
