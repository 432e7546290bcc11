// Errors without a location (the options against the mesh, the pass order);
// those at an input: apply-strategy-invalid-dp.mlir and
// apply-strategy-invalid-microbatches.mlir.
// RUN: not dtc-opt %s --dtc-build-training-step --dtc-assign-layers --dtc-apply-strategy="mesh=2,2 dp=2" --dtc-materialize-plan 2>&1 | FileCheck %s --check-prefix=DEGREE
// DEGREE: error: dp=2 x tp=1 x pp=1 uses 2 devices but the mesh has 4
// RUN: not dtc-opt %s --dtc-build-training-step --dtc-assign-layers --dtc-apply-strategy="mesh=6 pp=4" --dtc-materialize-plan 2>&1 | FileCheck %s --check-prefix=PPDIV
// PPDIV: error: tp=1 x pp=4 does not divide the 6 devices of the mesh
// RUN: not dtc-opt %s --dtc-build-training-step --dtc-assign-layers --dtc-apply-strategy="mesh=4,2 pp=4" --dtc-materialize-plan 2>&1 | FileCheck %s --check-prefix=PPAXES
// PPAXES: error: pp=4 is not a product of the mesh axes of 4x2 inside the data-parallel ones (pipeline stages take whole axes between tensor parallelism's and data parallelism's; e.g. --mesh 2x4)
// RUN: not dtc-opt %s --dtc-build-training-step --dtc-assign-layers --dtc-apply-strategy="mesh=2,4,2 pp=2 tp=2" --dtc-materialize-plan 2>&1 | FileCheck %s --check-prefix=PPTP
// PPTP: error: pp=2 is not a product of the mesh axes of 2x4x2 inside the data-parallel ones (pipeline stages take whole axes between tensor parallelism's and data parallelism's; e.g. --mesh 4x2x2)
// RUN: not dtc-opt %s --dtc-apply-strategy="mesh=2" --dtc-materialize-plan 2>&1 | FileCheck %s --check-prefix=ORDER
// ORDER: error: no training step to plan (run dtc-build-training-step first)
// RUN: not dtc-opt %s --dtc-build-training-step --dtc-assign-layers --dtc-partition 2>&1 | FileCheck %s --check-prefix=NOPLAN
// NOPLAN: error: no dtc.plan with a grid (run a planner such as dtc-apply-strategy first)
func.func @main(%w: tensor<16x8xf32> {dtc.param}, %x: tensor<8x16xf32> {dtc.name = "x"},
                %y: tensor<8xi32> {dtc.max = 8 : i64}) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %l = "dtc.cross_entropy"(%h, %y) : (tensor<8x8xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
