//===- WorkspaceModel.h - a backend's memory beside the slots ---*- C++ -*-===//
//
// The memory plan (MemoryPlan.h) counts what every backend allocates the
// same way (slots, micro-batch copies, collective staging) and asks the
// backend for what only it knows: how much memory its kernels take beside
// their operands. The CPU backend's answers are kernels::cpu::workspaceModel()
// (include/dtc/kernels/CpuKernels.h); a backend states its own so the
// compiler's budget check and the runtime's memory check plan for it.
//
// Operands are LOCAL shapes that passed the kernel's check rule. Plain
// C++17, MLIR-free.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_ARTIFACT_WORKSPACEMODEL_H
#define DTC_ARTIFACT_WORKSPACEMODEL_H

#include "dtc/kernels/Kernel.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace dtc::artifact {

class WorkspaceModel {
public:
  virtual ~WorkspaceModel() = default;
  /// Bytes of the per-rank kernel context one call of kernel `name` takes
  /// when the rank runs kernels on `threads` threads (the backend keeps the
  /// largest any call takes, for the whole run).
  virtual uint64_t contextBytes(std::string_view name,
                                const std::vector<kernels::TensorDesc> &in,
                                const std::vector<kernels::TensorDesc> &out,
                                const nlohmann::json &attrs,
                                int threads) const = 0;
  /// Bytes of the conversion copies one call of kernel `name` takes (the
  /// backend keeps one conversion scratch, as large as the largest).
  virtual uint64_t
  conversionBytes(std::string_view name,
                  const std::vector<kernels::TensorDesc> &in,
                  const std::vector<kernels::TensorDesc> &out) const = 0;
  /// Temporaries one call of kernel `name` holds while it runs (freed when
  /// it returns).
  virtual uint64_t scratchBytes(std::string_view name,
                                const std::vector<kernels::TensorDesc> &in,
                                const std::vector<kernels::TensorDesc> &out,
                                const nlohmann::json &attrs,
                                int threads) const = 0;
};

} // namespace dtc::artifact

namespace dtc::rt {
using namespace ::dtc::artifact;
} // namespace dtc::rt

#endif // DTC_ARTIFACT_WORKSPACEMODEL_H
