//===- KernelRule.cpp - run the shared kernel rules as op verifiers -------===//
#include "dtc/Dialect/KernelRule.h"
#include "dtc/Dialect/DtcOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using json = nlohmann::json;

std::optional<std::string> mlir::dtc::kernelDTypeName(Type elementType) {
  // The model format's names for the element types the dialect allows; the
  // kernel library decides which of them it has (rt::parseDType), so a
  // dtype it learns needs no change here.
  std::optional<std::string> name;
  if (elementType.isF32())
    name = "f32";
  else if (elementType.isBF16())
    name = "bf16";
  else if (elementType.isF16())
    name = "f16";
  else if (elementType.isSignlessInteger(32))
    name = "i32";
  else if (elementType.isSignlessInteger(64))
    name = "i64";
  ::dtc::rt::DType dtype;
  if (!name || !::dtc::rt::parseDType(*name, dtype))
    return std::nullopt;
  return name;
}

FailureOr<::dtc::kernels::TensorDesc>
mlir::dtc::kernelTensorDesc(Operation *op, Type type, StringRef what) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return op->emitOpError() << what << " has type " << type
                             << "; the kernels take statically shaped tensors";
  std::optional<std::string> name = kernelDTypeName(tensor.getElementType());
  ::dtc::rt::DType dtype;
  if (!name || !::dtc::rt::parseDType(*name, dtype))
    return op->emitOpError()
           << what << " has element type " << tensor.getElementType()
           << ", which the kernels do not support (f32, bf16 or f16 floats, "
              "i32/i64 ids)";
  return ::dtc::kernels::TensorDesc{
      dtype,
      ::dtc::rt::Shape(tensor.getShape().begin(), tensor.getShape().end())};
}

FailureOr<json> mlir::dtc::kernelAttributeJson(Operation *op, Attribute attr) {
  if (auto b = dyn_cast<BoolAttr>(attr))
    return json(b.getValue());
  if (auto i = dyn_cast<IntegerAttr>(attr))
    return json(i.getValue().getSExtValue());
  if (auto f = dyn_cast<FloatAttr>(attr))
    return json(f.getValueAsDouble());
  if (auto s = dyn_cast<StringAttr>(attr))
    return json(s.getValue().str());
  if (auto a = dyn_cast<DenseI64ArrayAttr>(attr))
    return json(
        std::vector<int64_t>(a.asArrayRef().begin(), a.asArrayRef().end()));
  return op->emitError() << "cannot serialize attribute " << attr
                         << " into the artifact";
}

FailureOr<json> mlir::dtc::kernelAttributes(Operation *op) {
  json attrs = json::object();
  if (auto props =
          dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute()))
    for (NamedAttribute attr : props) {
      // Which optional operands are present shows in the operands themselves.
      if (attr.getName() == "operandSegmentSizes")
        continue;
      FailureOr<json> value = kernelAttributeJson(op, attr.getValue());
      if (failed(value))
        return failure();
      attrs[attr.getName().str()] = *value;
    }
  return attrs;
}

LogicalResult mlir::dtc::verifyKernelRule(Operation *op, StringRef kernelName) {
  const ::dtc::kernels::KernelInfo *kernel =
      ::dtc::kernels::findKernel(kernelName.str());
  if (!kernel)
    return op->emitOpError() << "has no kernel '" << kernelName
                             << "' (docs/kernels.md) to check it against";
  std::vector<::dtc::kernels::TensorDesc> in, out;
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    FailureOr<::dtc::kernels::TensorDesc> desc = kernelTensorDesc(
        op, operand.getType(), "operand #" + std::to_string(i));
    if (failed(desc))
      return failure();
    in.push_back(std::move(*desc));
  }
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    FailureOr<::dtc::kernels::TensorDesc> desc =
        kernelTensorDesc(op, result.getType(), "result #" + std::to_string(i));
    if (failed(desc))
      return failure();
    out.push_back(std::move(*desc));
  }
  FailureOr<json> attrs = kernelAttributes(op);
  if (failed(attrs))
    return failure();
  std::string verdict = ::dtc::kernels::checkRule(*kernel, in, out, *attrs);
  if (!verdict.empty())
    return op->emitOpError() << verdict;
  return success();
}

::dtc::kernels::CostClass mlir::dtc::kernelCostClass(Operation *op) {
  auto rule = dyn_cast<KernelRuleOpInterface>(op);
  const ::dtc::kernels::KernelInfo *kernel =
      rule ? ::dtc::kernels::findKernel(rule.getKernelName().str()) : nullptr;
  return kernel ? kernel->cost : ::dtc::kernels::CostClass::Stream;
}

int64_t mlir::dtc::kernelInPlaceOperand(Operation *op, unsigned resultIdx) {
  auto rule = dyn_cast<KernelRuleOpInterface>(op);
  if (!rule)
    return -1;
  const ::dtc::kernels::KernelInfo *kernel =
      ::dtc::kernels::findKernel(rule.getKernelName().str());
  if (!kernel)
    return -1;
  for (auto [out, in] : kernel->inPlace)
    if (out == int(resultIdx))
      return in;
  return -1;
}
