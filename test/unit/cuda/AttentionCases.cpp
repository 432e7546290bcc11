//===- AttentionCases.cpp - CUDA kernel cases (see KernelCases.h)
//---------------===//
//
// attention and attention_grad (kernels/cuda/Attention.cu) against the CPU
// kernels. Shapes cover the SIMT path (f32; bf16/f16 with Dh outside
// {64, 128}; Dh above 256, which splits the output columns over blocks),
// the tensor-core path (bf16/f16 with Dh 64 and 128), sequence lengths that
// are not multiples of the tiles (32 SIMT; 64 and 128 tensor cores), cross
// attention (Sq != Sk), a single query over a key row longer than 1024,
// B*H > 1, and no keys at all (the output is zeros, as on the CPU).
//
// attention_block and attention_block_grad (ring attention's blocks) on
// both paths: the diagonal block, a block wholly in the past (every key
// visible), one wholly in the future (no key: the running output and
// logsumexp pass through, the gradients are zeros), causal shifts that are
// not multiples of the tiles (either sign), more queries than keys, with
// and without a running output, grouped keys and values, Dh above 256.
//
// Tolerances: f32 rtol 1e-4, atol 1e-5: the kernels sum the Dh products and
// the softmax rows in another order than the CPU's blocked sgemm and 16-lane
// row sums (measured against a float64 reference on an H100, the CUDA
// results stay within 2% of these bounds). bf16/f16 use the defaults: the
// tensor-core path rounds the probabilities (and dS) to the operand dtype
// for the second product, which the CPU keeps in f32; measured against
// float64 the outputs stay within one unit in the last place (a third of
// the default bounds).
//
//===----------------------------------------------------------------------===//
#include "KernelCases.h"

#include <string>

