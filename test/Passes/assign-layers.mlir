// Layers of the training step, read off the forward data flow, and the
// split of the backward into input gradients (B) and weight gradients (W).
// The pass runs on the training steps of the models below
// (Inputs/assign-layers.input.mlir, which scripts/pass-inputs.py writes).
// RUN: dtc-opt %S/Inputs/assign-layers.input.mlir --split-input-file --dtc-assign-layers | FileCheck %s

// Two pre-norm residual blocks between a tied embedding and its head. The
// residual stream is the only activation live between sublayers, so each
// residual sublayer is a layer; the data-only reshape of the labels and the
// transposed embedding (parameters only) take their consumer's layer.

// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: attributes {dtc.train_step}
// CHECK: "dtc.embedding"{{.*}}{dtc.id = 0 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"}
// CHECK: "dtc.reshape"(%{{.*}}) {dtc.id = 1 : i64, dtc.layer = 3 : i64, dtc.phase = "forward"} : (tensor<2x3xi32>) -> tensor<6xi32>
// Block 0 is layer 1: norm, matmul, gelu, residual add.
// CHECK: "dtc.layer_norm"{{.*}}{dtc.id = 2 : i64, dtc.layer = 1 : i64, dtc.phase = "forward"}
// CHECK: "dtc.matmul"{{.*}}{dtc.id = 3 : i64, dtc.layer = 1 : i64, dtc.phase = "forward"}
// CHECK: dtc.gelu {{.*}}{dtc.id = 4 : i64, dtc.layer = 1 : i64, dtc.phase = "forward"}
// CHECK: "dtc.add"{{.*}}{dtc.id = 5 : i64, dtc.layer = 1 : i64, dtc.phase = "forward"}
// Block 1 is layer 2.
// CHECK: "dtc.rms_norm"{{.*}}{dtc.id = 6 : i64, dtc.layer = 2 : i64, dtc.phase = "forward"}
// CHECK: "dtc.add"{{.*}}{dtc.id = 8 : i64, dtc.layer = 2 : i64, dtc.phase = "forward"}
// The head (and the loss, which has no parameter) is layer 3.
// CHECK: "dtc.transpose"(%arg0) {{.*}}{dtc.id = 9 : i64, dtc.layer = 3 : i64, dtc.phase = "forward"}
// CHECK: "dtc.matmul"{{.*}}{dtc.id = 10 : i64, dtc.layer = 3 : i64, dtc.phase = "forward"}
// CHECK: "dtc.reshape"{{.*}}{dtc.id = 11 : i64, dtc.layer = 3 : i64, dtc.phase = "forward"}
// CHECK: "dtc.cross_entropy"{{.*}}{dtc.id = 12 : i64, dtc.layer = 3 : i64, dtc.phase = "forward"}
// Backward ops link to their forward op and share its layer.
// CHECK: arith.constant {dtc.forward = 12 : i64, dtc.layer = 3 : i64, dtc.phase = "backward_input"} dense<1.000000e+00>
// CHECK: "dtc.cross_entropy_grad"{{.*}}{dtc.forward = 12 : i64, dtc.layer = 3 : i64, dtc.phase = "backward_input"}
// CHECK: "dtc.rms_norm_input_grad"{{.*}}{dtc.forward = 6 : i64, dtc.layer = 2 : i64, dtc.phase = "backward_input"}
// CHECK: "dtc.rms_norm_param_grad"{{.*}}{dtc.forward = 6 : i64, dtc.gradient_of = ["g1"], dtc.layer = 2 : i64, dtc.phase = "backward_weight"}
// CHECK: "dtc.layer_norm_input_grad"{{.*}}{dtc.forward = 2 : i64, dtc.layer = 1 : i64, dtc.phase = "backward_input"}
// CHECK: "dtc.layer_norm_param_grad"{{.*}}{dtc.forward = 2 : i64, dtc.gradient_of = ["g0", "b0"], dtc.layer = 1 : i64, dtc.phase = "backward_weight"}
// The tied embedding's two gradients meet in the embedding's layer.
// CHECK: "dtc.embedding_grad"{{.*}}{dtc.forward = 0 : i64, dtc.layer = 0 : i64, dtc.phase = "backward_weight"}
// CHECK: "dtc.add"{{.*}}{dtc.forward = 0 : i64, dtc.gradient_of = ["emb"], dtc.layer = 0 : i64, dtc.phase = "backward_weight"}
// Each update runs in the layer of its parameter's first use.
// CHECK: "dtc.adam_update"(%arg0, {{.*}}dtc.layer = 0 : i64, dtc.phase = "optimizer"}
// CHECK: "dtc.adam_update"(%arg1, {{.*}}dtc.layer = 1 : i64, dtc.phase = "optimizer"}
// CHECK: "dtc.adam_update"(%arg4, {{.*}}dtc.layer = 2 : i64, dtc.phase = "optimizer"}
// CHECK: return
func.func @main(%emb: tensor<10x4xf32> {dtc.param, dtc.name = "emb"},
                %g0: tensor<4xf32> {dtc.param, dtc.name = "g0", dtc.init = "ones"},
                %b0: tensor<4xf32> {dtc.param, dtc.name = "b0", dtc.init = "zeros"},
                %w0: tensor<4x4xf32> {dtc.param, dtc.name = "w0"},
                %g1: tensor<4xf32> {dtc.param, dtc.name = "g1", dtc.init = "ones"},
                %w1: tensor<4x4xf32> {dtc.param, dtc.name = "w1"},
                %ids: tensor<2x3xi32> {dtc.max = 10 : i64}, %y: tensor<2x3xi32> {dtc.max = 10 : i64}) -> tensor<f32> {
  %x0 = "dtc.embedding"(%emb, %ids) : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  %labels = "dtc.reshape"(%y) : (tensor<2x3xi32>) -> tensor<6xi32>
  %n0 = "dtc.layer_norm"(%x0, %g0, %b0) {epsilon = 1.0e-5 : f32} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %h0 = "dtc.matmul"(%n0, %w0) : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %a0 = "dtc.gelu"(%h0) : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %x1 = "dtc.add"(%x0, %a0) : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %n1 = "dtc.rms_norm"(%x1, %g1) {epsilon = 1.0e-5 : f32} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %h1 = "dtc.matmul"(%n1, %w1) : (tensor<2x3x4xf32>, tensor<4x4xf32>) -> tensor<2x3x4xf32>
  %x2 = "dtc.add"(%x1, %h1) : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %t = "dtc.transpose"(%emb) {permutation = array<i64: 1, 0>} : (tensor<10x4xf32>) -> tensor<4x10xf32>
  %z = "dtc.matmul"(%x2, %t) : (tensor<2x3x4xf32>, tensor<4x10xf32>) -> tensor<2x3x10xf32>
  %z2 = "dtc.reshape"(%z) : (tensor<2x3x10xf32>) -> tensor<6x10xf32>
  %l = "dtc.cross_entropy"(%z2, %labels) : (tensor<6x10xf32>, tensor<6xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Without residuals every boundary is a cut: a layer is a segment holding a
// parameter, and a parameter-free op (relu, the loss) joins the layer it
// follows; a parameter-free op before any parameter joins the first layer.
// CHECK-LABEL: func.func @train_step(
// CHECK: "dtc.reshape"{{.*}}{dtc.id = 0 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"}
// CHECK: "dtc.matmul"{{.*}}{dtc.id = 1 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"}
// CHECK: "dtc.add"{{.*}}{dtc.id = 2 : i64, dtc.layer = 1 : i64, dtc.phase = "forward"}
// CHECK: dtc.relu {{.*}}{dtc.id = 3 : i64, dtc.layer = 1 : i64, dtc.phase = "forward"}
// CHECK: "dtc.matmul"{{.*}}{dtc.id = 4 : i64, dtc.layer = 2 : i64, dtc.phase = "forward"}
// CHECK: "dtc.cross_entropy"{{.*}}{dtc.id = 5 : i64, dtc.layer = 2 : i64, dtc.phase = "forward"}
func.func @main(%x: tensor<4x2x3xf32>, %y: tensor<4xi32> {dtc.max = 5 : i64},
                %w0: tensor<6x8xf32> {dtc.param, dtc.name = "w0"},
                %b0: tensor<8xf32> {dtc.param, dtc.name = "b0", dtc.init = "zeros"},
                %w1: tensor<8x5xf32> {dtc.param, dtc.name = "w1"}) -> tensor<f32> {
  %flat = "dtc.reshape"(%x) : (tensor<4x2x3xf32>) -> tensor<4x6xf32>
  %h = "dtc.matmul"(%flat, %w0) : (tensor<4x6xf32>, tensor<6x8xf32>) -> tensor<4x8xf32>
  %hb = "dtc.add"(%h, %b0) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %a = "dtc.relu"(%hb) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %z = "dtc.matmul"(%a, %w1) : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
  %l = "dtc.cross_entropy"(%z, %y) : (tensor<4x5xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// B holds no weight gradient: no op on the activation-gradient path
// produces a parameter's gradient, and the fused norm gradients (which
// return dgamma beside dx) are not used when the input needs a gradient.
// CHECK-LABEL: func.func @train_step(
// CHECK-NOT: dtc.gradient_of = {{.*}}dtc.phase = "backward_input"
// CHECK-NOT: "dtc.layer_norm_grad"
// CHECK-NOT: "dtc.rms_norm_grad"
// CHECK: return
func.func @main(%x: tensor<2x4xf32>, %y: tensor<2xi32> {dtc.max = 4 : i64},
                %g: tensor<4xf32> {dtc.param, dtc.name = "g", dtc.init = "ones"},
                %b: tensor<4xf32> {dtc.param, dtc.name = "b", dtc.init = "zeros"},
                %w: tensor<4x4xf32> {dtc.param, dtc.name = "w"},
                %r: tensor<4xf32> {dtc.param, dtc.name = "r", dtc.init = "ones"}) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %n = "dtc.layer_norm"(%h, %g, %b) {epsilon = 1.0e-5 : f32} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %m = "dtc.rms_norm"(%n, %r) {epsilon = 1.0e-5 : f32} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %s = "dtc.mul"(%m, %r) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %l = "dtc.cross_entropy"(%s, %y) : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A norm whose input is computed from parameters alone is weight work as a
// whole: one fused gradient, in W.
// CHECK-LABEL: func.func @train_step(
// CHECK: "dtc.layer_norm_grad"{{.*}}dtc.phase = "backward_weight"}
func.func @main(%x: tensor<2x4xf32>, %y: tensor<2xi32> {dtc.max = 4 : i64},
                %v: tensor<4xf32> {dtc.param, dtc.name = "v"},
                %g: tensor<4xf32> {dtc.param, dtc.name = "g", dtc.init = "ones"},
                %b: tensor<4xf32> {dtc.param, dtc.name = "b", dtc.init = "zeros"}) -> tensor<f32> {
  %n = "dtc.layer_norm"(%v, %g, %b) {epsilon = 1.0e-5 : f32} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %s = "dtc.mul"(%x, %n) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %l = "dtc.cross_entropy"(%s, %y) : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
