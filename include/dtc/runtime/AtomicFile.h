//===- AtomicFile.h - crash-safe file replacement ----------------*- C++ -*-===//
//
// Writes a file so that a crash or an error at any point leaves either the old
// file or the complete new one, never a torn file: the data goes to a
// temporary file in the same directory, which is fsync'ed, renamed over the
// target, and then the directory is fsync'ed. noexcept throughout.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_ATOMICFILE_H
#define DTC_RUNTIME_ATOMICFILE_H

#include <cstddef>
#include <string>

namespace dtc::rt {

class AtomicFileWriter {
public:
  AtomicFileWriter() = default;
  AtomicFileWriter(const AtomicFileWriter &) = delete;
  AtomicFileWriter &operator=(const AtomicFileWriter &) = delete;
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFileWriter();

  /// Creates the temporary file next to `path`. Errors name no path.
  bool open(const std::string &path, std::string &error) noexcept;
  /// Appends bytes (handles short writes and EINTR).
  bool write(const void *data, size_t size, std::string &error) noexcept;
  /// fsync, rename over the target, fsync the directory.
  bool commit(std::string &error) noexcept;
  /// Drops the temporary file; the target is untouched.
  void abort() noexcept;

private:
  int fd_ = -1;
  std::string target_, temp_;
};

} // namespace dtc::rt

#endif // DTC_RUNTIME_ATOMICFILE_H
