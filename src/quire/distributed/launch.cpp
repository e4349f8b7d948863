#include "quire/distributed/launch.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <stdexcept>

#ifdef QUIRE_HAVE_MPI
#include "quire/distributed/mpi_world.h"
#endif

namespace quire::distributed {

std::optional<LaunchedJob> launched_job() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* value = std::getenv(name);
    if (!value) continue;
    const std::string text = value;
    int size = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), size);
    if (ec != std::errc() || end != text.data() + text.size() || size < 1)
      throw std::runtime_error(fmt::format("{}={}: a launcher's rank count must be a whole number ≥ 1", name, text));
    return LaunchedJob{size, fmt::format("{}={}", name, text)};
  }
  return std::nullopt;
}

bool built_with_mpi() {
#ifdef QUIRE_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::string how_to_get_mpi() {
  return "install Open MPI and its headers (Debian and Ubuntu: `apt-get install openmpi-bin libopenmpi-dev`, or "
         "`scripts/setup`), then configure and build quire again: CMake finds MPI and links it";
}

std::unique_ptr<Communicator> join_launched_job(double timeout_s) {
  const std::optional<LaunchedJob> job = launched_job();
  if (!job || job->size == 1) return nullptr;
#ifdef QUIRE_HAVE_MPI
  return open_mpi_world(timeout_s);
#else
  (void)timeout_s;
  throw std::runtime_error(fmt::format(
      "this process is one of {} ranks ({}), but this quire was built without MPI, so its ranks cannot share a run: "
      "{}",
      job->size, job->variable, how_to_get_mpi()));
#endif
}

}  // namespace quire::distributed
