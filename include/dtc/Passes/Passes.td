//===- Passes.td - dtc passes ------------------------------*- tablegen -*-===//
#ifndef DTC_PASSES_PASSES_TD
#define DTC_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def CheckModel : Pass<"dtc-check-model", "::mlir::ModuleOp"> {
  let summary = "Checks the model contract of docs/model-format.md";
  let description = [{
    One `func.func @main` with a single block, returning exactly one
    `tensor<f32>` loss; parameters are float tensors with valid `dtc.init`;
    every integer data input carries `dtc.max`; every op is a dtc op,
    `arith.constant` or the return; parameter names are unique.
  }];
}

def DecomposeComposites : Pass<"dtc-decompose-composites", "::mlir::ModuleOp"> {
  let summary = "Writes the composite model ops (dtc.moe, dtc.load_balancing_loss) in kernels";
  let description = [{
    Every op with DecomposeOpInterface is replaced by the ops its
    `decompose` builds (dtc.moe: router softmax, moe_route, moe_dispatch,
    the experts' batched matmuls, moe_combine). Then common subexpressions
    are merged, so that a load-balancing loss and the dtc.moe it belongs to
    share one router product. A module without composite ops is unchanged.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect", "::mlir::arith::ArithDialect"];
}

def DecomposeIgnoredLabels : Pass<"dtc-decompose-ignored-labels", "::mlir::ModuleOp"> {
  let summary = "Writes a mean cross entropy with ignored labels as a sum over a count";
  let description = [{
    `dtc.cross_entropy` with `ignore_index` and reduction "mean" in @main
    becomes `sum / max(count, 1)`: the cross entropy's sum over the kept
    positions, and their count (`dtc.reduce_sum` of `dtc.label_mask`).
    The count depends on the data, so the mean cannot be split over the
    batch with a fixed share per shard as a plain mean is; the sum and the
    count split over it as partial sums, and the division sees both whole.
    With no position kept, the loss and its gradient are 0.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect", "::mlir::arith::ArithDialect"];
}

def BuildTrainingStep : Pass<"dtc-build-training-step", "::mlir::ModuleOp"> {
  let summary = "Turns @main (forward + loss) into @train_step (forward, backward, optimizer)";
  let description = [{
    Reverse-mode autodiff over the forward ops (each op's
    GradientOpInterface), optional global-norm gradient clipping, then the
    optimizer update, all as dtc ops. `@train_step` takes
    `(params..., optimizer state..., step, inputs...)` and returns
    `(loss, new params..., new optimizer state...)`; argument and result
    attributes `dtc.role`, `dtc.name`, `dtc.of`, `dtc.updates` describe each.
    Every op carries `dtc.phase`: `forward`, `backward_input` (on the path of
    activation gradients), `backward_weight` (only feeds parameter
    gradients) or `optimizer`. With `optimizer=none` the step returns
    `(loss, gradients...)` instead of updating.

    Mixed precision (`precision=bf16-mixed|fp16-mixed`): parameters become
    bf16/f16 and so do the forward's float values (float data inputs are
    cast on entry; the loss stays f32, as cross entropy produces it; an op
    with an f32 operand computes in f32). Each parameter gets f32 master
    weights (optimizer state of dtc.state_kind "master"), which the update
    reads and writes with the low-precision gradient; the parameter is the
    updated master rounded. fp16 adds dynamic loss scaling: the backward
    starts from the loss scale, found_inf (0 unless a gradient is inf/NaN)
    gates the updates, which unscale the gradient in f32, and
    dtc.loss_scale_update backs off or grows the scale.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adam\"",
           "sgd, adam, adamw or none (return the gradients)">,
    Option<"lr", "lr", "double", /*default=*/"1e-3",
           "learning rate (the peak of a schedule)">,
    Option<"lrSchedule", "lr-schedule", "std::string", /*default=*/"\"constant\"",
           "constant, cosine or linear: the rate after the warmup (formulas "
           "in include/dtc/kernels/LearningRate.h)">,
    Option<"warmupSteps", "warmup-steps", "int64_t", /*default=*/"0",
           "updates over which the rate rises linearly to lr">,
    Option<"decaySteps", "decay-steps", "int64_t", /*default=*/"0",
           "cosine/linear: the update at which the rate reaches min-lr">,
    Option<"minLr", "min-lr", "double", /*default=*/"0.0",
           "cosine/linear: the final rate">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.0",
           "weight decay (L2 for sgd/adam, decoupled for adamw)">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "Adam beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "Adam beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "Adam epsilon">,
    Option<"gradClip", "grad-clip", "double", /*default=*/"0.0",
           "clip gradients to this global L2 norm (0: off)">,
    Option<"precision", "precision", "std::string", /*default=*/"\"f32\"",
           "f32, bf16-mixed or fp16-mixed (low-precision parameters, "
           "activations and gradients; f32 master weights and optimizer "
           "state; fp16 adds dynamic loss scaling)">,
    Option<"lossScale", "loss-scale", "double", /*default=*/"65536.0",
           "fp16-mixed: the initial loss scale">,
    Option<"lossScaleWindow", "loss-scale-window", "int64_t", /*default=*/"2000",
           "fp16-mixed: good steps in a row before the loss scale doubles">,
    Option<"keepForward", "keep-forward", "bool", /*default=*/"false",
           "keep @main beside @train_step">
  ];
  let dependentDialects = ["::mlir::dtc::DtcDialect", "::mlir::arith::ArithDialect"];
}

def MergeDuplicateBackwardOps : Pass<"dtc-merge-duplicate-backward-ops",
                                     "::mlir::ModuleOp"> {
  let summary = "Computes each backward value once";
  let description = [{
    The gradient rules of ops that share an operand build the same value
    once each: three matmuls reading one normalised activation (q, k, v)
    each reshape it to [rows, k] for their weight gradient. Identical
    backward ops (same op, operands, attributes, result types, layer and
    phase; `dtc.id` and `dtc.forward` aside) become the first of them. It
    runs after `dtc-assign-layers`, so only ops of one layer merge.
    MLIR's CSE does not merge them because their `dtc.forward` differ, and
    it matters beyond the copy saved: under sequence parallelism the
    partitioner gathers each copy's sequence shards separately, three
    all-gathers where one does.
  }];
}

def AssignLayers : Pass<"dtc-assign-layers", "::mlir::ModuleOp"> {
  let summary = "Tags every op of the training step with its layer (dtc.layer)";
  let description = [{
    Cuts the forward's chain of activations (values depending on both a
    parameter and the data) where the fewest activations are live (for a
    transformer, the residual stream between blocks); segments without a
    parameter join the one before. Other forward ops take their first
    consumer's layer, backward ops their forward op's (`dtc.forward`),
    optimizer ops the layer of the parameter they update or the latest
    layer they read from. Layers are the unit of recomputation
    (`dtc-rematerialize`) and of pipeline stages (`dtc-balance-stages`).
  }];
}

def ApplyStrategy : Pass<"dtc-apply-strategy", "::mlir::ModuleOp"> {
  let summary = "Turns a strategy's degrees into the module's plan (#dtc.plan)";
  let description = [{
    Strategy -> Plan. Creates the device grid (`shard.grid @mesh`), maps
    each parallel degree to grid axes (tensor parallelism takes the
    innermost axes whose sizes multiply to `tp`, pipeline stages the next
    axes multiplying to `pp`, data parallelism the outer rest) and writes
    the plan as `dtc.plan = #dtc.plan<...>` on the module, with the ZeRO
    stage, the schedule, the recomputation and the precision it is given.
    What the plan means for each value is `dtc-materialize-plan`'s job.

    With `microbatches` M > 1 (and always with pp > 1) the grid gets one
    more, virtual axis of size M (no devices: the emitter turns it into a
    loop over micro-batches), and the batch is split over it inside each dp
    shard. So the partitioned step is what one micro-batch computes,
    parameter gradients are pending sums over it (accumulated over the
    micro-batches), and the optimizer, which needs them whole, runs once
    after the last one.
  }];
  let options = [
    ListOption<"mesh", "mesh", "int64_t", "device grid shape, outermost axis first">,
    Option<"dp", "dp", "int64_t", /*default=*/"0",
           "data-parallel degree (0: the devices tp and pp leave)">,
    Option<"tp", "tp", "int64_t", /*default=*/"1",
           "tensor-parallel degree (Megatron)">,
    Option<"zero", "zero", "int64_t", /*default=*/"0",
           "ZeRO stage over the data-parallel axes: 1 splits the optimizer "
           "state (and the update), 2 also the gradients, 3 also the "
           "parameters (gathered where they are used)">,
    Option<"pp", "pp", "int64_t", /*default=*/"1",
           "pipeline stages (the mesh axes inside tp's multiplying to pp)">,
    Option<"sp", "sp", "int64_t", /*default=*/"1",
           "ring-attention sequence parallelism: the sequence split over one "
           "whole mesh axis (inside tp's, outside pp's)">,
    Option<"ep", "ep", "int64_t", /*default=*/"1",
           "expert parallelism: whole mesh axes (outside pp's, inside dp's) "
           "that split the batch as dp does and the experts of every "
           "mixture-of-experts layer">,
    Option<"spLayout", "sp-layout", "std::string", /*default=*/"\"zigzag\"",
           "ring attention's sequence layout: zigzag (rank r holds chunks r "
           "and 2 sp - 1 - r of 2 sp), striped (rank r holds positions r, "
           "r + sp, ...; both balance causal work) or contiguous (one chunk "
           "per rank)">,
    Option<"tpLayout", "tp-layout", "std::string", /*default=*/"\"megatron\"",
           "which factor of each op the tp axes split: megatron (column- and "
           "row-parallel) or ilp (the intra-op integer program)">,
    Option<"virtualStages", "virtual-stages", "int64_t", /*default=*/"1",
           "model chunks per pipeline stage (interleaved schedules)">,
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1",
           "micro-batches per step: a virtual grid axis splitting the batch "
           "inside each data-parallel shard">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"",
           "pipeline schedule of a pipelined plan">,
    Option<"recompute", "recompute", "std::string", /*default=*/"\"none\"",
           "activation checkpointing on every stage: none, selective or full">,
    Option<"precision", "precision", "std::string", /*default=*/"\"f32\"",
           "the precision the training step was built with">,
    Option<"sequenceParallel", "sequence-parallel", "bool", /*default=*/"false",
           "Megatron sequence parallelism inside tensor parallelism (tp > 1)">
  ];
  let dependentDialects = ["::mlir::shard::ShardDialect", "::mlir::dtc::DtcDialect"];
}

def MaterializePlan : Pass<"dtc-materialize-plan", "::mlir::ModuleOp"> {
  let summary = "Annotates the training step with the plan's shardings: pins, then propagation";
  let description = [{
    Plan -> pins -> propagation, for any planner that writes a `#dtc.plan`.
    Pins the shardings the plan's degrees imply (every data input's batch
    dimension over the dp axes and the micro-batch axis; with tp > 1
    Megatron's vocab-parallel embedding tables and column-parallel weights),
    keeps user pins (`dtc-pin-sharding`) over its own, and lets sharding
    propagation derive a sharding for every argument and a factor sharding
    (`dtc.factor_axes`) for every op. With `zero` >= 1 a second round plans
    the optimizer phase split over the data-parallel axes too: each rank
    updates its piece of every parameter, from the optimizer state it
    stores (split by storage pins) and its piece of the gradient (the
    partitioner reduce-scatters it); the updated pieces are gathered back
    into the parameters. ZeRO-2 differs from 1 only in when the
    reduce-scatter runs (dtc-schedule-collectives). With `zero` = 3 the
    parameters are stored split as well (marked `dtc.regather`): the
    forward and backward never see it, and the partitioner gathers each
    where it is used. The partitioner reads only these annotations, so a
    searched plan and a pinned one look the same to it.
    With `tp_layout = "ilp"` the tensor-parallel split of every forward op
    and parameter comes from Alpa's intra-op integer program
    (include/dtc/Planner/TensorLayout.h), costed on `hardware`, instead of
    Megatron's pins.
  }];
  let options = [
    Option<"hardware", "hardware", "std::string", /*default=*/"\"a100\"",
           "hardware profile the tp_layout = \"ilp\" program is costed on "
           "(a name or a JSON file, as dtc compile --hw)">,
    Option<"deviceMemory", "device-memory", "double", /*default=*/"0",
           "bytes per device the ilp layout may use (0: the profile's)">,
    Option<"leastMemoryWhenNothingFits", "least-memory-when-nothing-fits",
           "bool", /*default=*/"false",
           "when no ilp layout fits, the one that needs least memory instead "
           "of an error">
  ];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

def BalanceStages : Pass<"dtc-balance-stages", "::mlir::ModuleOp"> {
  let summary = "Writes the plan's stage cuts: layers balanced over the virtual stages";
  let description = [{
    For a plan with more than one virtual stage (pp x virtual-stages) and no
    `stage_cuts` yet, cuts the layers (`dtc.layer`) into that many
    contiguous groups balancing the cost model's compute estimate (every
    op's flops: forward, backward, recomputation and optimizer; not the op
    count) and records the first layer of each group after the first in
    the plan (`balanceStages`, include/dtc/Planner/StageBalance.h). Runs
    after `dtc-rematerialize`, whose recomputation is part of the cost;
    `dtc-split-pipeline` only applies the cuts. Cuts a planner wrote are
    kept.
  }];
}

def Rematerialize : Pass<"dtc-rematerialize", "::mlir::ModuleOp"> {
  let summary = "Activation checkpointing: recomputes forward values in the backward";
  let description = [{
    For every layer (`dtc.layer`) of each training step, clones the forward
    ops whose values the backward reads just before the first backward op
    that reads them, and points the backward at the clones, so the forward
    values die in the forward. `full` keeps only each layer's boundary
    values (read by another layer's forward ops, or returned) and recomputes
    the rest of the layer from them; `selective` recomputes only ops with
    the CheapToRecompute trait (elementwise activations, data movement,
    softmax, attention) whose operands stay alive anyway (Megatron's
    selective recompute); `none` changes nothing. Clones carry
    `dtc.recompute`, `dtc.forward` (the id of the op they recompute), their
    layer, their original's plan annotations, and the phase of their first
    need (`backward_input` or `backward_weight`). The same kernels run on
    the same inputs, so the numbers are unchanged. Without `mode`, each
    layer takes the `recompute` mode of its pipeline stage in the plan
    (modes that differ by stage need the plan's `stage_cuts`).
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"\"",
           "none, full (keep layer boundaries) or selective (recompute cheap "
           "ops) on every layer; by default the plan's recompute per "
           "pipeline stage (full when the module has no plan)">
  ];
  let dependentDialects = ["::mlir::dtc::DtcDialect"];
}

def SplitPipeline : Pass<"dtc-split-pipeline", "::mlir::ModuleOp"> {
  let summary = "Cuts the planned training step into one function per pipeline stage";
  let description = [{
    Runs when the plan (`dtc.plan`) has pp > 1 or micro-batches. Places
    the layers (`dtc.layer`) on the pp x virtual-stages virtual stages the
    plan's `stage_cuts` give (`dtc-balance-stages` decides them); virtual
    stage k runs on pipeline stage k mod pp. Builds one function per pipeline stage
    (`dtc.train_step`, `dtc.pipeline_stage`), every op tagged with its
    virtual stage (`dtc.stage`) and ordered forward, B, W, optimizer. A value
    used on another virtual stage becomes a message: a result with role
    `send` on the producer's stage and an argument with role `recv` on the
    consumer's, both with the value's planned sharding (so a pending sum is
    reduced before it is sent) and the same `dtc.message` id. A parameter
    read on several stages (a tied embedding) is an argument of each, and
    its update runs on each from the same gradient, summed on one stage and
    sent to the others. Constants are copied where they are used.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect"];
}

def PinSharding : Pass<"dtc-pin-sharding", "::mlir::ModuleOp"> {
  let summary = "Pins the sharding of named parameters at user priority";
  let description = [{
    For each `NAME=[[axes of dim 0], [axes of dim 1], ...]` in `pins`, sets
    `dtc.sharding` (on grid `grid`) and `dtc.pin_priority = "user"` on the
    `@train_step` parameter named NAME. `dtc-materialize-plan` honours user
    pins over its own, and propagation plans everything else around them
    (docs/writing-a-sharding-pass.md walks through this pass).
  }];
  let options = [
    ListOption<"pins", "pins", "std::string",
               "NAME=[[axes], ...] per pinned parameter">,
    Option<"grid", "grid", "std::string", /*default=*/"\"mesh\"",
           "name of the shard.grid the axes refer to">
  ];
}

def PropagateShardings : Pass<"dtc-propagate-shardings", "::mlir::ModuleOp"> {
  let summary = "Completes a plan from pinned shardings by propagation";
  let description = [{
    Reads the plan's grid (`dtc.plan = #dtc.plan<@NAME, ...>`) and the pins on
    `@train_step`: a `dtc.sharding` on an argument, or `dtc.pin` on an op (for
    its first result), each with an optional `dtc.pin_priority` of "user"
    (the default) or "strategy". Propagates them forward and backward
    through the ops' sharding rules (include/dtc/Sharding/Propagation.h:
    user > strategy > inferred) and writes the completed plan: a
    `dtc.sharding` on every argument and a `dtc.factor_axes` on every op.
    Pins on arguments are kept; whatever `dtc.factor_axes` ops carried
    before is replaced.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

def Partition : Pass<"dtc-partition", "::mlir::ModuleOp"> {
  let summary = "SPMD-partitions @train_step to per-device shapes";
  let description = [{
    Rewrites every op to its local shapes under the plan's factor shardings
    (ops with a LocalLoweringOpInterface build their own local computation)
    and inserts the collectives that reshard values between producers and
    consumers, planned by the resharding library: `shard.all_reduce` for
    pending partial sums and maxima (data-parallel gradients, the loss,
    row-parallel outputs), `shard.reduce_scatter`, `shard.all_to_all`,
    `shard.all_gather`, `shard.all_slice`. Ops reduced over a sharded `mean`
    factor are rescaled so their partial sums add up to the global mean.
    Uneven splits are padded (`dtc.pad` around collectives,
    `dtc.fill_padding` before reductions).
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect", "::mlir::dtc::DtcDialect"];
}

def ScheduleCollectives : Pass<"dtc-schedule-collectives", "::mlir::ModuleOp"> {
  let summary = "Orders ZeRO's collectives in the partitioned step";
  let description = [{
    Runs after `dtc-partition` on the plan's ZeRO stage (`#dtc.plan`'s
    `zero`); moves collectives, never changes what they compute, and every
    rank moves them alike (their order stays matched):
    - ZeRO-1 with micro-batches: a gradient's sum over the micro-batch axis
      goes before its reduce-scatter over dp (accumulated whole, scattered
      once after the flush) instead of after it;
    - ZeRO-2 and 3: each parameter gradient's reduction (the reduce-scatter
      into the rank's piece, with its padding) is issued as soon as the
      gradient is complete instead of at the update, so the full gradient
      dies there and only the piece is kept until the optimizer;
    - ZeRO-1/2: the gather of each parameter's updated piece (and the crop
      of its padding), which the partitioner places at the return, runs
      right after the op producing the piece (the update, or mixed
      precision's cast of the master piece), so each piece dies there
      rather than every piece living to the end of the step;
    - ZeRO-3: the gathers of `dtc.regather` parameters are prefetched: the
      gathers a region (a layer when ops carry `dtc.layer`, else one
      consuming op) needs are issued before the previous region of the same
      phase starts computing, so a backend with asynchronous collectives
      overlaps them with that computation (the CPU runtime runs the list in
      order: the gather simply comes earlier, and its memory lives a region
      longer);
    - pipelines (any ZeRO stage): collectives that only feed a message (a
      `send` result) run right after their operand, in its phase, rather
      than at the return, so a stage sends before it waits for the answer
      (the clipping norm's shares) and a tensor-parallel stage output is
      summed per micro-batch;
    - data parallelism without ZeRO or micro-batches: each parameter
      gradient's all-reduce is issued as soon as the gradient is complete
      (in the backward, not at the update), and consecutive ones on the
      same communicator, reduction and element type are grouped into
      buckets of at most `bucket-bytes` (`dtc.bucket` on each member): the
      runtime packs a bucket's gradients as they are complete and reduces
      the bucket with one collective while the rest of the backward runs.
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", /*default=*/"25 << 20",
           "largest data-parallel gradient bucket in bytes (0: one "
           "all-reduce per gradient)">,
  ];
}

def KeepAttentionStats : Pass<"dtc-keep-attention-stats", "::mlir::ModuleOp"> {
  let summary = "Keeps attention's output and logsumexp for its backward (--attention-stats keep)";
  let description = [{
    On the partitioned step: a forward `dtc.attention` and the
    `dtc.attention_grad` of the same q, k, v (not ring attention's) become
    `dtc.attention_block` at positions 0 (the same output, and the rows'
    logsumexp) and `dtc.attention_block_grad` reading them, so the
    backward does not recompute the statistics with a forward pass. The
    output and the f32 logsumexp `[B, H, S]` then live until the backward.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect",
                           "::mlir::arith::ArithDialect"];
}

def FoldTransposes : Pass<"dtc-fold-transposes", "::mlir::ModuleOp"> {
  let summary = "Rewrites transposes so that the matmuls reading them absorb them";
  let description = [{
    On the partitioned step, just before emission (the emitter folds a
    transpose of the last two dimensions into its readers when they are all
    matmul operands): `transpose(transpose(x))` with inverse permutations
    becomes `x`, and `transpose(matmul(a, b))` of 2-D operands read only by
    the transpose becomes `matmul(transpose(b), transpose(a))`, whose
    transposes then fold or cancel. Autodiff of a transposed weight (the LM
    head tied to the embedding table) produces both: without them the
    weight's transpose and its gradient's are materialized every step.
    Rewrites only within one phase, pipeline chunk and recomputation.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect"];
}

def FuseMatmulEpilogues : Pass<"dtc-fuse-matmul-epilogues", "::mlir::ModuleOp"> {
  let summary = "Fuses a matmul's bias add and GELU into its kernel";
  let description = [{
    On the partitioned step, just before emission: `dtc.matmul` followed by
    `dtc.add` of a bias `[N]` (the product's last dimension, either operand
    order) becomes `dtc.matmul_bias`; followed by `dtc.gelu` (after the bias
    add or not) it becomes `dtc.matmul_gelu`, which returns the GELU and its
    input (what `gelu_grad` reads). A chain stops where a value would be
    lost: a product read by anything but the bias add is not fused with it
    (a non-broadcast add, an add after a collective, a product read twice).
    Only f32 ops of one phase, pipeline chunk and recomputation are fused;
    the kernel computes the same operations on the same values, so the
    numbers stay those of the separate kernels.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect"];
}

def TestPrintShardingRules : Pass<"dtc-test-print-sharding-rules", "::mlir::ModuleOp"> {
  let summary = "Emits each op's sharding rule as a remark (for lit tests)";
}

def TestPrintTensorLayout : Pass<"dtc-test-print-tensor-layout", "::mlir::ModuleOp"> {
  let summary = "Emits the tensor-parallel layout program's choice per op and parameter as remarks (for lit tests)";
  let description = [{
    `planTensorLayout` (include/dtc/Planner/TensorLayout.h) on the training
    step for its plan's tp axes, costed on `hardware`: per forward op the
    factor tp splits (or whole), per parameter the dimension, and the
    program's size, optimality, cost and memory. Plans without the
    micro-batch restriction dtc-materialize-plan adds.
  }];
  let options = [
    Option<"hardware", "hardware", "std::string", /*default=*/"\"a100\"",
           "hardware profile (a name or a JSON file)">,
    Option<"deviceMemory", "device-memory", "double", /*default=*/"0",
           "bytes per device (0: the profile's)">,
    Option<"mergeElementwise", "merge-elementwise", "bool", /*default=*/"true",
           "element-wise ops follow their operand's node (false: each op a node)">
  ];
}

def TestPrintModelStructure : Pass<"dtc-test-print-model-structure", "::mlir::ModuleOp"> {
  let summary = "Emits the training step's prologue, repeated blocks and epilogue as a remark (for lit tests)";
  let description = [{
    `analyzeModelStructure` (include/dtc/Planner/ModelStructure.h) on each
    training step: the layers, how many are distinct, the run of identical
    blocks, and each layer's class (the first layer identical to it).
  }];
}

#endif // DTC_PASSES_PASSES_TD
