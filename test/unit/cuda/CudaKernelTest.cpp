//===- CudaKernelTest.cpp - every CUDA kernel against the CPU kernel
//-------===//
//
// Runs the cases of KernelCases.h. Without a GPU every case is skipped with
// the reason (the CUDA backend's own error), so the list stays visible.
//
//===----------------------------------------------------------------------===//
#include "CudaDevice.h"
#include "KernelCases.h"

#include "CudaKernels.h"
#include "dtc/kernels/Kernel.h"
#include "dtc/runtime/Backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace dtc::test {

std::vector<KernelCase> &kernelCases() {
  static std::vector<KernelCase> cases;
  return cases;
}
AddKernelCases::AddKernelCases(std::vector<KernelCase> cases) {
  for (KernelCase &c : cases)
    kernelCases().push_back(std::move(c));
}

namespace {

using rt::DType;

/// Host bytes of an input operand drawn from `rng`.
std::vector<char> draw(const OperandSpec &spec, std::mt19937_64 &rng) {
  const int64_t n = rt::numel(spec.shape);
  std::vector<char> bytes(size_t(n) * rt::dtypeSize(spec.dtype));
  std::uniform_real_distribution<double> real(spec.lo, spec.hi);
  // Only integer operands draw integers: a float range may hold none.
  const bool isInt = rt::isInt(spec.dtype);
  std::uniform_int_distribution<int64_t> integer(
      isInt ? int64_t(std::ceil(spec.lo)) : 0,
      isInt ? int64_t(std::floor(spec.hi)) : 0);
  for (int64_t i = 0; i < n; ++i) {
    switch (spec.dtype) {
    case DType::F32:
      reinterpret_cast<float *>(bytes.data())[i] = float(real(rng));
      break;
    case DType::BF16:
      reinterpret_cast<uint16_t *>(bytes.data())[i] =
          rt::f32ToBf16(float(real(rng)));
      break;
    case DType::F16:
      reinterpret_cast<uint16_t *>(bytes.data())[i] =
          rt::f32ToF16(float(real(rng)));
      break;
    case DType::I32:
      reinterpret_cast<int32_t *>(bytes.data())[i] = int32_t(integer(rng));
      break;
    case DType::I64:
      reinterpret_cast<int64_t *>(bytes.data())[i] = integer(rng);
      break;
    }
  }
  return bytes;
}

double element(DType t, const std::vector<char> &bytes, int64_t i) {
  switch (t) {
  case DType::F32:
    return reinterpret_cast<const float *>(bytes.data())[i];
  case DType::BF16:
    return rt::bf16ToF32(reinterpret_cast<const uint16_t *>(bytes.data())[i]);
  case DType::F16:
    return rt::f16ToF32(reinterpret_cast<const uint16_t *>(bytes.data())[i]);
  case DType::I32:
    return reinterpret_cast<const int32_t *>(bytes.data())[i];
  case DType::I64:
    return double(reinterpret_cast<const int64_t *>(bytes.data())[i]);
  }
  return 0;
}

/// Outputs of one case on one backend, or the error it failed with.
struct Outcome {
  std::vector<std::vector<char>> out;
  std::string error, plan;
};

Outcome runOn(const std::string &backendName, const KernelCase &c,
              const std::vector<std::vector<char>> &inputs) {
  Outcome result;
  try {
    std::unique_ptr<rt::Backend> be =
        rt::makeBackend(backendName, rt::BackendOptions{});
    be->attachThread();
    std::vector<void *> buffers;
    auto alloc = [&](size_t bytes) {
      void *p = be->allocate((bytes + 63) / 64 * 64 + 64);
      buffers.push_back(p);
      return p;
    };
    kernels::KernelArgs args;
    args.attrs = &c.attrs;
    for (size_t i = 0; i < c.in.size(); ++i) {
      kernels::TensorArg t;
      t.dtype = c.in[i].dtype;
      t.shape = c.in[i].shape;
      t.numel = rt::numel(t.shape);
      t.data = alloc(inputs[i].size());
      if (!inputs[i].empty())
        be->copyFromHost(t.data, inputs[i].data(), inputs[i].size(),
                         be->computeStream());
      args.in.push_back(t);
    }
    for (size_t o = 0; o < c.out.size(); ++o) {
      kernels::TensorArg t;
      t.dtype = c.out[o].dtype;
      t.shape = c.out[o].shape;
      t.numel = rt::numel(t.shape);
      const size_t bytes = size_t(t.numel) * rt::dtypeSize(t.dtype);
      t.data = nullptr;
      for (auto [out, in] : c.inPlace)
        if (size_t(out) == o)
          t.data = args.in[size_t(in)].data;
      if (!t.data) {
        t.data = alloc(bytes);
        std::vector<char> poison(bytes, char(0xff));
        if (bytes)
          be->copyFromHost(t.data, poison.data(), bytes, be->computeStream());
      }
      args.out.push_back(t);
    }
    std::unique_ptr<rt::BoundKernel> k = be->bindKernel(c.kernel, args);
    if (!k)
      throw rt::Error("kernel '" + c.kernel + "' has no " + backendName +
                      " implementation");
    result.plan = k->plan();
    k->enqueue(args, be->computeStream());
    be->synchronize();
    // A product cuBLASLt refuses at run time is computed by the fallback
    // kernel: right numbers, but not the plan the case is there for.
    if (const std::string after = k->plan();
        after.find("cuBLASLt failed") != std::string::npos)
      throw rt::Error("cuBLASLt refused the planned product (" + after + ")");
    for (const kernels::TensorArg &t : args.out) {
      std::vector<char> host(size_t(t.numel) * rt::dtypeSize(t.dtype));
      if (!host.empty())
        be->copyToHost(host.data(), t.data, host.size(), be->computeStream());
      result.out.push_back(std::move(host));
    }
    for (void *p : buffers)
      be->deallocate(p);
  } catch (const std::exception &e) {
    result.error = e.what();
  }
  return result;
}

class CudaKernel : public ::testing::TestWithParam<size_t> {};

TEST_P(CudaKernel, MatchesCpu) {
  std::string why;
  if (!cudaDeviceAvailable(why))
    GTEST_SKIP() << why;
  const KernelCase &c = kernelCases()[GetParam()];
  ASSERT_NE(kernels::findKernel(c.kernel), nullptr) << c.kernel;
  {
    std::vector<kernels::TensorDesc> in, out;
    for (const OperandSpec &s : c.in)
      in.push_back({s.dtype, s.shape});
    for (const OperandSpec &s : c.out)
      out.push_back({s.dtype, s.shape});
    const std::string refused =
        kernels::checkRule(*kernels::findKernel(c.kernel), in, out, c.attrs);
    ASSERT_EQ(refused, "") << "the case itself breaks the kernel's rule";
  }
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  std::vector<std::vector<char>> inputs;
  for (const OperandSpec &s : c.in)
    inputs.push_back(draw(s, rng));
  const Outcome cpu = runOn("cpu", c, inputs), gpu = runOn("cuda", c, inputs);
  if (!c.expectError.empty()) {
    EXPECT_EQ(cpu.error, c.expectError);
    EXPECT_EQ(gpu.error, c.expectError);
    return;
  }
  ASSERT_EQ(cpu.error, "");
  ASSERT_EQ(gpu.error, "");
  if (!c.expectPlan.empty()) {
    EXPECT_NE(gpu.plan.find(c.expectPlan), std::string::npos)
        << c.label << ": the CUDA binding chose " << gpu.plan;
  }
  ASSERT_EQ(cpu.out.size(), gpu.out.size());
  for (size_t o = 0; o < c.out.size(); ++o) {
    const DType t = c.out[o].dtype;
    double rtol = c.rtol, atol = c.atol;
    if (rtol < 0)
      rtol = t == DType::F32    ? 1e-5
             : t == DType::BF16 ? 1.6e-2
             : t == DType::F16  ? 2e-3
                                : 0;
    if (atol < 0)
      atol = t == DType::F32    ? 1e-6
             : t == DType::BF16 ? 1e-2
             : t == DType::F16  ? 1e-3
                                : 0;
    const int64_t n = rt::numel(c.out[o].shape);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; ++i) {
      const double want = element(t, cpu.out[o], i),
                   got = element(t, gpu.out[o], i);
      const bool ok = (std::isnan(want) && std::isnan(got)) ||
                      (std::isinf(want) && got == want) ||
                      std::fabs(got - want) <= atol + rtol * std::fabs(want);
      if (!ok) {
        ++bad;
        ADD_FAILURE() << c.label << ": output " << o << " element " << i
                      << " is " << got << " on cuda, " << want << " on cpu";
      }
    }
  }
}

