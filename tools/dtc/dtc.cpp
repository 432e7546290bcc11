//===- dtc.cpp - the dtc command line (docs/cli.md) ----------------------===//
//
//   dtc compile MODEL.mlir --mesh 2x2 -o OUT.dtc [options]
//   dtc run OUT.dtc --steps N [options]      (starts the ranks via dtc-run)
//   dtc eval OUT.dtc --data FILE             (dtc run --steps 0; Eval.cpp)
//   dtc inspect OUT.dtc [--summary]          (its JSON, or its plan;
//   Inspect.cpp) dtc calibrate                            (measures --hw cpu;
//   Calibrate.cpp)
//
// Every error is one line on stderr naming the flag or file, exit status 1.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Flags.h"
#include "dtc/Driver/Compile.h"
#include "dtc/Version.h"
#include "dtc/artifact/ArtifactFormat.h"
#include "dtc/artifact/MemoryPlan.h"
#include "dtc/artifact/OutputFile.h"
#include "dtc/artifact/Schedule.h"
#include "dtc/runtime/Suggest.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

int fail(const std::string &message) {
  llvm::errs() << "dtc: error: " << message << "\n";
  return 1;
}

namespace {

constexpr const char *kTopHelp = R"(dtc: a distributed-training compiler

usage:
  dtc compile MODEL.mlir --mesh AxBxC -o OUT.dtc [options]   plan and emit
  dtc run OUT.dtc --steps N [options]                        train on the artifact's ranks
  dtc eval OUT.dtc --data FILE [--load CKPT]                 its loss on held-out tokens
  dtc inspect OUT.dtc [--summary]                            print the artifact as JSON, or its plan
  dtc schedule OUT.dtc [-o PICTURE.svg]                      draw its pipeline schedule
  dtc calibrate [--ranks 1,2,4,8]                            measure this machine for --hw cpu
  dtc --help | dtc COMMAND --help | dtc --version

Docs (in the source tree): docs/model-format.md (models), docs/cli.md
(commands, checkpoints, the plan report), docs/artifact.md, docs/design.md,
docs/writing-a-sharding-pass.md.
)";

constexpr const char *kCompileHelp = R"(usage: dtc compile MODEL.mlir [options]

Turns a model (forward + loss) into a training step, plans its parallel
layout for the mesh, partitions it and writes a runnable artifact.

Mesh and hardware:
  --mesh AxBxC          device mesh, outermost axis first    (default: 1)
                        (the last axis is the fastest link)
  --hw NAME|FILE.json   cpu, a100, h100, h200 or a JSON      (default: cpu)
                        profile
  --device-memory SIZE  memory of one device, e.g. 80GiB, 16G (K/M/G/T: 10^3..,
                        KiB/MiB/GiB/TiB: 2^10..); a plan whose peak per device
                        exceeds it is refused      (default: --hw's memory; for
                        cpu, this machine's RAM / the mesh's device count)
