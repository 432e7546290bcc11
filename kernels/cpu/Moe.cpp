//===- Moe.cpp - the mixture-of-experts kernels ---------------------------===//
//
// What each computes is in docs/kernels.md "Mixture of experts". A slot is
// a token's j-th expert choice: experts[t, j] names the expert,
// positions[t, j] the row of that expert's buffer it occupies, -1 where the
// expert was full and the token is dropped.
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "Parallel.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace dtc::kernels::cpu {

std::string badSlot(const char *op, const char *what, int64_t value, int64_t t,
                    int64_t j, int64_t bound);

namespace {

/// The slots of [T, k] i32 tensors, checked against `experts` x `capacity`
/// buffers as they are read (a corrupt slot is one error, never a write
/// outside the buffer).
struct Slots {
  const int32_t *expert, *position;
  int64_t tokens, k, experts, capacity;
  const char *op;

  Slots(const TensorArg &e, const TensorArg &p, int64_t numExperts, int64_t cap,
        const char *name)
      : expert(e.as<int32_t>()), position(p.as<int32_t>()), tokens(e.shape[0]),
        k(e.shape[1]), experts(numExperts), capacity(cap), op(name) {}

  /// The buffer row of slot (t, j), or -1 for a dropped token.
  int64_t row(int64_t t, int64_t j) const {
    const int64_t s = t * k + j, e = expert[s], p = position[s];
    if (e < 0 || e >= experts)
      throw Error(badSlot(op, "expert", e, t, j, experts));
    if (p < -1 || p >= capacity)
      throw Error(badSlot(op, "position", p, t, j, capacity));
    return p < 0 ? -1 : e * capacity + p;
  }
};

} // namespace

/// The CUDA kernels' words for a bad index (kernels/cuda/Registry.cpp).
std::string badSlot(const char *op, const char *what, int64_t value, int64_t t,
                    int64_t j, int64_t bound) {
  return std::string(op) + ": " + what + " " + std::to_string(value) +
         " at position [" + std::to_string(t) + ", " + std::to_string(j) +
         "] is outside [0, " + std::to_string(bound) + ")";
}

namespace {

// Each token's top_k experts by probability (ties: the lower expert index),
// their probabilities renormalised to sum 1, and then, in token order, a
// position in each chosen expert's buffer while it has room.
void kMoeRoute(const KernelArgs &a) {
  const TensorArg &probs = a.in[0];
  const int64_t T = probs.shape[0], E = probs.shape[1];
  const int64_t k = attrInt(*a.attrs, "top_k");
  const int64_t capacity = attrInt(*a.attrs, "capacity");
  const float *p = probs.as<float>();
  int32_t *experts = a.out[0].as<int32_t>(),
          *positions = a.out[1].as<int32_t>();
  float *weights = a.out[2].as<float>();
  parallelFor(contextOf(a), T, 64, [&](int64_t t0, int64_t t1, int) {
    std::vector<char> taken(static_cast<size_t>(E), 0);
    for (int64_t t = t0; t < t1; ++t) {
      const float *row = p + t * E;
      std::fill(taken.begin(), taken.end(), 0);
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) {
        // A NaN never wins a comparison; it is chosen only when nothing
        // else is left, and then its weight carries it on.
        int64_t best = -1;
        for (int64_t e = 0; e < E; ++e)
          if (!taken[size_t(e)] && (best < 0 || row[e] > row[best]))
            best = e;
        taken[size_t(best)] = 1;
        experts[t * k + j] = int32_t(best);
        sum += double(row[best]);
      }
      for (int64_t j = 0; j < k; ++j)
        weights[t * k + j] = float(double(row[experts[t * k + j]]) / sum);
    }
  });
  std::vector<int64_t> used(size_t(E), 0);
  for (int64_t s = 0; s < T * k; ++s) {
    int64_t &count = used[size_t(experts[s])];
    positions[s] = count < capacity ? int32_t(count++) : -1;
  }
}

// dprobs[t, e_j] = (dw_j - sum_i dw_i w_i) / S, S the chosen experts'
// probability sum (the renormalisation's derivative); 0 elsewhere.
void kMoeRouteGrad(const KernelArgs &a) {
  const TensorArg &probs = a.in[0], &experts = a.in[1];
  const int64_t T = probs.shape[0], E = probs.shape[1], k = experts.shape[1];
  const float *p = probs.as<float>(), *dw = a.in[2].as<float>();
  const int32_t *chosen = experts.as<int32_t>();
  float *dp = a.out[0].as<float>();
  std::fill(dp, dp + T * E, 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    const float *row = p + t * E;
    double sum = 0, weighted = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = chosen[t * k + j];
      if (e < 0 || e >= E)
        throw Error(badSlot("moe_route_grad", "expert", e, t, j, E));
      sum += double(row[e]);
    }
    for (int64_t j = 0; j < k; ++j)
      weighted += double(dw[t * k + j]) * double(row[chosen[t * k + j]]);
    weighted /= sum;
    for (int64_t j = 0; j < k; ++j)
      dp[t * E + chosen[t * k + j]] =
          float((double(dw[t * k + j]) - weighted) / sum);
  }
}

