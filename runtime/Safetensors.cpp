//===- Safetensors.cpp -------------------------------------------------------===//
#include "dtc/runtime/Safetensors.h"
#include "dtc/runtime/ArtifactFormat.h"
#include "dtc/runtime/AtomicFile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dtc::rt {

using json = nlohmann::json;

const char *safetensorsDtype(DType d) {
  switch (d) {
  case DType::F32: return "F32";
  case DType::I32: return "I32";
  case DType::I64: return "I64";
  }
  return "?";
}

static bool knownDtype(const std::string &s, size_t &bytes) {
  static const std::pair<const char *, size_t> table[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const auto &e : table)
    if (s == e.first) {
      bytes = e.second;
      return true;
    }
  return false;
}

SafetensorsReader::SafetensorsReader(const std::string &path) : path_(path) {
  auto fail = [&](const std::string &msg) -> void { throw Error(path_ + ": " + msg); };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("not a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void *m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      fail(std::string("cannot map: ") + std::strerror(errno));
    }
    base_ = static_cast<const char *>(m);
  }
  ::close(fd);
  try {
    if (size_ < 8) fail("not a safetensors file (shorter than its 8-byte header length)");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(base_[i]);
    if (n > size_ - 8)
      fail("not a safetensors file or truncated (header length " + std::to_string(n) +
           " exceeds the file size " + std::to_string(size_) + ")");
    if (n > (uint64_t(100) << 20)) fail("header larger than 100 MB");
    dataStart_ = size_t(8 + n);
    json h;
    std::string err;
    if (!parseJsonText(std::string_view(base_ + 8, size_t(n)), h, err))
      fail("bad safetensors header (" + err + ")");
    if (!h.is_object()) fail("bad safetensors header (not a JSON object)");
    const uint64_t dataSize = size_ - dataStart_;
    for (auto it = h.begin(); it != h.end(); ++it) {
      const std::string &key = it.key();
      const json &v = it.value();
      if (key == "__metadata__") {
        if (!v.is_object()) fail("__metadata__ is not an object");
        for (auto m = v.begin(); m != v.end(); ++m) {
          if (!m.value().is_string())
            fail("__metadata__ value of '" + m.key() + "' is not a string");
          meta_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      const std::string w = "tensor '" + key + "': ";
      if (!v.is_object()) fail(w + "header entry is not an object");
      SafetensorsEntry e;
      e.name = key;
      auto dt = v.find("dtype"), sh = v.find("shape"), off = v.find("data_offsets");
      if (dt == v.end() || !dt->is_string()) fail(w + "missing or bad \"dtype\"");
      e.dtypeName = dt->get<std::string>();
      size_t esize = 0;
      if (!knownDtype(e.dtypeName, esize)) fail(w + "unknown dtype \"" + e.dtypeName + "\"");
      e.supported = e.dtypeName == "F32" || e.dtypeName == "I32" || e.dtypeName == "I64";
      e.dtype = e.dtypeName == "I32" ? DType::I32 : e.dtypeName == "I64" ? DType::I64 : DType::F32;
      if (sh == v.end() || !sh->is_array()) fail(w + "missing or bad \"shape\"");
      uint64_t count = 1;
      for (const json &d : *sh) {
        if (!d.is_number_unsigned()) fail(w + "\"shape\" holds a non-integer or negative size");
        uint64_t dv = d.get<uint64_t>();
        if (dv != 0 && count > (uint64_t(1) << 52) / dv) fail(w + "\"shape\" is too large");
        count *= dv;
        e.shape.push_back(int64_t(dv));
      }
      if (off == v.end() || !off->is_array() || off->size() != 2 ||
          !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
        fail(w + "missing or bad \"data_offsets\"");
      e.begin = (*off)[0].get<uint64_t>();
      e.end = (*off)[1].get<uint64_t>();
      if (e.begin > e.end || e.end > dataSize)
        fail(w + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
             "] are out of range (the data section has " + std::to_string(dataSize) +
             " bytes; truncated file?)");
      if (e.end - e.begin != count * esize)
        fail(w + "data_offsets span " + std::to_string(e.end - e.begin) + " bytes but " +
             e.dtypeName + shapeStr(e.shape) + " needs " + std::to_string(count * esize));
      entries_.push_back(std::move(e));
    }
    // The tensors must tile the data section exactly.
    std::vector<const SafetensorsEntry *> order;
    for (const auto &e : entries_) order.push_back(&e);
    std::sort(order.begin(), order.end(), [](auto *x, auto *y) {
      return x->begin != y->begin ? x->begin < y->begin : x->end < y->end;
    });
    uint64_t pos = 0;
    for (const SafetensorsEntry *e : order) {
      if (e->begin != pos)
        fail(e->begin < pos ? "tensor '" + e->name + "' overlaps another tensor"
                            : "gap in the data section before tensor '" + e->name + "'");
      pos = e->end;
    }
    if (pos != dataSize)
      fail("the data section has " + std::to_string(dataSize - pos) +
           " unexpected bytes after the last tensor");
  } catch (...) {
    if (base_) ::munmap(const_cast<char *>(base_), size_);
    base_ = nullptr;
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (base_) ::munmap(const_cast<char *>(base_), size_);
}

const SafetensorsEntry *SafetensorsReader::find(const std::string &name) const {
  for (const auto &e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

void writeSafetensors(const std::string &path, const std::vector<SafetensorsTensor> &tensors,
                      const std::map<std::string, std::string> &metadata) {
  // Header: keep the tensors in the given order (nlohmann's object sorts
  // keys, so the header text is assembled by hand).
  std::string header = "{";
  auto quote = [](const std::string &s) {
    return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
  };
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto &kv : metadata) {
      header += (first ? "" : ",") + quote(kv.first) + ":" + quote(kv.second);
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensor &t = tensors[i];
    const uint64_t bytes = uint64_t(numel(t.shape)) * dtypeSize(t.dtype);
    if (!metadata.empty() || i > 0) header += ",";
    header += quote(t.name) + ":{\"dtype\":\"" + safetensorsDtype(t.dtype) + "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d)
      header += (d ? "," : "") + std::to_string(t.shape[d]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  while ((8 + header.size()) % 8 != 0) header += ' ';
  char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = char((n >> (8 * i)) & 0xff);

  AtomicFileWriter w;
  std::string err;
  bool ok = w.open(path, err) && w.write(len, 8, err) &&
            w.write(header.data(), header.size(), err);
  for (size_t i = 0; ok && i < tensors.size(); ++i)
    ok = w.write(tensors[i].data,
                 size_t(numel(tensors[i].shape)) * dtypeSize(tensors[i].dtype), err);
  ok = ok && w.commit(err);
  if (!ok) throw Error(path + ": cannot write: " + err);
}

} // namespace dtc::rt
