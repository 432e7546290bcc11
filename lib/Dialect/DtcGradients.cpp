//===- DtcGradients.cpp - reverse-mode rules of dtc ops ------------------===//
//
// Each differentiable op builds the vector-Jacobian product of its operands
// from its results' gradients, on the op's own global shapes, as dtc ops.
// Broadcast operands get their gradient summed back to their own shape.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/DtcOps.h"
#include "dtc/Dialect/Utils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::dtc;

namespace {

RankedTensorType typeOf(Value v) { return tensorTypeOf(v); }

/// v times a rank-0 constant (the binary ops broadcast it).
Value scale(OpBuilder &b, Location loc, Value v, double factor) {
  auto scalar = RankedTensorType::get({}, typeOf(v).getElementType());
  return MulOp::create(b, loc, v, createSplatConstant(b, loc, scalar, factor));
}

/// Sums `grad` (of the broadcast shape) back to `target`'s shape.
Value unbroadcast(OpBuilder &b, Location loc, Value grad,
                  RankedTensorType target) {
  RankedTensorType type = typeOf(grad);
  if (type == target)
    return grad;
  int64_t offset = type.getRank() - target.getRank();
  SmallVector<int64_t> axes;
  for (int64_t d = 0; d < offset; ++d)
    axes.push_back(d);
  for (int64_t d = 0; d < target.getRank(); ++d)
    if (target.getDimSize(d) == 1 && type.getDimSize(offset + d) != 1)
      axes.push_back(offset + d);
  Value result = grad;
  if (!axes.empty())
    result = ReduceSumOp::create(b, loc, grad, axes, /*keep_dims=*/false);
  if (typeOf(result) != target)
    result = ReshapeOp::create(b, loc, target, result);
  return result;
}

/// Swaps the last two dimensions.
Value transposeLastTwo(OpBuilder &b, Location loc, Value v) {
  int64_t rank = typeOf(v).getRank();
  SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(perm[rank - 1], perm[rank - 2]);
  return TransposeOp::create(b, loc, v, perm);
}

/// Shared shape of the single-result elementwise rules: one operand
/// gradient computed from the result gradient.
template <typename Fn>
LogicalResult unaryGradient(Operation *op, ArrayRef<Value> resultGrads,
                            SmallVectorImpl<Value> &operandGrads, Fn &&fn) {
  operandGrads.assign(op->getNumOperands(), Value());
  if (resultGrads[0])
    operandGrads[0] = fn(resultGrads[0]);
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult AddOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                   SmallVectorImpl<Value> &grads) {
  Value dy = dys[0];
  grads.assign({unbroadcast(b, getLoc(), dy, typeOf(getLhs())),
                unbroadcast(b, getLoc(), dy, typeOf(getRhs()))});
  return success();
}

LogicalResult SubOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                   SmallVectorImpl<Value> &grads) {
  Value dy = dys[0];
  Value negDy = NegOp::create(b, getLoc(), dy);
  grads.assign({unbroadcast(b, getLoc(), dy, typeOf(getLhs())),
                unbroadcast(b, getLoc(), negDy, typeOf(getRhs()))});
  return success();
}

LogicalResult MulOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                   SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value dy = dys[0];
  grads.assign({unbroadcast(b, loc, MulOp::create(b, loc, dy, getRhs()),
                            typeOf(getLhs())),
                unbroadcast(b, loc, MulOp::create(b, loc, dy, getLhs()),
                            typeOf(getRhs()))});
  return success();
}

LogicalResult DivOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                   SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value dy = dys[0];
  // d(l/r)/dl = 1/r; d(l/r)/dr = -(l/r)/r.
  Value dl = DivOp::create(b, loc, dy, getRhs());
  Value dr = NegOp::create(
      b, loc,
      DivOp::create(b, loc, MulOp::create(b, loc, dy, getResult()), getRhs()));
  grads.assign({unbroadcast(b, loc, dl, typeOf(getLhs())),
                unbroadcast(b, loc, dr, typeOf(getRhs()))});
  return success();
}

LogicalResult MaxOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                   SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value dy = dys[0];
  auto routed = MaxGradOp::create(b, loc, dy.getType(), dy.getType(), getLhs(),
                                  getRhs(), dy);
  grads.assign({unbroadcast(b, loc, routed.getDlhs(), typeOf(getLhs())),
                unbroadcast(b, loc, routed.getDrhs(), typeOf(getRhs()))});
  return success();
}

LogicalResult NegOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                   SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) {
    return NegOp::create(b, getLoc(), dy);
  });
}

LogicalResult ExpOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                   SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) {
    return MulOp::create(b, getLoc(), dy, getResult());
  });
}

