//===- ScratchDir.h - one temporary directory per test process ---*- C++ -*-===//
#ifndef DTC_TEST_SCRATCHDIR_H
#define DTC_TEST_SCRATCHDIR_H

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace dtc::test {

/// A directory under $TMPDIR (default /tmp) made on first use and removed
/// with its contents when the process that made it exits, so the tests
/// leave nothing behind. A forked child (EXPECT_EXIT) that exits does not
/// remove it.
class ScratchDir {
public:
  explicit ScratchDir(const std::string &prefix) : owner_(::getpid()) {
    const char *tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
    if (!::mkdtemp(tmpl.data()))
      throw std::runtime_error("cannot create a scratch directory from " + tmpl);
    path_ = tmpl;
  }
  ~ScratchDir() {
    if (::getpid() != owner_)
      return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir &) = delete;
  ScratchDir &operator=(const ScratchDir &) = delete;
  const std::string &path() const { return path_; }

private:
  std::string path_;
  pid_t owner_;
};

/// This process's scratch directory (one per prefix, made on first use).
inline const std::string &scratchDir(const char *prefix) {
  static ScratchDir dir(prefix);
  return dir.path();
}

} // namespace dtc::test

#endif // DTC_TEST_SCRATCHDIR_H
