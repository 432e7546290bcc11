//===- Safetensors.h - read and write .safetensors files ---------*- C++ -*-===//
//
// Format: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
//  "__metadata__": {"key": "value"}}, then the data; offsets are relative to
// the start of the data and must tile it exactly.
//
// Internal to the runtime: throws dtc::rt::Error("PATH: what is wrong").
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_SAFETENSORS_H
#define DTC_RUNTIME_SAFETENSORS_H

#include "dtc/runtime/Types.h"

#include <map>
#include <string>
#include <vector>

namespace dtc::rt {

/// "F32", "I32", "I64".
const char *safetensorsDtype(DType d);

struct SafetensorsEntry {
  std::string name;
  std::string dtypeName; ///< as written ("F32", "BF16", ...)
  bool supported = false; ///< dtype is F32, I32 or I64
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0, end = 0; ///< relative to the data section
};

/// A validated, memory-mapped safetensors file.
class SafetensorsReader {
public:
  explicit SafetensorsReader(const std::string &path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader &) = delete;
  SafetensorsReader &operator=(const SafetensorsReader &) = delete;

  const std::string &path() const { return path_; }
  const std::map<std::string, std::string> &metadata() const { return meta_; }
  const std::vector<SafetensorsEntry> &entries() const { return entries_; }
  const SafetensorsEntry *find(const std::string &name) const;
  const char *data(const SafetensorsEntry &e) const { return base_ + dataStart_ + e.begin; }

private:
  std::string path_;
  const char *base_ = nullptr;
  size_t size_ = 0, dataStart_ = 0;
  std::map<std::string, std::string> meta_;
  std::vector<SafetensorsEntry> entries_;
};

struct SafetensorsTensor {
  std::string name;
  DType dtype;
  Shape shape;
  const void *data; ///< numel(shape) * dtypeSize(dtype) bytes
};

/// Writes the file atomically (temp file + fsync + rename + fsync dir): on
/// any failure the previous file is untouched and no temporary remains.
void writeSafetensors(const std::string &path, const std::vector<SafetensorsTensor> &tensors,
                      const std::map<std::string, std::string> &metadata);

} // namespace dtc::rt

#endif // DTC_RUNTIME_SAFETENSORS_H
