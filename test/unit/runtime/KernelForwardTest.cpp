//===- KernelForwardTest.cpp - every forward kernel vs naive loops --------===//
#include "KernelTestUtil.h"

#include <algorithm>
#include <functional>
#include <limits>

using namespace dtc::test;
using dtc::rt::Error;

namespace {

// ---- matmul
// -------------------------------------------------------------------

HostTensor refMatmul(const HostTensor &a, const HostTensor &b,
                     const Shape &out) {
  HostTensor c{DType::F32, out,
               std::vector<double>(size_t(dtc::rt::numel(out)))};
  const int64_t M = a.shape[a.shape.size() - 2], K = a.shape.back(),
                N = b.shape.back();
  const Shape ba(a.shape.begin(), a.shape.end() - 2),
      bb(b.shape.begin(), b.shape.end() - 2);
  const Shape bo(out.begin(), out.end() - 2);
  for (int64_t bi = 0; bi < dtc::rt::numel(bo); ++bi) {
    Shape oi = unravel(bi, bo);
    int64_t ia = bcastIndex(oi, ba), ib = bcastIndex(oi, bb);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += a[(ia * M + m) * K + k] * b[(ib * K + k) * N + n];
        c[(bi * M + m) * N + n] = s;
      }
  }
  return c;
}

struct MatmulCase {
  Shape a, b, out;
};

TEST(KernelForward, MatmulIncludingBatchBroadcast) {
  const MatmulCase cases[] = {
      {{3, 4}, {4, 5}, {3, 5}},
      {{2, 3, 4}, {4, 5}, {2, 3, 5}}, // folded into one GEMM
      {{4, 5}, {2, 5, 6}, {2, 4, 6}}, // a broadcast over b's batch
      {{2, 3, 4, 5},
       {3, 5, 2},
       {2, 3, 4, 2}}, // b broadcast over a's leading dim
      {{2, 1, 4, 5},
       {3, 5, 6},
       {2, 3, 4, 6}}, // size-1 batch dim broadcast both ways
      {{1, 1}, {1, 7}, {1, 7}},
  };
  uint32_t seed = 1;
  for (const auto &c : cases) {
    HostTensor a = randF(c.a, seed++), b = randF(c.b, seed++);
    HostTensor got = run1("matmul", {a, b}, {DType::F32, c.out});
    expectNear(got, refMatmul(a, b, c.out), 1e-5, 1e-5,
               "matmul " + dtc::rt::shapeStr(c.a));
  }
}

TEST(KernelForward, MatmulCheckRule) {
  EXPECT_NE(checkKernel("matmul", {randF({3, 4}, 1), randF({5, 6}, 2)},
                        {{DType::F32, {3, 6}}}, {}),
            "");
  EXPECT_NE(checkKernel("matmul", {randF({2, 3, 4}, 1), randF({3, 4, 6}, 2)},
                        {{DType::F32, {2, 3, 6}}}, {}),
            "");
  EXPECT_NE(checkKernel("matmul", {randF({3, 4}, 1), randF({4, 6}, 2)},
                        {{DType::F32, {3, 5}}}, {}),
            "");
  EXPECT_NE(checkKernel("matmul", {randF({4}, 1), randF({4, 6}, 2)},
                        {{DType::F32, {6}}}, {}),
            "");
  EXPECT_NE(
      checkKernel("matmul",
                  {I32({3, 4}, std::vector<double>(12)), randF({4, 6}, 2)},
                  {{DType::F32, {3, 6}}}, {}),
      "");
}

// ---- elementwise binary with broadcasting
// ------------------------------------------

double refBin(const std::string &op, double x, double y, DType dt) {
  if (op == "add")
    return x + y;
  if (op == "sub")
    return x - y;
  if (op == "mul")
    return x * y;
  if (op == "div")
    return dt == DType::F32 ? x / y : std::trunc(x / y);
  return std::max(x, y);
}