Plan:
  --auto                search the plan (the default without --strategy):
                        every split of the mesh axes into dp, pp and tp,
                        micro-batches, recomputation, ZeRO stage and
                        sequence parallelism, estimated; the best few
                        compiled and the fastest that fits taken
                        (--microbatches, --remat, --sequence-parallel and
                        a partial --strategy pin their choice)
  --explain             print the search's choice and the plans it
                        compiled, each with why it lost, to stderr
  --progress            report the search's progress on stderr once a
                        second (default: when stderr is a terminal)
  --search-rescore N    how many of the best estimates to compile (0:
                        all, the brute force)                (default: 4)
  --search-time-limit S stop compiling candidates after S seconds
                                                             (default: 60)
  --strategy SPEC       pin degrees, e.g. dp=2,tp=4          (default: none)
                        keys dp, tp, pp, zero, sp, ep; a key not named is 1
                        when dp*tp*pp uses every device, and the plan is
                        pinned; a strategy that leaves devices over (tp=8)
                        pins what it names and the search completes the rest
                        (so does --auto with any strategy)
                        tp: Megatron tensor parallelism on the innermost
                        (fastest) mesh axes, pp pipeline stages on the next
                        ones, dp on the outer ones
                        zero=1|2|3: ZeRO over dp (optimizer state; also
                        gradients; also parameters, gathered per use)
                        sp=S (or cp=S): ring-attention sequence parallelism,
                        every activation's sequence split over one whole
                        mesh axis (after tp's), attention run as a ring of
                        blocks; the search considers it too (on the
                        mesh axis after pp's)
                        ep=E: expert parallelism, mesh axes (between pp's
                        and dp's) that split the batch like dp and every
                        dtc.moe layer's experts; tokens go to their
                        experts' ranks and back (moe_exchange). Fixes the
                        plan: dp takes the devices left
  --sp-layout L         zigzag|striped|contiguous: which positions each sp
                        rank holds. zigzag: the sequence cut into 2S
                        chunks, rank r holds chunks r and 2S-1-r, one from
                        each end; striped: rank r holds r, r+S, r+2S, ...
                        Both make causal attention's work the same on
                        every rank; contiguous: rank r holds one chunk,
                        and the last rank does about twice the average.
                        Default: zigzag, or striped where the sequence
                        does not divide into 2S chunks
  --tp-layout L         megatron|ilp|auto: which factor of each op tp
                        splits. megatron: Megatron's pattern (vocab-parallel
                        embeddings, column- then row-parallel matmuls,
                        attention by heads); ilp: an integer program over
                        every op's sharding choices, costed on --hw and
                        bounded by the device memory (for layers that do
                        not look like a transformer's); auto (search
                        only): the best tp plan is compiled both ways and
                        the faster kept
                                                     (default: megatron)
  --pin NAME=SHARDING   pin a parameter's sharding, e.g.      (repeatable)
                        'h.0.attn.wq=[[],[1]]' (mesh axes per dimension);
                        it wins over the strategy, the rest follows
  --sequence-parallel   Megatron sequence parallelism (needs tp > 1): the
                        ops between the tensor-parallel blocks (norms,
                        residual adds, element-wise ops) split the sequence
                        over the tp devices; each row-parallel all-reduce
                        becomes a reduce-scatter and each column-parallel
                        input an all-gather
  --microbatches M      micro-batches per step: the batch of each data-
                        parallel shard is split in M; gradients are summed
                        over them before the optimizer    (default: 1)
  --schedule S          gpipe|1f1b|interleaved|zb: the order in which each
                        pipeline stage runs the micro-batches' forwards and
                        backwards (zb: weight gradients deferred, ZB-H1);
                        the search chooses 1f1b, zb or interleaved unless
                        given                                (default: 1f1b)
  --virtual-stages V    model chunks per pipeline stage, with --schedule
                        interleaved (M a multiple of pp); the search tries
                        2 and 4 unless given                 (default: 1)
  --remat R             none|full|selective|auto             (default: none)
                        activation checkpointing: full recomputes each
                        layer's forward in its backward (keeps layer
                        boundaries), selective only cheap ops (attention,
                        activations), auto the least with which each
                        pipeline stage fits the device memory; the
                        numbers stay bit for bit the same
  --precision P         f32|bf16-mixed|fp16-mixed            (default: f32)
                        mixed: bf16/f16 parameters, activations and
                        gradients (kernels accumulate in f32; the loss is
                        f32); f32 master weights and optimizer state, which
                        checkpoints save; fp16 scales the loss dynamically
                        (an overflow skips the step and halves the scale)
  --loss-scale S        fp16-mixed: initial loss scale       (default: 65536)
  --loss-scale-window N fp16-mixed: good steps in a row
                        before the scale doubles             (default: 2000)
  --grad-accum K        gradient accumulation steps          (default: 1)
                        K micro-steps per step, one gradient reduction and
                        one update; M·K micro-batches go through the schedule
  --no-fuse-epilogues   run a matmul's bias add and GELU as kernels of their
                        own (default: fused into the matmul's kernel, same
                        numbers)
  --attention-stats S   keep|recompute: whether attention's backward reads
                        the forward's output and row logsumexp (kept until
                        the backward: memory) or recomputes them (a forward
                        pass's time)                   (default: recompute)
  --bucket-mb N         without micro-batches: gradients are all-reduced
                        as they are complete, in buckets of at most N MiB,
                        overlapping the rest of the backward; ZeRO's
                        reduce-scatters and parameter gathers share
                        buckets too (0: one collective each)  (default: 25)
Optimizer:
  --optimizer O         sgd|adam|adamw|none                  (default: adam)
                        (none: no update; each step returns the (clipped)
                        gradients as outputs NAME:grad, see dtc-run --save-step)
  --lr X                learning rate (a schedule's peak)    (default: 0.001)
  --lr-schedule S       constant|cosine|linear: the rate of update t
                        (0-based) after a warmup of W updates (docs/cli.md):
                        t < W: lr*(t+1)/W; then cosine M+(lr-M)(1+cos(pi p))/2,
                        linear lr-(lr-M)p, p = min(1, (t-W)/(D-W))
                                                             (default: constant)
  --warmup-steps W      updates of linear warmup             (default: 0)
  --decay-steps D       cosine/linear: the update at which the rate reaches
                        --min-lr (required by them)
  --min-lr M            cosine/linear: the final rate        (default: 0)
  --weight-decay X      L2 (sgd, adam), decoupled (adamw)    (default: 0, 0.01 for adamw)
  --beta1 X             Adam beta1                           (default: 0.9)
  --beta2 X             Adam beta2                           (default: 0.999)
  --eps X               Adam epsilon                         (default: 1e-08)
  --grad-clip X         global L2 norm to clip to, 0 = off   (default: 0)
Output:
  -o, --output OUT.dtc  the artifact                         (default: MODEL with .dtc)
  --report REPORT.json  write the plan report (-: stdout)    (default: none)
  --emit-mlir STAGE     print the IR after parsed, training-step, planned,
                        split or partitioned to stdout       (default: none)
  --emit-generic        --emit-mlir prints MLIR's generic op form (default: off)
  --timing              print each stage's wall time to stderr
  --Werror              the model's warnings are errors (no artifact)
  --summary, --quiet    print (or not) the plan summary on stderr after a
                        successful compile: mesh and degrees, memory per
                        device, communication per step, predicted step
                                                             (default: when stderr is a terminal)
  -h, --help            this help
)";

bool parseInt(const std::string &flag, const std::string &text, int64_t &out,
              int64_t min) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < min) {
    fail(flag + ": expected an integer >= " + std::to_string(min) + ", got '" +
         text + "'");
    return false;
  }
  out = v;
  return true;
}

