// A two-layer MLP classifier (the example of docs/model-format.md,
// grown a hidden layer and biases). Hand-written, generic op form.
func.func @main(%w1: tensor<16x32xf32> {dtc.param, dtc.name = "fc1.weight", dtc.init = "normal(0.25)"},
                %b1: tensor<32xf32> {dtc.param, dtc.name = "fc1.bias", dtc.init = "zeros"},
                %w2: tensor<32x32xf32> {dtc.param, dtc.name = "fc2.weight", dtc.init = "uniform(-0.17,0.17)"},
                %b2: tensor<32xf32> {dtc.param, dtc.name = "fc2.bias", dtc.init = "zeros"},
                %w3: tensor<32x10xf32> {dtc.param, dtc.name = "head.weight"},
                %x: tensor<8x16xf32> {dtc.name = "x"},
                %y: tensor<8xi32> {dtc.name = "y", dtc.max = 10 : i64}) -> tensor<f32> {
  %h1 = "dtc.matmul"(%x, %w1) : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %h2 = "dtc.add"(%h1, %b1) : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %a1 = "dtc.gelu"(%h2) : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %h3 = "dtc.matmul"(%a1, %w2) : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
  %h4 = "dtc.add"(%h3, %b2) : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %a2 = "dtc.tanh"(%h4) : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %z = "dtc.matmul"(%a2, %w3) : (tensor<8x32xf32>, tensor<32x10xf32>) -> tensor<8x10xf32>
  %l = "dtc.cross_entropy"(%z, %y) : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
