//===- ArtifactFuzzer.cpp - libFuzzer target: the artifact loader
//----------===//
//
// Feeds arbitrary bytes to the runtime's loader and validator. An input that
// starts with the container's magic word is a whole .dtc file; anything else
// is a JSON body that this target wraps in a correct container (so mutations
// reach the schema and the checks instead of failing the hash). Every input
// must be accepted or refused with a dtc::rt::Error; a valid artifact also
// gets its memory plan computed and, when it is small (one program, at most
// four ranks, a few MiB), is run for one step on in-process ranks: the
// validator's promise is that what it accepts cannot crash the kernels.
//
//===----------------------------------------------------------------------===//
#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/Artifact.h"
#include "dtc/runtime/LocalRunner.h"
#include "dtc/runtime/MemoryPlan.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string input(reinterpret_cast<const char *>(data), size);
  const std::string file = input.rfind("dtc-artifact", 0) == 0
                               ? input
                               : dtc::rt::encodeArtifactBody(input);
  bool small = false;
  try {
    dtc::rt::Artifact a = dtc::rt::loadArtifactBytes(file, "fuzz.dtc");
    uint64_t peak = 0;
    for (const dtc::rt::MemoryNeed &need : dtc::rt::memoryNeeds(a, 2))
      peak = std::max(peak, need.peak);
    small = a.programs.size() == 1 && a.devices <= 4 &&
            peak * uint64_t(a.devices) <= (8u << 20);
  } catch (const dtc::rt::Error &e) {
    if (std::string(e.what()).rfind("fuzz.dtc: ", 0) != 0) {
      std::fprintf(stderr, "error without the file name: %s\n", e.what());
      std::abort();
    }
    return 0;
  }
  if (!small)
    return 0;
  std::string error;
  auto runner = dtc::rt::LocalRunner::loadBytes(file, "fuzz.dtc", error);
  if (!runner)
    return 0;
  if (runner->initialize(1, error) && runner->fillSyntheticInputs(0, error))
    runner->runStep(error);
  return 0;
}
