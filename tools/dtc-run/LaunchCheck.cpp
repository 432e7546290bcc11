//===- LaunchCheck.cpp - what dtc run refuses before starting ranks -------===//
#include "LaunchCheck.h"

#include "dtc/runtime/Backend.h"
#include "dtc/runtime/MemoryPlan.h"

#include <algorithm>
#include <cstdlib>

namespace dtc::rt {

namespace {
constexpr int64_t kDefaultRanksPerCore = 8;

/// DTC_MAX_RANKS_PER_CORE, or the default.
int64_t ranksPerCoreLimit() {
  const char *env = std::getenv("DTC_MAX_RANKS_PER_CORE");
  if (!env || !*env)
    return kDefaultRanksPerCore;
  char *end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  if (*end != '\0' || v < 1)
    throw Error(std::string("DTC_MAX_RANKS_PER_CORE=") + env +
                ": expected a positive integer (ranks per core dtc run may "
                "start on this node)");
  return v;
}

/// N of "ppr:N:node".
int64_t perNodeOfMapping(const std::string &mapping) {
  if (mapping.rfind("ppr:", 0) != 0)
    return 0;
  const size_t colon = mapping.find(':', 4);
  if (colon == std::string::npos || mapping.compare(colon, 5, ":node") != 0)
    return 0;
  return std::atoll(mapping.substr(4, colon - 4).c_str());
}
} // namespace

std::vector<std::string> userMpirunArgs() {
  std::vector<std::string> args;
  const char *extra = std::getenv("DTC_MPIRUN_ARGS");
  std::string cur;
  for (const char *c = extra ? extra : "";; ++c) {
    if (*c == '\0' || *c == ' ' || *c == '\t' || *c == '\n') {
      if (!cur.empty())
        args.push_back(cur);
      cur.clear();
      if (*c == '\0')
        break;
    } else {
      cur += *c;
    }
  }
  return args;
}

int64_t localRanksOf(int64_t devices, const std::vector<std::string> &user) {
  bool otherHosts = false;
  for (size_t i = 0; i < user.size(); ++i) {
    const std::string &arg = user[i];
    const std::string next = i + 1 < user.size() ? user[i + 1] : "";
    int64_t perNode = 0;
    if (arg == "-npernode" || arg == "--npernode")
      perNode = std::atoll(next.c_str());
    else if (arg == "--map-by" || arg == "-map-by")
      perNode = perNodeOfMapping(next);
    if (perNode > 0)
      return std::min(devices, perNode);
    otherHosts |= arg == "--hostfile" || arg == "-hostfile" ||
                  arg == "--machinefile" || arg == "-machinefile" ||
                  arg == "--host" || arg == "-host" || arg == "-H";
  }
  return otherHosts ? 0 : devices;
}

void checkLaunchFits(const Artifact &a, const TrainOptions &o,
                     const std::vector<std::string> &user, int64_t cores) {
  const int64_t local = localRanksOf(a.devices, user);
  if (local == 0)
    return; // spread over hosts named elsewhere: each rank checks its node
  const int64_t limit = ranksPerCoreLimit();
  if (local > limit * std::max<int64_t>(cores, 1))
    throw Error(o.artifactPath + " runs on " + std::to_string(a.devices) +
                " devices, and dtc run would start " + std::to_string(local) +
                " of their ranks on this node of " + std::to_string(cores) +
                " core" + (cores == 1 ? "" : "s") + ", more than " +
                std::to_string(limit) +
                " per core: run it across nodes (DTC_MPIRUN_ARGS=\"--hostfile "
                "FILE -npernode N\", docs/launching.md), compile it for fewer "
                "devices, or raise DTC_MAX_RANKS_PER_CORE");
  if (o.checkMemory && o.backend == "cpu")
    checkMemoryFits(a, int(local),
                    o.threads > 0 ? o.threads
                                  : defaultKernelThreads(int(local)));
}

} // namespace dtc::rt
