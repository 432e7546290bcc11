//===- Registry.cpp - the backends by name --------------------------------===//
//
// A new backend adds its factory to the Registry below under the CMake
// option that builds it; nothing else in the runtime names backends.
//
//===----------------------------------------------------------------------===//
#include "dtc/runtime/Backend.h"

#include "cpu/CpuBackend.h"
#include "null/NullBackend.h"
#if DTC_WITH_CUDA
#include "cuda/CudaBackend.h"
#endif

#include <mutex>

namespace dtc::rt {

namespace {
struct Registry {
  Registry() {
    factories.emplace_back("cpu", makeCpuBackend);
#if DTC_WITH_CUDA
    factories.emplace_back("cuda", makeCudaBackend);
#endif
    factories.emplace_back("null", makeNullBackend);
  }
  std::mutex mu;
  std::vector<std::pair<std::string, BackendFactory>> factories;
};

Registry &registry() {
  static Registry r;
  return r;
}

BackendFactory find(const std::string &name) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto &[n, f] : r.factories)
    if (n == name)
      return f;
  return nullptr;
}
} // namespace

void registerBackend(const std::string &name, BackendFactory factory) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto &[n, f] : r.factories)
    if (n == name) {
      f = std::move(factory);
      return;
    }
  r.factories.emplace_back(name, std::move(factory));
}

std::vector<std::string> backendNames() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (auto &entry : r.factories)
    names.push_back(entry.first);
  return names;
}

void checkBackendAvailable(const std::string &name) {
  if (find(name)) {
#if DTC_WITH_CUDA
    if (name == "cuda")
      checkCudaDevices();
#endif
    return;
  }
  if (name == "cuda")
    throw Error("this build of dtc has no CUDA backend yet; use --backend cpu");
  std::string known;
  for (const std::string &n : backendNames())
    known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown backend '" + name + "' (this build has: " + known + ")");
}

std::unique_ptr<Backend> makeBackend(const std::string &name,
                                     const BackendOptions &options) {
  checkBackendAvailable(name);
  return find(name)(options);
}

} // namespace dtc::rt
