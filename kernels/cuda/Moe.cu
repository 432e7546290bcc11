//===- Moe.cu - the mixture-of-experts kernels (see CudaKernels.h) --------===//
//
// moe_route, moe_route_grad, moe_dispatch, moe_combine, moe_slot_dot and
// moe_first_choice_fraction of docs/kernels.md, computed as
// kernels/cpu/Moe.cpp does:
//
// - moe_route: one thread per token picks its top_k (ties: the lower
//   expert) and renormalises in double; then one thread per expert walks
//   the slots in token order and hands out that expert's rows (the CPU's
//   sequential count, so positions are identical).
// - dispatch writes each kept slot's row once (no atomics); combine sums a
//   token's slots in slot order; slot_dot is one warp per slot (a warp sum,
//   so its last bits may differ from the CPU's sequential sum).
// - a slot naming an expert outside [0, E) or a row outside [-1, C) is
//   reported as a bad index (DeviceError) and skipped.
// - operands of any float dtype compute in f32 and round their results.
//
//===----------------------------------------------------------------------===//
#include "Common.cuh"

namespace dtc::kernels::cuda {
namespace {

/// A float operand whose dtype is known only at run time (the slot
/// weights may differ from the rows' dtype).
struct AnyFloat {
  const void *p = nullptr;
  int code = 0; // 0 f32, 1 bf16, 2 f16
};
AnyFloat anyFloat(const TensorArg &t) {
  AnyFloat f{t.data, 0};
  if (t.dtype == DType::BF16)
    f.code = 1;
  else if (t.dtype == DType::F16)
    f.code = 2;
  else if (t.dtype != DType::F32)
    throw Error("cuda kernel: expected a float dtype, got " +
                std::string(rt::dtypeName(t.dtype)));
  return f;
}
__device__ __forceinline__ float load(AnyFloat f, long long i) {
  if (f.code == 1)
    return toF(static_cast<const __nv_bfloat16 *>(f.p)[i]);
  if (f.code == 2)
    return toF(static_cast<const __half *>(f.p)[i]);
  return static_cast<const float *>(f.p)[i];
}

/// Slots [T, k] into buffers of `experts` x `capacity` rows.
struct SlotView {
  const int32_t *expert, *position;
  long long tokens, k, experts, capacity;
  IndexCheck expertCheck, positionCheck;
};
SlotView slotView(const TensorArg &e, const TensorArg &p, long long experts,
                  long long capacity, const char *op) {
  return {e.as<int32_t>(),
          p.as<int32_t>(),
          e.shape[0],
          e.shape[1],
          experts,
          capacity,
          makeIndexCheck(op, "expert", e.shape, experts),
          makeIndexCheck(op, "position", p.shape, capacity)};
}
/// The buffer row of slot s, -1 for a dropped token or a bad slot (reported
/// in the CPU kernel's words: expert first, then position).
__device__ __forceinline__ long long slotRow(const SlotView &v, long long s,
                                             DeviceError *err) {
  const long long e = v.expert[s], p = v.position[s];
  if (e < 0 || e >= v.experts) {
    reportBadIndex(err, v.expertCheck, e, s);
    return -1;
  }
  if (p < -1 || p >= v.capacity) {
    reportBadIndex(err, v.positionCheck, p, s);
    return -1;
  }
  return p < 0 ? -1 : e * v.capacity + p;
}

// ---- moe_route -------------------------------------------------------------
template <class T>
__global__ void topKKernel(const T *probs, long long T_, long long E,
                           long long k, int32_t *experts, T *weights) {
  DTC_GRID_STRIDE(t, T_) {
    const T *row = probs + t * E;
    double sum = 0;
    for (long long j = 0; j < k; ++j) {
      long long best = -1;
      for (long long e = 0; e < E; ++e) {
        bool taken = false;
        for (long long i = 0; i < j; ++i)
          taken |= experts[t * k + i] == e;
        if (!taken && (best < 0 || toF(row[e]) > toF(row[best])))
          best = e;
      }
      experts[t * k + j] = int32_t(best);
      sum += double(toF(row[best]));
    }
    for (long long j = 0; j < k; ++j)
      weights[t * k + j] =
          fromF<T>(float(double(toF(row[experts[t * k + j]])) / sum));
  }
}

__global__ void positionsKernel(const int32_t *experts, long long slots,
                                long long E, long long capacity,
                                int32_t *positions) {
  DTC_GRID_STRIDE(e, E) {
    long long used = 0;
    for (long long s = 0; s < slots; ++s)
      if (experts[s] == e)
        positions[s] = used < capacity ? int32_t(used++) : -1;
  }
}

void kMoeRoute(const KernelArgs &a, const Context &ctx) {
  const TensorArg &probs = a.in[0];
  const long long T = probs.shape[0], E = probs.shape[1];
  const long long k = attrInt(*a.attrs, "top_k");
  const long long capacity = attrInt(*a.attrs, "capacity");
  if (T <= 0)
    return;
  dispatchFloat(probs.dtype, [&](auto tag) {
    using F = decltype(tag);
    topKKernel<F><<<gridFor(T), kThreads, 0, ctx.stream>>>(
        probs.as<F>(), T, E, k, a.out[0].as<int32_t>(), a.out[2].as<F>());
    checkLaunch("moe_route");
  });
  positionsKernel<<<gridFor(E, 32), 32, 0, ctx.stream>>>(
      a.out[0].as<int32_t>(), T * k, E, capacity, a.out[1].as<int32_t>());
  checkLaunch("moe_route");
}

// ---- moe_route_grad --------------------------------------------------------
template <class T>
__global__ void routeGradKernel(const T *probs, const int32_t *experts,
                                AnyFloat dw, long long T_, long long E,
                                long long k, IndexCheck check, DeviceError *err,
                                T *dprobs) {
  DTC_GRID_STRIDE(t, T_) {
    const T *row = probs + t * E;
    T *out = dprobs + t * E;
    for (long long e = 0; e < E; ++e)
      out[e] = fromF<T>(0.0f);
    double sum = 0, weighted = 0;
    bool bad = false;
    for (long long j = 0; j < k; ++j) {
      const long long e = experts[t * k + j];
      if (e < 0 || e >= E) {
        reportBadIndex(err, check, e, t * k + j);
        bad = true;
        break;
      }
      sum += double(toF(row[e]));
    }
    if (bad)
      continue;
    for (long long j = 0; j < k; ++j)
      weighted +=
          double(load(dw, t * k + j)) * double(toF(row[experts[t * k + j]]));
    weighted /= sum;
    for (long long j = 0; j < k; ++j)
      out[experts[t * k + j]] =
          fromF<T>(float((double(load(dw, t * k + j)) - weighted) / sum));
  }
}

void kMoeRouteGrad(const KernelArgs &a, const Context &ctx) {
  const TensorArg &probs = a.in[0], &experts = a.in[1];
  const long long T = probs.shape[0], E = probs.shape[1], k = experts.shape[1];
  if (T <= 0)
    return;
  dispatchFloat(probs.dtype, [&](auto tag) {
    using F = decltype(tag);
    routeGradKernel<F><<<gridFor(T), kThreads, 0, ctx.stream>>>(
        probs.as<F>(), experts.as<int32_t>(), anyFloat(a.in[2]), T, E, k,
        makeIndexCheck("moe_route_grad", "expert", experts.shape, E), ctx.error,
        a.out[0].as<F>());
    checkLaunch("moe_route_grad");
  });
}

// ---- moe_dispatch, moe_combine, moe_slot_dot -------------------------------
template <class T>
__global__ void dispatchKernel(const T *x, SlotView v, AnyFloat w, long long D,
                               DeviceError *err, T *buffer) {
  DTC_GRID_STRIDE(i, v.tokens * v.k * D) {
    const long long s = i / D, d = i - s * D;
    const long long r = slotRow(v, s, err);
    if (r >= 0)
      buffer[r * D + d] = fromF<T>(load(w, s) * toF(x[(s / v.k) * D + d]));
  }
}

void kMoeDispatch(const KernelArgs &a, const Context &ctx) {
  const TensorArg &x = a.in[0], &buffer = a.out[0];
  const long long D = x.shape[1];
  const SlotView v = slotView(a.in[1], a.in[2], buffer.shape[0],
                              buffer.shape[1], "moe_dispatch");
  if (buffer.numel > 0)
    check(cudaMemsetAsync(buffer.data, 0,
                          size_t(buffer.numel) * rt::dtypeSize(buffer.dtype),
                          ctx.stream),
          "moe_dispatch");
  if (v.tokens * v.k * D <= 0)
    return;
  dispatchFloat(x.dtype, [&](auto tag) {
    using F = decltype(tag);
    dispatchKernel<F><<<gridFor(v.tokens * v.k * D), kThreads, 0, ctx.stream>>>(
        x.as<F>(), v, anyFloat(a.in[3]), D, ctx.error, buffer.as<F>());
    checkLaunch("moe_dispatch");
  });
}

template <class T>
__global__ void combineKernel(const T *y, SlotView v, AnyFloat w, long long D,
                              DeviceError *err, T *out) {
  DTC_GRID_STRIDE(i, v.tokens * D) {
    const long long t = i / D, d = i - t * D;
    float sum = 0;
    for (long long j = 0; j < v.k; ++j) {
      const long long r = slotRow(v, t * v.k + j, err);
      if (r >= 0)
        sum += load(w, t * v.k + j) * toF(y[r * D + d]);
    }
    out[i] = fromF<T>(sum);
  }
}

void kMoeCombine(const KernelArgs &a, const Context &ctx) {
  const TensorArg &y = a.in[0], &out = a.out[0];
  const long long D = y.shape[2];
  const SlotView v =
      slotView(a.in[1], a.in[2], y.shape[0], y.shape[1], "moe_combine");
  if (out.numel <= 0)
    return;
  dispatchFloat(y.dtype, [&](auto tag) {
    using F = decltype(tag);
    combineKernel<F><<<gridFor(out.numel), kThreads, 0, ctx.stream>>>(
        y.as<F>(), v, anyFloat(a.in[3]), D, ctx.error, out.as<F>());
    checkLaunch("moe_combine");
  });
}

template <class T>
__global__ void slotDotKernel(const T *rows, const T *y, SlotView v,
                              long long D, DeviceError *err, T *out) {
  GroupIndex<32> g;
  for (long long s = g.first; s < v.tokens * v.k; s += g.step) {
    const long long r = slotRow(v, s, err), t = s / v.k;
    float sum = 0;
    if (r >= 0)
      for (long long d = g.lane; d < D; d += 32)
        sum += toF(rows[t * D + d]) * toF(y[r * D + d]);
    sum = warpSum(sum);
    if (g.lane == 0)
      out[s] = fromF<T>(sum);
  }
}

void kMoeSlotDot(const KernelArgs &a, const Context &ctx) {
  const TensorArg &rows = a.in[0], &y = a.in[1];
  const SlotView v =
      slotView(a.in[2], a.in[3], y.shape[0], y.shape[1], "moe_slot_dot");
  if (v.tokens * v.k <= 0)
    return;
  dispatchFloat(rows.dtype, [&](auto tag) {
    using F = decltype(tag);
    slotDotKernel<F>
        <<<blocksForGroups<32>(v.tokens * v.k), kThreads, 0, ctx.stream>>>(
            rows.as<F>(), y.as<F>(), v, rows.shape[1], ctx.error,
            a.out[0].as<F>());
    checkLaunch("moe_slot_dot");
  });
}

// ---- moe_first_choice_fraction ---------------------------------------------
__global__ void fractionKernel(const int32_t *experts, long long T_,
                               long long k, long long E, IndexCheck check,
                               DeviceError *err, float *fraction) {
  DTC_GRID_STRIDE(e, E) {
    long long count = 0;
    for (long long t = 0; t < T_; ++t) {
      const long long first = experts[t * k];
      if (first < 0 || first >= E)
        reportBadIndex(err, check, first, t * k);
      count += first == e;
    }
    fraction[e] = T_ > 0 ? float(double(count) / double(T_)) : 0.0f;
  }
}

void kMoeFirstChoiceFraction(const KernelArgs &a, const Context &ctx) {
  const TensorArg &experts = a.in[0];
  const long long E = a.out[0].shape[0];
  if (E <= 0)
    return;
  fractionKernel<<<gridFor(E, 32), 32, 0, ctx.stream>>>(
      experts.as<int32_t>(), experts.shape[0], experts.shape[1], E,
      makeIndexCheck("moe_first_choice_fraction", "expert", experts.shape, E),
      ctx.error, a.out[0].as<float>());
  checkLaunch("moe_first_choice_fraction");
}

} // namespace

const std::vector<Entry> &moeKernels() {
  static const std::vector<Entry> entries = {
      {"moe_route", kMoeRoute},
      {"moe_route_grad", kMoeRouteGrad},
      {"moe_dispatch", kMoeDispatch},
      {"moe_combine", kMoeCombine},
      {"moe_slot_dot", kMoeSlotDot},
      {"moe_first_choice_fraction", kMoeFirstChoiceFraction},
  };
  return entries;
}

} // namespace dtc::kernels::cuda
