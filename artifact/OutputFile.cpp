//===- OutputFile.cpp - safe outputs (see OutputFile.h) ------------------===//
#include "dtc/artifact/OutputFile.h"

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace dtc::artifact {

// ---- the live temporary files, for signal handlers
// ---------------------------------
//
// A fixed table of paths with a lock-free state per slot, so that a signal
// handler may walk it: 0 = free, 1 = being filled, 2 = live.
namespace {
constexpr int kTempSlots = 64;
struct TempSlot {
  std::atomic<int> state{0};
  char path[PATH_MAX];
};
TempSlot gTemps[kTempSlots];

int registerTemp(const std::string &path) {
  if (path.size() >= PATH_MAX)
    return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = 0;
    if (gTemps[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(gTemps[i].path, path.c_str(), path.size() + 1);
      gTemps[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1; // still written safely, only not removed by a signal handler
}

void unregisterTemp(int &slot) {
  if (slot >= 0)
    gTemps[slot].state.store(0, std::memory_order_release);
  slot = -1;
}

void onFatalSignal(int sig) {
  removeLiveTemporaryFiles();
  // SA_RESETHAND restored the default action; it runs once this returns.
  ::raise(sig);
}
} // namespace

void removeLiveTemporaryFiles() noexcept {
  for (int i = 0; i < kTempSlots; ++i)
    if (gTemps[i].state.load(std::memory_order_acquire) == 2)
      ::unlink(gTemps[i].path);
}

void removeTemporaryFilesOnSignals() noexcept {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = onFatalSignal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    ::sigaction(sig, &sa, nullptr);
}

// ---- what a path names
// --------------------------------------------------------------

namespace {

std::string errnoText(const char *what) {
  return std::string(what) + ": " + std::strerror(errno);
}

/// "dir/" for "dir/name", "" for "name", "/" for "/name".
std::string dirPrefix(const std::string &p) {
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? std::string() : p.substr(0, slash + 1);
}

/// /dev/stdout, /dev/stderr, /dev/fd/N and /proc/self/fd/N name a descriptor
/// of this process: writing there means writing to it, whatever it is.
bool descriptorAlias(const std::string &p, int &fd) {
  // "-" is standard output, as for every tool that writes files.
  if (p == "-" || p == "/dev/stdout") {
    fd = 1;
    return true;
  }
  if (p == "/dev/stderr") {
    fd = 2;
    return true;
  }
  for (const char *prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const size_t n = std::strlen(prefix);
    if (p.size() > n && p.compare(0, n, prefix) == 0 && p.size() - n <= 6) {
      int v = 0;
      for (size_t i = n; i < p.size(); ++i) {
        if (p[i] < '0' || p[i] > '9')
          return false;
        v = v * 10 + (p[i] - '0');
      }
      fd = v;
      return true;
    }
  }
  return false;
}

struct Resolved {
  enum Kind { Missing, Regular, InPlace, Socket, Descriptor, Bad } kind = Bad;
  std::string path; ///< after following symbolic links
  int fd = -1;      ///< Descriptor
  mode_t mode = 0;  ///< Regular: permission bits to keep
  std::string error;
};

Resolved resolve(const std::string &path) {
  Resolved r;
  if (path.empty() || path.back() == '/') {
    r.error = "not a file name";
    return r;
  }
  std::string cur = path;
  for (int hop = 0; hop < 40; ++hop) {
    if (descriptorAlias(cur, r.fd)) {
      r.kind = Resolved::Descriptor;
      r.path = cur;
      return r;
    }
    struct stat st;
    if (::lstat(cur.c_str(), &st) != 0) {
      if (errno == ENOENT) {
        r.kind = Resolved::Missing;
        r.path = cur;
      } else {
        r.error = errnoText("cannot examine");
      }
      return r;
    }
    if (S_ISLNK(st.st_mode)) {
      char buf[PATH_MAX];
      ssize_t n = ::readlink(cur.c_str(), buf, sizeof buf - 1);
      if (n < 0) {
        r.error = errnoText("cannot read the symbolic link");
        return r;
      }
      buf[n] = '\0';
      cur = buf[0] == '/' ? std::string(buf) : dirPrefix(cur) + buf;
      continue;
    }
    r.path = cur;
    if (S_ISREG(st.st_mode)) {
      r.kind = Resolved::Regular;
      r.mode = st.st_mode & 07777;
    } else if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
      r.kind = Resolved::InPlace;
    } else if (S_ISSOCK(st.st_mode)) {
      r.kind = Resolved::Socket;
    } else if (S_ISDIR(st.st_mode)) {
      r.error = "is a directory";
    } else if (S_ISBLK(st.st_mode)) {
      r.error = "is a block device; refusing to write to it";
    } else {
      r.error = "is not a file that can be written";
    }
    return r;
  }
  r.error = "too many levels of symbolic links";
  return r;
}

int connectSocket(const std::string &path, std::string &error) {
  sockaddr_un addr;
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    error = "socket path too long";
    return -1;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    error = errnoText("cannot create a socket");
    return -1;
  }
  if (::connect(s, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) {
    error = errnoText("cannot connect to the socket");
    ::close(s);
    return -1;
  }
  return s;
}

bool writeAll(int fd, const void *data, size_t size, std::string &error) {
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    size_t chunk = size < (size_t(1) << 30) ? size : (size_t(1) << 30);
    ssize_t n = ::write(fd, p, chunk);
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

void fsyncDirectoryOf(const std::string &path) {
  std::string dir = dirPrefix(path);
  if (dir.empty())
    dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd); // best effort: some file systems refuse fsync on directories
    ::close(dfd);
  }
}

} // namespace

// ---- OutputFile
// ------------------------------------------------------------------------

OutputFile::~OutputFile() { abort(); }

bool OutputFile::open(const std::string &path, std::string &error) noexcept {
  try {
    return start(path, /*append=*/false, /*startEmpty=*/false, error);
  } catch (...) {
    error = "out of memory";
    return false;
  }
}

bool OutputFile::openAppend(const std::string &path, bool startEmpty,
                            std::string &error) noexcept {
  try {
    return start(path, /*append=*/true, startEmpty, error);
  } catch (...) {
    error = "out of memory";
    return false;
  }
}

bool OutputFile::start(const std::string &path, bool append, bool startEmpty,
                       std::string &error) {
  abort();
  Resolved r = resolve(path);
  target_ = r.path;
  switch (r.kind) {
  case Resolved::Bad:
    error = r.error;
    return false;
  case Resolved::Descriptor:
    fd_ = ::fcntl(r.fd, F_DUPFD_CLOEXEC, 3);
    if (fd_ < 0) {
      error = errnoText("cannot use that descriptor");
      return false;
    }
    mode_ = Mode::InPlace;
    return true;
  case Resolved::InPlace:
    // A FIFO blocks here until a reader opens it, as writing one should.
    fd_ = ::open(r.path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd_ < 0) {
      error = errnoText("cannot open");
      return false;
    }
    mode_ = Mode::InPlace;
    return true;
  case Resolved::Socket:
    fd_ = connectSocket(r.path, error);
    if (fd_ < 0)
      return false;
    mode_ = Mode::InPlace;
    return true;
  case Resolved::Missing:
  case Resolved::Regular:
    break;
  }
  if (append) {
    if (startEmpty) {
      OutputFile empty;
      if (!empty.start(r.path, /*append=*/false, false, error) ||
          !empty.commit(error))
        return false;
    }
    fd_ = ::open(r.path.c_str(),
                 O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0666);
    if (fd_ < 0) {
      error = errnoText("cannot open");
      return false;
    }
    mode_ = Mode::Append;
    return true;
  }
  const std::string dir = dirPrefix(r.path), base = r.path.substr(dir.size());
  std::random_device rd;
  for (int attempt = 0; attempt < 16; ++attempt) {
    char suffix[48];
    std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%08x", (long)::getpid(),
                  (unsigned)rd());
    temp_ = dir + "." + base + suffix;
    // Registered before it exists, so no signal can leave it behind.
    tempSlot_ = registerTemp(temp_);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0)
      break;
    const int saved = errno;
    unregisterTemp(tempSlot_);
    errno = saved;
    if (errno != EEXIST)
      break;
  }
  if (fd_ < 0) {
    error = errnoText("cannot create a temporary file in its directory");
    temp_.clear();
    return false;
  }
  // A replaced file keeps its permissions.
  if (r.kind == Resolved::Regular)
    ::fchmod(fd_, r.mode);
  mode_ = Mode::Replace;
  return true;
}

