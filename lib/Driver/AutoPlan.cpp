//===- AutoPlan.cpp - dtc compile without --strategy: the plan search -----===//
//
// docs/design.md "The search": the closed forms (dtc/Planner/Search.h)
// estimate every plan of the mesh; the best few are compiled as if their
// strategy had been given and ranked by the plan evaluation the report
// shows (its predicted step time; the memory check's real peak). The
// winner's options go on to the ordinary compilation, so a searched plan is
// written exactly as a pinned one.
//
//===----------------------------------------------------------------------===//
#include "dtc/Driver/Compile.h"
#include "dtc/artifact/MemoryPlan.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>

using json = nlohmann::json;

namespace {

bool pinned(const dtc::CompileOptions &o, const std::string &choice) {
  return std::find(o.pinnedChoices.begin(), o.pinnedChoices.end(), choice) !=
         o.pinnedChoices.end();
}

/// The options of `c`, as if its strategy and flags had been given.
dtc::CompileOptions optionsOf(const dtc::CompileOptions &o,
                              const dtc::search::Candidate &c) {
  dtc::CompileOptions out = o;
  out.autoPlan = false;
  out.search = false;
  out.dp = c.dp;
  out.tp = c.tp;
  out.pp = c.pp;
  out.sp = c.sp;
  out.ep = c.ep;
  out.zero = c.zero;
  out.microbatches = c.microbatches;
  out.remat = o.remat == "auto" ? o.remat : c.remat;
  out.sequenceParallel = c.sequenceParallel;
  out.tpLayout = c.tpLayout;
  // Without stages the schedule does not apply; keep what was given.
  if (c.pp > 1) {
    out.schedule = c.schedule;
    out.virtualStages = c.virtualStages;
  }
  out.report.clear();
  out.emitMlirAfter.clear();
  out.timing = false;
  out.explain = false;
  out.progress = false;
  return out;
}

/// The plan space of `o`'s mesh, optimizer and layout in `precision`, within
/// `budget` bytes per device.
dtc::search::Space spaceOf(const dtc::CompileOptions &o,
                           const std::string &precision, uint64_t budget) {
  dtc::search::Space space;
  space.mesh = o.mesh;
  space.precision = precision;
  space.optimizer = o.optimizer;
  space.budget = double(budget);
  // The default layout falls back to striped where zigzag's chunks do not
  // divide; only a pinned zigzag needs them.
  space.sequenceChunksPerRank = o.spLayout == "zigzag" ? 2 : 1;
  space.bucketBytes = o.bucketMiB << 20;
  return space;
}

std::string gib(double bytes) {
  return ::dtc::rt::formatBytes(uint64_t(std::max(0.0, bytes)));
}

/// Why `loser` lost to `winner`: the term of the evaluation that grew most.
std::string whyLost(const json &loser, const json &winner) {
  const json &l = loser["evaluated"], &w = winner["evaluated"];
  const double dCompute =
      l["compute_s"].get<double>() - w["compute_s"].get<double>();
  const double dComm = l["comm_s"].get<double>() - w["comm_s"].get<double>();
  const double dBubble = l["bubble"].get<double>() - w["bubble"].get<double>();
  if (dBubble > 0.02 &&
      dBubble * l["step_s"].get<double>() >= std::max(dCompute, dComm) * 0.5)
    return "bubble";
  if (dComm > dCompute)
    return "communication";
  return loser["remat"] != "none" && winner["remat"] != loser["remat"]
             ? "recomputation"
             : "compute";
}

/// The tensor-parallel layout of the shortlist's first `count` plans:
/// --tp-layout megatron (the default) or ilp for all; under --tp-layout
/// auto Megatron's, and the best-estimated plan with tp > 1 once more with
/// the tensor-layout program's layout
/// (right after it; without Megatron's sequence parallelism, which splits
/// the regions between Megatron's blocks, unless that is pinned). The
/// closed forms price only Megatron's pattern, so only the compiled plans'
/// evaluation can say which layout is faster; one more compilation keeps
/// the search's time (GPT-3 on 1024 A100s: 4.2 s instead of 2.3 s). The
/// brute force (every plan lowered) lowers every plan with tp > 1 both
/// ways. Not the default: the closed forms cannot rank the program's
/// layouts, so this search can miss what that brute force finds (the MoE
/// GPT of search.test on 2x2: tp=2,ep=2 at 0.64 ms against tp=4 with the
/// program's layout at 0.48 ms), where the default search equals the brute
/// force over Megatron's layouts. `count` grows by the plans added.
void chooseTensorLayouts(const dtc::CompileOptions &o,
                         std::vector<dtc::search::Candidate> &all,
                         size_t &count) {
  if (o.tpLayout != "auto") {
    for (dtc::search::Candidate &c : all)
      c.tpLayout = o.tpLayout;
    return;
  }
  const bool everyPlan = count == all.size();
  const bool sequenceParallelPinned = pinned(o, "sequence-parallel");
  // Megatron's sequence parallelism on and off is one layout the program
  // replaces: each program plan once.
  std::set<std::string> added;
  for (size_t i = 0; i < count; ++i) {
    if (all[i].tp <= 1 || all[i].tpLayout != "megatron" ||
        (all[i].sequenceParallel && sequenceParallelPinned))
      continue;
    dtc::search::Candidate program = all[i];
    program.tpLayout = "ilp";
    program.sequenceParallel = false;
    if (added.insert(program.describe()).second) {
      all.insert(all.begin() + std::ptrdiff_t(i) + 1, program);
      ++count;
      ++i;
    }
    if (!everyPlan)
      return;
  }
}

/// One lowered candidate.
struct Lowered {
  bool tried = false, ok = false;
  json artifact, report;
  std::string problem;
};

/// Compiles and evaluates the first `count` of `all`, on as many threads as
/// the machine has (each compilation has its own MLIR context), until the
/// time limit.
std::vector<Lowered>
lowerBest(const std::string &source, const dtc::CompileOptions &o,
          const std::vector<dtc::search::Candidate> &all, size_t count,
          const std::function<double()> &elapsed, std::atomic<bool> &timedOut) {
  std::vector<Lowered> results(count);
  std::atomic<size_t> next{0}, done{0};
  std::mutex progress;
  double lastReport = 0;
  auto worker = [&] {
    for (size_t i = next++; i < count; i = next++) {
      // The best estimate is always compiled, whatever the limit.
      if (i > 0 && elapsed() > o.searchTimeLimit) {
        timedOut = true;
        return;
      }
      Lowered &r = results[i];
      r.tried = true;
      r.ok = compileToReport(source, o.input, optionsOf(o, all[i]), r.artifact,
                             r.report, r.problem);
      const size_t finished = ++done;
      // A search longer than a second says how far it is, once a second.
      std::lock_guard<std::mutex> lock(progress);
      if (o.progress && elapsed() >= lastReport + 1.0) {
        lastReport = elapsed();
        std::cerr << "dtc: search: lowered " << finished << " of " << count
                  << " plans (" << int(lastReport * 10) / 10.0 << " s)\n";
      }
    }
  };
  const unsigned threads =
      std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 4));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads && t < count; ++t)
    pool.emplace_back(worker);
  worker();
  for (std::thread &t : pool)
    t.join();

  return results;
}

