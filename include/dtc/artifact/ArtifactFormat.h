//===- ArtifactFormat.h - the .dtc container --------------------*- C++ -*-===//
//
// The container of a `.dtc` artifact:
//
//   dtc-artifact 1 <body-bytes> <fnv1a64-hex>\n<body>
//
// Library `dtc_artifact`: depends on nlohmann_json only (no MPI, no
// BLAS). Every function here is `noexcept`: none lets an exception escape, so
// code built with -fno-exceptions (the compiler) may call all of them. Errors
// come back as a message string (no trailing newline, no "error:" prefix).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_ARTIFACT_ARTIFACTFORMAT_H
#define DTC_ARTIFACT_ARTIFACTFORMAT_H

#include "dtc/artifact/OutputFile.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace dtc::artifact {

/// The container version this library reads and writes.
constexpr int kArtifactContainerVersion = 1;
/// The body version (docs/artifact.md) the compiler writes and the runtime
/// reads. 2: shardings may split a dimension unevenly (padded pieces); the
/// local ops of tensor parallelism.
constexpr int kArtifactVersion = 2;

/// The most elements one (global) tensor may have; the compiler rejects
/// larger models up front and the runtime rejects larger artifacts.
constexpr int64_t kMaxTensorElements = int64_t(1) << 50;

/// The largest artifact file the runtime reads (its JSON would need about
/// ten times that in memory).
constexpr uint64_t kMaxArtifactFileBytes = uint64_t(4) << 30;

/// The deepest JSON nesting parseJsonText accepts. dtc's own files nest a
/// handful of levels; the limit keeps recursive code (printing, freeing)
/// safe on hostile input.
constexpr size_t kMaxJsonDepth = 100;

/// 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t fnv1a64(std::string_view bytes) noexcept;

/// 16 lowercase hex digits.
std::string hex64(uint64_t v) noexcept;

/// The whole file text for a body given as JSON: the header line followed by
/// `body.dump()` (compact, UTF-8; invalid UTF-8 in strings is replaced by
/// U+FFFD rather than failing). Returns "" only if memory runs out.
std::string encodeArtifact(const nlohmann::json &body) noexcept;

/// The whole file text for an already serialized body.
std::string encodeArtifactBody(std::string_view body) noexcept;

/// Checks the container of `fileBytes` (magic, version, length, hash, nothing
/// after the body) and returns the body bytes in `body`. On failure returns
/// false and sets `error`, e.g. "body hash mismatch (file edited or
/// corrupted?)". `body` is left empty on failure.
bool decodeArtifact(std::string_view fileBytes, std::string &body,
                    std::string &error) noexcept;

/// Like decodeArtifact, then parses the body as JSON (which must be an
/// object). On a JSON syntax error, `error` names the byte offset.
bool decodeArtifactJson(std::string_view fileBytes, nlohmann::json &body,
                        std::string &error) noexcept;

/// Writes `encodeArtifact(body)` to `path` through an OutputFile (a regular
/// file is replaced atomically, /dev/null and FIFOs are written in place).
/// On failure the old file (if any) is untouched, no temporary file is
/// left, and `error` names the path and the reason.
bool writeArtifactFile(const std::string &path, const nlohmann::json &body,
                       std::string &error) noexcept;

/// Reads a whole regular file of at most `maxBytes` bytes into `out` (a
/// device, FIFO or directory is refused before anything is read). On
/// failure sets `error` ("cannot open: No such file or directory") without
/// the path.
bool readFileBytes(const std::string &path, std::string &out,
                   std::string &error,
                   uint64_t maxBytes = kMaxArtifactFileBytes) noexcept;

/// Standard base64 (RFC 4648, with '=' padding): the encoding of a constant's
/// `data` in the artifact (little-endian element bytes).
std::string base64Encode(std::string_view bytes) noexcept;
/// Decodes standard base64; padding may be omitted. False on a bad character
/// or length.
bool base64Decode(std::string_view text, std::string &out) noexcept;

/// Parses JSON text without throwing. Nesting deeper than kMaxJsonDepth is
/// refused before parsing. On failure `error` is nlohmann's message (it
/// names the byte offset). `out` must be a json value.
bool parseJsonText(std::string_view text, nlohmann::json &out,
                   std::string &error) noexcept;

} // namespace dtc::artifact

namespace dtc::rt {
using namespace ::dtc::artifact;
} // namespace dtc::rt

#endif // DTC_ARTIFACT_ARTIFACTFORMAT_H
