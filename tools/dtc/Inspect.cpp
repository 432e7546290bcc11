//===- Inspect.cpp - dtc inspect: an artifact's JSON, or its plan as a table
//===//
//
// `dtc inspect OUT.dtc` prints the body; `--summary` reads it with the
// artifact library (the same parser and checks as dtc-run) and prints the
// plan: mesh and degrees, the plan's choices, the optimizer, parameters,
// each program (ranks, stage, instructions, the evaluation's share, peak),
// memory per device by the artifact's categories, and the collectives per
// step by communicator and kind, counted as `dtc run --stats` measures
// them (calls; bytes as the larger of a call's input and output, a
// gradient bucket once with all its members).
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "dtc/Driver/Compile.h"
#include "dtc/artifact/Artifact.h"
#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/artifact/MemoryPlan.h"
#include "dtc/runtime/Suggest.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;
namespace art = ::dtc::artifact;

constexpr const char *kInspectHelp =
    R"(usage: dtc inspect OUT.dtc [--summary]

Checks the artifact's container (magic, version, length, hash) and prints
its JSON body.
  --summary    instead, check the whole artifact as dtc run does and print
               its plan as a table: mesh and degrees, plan, optimizer,
               parameters, programs, memory per device by category, and
               collectives per step by communicator (as dtc run --stats
               counts them)
  -h, --help   this help
)";

std::string ranksText(const std::vector<int> &ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ranks[i]) +
           (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return out;
}

struct CommCount {
  int64_t calls = 0;
  uint64_t bytes = 0;
};

/// Calls and bytes per (communicator, kind) of one step of `p`.
std::map<std::pair<std::string, std::string>, CommCount>
collectivesPerStep(const art::Artifact &a, const art::ProgramDecl &p) {
  std::map<std::pair<std::string, std::string>, CommCount> out;
  auto bytesOf = [&](int buffer) { return p.buffers[size_t(buffer)].bytes(); };
  auto count = [&](const std::vector<art::InstrDecl> &list, int64_t times) {
    for (const art::InstrDecl &ins : list) {
      if (!ins.isCollective && ins.pipe != art::PipeOp::Send)
        continue;
      const std::string comm = a.comms[size_t(ins.comm)].name;
      if (ins.pipe == art::PipeOp::Send) {
        CommCount &c = out[{comm, "send"}];
        c.calls += times;
        c.bytes += uint64_t(times) * bytesOf(ins.in[0]);
        continue;
      }
      uint64_t bytes = std::max(bytesOf(ins.in[0]), bytesOf(ins.out[0]));
      if (ins.bucket >= 0) {
        const art::BucketDecl &b = p.buckets[size_t(ins.bucket)];
        if (&ins - list.data() != b.members.back())
          continue; // the bucket's collective runs once, at its last member
        bytes = b.dataBytes();
      }
      CommCount &c = out[{comm, art::collectiveKindName(ins.coll)}];
      c.calls += times;
      c.bytes += uint64_t(times) * bytes;
    }
  };
  count(p.instructions, 1);
  for (const ::dtc::sched::Action &act : p.schedule) {
    const art::ChunkDecl &c = p.chunks[size_t(act.chunk)];
    using ::dtc::sched::Kind;
    if (act.kind == Kind::Forward)
      count(c.forward, 1);
    if (act.kind == Kind::Backward || act.kind == Kind::BackwardWeight)
      count(c.backwardInput, 1);
    if (act.kind == Kind::Weight || act.kind == Kind::BackwardWeight)
      count(c.backwardWeight, 1);
  }
  count(p.finish, 1);
  return out;
}

size_t instructionCount(const art::ProgramDecl &p, bool evaluationOnly) {
  size_t n = 0;
  auto add = [&](const std::vector<art::InstrDecl> &list) {
    for (const art::InstrDecl &ins : list)
      n += !evaluationOnly || ins.evaluation ? 1 : 0;
  };
  add(p.instructions);
  for (const art::ChunkDecl &c : p.chunks) {
    add(c.forward);
    add(c.backwardInput);
    add(c.backwardWeight);
  }
  add(p.finish);
  return n;
}