TEST(KernelForward, BinaryBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 4}, {2, 3, 4}},
      {{2, 3, 4}, {4}},
      {{4}, {2, 3, 4}},
      {{2, 1, 4}, {3, 1}},
      {{}, {2, 3}},
      {{2, 3}, {}},
      {{5, 1}, {1, 6}},
      {{2, 3, 1, 5}, {3, 4, 1}},
      {{1}, {1}}};
  uint32_t seed = 10;
  for (const std::string op : {"add", "sub", "mul", "div", "max"}) {
    for (const auto &[sa, sb] : shapes) {
      HostTensor a = randF(sa, seed++), b = randF(sb, seed++, 0.5, 2.0);
      Shape out;
      ASSERT_TRUE(dtc::kernels::broadcastShapes(sa, sb, out));
      HostTensor want{DType::F32, out,
                      std::vector<double>(size_t(dtc::rt::numel(out)))};
      for (int64_t i = 0; i < want.numel(); ++i) {
        Shape oi = unravel(i, out);
        want[i] = double(float(refBin(op, a[bcastIndex(oi, sa)],
                                      b[bcastIndex(oi, sb)], DType::F32)));
      }
      expectNear(run1(op, {a, b}, {DType::F32, out}), want, 1e-6, 1e-6, op);
    }
  }
}

TEST(KernelForward, IntegerBinary) {
  for (DType dt : {DType::I32, DType::I64}) {
    HostTensor a{dt, {2, 3}, {7, -7, 9, 0, 100, -5}}, b{dt, {3}, {2, 3, -4}};
    for (const std::string op : {"add", "sub", "mul", "div", "max"}) {
      HostTensor got = run1(op, {a, b}, {dt, {2, 3}});
      for (int64_t i = 0; i < 6; ++i)
        EXPECT_EQ(got[i], refBin(op, a[i], b[i % 3], dt)) << op << " " << i;
    }
    // Division by zero is a run-time error, not a crash.
    EXPECT_THROW(run1("div", {a, HostTensor{dt, {}, {0}}}, {dt, {2, 3}}),
                 Error);
  }
  // INT_MIN / -1 wraps instead of trapping.
  HostTensor got = run1("div", {I32({1}, {-2147483648.0}), I32({1}, {-1})},
                        {DType::I32, {1}});
  EXPECT_EQ(got[0], -2147483648.0);
}

TEST(KernelForward, BinaryCheckRule) {
  EXPECT_NE(checkKernel("add", {randF({2, 3}, 1), randF({4}, 2)},
                        {{DType::F32, {2, 3}}}, {}),
            "");
  EXPECT_NE(checkKernel("add", {randF({2, 3}, 1), randF({3}, 2)},
                        {{DType::F32, {3}}}, {}),
            "");
  EXPECT_NE(checkKernel("add", {randF({3}, 1), I32({3}, {1, 2, 3})},
                        {{DType::F32, {3}}}, {}),
            "");
  EXPECT_EQ(checkKernel("mul", {randF({2, 3}, 1), randF({3}, 2)},
                        {{DType::F32, {2, 3}}}, {}),
            "");
}

// ---- unary
// -------------------------------------------------------------------

