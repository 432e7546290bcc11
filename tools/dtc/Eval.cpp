//===- Eval.cpp - dtc eval: the loss of a checkpoint on held-out tokens ---===//
//
// `dtc eval OUT.dtc --load CKPT --data FILE` is `dtc run OUT.dtc --steps 0
// --load CKPT --eval-data FILE`: the artifact's ranks load the checkpoint and
// run its evaluation once (docs/cli.md "dtc eval"), so the number is the one
// a training run with --eval-data printed when it saved that checkpoint.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <utility>

namespace {

constexpr const char *kEvalHelp =
    R"(usage: dtc eval OUT.dtc --data FILE [--load CKPT|DIR] [options]

Prints `eval step K loss X`: the loss of the checkpoint's parameters (K: its
step count; without --load, the seed's initial parameters and K = 0)
averaged over the first batches of the token file FILE, in the file's order,
run forward only on the artifact's ranks (no backward, no update). It is the
number a training run with --eval-data FILE printed after step K.

options:
  --data FILE            the tokens to evaluate on (required)
  --load CKPT|DIR        the parameters (a checkpoint of any mesh and plan)
  --eval-batches K       global batches to average over (default: 10, or
                         fewer if the file holds fewer)
  --data-dtype, --seed, --backend, --collectives, --local-ranks, --threads,
  --timeout, --no-memory-check
                         as for dtc run (dtc run --help)
)";

bool startsWithFlag(const std::string &arg, const std::string &flag) {
  return arg == flag || arg.rfind(flag + "=", 0) == 0;
}

} // namespace

int evalCommand(const char *argv0, const std::vector<std::string> &args) {
  for (const std::string &a : args)
    if (a == "--help" || a == "-h") {
      llvm::outs() << kEvalHelp;
      return 0;
    }
  const std::string tool = siblingTool(argv0, "dtc-run");
  if (!llvm::sys::fs::can_execute(tool))
    return fail("cannot find dtc-run next to dtc (looked for " + tool + ")");
  // Flags of a training run mean nothing for one evaluation.
  for (const char *trainingOnly :
       {"--steps", "--eval-data", "--eval-every", "--save", "--save-every",
        "--save-step", "--log", "--shuffle", "--print-every"})
    for (const std::string &a : args)
      if (startsWithFlag(a, trainingOnly))
        return fail("dtc eval: " + std::string(trainingOnly) +
                    " is a training run's (dtc run); dtc eval evaluates once");
  std::vector<std::string> rest;
  bool haveData = false, local = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    local |= startsWithFlag(a, "--local-ranks");
    if (a == "--data") {
      rest.push_back("--eval-data");
      haveData = true;
    } else if (a.rfind("--data=", 0) == 0) {
      rest.push_back("--eval-data=" + a.substr(7));
      haveData = true;
      continue;
    }
    if (a != "--data")
      rest.push_back(a);
  }
  if (!haveData)
    return fail("dtc eval: --data FILE is required (the tokens to evaluate "
                "on; see dtc eval --help)");
  std::vector<std::string> argvStrings = {"dtc-run"};
  if (!local)
    argvStrings.push_back("--launch");
  argvStrings.insert(argvStrings.end(), rest.begin(), rest.end());
  argvStrings.push_back("--steps=0");
  return execTool(tool, std::move(argvStrings));
}