bool OutputFile::write(const void *data, size_t size,
                       std::string &error) noexcept {
  if (fd_ < 0) {
    error = "file not open";
    return false;
  }
  return writeAll(fd_, data, size, error);
}

bool OutputFile::writeAt(uint64_t offset, const void *data, size_t size,
                         std::string &error) noexcept {
  if (fd_ < 0 || mode_ != Mode::Replace) {
    error = "cannot seek in this output";
    return false;
  }
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    ssize_t n = ::pwrite(fd_, p, size, off_t(offset));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      error = errnoText("write failed");
      return false;
    }
    p += n;
    size -= size_t(n);
    offset += uint64_t(n);
  }
  return true;
}

bool OutputFile::commit(std::string &error) noexcept {
  if (fd_ < 0) {
    error = "file not open";
    return false;
  }
  if (mode_ == Mode::InPlace) {
    const int rc = ::close(fd_);
    fd_ = -1;
    mode_ = Mode::None;
    if (rc != 0 && errno != EINTR) {
      error = errnoText("close failed");
      return false;
    }
    return true;
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
  if (mode_ == Mode::Append) {
    mode_ = Mode::None;
    return true;
  }
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    error = errnoText("rename failed");
    return false;
  }
  unregisterTemp(tempSlot_);
  temp_.clear();
  mode_ = Mode::None;
  fsyncDirectoryOf(target_);
  return true;
}

