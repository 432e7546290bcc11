//===- Parallel.h - the CPU kernels' threads (OpenMP) ------------*- C++
//-*-===//
//
// Every parallel loop of the CPU kernels splits work whose results do not
// depend on the split (independent rows, tiles or elements; per-element
// operations identical in vector bodies and tails), so a kernel gives the
// same bits with 1 thread or 64. Reductions across rows are summed in fixed
// chunks, in order, whatever the thread count.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_CPU_PARALLEL_H
#define DTC_KERNELS_CPU_PARALLEL_H

#include "dtc/kernels/CpuKernels.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <omp.h>

namespace dtc::kernels::cpu {

/// The call's context, or a single-threaded one of the calling thread.
KernelContext &contextOf(const KernelArgs &a);

/// Threads worth using for `n` units of work when each thread should get at
/// least `grain` of them.
inline int threadsFor(const KernelContext &c, int64_t n, int64_t grain) {
  if (omp_in_parallel())
    return 1;
  const int64_t useful = grain > 0 ? std::max<int64_t>(1, n / grain) : n;
  return int(std::min<int64_t>(c.threads(), std::max<int64_t>(1, useful)));
}

namespace detail {
/// Runs body() on `threads` OpenMP threads; the first exception thrown on
/// any of them is rethrown on the caller after all have finished.
template <class Body> void runTeam(int threads, Body &&body) {
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    try {
      body();
    } catch (...) {
#pragma omp critical(dtc_kernel_error)
      if (!error)
        error = std::current_exception();
    }
  }
  if (error)
    std::rethrow_exception(error);
}
} // namespace detail

/// f(begin, end, worker) over contiguous, near-equal ranges of [0, n);
/// worker is in [0, threads used).
template <class F>
void parallelFor(const KernelContext &c, int64_t n, int64_t grain, F &&f) {
  const int t = threadsFor(c, n, grain);
  if (t <= 1) {
    if (n > 0)
      f(int64_t(0), n, 0);
    return;
  }
  detail::runTeam(t, [&] {
    const int id = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t b = n * id / nt, e = n * (id + 1) / nt;
    if (b < e)
      f(b, e, id);
  });
}

/// f(task, worker) for every task in [0, n), handed out one at a time (for
/// tasks of uneven cost, like causal attention's row blocks).
template <class F>
void parallelTasks(const KernelContext &c, int64_t n, F &&f) {
  const int t = threadsFor(c, n, 1);
  if (t <= 1) {
    for (int64_t i = 0; i < n; ++i)
      f(i, 0);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel num_threads(t)
  {
    const int id = omp_get_thread_num();
    // Catch per task: leaving a worksharing loop early would strand the
    // other threads at its barrier.
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) {
      try {
        f(i, id);
      } catch (...) {
#pragma omp critical(dtc_kernel_error)
        if (!error)
          error = std::current_exception();
      }
    }
  }
  if (error)
    std::rethrow_exception(error);
}

/// Threads parallelTasks / parallelFor would use: workspace slices to set up.
inline int workersFor(const KernelContext &c, int64_t n, int64_t grain = 1) {
  return threadsFor(c, n, grain);
}

} // namespace dtc::kernels::cpu

#endif // DTC_KERNELS_CPU_PARALLEL_H
