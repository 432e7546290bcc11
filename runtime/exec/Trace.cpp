//===- Trace.cpp - Chrome / Perfetto trace events (see Trace.h)
//-------------===//
#include "dtc/runtime/Trace.h"
#include "dtc/artifact/Types.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sys/stat.h>
#include <unistd.h>

namespace dtc::rt {

namespace {
/// "12.345": nanoseconds as microseconds, exactly (so an event that ends
/// inside another never seems to stick out by a rounding).
std::string micros(int64_t ns) {
  char buf[48];
  const char *sign = ns < 0 ? "-" : "";
  const uint64_t a = ns < 0 ? uint64_t(-ns) : uint64_t(ns);
  std::snprintf(buf, sizeof buf, "%s%llu.%03llu", sign,
                (unsigned long long)(a / 1000), (unsigned long long)(a % 1000));
  return buf;
}

std::string metadata(int pid, int tid, const char *name,
                     const std::string &args) {
  return "{\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":" + std::to_string(tid) + ",\"ts\":0,\"name\":\"" + name +
         "\",\"args\":" + args + "}";
}
} // namespace

int64_t TraceWriter::nowNs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string TraceWriter::quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += char(
            c); // UTF-8 passes through; names come from a validated artifact
      }
    }
  }
  return out + "\"";
}

std::string TraceWriter::rankPath(const std::string &dir, int rank) {
  return dir + (dir.empty() || dir.back() == '/' ? "" : "/") + "rank-" +
         std::to_string(rank) + ".json";
}

TraceWriter::TraceWriter(const std::string &path, int rank,
                         const std::string &otherData)
    : path_(path), pid_(rank + 1) {
  std::string err;
  if (!out_.open(path, err))
    throw Error(path + ": cannot write the trace: " + err);
  pending_ = "{\"displayTimeUnit\":\"ms\",";
  if (!otherData.empty())
    pending_ += "\"otherData\":" + otherData + ",";
  pending_ += "\"traceEvents\":[\n";
  // pid 0 means "no process" to some viewers: rank R is process R + 1.
  const std::string rankName = "rank " + std::to_string(rank);
  event(
      metadata(pid_, 0, "process_name", "{\"name\":" + quote(rankName) + "}"));
  event(metadata(pid_, 0, "process_sort_index",
                 "{\"sort_index\":" + std::to_string(rank) + "}"));
  const char *threads[] = {"steps", "compute", "comm"};
  for (int tid : {kSteps, kCompute, kComm}) {
    event(metadata(pid_, tid, "thread_name",
                   "{\"name\":" + quote(threads[tid - 1]) + "}"));
    event(metadata(pid_, tid, "thread_sort_index",
                   "{\"sort_index\":" + std::to_string(tid) + "}"));
  }
}

TraceWriter::~TraceWriter() = default; // an unfinished file is dropped

void TraceWriter::event(const std::string &text) {
  if (!first_)
    pending_ += ",\n";
  first_ = false;
  pending_ += text;
}

void TraceWriter::complete(int tid, std::string_view name,
                           std::string_view category, int64_t startNs,
                           int64_t endNs, std::string_view args) {
  std::string e = "{\"ph\":\"X\",\"pid\":" + std::to_string(pid_) +
                  ",\"tid\":" + std::to_string(tid) +
                  ",\"ts\":" + micros(startNs) +
                  ",\"dur\":" + micros(endNs > startNs ? endNs - startNs : 0) +
                  ",\"name\":" + quote(name) + ",\"cat\":" + quote(category);
  if (!args.empty()) {
    e += ",\"args\":";
    e += args;
  }
  event(e + "}");
}

void TraceWriter::counter(
    std::string_view name, int64_t atNs,
    const std::vector<std::pair<std::string, uint64_t>> &values) {
  std::string e = "{\"ph\":\"C\",\"pid\":" + std::to_string(pid_) +
                  ",\"tid\":" + std::to_string(kSteps) +
                  ",\"ts\":" + micros(atNs) + ",\"name\":" + quote(name) +
                  ",\"args\":{";
  for (size_t i = 0; i < values.size(); ++i)
    e += (i ? "," : "") + quote(values[i].first) + ":" +
         std::to_string(values[i].second);
  event(e + "}}");
}

void TraceWriter::flush() {
  if (pending_.empty())
    return;
  std::string err;
  if (!out_.write(pending_.data(), pending_.size(), err))
    throw Error(path_ + ": cannot write the trace: " + err);
  pending_.clear();
}

void TraceWriter::finish() {
  if (finished_)
    return;
  pending_ += "\n]}\n";
  flush();
  std::string err;
  if (!out_.commit(err))
    throw Error(path_ + ": cannot write the trace: " + err);
  finished_ = true;
}

void prepareTraceDirectory(const std::string &dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      throw Error("--trace " + dir + ": not a directory");
  } else if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
    throw Error("--trace " + dir +
                ": cannot create the directory: " + std::strerror(errno));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error("--trace " + dir + ": the directory is not writable");
}

} // namespace dtc::rt
