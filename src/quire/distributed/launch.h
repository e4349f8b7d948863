#pragma once
// Whether this process is one rank of a job an MPI launcher started
// (`mpirun -n N quire train …`), and joining that job.
//
// A launcher says so in the environment it gives each rank: Open MPI's
// mpirun sets OMPI_COMM_WORLD_SIZE, MPICH's Hydra and Slurm's PMI set
// PMI_SIZE. quire reads them before touching MPI, so a quire built without
// MPI can still tell a user who runs it under mpirun how to get it, rather
// than run N unrelated copies of the same training, each writing the same
// files.

#include <memory>
#include <optional>
#include <string>

#include "quire/distributed/communicator.h"

namespace quire::distributed {

/// Where a launcher said this process is one of several ranks.
struct LaunchedJob {
  int size = 1;          ///< the job's rank count
  std::string variable;  ///< the variable that said so: "OMPI_COMM_WORLD_SIZE=2"
};

/// The job this process was launched into, from the environment; nullopt
/// when no launcher variable is set. A variable that is not a count ≥ 1 is
/// an std::runtime_error naming it.
std::optional<LaunchedJob> launched_job();

/// Whether this quire was built with MPI (QUIRE_HAVE_MPI).
bool built_with_mpi();

/// How a user gets a quire that can run under mpirun (for the error of one that cannot).
std::string how_to_get_mpi();

/// Joins the job this process was launched into, if any: nullptr when it
/// was started alone or as a job of one rank (nothing to share); otherwise
/// the job's communicator, whose send and receive give up on a silent peer
/// after `timeout_s` seconds. std::runtime_error, saying how to get MPI,
/// when launched into a job of several ranks by a quire built without it.
std::unique_ptr<Communicator> join_launched_job(double timeout_s);

}  // namespace quire::distributed
