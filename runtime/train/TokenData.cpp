//===- TokenData.cpp
//---------------------------------------------------------===//
#include "dtc/runtime/TokenData.h"
#include "dtc/runtime/Random.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dtc::rt {

bool parseTokenDType(const std::string &s, TokenDType &out) {
  if (s == "uint16") {
    out = TokenDType::U16;
    return true;
  }
  if (s == "uint32") {
    out = TokenDType::U32;
    return true;
  }
  return false;
}

TokenBinding bindTokenInputs(const Artifact &a) {
  TokenBinding b;
  std::vector<int> found;
  for (int t : a.tensorsWithRole(Role::Input)) {
    const TensorDecl &d = a.tensors[size_t(t)];
    if (isInt(d.dtype) && d.shape.size() == 2)
      found.push_back(t);
  }
  if (found.size() < 2)
    throw Error(
        a.label +
        ": token data (--data, --eval-data) needs two integer inputs of "
        "shape [B, S] (ids, then labels); the model has " +
        std::to_string(found.size()));
  b.ids = found[0];
  b.labels = found[1];
  const TensorDecl &ids = a.tensors[size_t(b.ids)],
                   &lab = a.tensors[size_t(b.labels)];
  if (ids.shape != lab.shape)
    throw Error(a.label + ": --data: ids input '" + ids.name + "' " +
                shapeStr(ids.shape) + " and labels input '" + lab.name + "' " +
                shapeStr(lab.shape) + " have different shapes");
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

TokenFile::TokenFile(const std::string &path, TokenDType dtype)
    : path_(path), dtype_(dtype) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0)
    throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(
        path +
        ": not a regular file (a device or FIFO cannot be a token file)");
  }
  const uint64_t bytes = uint64_t(st.st_size);
  const uint64_t w = dtype == TokenDType::U16 ? 2 : 4;
  if (bytes % w != 0) {
    ::close(fd_);
    throw Error(path + ": size " + std::to_string(bytes) +
                " bytes is not a multiple of " + std::to_string(w) +
                " (--data-dtype " +
                (dtype == TokenDType::U16 ? "uint16" : "uint32") + ")");
  }
  n_ = int64_t(bytes / w);
}

TokenFile::~TokenFile() { ::close(fd_); }