LogicalResult LogOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                   SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) {
    return DivOp::create(b, getLoc(), dy, getX());
  });
}

LogicalResult TanhOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) -> Value {
    // dy * (1 - y^2) = dy - dy * y * y
    Location loc = getLoc();
    Value y = getResult();
    return SubOp::create(
        b, loc, dy, MulOp::create(b, loc, dy, MulOp::create(b, loc, y, y)));
  });
}

LogicalResult SqrtOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) -> Value {
    // dy / (2 sqrt(x))
    return DivOp::create(b, getLoc(), dy, scale(b, getLoc(), getResult(), 2.0));
  });
}

LogicalResult RsqrtOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                     SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) -> Value {
    // d x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3
    Location loc = getLoc();
    Value y = getResult();
    Value y3 = MulOp::create(b, loc, y, MulOp::create(b, loc, y, y));
    return MulOp::create(b, loc, dy, scale(b, loc, y3, -0.5));
  });
}

LogicalResult ReluOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) {
    return ReluGradOp::create(b, getLoc(), getX(), dy);
  });
}

LogicalResult GeluOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) {
    return GeluGradOp::create(b, getLoc(), getX(), dy);
  });
}

LogicalResult SiluOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) {
    return SiluGradOp::create(b, getLoc(), getX(), dy);
  });
}

//===----------------------------------------------------------------------===//
// Structured ops
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                      SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value dy = dys[0];
  RankedTensorType aType = typeOf(getA()), bType = typeOf(getB());
  // da = dy b^T, summed over the batch dims a was broadcast along.
  Value da = unbroadcast(
      b, loc, MatmulOp::create(b, loc, dy, transposeLastTwo(b, loc, getB())),
      aType);
  Value db;
  if (bType.getRank() == 2 && aType.getRank() > 2) {
    // A shared weight: fold a's batch dims into M so that db is one product
    // [K, L*M] x [L*M, N] instead of a per-batch stack summed afterwards.
    int64_t k = aType.getShape().back(), n = bType.getShape().back();
    int64_t rows = aType.getNumElements() / k;
    Value a2 = ReshapeOp::create(
        b, loc, RankedTensorType::get({rows, k}, aType.getElementType()),
        getA());
    Value dy2 = ReshapeOp::create(
        b, loc, RankedTensorType::get({rows, n}, aType.getElementType()), dy);
    db = MatmulOp::create(b, loc, transposeLastTwo(b, loc, a2), dy2);
  } else {
    db = unbroadcast(
        b, loc, MatmulOp::create(b, loc, transposeLastTwo(b, loc, getA()), dy),
        bType);
  }
  grads.assign({da, db});
  return success();
}

LogicalResult SoftmaxOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) {
    return SoftmaxGradOp::create(b, getLoc(), getResult(), dy, getAxis());
  });
}

LogicalResult LayerNormOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                         SmallVectorImpl<Value> &grads) {
  auto grad = LayerNormGradOp::create(
      b, getLoc(), getX().getType(), getGamma().getType(), getGamma().getType(),
      getX(), getGamma(), dys[0], getEpsilonAttr());
  grads.assign({grad.getDx(), grad.getDgamma(), grad.getDbeta()});
  return success();
}

// One fused kernel when every gradient is wanted; otherwise the input part
// (dx: B) and the parameter part (dgamma, dbeta: W) as separate kernels.
LogicalResult LayerNormOp::buildGradientFor(OpBuilder &b, ArrayRef<Value> dys,
                                            ArrayRef<bool> wanted,
                                            SmallVectorImpl<Value> &grads) {
  bool input = wanted[0], params = wanted[1] || wanted[2];
  if (input && params)
    return buildGradient(b, dys, grads);
  grads.assign(3, Value());
  if (input)
    grads[0] =
        LayerNormInputGradOp::create(b, getLoc(), getX().getType(), getX(),
                                     getGamma(), dys[0], getEpsilonAttr());
  if (params) {
    auto grad = LayerNormParamGradOp::create(b, getLoc(), getGamma().getType(),
                                             getGamma().getType(), getX(),
                                             dys[0], getEpsilonAttr());
    grads[1] = grad.getDgamma();
    grads[2] = grad.getDbeta();
  }
  return success();
}

LogicalResult RmsNormOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &grads) {
  auto grad =
      RmsNormGradOp::create(b, getLoc(), getX().getType(), getGamma().getType(),
                            getX(), getGamma(), dys[0], getEpsilonAttr());
  grads.assign({grad.getDx(), grad.getDgamma()});
  return success();
}

