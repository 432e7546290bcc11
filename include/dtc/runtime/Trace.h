//===- Trace.h - one rank's timeline as a Chrome / Perfetto trace -*- C++
//-*-===//
//
// `dtc run --trace DIR` writes DIR/rank-R.json per rank in the trace-event
// format (docs/runtime.md "Traces"): a JSON object with "traceEvents" and
// "displayTimeUnit", complete events ("ph": "X") with pid, tid, ts and dur
// in microseconds, counter events ("C") for memory, and metadata ("M")
// naming the process ("rank R") and its threads (steps, compute, comm).
// Timestamps are CLOCK_MONOTONIC, shared by the processes of a node, so the
// files of several ranks can be merged into one timeline.
//
// The events are rendered as they come and written through an OutputFile
// (flush() after each step), so a long run holds one step's worth in
// memory; finish() closes the JSON and commits the file. An unfinished
// writer leaves no file (and no temporary one).
//
// Internal to the runtime: throws dtc::rt::Error.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRACE_H
#define DTC_RUNTIME_TRACE_H

#include "dtc/artifact/OutputFile.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtc::rt {

class TraceWriter {
public:
  /// Thread ids of a rank's process: what the host loop does (steps, the
  /// program's runs, inputs, checkpoints), the kernels, the collectives.
  static constexpr int kSteps = 1, kCompute = 2, kComm = 3;

  /// Starts `path` for rank `rank` of `ranks`; `otherData` (a JSON object's
  /// text or "") is stored under "otherData".
  TraceWriter(const std::string &path, int rank,
              const std::string &otherData = "");
  ~TraceWriter();

  /// The trace's clock: CLOCK_MONOTONIC in nanoseconds.
  static int64_t nowNs();
  /// A JSON string literal of `s` (quotes, escapes).
  static std::string quote(std::string_view s);
  /// DIR/rank-R.json
  static std::string rankPath(const std::string &dir, int rank);

  /// A complete event from `startNs` to `endNs` (>= startNs) on thread
  /// `tid`; `args` is a JSON object's text or "".
  void complete(int tid, std::string_view name, std::string_view category,
                int64_t startNs, int64_t endNs, std::string_view args);
  /// A counter event: one track per value.
  void counter(std::string_view name, int64_t atNs,
               const std::vector<std::pair<std::string, uint64_t>> &values);
  /// Writes the events rendered so far to the file.
  void flush();
  /// Closes the JSON and commits the file.
  void finish();
  const std::string &path() const { return path_; }

private:
  void event(const std::string &text);
  std::string path_;
  int pid_;
  OutputFile out_;
  std::string pending_;
  bool first_ = true, finished_ = false;
};

/// Creates `dir` if it does not exist (its parent must); throws Error naming
/// --trace when it cannot, or when it is not a writable directory.
void prepareTraceDirectory(const std::string &dir);

} // namespace dtc::rt

#endif // DTC_RUNTIME_TRACE_H
