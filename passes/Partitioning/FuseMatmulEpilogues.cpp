//===- FuseMatmulEpilogues.cpp - matmul + bias + GELU as one kernel -------===//
//
// A matmul followed by the add of a bias over its last dimension and/or a
// GELU becomes dtc.matmul_bias or dtc.matmul_gelu, whose kernel applies
// the epilogue to each block of output rows right after computing it,
// instead of three kernels each making a pass over the whole output.
//
// Runs on the partitioned program (local shapes, collectives placed), just
// before emission, so the planner, the partitioner and the reports of the
// earlier stages never see the fused ops: a row-parallel matmul's bias is
// added after its all-reduce and is not fused (the add's operand is the
// collective's result, not the matmul's). What the rest of the step reads
// stays: matmul_gelu returns the pre-activation beside the GELU, because
// the backward's gelu_grad reads it; a matmul result or biased value read
// by anything else than the next op of the chain ends the chain there.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_FUSEMATMULEPILOGUES
#include "dtc/Passes/Passes.h.inc"

namespace {

bool isF32(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType().isF32();
}

/// The bias of `add` when it adds a rank-1 `[N]` tensor to `product`, the
/// full-shaped matmul result (either operand order), else null.
Value biasOf(AddOp add, Value product) {
  Value other = add.getLhs() == product ? add.getRhs() : add.getLhs();
  if (other == product || add.getType() != product.getType())
    return {};
  auto type = cast<RankedTensorType>(other.getType());
  auto out = cast<RankedTensorType>(product.getType());
  if (type.getRank() != 1 || type.getDimSize(0) != out.getShape().back() ||
      type.getElementType() != out.getElementType())
    return {};
  return other;
}

struct FuseMatmulEpiloguesPass
    : impl::FuseMatmulEpiloguesBase<FuseMatmulEpiloguesPass> {
  void runOnOperation() override {
    SmallVector<MatmulOp> matmuls;
    getOperation().walk([&](MatmulOp op) { matmuls.push_back(op); });
    for (MatmulOp matmul : matmuls)
      fuse(matmul);
  }

  void fuse(MatmulOp matmul) {
    Value product = matmul.getResult();
    // Only f32: with bf16/f16 storage the unfused ops round the product and
    // the sum to the storage type in between, which a fused kernel (one
    // rounding per result) would not reproduce.
    if (!isF32(product) || matmul->hasAttr(DtcDialect::kGradientOfAttr))
      return;
    // The chain: product [-> add bias] [-> gelu]. The value the GELU reads
    // (`pre`) may have other readers (gelu_grad); the product may not when
    // a bias follows, since no result holds it then.
    Value pre = product, bias;
    Operation *last = matmul;
    if (product.hasOneUse())
      if (auto add = dyn_cast<AddOp>(*product.user_begin()))
        if (Value b = biasOf(add, product);
            b && inSamePlace(matmul, add) &&
            !add->hasAttr(DtcDialect::kGradientOfAttr)) {
          bias = b;
          pre = add.getResult();
          last = add;
        }
    GeluOp gelu;
    for (Operation *user : pre.getUsers())
      if (auto g = dyn_cast<GeluOp>(user);
          g && inSamePlace(matmul, g) &&
          !g->hasAttr(DtcDialect::kGradientOfAttr)) {
        gelu = g;
        break;
      }
    if (!bias && !gelu)
      return;

    // At the last op defining `pre`: every operand (the bias too) is
    // defined before it, and every reader of `pre` and of the GELU after.
    OpBuilder b(last);
    Operation *fused;
    if (gelu) {
      fused = MatmulGeluOp::create(b, gelu.getLoc(),
                                   TypeRange{gelu.getType(), pre.getType()},
                                   matmul.getA(), matmul.getB(), bias);
      gelu.getResult().replaceAllUsesWith(fused->getResult(0));
      pre.replaceAllUsesWith(fused->getResult(1));
    } else {
      fused = MatmulBiasOp::create(b, last->getLoc(), pre.getType(),
                                   matmul.getA(), matmul.getB(), bias);
      pre.replaceAllUsesWith(fused->getResult(0));
    }
    // The matmul's place in the step (phase, layer, chunk) and identity.
    copyPlaceAttrs(matmul, fused, /*identity=*/true);
    if (gelu)
      gelu->erase();
    if (last != matmul)
      last->erase();
    matmul->erase();
  }
};

} // namespace
} // namespace mlir::dtc
