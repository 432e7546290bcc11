//===- HostDevice.h - functions compiled for the host and the device -*- C++
//-*-===//
//
// DTC_HOST_DEVICE marks plain functions the CPU kernels and the CUDA kernels
// share (the learning-rate schedule, ring attention's block positions).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_KERNELS_HOSTDEVICE_H
#define DTC_KERNELS_HOSTDEVICE_H

#if defined(__CUDACC__)
#define DTC_HOST_DEVICE __host__ __device__
#else
#define DTC_HOST_DEVICE
#endif

#endif // DTC_KERNELS_HOSTDEVICE_H
