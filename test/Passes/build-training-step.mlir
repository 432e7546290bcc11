// The training step: forward, reverse-mode autodiff through each op's
// gradient rule, then the optimizer, with roles and phases on everything.
// RUN: dtc-opt %s --split-input-file --dtc-build-training-step="optimizer=adamw lr=0.01 weight-decay=0.1" --dtc-assign-layers | FileCheck %s
// RUN: dtc-opt %s --split-input-file --dtc-build-training-step="optimizer=sgd lr=0.5" --dtc-assign-layers | FileCheck %s --check-prefix=SGD
// RUN: dtc-opt %s --split-input-file --dtc-build-training-step="optimizer=sgd lr=0.5 lr-schedule=cosine warmup-steps=2 decay-steps=9 min-lr=0.05" --dtc-assign-layers | FileCheck %s --check-prefix=SCHEDULED
// RUN: dtc-opt %s --split-input-file --dtc-build-training-step="optimizer=none" --dtc-assign-layers | FileCheck %s --check-prefix=GRADS
// RUN: dtc-opt %s --split-input-file --dtc-build-training-step="optimizer=adam grad-clip=1.0" --dtc-assign-layers | FileCheck %s --check-prefix=CLIP

// A tied embedding (used by the lookup and, transposed, by the head), a
// residual, and a parameter that does not reach the loss.

// CHECK-LABEL: func.func @train_step(
// Parameters, then Adam's moments, then the step counter, then data.
// CHECK-SAME: %[[EMB:[a-z0-9]+]]: tensor<10x4xf32> {dtc.init = "normal(0.02)", dtc.name = "emb", dtc.role = "param"}
// CHECK-SAME: %[[LN:[a-z0-9]+]]: tensor<4xf32> {dtc.init = "ones", dtc.name = "ln", dtc.role = "param"}
// CHECK-SAME: %[[UNUSED:[a-z0-9]+]]: tensor<3xf32> {dtc.init = "uniform(-1,1)", dtc.name = "unused", dtc.role = "param"}
// CHECK-SAME: %[[M0:[a-z0-9]+]]: tensor<10x4xf32> {dtc.init = "zeros", dtc.name = "emb:adam_m", dtc.of = "emb", dtc.role = "optimizer_state"}
// CHECK-SAME: dtc.name = "emb:adam_v"
// CHECK-SAME: %[[STEP:[a-z0-9]+]]: tensor<i64> {dtc.name = "optimizer_step", dtc.role = "step"}
// CHECK-SAME: %[[IDS:[a-z0-9]+]]: tensor<2x3xi32> {dtc.max = 10 : i64, dtc.name = "arg3", dtc.role = "input"}
// CHECK-SAME: %[[Y:[a-z0-9]+]]: tensor<2x3xi32> {dtc.max = 10 : i64, dtc.name = "arg4", dtc.role = "input"}
// CHECK-SAME: -> (tensor<f32> {dtc.name = "loss", dtc.role = "loss"}, tensor<10x4xf32> {dtc.role = "update", dtc.updates = 0 : i64}
// CHECK: %[[H:.*]] = "dtc.embedding"(%[[EMB]], %[[IDS]]) {{.*}}dtc.phase = "forward"}
// CHECK: %[[T:.*]] = "dtc.transpose"(%[[EMB]]) {{.*}}dtc.phase = "forward"
// CHECK: %[[LOGITS:.*]] = "dtc.matmul"
// CHECK: %[[LOSS:.*]] = "dtc.cross_entropy"(%[[LOGITS]], %[[Y]])
// The loss gradient seeds autodiff; the mean over 6 label positions is in
// the scale, fixed on global shapes.
// CHECK: %[[ONE:.*]] = arith.constant {{.*}}dtc.phase = "backward_input"} dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DLOGITS:.*]] = "dtc.cross_entropy_grad"(%[[LOGITS]], %[[Y]], %[[ONE]]) <{scale = 0.166666672 : f32}> {{.*}}dtc.phase = "backward_input"}
// The head's weight gradient folds the batch into one [4, 6] x [6, 10]
// product and only feeds parameters: backward_weight.
// CHECK: "dtc.reshape"({{.*}}) {{.*}}dtc.phase = "backward_weight"} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
// CHECK: "dtc.matmul"({{.*}}) {{.*}}dtc.phase = "backward_weight"} : (tensor<4x6xf32>, tensor<6x10xf32>) -> tensor<4x10xf32>
// CHECK: %[[DT:.*]] = "dtc.transpose"({{.*}}) {{.*}}dtc.phase = "backward_weight"} : (tensor<4x10xf32>) -> tensor<10x4xf32>
// The norm's gradient splits: its input gradient is B, its parameter
// gradient (marked as the parameter's gradient) is W.
// CHECK: %[[DX:.*]] = "dtc.rms_norm_input_grad"({{.*}}) {{.*}}dtc.phase = "backward_input"}
// CHECK: %[[DG:.*]] = "dtc.rms_norm_param_grad"({{.*}}) {{.*}}dtc.gradient_of = ["ln"], {{.*}}dtc.phase = "backward_weight"}
// The residual sums both paths' gradients.
// CHECK: %[[DH:.*]] = "dtc.add"({{.*}}, %[[DX]]) {{.*}}dtc.phase = "backward_input"}
// CHECK: %[[DEMB:.*]] = "dtc.embedding_grad"(%[[IDS]], %[[DH]]) {{.*}}dtc.phase = "backward_weight"}
// The tied weight's two gradients are accumulated.
// CHECK: %[[GEMB:.*]] = "dtc.add"(%[[DT]], %[[DEMB]]) {{.*}}dtc.gradient_of = ["emb"], {{.*}}dtc.phase = "backward_weight"}
// CHECK: %[[ZERO:.*]] = arith.constant {{.*}}dtc.phase = "backward_weight"} dense<0.000000e+00> : tensor<3xf32>
// CHECK: "dtc.adam_update"(%[[EMB]], %[[GEMB]], %[[M0]], %{{.*}}, %[[STEP]]) <{{{.*}}decoupled = true{{.*}}lr = 1.000000e-02 : f64, lr_schedule = "constant"{{.*}}operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0>, warmup_steps = 0 : i64, weight_decay = 1.000000e-01 : f64}> {{.*}}dtc.phase = "optimizer"}
// CHECK: "dtc.adam_update"(%[[LN]], %[[DG]],
// CHECK: "dtc.adam_update"(%[[UNUSED]], %[[ZERO]],
// CHECK: return %[[LOSS]],

