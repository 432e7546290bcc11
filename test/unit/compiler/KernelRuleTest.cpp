//===- KernelRuleTest.cpp - the dialect and the runtime share one rule ---===//
//
// Every dtc op is verified by its kernel's check rule (KernelRuleOpInterface,
// include/dtc/kernels/Kernel.h), the rule the runtime applies to every
// artifact instruction. These tests take one valid op of every kernel that
// is a dialect op, break its shapes, dtypes and attributes in every way
// listed below, and require that the verifier and the shared rule agree on
// each variant: both accept it, or both reject it with the same message.
// The only verdicts allowed to differ are ODS's own type constraints, which
// run first: an operand "must be ranked tensor of ..." may be stricter than
// a kernel (dtc.add is float-only in the IR; its kernel also adds integers),
// and AllTypesMatch ("failed to verify that all of {...} have same type")
// may word a rejection the rule also makes, but never reject what it accepts.
//
//===----------------------------------------------------------------------===//
#include "dtc/Dialect/KernelRule.h"
#include "dtc/Dialect/DtcOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>

using namespace mlir;
namespace kernels = ::dtc::kernels;
namespace rt = ::dtc::rt;

namespace {

// One valid instance of every dtc op (generic form).
constexpr const char *kSamples = R"mlir(
func.func @samples(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %v8: tensor<8xf32>,
                   %ids: tensor<4xi32>, %table: tensor<10x8xf32>, %q: tensor<1x2x4x8xf32>,
                   %logits: tensor<4x10xf32>, %labels: tensor<4xi64>, %dloss: tensor<f32>,
                   %step: tensor<i64>, %row: tensor<4xf32>, %v3: tensor<3xf32>,
                   %probs: tensor<6x4xf32>, %tokens: tensor<6x8xf32>) {
  %0 = "dtc.matmul"(%x, %w) : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %1 = "dtc.add"(%x, %v8) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %2 = "dtc.sub"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "dtc.mul"(%v8, %x) : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = "dtc.div"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = "dtc.max"(%x, %v8) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %6 = "dtc.neg"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %7 = "dtc.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %8 = "dtc.log"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %9 = "dtc.tanh"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %10 = "dtc.sqrt"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %11 = "dtc.rsqrt"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %12 = "dtc.relu"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %13 = "dtc.gelu"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %14 = "dtc.silu"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %15 = "dtc.softmax"(%x) {axis = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %16 = "dtc.layer_norm"(%x, %v8, %v8) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %17 = "dtc.rms_norm"(%x, %v8) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %18 = "dtc.embedding"(%table, %ids) : (tensor<10x8xf32>, tensor<4xi32>) -> tensor<4x8xf32>
  %19 = "dtc.attention"(%q, %q, %q) {causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %20 = "dtc.cross_entropy"(%logits, %labels) : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  %21 = "dtc.reduce_sum"(%x) {axes = array<i64: 1>, keep_dims = false} : (tensor<4x8xf32>) -> tensor<4xf32>
  %22 = "dtc.reduce_mean"(%x) {axes = array<i64: 0>, keep_dims = true} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %23 = "dtc.reduce_max"(%x) {axes = array<i64: 1>, keep_dims = false} : (tensor<4x8xf32>) -> tensor<4xf32>
  %24 = "dtc.reshape"(%x) : (tensor<4x8xf32>) -> tensor<32xf32>
  %25 = "dtc.transpose"(%x) {permutation = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %26 = "dtc.cast"(%x) : (tensor<4x8xf32>) -> tensor<4x8xi32>
  %27 = "dtc.broadcast"(%v8) : (tensor<8xf32>) -> tensor<4x8xf32>
  %28 = "dtc.relu_grad"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %29 = "dtc.gelu_grad"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %30 = "dtc.silu_grad"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %31:2 = "dtc.max_grad"(%x, %v8, %x) : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  %32 = "dtc.softmax_grad"(%x, %x) {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %33:3 = "dtc.layer_norm_grad"(%x, %v8, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %34:2 = "dtc.rms_norm_grad"(%x, %v8, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  %35 = "dtc.layer_norm_input_grad"(%x, %v8, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %36:2 = "dtc.layer_norm_param_grad"(%x, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<8xf32>, tensor<8xf32>)
  %37 = "dtc.rms_norm_input_grad"(%x, %v8, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %38 = "dtc.rms_norm_param_grad"(%x, %x) {epsilon = 1.0e-5 : f32} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8xf32>
  %39 = "dtc.embedding_grad"(%ids, %x) : (tensor<4xi32>, tensor<4x8xf32>) -> tensor<10x8xf32>
  %40:3 = "dtc.attention_grad"(%q, %q, %q, %q) {causal = false} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  %41 = "dtc.cross_entropy_grad"(%logits, %labels, %dloss) {scale = 0.25 : f32} : (tensor<4x10xf32>, tensor<4xi64>, tensor<f32>) -> tensor<4x10xf32>
  %42 = "dtc.shard_offset"() {grid_axes = array<i64: 1, 0>, piece_size = 5 : i64} : () -> tensor<i64>
  %43 = "dtc.pad"(%x) : (tensor<4x8xf32>) -> tensor<4x10xf32>
  %44 = "dtc.fill_padding"(%x, %step) {axis = 1 : i64, size = 7 : i64, fill = "zero"} : (tensor<4x8xf32>, tensor<i64>) -> tensor<4x8xf32>
  %45 = "dtc.embedding_shard"(%table, %ids, %step) {vocab = 17 : i64} : (tensor<10x8xf32>, tensor<4xi32>, tensor<i64>) -> tensor<4x8xf32>
  %46 = "dtc.embedding_shard_grad"(%ids, %x, %step) {vocab = 17 : i64} : (tensor<4xi32>, tensor<4x8xf32>, tensor<i64>) -> tensor<10x8xf32>
  %47:2 = "dtc.cross_entropy_shard_stats"(%logits, %labels, %row, %step) {vocab = 17 : i64} : (tensor<4x10xf32>, tensor<4xi64>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>)
  %48 = "dtc.cross_entropy_shard_grad"(%logits, %labels, %row, %row, %dloss, %step) {vocab = 17 : i64, scale = 0.25 : f32} : (tensor<4x10xf32>, tensor<4xi64>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> tensor<4x10xf32>
  %49 = "dtc.sgd_update"(%x, %x) {lr = 0.1 : f64, weight_decay = 0.01 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0>} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %50:3 = "dtc.adam_update"(%x, %x, %x, %x, %step) {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, decoupled = true, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0>} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<i64>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>)
  %51 = "dtc.cross_entropy"(%logits, %labels) : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  %53 = "dtc.matmul_bias"(%x, %w, %v3) : (tensor<4x8xf32>, tensor<8x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %54:2 = "dtc.matmul_gelu"(%x, %w) : (tensor<4x8xf32>, tensor<8x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
  %55:2 = "dtc.matmul_gelu"(%x, %w, %v3) : (tensor<4x8xf32>, tensor<8x3xf32>, tensor<3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
  %56 = "dtc.label_mask"(%labels) {ignore_index = -100 : i64} : (tensor<4xi64>) -> tensor<4xf32>
  %57:2 = "dtc.attention_block"(%q, %q, %q, %step, %step) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0>} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<i64>, tensor<i64>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  %58:2 = "dtc.attention_block"(%q, %q, %q, %step, %step, %57#0, %57#1) {causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1>} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<i64>, tensor<i64>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  %59:3 = "dtc.attention_block_grad"(%q, %q, %q, %step, %step, %q, %58#0, %58#1) {causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<i64>, tensor<i64>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  %60 = "dtc.shard_offset"() {grid_axes = array<i64: 0>, piece_size = 4 : i64, shift = 1 : i64} : () -> tensor<i64>
  %61:3 = "dtc.moe_route"(%probs) {top_k = 2 : i64, capacity = 3 : i64} : (tensor<6x4xf32>) -> (tensor<6x2xi32>, tensor<6x2xi32>, tensor<6x2xf32>)
  %62 = "dtc.moe_route_grad"(%probs, %61#0, %61#2) : (tensor<6x4xf32>, tensor<6x2xi32>, tensor<6x2xf32>) -> tensor<6x4xf32>
  %63 = "dtc.moe_dispatch"(%tokens, %61#0, %61#1, %61#2) : (tensor<6x8xf32>, tensor<6x2xi32>, tensor<6x2xi32>, tensor<6x2xf32>) -> tensor<4x3x8xf32>
  %64 = "dtc.moe_combine"(%63, %61#0, %61#1, %61#2) : (tensor<4x3x8xf32>, tensor<6x2xi32>, tensor<6x2xi32>, tensor<6x2xf32>) -> tensor<6x8xf32>
  %65 = "dtc.moe_slot_dot"(%tokens, %63, %61#0, %61#1) : (tensor<6x8xf32>, tensor<4x3x8xf32>, tensor<6x2xi32>, tensor<6x2xi32>) -> tensor<6x2xf32>
  %66 = "dtc.moe_first_choice_fraction"(%61#0) : (tensor<6x2xi32>) -> tensor<4xf32>
  %52:3 = "dtc.loss_scale_update"(%51, %step, %step, %51) {growth_factor = 2.0 : f64, backoff_factor = 0.5 : f64, growth_interval = 2000 : i64} : (tensor<f32>, tensor<i64>, tensor<i64>, tensor<f32>) -> (tensor<f32>, tensor<i64>, tensor<i64>)
  return
}
)mlir";

class KernelRuleTest : public ::testing::Test {
protected:
  void SetUp() override {
    context.loadDialect<mlir::dtc::DtcDialect, func::FuncDialect,
                        arith::ArithDialect, shard::ShardDialect>();
    module = parseSourceString<ModuleOp>(kSamples, &context);
    ASSERT_TRUE(module) << "the samples must parse and verify";
  }

  /// The first error verifying `op` reports, or "" when it verifies.
  std::string verifierMessage(Operation *op) {
    std::string first;
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      if (first.empty() && diag.getSeverity() == DiagnosticSeverity::Error)
        first = diag.str();
      return success();
    });
    return succeeded(verify(op)) ? ""
                                 : (first.empty() ? "<no message>" : first);
  }

  /// The shared rule's verdict on `op`, computed as the runtime sees the
  /// instruction the emitter writes for it: the element types mapped here
  /// independently of the dialect's conversion, the attributes as emitted.
  std::string ruleMessage(Operation *op) {
    auto desc = [](Type type) {
      auto tensor = cast<RankedTensorType>(type);
      Type e = tensor.getElementType();
      rt::DType dtype = e.isF32()         ? rt::DType::F32
                        : e.isInteger(32) ? rt::DType::I32
                                          : rt::DType::I64;
      EXPECT_TRUE(e.isF32() || e.isInteger(32) || e.isInteger(64));
      return kernels::TensorDesc{
          dtype, rt::Shape(tensor.getShape().begin(), tensor.getShape().end())};
    };
    std::vector<kernels::TensorDesc> in, out;
    for (Type t : op->getOperandTypes())
      in.push_back(desc(t));
    for (Type t : op->getResultTypes())
      out.push_back(desc(t));
    FailureOr<nlohmann::json> attrs = mlir::dtc::kernelAttributes(op);
    EXPECT_TRUE(succeeded(attrs));
    const kernels::KernelInfo *kernel =
        kernels::findKernel(op->getName().stripDialect().str());
    EXPECT_NE(kernel, nullptr) << op->getName().getStringRef().str();
    return kernels::checkRule(*kernel, in, out, *attrs);
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
};

/// Shape variants of a ranked shape of rank >= 1.
std::vector<std::vector<int64_t>> shapeVariants(ArrayRef<int64_t> s) {
  std::vector<std::vector<int64_t>> v;
  std::vector<int64_t> base(s.begin(), s.end());
  auto with = [&](size_t d, int64_t size) {
    auto r = base;
    r[d] = size;
    return r;
  };
  v.push_back(with(base.size() - 1, base.back() + 1));
  v.push_back(with(0, base[0] + 1));
  v.push_back(with(0, 1));
  auto longer = base;
  longer.insert(longer.begin(), 2);
  v.push_back(longer);
  v.push_back(std::vector<int64_t>(base.begin() + 1, base.end()));
  return v;
}

/// Attribute variants of the same ODS kind as `attr`.
std::vector<Attribute> attributeVariants(Attribute attr) {
  MLIRContext *ctx = attr.getContext();
  std::vector<Attribute> v;
  if (auto b = dyn_cast<BoolAttr>(attr)) {
    v.push_back(BoolAttr::get(ctx, !b.getValue()));
  } else if (auto i = dyn_cast<IntegerAttr>(attr)) {
    for (int64_t n :
         {int64_t(-1), int64_t(0), int64_t(1), int64_t(2), int64_t(99)})
      v.push_back(IntegerAttr::get(i.getType(), n));
  } else if (auto f = dyn_cast<FloatAttr>(attr)) {
    for (double d : {-1.0, -1e-9, 0.0, 1.0, 2.0, std::nan(""),
                     std::numeric_limits<double>::infinity()})
      v.push_back(FloatAttr::get(f.getType(), d));
  } else if (auto a = dyn_cast<DenseI64ArrayAttr>(attr)) {
    for (std::vector<int64_t> list : std::vector<std::vector<int64_t>>{
             {}, {0}, {1}, {-1}, {0, 0}, {2}, {0, 1, 2}, {1, 0}})
      v.push_back(DenseI64ArrayAttr::get(ctx, list));
  } else if (isa<StringAttr>(attr)) {
    for (const char *s : {"zero", "-inf", "bogus", ""})
      v.push_back(StringAttr::get(ctx, s));
  }
  return v;
}

// How each op's kernel spends its time, the cost model's class for it,
// stated here by the kernels' families: the matmuls are GEMMs, the fused
// attentions attention (the gradients their own class), the norms,
// softmax, cross entropy and the experts' routing (a softmax over the
// experts) row reductions, the Adam update its own class (a division and
// a square root per element), everything else a stream over memory. A kernel
// given the wrong class is priced at another class's rate.
TEST_F(KernelRuleTest, EveryOpStatesItsKernelsCostClass) {
  using ::dtc::kernels::CostClass;
  auto expected = [](llvm::StringRef kernel) {
    if (kernel.starts_with("matmul"))
      return CostClass::Gemm;
    if (kernel == "adam_update")
      return CostClass::Optimizer;
    if (kernel.starts_with("attention"))
      return kernel.ends_with("_grad") ? CostClass::AttentionGrad
                                       : CostClass::Attention;
    for (llvm::StringRef family :
         {"layer_norm", "rms_norm", "softmax", "cross_entropy", "moe_route"})
      if (kernel.starts_with(family) && kernel != "moe_route_grad")
        return CostClass::RowReduction;
    return CostClass::Stream;
  };
  int checked = 0;
  module->walk([&](mlir::dtc::CostOpInterface op) {
    const llvm::StringRef kernel = op->getName().stripDialect();
    EXPECT_EQ(op.getCostClass(), expected(kernel))
        << kernel.str() << " is priced as "
        << ::dtc::kernels::costClassName(op.getCostClass());
    ++checked;
  });
  EXPECT_GT(checked, 40);
}

TEST_F(KernelRuleTest, VerifierAndRuntimeRuleAgreeOnEveryVariantOfEveryOp) {
  std::vector<Operation *> samples;
  module->walk([&](Operation *op) {
    if (isa<mlir::dtc::DtcDialect>(op->getDialect()))
      samples.push_back(op);
  });

  // Every kernel that is a dialect op has a sample.
  std::set<std::string> sampled;
  for (Operation *op : samples)
    sampled.insert(op->getName().stripDialect().str());
  for (const kernels::KernelInfo &k : kernels::allKernels()) {
    bool isOp =
        RegisteredOperationName::lookup("dtc." + std::string(k.name), &context)
            .has_value();
    if (isOp) {
      EXPECT_TRUE(sampled.count(k.name)) << "no sample of dtc." << k.name;
    }
  }
  // ... and every dtc op is a kernel.
  for (const std::string &name : sampled)
    EXPECT_NE(kernels::findKernel(name), nullptr) << name;

  std::map<std::string, int> rejectedAlike;
  int variants = 0, odsStricter = 0;
  for (Operation *op : samples) {
    const std::string name = op->getName().getStringRef().str();
    ASSERT_EQ(verifierMessage(op), "") << name;
    ASSERT_EQ(ruleMessage(op), "") << name;

    OpBuilder b(op);
    auto check = [&](SmallVector<Type> operandTypes,
                     SmallVector<Type> resultTypes, NamedAttrList props,
                     const std::string &what) {
      SmallVector<Operation *> producers;
      SmallVector<Value> operands;
      for (auto [value, type] : llvm::zip(op->getOperands(), operandTypes)) {
        if (value.getType() == type) {
          operands.push_back(value);
          continue;
        }
        auto cast = UnrealizedConversionCastOp::create(
            b, op->getLoc(), TypeRange{type}, ValueRange{});
        producers.push_back(cast);
        operands.push_back(cast.getResult(0));
      }
      OperationState state(op->getLoc(), op->getName());
      state.addOperands(operands);
      state.addTypes(resultTypes);
      Operation *variant = b.create(state);
      if (!props.empty()) {
        EXPECT_TRUE(succeeded(variant->setPropertiesFromAttribute(
            props.getDictionary(&context),
            [&] { return variant->emitError(); })));
      }
      std::string verifier = verifierMessage(variant);
      std::string rule = ruleMessage(variant);
      ++variants;
      // ODS's type constraints run first and may be stricter than a kernel.
      bool odsType = (verifier.find("' op operand #") != std::string::npos ||
                      verifier.find("' op result #") != std::string::npos) &&
                     verifier.find(" must be ") != std::string::npos;
      bool odsTypesMatch =
          verifier.find("' op failed to verify that all of {") !=
          std::string::npos;
      if (odsType || (odsTypesMatch && !rule.empty())) {
        ++odsStricter;
      } else if (rule.empty()) {
        EXPECT_EQ(verifier, "")
            << name << " " << what << ": the runtime's rule accepts it";
      } else {
        EXPECT_EQ(verifier, "'" + name + "' op " + rule) << name << " " << what;
        if (verifier == "'" + name + "' op " + rule)
          ++rejectedAlike[name];
      }
      variant->erase();
      for (Operation *p : producers)
        p->erase();
    };

    SmallVector<Type> operandTypes(op->getOperandTypes()),
        resultTypes(op->getResultTypes());
    NamedAttrList props;
    if (auto dict =
            dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute()))
      props = NamedAttrList(dict);

    auto typeVariants = [&](Type type) {
      std::vector<Type> v;
      auto tensor = cast<RankedTensorType>(type);
      if (tensor.getRank() >= 1)
        for (auto &shape : shapeVariants(tensor.getShape()))
          v.push_back(RankedTensorType::get(shape, tensor.getElementType()));
      for (Type e : {Type(Float32Type::get(&context)),
                     Type(IntegerType::get(&context, 32)),
                     Type(IntegerType::get(&context, 64))})
        if (e != tensor.getElementType())
          v.push_back(RankedTensorType::get(tensor.getShape(), e));
      return v;
    };
    for (unsigned i = 0; i < operandTypes.size(); ++i)
      for (Type t : typeVariants(operandTypes[i])) {
        SmallVector<Type> mutated = operandTypes;
        mutated[i] = t;
        check(mutated, resultTypes, props, "operand #" + std::to_string(i));
      }
    for (unsigned i = 0; i < resultTypes.size(); ++i)
      for (Type t : typeVariants(resultTypes[i])) {
        SmallVector<Type> mutated = resultTypes;
        mutated[i] = t;
        check(operandTypes, mutated, props, "result #" + std::to_string(i));
      }
    for (NamedAttribute attr : props)
      for (Attribute value : attributeVariants(attr.getValue())) {
        NamedAttrList mutated = props;
        mutated.set(attr.getName(), value);
        std::string text;
        llvm::raw_string_ostream os(text);
        os << attr.getName().getValue() << " = " << value;
        check(operandTypes, resultTypes, mutated, os.str());
      }
  }
  // Every op had variants the shared rule rejects, reported in its words.
  for (Operation *op : samples)
    EXPECT_GT(rejectedAlike[op->getName().getStringRef().str()], 0)
        << op->getName().getStringRef().str();
  EXPECT_GT(variants, 500);
  RecordProperty("variants", variants);
  RecordProperty("ods_stricter", odsStricter);
}

// The drift that started this: Adam's eps. The verifier and the runtime's
// loader give the same answer, in the same words, for eps = 0.
// The kernel table is the one list of "in place ok" pairs: an op offers
// InPlaceOpInterface exactly when its kernel has pairs, and the interface
// answers with the table's operand for every result.
TEST_F(KernelRuleTest, InPlaceOperandsAreTheKernelTablesPairs) {
  int checked = 0;
  module->walk([&](Operation *op) {
    if (!isa<mlir::dtc::DtcDialect>(op->getDialect()))
      return;
    const std::string name = op->getName().stripDialect().str();
    const kernels::KernelInfo *kernel = kernels::findKernel(name);
    ASSERT_NE(kernel, nullptr) << name;
    auto inPlace = dyn_cast<mlir::dtc::InPlaceOpInterface>(op);
    EXPECT_EQ(bool(inPlace), !kernel->inPlace.empty()) << name;
    if (!inPlace)
      return;
    for (unsigned r = 0; r < op->getNumResults(); ++r) {
      int64_t expected = -1;
      for (auto [out, in] : kernel->inPlace)
        if (out == int(r))
          expected = in;
      EXPECT_EQ(inPlace.getInPlaceOperand(r), expected) << name << " #" << r;
      // The paired operand's type is the result's: the buffer fits.
      if (expected >= 0) {
        EXPECT_EQ(cast<ShapedType>(op->getOperand(expected).getType())
                      .getNumElements(),
                  cast<ShapedType>(op->getResult(r).getType()).getNumElements())
            << name;
      }
    }
    ++checked;
  });
  EXPECT_GE(checked, 5); // sgd, adam, loss-scale updates, fill_padding, reshape
}

TEST_F(KernelRuleTest, AdamEpsMustBePositiveOnBothSides) {
  mlir::dtc::AdamUpdateOp adam;
  module->walk([&](mlir::dtc::AdamUpdateOp op) { adam = op; });
  ASSERT_TRUE(adam);
  OpBuilder b(adam);
  auto zeroEps = cast<mlir::dtc::AdamUpdateOp>(b.clone(*adam));
  zeroEps.setEpsAttr(b.getF64FloatAttr(0.0));
  EXPECT_EQ(verifierMessage(zeroEps),
            "'dtc.adam_update' op attribute 'eps' must be > 0");
  EXPECT_EQ(ruleMessage(zeroEps), "attribute 'eps' must be > 0");
  zeroEps.setEpsAttr(b.getF64FloatAttr(1e-12));
  EXPECT_EQ(verifierMessage(zeroEps), "");
  EXPECT_EQ(ruleMessage(zeroEps), "");
  zeroEps->erase();
}

// Discardable dtc.* attributes (gradient links, layers, shardings) are not
// kernel attributes: they neither reach the rule nor the artifact.
TEST_F(KernelRuleTest, DiscardableAttributesAreNotKernelAttributes) {
  mlir::dtc::SoftmaxOp softmax;
  module->walk([&](mlir::dtc::SoftmaxOp op) { softmax = op; });
  ASSERT_TRUE(softmax);
  softmax->setAttr("dtc.forward", StringAttr::get(&context, "x"));
  softmax->setAttr("dtc.layer",
                   IntegerAttr::get(IntegerType::get(&context, 64), -3));
  FailureOr<nlohmann::json> attrs = mlir::dtc::kernelAttributes(softmax);
  ASSERT_TRUE(succeeded(attrs));
  EXPECT_EQ(*attrs, nlohmann::json({{"axis", 1}}));
  EXPECT_EQ(verifierMessage(softmax), "");
}

} // namespace