TEST(KernelForward, Unary) {
  const double c = std::sqrt(2.0 / M_PI);
  const std::vector<std::pair<std::string, std::function<double(double)>>> ops =
      {
          {"neg", [](double x) { return -x; }},
          {"exp", [](double x) { return std::exp(x); }},
          {"log", [](double x) { return std::log(x); }},
          {"tanh", [](double x) { return std::tanh(x); }},
          {"sqrt", [](double x) { return std::sqrt(x); }},
          {"rsqrt", [](double x) { return 1 / std::sqrt(x); }},
          {"relu", [](double x) { return x > 0 ? x : 0; }},
          {"gelu",
           [c](double x) {
             return 0.5 * x * (1 + std::tanh(c * (x + 0.044715 * x * x * x)));
           }},
          {"silu", [](double x) { return x / (1 + std::exp(-x)); }},
      };
  for (const auto &[op, f] : ops) {
    const bool positive = op == "log" || op == "sqrt" || op == "rsqrt";
    HostTensor x = randF({3, 7}, 99, positive ? 0.1 : -3.0, 3.0);
    HostTensor want = x;
    for (double &v : want.v)
      v = f(v);
    expectNear(run1(op, {x}, {DType::F32, {3, 7}}), want, 1e-6, 2e-6, op);
  }
  HostTensor n = run1("neg", {I64({3}, {1, -2, 0})}, {DType::I64, {3}});
  EXPECT_EQ(n.v, (std::vector<double>{-1, 2, 0}));
  EXPECT_NE(checkKernel("exp", {I32({2}, {1, 2})}, {{DType::I32, {2}}}, {}),
            "");
  EXPECT_NE(checkKernel("relu", {randF({2}, 1)}, {{DType::F32, {3}}}, {}), "");
}

// ---- softmax, norms
// -------------------------------------------------------------

HostTensor refSoftmax(const HostTensor &x, int64_t axis) {
  HostTensor y = x;
  const Shape &s = x.shape;
  for (int64_t i = 0; i < x.numel(); ++i) {
    Shape idx = unravel(i, s);
    if (idx[size_t(axis)] != 0)
      continue;
    int64_t stride = 1;
    for (size_t d = size_t(axis) + 1; d < s.size(); ++d)
      stride *= s[d];
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < s[size_t(axis)]; ++j)
      mx = std::max(mx, x[i + j * stride]);
    for (int64_t j = 0; j < s[size_t(axis)]; ++j)
      sum += std::exp(x[i + j * stride] - mx);
    for (int64_t j = 0; j < s[size_t(axis)]; ++j)
      y[i + j * stride] = std::exp(x[i + j * stride] - mx) / sum;
  }
  return y;
}

TEST(KernelForward, SoftmaxEveryAxis) {
  HostTensor x = randF({3, 4, 5}, 5, -4, 4);
  for (int64_t axis = 0; axis < 3; ++axis)
    expectNear(run1("softmax", {x}, {DType::F32, x.shape}, {{"axis", axis}}),
               refSoftmax(x, axis), 1e-6, 1e-5, "axis " + std::to_string(axis));
  EXPECT_NE(checkKernel("softmax", {x}, {{DType::F32, x.shape}}, {{"axis", 3}}),
            "");
  EXPECT_NE(
      checkKernel("softmax", {x}, {{DType::F32, x.shape}}, json::object()), "");
  EXPECT_NE(
      checkKernel("softmax", {x}, {{DType::F32, x.shape}}, {{"axis", 1.5}}),
      "");
}

