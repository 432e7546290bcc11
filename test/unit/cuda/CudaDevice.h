//===- CudaDevice.h - whether the CUDA tests can run -------------*- C++
//-*-===//
#ifndef DTC_TEST_CUDA_CUDADEVICE_H
#define DTC_TEST_CUDA_CUDADEVICE_H

#include "dtc/runtime/Backend.h"

#include <string>

namespace dtc::test {

/// Whether the CUDA backend can start here; else `why` is its error (no
/// device, no driver), which the skipped tests print.
inline bool cudaDeviceAvailable(std::string &why) {
  static std::string reason;
  static const bool ok = [] {
    try {
      rt::makeBackend("cuda", rt::BackendOptions{});
      return true;
    } catch (const std::exception &e) {
      reason = e.what();
      return false;
    }
  }();
  why = reason;
  return ok;
}

} // namespace dtc::test

#endif // DTC_TEST_CUDA_CUDADEVICE_H
