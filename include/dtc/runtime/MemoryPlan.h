//===- MemoryPlan.h - the runtime's view of the memory plan -----*- C++ -*-===//
//
// The memory plan of include/dtc/artifact/MemoryPlan.h for the CPU backend's
// kernels (kernels::cpu::workspaceModel()), with dtc::rt::Error for the
// runtime's refusal to start.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_MEMORYPLAN_H
#define DTC_RUNTIME_MEMORYPLAN_H

#include "dtc/artifact/MemoryPlan.h"
#include "dtc/kernels/CpuKernels.h"

namespace dtc::rt {

/// The need of every program of a validated artifact on the CPU backend,
/// kernels on `threads` threads.
inline std::vector<MemoryNeed> memoryNeeds(const Artifact &a, int threads) {
  return artifact::memoryNeeds(a, threads, kernels::cpu::workspaceModel());
}

/// Throws unless `ranksOnNode` ranks of the largest program, with kernels on
/// `threads` threads each, fit in this node's available memory; the message
/// gives the numbers.
inline void checkMemoryFits(const Artifact &a, int ranksOnNode, int threads) {
  std::string error;
  if (!artifact::checkMemoryFits(a, ranksOnNode, threads,
                                 kernels::cpu::workspaceModel(), error))
    throw Error(error);
}

} // namespace dtc::rt

#endif // DTC_RUNTIME_MEMORYPLAN_H