bool parseDouble(const std::string &flag, const std::string &text,
                 double &out) {
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) {
    fail(flag + ": expected a number, got '" + text + "'");
    return false;
  }
  out = v;
  return true;
}

bool parseChoice(const std::string &flag, const std::string &text,
                 std::string &out,
                 std::initializer_list<const char *> choices) {
  std::string list;
  std::vector<std::string> names;
  for (const char *c : choices) {
    if (text == c) {
      out = text;
      return true;
    }
    list += (list.empty() ? "" : "|") + std::string(c);
    names.push_back(c);
  }
  // A choice spelled in another case is the likeliest meaning (1F1B, adamW).
  std::string hint;
  for (const std::string &name : names)
    if (llvm::StringRef(name).equals_insensitive(text))
      hint = "; did you mean '" + name + "'?";
  fail(flag + ": expected " + list + ", got '" + text + "'" +
       (hint.empty() ? dtc::didYouMean(text, names) : hint));
  return false;
}

bool parseMesh(const std::string &text, std::vector<int64_t> &mesh) {
  mesh.clear();
  size_t start = 0;
  while (true) {
    size_t x = text.find('x', start);
    std::string part = text.substr(
        start, x == std::string::npos ? std::string::npos : x - start);
    int64_t size;
    char *end = nullptr;
    errno = 0;
    long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || errno == ERANGE || v < 1) {
      fail("--mesh: expected sizes like 8 or 2x4 (positive integers joined by "
           "'x'), got '" +
           text + "'");
      return false;
    }
    size = v;
    mesh.push_back(size);
    if (x == std::string::npos)
      break;
    start = x + 1;
  }
  int64_t devices = 1;
  for (int64_t size : mesh) {
    devices *= size;
    if (devices > (1 << 20)) {
      fail("--mesh " + text + ": more than 1048576 devices");
      return false;
    }
  }
  return true;
}