std::string fixed(const char *format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string summary(const std::string &path, const json &body,
                    const art::Artifact &a) {
  std::string out;
  auto row = [&](const std::string &label, const std::string &text) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%-12s", label.c_str());
    out += buf + text + "\n";
  };
  row("artifact", path + " (" + (a.producer.empty() ? "?" : a.producer) +
                      (a.source.empty() ? "" : ", from " + a.source) + ")");
  const json &plan = a.plan;
  const std::string degrees =
      dtc::degreesText(plan, plan.value("axes", json::object()));
  const std::string planner = plan.value("planner", std::string());
  row("mesh", a.mesh.str() + ", " + std::to_string(a.devices) + " device" +
                  (a.devices == 1 ? "" : "s") + ": " +
                  (degrees.empty() ? "one device" : degrees) +
                  (planner.empty() ? "" : " (" + planner + ")"));
  row("plan",
      dtc::planChoicesText(plan) + (plan.value("sequence_parallel", false)
                                        ? ", sequence parallel"
                                        : ""));
  const json &opt = a.optimizer;
  if (opt.is_object() && !opt.empty()) {
    const json &sched = opt.value("lr_schedule", json::object());
    std::string text = opt.value("kind", std::string("?"));
    if (opt.contains("lr"))
      text += ", lr " + fixed("%g", opt.value("lr", 0.0)) + " (" +
              sched.value("kind", std::string("constant")) + ")";
    if (opt.value("weight_decay", 0.0) != 0)
      text += ", weight decay " + fixed("%g", opt.value("weight_decay", 0.0));
    if (opt.value("grad_clip", 0.0) > 0)
      text += ", gradient clip " + fixed("%g", opt.value("grad_clip", 0.0));
    row("optimizer", text);
  }
  int64_t params = 0, paramTensors = 0;
  for (int t : a.tensorsWithRole(art::Role::Param)) {
    params += art::numel(a.tensors[size_t(t)].shape);
    ++paramTensors;
  }
  row("parameters", std::to_string(params) + " in " +
                        std::to_string(paramTensors) + " tensors");
  std::string inputs;
  for (int t : a.tensorsWithRole(art::Role::Input)) {
    const art::TensorDecl &d = a.tensors[size_t(t)];
    inputs += (inputs.empty() ? "" : ", ") + d.name + " " +
              art::dtypeName(d.dtype) + art::shapeStr(d.shape);
  }
  row("inputs", inputs.empty() ? "none" : inputs);
  if (a.pipeline.present)
    row("pipeline", std::to_string(a.pipeline.stages) + " stages, " +
                        std::to_string(a.pipeline.virtualStages) +
                        " virtual per stage, " +
                        std::to_string(a.pipeline.microbatches) +
                        " micro-batches, " + a.pipeline.schedule);
  // Programs.
  const json &memory = body.value("memory", json::object());
  std::map<std::string, uint64_t> peakOf;
  for (const json &p : memory.value("programs", json::array()))
    peakOf[p.value("name", std::string())] = p.value("peak_bytes", uint64_t(0));
  out += "programs\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-12s %-12s %6s %13s %11s %12s\n",
                "program", "ranks", "stage", "instructions", "evaluation",
                "peak");
  out += line;
  for (const art::ProgramDecl &p : a.programs) {
    auto peak = peakOf.find(p.name);
    std::snprintf(
        line, sizeof line, "  %-12s %-12s %6s %13zu %11s %12s\n",
        p.name.c_str(), ranksText(p.ranks).c_str(),
        p.stage < 0 ? "-" : std::to_string(p.stage).c_str(),
        instructionCount(p, false),
        p.hasEvaluation ? std::to_string(instructionCount(p, true)).c_str()
                        : "-",
        peak == peakOf.end() ? "-" : art::formatBytes(peak->second).c_str());
    out += line;
  }
  // Memory of the largest program, by category.
  if (const json *kinds =
          memory.contains("peak_by_kind") ? &memory["peak_by_kind"] : nullptr) {
    out += "memory per device (the largest program; budget " +
           art::formatBytes(memory.value("budget_bytes", uint64_t(0))) + ", " +
           std::to_string(memory.value("kernel_threads", int64_t(1))) +
           " kernel threads)\n";
    // In the kinds' order, named as every dtc message names them.
    for (int k = 0; k < art::kNumMemKinds; ++k) {
      auto it = kinds->find(art::memKindName(k));
      if (it == kinds->end() || !it->is_number_unsigned())
        continue;
      std::snprintf(line, sizeof line, "  %-20s %12s\n",
                    art::memKindDescription(k),
                    art::formatBytes(it->get<uint64_t>()).c_str());
      out += line;
    }
    std::snprintf(
        line, sizeof line, "  %-20s %12s\n", "peak",
        art::formatBytes(memory.value("peak_bytes", uint64_t(0))).c_str());
    out += line;
  }
  // Collectives per step, per program.
  out += "collectives per step (per rank)\n";
  std::snprintf(line, sizeof line, "  %-12s %-12s %-15s %7s %12s\n", "program",
                "communicator", "kind", "calls", "bytes");
  out += line;
  for (const art::ProgramDecl &p : a.programs) {
    const auto counts = collectivesPerStep(a, p);
    if (counts.empty()) {
      std::snprintf(line, sizeof line, "  %-12s %-12s\n", p.name.c_str(),
                    "none");
      out += line;
    }
    for (const auto &[key, c] : counts) {
      std::snprintf(line, sizeof line, "  %-12s %-12s %-15s %7lld %12s\n",
                    p.name.c_str(), key.first.c_str(), key.second.c_str(),
                    (long long)c.calls, art::formatBytes(c.bytes).c_str());
      out += line;
    }
  }
  return out;
}

} // namespace

int inspectCommand(const std::vector<std::string> &args) {
  bool wantSummary = false;
  std::vector<std::string> files;
  for (const std::string &arg : args) {
    if (arg == "--help" || arg == "-h") {
      llvm::outs() << kInspectHelp;
      return 0;
    }
    if (arg == "--summary") {
      wantSummary = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return fail("unknown flag " + arg + " for 'dtc inspect'" +
                  dtc::didYouMean(arg, {"--help", "--summary"}) +
                  " (see dtc inspect --help)");
    } else {
      files.push_back(arg);
    }
  }
  if (files.size() != 1)
    return fail("dtc inspect takes one artifact (see dtc inspect --help)");
  std::string bytes, error;
  if (!art::readFileBytes(files[0], bytes, error))
    return fail(files[0] + ": " + error);
  json body;
  if (!art::decodeArtifactJson(bytes, body, error))
    return fail(files[0] + ": " + error);
  if (!wantSummary) {
    llvm::outs() << body.dump(2) << "\n";
    return 0;
  }
  art::Artifact a;
  if (!art::parseArtifact(body, files[0], a, error))
    return fail(error);
  llvm::outs() << summary(files[0], body, a);
  return 0;
}
