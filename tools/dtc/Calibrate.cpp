//===- Calibrate.cpp - dtc calibrate: measure this machine's cpu profile -===//
//
// For each rank count, `dtc-run --launch --calibrate` starts that many
// ranks as `dtc run` would (mpirun, placement, kernel threads) and measures
// (runtime/cpu/Calibrate.cpp); this command gathers the profiles into the
// calibration file `--hw cpu` reads (docs/cost-model.md "Calibrating the
// cpu profile").
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Flags.h"

#include "dtc/CostModel/CostModel.h"
#include "dtc/artifact/OutputFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

using json = nlohmann::json;

namespace {

constexpr const char *kCalibrateHelp =
    R"(usage: dtc calibrate [--ranks 1,2,4,8] [-o FILE]

Measures this machine as the cost model sees a CPU device, for each rank
count: R ranks started as `dtc run` starts an R-device artifact, all
measuring at once (the matmul kernel's peak and the GEMM size at which it
reaches half of it, the element-wise bandwidth and per-kernel overhead,
fused attention's rate forward and backward and the size of a head at
which it reaches half of it, the norms' and the Adam update's bandwidth
and overhead, the ring all-reduce's latency, bandwidth and sync overhead,
what a call adds when the ranks compute between calls, for every group
size). `--hw cpu` then plans with the entry for the mesh's device count.

  --ranks LIST   rank counts to measure, comma-separated   (default: 1,2,4,8)
  -o, --output FILE
                 where to write it (default: the cache --hw cpu reads,
                 $DTC_CACHE_DIR/cpu-calibration.json, else
                 $XDG_CACHE_HOME/dtc/..., else ~/.cache/dtc/...)
)";

/// Parses "1,2,4,8".
bool parseRanks(const std::string &text, std::vector<int> &ranks) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    char *end = nullptr;
    long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 1 || value > 4096)
      return false;
    ranks.push_back(int(value));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return !ranks.empty();
}

std::string fmt(const char *format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

/// One line per rank count: what the cost model will use.
void printSummary(const json &profiles) {
  llvm::outs() << "ranks  GFLOP/s/rank  half-eff GFLOP  GB/s/rank  overhead "
                  "us  attention GFLOP/s (fwd, bwd)  norms GB/s  adam GB/s  "
                  "all-reduce links (group: GB/s, latency us, sync overhead us "
                  "after ramp ms of compute)\n";
  for (const auto &[ranks, p] : profiles.items()) {
    llvm::outs() << fmt("%5.0f", std::stod(ranks)) << "  "
                 << fmt("%12.1f", p["peak_flops"]["f32"].get<double>() / 1e9)
                 << "  "
                 << fmt("%14.4f",
                        p["gemm_efficiency"]["half_flops"].get<double>() / 1e9)
                 << "  "
                 << fmt("%9.2f", p["memory_bandwidth"].get<double>() / 1e9)
                 << "  "
                 << fmt("%11.2f", p["kernel_overhead"].get<double>() * 1e6)
                 << "  ";
    // Attention's best rate (its curve's max of the peak), the row
    // reductions' and the Adam update's bandwidth.
    const json &classes = p["kernel_classes"];
    const double peak = p["peak_flops"]["f32"].get<double>();
    llvm::outs()
        << fmt("%20.1f", classes["attention"]["max"].get<double>() * peak / 1e9)
        << ", "
        << fmt("%6.1f",
               classes["attention_grad"]["max"].get<double>() * peak / 1e9)
        << "  "
        << fmt("%10.2f",
               classes["row_reduction"]["bandwidth"].get<double>() / 1e9)
        << "  "
        << fmt("%9.2f", classes["optimizer"]["bandwidth"].get<double>() / 1e9)
        << " ";
    for (const auto &[group, link] : p["group_links"].items())
      llvm::outs() << " " << group << ": "
                   << fmt("%.2f", link["bandwidth"].get<double>() / 1e9) << ", "
                   << fmt("%.1f", link["latency"].get<double>() * 1e6) << ", "
                   << fmt("%.0f", link.value("sync_overhead", 0.0) * 1e6)
                   << " after "
                   << fmt("%.1f", link.value("sync_ramp", 0.0) * 1e3);
    llvm::outs() << "\n";
  }
}

} // namespace

int calibrateCommand(const char *argv0, const std::vector<std::string> &args) {
  std::vector<int> ranks;
  std::string output;
  bool help = false;
  Flags flags;
  flags.boolean("--help", [&] { help = true; });
  flags.alias("-h", "--help");
  flags.alias("-o", "--output");
  flags.value("--output", [&](const std::string &v) {
    output = v;
    return true;
  });
  flags.value("--ranks", [&](const std::string &v) {
    ranks.clear();
    if (parseRanks(v, ranks))
      return true;
    fail("--ranks: expected rank counts in [1, 4096] separated by commas, "
         "e.g. 1,2,4,8, got '" +
         v + "'");
    return false;
  });
  std::vector<std::string> positional;
  if (!flags.parse(args, positional, "calibrate"))
    return 1;
  if (help) {
    llvm::outs() << kCalibrateHelp;
    return 0;
  }
  if (!positional.empty())
    return fail("dtc calibrate takes no arguments, got '" + positional[0] +
                "' (see dtc calibrate --help)");
  if (ranks.empty())
    ranks = {1, 2, 4, 8};
  if (output.empty()) {
    output = dtc::cost::cpuCalibrationPath();
    if (std::error_code ec = llvm::sys::fs::create_directories(
            llvm::sys::path::parent_path(output))) {
      return fail("cannot create the calibration's directory for " + output +
                  ": " + ec.message());
    }
  }

  const std::string tool = siblingTool(argv0, "dtc-run");
  if (!llvm::sys::fs::can_execute(tool))
    return fail("cannot find dtc-run next to dtc (looked for " + tool + ")");
  llvm::SmallString<128> scratch;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("dtc-calibrate", "json", scratch))
    return fail("cannot create a temporary file: " + ec.message());
  const std::string measured(scratch);
  json profiles = json::object();
  for (int r : ranks) {
    llvm::errs() << "dtc: calibrate: measuring on " << r << " rank"
                 << (r == 1 ? "" : "s") << "\n";
    std::vector<std::string> argvStrings = {tool,          "--launch",
                                            "--calibrate", measured,
                                            "--ranks",     std::to_string(r)};
    std::vector<llvm::StringRef> argvRefs(argvStrings.begin(),
                                          argvStrings.end());
    std::string execError;
    const int status = llvm::sys::ExecuteAndWait(tool, argvRefs, std::nullopt,
                                                 {}, 0, 0, &execError);
    std::ifstream in(measured);
    json profile = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (status != 0 || profile.is_discarded() || !profile.is_object()) {
      llvm::sys::fs::remove(measured);
      return fail("calibration on " + std::to_string(r) + " ranks failed" +
                  (execError.empty() ? "" : ": " + execError) +
                  " (dtc-run's error above)");
    }
    profiles[std::to_string(r)] = profile;
  }
  llvm::sys::fs::remove(measured);

  std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const json calibration = {
      {"format", "dtc-cpu-calibration"},
      {"version", 1},
      {"created", when},
      {"host_cores", int(std::thread::hardware_concurrency())},
      {"profiles", profiles}};
  std::string writeError;
  if (!dtc::rt::writeOutputFile(output, calibration.dump(2) + "\n", writeError))
    return fail("cannot write " + output + ": " + writeError);
  printSummary(profiles);
  llvm::outs() << "wrote " << output << "\n";
  return 0;
}