/// What the closed forms knew of the training step (search::ModelFacts),
/// as the report's planner.model_facts lists it.
json factsJson(const dtc::search::ModelFacts &f) {
  int64_t updates = 0, expertUpdates = 0;
  for (const dtc::search::KernelClass &k : f.optimizerKernels) {
    updates += k.count;
    if (k.split == dtc::search::KernelClass::Split::Experts)
      expertUpdates += k.count;
  }
  // The dense parameters a stage holds by its layers' reads, and those
  // read by several layers (a tied embedding: every stage reading it
  // holds it).
  double denseByLayer = 0, onSeveralLayers = 0;
  for (const dtc::search::ModelFacts::ParamUse &use : f.paramUses) {
    denseByLayer += use.elements;
    if (use.layers.size() > 1)
      onSeveralLayers += use.elements;
  }
  return {{"params", f.params},
          {"batch", f.batch},
          {"layers", f.layers},
          {"forward_flops", f.forwardFlops},
          {"backward_flops", f.backwardFlops},
          {"stored_bytes",
           {{"none", f.storedNone},
            {"selective", f.storedSelective},
            {"full", f.storedFull},
            {"none_in_stream", f.storedInStreamNone},
            {"selective_in_stream", f.storedInStreamSelective}}},
          {"experts", f.experts},
          {"expert_params", f.expertParams},
          {"slot_moves", f.slotMoves},
          {"slot_move_elements", f.slotMoveElements},
          {"optimizer_kernels", updates},
          {"expert_optimizer_kernels", expertUpdates},
          {"dense_params_by_layer", denseByLayer},
          {"params_read_by_several_layers", onSeveralLayers}};
}