void TokenFile::read(int64_t first, int64_t count, uint32_t *out) const {
  const size_t w = dtype_ == TokenDType::U16 ? 2 : 4;
  // Read into the tail of `out` and widen in place, front to back.
  char *raw = reinterpret_cast<char *>(out) + size_t(count) * (4 - w);
  size_t want = size_t(count) * w;
  uint64_t offset = uint64_t(first) * w;
  char *p = raw;
  while (want > 0) {
    ssize_t n = ::pread(fd_, p, want, off_t(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw Error(path_ + ": read failed at byte " + std::to_string(offset) +
                  ": " + std::strerror(errno));
    if (n == 0)
      throw Error(path_ + ": the token file shrank during the run (it had " +
                  std::to_string(n_) + " tokens; byte " +
                  std::to_string(offset) +
                  " is gone): do not change a token file while dtc runs on it");
    p += n;
    want -= size_t(n);
    offset += uint64_t(n);
  }
  if (w == 4)
    return;
  for (int64_t i = 0; i < count; ++i) {
    uint16_t v;
    std::memcpy(&v, raw + size_t(i) * 2, 2);
    out[i] = v;
  }
}

void TokenFile::checkSize(const TokenBinding &b) const {
  if (n_ < b.S + 2)
    throw Error(path_ + ": " + std::to_string(n_) +
                " tokens is too few for one window of " + std::to_string(b.S) +
                " tokens plus its label (need at least " +
                std::to_string(b.S + 2) + ")");
}

void TokenFile::checkTokens(const TokenBinding &b, int64_t first,
                            int64_t count) const {
  const uint64_t bound = uint64_t(b.bound);
  const size_t w = dtype_ == TokenDType::U16 ? 2 : 4;
  std::vector<uint32_t> chunk(
      size_t(std::min<int64_t>(count, int64_t(1) << 18)));
  for (int64_t at = first, end = first + count; at < end;
       at += int64_t(chunk.size())) {
    const int64_t n = std::min<int64_t>(int64_t(chunk.size()), end - at);
    read(at, n, chunk.data());
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t t = chunk[size_t(j)];
      const int64_t i = at + j;
      if (t >= bound)
        throw Error(path_ + ": token " + std::to_string(t) +
                    " at byte offset " + std::to_string(uint64_t(i) * w) +
                    " (token " + std::to_string(i) + ") is not below " +
                    std::to_string(bound) + ", the max of input '" +
                    b.boundInput + "'");
    }
  }
}

void TokenFile::validate(const TokenBinding &b) const {
  checkSize(b);
  checkTokens(b, 0, n_);
}

int64_t windowStart(int64_t step, int64_t row, int64_t B, int64_t S,
                    int64_t n) {
  const unsigned __int128 v =
      (static_cast<unsigned __int128>(uint64_t(step)) * uint64_t(B) +
       uint64_t(row)) *
      uint64_t(S);
  return int64_t(v % static_cast<unsigned __int128>(uint64_t(n - S - 1)));
}

void fillTokens(const TokenFile &f, const TokenBinding &b, int64_t step,
                bool labels, void *out, DType dtype, const Piece &piece,
                const WindowOrder &order) {
  const Shape global{b.B, b.S};
  const int64_t n = f.size(), shift = labels ? 1 : 0;
  int64_t cachedRow = -1, start = 0;
  std::vector<uint32_t> window(size_t(b.S + 1));
  forEachPieceRun(global, piece, [&](int64_t l, int64_t g, int64_t len) {
    for (int64_t i = 0; i < len; ++i) {
      const int64_t r = (g + i) / b.S, s = (g + i) % b.S;
      if (r != cachedRow) {
        cachedRow = r;
        start = order.shuffle
                    ? shuffledWindowStart(step, r, b.B, b.S, n, order.seed)
                    : windowStart(step, r, b.B, b.S, n);
        f.read(start, b.S + 1, window.data());
      }
      const uint64_t tok = window[size_t(s + shift)];
      if (tok >= uint64_t(b.bound))
        throw Error(f.path() + ": token " + std::to_string(tok) + " (token " +
                    std::to_string(start + s + shift) + ") is not below " +
                    std::to_string(b.bound) + ", the max of input '" +
                    b.boundInput + "': the file changed during the run");
      if (dtype == DType::I32)
        static_cast<int32_t *>(out)[l + i] = int32_t(tok);
      else
        static_cast<int64_t *>(out)[l + i] = int64_t(tok);
    }
  });
}

namespace {

/// A bijection of [0, 2^(2 half)) keyed by `key`: four Feistel rounds on
/// two halves of `half` bits.
uint64_t feistel(uint64_t x, int half, uint64_t key) {
  const uint64_t mask = (uint64_t(1) << half) - 1;
  uint64_t left = x >> half, right = x & mask;
  for (uint64_t round = 0; round < 4; ++round) {
    const uint64_t next =
        left ^ (splitmix64(key ^ splitmix64(round ^ right)) & mask);
    left = right;
    right = next;
  }
  return (left << half) | right;
}

} // namespace

int64_t shuffledWindowStart(int64_t step, int64_t row, int64_t B, int64_t S,
                            int64_t n, uint64_t seed) {
  const uint64_t windows = uint64_t((n - S - 1) / S + 1);
  const unsigned __int128 w =
      static_cast<unsigned __int128>(uint64_t(step)) * uint64_t(B) +
      uint64_t(row);
  const uint64_t pass = uint64_t(w / windows), position = uint64_t(w % windows);
  int bits = 1;
  while (bits < 64 && (uint64_t(1) << bits) < windows)
    ++bits;
  const int half = (bits + 1) / 2;
  const uint64_t key =
      splitmix64(seed ^ splitmix64(pass ^ 0x53485546464c45ULL));
  // Cycle walking: the bijection of [0, 2^(2 half)) restricted to
  // [0, windows) (2^(2 half) < 4 windows, so a few steps at most).
  uint64_t x = position;
  do
    x = feistel(x, half, key);
  while (x >= windows);
  return int64_t(x) * S;
}

} // namespace dtc::rt
