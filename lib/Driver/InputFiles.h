//===- InputFiles.h - reading dtc compile's inputs safely -------*- C++ -*-===//
//
// Internal to lib/Driver: the model and hardware files are read with a size
// limit (a directory, a FIFO or a huge file is one clear error, not a hang
// or an out-of-memory), and model text is checked for nesting deeper than
// MLIR's recursive parser can take.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_LIB_DRIVER_INPUTFILES_H
#define DTC_LIB_DRIVER_INPUTFILES_H

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>
#include <string>

namespace dtc::driver {

constexpr int kMaxNesting = 256;
constexpr uint64_t kMaxModelBytes = uint64_t(1) << 30;
constexpr uint64_t kMaxHardwareFileBytes = uint64_t(1) << 20;

/// MLIR's "unregistered operation 'dtc.gelo' found in dialect ('dtc') ..."
/// as one line with the closest dtc op registered in `ctx`, as dtc's flags
/// and attributes get; any other message as it is.
std::string withOpSuggestion(mlir::MLIRContext &ctx,
                             const std::string &message);

/// "line:col" of the first bracket nested deeper than kMaxNesting, or "".
std::string tooDeeplyNested(llvm::StringRef text);

/// The file at `path` ("-": standard input), at most `limit` bytes, or
/// null with `error` (what `kind` of file it should have been and why not).
std::unique_ptr<llvm::MemoryBuffer> readInputFile(const std::string &path,
                                                  uint64_t limit,
                                                  const char *kind,
                                                  std::string &error);

} // namespace dtc::driver

#endif // DTC_LIB_DRIVER_INPUTFILES_H
