//===- InitSpecTest.cpp - the one initializer parser ----------------------===//
//
// dtc/artifact/InitSpec.h is what both the dialect's verifier (dtc.init) and
// the runtime's loader (a tensor's "init") accept.
//
//===----------------------------------------------------------------------===//
#include "dtc/artifact/InitSpec.h"
#include "dtc/artifact/Vocabulary.h"

#include <gtest/gtest.h>

namespace {

using dtc::artifact::InitSpec;
using dtc::artifact::parseInitSpec;

TEST(InitSpec, Canonical) {
  InitSpec s;
  ASSERT_TRUE(parseInitSpec("normal(0.02)", s));
  EXPECT_EQ(s.kind, InitSpec::Normal);
  EXPECT_DOUBLE_EQ(s.a, 0.02);
  ASSERT_TRUE(parseInitSpec("uniform(-1,1)", s));
  EXPECT_EQ(s.kind, InitSpec::Uniform);
  EXPECT_DOUBLE_EQ(s.a, -1);
  EXPECT_DOUBLE_EQ(s.b, 1);
  ASSERT_TRUE(parseInitSpec("fill(1024)", s));
  EXPECT_EQ(s.kind, InitSpec::Fill);
  EXPECT_DOUBLE_EQ(s.a, 1024);
  ASSERT_TRUE(parseInitSpec("zeros", s));
  EXPECT_EQ(s.kind, InitSpec::Zeros);
  ASSERT_TRUE(parseInitSpec("ones", s));
  EXPECT_EQ(s.kind, InitSpec::Ones);
  ASSERT_TRUE(parseInitSpec("uniform(2,2)", s)); // LO == HI
  ASSERT_TRUE(parseInitSpec("normal(0)", s));
  ASSERT_TRUE(parseInitSpec("normal(1e-3)", s));
  EXPECT_DOUBLE_EQ(s.a, 1e-3);
}

// The union of what the dialect (any whitespace, also before '(') and the
// runtime (spaces) accepted before there was one parser.
TEST(InitSpec, Whitespace) {
  InitSpec s;
  for (const char *text :
       {" zeros ", "\tones\n", "normal( 0.5 )", " normal(0.5) ", "normal (0.5)",
        "uniform(-0.1, 0.1)", "uniform( -0.1 ,\t0.1 )", "fill(\n3)"}) {
    EXPECT_TRUE(parseInitSpec(text, s)) << text;
  }
  ASSERT_TRUE(parseInitSpec(" uniform( -0.25 , 0.75 ) ", s));
  EXPECT_DOUBLE_EQ(s.a, -0.25);
  EXPECT_DOUBLE_EQ(s.b, 0.75);
}

TEST(InitSpec, Rejected) {
  InitSpec s{InitSpec::Fill, 7, 0};
  for (const char *bad :
       {"normal()", "normal(x)", "normal(1,2)", "uniform(1)", "uniform(2,1)",
        "gauss(1)", "normal(-1)", "zeros()", "", "   ", "normal(1",
        "normal(nan)", "normal(inf)", "fill(1e400)", "normal(1)x",
        "normal(1 2)", "uniform(1,,2)", "ze ros"}) {
    EXPECT_FALSE(parseInitSpec(bad, s)) << bad;
  }
  // A failure leaves the result as it was.
  EXPECT_EQ(s.kind, InitSpec::Fill);
  EXPECT_DOUBLE_EQ(s.a, 7);
}

// The dialect's verifier shows these (test/Dialect/invalid.mlir).
TEST(InitSpec, Messages) {
  InitSpec s;
  std::string error;
  EXPECT_FALSE(parseInitSpec("gauss(1)", s, &error));
  EXPECT_EQ(error, "unknown initializer 'gauss' (expected normal, uniform, "
                   "fill, zeros or ones)");
  EXPECT_FALSE(parseInitSpec("uniform(1)", s, &error));
  EXPECT_EQ(error, "uniform takes two numbers, LO and HI");
  EXPECT_FALSE(parseInitSpec("uniform(2,1)", s, &error));
  EXPECT_EQ(error, "uniform needs LO <= HI");
  EXPECT_FALSE(parseInitSpec("normal(-1)", s, &error));
  EXPECT_EQ(error, "normal's standard deviation must be non-negative");
  EXPECT_FALSE(parseInitSpec("fill()", s, &error));
  EXPECT_EQ(error, "fill takes one number, the value");
  EXPECT_FALSE(parseInitSpec("zero", s, &error));
  EXPECT_EQ(error,
            "expected normal(STD), uniform(LO,HI), fill(V), zeros or ones");
}

TEST(Vocabulary, NamesRoundTrip) {
  using namespace dtc::artifact;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    CollectiveKind parsed;
    ASSERT_TRUE(
        parseCollectiveKind(collectiveKindName(CollectiveKind(k)), parsed));
    EXPECT_EQ(parsed, CollectiveKind(k));
  }
  for (int k = 0; k < kNumRoles; ++k) {
    Role parsed;
    ASSERT_TRUE(parseRole(roleName(Role(k)), parsed));
    EXPECT_EQ(parsed, Role(k));
  }
  for (int k = 0; k < kNumPhases; ++k) {
    Phase parsed;
    ASSERT_TRUE(parsePhase(phaseName(Phase(k)), parsed));
    EXPECT_EQ(parsed, Phase(k));
  }
  for (int k = 0; k < kNumMemCategories; ++k) {
    MemCategory parsed;
    ASSERT_TRUE(parseMemCategory(memCategoryName(MemCategory(k)), parsed));
    EXPECT_EQ(parsed, MemCategory(k));
  }
  for (int k = 0; k < kNumReduceOps; ++k) {
    ReduceOp parsed;
    ASSERT_TRUE(parseReduceOp(reduceOpName(ReduceOp(k)), parsed));
    EXPECT_EQ(parsed, ReduceOp(k));
  }
  PipeOp pipe;
  EXPECT_TRUE(parsePipeOp("microbatch_slice", pipe));
  EXPECT_EQ(pipe, PipeOp::MicrobatchSlice);
  EXPECT_FALSE(parsePipeOp("", pipe));
  CollectiveKind kind;
  EXPECT_FALSE(parseCollectiveKind("allreduce", kind));
  EXPECT_STREQ(collectiveKindName(CollectiveKind::ReduceScatter),
               "reduce_scatter");
  EXPECT_EQ(roleNameList(),
            "param, optimizer_state, input, step, loss or output");
  EXPECT_EQ(reduceOpNameList(), "sum, max, min or average");
}

} // namespace
