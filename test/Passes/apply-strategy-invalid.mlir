// RUN: not dtc-opt %s --dtc-build-training-step --dtc-apply-strategy="mesh=3" 2>&1 | FileCheck %s --check-prefix=BATCH
// BATCH: error: the batch dimension of input "x" has size 8, which does not divide over dp=3
// RUN: not dtc-opt %s --dtc-build-training-step --dtc-apply-strategy="mesh=2,2 dp=2" 2>&1 | FileCheck %s --check-prefix=DEGREE
// DEGREE: error: dp=2 x tp=1 uses 2 devices but the mesh has 4; pipeline parallelism is not implemented yet, so dp*tp must equal the device count
// RUN: not dtc-opt %s --dtc-apply-strategy="mesh=2" 2>&1 | FileCheck %s --check-prefix=ORDER
// ORDER: error: no @train_step to plan (run dtc-build-training-step first)
// RUN: not dtc-opt %s --dtc-build-training-step --dtc-partition 2>&1 | FileCheck %s --check-prefix=NOPLAN
// NOPLAN: error: no dtc.plan with a grid (run a planner such as dtc-apply-strategy first)
func.func @main(%w: tensor<16x8xf32> {dtc.param}, %x: tensor<8x16xf32> {dtc.name = "x"},
                %y: tensor<8xi32> {dtc.max = 8 : i64}) -> tensor<f32> {
  %h = "dtc.matmul"(%x, %w) : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %l = "dtc.cross_entropy"(%h, %y) : (tensor<8x8xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
