#pragma once
// What the ranks of an MPI run share before their first step (trainer.h,
// SHARDS): the description of the run they must agree on, and the
// checkpoint a resumed run starts from.

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "quire/core/program.h"
#include "quire/distributed/communicator.h"
#include "quire/train/checkpoint.h"
#include "quire/train/trainer.h"

namespace quire::train {

/// The files and settings of a run that its options alone do not say.
struct RunDescription {
  std::string data_path;      ///< the training data, resolved
  std::string held_out_path;  ///< the `evaluate` clause's data, resolved ("" if none)
  std::map<std::string, int64_t> dims;
  std::string run_dir;
};

/// What decides a rank's steps, as named fields for distributed::agree:
/// quire's version, the rank count, the digests of the program's own files
/// (the prelude is quire's and comes with its version), of the data and the
/// held-out data (an .npy in C order: its size and the SHA-256 of its header
/// and of a spread sample of its rows, since a rank reads only its rows of
/// it; any other: size and SHA-256), of --params and --realize files (size
/// and SHA-256),
/// the policy, the seed, the dimensions, --resume, --max-steps, the run
/// folder and the loss scale's settings. Threads and the backend are left
/// out: they do not change the bits, so ranks may differ in them. io::IoError
/// when a file cannot be read.
nlohmann::json describe_run(const elab::Program& prog, const TrainOptions& options, const RunDescription& run);

/// The checkpoint every rank of `world` resumes from: rank 0's `chosen`
/// (found by find_latest), named to the others with the SHA-256 of its
/// state.json (which holds the digests of its tensor files), read and
/// verified by each of them from the same folder. Ranks other than 0 pass
/// nullopt. TrainError on a rank that cannot read it or reads another
/// state.json: the run folder must be one folder shared by every node.
std::optional<Checkpoint> share_checkpoint(distributed::Communicator& world, std::optional<Checkpoint> chosen);

}  // namespace quire::train
