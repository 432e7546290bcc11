//===- OutputFile.h - every file the tools write ----------------*- C++ -*-===//
//
// One helper for every path dtc and dtc-run write (-o, --report, --save,
// --log, --stats, checkpoints), so that writing never destroys what the user
// did not ask to replace:
//   - a regular file, or a path that does not exist yet, is replaced
//     atomically: the bytes go to a temporary file in the same directory,
//     which is fsync'ed and renamed over the target, then the directory is
//     fsync'ed; a crash, an error or a signal leaves the old file or the
//     complete new one, and no temporary file;
//   - a character device, FIFO or socket is written in place (`-o /dev/null`
//     and `-o /dev/stdout` work and stay what they are); "-" and /dev/stdout,
//     /dev/stderr, /dev/fd/N and /proc/self/fd/N write to that descriptor;
//   - a symbolic link is followed: its target is replaced, the link stays;
//   - a directory or a block device is refused.
// checkOutputsDistinct() refuses an output that names an input or another
// output before anything is written.
//
// Library dtc_artifact; noexcept throughout (the compiler, built
// without exceptions, uses it). Errors are one line without the path.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_ARTIFACT_OUTPUTFILE_H
#define DTC_ARTIFACT_OUTPUTFILE_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtc::artifact {

class OutputFile {
public:
  OutputFile() = default;
  OutputFile(const OutputFile &) = delete;
  OutputFile &operator=(const OutputFile &) = delete;
  /// Drops the temporary file (and closes the descriptor) unless commit()
  /// succeeded.
  ~OutputFile();

  /// Starts replacing `path` (see the file comment for what that means for
  /// each kind of file).
  bool open(const std::string &path, std::string &error) noexcept;
  /// Opens `path` to append (a log written as it goes): a regular file is
  /// extended in place (created if missing; with `startEmpty`, first
  /// replaced atomically by an empty file), other kinds are written as by
  /// open().
  bool openAppend(const std::string &path, bool startEmpty,
                  std::string &error) noexcept;
  /// Appends bytes (short writes and EINTR handled).
  bool write(const void *data, size_t size, std::string &error) noexcept;
  /// Whether writeAt() is possible: the bytes go to a temporary file.
  bool seekable() const { return mode_ == Mode::Replace; }
  /// Overwrites bytes already written (e.g. a checksum placeholder).
  bool writeAt(uint64_t offset, const void *data, size_t size,
               std::string &error) noexcept;
  /// Replace: fsync, rename over the target, fsync the directory. Others:
  /// close (and fsync an appended regular file).
  bool commit(std::string &error) noexcept;
  /// Drops the temporary file; the target is untouched.
  void abort() noexcept;

  /// The file that is really written (the target of a symbolic link).
  const std::string &target() const { return target_; }

private:
  enum class Mode { None, Replace, Append, InPlace };
  bool start(const std::string &path, bool append, bool startEmpty,
             std::string &error);
  int fd_ = -1;
  int tempSlot_ = -1;
  Mode mode_ = Mode::None;
  std::string target_, temp_;
};

/// Replaces `path` with `bytes` through an OutputFile.
bool writeOutputFile(const std::string &path, std::string_view bytes,
                     std::string &error) noexcept;

/// A path a command reads or writes, with how the user named it in messages
/// ("-o", "--log", "the model", ...).
struct NamedPath {
  std::string what;
  std::string path;
};

/// Refuses (false + `error`) an output naming the same file as an input or
/// as another output: the same device and inode when the file exists, the
/// same canonical path (symbolic links followed) when it does not yet.
/// Character devices, FIFOs and sockets never clash (writing them destroys
/// nothing), nor do inputs that do not exist. Empty paths are ignored.
bool checkOutputsDistinct(const std::vector<NamedPath> &inputs,
                          const std::vector<NamedPath> &outputs,
                          std::string &error) noexcept;

/// Removes every temporary file a live OutputFile of this process holds.
/// Async-signal-safe: for signal handlers.
void removeLiveTemporaryFiles() noexcept;

/// For tools without signal handling of their own: on SIGINT, SIGTERM or
/// SIGHUP, remove the live temporary files, then die of that signal.
void removeTemporaryFilesOnSignals() noexcept;

} // namespace dtc::artifact

namespace dtc::rt {
using namespace ::dtc::artifact;
} // namespace dtc::rt

#endif // DTC_ARTIFACT_OUTPUTFILE_H
