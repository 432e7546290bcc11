//===- DtcDialect.td - the dtc dialect ---------------------*- tablegen -*-===//
#ifndef DTC_DIALECT_DTCDIALECT_TD
#define DTC_DIALECT_DTCDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Dtc_Dialect : Dialect {
  let name = "dtc";
  let cppNamespace = "::mlir::dtc";
  let summary = "Tensor ops of training models, their gradients and optimizer updates";
  let description = [{
    The `dtc` dialect holds the model format of docs/model-format.md
    (forward + loss over global, static shapes) and the internal ops the
    training-step pass adds (gradient kernels and optimizer updates). Every op
    is verified by its runtime kernel's check rule (KernelRuleOpInterface)
    and states its own gradient rule
    (`DtcGradientOpInterface`), sharding rule (`DtcShardingRuleOpInterface`)
    and cost (`DtcCostOpInterface`); passes read them from there.
  }];
  let dependentDialects = [
    "::mlir::func::FuncDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::shard::ShardDialect"
  ];
  let useDefaultAttributePrinterParser = 1;
  // dtc.param / dtc.name / dtc.init / dtc.max on @main's arguments; the
  // training step's own argument, result and op attributes. Anything else
  // in the dtc namespace is a typo and an error.
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    static constexpr ::llvm::StringLiteral kParamAttr = "dtc.param";
    static constexpr ::llvm::StringLiteral kNameAttr = "dtc.name";
    static constexpr ::llvm::StringLiteral kInitAttr = "dtc.init";
    static constexpr ::llvm::StringLiteral kMaxAttr = "dtc.max";
    // Names the training step gives the tensors it adds; model names may
    // not take them (nor contain the separator of derived names).
    static constexpr ::llvm::StringLiteral kLossName = "loss";
    static constexpr ::llvm::StringLiteral kStepName = "optimizer_step";
    static constexpr char kDerivedNameSeparator = ':';
    // Added by the training-step pass and the planner.
    static constexpr ::llvm::StringLiteral kRoleAttr = "dtc.role";
    static constexpr ::llvm::StringLiteral kOfAttr = "dtc.of";
    static constexpr ::llvm::StringLiteral kUpdatesAttr = "dtc.updates";
    // On optimizer state that is not a per-element moment: "master" (the
    // f32 master weights of a bf16/f16 parameter, dtc.of names it),
    // "loss_scale", "loss_scale_good_steps", "skipped_steps".
    static constexpr ::llvm::StringLiteral kStateKindAttr = "dtc.state_kind";
    static constexpr ::llvm::StringLiteral kPhaseAttr = "dtc.phase";
    // Its values are the Phase enum's (DtcEnums.td): phaseOf() reads them.
    // On ops producing a parameter's (full, possibly clipped) gradient: one
    // string per result, the parameter's name or "".
    static constexpr ::llvm::StringLiteral kGradientOfAttr = "dtc.gradient_of";
    static constexpr ::llvm::StringLiteral kShardingAttr = "dtc.sharding";
    static constexpr ::llvm::StringLiteral kFactorAxesAttr = "dtc.factor_axes";
    static constexpr ::llvm::StringLiteral kFactorPiecesAttr = "dtc.factor_pieces";
    // Pins for dtc-propagate-shardings: dtc.pin on an op (its first result),
    // dtc.pin_priority = "user" | "strategy" | "storage" beside it or beside
    // an argument's dtc.sharding ("storage": how the value is stored, never
    // proposed to the ops that use it).
    static constexpr ::llvm::StringLiteral kPinAttr = "dtc.pin";
    static constexpr ::llvm::StringLiteral kPinPriorityAttr = "dtc.pin_priority";
    static constexpr ::llvm::StringLiteral kGlobalTypeAttr = "dtc.global_type";
    // On a @train_step argument stored split over axes its readers need
    // whole (ZeRO-3 parameters): the partitioner gathers it once per region
    // (phase and layer) rather than once per step, so the gathered copy dies
    // between its uses.
    static constexpr ::llvm::StringLiteral kRegatherAttr = "dtc.regather";
    // On a data-parallel gradient's all-reduce issued in the backward
    // (dtc-schedule-collectives): the bucket it is reduced in. The members
    // of a bucket are packed into one buffer as each gradient is complete
    // and reduced by one collective at the last member.
    static constexpr ::llvm::StringLiteral kBucketAttr = "dtc.bucket";
    static constexpr ::llvm::StringLiteral kPlanAttr = "dtc.plan";
    // Layers (training-step pass): every op of the step carries the layer
    // it belongs to; forward ops carry an id and backward ops the id of the
    // forward op whose gradient they compute.
    static constexpr ::llvm::StringLiteral kLayerAttr = "dtc.layer";
    static constexpr ::llvm::StringLiteral kIdAttr = "dtc.id";
    static constexpr ::llvm::StringLiteral kForwardAttr = "dtc.forward";
    // On a forward op cloned into the backward by dtc-rematerialize (its
    // dtc.forward names the op it recomputes).
    static constexpr ::llvm::StringLiteral kRecomputeAttr = "dtc.recompute";
    // On an op that must see the whole batch of the step at once, never
    // one micro-batch (the count of kept labels that divides the loss,
    // dtc-decompose-ignored-labels): dtc-materialize-plan keeps the
    // micro-batch axes out of its factor sharding, so its data input is
    // read whole, once per step, before the micro-batches.
    static constexpr ::llvm::StringLiteral kWholeBatchAttr = "dtc.whole_batch";
    // On attention and its gradient under ring-attention sequence
    // parallelism (a plan with sp > 1): their sequence factors may be split,
    // and their local lowering runs the blocks around the ring.
    static constexpr ::llvm::StringLiteral kRingAttr = "dtc.ring";
    // The striped sequence layout of ring attention over n ranks (causal
    // load balancing, dtc-materialize-plan): the program holds the sequence
    // permuted so that the rank r of the ring holds positions r, r + n,
    // r + 2n, ... On a ring attention op and its gradient: n (i64). On an
    // input argument of the step: [dim, n], the dimension the data feed
    // delivers in that order.
    static constexpr ::llvm::StringLiteral kStripedAttr = "dtc.striped";
    static constexpr ::llvm::StringLiteral kStripedInputAttr = "dtc.striped_input";
    // The zigzag sequence layout, the same way: rank r of n holds the
    // chunks r and 2n - 1 - r of the sequence cut into 2n.
    static constexpr ::llvm::StringLiteral kZigzagAttr = "dtc.zigzag";
    static constexpr ::llvm::StringLiteral kZigzagInputAttr = "dtc.zigzag_input";
    // Pipelines (stage split): the virtual stage of an op, the pipeline
    // stage (device) a step function runs on, and messages between stages.
    static constexpr ::llvm::StringLiteral kStageAttr = "dtc.stage";
    static constexpr ::llvm::StringLiteral kPipelineStageAttr = "dtc.pipeline_stage";
    static constexpr ::llvm::StringLiteral kMessageAttr = "dtc.message";
    static constexpr ::llvm::StringLiteral kPeerAttr = "dtc.peer";
    // When a message travels: per micro-batch, once before the micro-batches
    // ("step") or once after them ("accumulated").
    static constexpr ::llvm::StringLiteral kScopeAttr = "dtc.scope";
    // On a function: it is a training step (what planners, the partitioner
    // and the emitter work on), whatever its symbol name.
    static constexpr ::llvm::StringLiteral kTrainStepAttr = "dtc.train_step";
  }];
}

include "dtc/Dialect/DtcInterfaces.td"

// A dtc op accepts only its own attributes and the dtc.* ones passes attach:
// a misspelled attribute (`casual` for `causal`) is an error, not silently
// kept beside the default it was meant to override.
def Dtc_KnownAttributesOnly : NativeOpTrait<"KnownAttributesOnly"> {
  let cppNamespace = "::mlir::dtc::OpTrait";
}

// Every dtc op is a runtime kernel and is verified by that kernel's rule
// (KernelRuleOpInterface). It comes first among the traits, right after
// ODS's own operand and attribute constraints, so that a shape or attribute
// error is always reported in the rule's words, before type inference.
class Dtc_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dtc_Dialect, mnemonic,
         !listconcat([Dtc_KernelRuleOpInterface], traits, [Dtc_KnownAttributesOnly])>;

#endif // DTC_DIALECT_DTCDIALECT_TD