TEST(KernelForward, LayerNormAndRmsNorm) {
  HostTensor x = randF({2, 3, 8}, 6, -2, 3), g = randF({8}, 7, 0.5, 1.5),
             b = randF({8}, 8);
  const double eps = 1e-5;
  HostTensor ln = x, rn = x;
  for (int64_t r = 0; r < 6; ++r) {
    double mean = 0, var = 0, ms = 0;
    for (int j = 0; j < 8; ++j)
      mean += x[r * 8 + j] / 8;
    for (int j = 0; j < 8; ++j)
      var += (x[r * 8 + j] - mean) * (x[r * 8 + j] - mean) / 8;
    for (int j = 0; j < 8; ++j)
      ms += x[r * 8 + j] * x[r * 8 + j] / 8;
    for (int j = 0; j < 8; ++j) {
      ln[r * 8 + j] =
          (x[r * 8 + j] - mean) / std::sqrt(var + eps) * g[j] + b[j];
      rn[r * 8 + j] = x[r * 8 + j] / std::sqrt(ms + eps) * g[j];
    }
  }
  expectNear(
      run1("layer_norm", {x, g, b}, {DType::F32, x.shape}, {{"epsilon", eps}}),
      ln, 1e-5, 1e-5);
  expectNear(
      run1("rms_norm", {x, g}, {DType::F32, x.shape}, {{"epsilon", eps}}), rn,
      1e-5, 1e-5);
  EXPECT_NE(checkKernel("layer_norm", {x, randF({7}, 1), b},
                        {{DType::F32, x.shape}}, {{"epsilon", eps}}),
            "");
  EXPECT_NE(checkKernel("rms_norm", {x, g}, {{DType::F32, x.shape}},
                        {{"epsilon", -1}}),
            "");
  // A row of two groups of 8 and a tail of 3.
  HostTensor x19 = randF({3, 19}, 9, -2, 3), g19 = randF({19}, 10, 0.5, 1.5),
             rn19 = x19;
  for (int64_t r = 0; r < 3; ++r) {
    double ms = 0;
    for (int j = 0; j < 19; ++j)
      ms += double(x19[r * 19 + j]) * x19[r * 19 + j] / 19;
    for (int j = 0; j < 19; ++j)
      rn19[r * 19 + j] = x19[r * 19 + j] / std::sqrt(ms + eps) * g19[j];
  }
  expectNear(
      run1("rms_norm", {x19, g19}, {DType::F32, x19.shape}, {{"epsilon", eps}}),
      rn19, 1e-5, 1e-5);
}

// ---- embedding, attention, cross_entropy
// ------------------------------------------------

TEST(KernelForward, Embedding) {
  HostTensor table = randF({5, 3}, 9);
  for (DType dt : {DType::I32, DType::I64}) {
    HostTensor ids{dt, {2, 2}, {4, 0, 2, 4}};
    HostTensor got = run1("embedding", {table, ids}, {DType::F32, {2, 2, 3}});
    for (int p = 0; p < 4; ++p)
      for (int d = 0; d < 3; ++d)
        EXPECT_EQ(got[p * 3 + d], table[int64_t(ids[p]) * 3 + d]);
    HostTensor bad{dt, {2}, {1, 5}};
    try {
      run1("embedding", {table, bad}, {DType::F32, {2, 3}});
      FAIL() << "expected an error";
    } catch (const Error &e) {
      EXPECT_NE(
          std::string(e.what()).find("id 5 at position [1] is outside [0, 5)"),
          std::string::npos)
          << e.what();
    }
    EXPECT_THROW(run1("embedding", {table, HostTensor{dt, {1}, {-1}}},
                      {DType::F32, {1, 3}}),
                 Error);
  }
  EXPECT_NE(checkKernel("embedding", {table, randF({2}, 1)},
                        {{DType::F32, {2, 3}}}, {}),
            "");
}

HostTensor refAttention(const HostTensor &q, const HostTensor &k,
                        const HostTensor &v, bool causal) {
  const int64_t B = q.shape[0], H = q.shape[1], S = q.shape[2], D = q.shape[3];
  HostTensor o = q;
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < S; ++i) {
      std::vector<double> p(static_cast<size_t>(S));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < S; ++j) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d)
          s += q[(bh * S + i) * D + d] * k[(bh * S + j) * D + d];
        p[size_t(j)] = (causal && j > i) ? -1e300 : s / std::sqrt(double(D));
        mx = std::max(mx, p[size_t(j)]);
      }
      for (int64_t j = 0; j < S; ++j)
        sum += (p[size_t(j)] =
                    (causal && j > i) ? 0 : std::exp(p[size_t(j)] - mx));
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j)
          acc += p[size_t(j)] / sum * v[(bh * S + j) * D + d];
        o[(bh * S + i) * D + d] = acc;
      }
    }
  return o;
}