// buffer[slot(t, j)] = weights[t, j] * x[t]; rows no token fills are 0.
void kMoeDispatch(const KernelArgs &a) {
  const TensorArg &x = a.in[0], &buffer = a.out[0];
  const int64_t D = x.shape[1];
  const Slots slots(a.in[1], a.in[2], buffer.shape[0], buffer.shape[1],
                    "moe_dispatch");
  const float *xs = x.as<float>(), *w = a.in[3].as<float>();
  float *out = buffer.as<float>();
  std::fill(out, out + buffer.numel, 0.0f);
  // Every filled row belongs to one slot, so tokens write disjoint rows.
  parallelFor(contextOf(a), slots.tokens, 16, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t j = 0; j < slots.k; ++j) {
        const int64_t r = slots.row(t, j);
        if (r < 0)
          continue;
        const float scale = w[t * slots.k + j];
        float *dst = out + r * D;
        const float *src = xs + t * D;
        for (int64_t d = 0; d < D; ++d)
          dst[d] = scale * src[d];
      }
  });
}

// result[t] = sum over the kept slots of weights[t, j] * y[slot(t, j)].
void kMoeCombine(const KernelArgs &a) {
  const TensorArg &y = a.in[0];
  const int64_t D = y.shape[2];
  const Slots slots(a.in[1], a.in[2], y.shape[0], y.shape[1], "moe_combine");
  const float *ys = y.as<float>(), *w = a.in[3].as<float>();
  float *out = a.out[0].as<float>();
  parallelFor(contextOf(a), slots.tokens, 16, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      float *dst = out + t * D;
      std::fill(dst, dst + D, 0.0f);
      for (int64_t j = 0; j < slots.k; ++j) {
        const int64_t r = slots.row(t, j);
        if (r < 0)
          continue;
        const float scale = w[t * slots.k + j];
        const float *src = ys + r * D;
        for (int64_t d = 0; d < D; ++d)
          dst[d] += scale * src[d];
      }
    }
  });
}

// result[t, j] = <a[t], y[slot(t, j)]>, 0 for a dropped token; f32 sums.
void kMoeSlotDot(const KernelArgs &a) {
  const TensorArg &rows = a.in[0], &y = a.in[1];
  const int64_t D = rows.shape[1];
  const Slots slots(a.in[2], a.in[3], y.shape[0], y.shape[1], "moe_slot_dot");
  const float *xs = rows.as<float>(), *ys = y.as<float>();
  float *out = a.out[0].as<float>();
  parallelFor(contextOf(a), slots.tokens, 16, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t j = 0; j < slots.k; ++j) {
        const int64_t r = slots.row(t, j);
        float sum = 0;
        if (r >= 0)
          for (int64_t d = 0; d < D; ++d)
            sum += xs[t * D + d] * ys[r * D + d];
        out[t * slots.k + j] = sum;
      }
  });
}

// fraction[e] = (tokens whose first choice is e) / T.
void kMoeFirstChoiceFraction(const KernelArgs &a) {
  const TensorArg &experts = a.in[0];
  const int64_t T = experts.shape[0], k = experts.shape[1];
  const int64_t E = a.out[0].shape[0];
  const int32_t *chosen = experts.as<int32_t>();
  std::vector<int64_t> count(size_t(E), 0);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t e = chosen[t * k];
    if (e < 0 || e >= E)
      throw Error(badSlot("moe_first_choice_fraction", "expert", e, t, 0, E));
    ++count[size_t(e)];
  }
  float *fraction = a.out[0].as<float>();
  for (int64_t e = 0; e < E; ++e)
    fraction[e] = T > 0 ? float(double(count[size_t(e)]) / double(T)) : 0.0f;
}

} // namespace

const std::vector<Entry> &moeKernels() {
  static const std::vector<Entry> e = {
      {"moe_route", kMoeRoute},
      {"moe_route_grad", kMoeRouteGrad},
      {"moe_dispatch", kMoeDispatch},
      {"moe_combine", kMoeCombine},
      {"moe_slot_dot", kMoeSlotDot},
      {"moe_first_choice_fraction", kMoeFirstChoiceFraction},
  };
  return e;
}

} // namespace dtc::kernels::cpu
