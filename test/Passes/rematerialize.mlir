// Activation checkpointing: forward ops cloned into the backward of their
// layer, the backward reading the clones.
// The input: the model below as a training step with layers
// (Inputs/rematerialize.input.mlir, which scripts/pass-inputs.py writes).
// RUN: dtc-opt %S/Inputs/rematerialize.input.mlir --dtc-rematerialize=mode=full | FileCheck %s --check-prefix=FULL
// RUN: dtc-opt %S/Inputs/rematerialize.input.mlir --dtc-rematerialize=mode=selective | FileCheck %s --check-prefix=SEL
// RUN: dtc-opt %S/Inputs/rematerialize.input.mlir --dtc-rematerialize=mode=none | FileCheck %s --check-prefix=NONE
// RUN: not dtc-opt %S/Inputs/rematerialize.input.mlir --dtc-rematerialize=mode=half 2>&1 | FileCheck %s --check-prefix=BAD

// Layer 1 is the residual MLP block (norm, matmul, gelu, matmul, add);
// its input %[[X0]] (the embedding) and output %[[X1]] are the only values
// kept. Full: the backward of the head recomputes the logits from %[[X1]],
// the backward of the block its norm, first matmul and gelu from %[[X0]],
// just before the backward ops that read them, each clone in its layer,
// linked to the op it recomputes and in the phase of its first reader.
// FULL-LABEL: func.func @train_step(
// FULL: %[[X0:.*]] = "dtc.embedding"{{.*}}dtc.id = 0 : i64, dtc.layer = 0 : i64, dtc.phase = "forward"
// FULL: %[[N:.*]] = "dtc.layer_norm"(%[[X0]], {{.*}}dtc.id = 1 : i64, dtc.layer = 1 : i64, dtc.phase = "forward"
// FULL: %[[H:.*]] = "dtc.matmul"(%[[N]], {{.*}}dtc.id = 2 : i64
// FULL: %[[A:.*]] = dtc.gelu %[[H]] {{{.*}}dtc.id = 3 : i64
// FULL: %[[X1:.*]] = "dtc.add"(%[[X0]], {{.*}}dtc.id = 5 : i64, dtc.layer = 1 : i64, dtc.phase = "forward"
// FULL: %[[Z:.*]] = "dtc.matmul"(%[[X1]], {{.*}}dtc.id = 7 : i64, dtc.layer = 2 : i64, dtc.phase = "forward"
// FULL: %[[T2:.*]] = "dtc.transpose"(%arg0) {{.*}}dtc.forward = 6 : i64, dtc.layer = 2 : i64, dtc.phase = "backward_input", dtc.recompute
// FULL-NEXT: %[[Z2:.*]] = "dtc.matmul"(%[[X1]], %[[T2]]) {{.*}}dtc.forward = 7 : i64, dtc.layer = 2 : i64, dtc.phase = "backward_input", dtc.recompute
// FULL-NEXT: "dtc.cross_entropy_grad"(%[[Z2]],
// FULL: %[[N2:.*]] = "dtc.layer_norm"(%[[X0]], {{.*}}dtc.forward = 1 : i64, dtc.layer = 1 : i64, dtc.phase = "backward_input", dtc.recompute
// FULL-NEXT: %[[H2:.*]] = "dtc.matmul"(%[[N2]], {{.*}}dtc.forward = 2 : i64, dtc.layer = 1 : i64, dtc.phase = "backward_input", dtc.recompute
// The gelu output only feeds w1's gradient: weight work (W).
// FULL-NEXT: %[[A2:.*]] = dtc.gelu %[[H2]] {{{.*}}dtc.forward = 3 : i64, dtc.layer = 1 : i64, dtc.phase = "backward_weight", dtc.recompute
// FULL-NEXT: "dtc.reshape"(%[[A2]])
// FULL: dtc.gelu_grad %[[H2]],
// FULL: "dtc.reshape"(%[[N2]])
// The forward values are read by the forward alone now.
// FULL-NOT: {{[(, ]}}%[[N]]{{[,)]}}
// FULL-NOT: {{[(, ]}}%[[A]]{{[,) ]}}
// FULL: return

// Selective: only the cheap gelu is recomputed, from the pre-activation
// its gradient keeps anyway (and the head's transposed table, computed from
// a parameter); the norm and the matmuls are kept.
// SEL-LABEL: func.func @train_step(
// SEL: %[[N:.*]] = "dtc.layer_norm"({{.*}}dtc.id = 1 : i64
// SEL: %[[H:.*]] = "dtc.matmul"(%[[N]], {{.*}}dtc.id = 2 : i64
// SEL: %[[A:.*]] = dtc.gelu %[[H]] {{{.*}}dtc.id = 3 : i64
// SEL: "dtc.transpose"(%arg0) {{.*}}dtc.forward = 6 : i64, dtc.layer = 2 : i64, dtc.phase = "backward_input", dtc.recompute
// SEL-NOT: "dtc.layer_norm"
// SEL-NOT: dtc.recompute
// SEL: %[[A2:.*]] = dtc.gelu %[[H]] {{{.*}}dtc.forward = 3 : i64, dtc.layer = 1 : i64, dtc.phase = "backward_weight", dtc.recompute
// SEL-NEXT: "dtc.reshape"(%[[A2]])
// SEL-NOT: dtc.recompute
// SEL: "dtc.reshape"(%[[N]])
// SEL: return

// NONE-LABEL: func.func @train_step(
// NONE-NOT: dtc.recompute

// BAD: error: dtc-rematerialize: mode must be none, full or selective, got "half"
func.func @main(%emb: tensor<10x4xf32> {dtc.param, dtc.name = "emb"},
                %g0: tensor<4xf32> {dtc.param, dtc.name = "g0", dtc.init = "ones"},
                %b0: tensor<4xf32> {dtc.param, dtc.name = "b0", dtc.init = "zeros"},
                %w0: tensor<4x8xf32> {dtc.param, dtc.name = "w0"},
                %w1: tensor<8x4xf32> {dtc.param, dtc.name = "w1"},
                %ids: tensor<2x3xi32> {dtc.max = 10 : i64}, %y: tensor<2x3xi32> {dtc.max = 10 : i64}) -> tensor<f32> {
  %x0 = "dtc.embedding"(%emb, %ids) : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  %n0 = "dtc.layer_norm"(%x0, %g0, %b0) {epsilon = 1.0e-5 : f32} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %h0 = "dtc.matmul"(%n0, %w0) : (tensor<2x3x4xf32>, tensor<4x8xf32>) -> tensor<2x3x8xf32>
  %a0 = "dtc.gelu"(%h0) : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %o0 = "dtc.matmul"(%a0, %w1) : (tensor<2x3x8xf32>, tensor<8x4xf32>) -> tensor<2x3x4xf32>
  %x1 = "dtc.add"(%x0, %o0) : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %t = "dtc.transpose"(%emb) {permutation = array<i64: 1, 0>} : (tensor<10x4xf32>) -> tensor<4x10xf32>
  %z = "dtc.matmul"(%x1, %t) : (tensor<2x3x4xf32>, tensor<4x10xf32>) -> tensor<2x3x10xf32>
  %l = "dtc.cross_entropy"(%z, %y) : (tensor<2x3x10xf32>, tensor<2x3xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
