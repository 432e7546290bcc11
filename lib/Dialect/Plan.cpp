//===- Plan.cpp - #dtc.plan, its C++ mirror and their one check ----------===//
#include "dtc/Dialect/Plan.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace mlir::dtc;

//===----------------------------------------------------------------------===//
// Plan
//===----------------------------------------------------------------------===//

Recompute Plan::recomputeOf(int64_t stage) const {
  if (recompute.empty())
    return Recompute::None;
  if (recompute.size() == 1)
    return recompute.front();
  return recompute[stage];
}

int64_t Plan::pendingWeightGradients(int64_t stage) const {
  if (schedule != "zb" || recomputeOf(stage) == Recompute::Full)
    return 0;
  return stage;
}

void Plan::setRecompute(Recompute mode) {
  recompute.assign(1, mode);
  canonicalizeRecompute(recompute);
}

void mlir::dtc::canonicalizeRecompute(SmallVectorImpl<Recompute> &modes) {
  if (!modes.empty() && llvm::all_equal(modes))
    modes.resize(1);
  if (modes.size() == 1 && modes.front() == Recompute::None)
    modes.clear();
}

int64_t Plan::virtualStageOfLayer(int64_t layer) const {
  return llvm::count_if(stageCuts, [&](int64_t cut) { return cut <= layer; });
}

SmallVector<std::pair<std::string, SmallVector<int64_t>>>
Plan::namedAxes() const {
  SmallVector<std::pair<std::string, SmallVector<int64_t>>> named = {
      {"dp", dpAxes}};
  if (!tpAxes.empty())
    named.push_back({"tp", tpAxes});
  if (!ppAxes.empty())
    named.push_back({"pp", ppAxes});
  if (!spAxes.empty())
    named.push_back({"sp", spAxes});
  if (!epAxes.empty())
    named.push_back({"ep", epAxes});
  if (!microbatchAxes.empty())
    named.push_back({"mb", microbatchAxes});
  return named;
}

SmallVector<int64_t> Plan::batchAxes() const {
  SmallVector<int64_t> axes(dpAxes.begin(), dpAxes.end());
  axes.append(epAxes.begin(), epAxes.end());
  return axes;
}

SmallVector<std::pair<std::string, int64_t>> Plan::namedCounts() const {
  return {{"dp", dp},
          {"tp", tp},
          {"pp", pp},
          {"virtual_stages", virtualStages},
          {"microbatches", microbatches},
          {"zero", zero}};
}

LogicalResult Plan::verify(function_ref<InFlightDiagnostic()> emitError) const {
  if (grid.empty())
    return emitError() << "a plan needs a grid";
  if (zero < 0 || zero > 3)
    return emitError() << "zero must be 0, 1, 2 or 3, got " << zero;
  if (tp < 1)
    return emitError() << "tp must be >= 1, got " << tp;
  if (sequenceParallel && tp < 2)
    return emitError() << "sequence parallelism splits the sequence over the "
                          "tensor-parallel devices; it needs tp > 1";
  if (dp < 1 || pp < 1 || microbatches < 1 || virtualStages < 1 || sp < 1)
    return emitError()
           << "dp, pp, sp, virtual-stages and microbatches must be >= 1";
  if (sp > 1 && spAxes.size() != 1)
    return emitError() << "ring-attention sequence parallelism (sp = " << sp
                       << ") takes one whole grid axis, got " << spAxes.size();
  if (sp == 1 && !spAxes.empty())
    return emitError() << "sp = 1 takes no grid axis";
  if (ep < 1)
    return emitError() << "ep must be >= 1, got " << ep;
  if (ep == 1 && !epAxes.empty())
    return emitError() << "ep = 1 takes no grid axis";
  if (ep > 1 && epAxes.empty())
    return emitError() << "expert parallelism (ep = " << ep
                       << ") needs its grid axes";
  if (spLayout != "striped" && spLayout != "zigzag" && spLayout != "contiguous")
    return emitError()
           << "sp_layout is \"striped\", \"zigzag\" or \"contiguous\", got \""
           << spLayout << "\"";
  if (tpLayout != "megatron" && tpLayout != "ilp")
    return emitError() << "tp_layout is \"megatron\" or \"ilp\", got \""
                       << tpLayout << "\"";
  if (tpLayout == "ilp" && sequenceParallel)
    return emitError() << "Megatron's sequence parallelism splits the regions "
                          "between Megatron's tensor-parallel blocks; it "
                          "needs tp_layout \"megatron\"";
  if (sp > 1 && sequenceParallel)
    return emitError() << "ring-attention sequence parallelism (sp) and "
                          "Megatron's sequence parallelism inside tp do not "
                          "combine yet";
  llvm::SmallSet<int64_t, 8> seen;
  for (ArrayRef<int64_t> axes :
       {ArrayRef<int64_t>(dpAxes), ArrayRef<int64_t>(tpAxes),
        ArrayRef<int64_t>(ppAxes), ArrayRef<int64_t>(spAxes),
        ArrayRef<int64_t>(epAxes), ArrayRef<int64_t>(microbatchAxes)})
    for (int64_t axis : axes) {
      if (axis < 0)
        return emitError() << "plan axes must be non-negative, got " << axis;
      if (!seen.insert(axis).second)
        return emitError() << "grid axis " << axis
                           << " is given to two kinds of parallelism";
    }
  if (microbatchAxes.size() > 1)
    return emitError() << "micro-batches take one virtual axis, got "
                       << microbatchAxes.size();
  if (pipelined() && microbatchAxes.empty())
    return emitError() << "a pipelined plan (pp > 1 or micro-batches) needs "
                          "its micro-batch axis";
  if (!pipelined() && schedule != "none")
    return emitError() << "schedule \"" << schedule
                       << "\" without pipeline stages or micro-batches";
  if (pipelined() && schedule == "none")
    return emitError() << "a pipelined plan needs a schedule";
  if (recompute.size() > 1 && (int64_t)recompute.size() != pp)
    return emitError() << "recompute lists " << recompute.size()
                       << " modes for " << pp << " pipeline stages";
  if (!stageCuts.empty()) {
    if ((int64_t)stageCuts.size() != virtualStageCount() - 1)
      return emitError() << "stage_cuts lists " << stageCuts.size()
                         << " cuts for " << virtualStageCount()
                         << " virtual stages";
    for (auto [i, cut] : llvm::enumerate(stageCuts))
      if (cut <= (i == 0 ? 0 : stageCuts[i - 1]))
        return emitError() << "stage_cuts must be increasing layers > 0";
  }
  return success();
}

