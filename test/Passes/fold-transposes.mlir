// Transposes rewritten so that the matmuls reading them absorb them: a
// transpose of a transpose cancels, and a 2-D product that is only
// transposed is computed transposed (b^T a^T). The shapes of a tied LM
// head's forward and backward.
// RUN: dtc-opt %s --dtc-fold-transposes -split-input-file | FileCheck %s
// End to end: the GPT's tied head keeps one transpose of the table (read
// only by the forward's matmul, so the emitter folds it) and no transpose
// of its gradient.
// RUN: %python %examples/gen_model.py gpt --layers 1 --hidden 32 --heads 2 --seq 16 --vocab 96 --batch 2 -o %t.mlir
// RUN: dtc compile %t.mlir --mesh 1 --emit-mlir partitioned -o %t.dtc | FileCheck %s --check-prefix=GPT

// GPT: "dtc.transpose"(%arg0) <{permutation = array<i64: 1, 0>}> {{.*}}dtc.phase = "forward"
// GPT-NOT: "dtc.transpose"(%arg0)
// GPT: "dtc.matmul"(%{{.*}}, %arg0) {{.*}}dtc.phase = "backward_input"

// The head: W^T read by the forward's product and transposed back for the
// backward's dx; the weight gradient x^T dy transposed into W's layout.
// CHECK-LABEL: func.func @tied_head
// CHECK-SAME: (%[[W:.*]]: tensor<96x64xf32>, %[[X:.*]]: tensor<32x64xf32>, %[[DY:.*]]: tensor<32x96xf32>)
// CHECK-NEXT: %[[WT:.*]] = "dtc.transpose"(%[[W]]) <{permutation = array<i64: 1, 0>}> {dtc.id = 1 : i64, dtc.phase = "forward"}
// CHECK-NEXT: %[[Y:.*]] = "dtc.matmul"(%[[X]], %[[WT]]) {dtc.id = 2 : i64, dtc.phase = "forward"}
// CHECK-NEXT: %[[DX:.*]] = "dtc.matmul"(%[[DY]], %[[W]]) {dtc.forward = 2 : i64, dtc.phase = "backward_input"}
// CHECK-NEXT: %[[DYT:.*]] = "dtc.transpose"(%[[DY]]) <{permutation = array<i64: 1, 0>}> {dtc.forward = 2 : i64, dtc.layer = 5 : i64, dtc.phase = "backward_weight"}
// CHECK-NEXT: %[[DW:.*]] = "dtc.matmul"(%[[DYT]], %[[X]]) {dtc.forward = 2 : i64, dtc.gradient_of = "w", dtc.layer = 5 : i64, dtc.phase = "backward_weight"}
// CHECK-SAME: (tensor<96x32xf32>, tensor<32x64xf32>) -> tensor<96x64xf32>
// CHECK-NEXT: return %[[Y]], %[[DX]], %[[DW]]
func.func @tied_head(%w: tensor<96x64xf32>, %x: tensor<32x64xf32>, %dy: tensor<32x96xf32>)
    -> (tensor<32x96xf32>, tensor<32x64xf32>, tensor<96x64xf32>) {
  %wt = "dtc.transpose"(%w) {permutation = array<i64: 1, 0>, dtc.id = 1 : i64, dtc.phase = "forward"} : (tensor<96x64xf32>) -> tensor<64x96xf32>
  %y = "dtc.matmul"(%x, %wt) {dtc.id = 2 : i64, dtc.phase = "forward"} : (tensor<32x64xf32>, tensor<64x96xf32>) -> tensor<32x96xf32>
  %w2 = "dtc.transpose"(%wt) {permutation = array<i64: 1, 0>, dtc.forward = 2 : i64, dtc.phase = "backward_input"} : (tensor<64x96xf32>) -> tensor<96x64xf32>
  %dx = "dtc.matmul"(%dy, %w2) {dtc.forward = 2 : i64, dtc.phase = "backward_input"} : (tensor<32x96xf32>, tensor<96x64xf32>) -> tensor<32x64xf32>
  %xt = "dtc.transpose"(%x) {permutation = array<i64: 1, 0>, dtc.forward = 2 : i64, dtc.layer = 5 : i64, dtc.phase = "backward_weight"} : (tensor<32x64xf32>) -> tensor<64x32xf32>
  %dwt = "dtc.matmul"(%xt, %dy) {dtc.forward = 2 : i64, dtc.layer = 5 : i64, dtc.phase = "backward_weight"} : (tensor<64x32xf32>, tensor<32x96xf32>) -> tensor<64x96xf32>
  %dw = "dtc.transpose"(%dwt) {permutation = array<i64: 1, 0>, dtc.forward = 1 : i64, dtc.gradient_of = "w", dtc.layer = 5 : i64, dtc.phase = "backward_weight"} : (tensor<64x96xf32>) -> tensor<96x64xf32>
  return %y, %dx, %dw : tensor<32x96xf32>, tensor<32x64xf32>, tensor<96x64xf32>
}

// -----

// What stays: permutations that do not cancel, a product read elsewhere
// too, a batched product, and a transpose in another phase than its
// product.
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-2: "dtc.transpose"(%arg0)
// CHECK: "dtc.transpose"(%[[P:.*]]) <{permutation = array<i64: 1, 0>}> {dtc.phase = "backward_input"}
// CHECK: "dtc.transpose"(%{{.*}}) <{permutation = array<i64: 0, 2, 1>}>
// CHECK: "dtc.transpose"(%{{.*}}) <{permutation = array<i64: 1, 0>}> {dtc.phase = "optimizer"}
func.func @kept(%a: tensor<2x3x4xf32>, %x: tensor<8x16xf32>, %w: tensor<16x8xf32>, %bx: tensor<2x8x16xf32>, %bw: tensor<2x16x8xf32>)
    -> (tensor<3x4x2xf32>, tensor<8x8xf32>, tensor<16x8xf32>, tensor<8x8xf32>, tensor<2x8x8xf32>, tensor<8x8xf32>) {
  %t1 = "dtc.transpose"(%a) {permutation = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %t2 = "dtc.transpose"(%a) {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %t3 = "dtc.transpose"(%t2) {permutation = array<i64: 2, 0, 1>} : (tensor<4x2x3xf32>) -> tensor<3x4x2xf32>
  %p = "dtc.matmul"(%x, %w) {dtc.phase = "backward_input"} : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %pt = "dtc.transpose"(%p) {permutation = array<i64: 1, 0>, dtc.phase = "backward_input"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %bp = "dtc.matmul"(%bx, %bw) : (tensor<2x8x16xf32>, tensor<2x16x8xf32>) -> tensor<2x8x8xf32>
  %bpt = "dtc.transpose"(%bp) {permutation = array<i64: 0, 2, 1>} : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %q = "dtc.matmul"(%x, %w) {dtc.phase = "backward_weight"} : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %qt = "dtc.transpose"(%q) {permutation = array<i64: 1, 0>, dtc.phase = "optimizer"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %xt = "dtc.transpose"(%x) {permutation = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
  return %t3, %p, %xt, %pt, %bpt, %qt : tensor<3x4x2xf32>, tensor<8x8xf32>, tensor<16x8xf32>, tensor<8x8xf32>, tensor<2x8x8xf32>, tensor<8x8xf32>
}