/// One lowered plan as the report's planner.lowered lists it.
json entryOf(const dtc::search::Candidate &c, const Lowered &r) {
  json entry = {{"plan", c.describe()},
                {"dp", c.dp},
                {"tp", c.tp},
                {"pp", c.pp},
                {"sp", c.sp},
                {"ep", c.ep},
                {"zero", c.zero},
                {"microbatches", c.microbatches},
                {"remat", c.remat},
                {"sequence_parallel", c.sequenceParallel},
                {"schedule", c.pp > 1 ? c.schedule : std::string("none")},
                {"virtual_stages", c.virtualStages},
                {"tp_layout", c.tp > 1 ? c.tpLayout : std::string("none")},
                {"estimated", {{"step_s", c.seconds}, {"bytes", c.bytes}}}};
  if (r.report.is_object() && r.report.contains("predicted")) {
    const json &p = r.report["predicted"];
    entry["evaluated"] = {
        {"step_s", p["step_time_s"]},
        {"compute_s", p["compute_time_s"]},
        {"comm_s", p["comm_time_s"]},
        {"mfu", p["mfu"]},
        {"bubble", r.report["bubble_fraction"]},
        {"peak_bytes", r.report["memory_bytes"]["peak_per_device"]},
        {"budget_bytes", r.report["memory_bytes"]["budget_per_device"]},
        {"memory_bytes", r.report["memory_bytes"]}};
  }
  entry["verdict"] = r.ok ? "ok"
                     : entry.contains("evaluated")
                         ? "does not fit"
                         : "cannot lower: " + r.problem;
  return entry;
}

/// --explain: the choice and every lowered plan.
void explain(const json &lowered, const json &winner, size_t estimated,
             double seconds, const dtc::cost::HardwareProfile &hw) {
  std::cerr << "dtc: search: hardware " << hw.name
            << (hw.source.empty() ? "" : " (" + hw.source + ")") << "\n";
  std::cerr << "dtc: search: " << estimated << " plans estimated, "
            << lowered.size() << " lowered in " << int(seconds * 100) / 100.0
            << " s; chose " << winner["plan"].get<std::string>() << "\n";
  for (const json &entry : lowered) {
    std::cerr << "  " << (&entry == &winner ? "* " : "  ")
              << entry["plan"].get<std::string>() << ": ";
    if (entry.contains("evaluated")) {
      const json &e = entry["evaluated"];
      char line[160];
      std::snprintf(line, sizeof line, "%.4g s/step, MFU %.2f, %s/device",
                    e["step_s"].get<double>(), e["mfu"].get<double>(),
                    gib(e["peak_bytes"].get<double>()).c_str());
      std::cerr << line;
    }
    if (entry["verdict"] != "ok")
      std::cerr << " (" << entry["verdict"].get<std::string>() << ")";
    else if (entry.contains("lost_on"))
      std::cerr << " (lost on " << entry["lost_on"].get<std::string>() << ")";
    std::cerr << "\n";
  }
}

