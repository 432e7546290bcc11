//===- KernelEval.cpp - run CPU kernels on operands given as JSON --------===//
//
//   dtc-kernel-eval CASES.json RESULTS.json [THREADS [BACKEND]]
//
// The float64 reference (test/reference) checks every CPU kernel through
// this tool: CASES.json is an array of
//   {"kernel": "softmax", "attrs": {"axis": 1},
//    "in":  [{"dtype": "f32", "shape": [3, 5], "data": "<base64>"}, ...],
//    "out": [{"dtype": "f32", "shape": [3, 5]}, ...]}
// (data: little-endian elements, standard base64). RESULTS.json is an array
// with, per case, {"out": ["<base64>", ...]} or {"error": "..."} when the
// kernel's check rule refuses the operands or the kernel reports a run-time
// error. Output buffers start filled with NaN bytes so that an element a
// kernel forgets to write shows up. Kernels run with THREADS threads
// (default 1). BACKEND (default cpu, the kernels called directly) runs them
// through that runtime backend instead (`cuda`: operands copied to the GPU,
// the CUDA kernel bound and enqueued, results copied back), so the float64
// reference checks a device backend's kernels the same way.
//
//===----------------------------------------------------------------------===//
#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/kernels/CpuKernels.h"
#include "dtc/runtime/Backend.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using json = nlohmann::json;
using namespace dtc;

namespace {

/// Runs `args` (host operands) through `backend`: device copies of every
/// operand, the bound kernel, the outputs copied back into args.out.
void runOnBackend(rt::Backend &backend, const std::string &name,
                  kernels::KernelArgs &args) {
  kernels::KernelArgs dev = args;
  std::vector<void *> buffers;
  rt::Stream &stream = backend.computeStream();
  auto place = [&](kernels::TensorArg &t) {
    const size_t bytes = size_t(t.numel) * rt::dtypeSize(t.dtype);
    void *p = backend.allocate((bytes + 63) / 64 * 64 + 64);
    buffers.push_back(p);
    if (bytes)
      backend.copyFromHost(p, t.data, bytes, stream);
    t.data = p;
  };
  try {
    for (kernels::TensorArg &t : dev.in)
      place(t);
    for (kernels::TensorArg &t : dev.out)
      place(t); // poisoned like the host outputs
    std::unique_ptr<rt::BoundKernel> k = backend.bindKernel(name, dev);
    if (!k)
      throw rt::Error("kernel '" + name + "' has no " + backend.name() +
                      " implementation");
    k->enqueue(dev, stream);
    backend.synchronize();
    for (size_t i = 0; i < dev.out.size(); ++i) {
      const size_t bytes =
          size_t(dev.out[i].numel) * rt::dtypeSize(dev.out[i].dtype);
      if (bytes)
        backend.copyToHost(args.out[i].data, dev.out[i].data, bytes, stream);
    }
  } catch (...) {
    for (void *p : buffers)
      backend.deallocate(p);
    throw;
  }
  for (void *p : buffers)
    backend.deallocate(p);
}

json runCase(const json &c, kernels::KernelContext &ctx, rt::Backend *backend) {
  const std::string name = c.at("kernel").get<std::string>();
  const kernels::KernelInfo *info = kernels::findKernel(name);
  kernels::RunFn run = kernels::cpu::findKernel(name);
  if (!info || !run)
    return {{"error", "unknown kernel " + name}};
  const json attrs = c.value("attrs", json::object());
  std::vector<std::string> inBytes, outBytes;
  std::vector<kernels::TensorDesc> inDesc, outDesc;
  for (const json &t : c.at("in")) {
    kernels::TensorDesc d;
    if (!rt::parseDType(t.at("dtype").get<std::string>(), d.dtype))
      return {{"error", "bad dtype"}};
    d.shape = t.at("shape").get<rt::Shape>();
    std::string bytes;
    if (!rt::base64Decode(t.at("data").get<std::string>(), bytes) ||
        bytes.size() != size_t(rt::numel(d.shape)) * rt::dtypeSize(d.dtype))
      return {{"error", "input data does not match its dtype and shape"}};
    inDesc.push_back(d);
    inBytes.push_back(std::move(bytes));
  }
  for (const json &t : c.at("out")) {
    kernels::TensorDesc d;
    if (!rt::parseDType(t.at("dtype").get<std::string>(), d.dtype))
      return {{"error", "bad dtype"}};
    d.shape = t.at("shape").get<rt::Shape>();
    outDesc.push_back(d);
    // 0xff bytes: a NaN for f32, -1 for integers.
    outBytes.emplace_back(size_t(rt::numel(d.shape)) * rt::dtypeSize(d.dtype),
                          char(0xff));
  }
  if (int(inDesc.size()) < info->numIn ||
      int(inDesc.size()) > info->numIn + info->numOptionalIn ||
      int(outDesc.size()) != info->numOut)
    return {{"error", "operand count"}};
  try {
    info->check(inDesc, outDesc, attrs);
    kernels::KernelArgs args;
    args.attrs = &attrs;
    args.ctx = &ctx;
    for (size_t i = 0; i < inDesc.size(); ++i)
      args.in.push_back({inDesc[i].dtype, inDesc[i].shape, inBytes[i].data(),
                         rt::numel(inDesc[i].shape)});
    for (size_t i = 0; i < outDesc.size(); ++i)
      args.out.push_back({outDesc[i].dtype, outDesc[i].shape,
                          outBytes[i].data(), rt::numel(outDesc[i].shape)});
    if (backend)
      runOnBackend(*backend, name, args);
    else
      run(args);
  } catch (const std::exception &e) {
    return {{"error", e.what()}};
  }
  json outs = json::array();
  for (const std::string &b : outBytes)
    outs.push_back(rt::base64Encode(b));
  return {{"out", outs}};
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3 || argc > 5) {
    std::fprintf(
        stderr,
        "usage: dtc-kernel-eval CASES.json RESULTS.json [THREADS [BACKEND]]\n");
    return 2;
  }
  kernels::KernelContext ctx(argc >= 4 ? std::atoi(argv[3]) : 1);
  kernels::cpu::bindThreads(ctx);
  try {
    std::unique_ptr<rt::Backend> backend;
    if (argc == 5 && std::string(argv[4]) != "cpu") {
      rt::BackendOptions options;
      options.threads = ctx.threads();
      backend = rt::makeBackend(argv[4], options);
      backend->attachThread();
    }
    std::ifstream in(argv[1]);
    if (!in) {
      std::fprintf(stderr, "dtc-kernel-eval: cannot read %s\n", argv[1]);
      return 1;
    }
    json cases = json::parse(in);
    json results = json::array();
    for (const json &c : cases)
      results.push_back(runCase(c, ctx, backend.get()));
    std::ofstream out(argv[2]);
    out << results.dump();
    if (!out) {
      std::fprintf(stderr, "dtc-kernel-eval: cannot write %s\n", argv[2]);
      return 1;
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dtc-kernel-eval: %s\n", e.what());
    return 1;
  }
  return 0;
}
