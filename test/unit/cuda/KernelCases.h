//===- KernelCases.h - table-driven CUDA kernel checks -----------*- C++
//-*-===//
//
// Every CUDA kernel is checked against the CPU kernel of the same name (the
// reference implementation, itself held to float64 by test/reference) on
// the same random operands, through the Backend interface of both
// backends: operands are allocated, filled and read back with the
// backend's own copies, so these tests also exercise the CUDA backend's
// memory and binding. Outputs start poisoned (0xff bytes: NaN, -1) so an
// element a kernel forgets to write fails the comparison.
//
// Each kernel group adds its cases from its own file:
//
//   static AddKernelCases cases({
//     {"softmax rows", "softmax", {{DType::F32, {7, 300}}}, {{DType::F32, {7,
//     300}}},
//      {{"axis", 1}}},
//   });
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TEST_CUDA_KERNELCASES_H
#define DTC_TEST_CUDA_KERNELCASES_H

#include "dtc/artifact/Types.h"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace dtc::test {

/// One operand: dtype, LOCAL shape and how inputs are drawn. Floats are
/// uniform in [lo, hi] (rounded to the dtype); integers are uniform
/// integers in [lo, hi]. Outputs ignore lo/hi.
struct OperandSpec {
  rt::DType dtype = rt::DType::F32;
  rt::Shape shape;
  double lo = -1.0, hi = 1.0;
};

struct KernelCase {
  std::string label;  ///< unique; names the gtest case
  std::string kernel; ///< docs/kernels.md name
  std::vector<OperandSpec> in, out;
  nlohmann::json attrs = nlohmann::json::object();
  /// Per element: |cuda - cpu| <= atol + rtol |cpu|. Negative: the default
  /// for the output's dtype (f32 1e-5 / 1e-6, bf16 1.6e-2 / 1e-2, f16
  /// 2e-3 / 1e-3: a couple of units in the last place after a different
  /// summation order; integers exact).
  double rtol = -1, atol = -1;
  /// (out, in) pairs to run in place: the output is the input's buffer.
  std::vector<std::pair<int, int>> inPlace = {};
  /// When not empty, both backends must fail with this exact message (a
  /// data-dependent error) instead of producing outputs.
  std::string expectError = "";
  /// When not empty, the CUDA binding's plan (BoundKernel::plan) must
  /// contain it: the case reaches the path it is there for (a cuBLASLt
  /// epilogue rather than the separate kernel after the product).
  std::string expectPlan = "";
};

std::vector<KernelCase> &kernelCases();
struct AddKernelCases {
  explicit AddKernelCases(std::vector<KernelCase> cases);
};

} // namespace dtc::test

#endif // DTC_TEST_CUDA_KERNELCASES_H