void OutputFile::abort() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_.empty()) {
    ::unlink(temp_.c_str());
    temp_.clear();
  }
  unregisterTemp(tempSlot_);
  mode_ = Mode::None;
}

bool writeOutputFile(const std::string &path, std::string_view bytes,
                     std::string &error) noexcept {
  OutputFile f;
  return f.open(path, error) && f.write(bytes.data(), bytes.size(), error) &&
         f.commit(error);
}

// ---- same-file checks
// ------------------------------------------------------------------

namespace {
struct Identity {
  bool exists = false, special = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string canonical; ///< when it does not exist
};

Identity identify(const std::string &path) {
  Identity id;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.special =
        S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    return id;
  }
  // Not there yet: where it would be created, links followed.
  Resolved r = resolve(path);
  const std::string p = r.path.empty() ? path : r.path;
  const std::string dir = dirPrefix(p), base = p.substr(dir.size());
  char real[PATH_MAX];
  if (::realpath(dir.empty() ? "." : dir.c_str(), real))
    id.canonical =
        std::string(real) + (std::strcmp(real, "/") == 0 ? "" : "/") + base;
  else
    id.canonical = p;
  return id;
}

bool sameFile(const Identity &a, const Identity &b) {
  if (a.special || b.special || a.exists != b.exists)
    return false;
  if (a.exists)
    return a.dev == b.dev && a.ino == b.ino;
  return a.canonical == b.canonical;
}
} // namespace

bool checkOutputsDistinct(const std::vector<NamedPath> &inputs,
                          const std::vector<NamedPath> &outputs,
                          std::string &error) noexcept {
  try {
    std::vector<Identity> in, out;
    for (const NamedPath &p : inputs)
      in.push_back(identify(p.path));
    for (size_t o = 0; o < outputs.size(); ++o) {
      out.push_back(identify(outputs[o].path));
      if (outputs[o].path.empty())
        continue;
      for (size_t i = 0; i < inputs.size(); ++i)
        // An input that does not exist cannot be overwritten (and fails
        // where it is read).
        if (!inputs[i].path.empty() && in[i].exists &&
            sameFile(out[o], in[i])) {
          error =
              outputs[o].what + " " + outputs[o].path +
              " is the same file as " + inputs[i].what + " " + inputs[i].path +
              "; refusing to overwrite an input (write the output elsewhere)";
          return false;
        }
      for (size_t p = 0; p < o; ++p)
        if (!outputs[p].path.empty() && sameFile(out[o], out[p])) {
          error = outputs[o].what + " " + outputs[o].path + " and " +
                  outputs[p].what + " " + outputs[p].path +
                  " are the same file; give each output its own path";
          return false;
        }
    }
    return true;
  } catch (...) {
    error = "out of memory";
    return false;
  }
}

} // namespace dtc::artifact
