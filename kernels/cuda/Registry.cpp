//===- Registry.cpp - name -> CUDA kernel, errors
//---------------------------===//
#include "CudaKernels.h"

#include <string>
#include <unordered_map>

namespace dtc::kernels::cuda {

Launch::~Launch() = default;

namespace {
/// A stateless kernel as a Launch.
class FunctionLaunch final : public Launch {
public:
  explicit FunctionLaunch(RunFn fn) : fn_(fn) {}
  void run(const KernelArgs &args, const Context &ctx) override {
    fn_(args, ctx);
  }

private:
  RunFn fn_;
};

const std::unordered_map<std::string, Entry> &table() {
  static const std::unordered_map<std::string, Entry> t = [] {
    std::unordered_map<std::string, Entry> m;
    for (const auto *list :
         {&elementwiseKernels(), &layoutKernels(), &gemmKernels(),
          &attentionKernels(), &normKernels(), &lossKernels(),
          &optimizerKernels(), &moeKernels()})
      for (const Entry &e : *list)
        m.emplace(e.name, e);
    return m;
  }();
  return t;
}
} // namespace

std::unique_ptr<Launch> bindKernel(std::string_view name,
                                   const KernelArgs &args, const Context &ctx) {
  auto it = table().find(std::string(name));
  if (it == table().end())
    return nullptr;
  if (it->second.bind)
    return it->second.bind(args, ctx);
  if (!it->second.run)
    return nullptr;
  return std::make_unique<FunctionLaunch>(it->second.run);
}

size_t workspaceBytes(std::string_view name, const KernelArgs &args) {
  auto it = table().find(std::string(name));
  if (it == table().end() || !it->second.workspace)
    return 0;
  return it->second.workspace(args);
}

std::vector<std::string> kernelNames() {
  std::vector<std::string> names;
  for (const auto &[name, entry] : table())
    names.push_back(name);
  return names;
}

std::string describeDeviceError(const DeviceError &e) {
  if (e.flag == 0)
    return "";
  const std::string op = e.op ? e.op : "kernel";
  if (e.flag == 2)
    return op + ": integer division by zero";
  std::string pos = "[";
  long long rest = e.position;
  std::vector<long long> idx(size_t(e.rank > 0 ? e.rank : 0));
  for (int d = e.rank - 1; d >= 0; --d) {
    const long long dim = e.dims[d] > 0 ? e.dims[d] : 1;
    idx[size_t(d)] = rest % dim;
    rest /= dim;
  }
  for (size_t d = 0; d < idx.size(); ++d)
    pos += (d ? ", " : "") + std::to_string(idx[d]);
  pos += "]";
  return op + ": " + (e.what ? e.what : "index") + " " +
         std::to_string(e.value) + " at position " + pos + " is outside [0, " +
         std::to_string(e.bound) + ")";
}

void check(cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    throw rt::Error(std::string(what) + ": " + cudaGetErrorString(status));
}

void checkLaunch(const char *kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw rt::Error(std::string("cuda kernel ") + kernel + ": " +
                    cudaGetErrorString(status));
}

std::string gemmLibrary() {
  const size_t v = cublasLtGetVersion();
  return "cuBLASLt " + std::to_string(v / 10000) + "." +
         std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

} // namespace dtc::kernels::cuda
