//===- Artifact.h - the runtime's view of the artifact library --*- C++ -*-===//
//
// The artifact library (include/dtc/artifact/Artifact.h) reports problems
// as messages; the runtime stops on them. These wrappers throw its one
// exception type, dtc::rt::Error, with the library's message unchanged.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_ARTIFACT_H
#define DTC_RUNTIME_ARTIFACT_H

#include "dtc/artifact/Artifact.h"

namespace dtc::rt {

/// Parses and validates a JSON body; `label` prefixes every message.
inline Artifact parseArtifact(const nlohmann::json &body,
                              const std::string &label) {
  Artifact a;
  std::string error;
  if (!artifact::parseArtifact(body, label, a, error))
    throw Error(error);
  return a;
}

/// Checks the container, parses and validates.
inline Artifact loadArtifactBytes(std::string_view fileBytes,
                                  const std::string &label) {
  Artifact a;
  std::string error;
  if (!artifact::loadArtifactBytes(fileBytes, label, a, error))
    throw Error(error);
  return a;
}

/// Reads the file, then loadArtifactBytes with the path as label.
inline Artifact loadArtifactFile(const std::string &path) {
  Artifact a;
  std::string error;
  if (!artifact::loadArtifactFile(path, a, error))
    throw Error(error);
  return a;
}

/// Throws unless the artifact's device count equals `ranks`.
inline void checkRankCount(const Artifact &a, int64_t ranks) {
  std::string error;
  if (!artifact::checkRankCount(a, ranks, error))
    throw Error(error);
}

} // namespace dtc::rt

#endif // DTC_RUNTIME_ARTIFACT_H
