//===- CostClass.h - how a kernel spends its time ---------------*- C++ -*-===//
//
// Shared by the kernel rules (each kernel names its class) and the cost model
// (each class has its own rate in a hardware profile). MLIR-free.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_COSTCLASS_H
#define DTC_KERNELS_COSTCLASS_H

#include <optional>
#include <string_view>

namespace dtc::kernels {

/// How a kernel spends its time, for the cost model: each class has its own
/// rate in a hardware profile (docs/cost-model.md), because kernels of one
/// class run alike and classes do not. A calibrated cpu profile measures a
/// kernel of each class; the builtin GPU profiles price attention on the
/// GEMM curve and every memory-bound class on the memory bandwidth.
enum class CostClass {
  /// Bound by memory traffic, one pass over the operands (element-wise
  /// kernels, transposes, casts, reductions to a scalar, SGD).
  Stream,
  /// Memory-bound, but each row is reduced and then revisited (the norms,
  /// softmax, cross entropy and their gradients): several passes and a
  /// dependency chain per row, slower than a stream of the same bytes.
  RowReduction,
  /// A matrix product on the GEMM efficiency curve.
  Gemm,
  /// Fused attention, forward and backward: dense, but with a softmax
  /// between its two products, so slower than a GEMM of the same flops.
  Attention,
  AttentionGrad,
  /// The Adam update: one pass over seven tensors, but a division and a
  /// square root in double per element, which a CPU core computes slower
  /// than it streams the bytes (half the add's rate on one core).
  Optimizer,
};
/// A contraction whose speed depends on its size (an efficiency curve).
inline bool isDense(CostClass c) {
  return c == CostClass::Gemm || c == CostClass::Attention ||
         c == CostClass::AttentionGrad;
}

constexpr CostClass kCostClasses[] = {
    CostClass::Stream,    CostClass::RowReduction,  CostClass::Gemm,
    CostClass::Attention, CostClass::AttentionGrad, CostClass::Optimizer};

/// "stream", "row_reduction", "gemm", "attention", "attention_grad",
/// "optimizer": the names of a profile's `kernel_classes` (docs/cli.md, --hw).
inline const char *costClassName(CostClass c) {
  switch (c) {
  case CostClass::Stream:
    return "stream";
  case CostClass::RowReduction:
    return "row_reduction";
  case CostClass::Gemm:
    return "gemm";
  case CostClass::Attention:
    return "attention";
  case CostClass::AttentionGrad:
    return "attention_grad";
  case CostClass::Optimizer:
    return "optimizer";
  }
  return "stream";
}

/// The class of that name; nullopt for any other.
inline std::optional<CostClass> costClassNamed(std::string_view name) {
  for (CostClass c : kCostClasses)
    if (name == costClassName(c))
      return c;
  return std::nullopt;
}

} // namespace dtc::kernels

#endif // DTC_KERNELS_COSTCLASS_H
