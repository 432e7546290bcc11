//===- Kernel.h - the kernel interface shared by all backends ----*- C++
//-*-===//
//
// docs/kernels.md lists every kernel. For each one this library (`dtc_kernels`,
// backend independent, MLIR-free) holds its check rule: the dtypes, shapes
// and attributes it accepts. It is the one statement of those rules: the
// runtime applies it to every instruction at load time (LOCAL shapes), so a
// violation is a load error and never a crash at run time, and the dtc
// dialect's verifier applies it to every dtc op (KernelRuleOpInterface), so
// the compiler can never build an op the runtime would refuse.
// A backend (runtime/Backend.h; kernels/cpu today) supplies an implementation
// per name.
//
// Internal to the runtime: functions here may throw dtc::rt::Error.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_KERNEL_H
#define DTC_KERNELS_KERNEL_H

#include "dtc/artifact/Types.h"
#include "dtc/kernels/CostClass.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtc::kernels {

using rt::DType;
using rt::Shape;

/// What the CPU backend gives every kernel call besides its operands: how
/// many threads the kernel may use and scratch memory for its tiles. One
/// context per rank (the backend owns it); kernels read nothing else global,
/// so two ranks in one process (threads) each run with their own.
class KernelContext {
public:
  explicit KernelContext(int threads = 1) { setThreads(threads); }
  int threads() const { return threads_; }
  void setThreads(int threads) { threads_ = threads < 1 ? 1 : threads; }
  /// At least `floats` floats, 64-byte aligned, kept and reused across calls
  /// (grows only). Valid until the next workspace() call on this context:
  /// take it before a kernel's parallel region and slice it per thread.
  float *workspace(size_t floats);
  /// Floats the workspace holds now (its high-water mark).
  size_t workspaceFloats() const { return workspaceFloats_; }

private:
  struct FreeAligned {
    void operator()(float *p) const;
  };
  int threads_ = 1;
  size_t workspaceFloats_ = 0;
  std::unique_ptr<float, FreeAligned> workspace_;
};

/// What a check rule sees of one operand.
struct TensorDesc {
  DType dtype;
  Shape shape;
};

/// One operand at run time: dtype, LOCAL shape and the bytes.
struct TensorArg {
  DType dtype = DType::F32;
  Shape shape;
  void *data = nullptr;
  int64_t numel = 0;
  template <class T> T *as() const { return static_cast<T *>(data); }
};

/// Everything a kernel gets. `attrs` is the instruction's attribute object,
/// already accepted by the kernel's check rule. `ctx` may be null (a
/// single-threaded context of the calling thread is used then).
struct KernelArgs {
  std::vector<TensorArg> in, out;
  const nlohmann::json *attrs = nullptr;
  KernelContext *ctx = nullptr;
};

/// A check rule: throws dtc::rt::Error with a message such as "axis 3 is out
/// of range for a rank-2 input" when the operands or attributes are not
/// accepted. Operand counts are checked before the rule runs.
using CheckFn = void (*)(const std::vector<TensorDesc> &in,
                         const std::vector<TensorDesc> &out,
                         const nlohmann::json &attrs);

/// A backend's implementation. Throws dtc::rt::Error for a data-dependent
/// run-time error (an id out of range); never for anything a check rule
/// could have caught.
using RunFn = void (*)(const KernelArgs &args);

struct KernelInfo {
  const char *name;
  int numIn;
  int numOut;
  /// (out index, in index) pairs that may name the same buffer ("in place ok").
  std::vector<std::pair<int, int>> inPlace;
  CheckFn check;
  /// Inputs that may follow the `numIn` required ones (optional operands).
  int numOptionalIn = 0;
  CostClass cost = CostClass::Stream;
};

/// The one entry point to a kernel's rule for every caller: the runtime's
/// loader (per artifact instruction) and the dtc dialect's verifier (per op,
/// include/dtc/Dialect/KernelRule.h). Checks the operand counts, then runs
/// `kernel.check`. Returns "" when accepted, else the rule's message. Never
/// throws, so code built without exceptions (MLIR's) may call it.
std::string checkRule(const KernelInfo &kernel,
                      const std::vector<TensorDesc> &in,
                      const std::vector<TensorDesc> &out,
                      const nlohmann::json &attrs) noexcept;
