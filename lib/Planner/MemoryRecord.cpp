//===- MemoryRecord.cpp - the memory a plan's artifact needs --------------===//
//
// What the runtime's allocator will take for each program of an emitted
// artifact (dtc/artifact/MemoryPlan.h, with the CPU kernels' workspace for
// the threads each rank gets) and the `memory` record the artifact and
// the report carry. Beside Evaluate.cpp, which prices the same plan.
//
//===----------------------------------------------------------------------===//
#include "dtc/Planner/Evaluate.h"
#include "dtc/artifact/MemoryPlan.h"
#include "dtc/kernels/CpuKernels.h"

using json = nlohmann::json;

namespace mlir::dtc {

bool planMemory(const json &artifact, const std::string &label, int64_t devices,
                std::vector<::dtc::rt::MemoryNeed> &needs, int &threads,
                std::string &error) {
  // The kernels' per-thread workspace, for the threads each rank gets when
  // the whole mesh runs on this machine (what `dtc run` starts here).
  threads = ::dtc::rt::plannedKernelThreads(devices);
  return ::dtc::rt::artifactMemoryNeeds(artifact, label, threads,
                                        ::dtc::kernels::cpu::workspaceModel(),
                                        needs, error);
}

json memoryRecord(const std::vector<::dtc::rt::MemoryNeed> &needs,
                  uint64_t budget, int threads) {
  namespace rt = ::dtc::rt;
  const rt::MemoryNeed *largest = &needs.front();
  for (const rt::MemoryNeed &need : needs)
    if (need.peak > largest->peak)
      largest = &need;
  json byKind = json::object();
  for (int k = 0; k < rt::kNumMemKinds; ++k)
    byKind[rt::memKindName(k)] = largest->bytes[k];
  // Each program's own (pipeline stages differ), then the largest's.
  json perProgram = json::array();
  for (const rt::MemoryNeed &need : needs) {
    json kinds = json::object();
    for (int k = 0; k < rt::kNumMemKinds; ++k)
      kinds[rt::memKindName(k)] = need.bytes[k];
    perProgram.push_back({{"name", need.program},
                          {"peak_bytes", need.peak},
                          {"by_kind", kinds}});
  }
  return {{"budget_bytes", budget},
          {"peak_bytes", largest->peak},
          {"peak_by_kind", byKind},
          {"kernel_threads", threads},
          {"programs", std::move(perProgram)}};
}

} // namespace mlir::dtc
