//===- NormCases.cpp - CUDA kernel cases (see KernelCases.h)
//---------------===//
//
// layer_norm, rms_norm and their gradients (kernels/cuda/Norm.cu): row
// lengths 1, 7, 33, 1000, 1025, 4096, many rows, ranks 1 to 3, bf16 / f16,
// and the paths Norm.cu picks by row length and alignment (see below).
//
//===----------------------------------------------------------------------===//
#include "KernelCases.h"

namespace dtc::test {
namespace {
using rt::DType;

rt::Shape lastDim(const rt::Shape &x) { return {x.back()}; }

// x in [-2, 3] (a nonzero mean), gamma in [0.5, 1.5], beta and dy in [-1, 1].
OperandSpec xSpec(DType t, const rt::Shape &s) { return {t, s, -2, 3}; }
OperandSpec gSpec(DType t, const rt::Shape &x) {
  return {t, lastDim(x), 0.5, 1.5};
}
OperandSpec bSpec(DType t, const rt::Shape &x) {
  return {t, lastDim(x), -1, 1};
}
OperandSpec dySpec(DType t, const rt::Shape &s) { return {t, s, -1, 1}; }
OperandSpec outSpec(DType t, const rt::Shape &s) { return {t, s}; }

/// Every norm kernel on one shape and dtype.
void addShape(std::vector<KernelCase> &v, const std::string &tag, DType t,
              const rt::Shape &x, double eps = 1e-5) {
  const nlohmann::json attrs = {{"epsilon", eps}};
  const rt::Shape p = lastDim(x);
  v.push_back({"layer_norm " + tag,
               "layer_norm",
               {xSpec(t, x), gSpec(t, x), bSpec(t, x)},
               {outSpec(t, x)},
               attrs});
  v.push_back({"rms_norm " + tag,
               "rms_norm",
               {xSpec(t, x), gSpec(t, x)},
               {outSpec(t, x)},
               attrs});
  v.push_back({"layer_norm_grad " + tag,
               "layer_norm_grad",
               {xSpec(t, x), gSpec(t, x), dySpec(t, x)},
               {outSpec(t, x), outSpec(t, p), outSpec(t, p)},
               attrs});
  v.push_back({"rms_norm_grad " + tag,
               "rms_norm_grad",
               {xSpec(t, x), gSpec(t, x), dySpec(t, x)},
               {outSpec(t, x), outSpec(t, p)},
               attrs});
  v.push_back({"layer_norm_input_grad " + tag,
               "layer_norm_input_grad",
               {xSpec(t, x), gSpec(t, x), dySpec(t, x)},
               {outSpec(t, x)},
               attrs});
  v.push_back({"layer_norm_param_grad " + tag,
               "layer_norm_param_grad",
               {xSpec(t, x), dySpec(t, x)},
               {outSpec(t, p), outSpec(t, p)},
               attrs});
  v.push_back({"rms_norm_input_grad " + tag,
               "rms_norm_input_grad",
               {xSpec(t, x), gSpec(t, x), dySpec(t, x)},
               {outSpec(t, x)},
               attrs});
  v.push_back({"rms_norm_param_grad " + tag,
               "rms_norm_param_grad",
               {xSpec(t, x), dySpec(t, x)},
               {outSpec(t, p)},
               attrs});
}

/// The kernels whose GPT-size performance the paths of Norm.cu target.
void addParamShape(std::vector<KernelCase> &v, const std::string &tag, DType t,
                   const rt::Shape &x, double eps = 1e-5) {
  const nlohmann::json attrs = {{"epsilon", eps}};
  const rt::Shape p = lastDim(x);
  v.push_back({"layer_norm_param_grad " + tag,
               "layer_norm_param_grad",
               {xSpec(t, x), dySpec(t, x)},
               {outSpec(t, p), outSpec(t, p)},
               attrs});
  v.push_back({"layer_norm_input_grad " + tag,
               "layer_norm_input_grad",
               {xSpec(t, x), gSpec(t, x), dySpec(t, x)},
               {outSpec(t, x)},
               attrs});
  v.push_back({"rms_norm_param_grad " + tag,
               "rms_norm_param_grad",
               {xSpec(t, x), dySpec(t, x)},
               {outSpec(t, p)},
               attrs});
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
  // Norm.cu's paths: 16-byte packs (D a multiple of 8 bf16 / 4 f32) or
  // element loads (1003; 4100 bf16), a warp or a block per row, the packs
  // kept in registers or re-read (more than 2048 packs: 8200 f32, 16400
  // bf16), the column sums computing the statistics themselves (at most 256
  // packs) or reading them, one or several column tiles (2056 bf16: a
  // second tile of one pack; 4100 f32: three), slices of rows (narrow D),
  // chunks of more than 32 rows (R > 8192) and a short last chunk.
  addShape(v, "D2048 odd rows", DType::F32, {331, 2048});
  addShape(v, "D1003", DType::F32, {77, 1003});
  addShape(v, "bf16 D1003", DType::BF16, {77, 1003});
  addShape(v, "D4100", DType::F32, {37, 4100});
  addShape(v, "bf16 D4100", DType::BF16, {37, 4100});
  addShape(v, "bf16 D2056", DType::BF16, {45, 2056});
  addShape(v, "D8200", DType::F32, {3, 8200});
  addShape(v, "bf16 D16400", DType::BF16, {2, 16400});
  addShape(v, "D40 long chunks", DType::F32, {9000, 40});
  addParamShape(v, "bf16 D2048 odd rows", DType::BF16, {1025, 2048});
  addParamShape(v, "f16 D2048", DType::F16, {129, 2048});
  addParamShape(v, "bf16 D768", DType::BF16, {2, 1000, 768});
  // The size measured in a GPT step: [4, 2048, 2048] (16M elements).
  addParamShape(v, "gpt bf16 4x2048x2048", DType::BF16, {4, 2048, 2048});
  return v;
}

AddKernelCases cases(normCases());

} // namespace
} // namespace dtc::test
