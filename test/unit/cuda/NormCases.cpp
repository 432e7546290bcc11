//===- NormCases.cpp - CUDA kernel cases (see KernelCases.h) ---------------===//
//
// layer_norm, rms_norm and their gradients (kernels/cuda/Norm.cu): row
// lengths 1, 7, 33, 1000, 1025, 4096, many rows, ranks 1 to 3, bf16 / f16.
//
//===----------------------------------------------------------------------===//
#include "KernelCases.h"

namespace dtc::test {
namespace {
using rt::DType;

rt::Shape lastDim(const rt::Shape &x) { return {x.back()}; }

// x in [-2, 3] (a nonzero mean), gamma in [0.5, 1.5], beta and dy in [-1, 1].
OperandSpec xSpec(DType t, const rt::Shape &s) { return {t, s, -2, 3}; }
OperandSpec gSpec(DType t, const rt::Shape &x) { return {t, lastDim(x), 0.5, 1.5}; }
OperandSpec bSpec(DType t, const rt::Shape &x) { return {t, lastDim(x), -1, 1}; }
OperandSpec dySpec(DType t, const rt::Shape &s) { return {t, s, -1, 1}; }
OperandSpec outSpec(DType t, const rt::Shape &s) { return {t, s}; }

/// Every norm kernel on one shape and dtype.
void addShape(std::vector<KernelCase> &v, const std::string &tag, DType t, const rt::Shape &x,
              double eps = 1e-5) {
  const nlohmann::json attrs = {{"epsilon", eps}};
  const rt::Shape p = lastDim(x);
  v.push_back({"layer_norm " + tag, "layer_norm", {xSpec(t, x), gSpec(t, x), bSpec(t, x)},
               {outSpec(t, x)}, attrs});
  v.push_back({"rms_norm " + tag, "rms_norm", {xSpec(t, x), gSpec(t, x)}, {outSpec(t, x)}, attrs});
  v.push_back({"layer_norm_grad " + tag, "layer_norm_grad",
               {xSpec(t, x), gSpec(t, x), dySpec(t, x)},
               {outSpec(t, x), outSpec(t, p), outSpec(t, p)}, attrs});
  v.push_back({"rms_norm_grad " + tag, "rms_norm_grad", {xSpec(t, x), gSpec(t, x), dySpec(t, x)},
               {outSpec(t, x), outSpec(t, p)}, attrs});
  v.push_back({"layer_norm_input_grad " + tag, "layer_norm_input_grad",
               {xSpec(t, x), gSpec(t, x), dySpec(t, x)}, {outSpec(t, x)}, attrs});
  v.push_back({"layer_norm_param_grad " + tag, "layer_norm_param_grad",
               {xSpec(t, x), dySpec(t, x)}, {outSpec(t, p), outSpec(t, p)}, attrs});
  v.push_back({"rms_norm_input_grad " + tag, "rms_norm_input_grad",
               {xSpec(t, x), gSpec(t, x), dySpec(t, x)}, {outSpec(t, x)}, attrs});
  v.push_back({"rms_norm_param_grad " + tag, "rms_norm_param_grad", {xSpec(t, x), dySpec(t, x)},
               {outSpec(t, p)}, attrs});
}

std::vector<KernelCase> normCases() {
  std::vector<KernelCase> v;
  addShape(v, "D1", DType::F32, {5, 1});
  addShape(v, "D7", DType::F32, {3, 7});
  addShape(v, "D7 eps0", DType::F32, {9, 7}, 0.0);
  addShape(v, "D33 many rows", DType::F32, {4096, 33});
  addShape(v, "D1000", DType::F32, {16, 1000});
  addShape(v, "D1025", DType::F32, {6, 1025});
  addShape(v, "D4096", DType::F32, {8, 4096});
  addShape(v, "rank1", DType::F32, {33});
  addShape(v, "rank3", DType::F32, {2, 3, 33});
  addShape(v, "rank3 eps big", DType::F32, {4, 1, 7}, 0.5);
  addShape(v, "gpt", DType::F32, {512, 768});
  addShape(v, "chunk tail", DType::F32, {1000, 40});
  addShape(v, "bf16", DType::BF16, {32, 1000});
  addShape(v, "bf16 D4096", DType::BF16, {4, 4096});
  addShape(v, "f16", DType::F16, {32, 1000});
  addShape(v, "f16 D7", DType::F16, {65, 7});
  return v;
}

AddKernelCases cases(normCases());

} // namespace
} // namespace dtc::test