TEST(KernelForward, Attention) {
  const Shape s{2, 3, 5, 4};
  HostTensor q = randF(s, 11), k = randF(s, 12), v = randF(s, 13);
  for (bool causal : {false, true})
    expectNear(
        run1("attention", {q, k, v}, {DType::F32, s}, {{"causal", causal}}),
        refAttention(q, k, v, causal), 1e-5, 1e-5, causal ? "causal" : "full");
  EXPECT_NE(checkKernel("attention", {q, k, randF({2, 3, 4, 4}, 1)},
                        {{DType::F32, s}}, {{"causal", true}}),
            "");
  EXPECT_NE(
      checkKernel("attention", {q, k, v}, {{DType::F32, s}}, {{"causal", 1}}),
      "");
}

// ignore_index: labels equal to it (here 2, and -100 outside [0, V)) add
// no loss and no gradient; the mean is over the kept labels, 0 with none.
TEST(KernelForward, CrossEntropyIgnoredLabels) {
  HostTensor z = randF({6, 5}, 21, -3, 3);
  HostTensor y = I32({6}, {2, 0, 4, 2, 1, 2});
  auto nll = [&](int r) {
    double mx = -1e300, s = 0;
    for (int j = 0; j < 5; ++j)
      mx = std::max(mx, z[r * 5 + j]);
    for (int j = 0; j < 5; ++j)
      s += std::exp(z[r * 5 + j] - mx);
    return std::log(s) + mx - z[r * 5 + int64_t(y[r])];
  };
  const double sum = nll(1) + nll(2) + nll(4);
  const json ignore2 = {{"ignore_index", 2}};
  EXPECT_NEAR(run1("cross_entropy", {z, y}, {DType::F32, {}}, ignore2)[0],
              sum / 3, 1e-5);
  EXPECT_NEAR(run1("cross_entropy", {z, y}, {DType::F32, {}},
                   {{"ignore_index", 2}, {"reduction", "sum"}})[0],
              sum, 1e-5);
  HostTensor none = I32({6}, std::vector<double>(6, -100));
  EXPECT_EQ(run1("cross_entropy", {z, none}, {DType::F32, {}},
                 {{"ignore_index", -100}})[0],
            0.0);
  HostTensor dz =
      run1("cross_entropy_grad", {z, y, F({}, {1})}, {DType::F32, z.shape},
           {{"scale", 1.0}, {"ignore_index", 2}});
  for (int r = 0; r < 6; ++r)
    for (int j = 0; j < 5; ++j)
      if (y[r] == 2)
        EXPECT_EQ(dz[r * 5 + j], 0.0) << r << " " << j;
      else
        EXPECT_NE(dz[r * 5 + j], 0.0) << r << " " << j;
  HostTensor mask = run1("label_mask", {y}, {DType::F32, {6}}, ignore2);
  for (int r = 0; r < 6; ++r)
    EXPECT_EQ(mask[r], y[r] == 2 ? 0.0 : 1.0);
  EXPECT_NE(checkKernel("cross_entropy", {z, y}, {{DType::F32, {}}},
                        {{"reduction", "max"}}),
            "");
}

TEST(KernelForward, CrossEntropy) {
  HostTensor z = randF({2, 3, 7}, 14, -3, 3);
  for (DType dt : {DType::I32, DType::I64}) {
    HostTensor y = randInt(dt, {2, 3}, 15, 7);
    double want = 0;
    for (int r = 0; r < 6; ++r) {
      double mx = -1e300, s = 0;
      for (int j = 0; j < 7; ++j)
        mx = std::max(mx, z[r * 7 + j]);
      for (int j = 0; j < 7; ++j)
        s += std::exp(z[r * 7 + j] - mx);
      want += (std::log(s) + mx - z[r * 7 + int64_t(y[r])]) / 6;
    }
    HostTensor got = run1("cross_entropy", {z, y}, {DType::F32, {}});
    EXPECT_NEAR(got[0], want, 1e-5);
    HostTensor bad = y;
    bad[4] = 7;
    EXPECT_THROW(run1("cross_entropy", {z, bad}, {DType::F32, {}}), Error);
    EXPECT_THROW(runKernel("cross_entropy_grad", {z, bad, F({}, {1})},
                           {{DType::F32, z.shape}}, {{"scale", 1.0}}),
                 Error);
  }
  EXPECT_NE(checkKernel("cross_entropy", {z, randInt(DType::I32, {2, 7}, 1, 7)},
                        {{DType::F32, {}}}, {}),
            "");
  EXPECT_NE(checkKernel("cross_entropy", {z, randInt(DType::I32, {2, 3}, 1, 7)},
                        {{DType::F32, {1}}}, {}),
            "");
}

