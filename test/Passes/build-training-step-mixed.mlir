// Mixed precision in the training step: low-precision parameters and
// forward values (autocast's widest-type rule: what follows the f32 loss
// stays f32; constants take their user's type), f32 master weights the
// update reads and writes, the parameter their rounding; fp16 adds dynamic
// loss scaling.
// RUN: dtc-opt %s --dtc-build-training-step="precision=bf16-mixed" --dtc-assign-layers | FileCheck %s
// RUN: dtc-opt %s --dtc-build-training-step="precision=fp16-mixed loss-scale=1024 loss-scale-window=7" --dtc-assign-layers | FileCheck %s --check-prefix=FP16
// RUN: dtc-opt %s --dtc-build-training-step="precision=bf16-mixed optimizer=sgd grad-clip=1.0" --dtc-assign-layers | FileCheck %s --check-prefix=SGD
// RUN: not dtc-opt %s --dtc-build-training-step="precision=fp8" --dtc-assign-layers 2>&1 | FileCheck %s --check-prefix=BAD

func.func @main(%w: tensor<4x3xf32> {dtc.param, dtc.name = "w"},
                %x: tensor<2x4xf32> {dtc.name = "x"},
                %y: tensor<2xi32> {dtc.name = "y", dtc.max = 3 : i64}) -> tensor<f32> {
  %half = arith.constant dense<0.5> : tensor<f32>
  %h = "dtc.matmul"(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %s = "dtc.mul"(%h, %half) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %l = "dtc.cross_entropy"(%s, %y) : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  %l2 = "dtc.mul"(%l, %half) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l2 : tensor<f32>
}

// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x3xbf16> {dtc.init = "normal(0.02)", dtc.name = "w", dtc.role = "param"}
// CHECK-SAME: %[[MASTER:[a-z0-9]+]]: tensor<4x3xf32> {dtc.init = "normal(0.02)", dtc.name = "w:master", dtc.of = "w", dtc.role = "optimizer_state", dtc.state_kind = "master"}
// CHECK-SAME: %[[M:[a-z0-9]+]]: tensor<4x3xf32> {dtc.init = "zeros", dtc.name = "w:adam_m"
// CHECK-SAME: %[[V:[a-z0-9]+]]: tensor<4x3xf32> {dtc.init = "zeros", dtc.name = "w:adam_v"
// CHECK-SAME: %[[STEP:[a-z0-9]+]]: tensor<i64> {dtc.name = "optimizer_step", dtc.role = "step"}
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4xf32> {dtc.name = "x", dtc.role = "input"}
// CHECK-SAME: -> (tensor<f32> {dtc.name = "loss", dtc.role = "loss"}, tensor<4x3xbf16> {dtc.role = "update", dtc.updates = 0 : i64}, tensor<4x3xf32> {dtc.role = "update", dtc.updates = 1 : i64}
// CHECK: %[[XL:.*]] = "dtc.cast"(%[[X]]) {{.*}}dtc.phase = "forward"{{.*}}} : (tensor<2x4xf32>) -> tensor<2x4xbf16>
// CHECK: %[[HALF32:.*]] = arith.constant {{.*}}dtc.phase = "forward"} dense<5.000000e-01> : tensor<f32>
// CHECK: %[[H:.*]] = "dtc.matmul"(%[[XL]], %[[W]]) {{.*}} -> tensor<2x3xbf16>
// CHECK: %[[HALF:.*]] = arith.constant {{.*}}dtc.phase = "forward"} dense<5.000000e-01> : tensor<bf16>
// CHECK: %[[S:.*]] = "dtc.mul"(%[[H]], %[[HALF]]) {{.*}} -> tensor<2x3xbf16>
// CHECK: %[[L:.*]] = "dtc.cross_entropy"(%[[S]], %{{.*}}) {{.*}} : (tensor<2x3xbf16>, tensor<2xi32>) -> tensor<f32>
// CHECK: %[[LOSS:.*]] = "dtc.mul"(%[[L]], %[[HALF32]]) {{.*}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: %[[G:.*]] = "dtc.matmul"({{.*}}) {{.*}}dtc.gradient_of = ["w"], {{.*}} -> tensor<4x3xbf16>
// CHECK: %[[NEW:.*]], %[[NEWM:.*]], %[[NEWV:.*]] = "dtc.adam_update"(%[[MASTER]], %[[G]], %[[M]], %[[V]], %[[STEP]]) {{.*}}operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0>{{.*}} : (tensor<4x3xf32>, tensor<4x3xbf16>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<i64>)
// CHECK: %[[P:.*]] = "dtc.cast"(%[[NEW]]) {{.*}}dtc.phase = "optimizer"{{.*}}} : (tensor<4x3xf32>) -> tensor<4x3xbf16>
// CHECK: return %[[LOSS]], %[[P]], %[[NEW]], %[[NEWM]], %[[NEWV]]

// fp16: the scale state after the step counter, the backward seeded with
// the scale, found_inf from every (whole: max is not linear) gradient
// times 0, the updates gated.
// FP16-LABEL: func.func @train_step(
// FP16-SAME: tensor<4x3xf16> {{.*}}dtc.name = "w", dtc.role = "param"
// FP16-SAME: %[[SCALE:[a-z0-9]+]]: tensor<f32> {dtc.init = "fill(1024)", dtc.name = "loss_scale", dtc.role = "optimizer_state", dtc.state_kind = "loss_scale"}
// FP16-SAME: %[[GOOD:[a-z0-9]+]]: tensor<i64> {dtc.init = "zeros", dtc.name = "loss_scale:good_steps", dtc.role = "optimizer_state", dtc.state_kind = "loss_scale_good_steps"}
// FP16-SAME: %[[SKIPPED:[a-z0-9]+]]: tensor<i64> {dtc.init = "zeros", dtc.name = "skipped_steps", dtc.role = "optimizer_state", dtc.state_kind = "skipped_steps"}
// FP16: %[[SEED:.*]] = "dtc.mul"(%[[SCALE]], %{{.*}}) {{.*}}dtc.phase = "backward_input"}
// FP16: "dtc.cross_entropy_grad"(%{{.*}}, %{{.*}}, %[[SEED]])
// FP16: %[[G:.*]] = "dtc.matmul"({{.*}}) {{.*}}dtc.gradient_of = ["w"], {{.*}} -> tensor<4x3xf16>
// FP16: %[[ZERO:.*]] = arith.constant {{.*}}dtc.phase = "optimizer"} dense<0.000000e+00> : tensor<f16>
// FP16: %[[WHOLE:.*]] = "dtc.max"(%[[G]], %[[G]])
// FP16: %[[PROBE:.*]] = "dtc.mul"(%[[WHOLE]], %[[ZERO]])
// FP16: %[[SUM:.*]] = "dtc.reduce_sum"(%[[PROBE]])
// FP16: %[[FOUND:.*]] = "dtc.cast"(%[[SUM]]) {{.*}}dtc.phase = "optimizer"{{.*}}} : (tensor<f16>) -> tensor<f32>
// FP16: %[[INV:.*]] = "dtc.div"(%{{.*}}, %[[SCALE]])
// FP16: "dtc.adam_update"(%{{.*}}, %[[G]], %{{.*}}, %{{.*}}, %{{.*}}, %[[INV]], %[[FOUND]]) {{.*}}operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>
// FP16: "dtc.loss_scale_update"(%[[SCALE]], %[[GOOD]], %[[SKIPPED]], %[[FOUND]]) <{backoff_factor = 5.000000e-01 : f64, growth_factor = 2.000000e+00 : f64, growth_interval = 7 : i64}>

// SGD with clipping: squares summed in f32; the master updated by a bf16
// gradient.
// SGD-LABEL: func.func @train_step(
// SGD: %[[G:.*]] = "dtc.matmul"({{.*}}) {{.*}}dtc.gradient_of = ["w"], {{.*}} -> tensor<4x3xbf16>
// SGD: %[[WIDE:.*]] = "dtc.cast"(%[[G]]) {{.*}}dtc.phase = "optimizer"{{.*}}} : (tensor<4x3xbf16>) -> tensor<4x3xf32>
// SGD: "dtc.mul"(%[[WIDE]], %[[WIDE]])
// SGD: %[[CLIPPED:.*]] = "dtc.mul"(%[[G]], %{{.*}}) {{.*}}dtc.gradient_of = ["w"], {{.*}} : (tensor<4x3xbf16>, tensor<bf16>) -> tensor<4x3xbf16>
// SGD: %[[NEW:.*]] = "dtc.sgd_update"(%{{.*}}, %[[CLIPPED]]) {{.*}} : (tensor<4x3xf32>, tensor<4x3xbf16>) -> tensor<4x3xf32>
// SGD: "dtc.cast"(%[[NEW]]) {{.*}} -> tensor<4x3xbf16>

// BAD: option precision: unknown precision 'fp8' (expected f32, bf16-mixed or fp16-mixed)
