//===- TokenData.cpp ---------------------------------------------------------===//
#include "dtc/runtime/TokenData.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dtc::rt {

bool parseTokenDType(const std::string &s, TokenDType &out) {
  if (s == "uint16") { out = TokenDType::U16; return true; }
  if (s == "uint32") { out = TokenDType::U32; return true; }
  return false;
}

TokenBinding bindTokenInputs(const Artifact &a) {
  TokenBinding b;
  std::vector<int> found;
  for (int t : a.tensorsWithRole(Role::Input)) {
    const TensorDecl &d = a.tensors[size_t(t)];
    if (isInt(d.dtype) && d.shape.size() == 2) found.push_back(t);
  }
  if (found.size() < 2)
    throw Error(a.label + ": --data needs two integer inputs of shape [B, S] (ids, then "
                "labels); the model has " + std::to_string(found.size()));
  b.ids = found[0];
  b.labels = found[1];
  const TensorDecl &ids = a.tensors[size_t(b.ids)], &lab = a.tensors[size_t(b.labels)];
  if (ids.shape != lab.shape)
    throw Error(a.label + ": --data: ids input '" + ids.name + "' " + shapeStr(ids.shape) +
                " and labels input '" + lab.name + "' " + shapeStr(lab.shape) +
                " have different shapes");
  b.B = ids.shape[0];
  b.S = ids.shape[1];
  b.bound = ids.max;
  b.boundInput = ids.name;
  if (lab.max < b.bound) {
    b.bound = lab.max;
    b.boundInput = lab.name;
  }
  return b;
}

TokenFile::TokenFile(const std::string &path, TokenDType dtype) : path_(path), dtype_(dtype) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  bytes_ = size_t(st.st_size);
  const size_t w = dtype == TokenDType::U16 ? 2 : 4;
  if (bytes_ % w != 0) {
    ::close(fd);
    throw Error(path + ": size " + std::to_string(bytes_) + " bytes is not a multiple of " +
                std::to_string(w) + " (--data-dtype " +
                (dtype == TokenDType::U16 ? "uint16" : "uint32") + ")");
  }
  n_ = int64_t(bytes_ / w);
  if (bytes_ > 0) {
    void *m = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      throw Error(path + ": cannot map: " + std::strerror(errno));
    }
    base_ = static_cast<const char *>(m);
  }
  ::close(fd);
}

TokenFile::~TokenFile() {
  if (base_) ::munmap(const_cast<char *>(base_), bytes_);
}

void TokenFile::validate(const TokenBinding &b) const {
  if (n_ < b.S + 2)
    throw Error(path_ + ": " + std::to_string(n_) + " tokens is too few for one window of " +
                std::to_string(b.S) + " tokens plus its label (need at least " +
                std::to_string(b.S + 2) + ")");
  const uint64_t bound = uint64_t(b.bound);
  const size_t w = dtype_ == TokenDType::U16 ? 2 : 4;
  for (int64_t i = 0; i < n_; ++i) {
    const uint64_t t = at(i);
    if (t >= bound)
      throw Error(path_ + ": token " + std::to_string(t) + " at byte offset " +
                  std::to_string(uint64_t(i) * w) + " (token " + std::to_string(i) +
                  ") is not below " + std::to_string(bound) + ", the max of input '" +
                  b.boundInput + "'");
  }
}

int64_t windowStart(int64_t step, int64_t row, int64_t B, int64_t S, int64_t n) {
  const unsigned __int128 v =
      (static_cast<unsigned __int128>(uint64_t(step)) * uint64_t(B) + uint64_t(row)) *
      uint64_t(S);
  return int64_t(v % static_cast<unsigned __int128>(uint64_t(n - S - 1)));
}

void fillTokens(const TokenFile &f, const TokenBinding &b, int64_t step, bool labels,
                void *out, DType dtype, const Piece &piece) {
  const Shape global{b.B, b.S};
  const int64_t n = f.size(), shift = labels ? 1 : 0;
  int64_t cachedRow = -1, start = 0;
  forEachPieceRun(global, piece, [&](int64_t l, int64_t g, int64_t len) {
    for (int64_t i = 0; i < len; ++i) {
      const int64_t r = (g + i) / b.S, s = (g + i) % b.S;
      if (r != cachedRow) {
        cachedRow = r;
        start = windowStart(step, r, b.B, b.S, n);
      }
      const uint64_t tok = f.at(start + s + shift);
      if (dtype == DType::I32) static_cast<int32_t *>(out)[l + i] = int32_t(tok);
      else static_cast<int64_t *>(out)[l + i] = int64_t(tok);
    }
  });
}

} // namespace dtc::rt
