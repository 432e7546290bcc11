//===- AtomicFile.cpp -----------------------------------------------------===//
#include "dtc/runtime/AtomicFile.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace dtc::rt {

static std::string errnoText(const char *what) {
  return std::string(what) + ": " + std::strerror(errno);
}

AtomicFileWriter::~AtomicFileWriter() { abort(); }

bool AtomicFileWriter::open(const std::string &path, std::string &error) noexcept {
  try {
    abort();
    if (path.empty() || path.back() == '/') {
      error = "not a file name";
      return false;
    }
    target_ = path;
    std::string dir, base;
    size_t slash = path.rfind('/');
    if (slash == std::string::npos) {
      dir = "";
      base = path;
    } else {
      dir = path.substr(0, slash + 1);
      base = path.substr(slash + 1);
    }
    std::random_device rd;
    for (int attempt = 0; attempt < 16; ++attempt) {
      char suffix[32];
      std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%08x", (long)getpid(),
                    (unsigned)rd());
      temp_ = dir + "." + base + suffix;
      fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd_ >= 0)
        return true;
      if (errno != EEXIST)
        break;
    }
    error = errnoText("cannot create a temporary file in its directory");
    temp_.clear();
    return false;
  } catch (...) {
    error = "out of memory";
    return false;
  }
}

bool AtomicFileWriter::write(const void *data, size_t size, std::string &error) noexcept {
  if (fd_ < 0) {
    error = "file not open";
    return false;
  }
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    size_t chunk = size < (size_t(1) << 30) ? size : (size_t(1) << 30);
    ssize_t n = ::write(fd_, p, chunk);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      error = errnoText("write failed");
      return false;
    }
    p += n;
    size -= size_t(n);
  }
  return true;
}

bool AtomicFileWriter::commit(std::string &error) noexcept {
  if (fd_ < 0) {
    error = "file not open";
    return false;
  }
  if (::fsync(fd_) != 0) {
    error = errnoText("fsync failed");
    return false;
  }
  if (::close(fd_) != 0) {
    fd_ = -1;
    error = errnoText("close failed");
    return false;
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    error = errnoText("rename failed");
    return false;
  }
  temp_.clear();
  // Make the rename durable.
  std::string dir = ".";
  size_t slash = target_.rfind('/');
  if (slash != std::string::npos)
    dir = slash == 0 ? "/" : target_.substr(0, slash);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd); // best effort: some file systems refuse fsync on directories
    ::close(dfd);
  }
  return true;
}

void AtomicFileWriter::abort() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_.empty()) {
    ::unlink(temp_.c_str());
    temp_.clear();
  }
}

} // namespace dtc::rt
