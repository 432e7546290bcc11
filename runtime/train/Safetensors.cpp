//===- Safetensors.cpp
//-------------------------------------------------------===//
#include "dtc/runtime/Safetensors.h"
#include "dtc/artifact/ArtifactFormat.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dtc::rt {

using json = nlohmann::json;

const char *safetensorsDtype(DType d) {
  switch (d) {
  case DType::F32:
    return "F32";
  case DType::I32:
    return "I32";
  case DType::I64:
    return "I64";
  case DType::BF16:
    return "BF16";
  case DType::F16:
    return "F16";
  }
  return "?";
}

// ---- CRC-32C
// ------------------------------------------------------------------------

namespace {
struct Crc32cTable {
  uint32_t t[256];
  Crc32cTable() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
      t[i] = c;
    }
  }
};

uint32_t crc32cPortable(uint32_t crc, const uint8_t *p, size_t n) {
  static const Crc32cTable table;
  uint32_t c = ~crc;
  while (n--)
    c = table.t[(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

#if defined(__x86_64__)
// The SSE4.2 instruction computes exactly this polynomial, 8 bytes a cycle.
__attribute__((target("sse4.2"))) uint32_t crc32cSse42(uint32_t crc,
                                                       const uint8_t *p,
                                                       size_t n) {
  uint64_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = __builtin_ia32_crc32qi(uint32_t(c), *p++);
    --n;
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  while (n--)
    c = __builtin_ia32_crc32qi(uint32_t(c), *p++);
  return ~uint32_t(c);
}
#endif
} // namespace

uint32_t crc32c(uint32_t crc, const void *data, size_t size) {
  const uint8_t *p = static_cast<const uint8_t *>(data);
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  if (hardware)
    return crc32cSse42(crc, p, size);
#endif
  return crc32cPortable(crc, p, size);
}

static std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
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

namespace {

[[noreturn]] void failIn(const std::string &path, const std::string &msg) {
  throw Error(path + ": " + msg);
}

/// One tensor's header entry: its dtype, shape and data offsets, checked
/// against the `dataSize` bytes of the data section.
SafetensorsEntry parseEntry(const std::string &path, const std::string &key,
                            const json &v, uint64_t dataSize) {
  auto fail = [&](const std::string &msg) { failIn(path, msg); };
  const std::string w = "tensor '" + key + "': ";
  if (!v.is_object())
    fail(w + "header entry is not an object");
  SafetensorsEntry e;
  e.name = key;
  auto dt = v.find("dtype"), sh = v.find("shape"), off = v.find("data_offsets");
  if (dt == v.end() || !dt->is_string())
    fail(w + "missing or bad \"dtype\"");
  e.dtypeName = dt->get<std::string>();
  size_t esize = 0;
  if (!knownDtype(e.dtypeName, esize))
    fail(w + "unknown dtype \"" + e.dtypeName + "\"");
  e.supported = e.dtypeName == "F32" || e.dtypeName == "I32" ||
                e.dtypeName == "I64" || e.dtypeName == "BF16" ||
                e.dtypeName == "F16";
  e.dtype = e.dtypeName == "I32"    ? DType::I32
            : e.dtypeName == "I64"  ? DType::I64
            : e.dtypeName == "BF16" ? DType::BF16
            : e.dtypeName == "F16"  ? DType::F16
                                    : DType::F32;
  if (sh == v.end() || !sh->is_array())
    fail(w + "missing or bad \"shape\"");
  uint64_t count = 1;
  for (const json &d : *sh) {
    if (!d.is_number_unsigned())
      fail(w + "\"shape\" holds a non-integer or negative size");
    uint64_t dv = d.get<uint64_t>();
    if (dv != 0 && count > (uint64_t(1) << 52) / dv)
      fail(w + "\"shape\" is too large");
    count *= dv;
    e.shape.push_back(int64_t(dv));
  }
  if (off == v.end() || !off->is_array() || off->size() != 2 ||
      !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
    fail(w + "missing or bad \"data_offsets\"");
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.begin > e.end || e.end > dataSize)
    fail(w + "data_offsets [" + std::to_string(e.begin) + ", " +
         std::to_string(e.end) + "] are out of range (the data section has " +
         std::to_string(dataSize) + " bytes; truncated file?)");
  if (e.end - e.begin != count * esize)
    fail(w + "data_offsets span " + std::to_string(e.end - e.begin) +
         " bytes but " + e.dtypeName + shapeStr(e.shape) + " needs " +
         std::to_string(count * esize));
  return e;
}

/// The tensors must tile the data section exactly.
void checkTiling(const std::string &path,
                 const std::vector<SafetensorsEntry> &entries,
                 uint64_t dataSize) {
  std::vector<const SafetensorsEntry *> order;
  for (const auto &e : entries)
    order.push_back(&e);
  std::sort(order.begin(), order.end(), [](auto *x, auto *y) {
    return x->begin != y->begin ? x->begin < y->begin : x->end < y->end;
  });
  uint64_t pos = 0;
  for (const SafetensorsEntry *e : order) {
    if (e->begin != pos)
      failIn(path,
             e->begin < pos
                 ? "tensor '" + e->name + "' overlaps another tensor"
                 : "gap in the data section before tensor '" + e->name + "'");
    pos = e->end;
  }
  if (pos != dataSize)
    failIn(path, "the data section has " + std::to_string(dataSize - pos) +
                     " unexpected bytes after the last tensor");
}

/// The checksums dtc writes into the metadata (docs/runtime.md): the whole
/// data section's, and per block of `blockBytes` (0 when absent).
void parseChecksums(const std::string &path,
                    const std::map<std::string, std::string> &meta,
                    uint64_t dataSize, uint64_t &blockBytes,
                    std::vector<uint32_t> &blockCrcs) {
  auto fail = [&](const std::string &msg) { failIn(path, msg); };
  if (auto c = meta.find(kDataChecksumKey); c != meta.end()) {
    bool hex = c->second.size() == 8;
    for (char ch : c->second)
      hex = hex && ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'));
    if (!hex)
      fail(std::string("metadata ") + kDataChecksumKey + " = \"" + c->second +
           "\" is not 8 lowercase hex digits");
  }
  auto bb = meta.find(kBlockBytesKey), bc = meta.find(kBlockChecksumsKey);
  if ((bb == meta.end()) != (bc == meta.end()))
    fail(std::string("metadata has one of ") + kBlockBytesKey + " and " +
         kBlockChecksumsKey + " without the other");
  if (bb == meta.end())
    return;
  uint64_t v = 0;
  bool ok = !bb->second.empty() && bb->second.size() <= 12;
  for (char ch : bb->second) {
    ok = ok && ch >= '0' && ch <= '9';
    if (ok)
      v = v * 10 + uint64_t(ch - '0');
  }
  if (!ok || v == 0)
    fail(std::string("metadata ") + kBlockBytesKey + " = \"" + bb->second +
         "\" is not a positive integer");
  const uint64_t blocks = (dataSize + v - 1) / v;
  const std::string &digits = bc->second;
  if (digits.size() != 8 * blocks)
    fail(std::string("metadata ") + kBlockChecksumsKey + " has " +
         std::to_string(digits.size()) + " hex digits but the data section's " +
         std::to_string(blocks) + " blocks need " + std::to_string(8 * blocks) +
         " (truncated file?)");
  for (uint64_t b = 0; b < blocks; ++b) {
    uint32_t crc = 0;
    for (size_t i = 0; i < 8; ++i) {
      const char ch = digits[size_t(8 * b) + i];
      const int nib = ch >= '0' && ch <= '9'   ? ch - '0'
                      : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                               : -1;
      if (nib < 0)
        fail(std::string("metadata ") + kBlockChecksumsKey +
             " is not lowercase hex digits");
      crc = (crc << 4) | uint32_t(nib);
    }
    blockCrcs.push_back(crc);
  }
  blockBytes = v;
}

} // namespace

SafetensorsReader::SafetensorsReader(const std::string &path) : path_(path) {
  auto fail = [&](const std::string &msg) { failIn(path_, msg); };
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0)
    fail(std::string("cannot open: ") + std::strerror(errno));
  try {
    struct stat st;
    if (::fstat(fd_, &st) != 0)
      fail(std::string("cannot read: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode))
      fail("not a regular file (a device, FIFO or directory cannot be a "
           "checkpoint)");
    size_ = uint64_t(st.st_size);
    if (size_ < 8)
      fail("not a safetensors file (shorter than its 8-byte header length)");
    unsigned char len[8];
    readAt(0, len, 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
      n = (n << 8) | len[i];
    if (n > size_ - 8)
      fail("not a safetensors file or truncated (header length " +
           std::to_string(n) + " exceeds the file size " +
           std::to_string(size_) + ")");
    if (n > (uint64_t(100) << 20))
      fail("header larger than 100 MB");
    dataStart_ = 8 + n;
    std::string text(size_t(n), '\0');
    readAt(8, text.data(), text.size());
    json h;
    std::string err;
    if (!parseJsonText(text, h, err))
      fail("bad safetensors header (" + err + ")");
    if (!h.is_object())
      fail("bad safetensors header (not a JSON object)");
    const uint64_t dataSize = size_ - dataStart_;
    for (auto it = h.begin(); it != h.end(); ++it) {
      const std::string &key = it.key();
      const json &v = it.value();
      if (key != "__metadata__") {
        entries_.push_back(parseEntry(path_, key, v, dataSize));
        continue;
      }
      if (!v.is_object())
        fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail("__metadata__ value of '" + m.key() + "' is not a string");
        meta_[m.key()] = m.value().get<std::string>();
      }
    }
    checkTiling(path_, entries_, dataSize);
    parseChecksums(path_, meta_, dataSize, blockBytes_, blockCrcs_);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0)
    ::close(fd_);
}

const SafetensorsEntry *SafetensorsReader::find(const std::string &name) const {
  for (const auto &e : entries_)
    if (e.name == name)
      return &e;
  return nullptr;
}

void SafetensorsReader::readAt(uint64_t offset, void *dst, size_t size) const {
  char *p = static_cast<char *>(dst);
  while (size > 0) {
    ssize_t n = ::pread(fd_, p, size, off_t(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw Error(path_ + ": read failed at byte " + std::to_string(offset) +
                  ": " + std::strerror(errno));
    if (n == 0)
      throw Error(path_ + ": the file shrank while it was read (it had " +
                  std::to_string(size_) + " bytes; nothing at byte " +
                  std::to_string(offset) + " now)");
    p += n;
    size -= size_t(n);
    offset += uint64_t(n);
  }
}

void SafetensorsReader::read(const SafetensorsEntry &e, uint64_t offset,
                             void *dst, size_t size) const {
  if (offset > e.end - e.begin || size > e.end - e.begin - offset)
    throw Error(path_ + ": internal error: read past tensor '" + e.name + "'");
  readAt(dataStart_ + e.begin + offset, dst, size);
}

void SafetensorsReader::readVerified(const SafetensorsEntry &e, uint64_t offset,
                                     void *dst, size_t size) const {
  if (!blockBytes_ || offset > e.end - e.begin ||
      size > e.end - e.begin - offset)
    throw Error(path_ + ": internal error: unverifiable read of tensor '" +
                e.name + "'");
  char *out = static_cast<char *>(dst);
  const uint64_t total = dataBytes();
  for (uint64_t pos = e.begin + offset, end = pos + size; pos < end;) {
    const uint64_t block = pos / blockBytes_, start = block * blockBytes_;
    const uint64_t len = std::min(blockBytes_, total - start);
    if (cachedBlock_ != int64_t(block)) {
      cachedBlock_ = -1;
      cache_.resize(size_t(len));
      readAt(dataStart_ + start, cache_.data(), cache_.size());
      const uint32_t crc = crc32c(0, cache_.data(), cache_.size());
      if (crc != blockCrcs_[size_t(block)])
        throw Error(path_ + ": data checksum mismatch in block " +
                    std::to_string(block) + " (data bytes [" +
                    std::to_string(start) + ", " + std::to_string(start + len) +
                    "): " + kBlockChecksumsKey + " says " +
                    hex32(blockCrcs_[size_t(block)]) + ", the data hashes to " +
                    hex32(crc) + "): the file is corrupted");
      cachedBlock_ = int64_t(block);
    }
    const uint64_t n = std::min(end, start + len) - pos;
    std::memcpy(out, cache_.data() + (pos - start), size_t(n));
    out += n;
    pos += n;
  }
}

uint32_t SafetensorsReader::dataCrc(uint64_t offset, uint64_t size,
                                    uint32_t crc) const {
  std::vector<char> buf(size_t(std::min<uint64_t>(size, uint64_t(4) << 20)));
  for (uint64_t pos = dataStart_ + offset, end = pos + size; pos < end;) {
    const size_t n = size_t(std::min<uint64_t>(buf.size(), end - pos));
    readAt(pos, buf.data(), n);
    crc = crc32c(crc, buf.data(), n);
    pos += n;
  }
  return crc;
}

void SafetensorsReader::checkChecksum(uint32_t crc) const {
  const std::string &want = meta_.at(kDataChecksumKey);
  if (hex32(crc) != want)
    throw Error(path_ + ": data checksum mismatch (" + kDataChecksumKey +
                " is " + want + ", the data section hashes to " + hex32(crc) +
                "): the file is corrupted");
}

bool SafetensorsReader::verifyChecksum() const {
  if (!hasChecksum())
    return false;
  checkChecksum(dataCrc(0, dataBytes(), 0));
  return true;
}

// ---- writing
// -----------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(
    const std::string &path, std::vector<SafetensorsTensorInfo> tensors,
    std::map<std::string, std::string> metadata, uint64_t blockBytes)
    : path_(path) {
  std::string err;
  if (!out_.open(path, err))
    fail(err);
  const std::string placeholder = "00000000";
  if (out_.seekable())
    metadata[kDataChecksumKey] = placeholder;
  if (out_.seekable() && blockBytes > 0) {
    uint64_t total = 0;
    for (const SafetensorsTensorInfo &t : tensors)
      total += t.bytes();
    blockBytes_ = blockBytes;
    metadata[kBlockBytesKey] = std::to_string(blockBytes);
    metadata[kBlockChecksumsKey] =
        std::string(size_t(8 * ((total + blockBytes - 1) / blockBytes)), '0');
  }
  // Header: keep the tensors in the given order (nlohmann's object sorts
  // keys, so the header text is assembled by hand).
  std::string header = "{";
  auto quote = [](const std::string &s) {
    return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
  };
  size_t checksumAt = 0;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto &kv : metadata) {
      header += (first ? "" : ",") + quote(kv.first) + ":";
      if (kv.first == kDataChecksumKey && out_.seekable())
        checksumAt = header.size() + 1;
      if (kv.first == kBlockChecksumsKey && blockBytes_)
        blockOffset_ = 8 + header.size() + 1;
      header += quote(kv.second);
      first = false;
    }
    header += "}";
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensorInfo &t = tensors[i];
    if (!metadata.empty() || i > 0)
      header += ",";
    header += quote(t.name) + ":{\"dtype\":\"" + safetensorsDtype(t.dtype) +
              "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d)
      header += (d ? "," : "") + std::to_string(t.shape[d]);
    header += "],\"data_offsets\":[" + std::to_string(dataBytes_) + "," +
              std::to_string(dataBytes_ + t.bytes()) + "]}";
    dataBytes_ += t.bytes();
  }
  header += "}";
  while ((8 + header.size()) % 8 != 0)
    header += ' ';
  if (checksumAt)
    checksumOffset_ = 8 + checksumAt;
  char len[8];
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    len[i] = char((n >> (8 * i)) & 0xff);
  headerBytes_ = 8 + header.size();
  if (!out_.write(len, 8, err) ||
      !out_.write(header.data(), header.size(), err))
    fail(err);
}

void SafetensorsWriter::write(const void *data, size_t bytes) {
  if (bytes > dataBytes_ - written_)
    fail("internal error: more data than the header announces");
  std::string err;
  if (!out_.write(data, bytes, err))
    fail(err);
  if (checksumOffset_)
    crc_ = crc32c(crc_, data, bytes);
  for (const char *p = static_cast<const char *>(data), *end = p + bytes;
       blockBytes_ && p < end;) {
    const uint64_t room = blockBytes_ - written_ % blockBytes_;
    const size_t n = size_t(std::min<uint64_t>(room, uint64_t(end - p)));
    blockCrc_ = crc32c(blockCrc_, p, n);
    p += n;
    written_ += n;
    if (written_ % blockBytes_ == 0) {
      blockDigits_ += hex32(blockCrc_);
      blockCrc_ = 0;
    }
  }
  if (!blockBytes_)
    written_ += bytes;
}

void SafetensorsWriter::commit() {
  if (written_ != dataBytes_)
    fail("internal error: " + std::to_string(written_) + " of " +
         std::to_string(dataBytes_) + " data bytes written");
  std::string err;
  if (checksumOffset_) {
    const std::string digits = hex32(crc_);
    if (!out_.writeAt(checksumOffset_, digits.data(), digits.size(), err))
      fail(err);
  }
  if (blockBytes_) {
    if (written_ % blockBytes_ != 0)
      blockDigits_ += hex32(blockCrc_);
    if (!out_.writeAt(blockOffset_, blockDigits_.data(), blockDigits_.size(),
                      err))
      fail(err);
  }
  if (!out_.commit(err))
    fail(err);
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::fail(const std::string &why) {
  out_.abort();
  throw Error(path_ + ": cannot write: " + why);
}

void writeSafetensors(const std::string &path,
                      const std::vector<SafetensorsTensor> &tensors,
                      const std::map<std::string, std::string> &metadata) {
  std::vector<SafetensorsTensorInfo> infos;
  for (const SafetensorsTensor &t : tensors)
    infos.push_back({t.name, t.dtype, t.shape});
  SafetensorsWriter w(path, infos, metadata);
  for (const SafetensorsTensor &t : tensors)
    w.write(t.data, size_t(infos[size_t(&t - tensors.data())].bytes()));
  w.commit();
}

} // namespace dtc::rt
