//===- testgen.cpp - artifacts and checks for the mpirun tests
//-------------===//
//
//   dtc-rt-testgen gen DIR                 write the test artifacts + token
//   files dtc-rt-testgen check-coll CKPT SEED    check coll.dtc's results saved
//   by dtc-run dtc-rt-testgen compare CKPT_A CKPT_B TOL
//                                          same tensors, values within TOL
//
//===----------------------------------------------------------------------===//
#include "TestArtifacts.h"

#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/runtime/Random.h"
#include "dtc/runtime/Safetensors.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

using namespace dtc::rt;
using dtc::test::json;

namespace {

int fail(const std::string &msg) {
  std::fprintf(stderr, "dtc-rt-testgen: %s\n", msg.c_str());
  return 1;
}

void write(const std::string &dir, const std::string &name, const json &body) {
  std::string err;
  if (!writeArtifactFile(dir + "/" + name, body, err))
    throw Error(err);
}

int gen(const std::string &dir) {
  std::filesystem::create_directories(dir);
  using dtc::test::LmConfig;
  using dtc::test::MlpConfig;
  MlpConfig c;
  write(dir, "mlp1.dtc", dtc::test::mlpArtifact(c));
  c.mesh = {2};
  c.dpAxes = {0};
  write(dir, "mlp_dp2.dtc", dtc::test::mlpArtifact(c));
  c.mesh = {2, 2};
  c.dpAxes = {0, 1};
  write(dir, "mlp_dp4.dtc", dtc::test::mlpArtifact(c));
  c.dpAxes = {0};
  c.tpAxis = 1;
  write(dir, "mlp_tp.dtc", dtc::test::mlpArtifact(c));
  write(dir, "coll.dtc", dtc::test::collectivesArtifact());
  write(dir, "pp2.dtc", dtc::test::pipelineArtifact());
  LmConfig l;
  write(dir, "lm1.dtc", dtc::test::lmArtifact(l));
  l.mesh = {2};
  write(dir, "lm2.dtc", dtc::test::lmArtifact(l));
  l.mesh = {2, 2};
  l.idsMax = 500;
  write(dir, "lm_badids.dtc", dtc::test::lmArtifact(l));
  // Two programs that disagree on their first all-reduce (8 vs 4 floats).
  write(dir, "mismatch.dtc",
        dtc::test::programsArtifact({{"all_reduce", 8, "sum", "a"}},
                                    {{"all_reduce", 4, "sum", "a"}}));
  // More communicators than Open MPI can create in one process.
  dtc::test::json many = dtc::test::mlpArtifact({});
  for (int i = 0; i < 70000; ++i)
    many["communicators"].push_back(
        {{"name", "c" + std::to_string(i)}, {"mesh_axes", {0}}});
  write(dir, "many_comms.dtc", many);
  std::vector<uint16_t> toks(600);
  for (size_t i = 0; i < toks.size(); ++i)
    toks[i] = uint16_t((i * i + 7 * i) % 50);
  std::string err;
  if (!writeOutputFile(dir + "/tokens.bin",
                       std::string(reinterpret_cast<const char *>(toks.data()),
                                   2 * toks.size()),
                       err))
    throw Error(err);
  toks[123] = 60;
  if (!writeOutputFile(dir + "/tokens_bad.bin",
                       std::string(reinterpret_cast<const char *>(toks.data()),
                                   2 * toks.size()),
                       err))
    throw Error(err);
  return 0;
}

std::vector<float> floats(const SafetensorsReader &r, const std::string &name) {
  const SafetensorsEntry *e = r.find(name);
  if (!e || e->dtypeName != "F32")
    throw Error(r.path() + ": no F32 tensor '" + name + "'");
  std::vector<float> v(size_t(numel(e->shape)));
  r.read(*e, 0, v.data(), v.size() * 4);
  return v;
}

int checkColl(const std::string &ckpt, uint64_t seed) {
  SafetensorsReader r(ckpt);
  const Shape g{4, 6};
  std::vector<float> X(24);
  fillSynthetic(X.data(), DType::F32, 0, seed, "x", g, Piece{g, {0, 0}, g}, 0);
  int bad = 0;
  for (const auto &[name, want] : dtc::test::collectivesExpected(X)) {
    std::vector<float> got = floats(r, name);
    if (got.size() != want.size())
      return fail(name + ": wrong size");
    for (size_t i = 0; i < got.size(); ++i)
      if (std::fabs(got[i] - want[i]) > 1e-5f * (1 + std::fabs(want[i]))) {
        std::fprintf(stderr, "%s[%zu]: got %g want %g\n", name.c_str(), i,
                     double(got[i]), double(want[i]));
        ++bad;
      }
  }
  if (bad)
    return fail(std::to_string(bad) + " wrong values");
  std::printf("collectives ok\n");
  return 0;
}

int compare(const std::string &a, const std::string &b, double tol) {
  SafetensorsReader ra(a), rb(b);
  if (ra.entries().size() != rb.entries().size())
    return fail("different tensor counts");
  for (const SafetensorsEntry &e : ra.entries()) {
    const SafetensorsEntry *f = rb.find(e.name);
    if (!f || f->shape != e.shape || f->dtypeName != e.dtypeName)
      return fail("tensor '" + e.name +
                  "' differs in presence, shape or dtype");
    std::vector<float> x = floats(ra, e.name), y = floats(rb, e.name);
    for (size_t i = 0; i < x.size(); ++i)
      if (!(std::fabs(x[i] - y[i]) <= tol * (1 + std::fabs(y[i]))))
        return fail(e.name + "[" + std::to_string(i) + "]: " +
                    std::to_string(x[i]) + " vs " + std::to_string(y[i]));
  }
  std::printf("checkpoints match\n");
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "gen" && argc == 3)
      return gen(argv[2]);
    if (cmd == "check-coll" && argc == 4)
      return checkColl(argv[2], std::strtoull(argv[3], nullptr, 10));
    if (cmd == "compare" && argc == 5)
      return compare(argv[2], argv[3], std::atof(argv[4]));
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  return fail(
      "usage: dtc-rt-testgen gen DIR | check-coll CKPT SEED | compare A B TOL");
}