/// Parses --strategy into `o`'s degrees; `named` gets the keys it names.
bool parseStrategy(const std::string &text, dtc::CompileOptions &o,
                   std::vector<std::string> &named) {
  // cp (context parallelism) is Megatron's name for sp.
  std::map<std::string, int64_t *> keys = {
      {"dp", &o.dp}, {"tp", &o.tp}, {"pp", &o.pp},    {"sp", &o.sp},
      {"cp", &o.sp}, {"ep", &o.ep}, {"zero", &o.zero}};
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t eq = item.find('=');
    std::string key = eq == std::string::npos ? item : item.substr(0, eq);
    if (eq == std::string::npos || !keys.count(key)) {
      fail("--strategy: expected KEY=N items with KEY in dp, tp, pp, zero, sp "
           "(or cp), ep, got '" +
           item + "'");
      return false;
    }
    if (!parseInt("--strategy " + key, item.substr(eq + 1), *keys[key],
                  key == "zero" ? 0 : 1))
      return false;
    if (key == "zero" && o.zero > 3) {
      fail("--strategy zero: expected 0, 1, 2 or 3");
      return false;
    }
    named.push_back(key);
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return true;
}

/// A --strategy whose dp, tp and pp use every device pins the plan; one that
/// leaves devices over pins what it names and the search completes the rest
/// (so does any strategy with --auto). Sets `o`'s mode; false on an error.
bool applyStrategy(const std::string &text, bool autoGiven,
                   dtc::CompileOptions &o) {
  std::vector<std::string> named;
  if (!parseStrategy(text, o, named))
    return false;
  auto isNamed = [&](const char *key) {
    return std::find(named.begin(), named.end(), key) != named.end();
  };
  const int64_t devices = o.devices();
  const int64_t model = o.tp * o.pp * o.sp * o.ep;
  const int64_t namedProduct = (isNamed("dp") ? o.dp : 1) * model;
  if (!isNamed("dp") && devices % model != 0) {
    fail("--strategy: tp*pp" + std::string(o.sp > 1 ? "*sp" : "") +
         std::string(o.ep > 1 ? "*ep" : "") + "=" + std::to_string(model) +
         " does not divide the " + std::to_string(devices) + " devices");
    return false;
  }
  // The search does not choose expert parallelism yet: ep fixes the plan,
  // data parallelism taking the devices left.
  const bool complete = namedProduct == devices || o.ep > 1 ||
                        (isNamed("dp") && isNamed("tp") && isNamed("pp"));
  if (complete && !autoGiven) {
    if (!isNamed("dp"))
      o.dp = devices / model;
    o.autoPlan = false;
    o.search = false;
    return true;
  }
  o.search = true;
  for (const char *degree : {"dp", "tp", "pp", "zero"})
    if (isNamed(degree))
      o.pinnedChoices.push_back(degree);
  if (isNamed("sp") || isNamed("cp"))
    o.pinnedChoices.push_back("sp");
  return true;
}

/// Under the search, the flags that fix one of its choices pin it; its own
/// flags need it. Returns the error, or "".
std::string searchChoices(const Flags &flags, dtc::CompileOptions &o) {
  for (const char *choice : {"microbatches", "remat", "sequence-parallel",
                             "schedule", "virtual-stages"})
    if (flags.given(std::string("--") + choice))
      o.pinnedChoices.push_back(choice);
  if (o.tpLayout == "auto" && !o.search)
    return "--tp-layout auto lets the search choose the layout, and "
           "--strategy pins the whole plan (add --auto, or name megatron or "
           "ilp)";
  if (!o.search &&
      (flags.given("--explain") || flags.given("--search-rescore") ||
       flags.given("--search-time-limit") || flags.given("--progress")))
    return "--explain, --progress, --search-rescore and --search-time-limit "
           "are the "
           "search's, and --strategy pins the whole plan (add --auto to "
           "search what it leaves)";
  return "";
}

/// The search's flags of `dtc compile`.
void addSearchFlags(Flags &flags, dtc::CompileOptions &o) {
  flags.boolean("--explain", [&] { o.explain = true; });
  flags.boolean("--progress", [&] { o.progress = true; });
  flags.value("--search-rescore", [&](const std::string &v) {
    return parseInt("--search-rescore", v, o.searchRescore, 0);
  });
  flags.value("--search-time-limit", [&](const std::string &v) {
    if (!parseDouble("--search-time-limit", v, o.searchTimeLimit))
      return false;
    if (o.searchTimeLimit <= 0) {
      fail("--search-time-limit: expected seconds > 0, got '" + v + "'");
      return false;
    }
    return true;
  });
}