LogicalResult RmsNormOp::buildGradientFor(OpBuilder &b, ArrayRef<Value> dys,
                                          ArrayRef<bool> wanted,
                                          SmallVectorImpl<Value> &grads) {
  if (wanted[0] && wanted[1])
    return buildGradient(b, dys, grads);
  grads.assign(2, Value());
  if (wanted[0])
    grads[0] = RmsNormInputGradOp::create(b, getLoc(), getX().getType(), getX(),
                                          getGamma(), dys[0], getEpsilonAttr());
  if (wanted[1])
    grads[1] = RmsNormParamGradOp::create(b, getLoc(), getGamma().getType(),
                                          getX(), dys[0], getEpsilonAttr());
  return success();
}

LogicalResult EmbeddingOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                         SmallVectorImpl<Value> &grads) {
  grads.assign({EmbeddingGradOp::create(b, getLoc(), getTable().getType(),
                                        getIds(), dys[0]),
                Value()});
  return success();
}

LogicalResult AttentionOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                         SmallVectorImpl<Value> &grads) {
  auto grad = AttentionGradOp::create(
      b, getLoc(), getQ().getType(), getK().getType(), getV().getType(), getQ(),
      getK(), getV(), dys[0], getCausal());
  grads.assign({grad.getDq(), grad.getDk(), grad.getDv()});
  return success();
}

LogicalResult CrossEntropyOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                            SmallVectorImpl<Value> &grads) {
  // The global mean's gradient: fixed here, on global shapes, so that a
  // batch shard later computes its exact share. A mean over the labels
  // kept has no fixed scale: dtc-decompose-ignored-labels writes it as a
  // sum over their count first.
  if (getIgnoreIndex() && !isSum())
    return emitOpError() << "a mean over the labels not equal to ignore_index "
                            "is differentiated as a sum over their count "
                            "(run dtc-decompose-ignored-labels first)";
  int64_t positions = typeOf(getLabels()).getNumElements();
  const double scale = isSum() ? 1.0 : 1.0 / positions;
  grads.assign({CrossEntropyGradOp::create(b, getLoc(), getLogits().getType(),
                                           getLogits(), getLabels(), dys[0],
                                           b.getF32FloatAttr(scale),
                                           getIgnoreIndexAttr()),
                Value()});
  return success();
}

/// Gradient of a reduction: dy re-expanded to x's shape (times `factor`).
static Value expandReduced(OpBuilder &b, Location loc, Value dy, Value x,
                           ArrayRef<int64_t> axes, bool keepDims) {
  RankedTensorType xType = typeOf(x);
  if (!keepDims) {
    SmallVector<int64_t> shape(xType.getShape());
    for (int64_t axis : axes)
      shape[axis] = 1;
    dy = ReshapeOp::create(
        b, loc, RankedTensorType::get(shape, xType.getElementType()), dy);
  }
  return BroadcastOp::create(b, loc, xType, dy);
}

LogicalResult ReduceSumOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                         SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) {
    return expandReduced(b, getLoc(), dy, getX(), getAxes(), getKeepDims());
  });
}

LogicalResult ReduceMeanOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                          SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) {
    int64_t count = 1;
    for (int64_t axis : getAxes())
      count *= typeOf(getX()).getDimSize(axis);
    Value expanded =
        expandReduced(b, getLoc(), dy, getX(), getAxes(), getKeepDims());
    return scale(b, getLoc(), expanded, 1.0 / count);
  });
}

LogicalResult ReshapeOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) {
    return ReshapeOp::create(b, getLoc(), getX().getType(), dy);
  });
}

LogicalResult TransposeOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                         SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) {
    ArrayRef<int64_t> perm = getPermutation();
    SmallVector<int64_t> inverse(perm.size());
    for (auto [i, p] : llvm::enumerate(perm))
      inverse[p] = i;
    return TransposeOp::create(b, getLoc(), dy, inverse);
  });
}

LogicalResult CastOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  bool floatToFloat = isa<FloatType>(typeOf(getX()).getElementType()) &&
                      isa<FloatType>(typeOf(getResult()).getElementType());
  if (dys[0] && floatToFloat)
    grads[0] = CastOp::create(b, getLoc(), getX().getType(), dys[0]);
  return success();
}

LogicalResult BroadcastOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                         SmallVectorImpl<Value> &grads) {
  return unaryGradient(*this, dys, grads, [&](Value dy) {
    return unbroadcast(b, getLoc(), dy, typeOf(getX()));
  });
}

LogicalResult LabelMaskOp::buildGradient(OpBuilder &, ArrayRef<Value>,
                                         SmallVectorImpl<Value> &grads) {
  grads.assign({Value()}); // a function of integer labels
  return success();
}
