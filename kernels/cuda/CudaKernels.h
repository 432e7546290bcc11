//===- CudaKernels.h - the CUDA kernels' host interface -----------*- C++
//-*-===//
//
// The CUDA implementations of docs/kernels.md, for the CUDA backend
// (runtime/cuda). Plain C++ with CUDA's runtime API types: the backend's
// .cpp files include it, the kernels' .cu files implement it.
//
// A kernel is bound once per artifact instruction (operand dtypes, LOCAL
// shapes and attributes never change afterwards, and the kernel's check
// rule has accepted them) and then launched any number of times with the
// operands' current device addresses on a stream. Binding may plan (a
// cuBLASLt descriptor and algorithm); launching only enqueues work and
// never synchronises.
//
// Data-dependent errors (an id out of range, an integer division by zero)
// cannot be thrown from the device: the kernel records the first one in the
// context's DeviceError (host-mapped memory) and the backend turns it into
// a dtc::rt::Error when it synchronises (describeDeviceError).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_CUDA_CUDAKERNELS_H
#define DTC_KERNELS_CUDA_CUDAKERNELS_H

#include "dtc/artifact/Vocabulary.h"
#include "dtc/kernels/Kernel.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dtc::kernels::cuda {

/// The first data-dependent error of the kernels since the last reset,
/// written by the device (mapped pinned memory), read by the host after a
/// synchronisation. `flag` is set last-writer-free with atomicCAS.
struct DeviceError {
  int flag =
      0; ///< 0: none; 1: an index out of range; 2: integer division by zero
  int rank = 0; ///< of the index tensor, for the position's multi-index
  long long value = 0, position = 0, bound = 0;
  long long dims[8] = {};
  const char *op = nullptr;   ///< the kernel's name (a host string literal)
  const char *what = nullptr; ///< "id" or "label"
};
/// The CPU kernels' message for the same error ("embedding: id 9 at
/// position [0, 3] is outside [0, 8)"), or "" when `e.flag` is 0.
std::string describeDeviceError(const DeviceError &e);

/// What every launch gets besides its operands: one per rank (the backend
/// owns it).
struct Context {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  /// Device memory for the temporaries of the kernel being launched (at
  /// least what its Entry::workspace asked for at bind time; cuBLASLt's
  /// workspace for the products). Shared by all kernels of the rank: they
  /// run one after another on one stream. Read it at launch, not at bind
  /// (it moves when a later bind needs more).
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  /// Device-visible address of the backend's DeviceError.
  DeviceError *error = nullptr;
  int smCount = 1;
  int computeCapability = 80; ///< major * 10 + minor
};

/// One kernel bound to one instruction.
class Launch {
public:
  virtual ~Launch();
  /// Enqueues the kernel on ctx.stream with the operands of `args`.
  virtual void run(const KernelArgs &args, const Context &ctx) = 0;
};

/// Stateless kernels: one function per kernel.
using RunFn = void (*)(const KernelArgs &args, const Context &ctx);
/// Kernels that plan at bind time.
using BindFn = std::unique_ptr<Launch> (*)(const KernelArgs &args,
                                           const Context &ctx);
/// Bytes of Context::workspace one launch needs with these operands.
using WorkspaceFn = size_t (*)(const KernelArgs &args);
struct Entry {
  const char *name;
  RunFn run = nullptr;
  BindFn bind = nullptr;           ///< used instead of `run` when set
  WorkspaceFn workspace = nullptr; ///< none needed when null
};

// Per-file tables (kernels/cuda/*.cu).
const std::vector<Entry> &elementwiseKernels();
const std::vector<Entry> &layoutKernels();
const std::vector<Entry> &gemmKernels();
const std::vector<Entry> &attentionKernels();
const std::vector<Entry> &normKernels();
const std::vector<Entry> &lossKernels();
const std::vector<Entry> &optimizerKernels();
const std::vector<Entry> &moeKernels();

/// Kernel `name` bound to `args` (operands already accepted by the check
/// rule), or nullptr when the CUDA table has none.
std::unique_ptr<Launch> bindKernel(std::string_view name,
                                   const KernelArgs &args, const Context &ctx);
/// Bytes of workspace kernel `name` needs for `args` (0 when none).
size_t workspaceBytes(std::string_view name, const KernelArgs &args);
/// Every kernel name the CUDA table has.
std::vector<std::string> kernelNames();

/// Throws dtc::rt::Error naming `what` when `status` is not cudaSuccess.
void check(cudaError_t status, const char *what);
/// The same for the launch just made (cudaGetLastError).
void checkLaunch(const char *kernel);
/// cuBLASLt's version as "cuBLASLt 13.0.2".
std::string gemmLibrary();
/// out = in[0] op ... op in[members - 1], elementwise over `count` elements
/// of `dtype`, on `stream` (an all-reduce whose members' buffers are all on
/// this device; `out` may not be an input). At most 16 members.
void reduceBuffers(const void *const *in, int members, void *out,
                   long long count, DType dtype, rt::ReduceOp op,
                   cudaStream_t stream);
/// A bound matmul's plans ("...; fast BIAS ...; safe DEFAULT ..."): the
/// cuBLASLt epilogue each took; "" for other kernels.
std::string gemmPlanSummary(const Launch &launch);

} // namespace dtc::kernels::cuda

#endif // DTC_KERNELS_CUDA_CUDAKERNELS_H
