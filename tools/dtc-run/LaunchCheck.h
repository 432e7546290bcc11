//===- LaunchCheck.h - what dtc run refuses before starting ranks -*- C++
//-*-===//
//
// `dtc run` (dtc-run --launch) starts every rank of an artifact with
// mpirun. Before it does, the supervisor checks that the ranks it would
// start on this node can run here: not more than a set number per core (a
// 1024-device artifact on a laptop would start 1024 processes and bury the
// machine), and, on the CPU backend, within the node's memory (the numbers
// each rank would compute itself, but before any of them exists).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TOOLS_DTC_RUN_LAUNCHCHECK_H
#define DTC_TOOLS_DTC_RUN_LAUNCHCHECK_H

#include "dtc/artifact/Artifact.h"
#include "dtc/runtime/Trainer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtc::rt {

/// DTC_MPIRUN_ARGS split on whitespace.
std::vector<std::string> userMpirunArgs();

/// Ranks of `devices` that mpirun starts on this node: all, unless the
/// user's mpirun arguments place N per node (-npernode N, --npernode N,
/// --map-by ppr:N:node); 0 (unknown here) when they name other hosts
/// without a count per node.
int64_t localRanksOf(int64_t devices, const std::vector<std::string> &user);

/// Throws Error, in one line naming the numbers and the way out, when the
/// local ranks exceed the ranks-per-core limit (DTC_MAX_RANKS_PER_CORE,
/// default 8) of `cores`, or (CPU backend, unless --no-memory-check) the
/// node's memory.
void checkLaunchFits(const Artifact &a, const TrainOptions &o,
                     const std::vector<std::string> &user, int64_t cores);

} // namespace dtc::rt

#endif // DTC_TOOLS_DTC_RUN_LAUNCHCHECK_H