/// Host memory one call of kernel `name` holds in ScratchVector (its CPU
/// implementation's temporaries, e.g. the norms' per-chunk partial sums),
/// from the operands' LOCAL shapes, when the rank's KernelContext has
/// `threads` threads; 0 for kernels that need none. The compiler plans it
/// (with kernels::cpu::contextWorkspaceBytes, what the context keeps) as
/// workspace and the executor measures both, so the two can be compared.
/// Operands must have passed the kernel's check rule. Not counted: index
/// vectors of O(rank) elements (shapes and strides).
/// Whether the CPU matmul computes the single product `op(a) b` (a
/// transposed, b not) as its transpose `b^T a` into scratch and transposes
/// that back: oneDNN's sgemm is much slower on a^T b with M >> N (a weight
/// gradient x^T dy whose output has more rows than columns) than on the
/// swapped product (docs/kernels.md); products of at most 4M elements.
/// Shared by the kernel and scratchBytes.
bool matmulComputesTransposed(bool transposeA, bool transposeB,
                              int64_t products, int64_t M, int64_t N);

uint64_t scratchBytes(std::string_view name, const std::vector<TensorDesc> &in,
                      const std::vector<TensorDesc> &out,
                      const nlohmann::json &attrs, int threads);

/// Receives the scratch allocations of the thread it is installed on (the
/// executor installs its counting allocator around every instruction).
class ScratchCounter {
public:
  virtual ~ScratchCounter() = default;
  virtual void allocated(size_t bytes) = 0;
  virtual void released(size_t bytes) = 0;
};
/// Installs `counter` for this thread (nullptr: count nothing); returns the
/// previous one.
ScratchCounter *setThreadScratchCounter(ScratchCounter *counter);
ScratchCounter *threadScratchCounter();

/// std::allocator that reports to this thread's ScratchCounter: kernels and
/// collectives hold their temporaries in ScratchVector.
template <class T> struct ScratchAllocator {
  using value_type = T;
  ScratchAllocator() = default;
  template <class U> ScratchAllocator(const ScratchAllocator<U> &) {}
  T *allocate(size_t n) {
    T *p = std::allocator<T>().allocate(n);
    if (ScratchCounter *c = threadScratchCounter())
      c->allocated(n * sizeof(T));
    return p;
  }
  void deallocate(T *p, size_t n) {
    if (ScratchCounter *c = threadScratchCounter())
      c->released(n * sizeof(T));
    std::allocator<T>().deallocate(p, n);
  }
  template <class U> bool operator==(const ScratchAllocator<U> &) const {
    return true;
  }
  template <class U> bool operator!=(const ScratchAllocator<U> &) const {
    return false;
  }
};
template <class T> using ScratchVector = std::vector<T, ScratchAllocator<T>>;

/// The kernel named `name` (without the "dtc." prefix), or nullptr.
const KernelInfo *findKernel(std::string_view name);
/// Every kernel of docs/kernels.md, in the order of that page.
const std::vector<KernelInfo> &allKernels();

/// numpy broadcast of two shapes (aligned on the right). Returns false if
/// they do not broadcast.
bool broadcastShapes(const Shape &a, const Shape &b, Shape &out);
/// Whether `from` broadcasts to exactly `to`.
bool broadcastsTo(const Shape &from, const Shape &to);

// Attribute access for kernels (the check rule has validated presence/type).
int64_t attrInt(const nlohmann::json &attrs, const char *key);
double attrNum(const nlohmann::json &attrs, const char *key);
bool attrBool(const nlohmann::json &attrs, const char *key);
/// An optional boolean attribute (already checked), false when absent.
bool attrFlag(const nlohmann::json &attrs, const char *key);
std::vector<int64_t> attrInts(const nlohmann::json &attrs, const char *key);
/// An optional integer attribute (already checked), `otherwise` when absent.
int64_t attrIntOr(const nlohmann::json &attrs, const char *key,
                  int64_t otherwise);

/// Floating-point operations of one call of kernel `name` with these LOCAL
/// operands: 2 per multiply-add of matmul, attention and attention_grad (the
/// products a blocked causal kernel computes: the unmasked half plus the
/// diagonal), 0 for kernels whose cost is memory traffic. Used for GFLOP/s
/// in `--stats`.
double flopCount(std::string_view name, const std::vector<TensorDesc> &in,
                 const std::vector<TensorDesc> &out,
                 const nlohmann::json &attrs);

} // namespace dtc::kernels

#endif // DTC_KERNELS_KERNEL_H
