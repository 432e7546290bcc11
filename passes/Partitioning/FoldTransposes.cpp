//===- FoldTransposes.cpp - transposes a matmul can absorb ----------------===//
//
// The emitter folds a transpose of the last two dimensions into the matmuls
// that read it (transpose_a / transpose_b: cuBLAS and the CPU's sgemm read
// the operand transposed for free), but only when every reader is a matmul
// operand. Autodiff leaves two shapes that defeat it, both around a tied
// or transposed weight (the LM head that reuses the embedding table):
//  - transpose(transpose(x)) back to x: the backward's dx = dy W reads the
//    forward's W^T transposed again, so W^T has a non-matmul reader and is
//    materialized (a [V, D] copy per step), and so is its transpose;
//  - transpose(matmul(a, b)) as a 2-D weight gradient turned back into the
//    weight's layout: (a b)^T is computed as b^T a^T instead, whose
//    transposes fold, and a transpose of a transpose cancels.
// Runs on the partitioned step (local shapes, collectives placed) with the
// epilogue fusion, so the planner, the partitioner and their reports never
// see the rewrite; it moves no work between phases, chunks or
// recomputations. Products are the same dot products, so results agree to
// the summation order of the matmul kernel.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/Utils.h"
#include "dtc/Passes/Passes.h"

namespace mlir::dtc {
#define GEN_PASS_DEF_FOLDTRANSPOSES
#include "dtc/Passes/Passes.h.inc"

namespace {

bool isSwapOfTwo(TransposeOp t) {
  ArrayRef<int64_t> p = t.getPermutation();
  return p.size() == 2 && p[0] == 1 && p[1] == 0;
}

struct FoldTransposesPass : impl::FoldTransposesBase<FoldTransposesPass> {
  void runOnOperation() override {
    SmallVector<TransposeOp> transposes;
    getOperation().walk([&](TransposeOp t) { transposes.push_back(t); });
    for (TransposeOp t : transposes)
      if (t)
        fold(t);
  }

  /// transpose(transpose(y)) with inverse permutations: its readers read y.
  /// Returns whether `outer` was erased.
  static bool cancel(TransposeOp outer) {
    auto inner = outer.getX().getDefiningOp<TransposeOp>();
    if (!inner)
      return false;
    ArrayRef<int64_t> pi = inner.getPermutation(), po = outer.getPermutation();
    for (size_t i = 0; i < po.size(); ++i)
      if (pi[po[i]] != int64_t(i))
        return false;
    outer.getResult().replaceAllUsesWith(inner.getX());
    outer->erase();
    if (inner->use_empty())
      inner->erase();
    return true;
  }

  void fold(TransposeOp t) {
    if (cancel(t))
      return;
    // (a b)^T = b^T a^T for 2-D products read only here.
    auto matmul = t.getX().getDefiningOp<MatmulOp>();
    if (!matmul || !isSwapOfTwo(t) || !matmul->hasOneUse() ||
        !inSamePlace(matmul, t))
      return;
    auto rankOf = [](Value v) {
      return cast<RankedTensorType>(v.getType()).getRank();
    };
    if (rankOf(matmul.getA()) != 2 || rankOf(matmul.getB()) != 2)
      return;
    OpBuilder b(t);
    const SmallVector<int64_t> swap = {1, 0};
    auto bt = TransposeOp::create(b, t.getLoc(), matmul.getB(), swap);
    auto at = TransposeOp::create(b, t.getLoc(), matmul.getA(), swap);
    auto product = MatmulOp::create(b, matmul.getLoc(), t.getType(),
                                    bt.getResult(), at.getResult());
    // Where they run, not the matmul's identity (dtc.id names one op).
    for (Operation *created :
         {bt.getOperation(), at.getOperation(), product.getOperation()})
      copyPlaceAttrs(matmul, created, /*identity=*/false);
    // e.g. the gradient's name, when t carried it
    copyPlaceAttrs(t, product, /*identity=*/false);
    t.getResult().replaceAllUsesWith(product.getResult());
    t->erase();
    matmul->erase();
    cancel(bt);
    cancel(at);
  }
};

} // namespace
} // namespace mlir::dtc
