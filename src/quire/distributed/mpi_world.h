#pragma once
// The communicator of an MPI job (communicator.h), compiled only where CMake
// found MPI (QUIRE_HAVE_MPI); launch.h's join_launched_job is its one caller.
// This header names nothing of MPI, so no other file needs MPI's headers.

#include <memory>

#include "quire/distributed/communicator.h"

namespace quire::distributed {

/// Initializes MPI and returns MPI_COMM_WORLD as a Communicator (see
/// mpi_world.cpp for how it finds a dead or silent rank). Finalizes MPI when
/// destroyed. std::runtime_error when MPI cannot start.
std::unique_ptr<Communicator> open_mpi_world(double timeout_s);

}  // namespace quire::distributed