Plan Plan::fromAttr(PlanAttr attr) {
  Plan plan;
  plan.grid = attr.getGrid().getValue().str();
  plan.dp = attr.getDp();
  plan.tp = attr.getTp();
  plan.pp = attr.getPp();
  plan.dpAxes.assign(attr.getDpAxes().begin(), attr.getDpAxes().end());
  plan.tpAxes.assign(attr.getTpAxes().begin(), attr.getTpAxes().end());
  plan.ppAxes.assign(attr.getPpAxes().begin(), attr.getPpAxes().end());
  plan.microbatches = attr.getMicrobatches();
  plan.microbatchAxes.assign(attr.getMicrobatchAxes().begin(),
                             attr.getMicrobatchAxes().end());
  plan.virtualStages = attr.getVirtualStages();
  plan.zero = attr.getZero();
  plan.schedule = attr.getSchedule().str();
  plan.recompute.assign(attr.getRecompute().begin(), attr.getRecompute().end());
  plan.stageCuts.assign(attr.getStageCuts().begin(), attr.getStageCuts().end());
  plan.precision = attr.getPrecision();
  plan.sequenceParallel = attr.getSequenceParallel();
  plan.sp = attr.getSp();
  plan.spAxes.assign(attr.getSpAxes().begin(), attr.getSpAxes().end());
  plan.spLayout = attr.getSpLayout().str();
  plan.tpLayout = attr.getTpLayout().str();
  plan.ep = attr.getEp();
  plan.epAxes.assign(attr.getEpAxes().begin(), attr.getEpAxes().end());
  return plan;
}

PlanAttr Plan::toAttr(MLIRContext *ctx) const {
  SmallVector<Recompute> modes = recompute;
  canonicalizeRecompute(modes);
  using Axes = ArrayRef<int64_t>;
  return PlanAttr::get(
      ctx, FlatSymbolRefAttr::get(ctx, grid), dp, Axes(dpAxes), tp,
      Axes(tpAxes), pp, Axes(ppAxes), microbatches, Axes(microbatchAxes),
      virtualStages, zero, StringRef(schedule), ArrayRef<Recompute>(modes),
      Axes(stageCuts), precision, sequenceParallel, sp, Axes(spAxes),
      StringRef(spLayout), StringRef(tpLayout), ep, Axes(epAxes));
}

std::optional<Plan> mlir::dtc::getPlan(ModuleOp module) {
  if (auto attr = module->getAttrOfType<PlanAttr>(DtcDialect::kPlanAttr))
    return Plan::fromAttr(attr);
  return std::nullopt;
}

