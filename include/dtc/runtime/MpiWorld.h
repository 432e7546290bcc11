//===- MpiWorld.h - the MPI implementation of World --------------*- C++
//-*-===//
//
// Library dtc_runtime_mpi. Group communicators come from MPI_Comm_split with
// color = the rank's coordinates on the axes NOT in the group and key = its
// index inside the group (docs/artifact.md "Communicators"). Communications
// are non-blocking and polled against the world's timeout.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_MPIWORLD_H
#define DTC_RUNTIME_MPIWORLD_H

#include "dtc/runtime/Communicator.h"

#include <functional>

namespace dtc::rt {

/// MPI must be initialised (MPI_Init) before and finalised after the World's
/// lifetime; the World duplicates MPI_COMM_WORLD and sets MPI_ERRORS_RETURN
/// on MPI_COMM_WORLD (so MPI errors become CommFailure messages).
std::unique_ptr<World> makeMpiWorld();

/// Runs a blocking MPI call (MPI_Init, MPI_Finalize) under the watchdog: if
/// it has not returned after `timeoutSeconds` (0 = never), the process
/// reports "timed out after T s in WHAT" (to the supervisor of `dtc run`, or
/// on stderr) and exits with status 1.
void runBlockingMpiCall(double timeoutSeconds, const std::string &what,
                        const std::function<void()> &call);

} // namespace dtc::rt

#endif // DTC_RUNTIME_MPIWORLD_H
