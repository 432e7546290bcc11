//===- InputFiles.cpp - reading dtc compile's inputs safely ---------------===//
#include "InputFiles.h"
#include "dtc/runtime/Suggest.h"
#include "mlir/IR/OperationSupport.h"

#include "dtc/artifact/MemoryPlan.h"

#include "llvm/ADT/ScopeExit.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using llvm::StringRef;

namespace dtc::driver {
namespace {
const char *fileKind(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}
} // namespace

/// "line:col" of the first bracket nested deeper than kMaxNesting, or "".
/// Brackets inside string literals and comments do not count; `->` is not a
/// closing angle bracket.
std::string tooDeeplyNested(StringRef text) {
  int depth = 0, line = 1, col = 0;
  bool inString = false, inComment = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    ++col;
    if (c == '\n') {
      ++line;
      col = 0;
      inComment = false;
      continue;
    }
    if (inComment)
      continue;
    if (inString) {
      if (c == '\\')
        ++i, ++col;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      inComment = true;
    } else if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > kMaxNesting)
        return std::to_string(line) + ":" + std::to_string(col);
    } else if (c == ')' || c == ']' || c == '}' ||
               (c == '>' && (i == 0 || text[i - 1] != '-'))) {
      depth = std::max(depth - 1, 0);
    }
  }
  return "";
}

/// Reads `path` ("-": standard input) whole, refusing, before reading,
/// anything that could block or never end (directories, devices such as
/// /dev/zero, FIFOs, sockets) and anything over `limit` bytes. A pipe on
/// standard input is read up to the limit. On failure returns null and sets
/// `error` (without the path); `what` names the file's purpose.
std::unique_ptr<llvm::MemoryBuffer> readInputFile(const std::string &path,
                                                  uint64_t limit,
                                                  const char *what,
                                                  std::string &error) {
  const bool isStdin = path == "-";
  // Non-blocking: opening a FIFO nobody writes would wait forever.
  int fd = isStdin ? STDIN_FILENO
                   : ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    error = std::strerror(errno);
    return nullptr;
  }
  llvm::scope_exit closeFd([&] {
    if (!isStdin)
      ::close(fd);
  });
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    error = std::strerror(errno);
    return nullptr;
  }
  const bool pipe = isStdin && S_ISFIFO(st.st_mode);
  if (!S_ISREG(st.st_mode) && !pipe) {
    error =
        std::string("it is ") + fileKind(st.st_mode) + ", not a regular file";
    return nullptr;
  }
  auto tooLarge = [&] {
    error = std::string("larger than ") + ::dtc::rt::formatBytes(limit) +
            ", the limit for " + what;
    return nullptr;
  };
  if (!pipe && uint64_t(st.st_size) > limit)
    return tooLarge();
  std::string text;
  if (!pipe)
    text.reserve(size_t(st.st_size));
  char chunk[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      error = std::strerror(errno);
      return nullptr;
    }
    if (n == 0)
      break;
    if (text.size() + size_t(n) > limit)
      return tooLarge();
    text.append(chunk, size_t(n));
  }
  return llvm::MemoryBuffer::getMemBufferCopy(text, isStdin ? "<stdin>" : path);
}

std::string withOpSuggestion(mlir::MLIRContext &ctx,
                             const std::string &message) {
  static const std::string prefix = "unregistered operation 'dtc.";
  if (message.rfind(prefix, 0) != 0)
    return message;
  const size_t end = message.find('\'', prefix.size());
  if (end == std::string::npos)
    return message;
  const std::string name =
      message.substr(prefix.size() - 4, end - prefix.size() + 4);
  std::vector<std::string> ops;
  for (mlir::RegisteredOperationName op : ctx.getRegisteredOperations())
    if (op.getStringRef().starts_with("dtc."))
      ops.push_back(op.getStringRef().str());
  return "unknown op '" + name + "'" + ::dtc::didYouMean(name, ops) +
         " (docs/model-format.md lists the ops)";
}

} // namespace dtc::driver