void mlir::dtc::setPlan(ModuleOp module, const Plan &plan) {
  module->setAttr(DtcDialect::kPlanAttr, plan.toAttr(module.getContext()));
}

//===----------------------------------------------------------------------===//
// #dtc.plan
//===----------------------------------------------------------------------===//

LogicalResult PlanAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, FlatSymbolRefAttr grid,
    int64_t dp, ArrayRef<int64_t> dpAxes, int64_t tp, ArrayRef<int64_t> tpAxes,
    int64_t pp, ArrayRef<int64_t> ppAxes, int64_t microbatches,
    ArrayRef<int64_t> microbatchAxes, int64_t virtualStages, int64_t zero,
    StringRef schedule, ArrayRef<Recompute> recompute,
    ArrayRef<int64_t> stageCuts, Precision precision, bool sequenceParallel,
    int64_t sp, ArrayRef<int64_t> spAxes, StringRef spLayout,
    StringRef tpLayout, int64_t ep, ArrayRef<int64_t> epAxes) {
  if (!grid)
    return emitError() << "a plan needs a grid";
  Plan plan;
  plan.grid = grid.getValue().str();
  plan.dp = dp;
  plan.tp = tp;
  plan.pp = pp;
  plan.dpAxes.assign(dpAxes.begin(), dpAxes.end());
  plan.tpAxes.assign(tpAxes.begin(), tpAxes.end());
  plan.ppAxes.assign(ppAxes.begin(), ppAxes.end());
  plan.microbatches = microbatches;
  plan.microbatchAxes.assign(microbatchAxes.begin(), microbatchAxes.end());
  plan.virtualStages = virtualStages;
  plan.zero = zero;
  plan.schedule = schedule.str();
  plan.recompute.assign(recompute.begin(), recompute.end());
  plan.stageCuts.assign(stageCuts.begin(), stageCuts.end());
  plan.precision = precision;
  plan.sequenceParallel = sequenceParallel;
  plan.sp = sp;
  plan.spAxes.assign(spAxes.begin(), spAxes.end());
  plan.spLayout = spLayout.str();
  plan.tpLayout = tpLayout.str();
  plan.ep = ep;
  plan.epAxes.assign(epAxes.begin(), epAxes.end());
  return plan.verify(emitError);
}

namespace {
ParseResult parseIntegerList(AsmParser &parser,
                             SmallVectorImpl<int64_t> &values) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square,
                                        [&]() -> ParseResult {
                                          int64_t value;
                                          if (parser.parseInteger(value))
                                            return failure();
                                          values.push_back(value);
                                          return success();
                                        });
}

/// `N` or `N on [axes]`.
ParseResult parseDegree(AsmParser &parser, int64_t &degree,
                        SmallVectorImpl<int64_t> &axes) {
  if (parser.parseInteger(degree))
    return failure();
  if (succeeded(parser.parseOptionalKeyword("on")))
    return parseIntegerList(parser, axes);
  return success();
}

ParseResult parseRecompute(AsmParser &parser, Recompute &mode) {
  SMLoc loc = parser.getCurrentLocation();
  std::string word;
  if (parser.parseKeywordOrString(&word))
    return failure();
  std::optional<Recompute> parsed = symbolizeRecompute(word);
  if (!parsed)
    return parser.emitError(loc) << "unknown recompute mode '" << word << "'";
  mode = *parsed;
  return success();
}

void printDegree(AsmPrinter &printer, StringRef key, int64_t degree,
                 ArrayRef<int64_t> axes) {
  printer << ", " << key << " = " << degree;
  if (axes.empty())
    return;
  printer << " on [";
  llvm::interleaveComma(axes, printer);
  printer << "]";
}
} // namespace