/// The estimated plans that keep what `o` pins: the degrees a partial
/// --strategy named and the flags that fix a choice; when none does (or a
/// model without a batch gave none), the pinned plan with data parallelism
/// on the devices left, which compiles or says why not.
std::vector<dtc::search::Candidate>
allowedCandidates(const dtc::CompileOptions &o,
                  const std::vector<dtc::search::Candidate> &estimated) {
  // Degrees a partial --strategy named, and the flags that fix a choice.
  auto degreeOf = [&](const dtc::search::Candidate &c, const std::string &key) {
    return key == "dp"   ? c.dp
           : key == "tp" ? c.tp
           : key == "pp" ? c.pp
           : key == "sp" ? c.sp
           : key == "ep" ? c.ep
                         : c.zero;
  };
  auto pinnedDegree = [&](const std::string &key) {
    return key == "dp"   ? o.dp
           : key == "tp" ? o.tp
           : key == "pp" ? o.pp
           : key == "sp" ? o.sp
           : key == "ep" ? o.ep
                         : o.zero;
  };
  const std::string remat = o.remat == "auto" ? "none" : o.remat;
  auto allowed = [&](const dtc::search::Candidate &c) {
    for (const char *degree : {"dp", "tp", "pp", "sp", "ep", "zero"})
      if (pinned(o, degree) && degreeOf(c, degree) != pinnedDegree(degree))
        return false;
    // --remat auto: each plan chooses its recomputation per stage as it
    // compiles (chooseRecomputation), so one entry per plan, compiled so.
    // A pinned schedule or chunk count needs stages.
    if ((pinned(o, "schedule") || pinned(o, "virtual-stages")) && c.pp < 2)
      return false;
    if (pinned(o, "schedule") && c.schedule != o.schedule)
      return false;
    if (pinned(o, "virtual-stages") && c.virtualStages != o.virtualStages)
      return false;
    return !(pinned(o, "microbatches") && c.microbatches != o.microbatches) &&
           !(pinned(o, "remat") && c.remat != remat) &&
           !(pinned(o, "sequence-parallel") &&
             c.sequenceParallel != o.sequenceParallel);
  };
  std::vector<dtc::search::Candidate> all;
  for (const dtc::search::Candidate &c : estimated)
    if (allowed(c))
      all.push_back(c);
  // The pins (or a model without a batch) leave no estimated plan: the
  // pinned plan with data parallelism on the devices left, which compiles
  // or says why not.
  if (all.empty()) {
    dtc::search::Candidate pinnedPlan;
    const int64_t devices = o.devices();
    pinnedPlan.tp = pinned(o, "tp") ? o.tp : 1;
    pinnedPlan.pp = pinned(o, "pp") ? o.pp : 1;
    pinnedPlan.sp = pinned(o, "sp") ? o.sp : 1;
    pinnedPlan.dp =
        pinned(o, "dp")
            ? o.dp
            : std::max<int64_t>(
                  1, devices / (pinnedPlan.tp * pinnedPlan.pp * pinnedPlan.sp));
    pinnedPlan.zero = pinned(o, "zero") ? o.zero : 0;
    pinnedPlan.microbatches = o.microbatches;
    pinnedPlan.remat = remat;
    pinnedPlan.sequenceParallel = o.sequenceParallel;
    pinnedPlan.schedule = o.schedule;
    pinnedPlan.virtualStages = o.virtualStages;
    all.push_back(pinnedPlan);
  }
  return all;
}