// ---- reductions
// ---------------------------------------------------------------------

TEST(KernelForward, Reductions) {
  HostTensor x = randF({2, 3, 4}, 16);
  const std::vector<std::vector<int64_t>> axesList = {
      {}, {0}, {1}, {2}, {0, 2}, {2, 0}, {0, 1, 2}};
  for (const auto &axes : axesList)
    for (bool keep : {false, true})
      for (bool mean : {false, true}) {
        Shape out;
        for (int64_t d = 0; d < 3; ++d) {
          bool red = std::find(axes.begin(), axes.end(), d) != axes.end();
          if (!red)
            out.push_back(x.shape[size_t(d)]);
          else if (keep)
            out.push_back(1);
        }
        Shape keepShape = x.shape;
        for (int64_t a : axes)
          keepShape[size_t(a)] = 1;
        HostTensor want{DType::F32, out,
                        std::vector<double>(size_t(dtc::rt::numel(out)), 0.0)};
        const double count = double(x.numel()) / double(want.numel());
        for (int64_t i = 0; i < x.numel(); ++i) {
          Shape idx = unravel(i, x.shape);
          want[bcastIndex(idx, keepShape)] += x[i] / (mean ? count : 1.0);
        }
        HostTensor got =
            run1(mean ? "reduce_mean" : "reduce_sum", {x}, {DType::F32, out},
                 {{"axes", axes}, {"keep_dims", keep}});
        expectNear(got, want, 1e-6, 1e-6);
      }
  HostTensor xi = I64({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor s = run1("reduce_sum", {xi}, {DType::I64, {3}},
                      {{"axes", {0}}, {"keep_dims", false}});
  EXPECT_EQ(s.v, (std::vector<double>{5, 7, 9}));
  EXPECT_NE(checkKernel("reduce_sum", {x}, {{DType::F32, {3, 4}}},
                        {{"axes", {0, 0}}, {"keep_dims", false}}),
            "");
  EXPECT_NE(checkKernel("reduce_sum", {x}, {{DType::F32, {3, 4}}},
                        {{"axes", {3}}, {"keep_dims", false}}),
            "");
  EXPECT_NE(
      checkKernel("reduce_sum", {x}, {{DType::F32, {3, 4}}}, {{"axes", {0}}}),
      "");
  EXPECT_NE(checkKernel("reduce_mean", {xi}, {{DType::I64, {3}}},
                        {{"axes", {0}}, {"keep_dims", false}}),
            "");
}

// ---- data movement
// ------------------------------------------------------------------

TEST(KernelForward, ReshapeCopyBroadcast) {
  HostTensor x = randF({2, 6}, 17);
  HostTensor r = run1("reshape", {x}, {DType::F32, {3, 2, 2}});
  EXPECT_EQ(r.v, x.v);
  EXPECT_EQ(run1("copy", {x}, {DType::F32, {2, 6}}).v, x.v);
  EXPECT_NE(checkKernel("reshape", {x}, {{DType::F32, {5}}}, {}), "");
  for (const auto &[from, to] :
       std::vector<std::pair<Shape, Shape>>{{{3}, {2, 3}},
                                            {{2, 1}, {2, 4}},
                                            {{}, {2, 2}},
                                            {{1, 3, 1}, {2, 3, 4}},
                                            {{2, 3}, {2, 3}}}) {
    HostTensor a = randF(from, 18);
    HostTensor want{DType::F32, to,
                    std::vector<double>(size_t(dtc::rt::numel(to)))};
    for (int64_t i = 0; i < want.numel(); ++i)
      want[i] = a[bcastIndex(unravel(i, to), from)];
    expectNear(run1("broadcast", {a}, {DType::F32, to}), want, 0, 0,
               "broadcast");
  }
  HostTensor bi =
      run1("broadcast", {I64({2, 1}, {5, -6})}, {DType::I64, {2, 3}});
  EXPECT_EQ(bi.v, (std::vector<double>{5, 5, 5, -6, -6, -6}));
  EXPECT_NE(
      checkKernel("broadcast", {randF({3}, 1)}, {{DType::F32, {3, 2}}}, {}),
      "");
}

TEST(KernelForward, Transpose) {
  HostTensor x = randF({2, 3, 4}, 19);
  const std::vector<std::vector<int64_t>> perms = {
      {0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (const auto &p : perms) {
    Shape out{x.shape[size_t(p[0])], x.shape[size_t(p[1])],
              x.shape[size_t(p[2])]};
    HostTensor want{DType::F32, out, std::vector<double>(24)};
    for (int64_t i = 0; i < 24; ++i) {
      Shape oi = unravel(i, out), xi(3);
      for (int d = 0; d < 3; ++d)
        xi[size_t(p[size_t(d)])] = oi[size_t(d)];
      want[i] = x[(xi[0] * 3 + xi[1]) * 4 + xi[2]];
    }
    expectNear(run1("transpose", {x}, {DType::F32, out}, {{"permutation", p}}),
               want, 0, 0);
  }
  HostTensor xi = I64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(
      run1("transpose", {xi}, {DType::I64, {3, 2}}, {{"permutation", {1, 0}}})
          .v,
      (std::vector<double>{1, 4, 2, 5, 3, 6}));
  EXPECT_NE(checkKernel("transpose", {x}, {{DType::F32, {2, 3, 4}}},
                        {{"permutation", {0, 0, 1}}}),
            "");
  EXPECT_NE(checkKernel("transpose", {x}, {{DType::F32, {3, 2, 4}}},
                        {{"permutation", {0, 1, 2}}}),
            "");
}

TEST(KernelForward, Cast) {
  HostTensor f = F({6}, {1.9, -1.9, 0.0, 3e9, -3e9, std::nan("")});
  EXPECT_EQ(run1("cast", {f}, {DType::I32, {6}}).v,
            (std::vector<double>{1, -1, 0, 2147483647.0, -2147483648.0, 0}));
  EXPECT_EQ(run1("cast", {f}, {DType::I64, {6}}).v,
            (std::vector<double>{1, -1, 0, 3e9, -3e9, 0}));
  HostTensor i64 = I64({3}, {5, -3e10, 7});
  EXPECT_EQ(run1("cast", {i64}, {DType::I32, {3}}).v,
            (std::vector<double>{5, -2147483648.0, 7}));
  EXPECT_EQ(run1("cast", {i64}, {DType::F32, {3}}).v,
            (std::vector<double>{5, double(float(-3e10)), 7}));
  EXPECT_EQ(run1("cast", {I32({2}, {-4, 9})}, {DType::I64, {2}}).v,
            (std::vector<double>{-4, 9}));
  EXPECT_EQ(run1("cast", {I32({2}, {-4, 9})}, {DType::F32, {2}}).v,
            (std::vector<double>{-4, 9}));
  EXPECT_NE(checkKernel("cast", {f}, {{DType::I32, {5}}}, {}), "");
}

TEST(KernelRegistry, EveryKernelHasACpuImplementation) {
  EXPECT_EQ(dtc::kernels::allKernels().size(), 64u);
  // shard_offset depends on the rank: the executor computes it.
  for (const auto &k : dtc::kernels::allKernels()) {
    if (std::string(k.name) != "shard_offset") {
      EXPECT_NE(dtc::kernels::cpu::findKernel(k.name), nullptr) << k.name;
    }
  }
  EXPECT_EQ(dtc::kernels::findKernel("nope"), nullptr);
}

} // namespace
