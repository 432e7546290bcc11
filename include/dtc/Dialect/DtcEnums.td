//===- DtcEnums.td - the names passes annotate with --------*- tablegen -*-===//
//
// The one place that names each phase, role, pin priority, recomputation
// mode and precision. The IR keeps them as strings (dtc.phase = "forward"):
// the generic form is read by tools outside dtc (the float64 reference of
// the tests) and the artifact uses the same words, so only the C++ side is
// typed. Passes read and write them through the accessors of
// include/dtc/Dialect/Utils.h, never by literal.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_DIALECT_DTCENUMS_TD
#define DTC_DIALECT_DTCENUMS_TD

include "mlir/IR/EnumAttr.td"

class Dtc_Enum<string name, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let cppNamespace = "::mlir::dtc";
  let genSpecializedAttr = 0;
}

def Dtc_Phase : Dtc_Enum<"Phase", "part of the training step (dtc.phase)", [
  I32EnumAttrCase<"Forward", 0, "forward">,
  // B: the gradients of activations (what earlier layers wait for).
  I32EnumAttrCase<"BackwardInput", 1, "backward_input">,
  // W: the gradients of parameters (nothing waits for them but the update).
  I32EnumAttrCase<"BackwardWeight", 2, "backward_weight">,
  I32EnumAttrCase<"Optimizer", 3, "optimizer">
]>;

def Dtc_Role : Dtc_Enum<"Role", "what a training step's argument or result holds (dtc.role)", [
  I32EnumAttrCase<"Param", 0, "param">,
  I32EnumAttrCase<"OptimizerState", 1, "optimizer_state">,
  I32EnumAttrCase<"Step", 2, "step">,
  I32EnumAttrCase<"Input", 3, "input">,
  I32EnumAttrCase<"Loss", 4, "loss">,
  I32EnumAttrCase<"Grad", 5, "grad">,
  I32EnumAttrCase<"Update", 6, "update">,
  // Messages between pipeline stages (dtc-split-pipeline).
  I32EnumAttrCase<"Send", 7, "send">,
  I32EnumAttrCase<"Recv", 8, "recv">
]>;

def Dtc_PinPriority : Dtc_Enum<"PinPriority", "who pinned a sharding (dtc.pin_priority)", [
  I32EnumAttrCase<"User", 0, "user">,
  I32EnumAttrCase<"Strategy", 1, "strategy">,
  // How a value is stored, never proposed to the ops that use it.
  I32EnumAttrCase<"Storage", 2, "storage">
]>;

def Dtc_Recompute : Dtc_Enum<"Recompute", "activation checkpointing of a pipeline stage", [
  I32EnumAttrCase<"None", 0, "none">,
  I32EnumAttrCase<"Selective", 1, "selective">,
  I32EnumAttrCase<"Full", 2, "full">
]>;

def Dtc_Precision : Dtc_Enum<"Precision", "numeric precision of training", [
  I32EnumAttrCase<"F32", 0, "f32">,
  I32EnumAttrCase<"Bf16Mixed", 1, "bf16-mixed">,
  I32EnumAttrCase<"Fp16Mixed", 2, "fp16-mixed">
]>;

#endif // DTC_DIALECT_DTCENUMS_TD