namespace dtc::test {
namespace {
using rt::DType;

const char *dtypeLabel(DType t) {
  return t == DType::F32 ? "f32" : t == DType::BF16 ? "bf16" : "f16";
}

std::string shapeLabel(DType t, int64_t B, int64_t H, int64_t Hkv, int64_t Sq,
                       int64_t Sk, int64_t D, bool causal) {
  return std::string(dtypeLabel(t)) + (causal ? " causal" : " full") + " B" +
         std::to_string(B) + " H" + std::to_string(H) +
         (Hkv != H ? " Hkv" + std::to_string(Hkv) : std::string()) + " Sq" +
         std::to_string(Sq) + " Sk" + std::to_string(Sk) + " Dh" +
         std::to_string(D);
}

/// attention and attention_grad on q [B, H, Sq, D], k and v [B, Hkv, Sk, D]
/// (Hkv < H: grouped-query attention).
std::vector<KernelCase> both(DType t, int64_t B, int64_t H, int64_t Sq,
                             int64_t Sk, int64_t D, bool causal,
                             int64_t Hkv = 0) {
  Hkv = Hkv ? Hkv : H;
  const OperandSpec q{t, {B, H, Sq, D}}, kv{t, {B, Hkv, Sk, D}};
  const double rtol = t == DType::F32 ? 1e-4 : -1,
               atol = t == DType::F32 ? 1e-5 : -1;
  const std::string shape = shapeLabel(t, B, H, Hkv, Sq, Sk, D, causal);
  KernelCase fwd{"attention " + shape,
                 "attention",
                 {q, kv, kv},
                 {q},
                 {{"causal", causal}}};
  fwd.rtol = rtol;
  fwd.atol = atol;
  KernelCase grad{"attention_grad " + shape,
                  "attention_grad",
                  {q, kv, kv, q},
                  {q, kv, kv},
                  {{"causal", causal}}};
  grad.rtol = rtol;
  grad.atol = atol;
  return {fwd, grad};
}

/// attention_block and attention_block_grad: the query block at global
/// position qOff, the key block at kOff; `merge`: with a running output
/// and logsumexp.
std::vector<KernelCase> blocks(DType t, int64_t B, int64_t H, int64_t Sq,
                               int64_t Sk, int64_t D, bool causal, int64_t qOff,
                               int64_t kOff, bool merge, int64_t Hkv = 0,
                               int64_t stride = 1, int64_t zigzag = 0) {
  Hkv = Hkv ? Hkv : H;
  nlohmann::json attrs = {{"causal", causal}};
  if (stride > 1)
    attrs["position_stride"] = stride;
  if (zigzag > 0)
    attrs["zigzag_length"] = zigzag;
  const OperandSpec q{t, {B, H, Sq, D}}, kv{t, {B, Hkv, Sk, D}},
      qo{DType::I64, {}, double(qOff), double(qOff)},
      ko{DType::I64, {}, double(kOff), double(kOff)};
  // Running and whole-attention logsumexps of realistic size: at least the
  // log of a few keys, so e^(s - lse) stays below 1 mostly, as in a ring.
  const OperandSpec lseAcc{DType::F32, {B, H, Sq}, 0.5, 4.0},
      lseWhole{DType::F32, {B, H, Sq}, 2.0, 5.0},
      lseOut{DType::F32, {B, H, Sq}};
  const double rtol = t == DType::F32 ? 1e-4 : -1,
               atol = t == DType::F32 ? 1e-5 : -1;
  const std::string shape =
      shapeLabel(t, B, H, Hkv, Sq, Sk, D, causal) + " at " +
      std::to_string(qOff) + "," + std::to_string(kOff) +
      (stride > 1 ? " stride " + std::to_string(stride) : std::string()) +
      (zigzag > 0 ? " zigzag " + std::to_string(zigzag) : std::string()) +
      (merge ? " merged" : "");
  KernelCase fwd{"attention_block " + shape,
                 "attention_block",
                 {q, kv, kv, qo, ko},
                 {q, lseOut},
                 attrs};
  if (merge) {
    fwd.in.push_back(q);
    fwd.in.push_back(lseAcc);
  }
  fwd.rtol = rtol;
  fwd.atol = atol;
  KernelCase grad{"attention_block_grad " + shape,
                  "attention_block_grad",
                  {q, kv, kv, qo, ko, q, q, lseWhole},
                  {q, kv, kv},
                  attrs};
  grad.rtol = rtol;
  grad.atol = atol;
  // The gradient does not depend on merging; one case per shape is enough.
  if (merge)
    return {fwd};
  return {fwd, grad};
}

std::vector<KernelCase> allCases() {
  const DType F = DType::F32, B = DType::BF16, H = DType::F16;
  struct S {
    DType t;
    int64_t B, H, Sq, Sk, D;
    bool causal;
    int64_t Hkv = 0; ///< 0: H
  };
  const S shapes[] = {
      // f32 (SIMT): minimal, awkward lengths, every attribute value
      {F, 1, 1, 1, 1, 8, false},
      {F, 1, 1, 1, 1, 8, true},
      {F, 2, 3, 17, 17, 16, true},
      {F, 2, 3, 17, 17, 16, false},
      {F, 1, 2, 65, 65, 32, true},
      {F, 1, 2, 65, 65, 32, false},
      {F, 1, 2, 130, 130, 64, true},
      {F, 2, 1, 33, 70, 80, false}, // cross attention, Dh not a power of 2
      {F, 1, 2, 130, 130, 128, true},
      {F, 1, 1, 70, 200, 64, false}, // more keys than queries
      {F, 1, 1, 64, 64, 256, false},
      {F, 1, 1, 40, 40, 300, true},  // Dh > 256: output columns over two blocks
      {F, 1, 1, 1, 1100, 32, false}, // one query, a row of 1100 keys
      {F, 1, 1, 5, 0, 16, false},    // no keys: zeros
      // bf16: tensor cores (Dh 64, 128) and SIMT (Dh 32)
      {B, 1, 2, 256, 256, 64, true},
      {B, 1, 2, 256, 256, 128, true},
      {B, 2, 2, 130, 77, 64, false},
      {B, 1, 1, 17, 17, 128, true},
      {B, 1, 2, 100, 100, 32, true},
      {B, 1, 1, 1, 300, 128, false},
      {B, 1, 1, 300, 1, 64, false},
      {B, 1, 1, 1000, 1000, 64, true},
      {B, 1, 2, 1024, 1024, 128, true}, // a realistic size
      // f16
      {H, 1, 2, 256, 256, 64, true},
      {H, 1, 2, 256, 256, 128, false},
      {H, 2, 1, 130, 130, 128, true},
      {H, 1, 1, 65, 190, 64, false},
      {H, 1, 1, 33, 33, 80, true},
      // grouped keys and values: SIMT and tensor cores, 2 and 4 query
      // heads per key/value head, multi-query (Hkv = 1)
      {F, 2, 4, 17, 17, 16, true, 2},
      {F, 1, 6, 65, 65, 32, false, 3},
      {F, 2, 4, 33, 33, 64, true, 1},
      {B, 1, 4, 130, 130, 64, true, 2},
      {B, 2, 8, 256, 256, 128, true, 2},
      {B, 1, 4, 100, 100, 32, false, 1},
      {H, 1, 8, 130, 77, 64, false, 1},
      {H, 2, 4, 256, 256, 128, true, 4},
  };
  std::vector<KernelCase> cases;
  for (const S &s : shapes)
    for (KernelCase &c : both(s.t, s.B, s.H, s.Sq, s.Sk, s.D, s.causal, s.Hkv))
      cases.push_back(std::move(c));

  struct R {
    DType t;
    int64_t B, H, Sq, Sk, D;
    bool causal;
    int64_t qOff, kOff;
    int64_t Hkv = 0;    ///< 0: H
    int64_t stride = 1; ///< position_stride (the striped layout)
    int64_t zigzag = 0; ///< zigzag_length (the zigzag layout)
  };
  const R ring[] = {
      // f32 (SIMT)
      {F, 1, 2, 33, 33, 16, true, 0, 0},     // the diagonal block
      {F, 1, 2, 33, 33, 16, true, 33, 0},    // the past: every key
      {F, 1, 2, 33, 33, 16, true, 0, 33},    // the future: no key
      {F, 2, 2, 40, 24, 32, true, 10, 3},    // a shift of 7, Sq > Sk
      {F, 1, 2, 40, 40, 32, true, 0, 13},    // a shift of -13
      {F, 1, 1, 20, 20, 300, true, 5, 0},    // Dh > 256
      {F, 1, 2, 65, 65, 32, false, 0, 65},   // not causal
      {F, 2, 4, 17, 17, 16, true, 17, 0, 2}, // grouped keys and values
      // striped rows (position_stride): the shift floors, so an earlier
      // rank's block hides the diagonal (at 1,3) and a later one's shows it
      {F, 1, 2, 33, 33, 16, true, 1, 3, 0, 4},
      {F, 1, 2, 33, 33, 16, true, 3, 1, 0, 4},
      // zigzag rows (chunks of 17 of a sequence of 136 over 4 ranks): the
      // diagonal step, an earlier rank's keys (the low chunk hidden from
      // the low queries), a later rank's (only the high queries see them)
      {F, 1, 2, 34, 34, 16, true, 17, 17, 0, 1, 136},
      {F, 1, 2, 34, 34, 16, true, 34, 0, 0, 1, 136},
      {F, 2, 2, 34, 34, 32, true, 0, 51, 0, 1, 136},
      // bf16: tensor cores (Dh 64, 128) and SIMT (Dh 32)
      {B, 1, 2, 256, 256, 64, true, 0, 0},
      {B, 1, 2, 256, 256, 128, true, 256, 0},
      {B, 1, 2, 256, 256, 64, true, 0, 256},
      {B, 1, 2, 200, 200, 64, true, 37, 0},
      {B, 1, 2, 130, 130, 128, true, 0, 20},
      {B, 2, 4, 256, 256, 128, true, 512, 256, 2},
      {B, 1, 2, 100, 100, 32, true, 10, 0},
      {B, 1, 2, 1024, 1024, 128, true, 0, 0},     // a realistic size
      {B, 1, 2, 256, 256, 64, true, 2, 5, 0, 8},  // striped, tensor cores
      {B, 1, 2, 256, 256, 128, true, 7, 0, 0, 8}, // striped, tensor cores
      // zigzag, tensor cores (chunks of 128 of 1024 over 4 ranks)
      {B, 1, 2, 256, 256, 64, true, 128, 128, 0, 1, 1024},
      {B, 1, 2, 256, 256, 128, true, 256, 0, 0, 1, 1024},
      {B, 1, 2, 256, 256, 64, true, 0, 384, 0, 1, 1024},
      // f16
      {H, 1, 2, 256, 256, 64, true, 64, 0},
      {H, 1, 1, 130, 77, 128, false, 0, 0},
  };
  for (const R &r : ring)
    for (bool merge : {false, true})
      for (KernelCase &c :
           blocks(r.t, r.B, r.H, r.Sq, r.Sk, r.D, r.causal, r.qOff, r.kOff,
                  merge, r.Hkv, r.stride, r.zigzag))
        cases.push_back(std::move(c));
  return cases;
}

AddKernelCases cases(allCases());

} // namespace
} // namespace dtc::test