/// The optimizer's flags of `dtc compile`.
void addOptimizerFlags(Flags &flags, dtc::CompileOptions &o) {
  flags.value("--optimizer", [&](const std::string &v) {
    return parseChoice("--optimizer", v, o.optimizer,
                       {"sgd", "adam", "adamw", "none"});
  });
  // Numbers are parsed here; their ranges are the training step's to judge
  // (checkTrainingStepOptions), in the f32 precision the optimizer uses.
  auto number = [&](const char *flag, double &out) {
    return
        [&, flag](const std::string &v) { return parseDouble(flag, v, out); };
  };
  flags.value("--lr", number("--lr", o.lr));
  flags.value("--lr-schedule", [&](const std::string &v) {
    return parseChoice("--lr-schedule", v, o.lrSchedule,
                       {"constant", "cosine", "linear"});
  });
  flags.value("--warmup-steps", [&](const std::string &v) {
    return parseInt("--warmup-steps", v, o.warmupSteps, 0);
  });
  flags.value("--decay-steps", [&](const std::string &v) {
    return parseInt("--decay-steps", v, o.decaySteps, 1);
  });
  flags.value("--min-lr", number("--min-lr", o.minLr));
  flags.value("--weight-decay", [&](const std::string &v) {
    double value;
    if (!parseDouble("--weight-decay", v, value))
      return false;
    o.weightDecay = value;
    return true;
  });
  flags.value("--eps", number("--eps", o.eps));
  flags.value("--grad-clip", number("--grad-clip", o.gradClip));
  flags.value("--beta1", number("--beta1", o.beta1));
  flags.value("--beta2", number("--beta2", o.beta2));
}

/// A flag given where it cannot have an effect, and why ("" when none):
/// a flag that passes silently looks like it did something.
std::string ineffectiveFlag(const Flags &flags, const dtc::CompileOptions &o) {
  const bool pipelined = o.pp > 1 || o.microbatches > 1 || o.gradAccum > 1;
  if (flags.given("--schedule") && !pipelined && !o.search)
    return "--schedule " + o.schedule +
           " orders the forwards and backwards of pipeline stages and "
           "micro-batches, and this plan has neither (add --strategy "
           "pp=P, --microbatches M or --grad-accum K)";
  if (flags.given("--tp-layout") && o.tp <= 1 && !o.search)
    return "--tp-layout " + o.tpLayout +
           " chooses how tensor parallelism splits each op, and this plan "
           "has no tp (add --strategy tp=T)";
  if (flags.given("--sp-layout") && o.sp <= 1)
    return "--sp-layout " + o.spLayout +
           " lays out ring attention's sequence over the sp ranks, and this "
           "plan has no sp (add --strategy sp=S)";
  for (const char *flag : {"--loss-scale", "--loss-scale-window"})
    if (flags.given(flag) && o.precision != "fp16-mixed")
      return std::string(flag) +
             " is fp16-mixed's dynamic loss scaling; it has no effect with "
             "--precision " +
             o.precision;
  for (const char *flag :
       {"--lr", "--lr-schedule", "--warmup-steps", "--decay-steps", "--min-lr"})
    if (flags.given(flag) && o.optimizer == "none")
      return std::string(flag) +
             " sets the rate of the updates; --optimizer none makes none";
  for (const char *flag : {"--decay-steps", "--min-lr"})
    if (flags.given(flag) && o.lrSchedule == "constant")
      return std::string(flag) +
             " says where a decaying rate ends; add --lr-schedule cosine or "
             "linear";
  if (o.lrSchedule != "constant" && !flags.given("--decay-steps"))
    return "--lr-schedule " + o.lrSchedule +
           " needs --decay-steps D, the update at which the rate reaches "
           "--min-lr";
  for (const char *flag : {"--beta1", "--beta2", "--eps"})
    if (flags.given(flag) && o.optimizer != "adam" && o.optimizer != "adamw")
      return std::string(flag) + " is Adam's; --optimizer " + o.optimizer +
             " does not use it";
  return "";
}

