// A matmul's broadcast bias add and GELU fused into one kernel, and the
// chains that must stay apart.
// RUN: dtc-opt %s --dtc-fuse-matmul-epilogues -split-input-file | FileCheck %s
// And end to end: dtc compile runs the pass last in the partitioned stage,
// --no-fuse-epilogues leaves the ops alone.
// RUN: dtc compile %examples/models/mlp.mlir --mesh 1 --emit-mlir partitioned -o %t.dtc | FileCheck %s --check-prefix=MLP
// RUN: dtc compile %examples/models/mlp.mlir --mesh 1 --emit-mlir partitioned --no-fuse-epilogues -o %t.dtc | FileCheck %s --check-prefix=OFF

// MLP: "dtc.matmul_gelu"
// MLP-NOT: dtc.gelu %
// OFF-NOT: matmul_gelu
// OFF-NOT: matmul_bias
// OFF: dtc.gelu

// Bias, then GELU: one matmul_gelu; the backward's gelu_grad reads the
// pre-activation result, the forward's next matmul the GELU.
// CHECK-LABEL: func.func @bias_gelu
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[W:.*]]: tensor<16x64xf32>, %[[B:.*]]: tensor<64xf32>, %[[W2:.*]]: tensor<64x16xf32>, %[[DY:.*]]: tensor<2x8x64xf32>)
// CHECK-NEXT: %[[Y:.*]], %[[PRE:.*]] = "dtc.matmul_gelu"(%[[X]], %[[W]], %[[B]]) {dtc.id = 1 : i64, dtc.layer = 3 : i64, dtc.phase = "forward"}
// CHECK-SAME: -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>)
// CHECK-NEXT: "dtc.matmul"(%[[Y]], %[[W2]])
// CHECK-NEXT: dtc.gelu_grad %[[PRE]], %[[DY]]
// CHECK-NOT: dtc.add
func.func @bias_gelu(%x: tensor<2x8x16xf32>, %w: tensor<16x64xf32>, %b: tensor<64xf32>,
                     %w2: tensor<64x16xf32>, %dy: tensor<2x8x64xf32>)
    -> (tensor<2x8x16xf32>, tensor<2x8x64xf32>) {
  %h = "dtc.matmul"(%x, %w) {dtc.id = 1 : i64, dtc.layer = 3 : i64, dtc.phase = "forward"} : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  %hb = "dtc.add"(%h, %b) {dtc.id = 2 : i64, dtc.layer = 3 : i64, dtc.phase = "forward"} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %a = "dtc.gelu"(%hb) {dtc.id = 3 : i64, dtc.layer = 3 : i64, dtc.phase = "forward"} : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %o = "dtc.matmul"(%a, %w2) {dtc.id = 4 : i64, dtc.layer = 3 : i64, dtc.phase = "forward"} : (tensor<2x8x64xf32>, tensor<64x16xf32>) -> tensor<2x8x16xf32>
  %g = "dtc.gelu_grad"(%hb, %dy) {dtc.layer = 3 : i64, dtc.phase = "backward_input"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %o, %g : tensor<2x8x16xf32>, tensor<2x8x64xf32>
}

// -----

// No bias (the GPT's MLP): matmul_gelu of two operands. A bias on the left
// of the add, no GELU: matmul_bias.
// CHECK-LABEL: func.func @gelu_and_bias_left
// CHECK-NEXT: %[[Y:.*]], %[[PRE:.*]] = "dtc.matmul_gelu"(%arg0, %arg1) : (tensor<8x16xf32>, tensor<16x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>)
// CHECK-NEXT: %[[Z:.*]] = "dtc.matmul_bias"(%[[Y]], %arg2, %arg3) : (tensor<8x32xf32>, tensor<32x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: return %[[Z]], %[[PRE]]
func.func @gelu_and_bias_left(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %w2: tensor<32x4xf32>,
                              %b: tensor<4xf32>) -> (tensor<8x4xf32>, tensor<8x32xf32>) {
  %h = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %a = "dtc.gelu"(%h) : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %z = "dtc.matmul"(%a, %w2) : (tensor<8x32xf32>, tensor<32x4xf32>) -> tensor<8x4xf32>
  %zb = "dtc.add"(%b, %z) : (tensor<4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %zb, %h : tensor<8x4xf32>, tensor<8x32xf32>
}

// -----

// The product is read by something else too: no result would hold it
// after a bias add, so the add stays; the GELU of the sum is no GELU of
// the product, so nothing fuses.
// CHECK-LABEL: func.func @product_read_twice
// CHECK-NOT: matmul_
// CHECK: "dtc.matmul"
// CHECK-NEXT: "dtc.add"
// CHECK-NEXT: dtc.gelu
// CHECK-NEXT: return
func.func @product_read_twice(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>)
    -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %h = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %hb = "dtc.add"(%h, %b) : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %a = "dtc.gelu"(%hb) : (tensor<8x32xf32>) -> tensor<8x32xf32>
  return %a, %h : tensor<8x32xf32>, tensor<8x32xf32>
}

// -----

// Adds that are no bias over the last dimension: a full-shaped residual,
// a column vector, a scalar-like [1], the product added to itself.
// CHECK-LABEL: func.func @not_a_bias
// CHECK-NOT: matmul_
// CHECK: return
func.func @not_a_bias(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %r: tensor<8x32xf32>,
                      %c: tensor<8x1xf32>, %s: tensor<1xf32>)
    -> (tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>) {
  %h0 = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %a0 = "dtc.add"(%h0, %r) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  %h1 = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %a1 = "dtc.add"(%h1, %c) : (tensor<8x32xf32>, tensor<8x1xf32>) -> tensor<8x32xf32>
  %h2 = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %a2 = "dtc.add"(%h2, %s) : (tensor<8x32xf32>, tensor<1xf32>) -> tensor<8x32xf32>
  %h3 = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %a3 = "dtc.add"(%h3, %h3) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  return %a0, %a1, %a2, %a3 : tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>
}

// -----

// A GELU recomputed in the backward (another phase) and a bias add after
// the row-parallel product's all-reduce stay where they are; bf16 products
// (rounded between the ops) are left alone.
// CHECK-LABEL: func.func @apart
// CHECK-NOT: matmul_
// CHECK: return
shard.grid @mesh(shape = 2)
func.func @apart(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>,
                 %xl: tensor<8x16xbf16>, %wl: tensor<16x32xbf16>, %bl: tensor<32xbf16>)
    -> (tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xbf16>) {
  %h = "dtc.matmul"(%x, %w) {dtc.phase = "forward"} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %a = "dtc.gelu"(%h) {dtc.phase = "backward_input", dtc.recompute} : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %p = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %s = shard.all_reduce %p on @mesh grid_axes = [0] : tensor<8x32xf32> -> tensor<8x32xf32>
  %sb = "dtc.add"(%s, %b) : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %hl = "dtc.matmul"(%xl, %wl) : (tensor<8x16xbf16>, tensor<16x32xbf16>) -> tensor<8x32xbf16>
  %hlb = "dtc.add"(%hl, %bl) : (tensor<8x32xbf16>, tensor<32xbf16>) -> tensor<8x32xbf16>
  %al = "dtc.gelu"(%hlb) : (tensor<8x32xbf16>) -> tensor<8x32xbf16>
  return %a, %sb, %al : tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xbf16>
}
