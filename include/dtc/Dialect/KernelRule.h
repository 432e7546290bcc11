//===- KernelRule.h - dtc ops seen as kernel instructions -------*- C++ -*-===//
//
// Every dtc op is the runtime kernel of the same name, and its shape and
// attribute rule lives in one place: the MLIR-free kernel library
// (include/dtc/kernels/Kernel.h). These functions turn an op into what that
// rule and the artifact see (tensor descriptions and the JSON attribute
// object) — the emitter writes exactly these into the artifact — and run the
// rule as the op's verifier (KernelRuleOpInterface).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_DIALECT_KERNELRULE_H
#define DTC_DIALECT_KERNELRULE_H

#include "dtc/kernels/Kernel.h"
#include "mlir/IR/Operation.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace mlir::dtc {

/// The artifact's name of element type `type` ("f32", "i64", ...) when the
/// kernels have that dtype, else nullopt. Covers every element type the
/// dialect allows; the ones the kernel library does not know (yet) give
/// nullopt, as does anything else.
std::optional<std::string> kernelDTypeName(Type elementType);

/// What a check rule sees of a value of type `type`; on failure reports at
/// `op` which `what` ("operand #1", "result #0") has an unsupported type.
FailureOr<::dtc::kernels::TensorDesc> kernelTensorDesc(Operation *op, Type type,
                                                       StringRef what);

/// One inherent attribute as its artifact JSON (docs/kernels.md attribute
/// types); failure, reported at `op`, for a kind the artifact has no form for.
FailureOr<nlohmann::json> kernelAttributeJson(Operation *op, Attribute attr);

/// The op's inherent attributes (its properties; never the discardable dtc.*
/// attributes passes attach) as the artifact's attribute object.
FailureOr<nlohmann::json> kernelAttributes(Operation *op);

/// Runs the kernel rule of `op` (kernel `kernelName`) on its types and
/// attributes; the rule's message becomes the op's error.
LogicalResult verifyKernelRule(Operation *op, StringRef kernelName);

/// The operand whose buffer result `resultIdx` of `op` may reuse, from the
/// "in place ok" pairs of the op's kernel rule; -1 if none.
int64_t kernelInPlaceOperand(Operation *op, unsigned resultIdx);

/// How the kernel of `op` spends its time (its kernel rule's cost class);
/// stream for an op that is no kernel.
::dtc::kernels::CostClass kernelCostClass(Operation *op);

} // namespace mlir::dtc

#endif // DTC_DIALECT_KERNELRULE_H
