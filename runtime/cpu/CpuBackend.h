//===- CpuBackend.h - the CPU backend ----------------------------*- C++
//-*-===//
//
// Host memory (64-byte aligned), the kernels of kernels/cpu with a kernel
// context per rank (threads, workspace), one synchronous stream (a kernel or
// collective has finished when its enqueue returns; events are timestamps of
// the steady clock), and the collectives of the host Communicator itself
// (dtc's ring algorithms over MPI or threads; every byte counted there).
//
// Internal to the runtime: throws dtc::rt::Error.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CPU_CPUBACKEND_H
#define DTC_RUNTIME_CPU_CPUBACKEND_H

#include "dtc/runtime/Backend.h"

#include <memory>

namespace dtc::rt {

std::unique_ptr<Backend> makeCpuBackend(const BackendOptions &options);

} // namespace dtc::rt

#endif // DTC_RUNTIME_CPU_CPUBACKEND_H
