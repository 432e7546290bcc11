//===- Parse.cpp - parse and validate the artifact body -------------------===//
//
// The library's entry points and the body's top-level sections; the steps
// are declared in Parser.h.
//
//===----------------------------------------------------------------------===//
#include "Parser.h"

#include <algorithm>
#include <set>

namespace dtc::artifact {

// ---- Artifact lookups ---------------------------------------------------

Piece pieceOf(const Mesh &mesh, const TensorDecl &d,
              const std::vector<int64_t> &coords) {
  Piece p = pieceOf(mesh, d.sharding, d.shape, coords, d.pieces);
  p.orderedDim = d.orderedDim;
  p.orderedWays = d.orderedWays;
  p.order = d.order;
  return p;
}

int Artifact::findTensor(const std::string &name) const {
  if (tensorIndex.size() == tensors.size()) {
    auto it = tensorIndex.find(name);
    return it == tensorIndex.end() ? -1 : it->second;
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name)
      return int(i);
  return -1;
}
int Artifact::findComm(const std::string &name) const {
  for (size_t i = 0; i < comms.size(); ++i)
    if (comms[i].name == name)
      return int(i);
  return -1;
}
bool Artifact::hasEvaluation() const {
  return !programs.empty() &&
         std::all_of(programs.begin(), programs.end(),
                     [](const ProgramDecl &p) { return p.hasEvaluation; });
}
int Artifact::programOf(int64_t rank) const {
  for (size_t p = 0; p < programs.size(); ++p)
    for (int r : programs[p].ranks)
      if (r == rank)
        return int(p);
  return -1;
}
std::vector<int> Artifact::tensorsWithRole(Role r) const {
  std::vector<int> out;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].role == r)
      out.push_back(int(i));
  return out;
}
int Artifact::bufferOf(int p, int t) const {
  const ProgramDecl &prog = programs[size_t(p)];
  if (prog.tensorBuffer.size() == tensors.size())
    return t >= 0 && size_t(t) < tensors.size() ? prog.tensorBuffer[size_t(t)]
                                                : -1;
  for (size_t b = 0; b < prog.buffers.size(); ++b)
    if (prog.buffers[b].tensor == t)
      return int(b);
  return -1;
}

namespace detail {

Artifact Parser::parse(const json &body) {
  Artifact a;
  a.label = label_;
  object(body, "");
  if (str(req(body, "format", ""), "format") != "dtc-artifact")
    fail("format", "expected \"dtc-artifact\"");
  int64_t version = integer(req(body, "version", ""), "version");
  if (version != kArtifactVersion)
    fail("version", "unsupported body version " + std::to_string(version) +
                        " (this runtime reads version " +
                        std::to_string(kArtifactVersion) +
                        "; recompile the model with this dtc)");
  a.version = kArtifactVersion;
  if (const json *v = opt(body, "producer"))
    a.producer = str(*v, "producer");
  if (const json *v = opt(body, "source"))
    a.source = str(*v, "source");
  std::vector<int64_t> mesh = ints(req(body, "mesh", ""), "mesh");
  if (mesh.empty())
    fail("mesh", "must list at least one axis");
  int64_t prod = 1;
  for (int64_t m : mesh) {
    if (m < 1)
      fail("mesh", "axis sizes must be >= 1");
    if (prod > (int64_t(1) << 24) / m)
      fail("mesh", "too many devices");
    prod *= m;
  }
  a.mesh = Mesh(mesh);
  a.devices = integer(req(body, "devices", ""), "devices");
  if (a.devices != prod)
    fail("devices", std::to_string(a.devices) + " does not match the mesh " +
                        a.mesh.str() + " (" + std::to_string(prod) +
                        " devices)");
  if (const json *v = opt(body, "plan"))
    a.plan = object(*v, "plan");
  if (const json *v = opt(body, "optimizer"))
    a.optimizer = object(*v, "optimizer");
  if (const json *v = opt(body, "memory")) {
    const json &m = object(*v, "memory");
    for (auto [key, field] : {std::pair{"budget_bytes", &a.memoryBudgetBytes},
                              std::pair{"peak_bytes", &a.memoryPeakBytes}})
      if (const json *n = opt(m, key)) {
        int64_t bytes = integer(*n, std::string("memory.") + key);
        if (bytes < 0)
          fail(std::string("memory.") + key, "must be >= 0");
        *field = uint64_t(bytes);
      }
  }

  parseCommunicators(array(req(body, "communicators", ""), "communicators"), a);
  parseTensors(array(req(body, "tensors", ""), "tensors"), a);

  if (const json *pv = opt(body, "pipeline"))
    parsePipelineSection(*pv, a);
  std::vector<int> owner(static_cast<size_t>(a.devices), -1);
  parsePrograms(array(req(body, "programs", ""), "programs"), a, owner);
  checkPipeline(a);
  checkTensorsBound(a);
  if (!agreementChecked_)
    checkProgramsAgree(a, owner);
  checkEvaluation(a, owner);
  return a;
}

void Parser::parseCommunicators(const json &comms, Artifact &a) {
  std::set<std::string> commNames;
  for (size_t i = 0; i < comms.size(); ++i) {
    std::string w = "communicators[" + std::to_string(i) + "]";
    object(comms[i], w);
    CommDecl c;
    c.name = str(req(comms[i], "name", w), w + ".name");
    if (c.name.empty())
      fail(w, "empty communicator name");
    w = "communicator '" + c.name + "'";
    if (!commNames.insert(c.name).second)
      fail(w, "declared twice");
    for (int64_t ax : ints(req(comms[i], "mesh_axes", w), w + ": mesh_axes")) {
      if (ax < 0 || ax >= a.mesh.numAxes())
        fail(w, "mesh axis " + std::to_string(ax) +
                    " does not exist (the mesh " + a.mesh.str() + " has " +
                    std::to_string(a.mesh.numAxes()) + " axes)");
      if (std::find(c.meshAxes.begin(), c.meshAxes.end(), int(ax)) !=
          c.meshAxes.end())
        fail(w, "mesh axis " + std::to_string(ax) + " listed twice");
      c.meshAxes.push_back(int(ax));
    }
    a.comms.push_back(std::move(c));
  }
}

void Parser::parsePipelineSection(const json &pv, Artifact &a) {
  object(pv, "pipeline");
  PipelineDecl &pd = a.pipeline;
  pd.present = true;
  auto count = [&](const char *key, int64_t limit) {
    int64_t v =
        integer(req(pv, key, "pipeline"), std::string("pipeline: ") + key);
    if (v < 1 || v > limit)
      fail(std::string("pipeline: ") + key,
           "must be in [1, " + std::to_string(limit) + "]");
    return int(v);
  };
  pd.stages = count("stages", a.devices);
  pd.virtualStages = count("virtual_stages", 1 << 12);
  pd.microbatches = count("microbatches", 1 << 16);
  pd.schedule = str(req(pv, "schedule", "pipeline"), "pipeline: schedule");
}

void Parser::parsePrograms(const json &progs, Artifact &a,
                           std::vector<int> &owner) {
  if (progs.empty())
    fail("programs", "the artifact has no program");
  for (size_t i = 0; i < progs.size(); ++i) {
    ProgramDecl p;
    parseProgram(progs[i], "programs[" + std::to_string(i) + "]", a, p);
    for (size_t j = 0; j < a.programs.size(); ++j)
      if (a.programs[j].name == p.name)
        fail("program '" + p.name + "'", "declared twice");
    for (int r : p.ranks) {
      if (owner[size_t(r)] >= 0)
        fail("program '" + p.name + "'",
             "rank " + std::to_string(r) + " is already run by program '" +
                 (owner[size_t(r)] == int(i)
                      ? p.name
                      : a.programs[size_t(owner[size_t(r)])].name) +
                 "'");
      owner[size_t(r)] = int(i);
    }
    a.programs.push_back(std::move(p));
  }
  for (size_t r = 0; r < owner.size(); ++r)
    if (owner[r] < 0)
      fail("programs",
           "rank " + std::to_string(r) + " is not run by any program");
}

// Tensors that must live somewhere.
void Parser::checkTensorsBound(const Artifact &a) {
  for (size_t t = 0; t < a.tensors.size(); ++t) {
    const TensorDecl &td = a.tensors[t];
    if (td.role == Role::Step)
      continue;
    bool bound = false;
    for (size_t p = 0; p < a.programs.size(); ++p)
      bound = bound || a.bufferOf(int(p), int(t)) >= 0;
    if (!bound)
      fail("tensor '" + td.name + "'", std::string("no program binds this ") +
                                           roleName(td.role) +
                                           " tensor to a buffer");
  }
}

} // namespace detail

