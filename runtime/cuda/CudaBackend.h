//===- CudaBackend.h - the CUDA backend ---------------------------*- C++
//-*-===//
//
// Kernels on one GPU per rank (kernels/cuda: cuBLASLt products and CUDA C++
// kernels), a compute and a communication stream with CUDA events between
// them, and collectives on NCCL (one communicator per artifact
// communicator, its id broadcast over the host group) or, as a test mode
// for several ranks on one GPU, staged through host memory and the host
// communicator (BackendOptions::collectives = "mpi"). docs/backends.md
// "The CUDA backend".
//
// Built when CMake finds the CUDA toolkit and NCCL (DTC_WITH_CUDA); the
// factory throws dtc::rt::Error on a machine without a usable GPU.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_CUDA_CUDABACKEND_H
#define DTC_RUNTIME_CUDA_CUDABACKEND_H

#include "dtc/runtime/Backend.h"

namespace dtc::rt {

std::unique_ptr<Backend> makeCudaBackend(const BackendOptions &options);
/// Throws Error unless this machine has a GPU the CUDA runtime can use
/// (without creating a context on it): what --backend cuda checks before
/// starting ranks.
void checkCudaDevices();

} // namespace dtc::rt

#endif // DTC_RUNTIME_CUDA_CUDABACKEND_H