Attribute PlanAttr::parse(AsmParser &parser, Type) {
  MLIRContext *ctx = parser.getContext();
  FlatSymbolRefAttr grid;
  Plan plan;
  if (parser.parseLess() || parser.parseAttribute(grid))
    return {};
  plan.grid = grid.getValue().str();
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc loc = parser.getCurrentLocation();
    StringRef key;
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return {};
    ParseResult result = success();
    if (key == "dp")
      result = parseDegree(parser, plan.dp, plan.dpAxes);
    else if (key == "tp")
      result = parseDegree(parser, plan.tp, plan.tpAxes);
    else if (key == "pp")
      result = parseDegree(parser, plan.pp, plan.ppAxes);
    else if (key == "sp")
      result = parseDegree(parser, plan.sp, plan.spAxes);
    else if (key == "ep")
      result = parseDegree(parser, plan.ep, plan.epAxes);
    else if (key == "sp_layout")
      result = parser.parseString(&plan.spLayout);
    else if (key == "tp_layout")
      result = parser.parseString(&plan.tpLayout);
    else if (key == "microbatches")
      result = parseDegree(parser, plan.microbatches, plan.microbatchAxes);
    else if (key == "virtual_stages")
      result = parser.parseInteger(plan.virtualStages);
    else if (key == "zero")
      result = parser.parseInteger(plan.zero);
    else if (key == "schedule")
      result = parser.parseString(&plan.schedule);
    else if (key == "sequence_parallel") {
      bool value = false;
      if (succeeded(parser.parseOptionalKeyword("true")))
        value = true;
      else if (failed(parser.parseOptionalKeyword("false")))
        return parser.emitError(parser.getCurrentLocation())
                   << "expected true or false",
               Attribute();
      plan.sequenceParallel = value;
    } else if (key == "stage_cuts")
      result = parseIntegerList(parser, plan.stageCuts);
    else if (key == "recompute") {
      Recompute mode;
      if (succeeded(parser.parseOptionalLSquare())) {
        result = parser.parseCommaSeparatedList([&]() -> ParseResult {
          if (parseRecompute(parser, mode))
            return failure();
          plan.recompute.push_back(mode);
          return success();
        });
        if (succeeded(result))
          result = parser.parseRSquare();
      } else if (succeeded(result = parseRecompute(parser, mode))) {
        plan.setRecompute(mode);
      }
    } else if (key == "precision") {
      std::string name;
      result = parser.parseString(&name);
      std::optional<Precision> precision = symbolizePrecision(name);
      if (succeeded(result) && !precision)
        return parser.emitError(loc) << "unknown precision \"" << name << "\"",
               Attribute();
      if (precision)
        plan.precision = *precision;
    } else {
      return parser.emitError(loc) << "unknown plan entry '" << key << "'",
             Attribute();
    }
    if (failed(result))
      return {};
  }
  if (parser.parseGreater())
    return {};
  canonicalizeRecompute(plan.recompute);
  using Axes = ArrayRef<int64_t>;
  return parser.getChecked<PlanAttr>(
      ctx, grid, plan.dp, Axes(plan.dpAxes), plan.tp, Axes(plan.tpAxes),
      plan.pp, Axes(plan.ppAxes), plan.microbatches, Axes(plan.microbatchAxes),
      plan.virtualStages, plan.zero, StringRef(plan.schedule),
      ArrayRef<Recompute>(plan.recompute), Axes(plan.stageCuts), plan.precision,
      plan.sequenceParallel, plan.sp, Axes(plan.spAxes),
      StringRef(plan.spLayout), StringRef(plan.tpLayout), plan.ep,
      Axes(plan.epAxes));
}

void PlanAttr::print(AsmPrinter &printer) const {
  printer << "<" << getGrid();
  printDegree(printer, "dp", getDp(), getDpAxes());
  printDegree(printer, "tp", getTp(), getTpAxes());
  printDegree(printer, "pp", getPp(), getPpAxes());
  if (getSp() > 1)
    printDegree(printer, "sp", getSp(), getSpAxes());
  if (getEp() > 1)
    printDegree(printer, "ep", getEp(), getEpAxes());
  printDegree(printer, "microbatches", getMicrobatches(), getMicrobatchAxes());
  printer << ", virtual_stages = " << getVirtualStages()
          << ", zero = " << getZero() << ", schedule = \"" << getSchedule()
          << "\", recompute = ";
  ArrayRef<Recompute> modes = getRecompute();
  if (modes.empty())
    printer << stringifyRecompute(Recompute::None);
  else if (llvm::all_equal(modes))
    printer << stringifyRecompute(modes.front());
  else {
    printer << "[";
    llvm::interleaveComma(modes, printer, [&](Recompute mode) {
      printer << stringifyRecompute(mode);
    });
    printer << "]";
  }
  if (!getStageCuts().empty()) {
    printer << ", stage_cuts = [";
    llvm::interleaveComma(getStageCuts(), printer);
    printer << "]";
  }
  printer << ", precision = \"" << stringifyPrecision(getPrecision()) << "\"";
  if (getSequenceParallel())
    printer << ", sequence_parallel = true";
  if (getSp() > 1 && getSpLayout() != "zigzag")
    printer << ", sp_layout = \"" << getSpLayout() << "\"";
  if (getTpLayout() != "megatron")
    printer << ", tp_layout = \"" << getTpLayout() << "\"";
  printer << ">";
}
