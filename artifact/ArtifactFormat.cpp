//===- ArtifactFormat.cpp - the .dtc container ----------------------------===//
//
// No exception leaves this file: nlohmann is only used in its non-throwing
// forms (parse with allow_exceptions=false, dump with error_handler replace).
//
//===----------------------------------------------------------------------===//
#include "dtc/artifact/ArtifactFormat.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dtc::artifact {

using json = nlohmann::json;

static constexpr std::string_view kMagic = "dtc-artifact";

uint64_t fnv1a64(std::string_view bytes) noexcept {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex64(uint64_t v) noexcept {
  static const char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4)
    s[size_t(i)] = digits[v & 15];
  return s;
}

std::string encodeArtifactBody(std::string_view body) noexcept {
  try {
    std::string out =
        std::string(kMagic) + " " + std::to_string(kArtifactContainerVersion) +
        " " + std::to_string(body.size()) + " " + hex64(fnv1a64(body)) + "\n";
    out.append(body.data(), body.size());
    return out;
  } catch (...) {
    return std::string();
  }
}

std::string encodeArtifact(const json &body) noexcept {
  try {
    return encodeArtifactBody(
        body.dump(-1, ' ', false, json::error_handler_t::replace));
  } catch (...) {
    return std::string();
  }
}

// Parses a decimal number made only of digits (no sign, no leading zeros
// except "0"), without overflow.
static bool parseDecimal(std::string_view s, uint64_t &v) {
  if (s.empty() || s.size() > 19 || (s.size() > 1 && s[0] == '0'))
    return false;
  v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + uint64_t(c - '0');
  }
  return true;
}

bool decodeArtifact(std::string_view file, std::string &body,
                    std::string &error) noexcept {
  try {
    body.clear();
    if (file.size() < kMagic.size() ||
        file.substr(0, kMagic.size()) != kMagic ||
        (file.size() > kMagic.size() && file[kMagic.size()] != ' ')) {
      error =
          "not a dtc artifact (the file does not start with \"dtc-artifact\")";
      return false;
    }
    size_t nl = file.find('\n');
    if (nl == std::string_view::npos || nl > 256) {
      error = "bad artifact header line (no newline after it; truncated file?)";
      return false;
    }
    std::string_view header = file.substr(0, nl);
    // Split on single spaces.
    std::string_view fields[5];
    size_t count = 0, start = 0;
    while (start <= header.size()) {
      size_t sp = header.find(' ', start);
      if (sp == std::string_view::npos)
        sp = header.size();
      if (count == 5) {
        count = 6;
        break;
      }
      fields[count++] = header.substr(start, sp - start);
      start = sp + 1;
    }
    if (count != 4) {
      error = "bad artifact header line (expected \"dtc-artifact <version> "
              "<body-bytes> <fnv1a64-hex>\")";
      return false;
    }
    uint64_t version = 0;
    if (!parseDecimal(fields[1], version)) {
      error = "bad artifact header line (version \"" + std::string(fields[1]) +
              "\" is not a number)";
      return false;
    }
    if (version != uint64_t(kArtifactContainerVersion)) {
      error = "unsupported artifact version " + std::to_string(version) +
              " (this runtime reads version " +
              std::to_string(kArtifactContainerVersion) +
              "; recompile the model with a matching dtc)";
      return false;
    }
    uint64_t length = 0;
    if (!parseDecimal(fields[2], length)) {
      error = "bad artifact header line (body length \"" +
              std::string(fields[2]) + "\" is not a number)";
      return false;
    }
    std::string_view hash = fields[3];
    bool hexOk = hash.size() == 16;
    for (char c : hash)
      hexOk = hexOk && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!hexOk) {
      error = "bad artifact header line (hash \"" + std::string(hash) +
              "\" is not 16 lowercase hex digits)";
      return false;
    }
    std::string_view rest = file.substr(nl + 1);
    if (rest.size() < length) {
      error = "truncated artifact: the header announces " +
              std::to_string(length) + " body bytes but only " +
              std::to_string(rest.size()) + " follow";
      return false;
    }
    if (rest.size() > length) {
      error = "unexpected data after the artifact body: the header announces " +
              std::to_string(length) + " body bytes but " +
              std::to_string(rest.size()) + " follow";
      return false;
    }
    if (hex64(fnv1a64(rest)) != hash) {
      error = "artifact body hash mismatch (header says " + std::string(hash) +
              ", body hashes to " + hex64(fnv1a64(rest)) +
              "): the file was edited or corrupted";
      return false;
    }
    body.assign(rest.data(), rest.size());
    return true;
  } catch (...) {
    body.clear();
    error = "out of memory";
    return false;
  }
}