int compileCommand(const std::vector<std::string> &args) {
  dtc::CompileOptions o;
  o.progress = isatty(STDERR_FILENO);
  o.summary = isatty(STDERR_FILENO);
  bool help = false, strategyGiven = false, autoGiven = false;
  std::string strategy;
  Flags flags;
  flags.boolean("--help", [&] { help = true; });
  flags.alias("-h", "--help");
  flags.alias("-o", "--output");
  flags.value("--output", [&](const std::string &v) {
    o.output = v;
    return true;
  });
  flags.value("--mesh",
              [&](const std::string &v) { return parseMesh(v, o.mesh); });
  flags.value("--hw", [&](const std::string &v) {
    o.hw = v;
    return true;
  });
  flags.value("--device-memory", [&](const std::string &v) {
    uint64_t bytes;
    if (!dtc::rt::parseByteSize(v, bytes)) {
      fail("--device-memory: expected a size such as 80GiB, 512MiB, 16G or "
           "1000000 "
           "(bytes; K/M/G/T are powers of 1000, KiB/MiB/GiB/TiB of 1024), got "
           "'" +
           v + "'");
      return false;
    }
    o.deviceMemory = bytes;
    return true;
  });
  flags.boolean("--auto", [&] { autoGiven = true; });
  flags.value("--strategy", [&](const std::string &v) {
    strategyGiven = true;
    strategy = v;
    return true;
  });
  flags.boolean("--sequence-parallel", [&] { o.sequenceParallel = true; });
  addSearchFlags(flags, o);
  flags.value("--microbatches", [&](const std::string &v) {
    return parseInt("--microbatches", v, o.microbatches, 1);
  });
  flags.value("--virtual-stages", [&](const std::string &v) {
    return parseInt("--virtual-stages", v, o.virtualStages, 1);
  });
  flags.value("--schedule", [&](const std::string &v) {
    return parseChoice("--schedule", v, o.schedule,
                       {"gpipe", "1f1b", "interleaved", "zb"});
  });
  flags.value("--remat", [&](const std::string &v) {
    return parseChoice("--remat", v, o.remat,
                       {"none", "full", "selective", "auto"});
  });
  flags.value("--precision", [&](const std::string &v) {
    return parseChoice("--precision", v, o.precision,
                       {"f32", "bf16-mixed", "fp16-mixed"});
  });
  flags.value("--loss-scale", [&](const std::string &v) {
    return parseDouble("--loss-scale", v, o.lossScale);
  });
  flags.value("--loss-scale-window", [&](const std::string &v) {
    return parseInt("--loss-scale-window", v, o.lossScaleWindow, 1);
  });
  flags.value("--grad-accum", [&](const std::string &v) {
    return parseInt("--grad-accum", v, o.gradAccum, 1);
  });
  addOptimizerFlags(flags, o);
  flags.value("--report", [&](const std::string &v) {
    o.report = v;
    return true;
  });
  flags.boolean("--timing", [&] { o.timing = true; });
  flags.boolean("--Werror", [&] { o.warningsAreErrors = true; });
  flags.boolean("--summary", [&] { o.summary = true; });
  flags.boolean("--quiet", [&] { o.summary = false; });
  flags.boolean("--no-fuse-epilogues", [&] { o.fuseEpilogues = false; });
  flags.value("--sp-layout", [&](const std::string &v) {
    return parseChoice("--sp-layout", v, o.spLayout,
                       {"zigzag", "striped", "contiguous"});
  });
  flags.value("--tp-layout", [&](const std::string &v) {
    return parseChoice("--tp-layout", v, o.tpLayout,
                       {"megatron", "ilp", "auto"});
  });
  flags.value("--attention-stats", [&](const std::string &v) {
    return parseChoice("--attention-stats", v, o.attentionStats,
                       {"keep", "recompute"});
  });
  flags.value("--bucket-mb", [&](const std::string &v) {
    if (!parseInt("--bucket-mb", v, o.bucketMiB, 0))
      return false;
    if (o.bucketMiB > (int64_t(1) << 20)) { // keeps the bytes in an int64_t
      fail("--bucket-mb: expected at most 1048576, got '" + v + "'");
      return false;
    }
    return true;
  });
  flags.boolean("--emit-generic", [&] { o.emitGeneric = true; });
  flags.value("--pin", [&](const std::string &v) {
    o.pins.push_back(v);
    return true;
  });
  flags.value("--emit-mlir", [&](const std::string &v) {
    for (const std::string &stage : dtc::emitStages())
      if (v == stage) {
        o.emitMlirAfter = v;
        return true;
      }
    fail("--emit-mlir: expected "
         "parsed|training-step|planned|split|partitioned, got '" +
         v + "'");
    return false;
  });

  std::vector<std::string> positional;
  if (!flags.parse(args, positional, "compile"))
    return 1;
  if (help) {
    llvm::outs() << kCompileHelp;
    return 0;
  }
  if (positional.size() != 1)
    return fail(positional.empty()
                    ? "dtc compile needs a MODEL.mlir (see dtc compile --help)"
                    : "dtc compile takes one model, got '" + positional[1] +
                          "' too");
  o.input = positional[0];
  o.search = true;
  if (strategyGiven && !applyStrategy(strategy, autoGiven, o))
    return 1;
  if (std::string why = searchChoices(flags, o); !why.empty())
    return fail(why);
  if (std::string why = ineffectiveFlag(flags, o); !why.empty())
    return fail(why);
  if (o.output.empty()) {
    llvm::SmallString<128> out(o.input == "-" ? "model" : o.input);
    llvm::sys::path::replace_extension(out, "dtc");
    o.output = std::string(out);
  }
  // Before anything is read or written: no output may name an input.
  std::string pathError;
  if (!dtc::rt::checkOutputsDistinct(
          {{"the model", o.input == "-" ? "" : o.input}, {"--hw", o.hw}},
          {{"-o", o.output}, {"--report", o.report}}, pathError))
    return fail(pathError);
  return dtc::runCompile(o);
}

} // namespace

