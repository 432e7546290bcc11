//===- MoeRules.cpp - check rules of the mixture-of-experts kernels -------===//
//
// dtc.moe becomes these kernels (docs/kernels.md "Mixture of experts"):
// moe_route picks each token's experts and its slot in their buffers,
// moe_dispatch and moe_combine move rows between tokens [T, D] and the
// experts' buffers [E, C, D] (each the other's transpose), moe_slot_dot
// and moe_route_grad are the backward's remaining pieces, and
// moe_first_choice_fraction counts the load-balancing loss's f_e. Slots
// are (expert, position) pairs of i32 [T, k] tensors; position -1 is a
// dropped token.
//
//===----------------------------------------------------------------------===//
#include "RuleChecks.h"

namespace dtc::kernels::rules {
namespace {

/// experts and positions: i32 [T, k].
void needSlots(const TensorDesc &experts, const TensorDesc &positions,
               int64_t tokens) {
  needDtype(experts, DType::I32, "experts");
  if (experts.shape.size() != 2 || experts.shape[0] != tokens)
    fail("experts must be [T, k] with T = " + std::to_string(tokens) +
         ", got " + desc(experts));
  needLike(positions, experts, "positions", "experts");
}

/// A per-slot float tensor [T, k].
void needPerSlot(const TensorDesc &t, const TensorDesc &experts,
                 const char *what) {
  needFloat(t, what);
  needShape(t, experts.shape, what);
}

/// An experts' buffer [E, C, D] of `rows`' dtype and row width.
void needBuffer(const TensorDesc &buffer, const TensorDesc &rows,
                const char *what, const char *rowsName) {
  needFloat(buffer, what);
  if (buffer.shape.size() != 3 || rows.shape.size() != 2 ||
      buffer.shape[2] != rows.shape[1] || buffer.dtype != rows.dtype)
    fail(std::string(what) + " must be [E, C, D] with the D and dtype of " +
         rowsName + " (" + desc(rows) + "), got " + desc(buffer));
}

void checkMoeRoute(const Descs &in, const Descs &out, const json &attrs) {
  const TensorDesc &probs = in[0];
  needFloat(probs, "probs");
  if (probs.shape.size() != 2)
    fail("probs must be [T, E], got " + desc(probs));
  const int64_t k = reqPositive(attrs, "top_k");
  if (k > probs.shape[1])
    fail("attribute 'top_k' = " + std::to_string(k) + " exceeds the " +
         std::to_string(probs.shape[1]) + " experts");
  reqPositive(attrs, "capacity");
  const Shape slots = {probs.shape[0], k};
  needDtype(out[0], DType::I32, "experts");
  needShape(out[0], slots, "experts");
  needLike(out[1], out[0], "positions", "experts");
  needDtype(out[2], probs.dtype, "weights");
  needShape(out[2], slots, "weights");
}

void checkMoeRouteGrad(const Descs &in, const Descs &out, const json &) {
  const TensorDesc &probs = in[0], &experts = in[1], &dweights = in[2];
  needFloat(probs, "probs");
  if (probs.shape.size() != 2)
    fail("probs must be [T, E], got " + desc(probs));
  needDtype(experts, DType::I32, "experts");
  if (experts.shape.size() != 2 || experts.shape[0] != probs.shape[0] ||
      experts.shape[1] > probs.shape[1])
    fail("experts must be [T, k] with k <= E for probs " + desc(probs) +
         ", got " + desc(experts));
  needPerSlot(dweights, experts, "dweights");
  needLike(out[0], probs, "dprobs", "probs");
}

// moe_dispatch: rows x [T, D] into buffer [E, C, D].
void checkMoeDispatch(const Descs &in, const Descs &out, const json &) {
  const TensorDesc &x = in[0];
  needFloat(x, "x");
  if (x.shape.size() != 2)
    fail("x must be [T, D], got " + desc(x));
  needSlots(in[1], in[2], x.shape[0]);
  needPerSlot(in[3], in[1], "weights");
  needBuffer(out[0], x, "the buffer", "x");
}

// moe_combine: buffer y [E, C, D] into rows [T, D].
void checkMoeCombine(const Descs &in, const Descs &out, const json &) {
  const TensorDesc &y = in[0], &experts = in[1];
  needFloat(y, "y");
  if (y.shape.size() != 3)
    fail("y must be [E, C, D], got " + desc(y));
  needDtype(experts, DType::I32, "experts");
  if (experts.shape.size() != 2)
    fail("experts must be [T, k], got " + desc(experts));
  needSlots(experts, in[2], experts.shape[0]);
  needPerSlot(in[3], experts, "weights");
  needDtype(out[0], y.dtype, "the result");
  needShape(out[0], Shape{experts.shape[0], y.shape[2]}, "the result");
}

// moe_slot_dot: <a[t], y[slot(t, j)]> per slot.
void checkMoeSlotDot(const Descs &in, const Descs &out, const json &) {
  const TensorDesc &a = in[0];
  needFloat(a, "a");
  if (a.shape.size() != 2)
    fail("a must be [T, D], got " + desc(a));
  needBuffer(in[1], a, "y", "a");
  needSlots(in[2], in[3], a.shape[0]);
  needPerSlot(out[0], in[2], "the result");
  needDtype(out[0], a.dtype, "the result");
}

void checkMoeFirstChoiceFraction(const Descs &in, const Descs &out,
                                 const json &) {
  needDtype(in[0], DType::I32, "experts");
  if (in[0].shape.size() != 2 || in[0].shape[1] < 1)
    fail("experts must be [T, k] with k >= 1, got " + desc(in[0]));
  needDtype(out[0], DType::F32, "the fractions");
  if (out[0].shape.size() != 1)
    fail("the fractions must be [E], got " + desc(out[0]));
}

} // namespace

std::vector<KernelInfo> moeKernels() {
  return {
      {"moe_route", 1, 3, {}, checkMoeRoute, 0, CostClass::RowReduction},
      {"moe_route_grad", 3, 1, {}, checkMoeRouteGrad},
      {"moe_dispatch", 4, 1, {}, checkMoeDispatch},
      {"moe_combine", 4, 1, {}, checkMoeCombine},
      {"moe_slot_dot", 4, 1, {}, checkMoeSlotDot},
      {"moe_first_choice_fraction", 1, 1, {}, checkMoeFirstChoiceFraction},
  };
}

} // namespace dtc::kernels::rules
