//===- CpuKernels.h - the CPU backend's kernels ------------------*- C++
//-*-===//
//
// The CPU implementations of docs/kernels.md (kernels/cpu, library
// dtc_kernels_cpu: oneDNN or OpenBLAS, OpenMP) and the formulas of the
// memory they take (dtc_kernels_cpu_model: plain C++, what the compiler's
// memory plan links).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_CPUKERNELS_H
#define DTC_KERNELS_CPUKERNELS_H

#include "dtc/artifact/WorkspaceModel.h"
#include "dtc/kernels/Kernel.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace dtc::kernels::cpu {
/// The CPU implementation of kernel `name`, or nullptr.
RunFn findKernel(std::string_view name);
/// The matrix library the CPU matmuls run on, with its version.
const char *gemmLibrary();
/// The CPU backend's memory beside the slots, for the memory plan
/// (include/dtc/artifact/MemoryPlan.h): contextWorkspaceBytes,
/// lowPrecisionCopyBytes and kernels::scratchBytes. Formulas only: this part
/// (library dtc_kernels_cpu_model) needs neither oneDNN nor OpenMP, so the
/// compiler links it without the kernels.
const artifact::WorkspaceModel &workspaceModel();
/// Bytes of KernelContext::workspace() one call of kernel `name` takes with
/// these LOCAL operands and `threads` threads (the fused attention's
/// per-thread tiles; 0 for the others), as the context allocates them
/// (rounded up to 64 bytes). The CPU backend reserves the largest when it
/// binds the kernels; plans count it as workspace.
uint64_t contextWorkspaceBytes(std::string_view name,
                               const std::vector<TensorDesc> &in,
                               const std::vector<TensorDesc> &out,
                               const nlohmann::json &attrs, int threads);
/// Makes the calling thread's later kernel calls use `ctx.threads()` in the
/// matrix library and OpenMP (call once per rank thread before running).
void bindThreads(const KernelContext &ctx);

/// dst = the f32 values of `n` elements of dtype `from` (f32, bf16 or f16).
void toF32(const KernelContext &ctx, DType from, const void *src, float *dst,
           int64_t n);
/// dst (dtype `to`: f32, bf16 or f16) = src rounded to nearest even.
void fromF32(const KernelContext &ctx, DType to, const float *src, void *dst,
             int64_t n);
/// Whether kernel `name` handles bf16/f16 operands itself (moves or converts
/// their bits); every other float kernel gets them converted to f32 by the
/// executor and its f32 results rounded back.
bool handlesLowPrecision(std::string_view name);
/// Bytes of one f32 copy of `numel` elements as the CPU backend lays its
/// conversion copies out (64-byte aligned, one after another).
uint64_t f32CopyBytes(int64_t numel);
/// Bytes of the f32 copies kernel `name` needs of its bf16/f16 operands
/// (0 when it handles them itself): what the CPU backend's conversion
/// scratch holds while the kernel runs, and what the memory plan counts.
uint64_t lowPrecisionCopyBytes(std::string_view name,
                               const std::vector<TensorDesc> &in,
                               const std::vector<TensorDesc> &out);

} // namespace dtc::kernels::cpu

#endif // DTC_KERNELS_CPUKERNELS_H