/// dtc-run lives next to dtc.
std::string siblingTool(const char *argv0, const std::string &name) {
  std::string self =
      llvm::sys::fs::getMainExecutable(argv0, (void *)&siblingTool);
  llvm::SmallString<256> path(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(path, name);
  return std::string(path);
}

int execTool(const std::string &tool, std::vector<std::string> args) {
  std::vector<char *> argv;
  for (std::string &s : args)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  llvm::outs().flush();
  execv(tool.c_str(), argv.data());
  return fail("cannot start " + tool + ": " + std::strerror(errno));
}

namespace {

int runCommand(const char *argv0, const std::vector<std::string> &args) {
  std::string tool = siblingTool(argv0, "dtc-run");
  if (!llvm::sys::fs::can_execute(tool))
    return fail("cannot find dtc-run next to dtc (looked for " + tool + ")");
  bool help = false, local = false;
  for (const std::string &a : args) {
    help |= a == "--help" || a == "-h";
    // --local-ranks: the ranks are threads of dtc-run itself, no launcher.
    local |= a.rfind("--local-ranks", 0) == 0;
  }
  if (help)
    llvm::outs() << "usage: dtc run OUT.dtc --steps N [options]\n\n"
                    "Starts the artifact's ranks (mpirun, one per device; "
                    "--local-ranks: threads)\nand trains. The options are "
                    "dtc-run's, the rank executable's:\n\n";
  std::vector<std::string> argvStrings = {"dtc-run"};
  if (!help && !local)
    argvStrings.push_back("--launch");
  argvStrings.insert(argvStrings.end(), args.begin(), args.end());
  return execTool(tool, argvStrings);
}

int scheduleCommand(const std::vector<std::string> &args) {
  std::string output, input;
  bool help = false;
  Flags flags;
  flags.boolean("--help", [&] { help = true; });
  flags.alias("-h", "--help");
  flags.alias("-o", "--output");
  flags.value("--output", [&](const std::string &v) {
    output = v;
    return true;
  });
  std::vector<std::string> positional;
  if (!flags.parse(args, positional, "schedule"))
    return 1;
  if (help) {
    llvm::outs()
        << "usage: dtc schedule OUT.dtc [-o PICTURE.svg]\n\n"
           "Draws the pipeline schedule an artifact carries: every pipeline "
           "stage's\n"
           "forwards (F), input-gradient backwards (B) and weight-gradient "
           "backwards\n"
           "(W; a fused backward is drawn as B over two units) over time, with "
           "unit\n"
           "costs (F 1, B 1, W 1, B+W 2), as text and as an SVG picture, and "
           "the\n"
           "bubble (idle share) of that schedule.\n"
           "  -o, --output FILE   the SVG picture   (default: OUT with .svg)\n"
           "  -h, --help          this help\n";
    return 0;
  }
  if (positional.size() != 1)
    return fail("dtc schedule takes one artifact (see dtc schedule --help)");
  input = positional[0];
  if (output.empty()) {
    llvm::SmallString<128> out(input);
    llvm::sys::path::replace_extension(out, "svg");
    output = std::string(out);
  }
  std::string bytes, error;
  // Before anything is read or written: the picture may not replace the
  // artifact.
  if (!dtc::rt::checkOutputsDistinct({{"the artifact", input}},
                                     {{"-o", output}}, error))
    return fail(error);
  if (!dtc::rt::readFileBytes(input, bytes, error))
    return fail(input + ": " + error);
  nlohmann::json body;
  if (!dtc::rt::decodeArtifactJson(bytes, body, error))
    return fail(input + ": " + error);
  if (!body.is_object() || !body.contains("pipeline"))
    return fail(
        input +
        ": the artifact has no pipeline schedule (compile with --strategy "
        "pp=P or --microbatches M)");
  const nlohmann::json &pipe = body["pipeline"];
  auto count = [&](const char *key, int &out) {
    auto it = pipe.find(key);
    if (it == pipe.end() || !it->is_number_integer() ||
        it->get<int64_t>() < 1 || it->get<int64_t>() > (1 << 20))
      return false;
    out = it->get<int>();
    return true;
  };
  dtc::sched::Schedule schedule;
  if (!pipe.is_object() || !pipe.contains("schedule") ||
      !pipe["schedule"].is_string() || !count("stages", schedule.stages) ||
      !count("virtual_stages", schedule.virtualStages) ||
      !count("microbatches", schedule.microbatches) ||
      !body.contains("programs") || !body["programs"].is_array())
    return fail(input + ": malformed pipeline section (see docs/artifact.md)");
  schedule.name = pipe["schedule"].get<std::string>();
  schedule.perStage.assign(size_t(schedule.stages), {});
  std::vector<std::string> ranksOf(size_t(schedule.stages));
  for (const nlohmann::json &program : body["programs"]) {
    if (!program.is_object() || !program.contains("stage") ||
        !program["stage"].is_number_integer() ||
        program["stage"].get<int64_t>() < 0 ||
        program["stage"].get<int64_t>() >= schedule.stages ||
        !program.contains("schedule") || !program.contains("ranks") ||
        !program["ranks"].is_array())
      return fail(input +
                  ": a program without a valid stage, schedule and ranks");
    size_t stage = program["stage"].get<size_t>();
    if (!dtc::sched::actionsFromJson(program["schedule"],
                                     schedule.perStage[stage], error))
      return fail(input + ": stage " + std::to_string(stage) +
                  " schedule: " + error);
    for (const nlohmann::json &r : program["ranks"])
      if (r.is_number_integer())
        ranksOf[stage] += (ranksOf[stage].empty() ? "" : ", ") +
                          std::to_string(r.get<int64_t>());
  }
  dtc::sched::Simulation sim = dtc::sched::simulate(schedule);
  if (!sim.ok)
    return fail(input + ": " + sim.error);
  llvm::outs() << dtc::sched::renderText(schedule, sim);
  for (size_t d = 0; d < ranksOf.size(); ++d)
    llvm::outs() << "stage " << d << ": ranks " << ranksOf[d] << "\n";
  if (!dtc::rt::writeOutputFile(output, dtc::sched::renderSvg(schedule, sim),
                                error))
    return fail("cannot write " + output + ": " + error);
  llvm::outs() << "picture: " << output << "\n";
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  dtc::rt::removeTemporaryFilesOnSignals();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" ||
      args[0] == "help") {
    llvm::outs() << kTopHelp;
    return args.empty() ? 1 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    llvm::outs() << "dtc " << DTC_VERSION_STRING << "\n";
    return 0;
  }
  std::string command = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "compile")
    return compileCommand(rest);
  if (command == "run") {
    // Until dtc-run has its handlers (it unblocks these): a Ctrl-C or a
    // SIGTERM meanwhile stays pending across the exec and reaches them, so
    // the run stops as asked, saving, instead of dying half started.
    sigset_t stops;
    sigemptyset(&stops);
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
      sigaddset(&stops, sig);
    ::sigprocmask(SIG_BLOCK, &stops, nullptr);
    return runCommand(argv[0], rest);
  }
  if (command == "eval")
    return evalCommand(argv[0], rest);
  if (command == "inspect")
    return inspectCommand(rest);
  if (command == "schedule")
    return scheduleCommand(rest);
  if (command == "calibrate")
    return calibrateCommand(argv[0], rest);
  return fail(
      "unknown command '" + command + "'" +
      dtc::didYouMean(command, {"compile", "run", "eval", "inspect", "schedule",
                                "calibrate", "--help", "--version"}) +
      " (expected compile, run, eval, inspect, schedule or calibrate; see "
      "dtc --help)");
}