std::string base64Encode(std::string_view in) noexcept {
  static const char tbl[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  try {
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
      const uint32_t v = uint32_t(uint8_t(in[i])) << 16 |
                         uint32_t(uint8_t(in[i + 1])) << 8 |
                         uint32_t(uint8_t(in[i + 2]));
      out += tbl[v >> 18];
      out += tbl[(v >> 12) & 63];
      out += tbl[(v >> 6) & 63];
      out += tbl[v & 63];
    }
    if (i < in.size()) {
      uint32_t v = uint32_t(uint8_t(in[i])) << 16;
      if (i + 1 < in.size())
        v |= uint32_t(uint8_t(in[i + 1])) << 8;
      out += tbl[v >> 18];
      out += tbl[(v >> 12) & 63];
      out += i + 1 < in.size() ? tbl[(v >> 6) & 63] : '=';
      out += '=';
    }
    return out;
  } catch (...) {
    return std::string();
  }
}

bool base64Decode(std::string_view in, std::string &out) noexcept {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z')
      return c - 'A';
    if (c >= 'a' && c <= 'z')
      return c - 'a' + 26;
    if (c >= '0' && c <= '9')
      return c - '0' + 52;
    if (c == '+')
      return 62;
    if (c == '/')
      return 63;
    return -1;
  };
  try {
    size_t n = in.size();
    while (n > 0 && in[n - 1] == '=')
      --n;
    if (in.size() - n > 2 || (in.size() != n && in.size() % 4 != 0) ||
        n % 4 == 1)
      return false;
    out.clear();
    out.reserve(n * 3 / 4);
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; ++i) {
      const int v = val(in[i]);
      if (v < 0)
        return false;
      acc = (acc << 6) | uint32_t(v);
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        out.push_back(char((acc >> bits) & 0xff));
      }
    }
    return true;
  } catch (...) {
    return false;
  }
}

namespace {
// A SAX handler that accepts everything and records the first parse error's
// message; used only to explain why a non-throwing parse failed.
struct ErrorCatcher {
  std::string message;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const json::string_t &) {
    return true;
  }
  bool string(json::string_t &) { return true; }
  bool binary(json::binary_t &) { return true; }
  bool start_object(std::size_t) { return true; }
  bool key(json::string_t &) { return true; }
  bool end_object() { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
  bool parse_error(std::size_t, const std::string &,
                   const nlohmann::detail::exception &ex) {
    message = ex.what();
    return false;
  }
};
} // namespace

namespace {
/// Whether brackets nest at most `limit` deep (strings skipped); `offset`
/// is where the limit is passed.
bool nestingWithin(std::string_view text, size_t limit, size_t &offset) {
  size_t depth = 0;
  bool inString = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) {
        offset = i;
        return false;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}
} // namespace

bool parseJsonText(std::string_view text, json &out,
                   std::string &error) noexcept {
  try {
    size_t offset = 0;
    if (!nestingWithin(text, kMaxJsonDepth, offset)) {
      error = "invalid JSON: nesting deeper than " +
              std::to_string(kMaxJsonDepth) + " levels at byte " +
              std::to_string(offset);
      out = json();
      return false;
    }
    out = json::parse(text.begin(), text.end(), nullptr,
                      /*allow_exceptions=*/false);
    if (!out.is_discarded())
      return true;
    ErrorCatcher catcher;
    json::sax_parse(text.begin(), text.end(), &catcher);
    error = catcher.message.empty() ? std::string("invalid JSON")
                                    : "invalid JSON: " + catcher.message;
    out = json();
    return false;
  } catch (...) {
    error = "invalid JSON";
    return false;
  }
}

bool decodeArtifactJson(std::string_view file, json &body,
                        std::string &error) noexcept {
  std::string text;
  if (!decodeArtifact(file, text, error))
    return false;
  if (!parseJsonText(text, body, error)) {
    error = "artifact body is not valid JSON (" + error + ")";
    return false;
  }
  if (!body.is_object()) {
    error = "artifact body is not a JSON object";
    return false;
  }
  return true;
}

bool readFileBytes(const std::string &path, std::string &out,
                   std::string &error, uint64_t maxBytes) noexcept {
  try {
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
    // below); reads of a regular file ignore the flag.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      error = std::string("cannot open: ") + std::strerror(errno);
      return false;
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      error = std::string("cannot read: ") + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      error = S_ISDIR(st.st_mode)
                  ? "cannot read: is a directory"
                  : "cannot read: not a regular file (a device, FIFO or "
                    "socket is refused)";
      return false;
    }
    if (uint64_t(st.st_size) > maxBytes) {
      ::close(fd);
      error = "cannot read: the file has " + std::to_string(st.st_size) +
              " bytes, more than the " + std::to_string(maxBytes) + " allowed";
      return false;
    }
    out.resize(size_t(st.st_size));
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::read(fd, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        error = n < 0 ? std::string("read failed: ") + std::strerror(errno)
                      : std::string("read failed: file shrank while reading");
        ::close(fd);
        return false;
      }
      done += size_t(n);
    }
    ::close(fd);
    return true;
  } catch (...) {
    error = "cannot read (out of memory?)";
    return false;
  }
}

bool writeArtifactFile(const std::string &path, const json &body,
                       std::string &error) noexcept {
  std::string text = encodeArtifact(body);
  if (text.empty()) {
    error = path + ": out of memory";
    return false;
  }
  if (!writeOutputFile(path, text, error)) {
    error = path + ": " + error;
    return false;
  }
  return true;
}

} // namespace dtc::artifact
