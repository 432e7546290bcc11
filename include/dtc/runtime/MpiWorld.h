//===- MpiWorld.h - the MPI implementation of World --------------*- C++ -*-===//
//
// Library dtc_runtime_mpi. Group communicators come from MPI_Comm_split with
// color = the rank's coordinates on the axes NOT in the group and key = its
// index inside the group (docs/artifact.md "Communicators").
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_MPIWORLD_H
#define DTC_RUNTIME_MPIWORLD_H

#include "dtc/runtime/Communicator.h"

namespace dtc::rt {

/// MPI must be initialised (MPI_Init) before and finalised after the World's
/// lifetime; the World duplicates MPI_COMM_WORLD.
std::unique_ptr<World> makeMpiWorld();

} // namespace dtc::rt

#endif // DTC_RUNTIME_MPIWORLD_H