/// Why no lowered plan won: the compiler's error when none compiled, else
/// the smallest plan's need against the budget.
std::string noPlanError(const dtc::CompileOptions &o, const json &lowered,
                        const std::vector<Lowered> &results, uint64_t budget) {
  std::string error;
  // The smallest plan that compiled but did not fit.
  const json *smallest = nullptr;
  for (const json &entry : lowered)
    if (entry.contains("evaluated") &&
        (!smallest || entry["evaluated"]["peak_bytes"].get<double>() <
                          (*smallest)["evaluated"]["peak_bytes"].get<double>()))
      smallest = &entry;
  const double least =
      smallest ? (*smallest)["evaluated"]["peak_bytes"].get<double>() : -1;
  std::string plan, parts;
  if (smallest) {
    plan = (*smallest)["plan"].get<std::string>();
    const json &memory = (*smallest)["evaluated"]["memory_bytes"];
    using ::dtc::artifact::MemCategory;
    for (MemCategory kind : {MemCategory::Optimizer, MemCategory::Param,
                             MemCategory::Grad, MemCategory::Activation})
      if (const char *key = ::dtc::artifact::memKindReportKey(int(kind));
          memory.contains(key) && memory[key].get<double>() > 0)
        parts += std::string(parts.empty() ? "" : ", ") +
                 ::dtc::artifact::memKindDescription(int(kind)) + " " +
                 gib(memory[key].get<double>());
  }
  // Every plan failed to compile: the first one's error, as the
  // compiler gave it.
  const bool noneCompiled = llvm::all_of(
      lowered, [](const json &e) { return !e.contains("evaluated"); });
  if (noneCompiled && !results.empty() && !results.front().problem.empty())
    error = results.front().problem;
  else if (least >= 0)
    error = o.input + ": no plan fits " + gib(double(budget)) +
            " per device: the smallest, " + plan + ", needs " + gib(least) +
            " (" + parts + "; " + gib(least - double(budget)) +
            " over); use a larger mesh, --device-memory SIZE, or a "
            "precision or optimizer with less state";
  else
    error =
        o.input + ": no plan could be compiled" +
        (lowered.empty() ? std::string()
                         : ": " + lowered.back()["verdict"].get<std::string>());
  return error;
}

} // namespace