// SGD-LABEL: func.func @train_step(
// SGD-NOT: optimizer_state
// SGD-NOT: dtc.role = "step"
// SGD: "dtc.sgd_update"({{.*}}) <{decay_steps = 0 : i64, lr = 5.000000e-01 : f64, lr_schedule = "constant", min_lr = 0.000000e+00 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>, warmup_steps = 0 : i64, weight_decay = 0.000000e+00 : f64}> {{.*}}dtc.phase = "optimizer"}

// A scheduled rate changes with the step: SGD then takes the step counter
// too (before the data), and every update carries the schedule.
// SCHEDULED-LABEL: func.func @train_step(
// SCHEDULED-SAME: %[[STEP:[a-z0-9]+]]: tensor<i64> {dtc.name = "optimizer_step", dtc.role = "step"}
// SCHEDULED: "dtc.sgd_update"(%{{.*}}, %{{.*}}, %[[STEP]]) <{decay_steps = 9 : i64, lr = 5.000000e-01 : f64, lr_schedule = "cosine", min_lr = 5.000000e-02 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>, warmup_steps = 2 : i64, weight_decay = 0.000000e+00 : f64}>

// GRADS-LABEL: func.func @train_step(
// GRADS-SAME: -> (tensor<f32> {dtc.name = "loss", dtc.role = "loss"}, tensor<10x4xf32> {dtc.name = "emb:grad", dtc.of = "emb", dtc.role = "grad"}
// GRADS-NOT: _update

// Clipping: one global norm over all gradients, then every gradient scaled.
// CLIP-LABEL: func.func @train_step(
// CLIP-COUNT-3: "dtc.reduce_sum"({{.*}}) <{axes = array<i64: {{.*}}>, keep_dims = false}> {{.*}}dtc.phase = "optimizer"}
// CLIP: %[[NORM:.*]] = dtc.sqrt {{.*}} {{.*}}dtc.phase = "optimizer"} : tensor<f32>
// CLIP: %[[LIMIT:.*]] = arith.constant {{.*}}dtc.phase = "optimizer"} dense<1.000000e+00> : tensor<f32>
// CLIP: %[[DENOM:.*]] = "dtc.max"
// CLIP: %[[COEF:.*]] = "dtc.div"(%[[LIMIT]], %[[DENOM]])
// CLIP-COUNT-3: "dtc.mul"({{.*}}, %[[COEF]])
// CLIP: "dtc.adam_update"
func.func @main(%emb: tensor<10x4xf32> {dtc.param, dtc.name = "emb"},
                %g: tensor<4xf32> {dtc.param, dtc.name = "ln", dtc.init = "ones"},
                %unused: tensor<3xf32> {dtc.param, dtc.name = "unused", dtc.init = "uniform(-1,1)"},
                %ids: tensor<2x3xi32> {dtc.max = 10 : i64}, %y: tensor<2x3xi32> {dtc.max = 10 : i64}) -> tensor<f32> {
  %h = "dtc.embedding"(%emb, %ids) : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  %n = "dtc.rms_norm"(%h, %g) {epsilon = 1.0e-5 : f32} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %r = "dtc.add"(%h, %n) : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %t = "dtc.transpose"(%emb) {permutation = array<i64: 1, 0>} : (tensor<10x4xf32>) -> tensor<4x10xf32>
  %z = "dtc.matmul"(%r, %t) : (tensor<2x3x4xf32>, tensor<4x10xf32>) -> tensor<2x3x10xf32>
  %l = "dtc.cross_entropy"(%z, %y) : (tensor<2x3x10xf32>, tensor<2x3xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Broadcast operands get their gradient summed back to their own shape;
// elementwise rules are built from dtc ops.
// CHECK-LABEL: func.func @train_step(
// CHECK: %[[Y:.*]] = dtc.tanh
// CHECK: %[[S:.*]] = dtc.sqrt
// CHECK: "dtc.reduce_sum"({{.*}}) <{axes = array<i64: 0>, keep_dims = false}> {{.*}}dtc.gradient_of = ["arg0"], {{.*}}dtc.phase = "backward_weight"} : (tensor<4x8xf32>) -> tensor<8xf32>
func.func @main(%w: tensor<8xf32> {dtc.param, dtc.init = "ones"}, %x: tensor<4x8xf32>,
                %y: tensor<4xi32> {dtc.max = 8 : i64}) -> tensor<f32> {
  %0 = "dtc.mul"(%x, %w) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = "dtc.tanh"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "dtc.mul"(%1, %1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "dtc.sqrt"(%2) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = "dtc.cross_entropy"(%3, %y) : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  return %4 : tensor<f32>
}