// ---- entry points ---------------------------------------------------------

using detail::json;

namespace {
/// Runs `step`, turning what it throws into `error`.
template <class Step>
bool catching(const std::string &label, std::string &error,
              Step &&step) noexcept {
  try {
    step();
    return true;
  } catch (const std::exception &e) {
    error = e.what();
  } catch (...) {
    error = label + ": unknown error";
  }
  return false;
}
} // namespace

bool parseArtifact(const json &body, const std::string &label, Artifact &out,
                   std::string &error) noexcept {
  return catching(label, error,
                  [&] { out = detail::Parser(label).parse(body); });
}

bool parseCheckedArtifact(const json &body, const std::string &label,
                          Artifact &out, std::string &error) noexcept {
  return catching(label, error, [&] {
    detail::Parser parser(label);
    parser.trustAgreement();
    out = parser.parse(body);
  });
}

bool loadArtifactBytes(std::string_view fileBytes, const std::string &label,
                       Artifact &out, std::string &error) noexcept {
  json body;
  if (!decodeArtifactJson(fileBytes, body, error)) {
    error = label + ": " + error;
    return false;
  }
  return parseArtifact(body, label, out, error);
}

bool loadArtifactFile(const std::string &path, Artifact &out,
                      std::string &error) noexcept {
  std::string bytes;
  if (!readFileBytes(path, bytes, error)) {
    error = path + ": " + error;
    return false;
  }
  return loadArtifactBytes(bytes, path, out, error);
}

bool checkRankCount(const Artifact &a, int64_t ranks,
                    std::string &error) noexcept {
  if (ranks == a.devices)
    return true;
  return catching(a.label, error, [&] {
    throw Error(
        a.label + ": the artifact was compiled for " +
        std::to_string(a.devices) + " device" + (a.devices == 1 ? "" : "s") +
        " (mesh " + a.mesh.str() + ") but " + std::to_string(ranks) + " rank" +
        (ranks == 1 ? " is" : "s are") + " running; start it with mpirun -np " +
        std::to_string(a.devices) + " (or dtc run)");
  });
}

bool checkArtifact(const json &body, const std::string &label, int64_t ranks,
                   std::string &error) noexcept {
  Artifact a;
  return parseArtifact(body, label, a, error) &&
         (ranks <= 0 || checkRankCount(a, ranks, error));
}

} // namespace dtc::artifact