bool dtc::searchPlan(const std::string &source, const CompileOptions &o,
                     CompileOptions &chosen, json &artifact, json &report,
                     std::string &error) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  // --timing: the search's own phases, before the compilation's total.
  double phaseStart = 0;
  std::clock_t phaseCpu = std::clock();
  auto phase = [&](const char *name) {
    if (o.timing) {
      char line[128];
      std::snprintf(line, sizeof line, "dtc: time: %s %.3f s (cpu %.3f s)\n",
                    name, elapsed() - phaseStart,
                    double(std::clock() - phaseCpu) / CLOCKS_PER_SEC);
      std::cerr << line;
    }
    phaseStart = elapsed();
    phaseCpu = std::clock();
  };
  search::ModelFacts facts;
  cost::HardwareProfile hw;
  uint64_t budget = 0;
  if (!searchFacts(source, o.input, o, facts, hw, budget, error))
    return false;
  phase("search-facts");
  search::Space space = spaceOf(o, o.precision, budget);
  if (pinned(o, "virtual-stages"))
    space.virtualStages = {o.virtualStages};
  std::vector<search::Candidate> all =
      allowedCandidates(o, search::enumerateCandidates(facts, space, hw));
  size_t count = std::min(
      all.size(), o.searchRescore > 0 ? size_t(o.searchRescore) : all.size());
  const size_t estimated = all.size();
  chooseTensorLayouts(o, all, count);
  phase("search-estimate");
  std::atomic<bool> timedOut{false};
  std::vector<Lowered> results =
      lowerBest(source, o, all, count, elapsed, timedOut);
  // A model that mixes examples across the batch (an op whose batch-wide
  // sum is read inside a micro-batch, a mixture of experts) compiles no
  // plan of several micro-batches; when those were all the best estimates,
  // the best of one micro-batch (pipelines included).
  if (!results.empty() && llvm::all_of(results, [](const Lowered &r) {
        return r.tried && !r.ok &&
               r.problem.find("cannot be micro-batched") != std::string::npos;
      })) {
    llvm::erase_if(
        all, [](const search::Candidate &c) { return c.microbatches > 1; });
    count = std::min(all.size(), o.searchRescore > 0 ? size_t(o.searchRescore)
                                                     : all.size());
    if (count > 0)
      results = lowerBest(source, o, all, count, elapsed, timedOut);
  }
  phase("search-lower");

  json lowered = json::array();
  int best = -1;
  std::vector<size_t> candidateOf;
  for (size_t i = 0; i < count; ++i) {
    const Lowered &r = results[i];
    if (!r.tried)
      continue;
    json entry = entryOf(all[i], r);
    lowered.push_back(entry);
    candidateOf.push_back(i);
    if (r.ok &&
        (best < 0 ||
         entry["evaluated"]["step_s"].get<double>() <
             lowered[size_t(best)]["evaluated"]["step_s"].get<double>()))
      best = int(lowered.size()) - 1;
  }
  if (best < 0) {
    error = noPlanError(o, lowered, results, budget);
    return false;
  }
  const json &winner = lowered[size_t(best)];
  Lowered &won = results[candidateOf[size_t(best)]];
  for (json &entry : lowered)
    if (&entry != &winner && entry["verdict"] == "ok")
      entry["lost_on"] = whyLost(entry, winner);
  const search::Candidate &first = all.front();
  json record = {{"mode", "search"},
                 {"chose", winner["plan"]},
                 {"enumerated", estimated},
                 {"lowered", lowered},
                 {"search_time_s", elapsed()},
                 {"timed_out", timedOut.load()},
                 {"best_estimate", first.describe()},
                 {"model_facts", factsJson(facts)}};
  chosen = optionsOf(o, all[candidateOf[size_t(best)]]);
  chosen.report = o.report;
  chosen.output = o.output;
  chosen.emitMlirAfter = o.emitMlirAfter;
  chosen.timing = o.timing;
  // --remat auto's per-stage choice stays beside the search's record.
  if (won.report.contains("planner") && won.report["planner"].contains("remat"))
    record["remat"] = won.report["planner"]["remat"];
  chosen.plannerRecord = record.dump();
  won.artifact["plan"]["planner"] = "search";
  won.report["planner"] = record;
  artifact = std::move(won.artifact);
  report = std::move(won.report);
  if (o.explain)
    explain(lowered, winner, estimated, elapsed(), hw);
  return true;
}

/// What to do about a plan that does not fit: the fastest plans of the
/// same mesh the search's closed forms expect to fit the budget (at most
/// three, as flags), in the model's precision or else in bf16-mixed; a
/// larger mesh or another --device-memory when none does.
std::string dtc::fittingPlansAdvice(const std::string &source,
                                    const CompileOptions &o) {
  ::dtc::search::ModelFacts facts;
  ::dtc::cost::HardwareProfile hw;
  uint64_t budget = 0;
  std::string unused;
  std::vector<std::string> precisions = {o.precision};
  if (o.precision == "f32")
    precisions.push_back("bf16-mixed");
  for (const std::string &precision : precisions) {
    ::dtc::CompileOptions probe = o;
    probe.precision = precision;
    if (!::dtc::searchFacts(source, o.input, probe, facts, hw, budget, unused))
      break;
    const ::dtc::search::Space space = spaceOf(o, precision, budget);
    std::string plans;
    int listed = 0;
    for (const ::dtc::search::Candidate &c :
         ::dtc::search::enumerateCandidates(facts, space, hw)) {
      if (!c.fits || listed == 3)
        break;
      plans += std::string(listed++ ? "; " : "") + "--strategy " +
               c.describe() +
               (precision != o.precision ? " --precision " + precision : "");
    }
    if (listed)
      return "; plans of this mesh estimated to fit: " + plans +
             " (dtc compile without --strategy searches them), or "
             "--device-memory SIZE for the devices it will run on";
  }
  return "; no plan of this mesh is estimated to fit: use a larger mesh, or "
         "--device-memory SIZE for the devices it will run on";
}
