//===- ModelFuzzer.cpp - libFuzzer target: model text -> artifact
//-----------===//
//
// Feeds arbitrary text through everything `dtc compile` does in memory:
// parse, verify, the model checks, the training step, the planner, the
// partitioner, emission and the memory check (which re-validates the
// artifact as the runtime would). Any input must end in an artifact or one
// error line; a crash, a sanitizer report, a leak or a hang is a bug.
//
// The first byte picks the compile options (mesh, optimizer, clipping), so
// the corpus also covers planning for several meshes; the rest is the model.
//
//===----------------------------------------------------------------------===//
#include "dtc/Driver/Compile.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  static const std::vector<int64_t> meshes[] = {{1}, {2}, {2, 2}, {4}, {1, 2}};
  static const char *optimizers[] = {"adam", "sgd", "adamw", "none"};
  const unsigned config = data[0];
  dtc::CompileOptions options;
  options.mesh = meshes[config % 5];
  options.optimizer = optimizers[(config / 5) % 4];
  options.gradClip = (config / 20) % 2 ? 1.0 : 0.0;
  // A fixed budget: the host's RAM would make results machine dependent.
  options.deviceMemory = uint64_t(1) << 30;
  const std::string text(reinterpret_cast<const char *>(data) + 1, size - 1);
  nlohmann::json artifact;
  std::string error;
  if (!dtc::compileToArtifact(text, "fuzz.mlir", options, artifact, error) &&
      (error.empty() || error.find('\n') != std::string::npos)) {
    std::fprintf(stderr, "failure without exactly one error line: '%s'\n",
                 error.c_str());
    std::abort();
  }
  return 0;
}