std::vector<size_t> caseIndices() {
  std::vector<size_t> v(kernelCases().size());
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = i;
  return v;
}

std::string caseName(const ::testing::TestParamInfo<size_t> &info) {
  std::string name;
  for (char ch : kernelCases()[info.param].label)
    name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return name;
}

/// The device's error report reads as the CPU kernel's message (host code:
/// runs without a GPU).
TEST(CudaDeviceError, ReadsAsTheCpuMessage) {
  kernels::cuda::DeviceError e;
  EXPECT_EQ(kernels::cuda::describeDeviceError(e), "");
  e.flag = 1;
  e.op = "embedding";
  e.what = "id";
  e.rank = 2;
  e.dims[0] = 4;
  e.dims[1] = 3;
  e.value = 9;
  e.position = 5;
  e.bound = 8;
  EXPECT_EQ(kernels::cuda::describeDeviceError(e),
            "embedding: id 9 at position [1, 2] is outside [0, 8)");
  e.rank = 0;
  e.position = 0;
  e.what = "label";
  e.op = "cross_entropy";
  e.value = -1;
  EXPECT_EQ(kernels::cuda::describeDeviceError(e),
            "cross_entropy: label -1 at position [] is outside [0, 8)");
  kernels::cuda::DeviceError d;
  d.flag = 2;
  d.op = "div";
  EXPECT_EQ(kernels::cuda::describeDeviceError(d),
            "div: integer division by zero");
}

INSTANTIATE_TEST_SUITE_P(All, CudaKernel, ::testing::ValuesIn(caseIndices()),
                         caseName);

/// Every kernel of the shared table has a CUDA implementation and cases.
TEST(CudaKernelTable, EveryKernelHasCases) {
  std::string why;
  if (!cudaDeviceAvailable(why))
    GTEST_SKIP() << why;
  for (const kernels::KernelInfo &k : kernels::allKernels()) {
    if (std::string(k.name) == "shard_offset")
      continue; // computed by the executor
    bool covered = false;
    for (const KernelCase &c : kernelCases())
      covered |= c.kernel == k.name;
    EXPECT_TRUE(covered) << "no CUDA kernel case for " << k.name;
  }
}

} // namespace
} // namespace dtc::test
