//===- KernelTestUtil.h - run single kernels on host tensors -----*- C++
//-*-===//
#ifndef DTC_TEST_KERNELTESTUTIL_H
#define DTC_TEST_KERNELTESTUTIL_H

#include "dtc/kernels/CpuKernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace dtc::test {

using json = nlohmann::json;
using rt::DType;
using rt::Shape;

/// A host tensor; values are kept as doubles for reference math and
/// converted to the dtype's bytes when a kernel runs.
struct HostTensor {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<double> v;

  int64_t numel() const { return rt::numel(shape); }
  double &operator[](int64_t i) { return v[size_t(i)]; }
  double operator[](int64_t i) const { return v[size_t(i)]; }

  std::vector<char> bytes() const {
    std::vector<char> b(size_t(numel()) * rt::dtypeSize(dtype));
    for (int64_t i = 0; i < numel(); ++i) {
      if (dtype == DType::F32) {
        float f = float(v[size_t(i)]);
        std::memcpy(b.data() + 4 * i, &f, 4);
      } else if (dtype == DType::I32) {
        int32_t x = int32_t(v[size_t(i)]);
        std::memcpy(b.data() + 4 * i, &x, 4);
      } else {
        int64_t x = int64_t(v[size_t(i)]);
        std::memcpy(b.data() + 8 * i, &x, 8);
      }
    }
    return b;
  }
  static HostTensor fromBytes(DType d, const Shape &s, const char *p) {
    HostTensor t{d, s, {}};
    t.v.resize(size_t(rt::numel(s)));
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (d == DType::F32) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        t.v[size_t(i)] = f;
      } else if (d == DType::I32) {
        int32_t x;
        std::memcpy(&x, p + 4 * i, 4);
        t.v[size_t(i)] = x;
      } else {
        int64_t x;
        std::memcpy(&x, p + 8 * i, 8);
        t.v[size_t(i)] = double(x);
      }
    }
    return t;
  }
};

inline HostTensor F(Shape s, std::vector<double> v) {
  return {DType::F32, std::move(s), std::move(v)};
}
inline HostTensor I32(Shape s, std::vector<double> v) {
  return {DType::I32, std::move(s), std::move(v)};
}
inline HostTensor I64(Shape s, std::vector<double> v) {
  return {DType::I64, std::move(s), std::move(v)};
}

/// Uniform random f32 values in [lo, hi), rounded to float.
inline HostTensor randF(Shape s, uint32_t seed, double lo = -1.0,
                        double hi = 1.0) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  HostTensor t{DType::F32, std::move(s), {}};
  t.v.resize(size_t(rt::numel(t.shape)));
  for (double &x : t.v)
    x = double(float(d(g)));
  return t;
}
inline HostTensor randInt(DType dt, Shape s, uint32_t seed, int64_t max) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int64_t> d(0, max - 1);
  HostTensor t{dt, std::move(s), {}};
  t.v.resize(size_t(rt::numel(t.shape)));
  for (double &x : t.v)
    x = double(d(g));
  return t;
}

struct OutSpec {
  DType dtype;
  Shape shape;
};

/// The check rule's verdict: "" when accepted, else its message.
inline std::string checkKernel(const std::string &name,
                               const std::vector<HostTensor> &ins,
                               const std::vector<OutSpec> &outs,
                               const json &attrs) {
  const kernels::KernelInfo *k = kernels::findKernel(name);
  if (!k)
    return "unknown kernel";
  if (int(ins.size()) < k->numIn ||
      int(ins.size()) > k->numIn + k->numOptionalIn ||
      int(outs.size()) != k->numOut)
    return "arity";
  std::vector<kernels::TensorDesc> di, dout;
  for (const auto &t : ins)
    di.push_back({t.dtype, t.shape});
  for (const auto &t : outs)
    dout.push_back({t.dtype, t.shape});
  return kernels::checkRule(*k, di, dout, attrs);
}

/// Runs kernel `name` (after its check rule accepted the operands), with a
/// context of `threads` threads (0: the calling thread's default, 1).
inline std::vector<HostTensor> runKernel(const std::string &name,
                                         const std::vector<HostTensor> &ins,
                                         const std::vector<OutSpec> &outs,
                                         const json &attrs = json::object(),
                                         int threads = 0) {
  std::string err = checkKernel(name, ins, outs, attrs);
  EXPECT_EQ(err, "") << name;
  if (!err.empty())
    throw rt::Error("check rule rejected " + name + ": " + err);
  kernels::RunFn fn = kernels::cpu::findKernel(name);
  if (!fn)
    throw rt::Error("no CPU kernel " + name);
  std::vector<std::vector<char>> inBytes, outBytes;
  kernels::KernelArgs a;
  a.attrs = &attrs;
  kernels::KernelContext ctx(threads);
  if (threads > 0)
    a.ctx = &ctx;
  for (const auto &t : ins)
    inBytes.push_back(t.bytes());
  for (size_t i = 0; i < ins.size(); ++i)
    a.in.push_back(
        {ins[i].dtype, ins[i].shape, inBytes[i].data(), ins[i].numel()});
  for (const auto &o : outs)
    outBytes.emplace_back(size_t(rt::numel(o.shape)) * rt::dtypeSize(o.dtype),
                          char(0x7f));
  for (size_t i = 0; i < outs.size(); ++i)
    a.out.push_back({outs[i].dtype, outs[i].shape, outBytes[i].data(),
                     rt::numel(outs[i].shape)});
  fn(a);
  std::vector<HostTensor> r;
  for (size_t i = 0; i < outs.size(); ++i)
    r.push_back(HostTensor::fromBytes(outs[i].dtype, outs[i].shape,
                                      outBytes[i].data()));
  return r;
}

inline HostTensor run1(const std::string &name,
                       const std::vector<HostTensor> &ins, OutSpec out,
                       const json &attrs = json::object()) {
  return runKernel(name, ins, {out}, attrs)[0];
}

/// Element-wise comparison with |a-b| <= atol + rtol*|b|.
inline void expectNear(const HostTensor &got, const HostTensor &want,
                       double atol, double rtol, const std::string &what = "") {
  ASSERT_EQ(got.shape, want.shape) << what;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << " element " << i;
      continue;
    }
    EXPECT_LE(std::fabs(g - w), atol + rtol * std::fabs(w))
        << what << " element " << i << ": got " << g << ", want " << w;
  }
}

/// Multi-index helpers for reference loops.
inline Shape unravel(int64_t i, const Shape &s) {
  Shape idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}
/// Linear index into a tensor of shape `s` broadcast to out-index `oi`.
inline int64_t bcastIndex(const Shape &oi, const Shape &s) {
  int64_t lin = 0;
  const size_t off = oi.size() - s.size();
  for (size_t d = 0; d < s.size(); ++d)
    lin = lin * s[d] + (s[d] == 1 ? 0 : oi[off + d]);
  return lin;
}

} // namespace dtc::test

#endif
