//===- Kernel.h - the kernel interface shared by all backends ----*- C++ -*-===//
//
// docs/kernels.md lists every kernel. For each one this library (`dtc_kernels`,
// backend independent) holds its check rule: the dtypes, LOCAL shapes and
// attributes it accepts. The runtime applies the rule to every instruction at
// load time, so a violation is a load error and never a crash at run time.
// A backend (kernels/cpu today, kernels/cuda later) supplies a RunFn per name.
//
// Internal to the runtime: functions here may throw dtc::rt::Error.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_KERNEL_H
#define DTC_KERNELS_KERNEL_H

#include "dtc/runtime/Types.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace dtc::kernels {

using rt::DType;
using rt::Shape;

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
/// already accepted by the kernel's check rule.
struct KernelArgs {
  std::vector<TensorArg> in, out;
  const nlohmann::json *attrs = nullptr;
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
};

/// Host scratch memory one call of kernel `name` takes through ScratchVector
/// (its CPU implementation's temporaries), from the operands' LOCAL shapes;
/// 0 for kernels that need none. The compiler plans it as workspace and the
/// executor measures it, so the two can be compared. Operands must have
/// passed the kernel's check rule.
uint64_t scratchBytes(std::string_view name, const std::vector<TensorDesc> &in,
                      const std::vector<TensorDesc> &out, const nlohmann::json &attrs);

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
    if (ScratchCounter *c = threadScratchCounter()) c->allocated(n * sizeof(T));
    return p;
  }
  void deallocate(T *p, size_t n) {
    if (ScratchCounter *c = threadScratchCounter()) c->released(n * sizeof(T));
    std::allocator<T>().deallocate(p, n);
  }
  template <class U> bool operator==(const ScratchAllocator<U> &) const { return true; }
  template <class U> bool operator!=(const ScratchAllocator<U> &) const { return false; }
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

} // namespace dtc::kernels

namespace dtc::kernels::cpu {
/// The CPU implementation of kernel `name`, or nullptr.
RunFn findKernel(std::string_view name);
/// Sets the OpenBLAS thread count (no-op if OpenBLAS is not the BLAS).
void setBlasThreads(int threads);
} // namespace dtc::kernels::cpu

#endif // DTC_KERNELS_KERNEL_H
