//===- NoExceptConsumer.cpp - the compiler's view of the libraries --------===//
//
// Built with -fno-exceptions -fno-rtti, like the MLIR-based compiler: checks
// that the artifact library's headers (include/dtc/artifact), the CPU
// kernels' workspace model, LocalRunner.h and Suggest.h compile there and
// that their functions report errors without letting an exception escape.
//
//===----------------------------------------------------------------------===//
#include "dtc/artifact/Artifact.h"
#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/artifact/InitSpec.h"
#include "dtc/artifact/MemoryPlan.h"
#include "dtc/kernels/CpuKernels.h"
#include "dtc/runtime/LocalRunner.h"
#include "dtc/runtime/Suggest.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>

#if defined(__cpp_exceptions) || defined(__GXX_RTTI)
#error "this file must be built with -fno-exceptions -fno-rtti"
#endif

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,    \
                   #cond);                                                     \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

int main() {
  using nlohmann::json;
  // A one-device artifact: loss = cross_entropy(x @ w, y), SGD.
  json body = {
      {"format", "dtc-artifact"},
      {"version", 2},
      {"mesh", {1}},
      {"devices", 1},
      {"communicators", json::array()},
      {"tensors",
       {{{"name", "w"},
         {"role", "param"},
         {"dtype", "f32"},
         {"shape", {4, 3}},
         {"init", "normal(0.5)"},
         {"sharding", {json::array(), json::array()}}},
        {{"name", "x"},
         {"role", "input"},
         {"dtype", "f32"},
         {"shape", {2, 4}},
         {"sharding", {json::array(), json::array()}}},
        {{"name", "y"},
         {"role", "input"},
         {"dtype", "i64"},
         {"shape", {2}},
         {"max", 3},
         {"sharding", {json::array()}}},
        {{"name", "loss"},
         {"role", "loss"},
         {"dtype", "f32"},
         {"shape", json::array()},
         {"sharding", json::array()}}}},
      {"programs",
       {{{"name", "main"},
         {"ranks", {0}},
         {"slots",
          {{{"bytes", 48}, {"category", "param"}},
           {{"bytes", 32}, {"category", "input"}},
           {{"bytes", 16}, {"category", "input"}},
           {{"bytes", 4}, {"category", "scalar"}},
           {{"bytes", 24}, {"category", "activation"}}}},
         {"buffers",
          {{{"slot", 0}, {"dtype", "f32"}, {"shape", {4, 3}}, {"tensor", "w"}},
           {{"slot", 1}, {"dtype", "f32"}, {"shape", {2, 4}}, {"tensor", "x"}},
           {{"slot", 2}, {"dtype", "i64"}, {"shape", {2}}, {"tensor", "y"}},
           {{"slot", 3},
            {"dtype", "f32"},
            {"shape", json::array()},
            {"tensor", "loss"}},
           {{"slot", 4}, {"dtype", "f32"}, {"shape", {2, 3}}}}},
         {"instructions",
          {{{"op", "matmul"}, {"in", {1, 0}}, {"out", {4}}},
           {{"op", "cross_entropy"}, {"in", {4, 2}}, {"out", {3}}}}}}}}};

  std::string error;
  CHECK(dtc::rt::checkArtifact(body, "c.dtc", 1, error));
  dtc::artifact::Artifact parsed;
  CHECK(dtc::artifact::parseArtifact(body, "c.dtc", parsed, error));
  CHECK(!dtc::artifact::parseArtifact(json::object(), "c.dtc", parsed, error));
  dtc::artifact::InitSpec init;
  CHECK(dtc::artifact::parseInitSpec("uniform(-1, 1)", init));
  CHECK(!dtc::rt::checkArtifact(body, "c.dtc", 2, error));
  CHECK(error.find("compiled for 1 device") != std::string::npos);

  std::vector<dtc::rt::MemoryNeed> needs;
  CHECK(dtc::artifact::artifactMemoryNeeds(
      body, "c.dtc", 1, dtc::kernels::cpu::workspaceModel(), needs, error));
  CHECK(needs.size() == 1 && needs[0].peak > 48 + 32 + 16 + 4 + 24);
  json broken = body;
  broken["programs"][0]["instructions"][0]["op"] = "conv2d";
  CHECK(!dtc::artifact::artifactMemoryNeeds(
      broken, "c.dtc", 1, dtc::kernels::cpu::workspaceModel(), needs, error));
  CHECK(error.find("unknown kernel") != std::string::npos);
  uint64_t bytes = 0;
  CHECK(dtc::rt::parseByteSize("2GiB", bytes) && bytes == (uint64_t(2) << 30));
  CHECK(!dtc::rt::parseByteSize("2 GiB", bytes));
  CHECK(dtc::didYouMean("--stpes", {"--steps"}) == "; did you mean '--steps'?");

  const std::string file = dtc::rt::encodeArtifact(body);
  std::string decoded;
  CHECK(dtc::rt::decodeArtifact(file, decoded, error));
  CHECK(!dtc::rt::decodeArtifact(file + "x", decoded, error));

  auto run = dtc::rt::LocalRunner::loadBytes(file, "c.dtc", error);
  CHECK(run);
  CHECK(run->initialize(1, error));
  CHECK(run->setTensor("x", std::vector<float>{1, 0, 0, 0, 0, 1, 0, 0}, error));
  CHECK(run->setTensor("y", std::vector<int64_t>{0, 2}, error));
  CHECK(run->runStep(error));
  float loss = 0;
  CHECK(run->loss(loss, error));
  CHECK(loss > 0);
  // Errors come back as values.
  CHECK(!run->setTensor("y", std::vector<int64_t>{0, 7}, error) ||
        !run->runStep(error));
  CHECK(error.find("label 7") != std::string::npos);
  CHECK(!run->setTensor("nope", std::vector<float>{1}, error));
  CHECK(dtc::rt::LocalRunner::loadBytes("junk", "j.dtc", error) == nullptr);
  std::printf("ok: loss %.6f\n", double(loss));
  return 0;
}
