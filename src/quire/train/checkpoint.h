#pragma once
// Checkpoints of a training run, and the choice of one to resume from.
//
// LAYOUT. A checkpoint is a folder <dir>/step-<step, 8 digits or more>/:
//   params.safetensors      the parameters, each in its stored type (F32 masters as F32)
//   optimizer.safetensors   the optimizer's state tensors
//   state.json              everything else:
//     {"format": "quire-checkpoint", "format_version": 1, "quire_version": "0.1.0",
//      "step": 150, "epoch": 2, "data_position": {"epoch": 2, "batch": 3, "samples": 152},
//      "schedule_step": 150, "loss_scale": <caller's JSON>, "random": <caller's JSON>,
//      "trainer": <caller's JSON: the settings a resume must repeat, the optimizer's counters>,
//      "files": {"params.safetensors":    {"bytes": N, "sha256": "<64 hex digits>"},
//                "optimizer.safetensors": {"bytes": M, "sha256": "…"}},
//      "state_sha256": "<SHA-256 of the compact JSON dump of every other field>"}
//   The state is covered by its checksum as the tensors are by theirs: a
//   changed digit in a counter is refused, not resumed from.
//
// ATOMICITY. write_checkpoint fills <dir>/.step-<step>.tmp/ (a left-over one
// from a crash is removed first), each file written and fsynced, fsyncs that
// folder, renames it to step-<step>, then fsyncs <dir>. A crash leaves either
// no step-<step> folder or a complete one; a dot-folder is never read. A
// step-<step> that already exists (a run resumed before it) is first renamed
// to .step-<step>.old and removed after the new one is in place.
//
// KEEPING K. After the rename, step folders are ordered newest (highest step)
// first; the first `keep` trusted ones are kept, and every older trusted one
// is removed. A run trusts the checkpoints it wrote and those it read back
// whole (state.json, sizes, checksums: what a resume verifies), each read at
// most once (CheckpointRetention). A folder it cannot read (corrupt, of a
// newer format version, half-written) is neither counted nor removed, so
// refused checkpoints can never push a run's own out; were the checkpoint
// just written about to be removed, write_checkpoint fails instead. A
// step-<step> folder that the new one replaces is removed only if it is
// trusted; otherwise it is renamed to step-<step>.refused (a name no reader
// takes for a checkpoint) and left for the user.
//
// RESUME. find_latest(dir) tries the step folders newest first and returns
// the first that verifies fully: state.json parses, matches its checksum,
// has every field, is consistent (epoch is data_position's epoch, the
// schedule is not past the step) and names its own step; both files exist, have the recorded sizes and SHA-256
// digests, and decode. Each newer folder that fails is reported with its path
// and reason ("params.safetensors: checksum mismatch"), so the trainer can say
// which checkpoint it refused and which it used.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "quire/io/io_error.h"
#include "quire/train/data.h"

namespace quire::train {

/// The version written into state.json. Keep equal to project(VERSION) in
/// the top-level CMakeLists.txt and `quire --version`.
inline constexpr const char* kQuireVersion = "0.1.0";
/// state.json's "format_version": raise it when a field changes meaning.
inline constexpr int kCheckpointFormatVersion = 2;
/// How many complete checkpoints write_checkpoint keeps by default.
inline constexpr int kDefaultKeep = 3;

/// Everything of a run's state other than tensors.
struct CheckpointState {
  int64_t step = 0;           ///< optimizer steps taken
  int64_t epoch = 0;          ///< the epoch the next step belongs to
  DataPosition data;          ///< Loader::position() after the last step
  int64_t schedule_step = 0;  ///< the learning-rate schedule's step
  nlohmann::json loss_scale;  ///< opaque to checkpoints (null when the run has none)
  nlohmann::json random;      ///< opaque to checkpoints: the run's random state
  nlohmann::json trainer;     ///< opaque to checkpoints: the trainer's own state (settings a resume must repeat, counters)
  std::string quire_version;  ///< read back; write_checkpoint writes kQuireVersion
};

/// A checkpoint as read back: the tensors with the store type of each real
/// tensor (so writing them again keeps F32 masters F32), and the state.
struct Checkpoint {
  std::string path;  ///< the folder, <dir>/step-<step>
  CheckpointState state;
  io::NamedTensors params;
  io::StoreTypes param_types;  ///< by name, for every real tensor of `params`
  io::NamedTensors optimizer;
  io::StoreTypes optimizer_types;
};

/// Which checkpoints of a folder a run may count toward keeping K and remove
/// (KEEPING K above). One per run, so that each folder is read at most once.
class CheckpointRetention {
 public:
  explicit CheckpointRetention(int keep = kDefaultKeep);
  int keep() const { return keep_; }
  /// Marks `folder` as verified: the checkpoint a run resumed from.
  void trust(const std::string& folder);
  /// Whether `folder` was written by this run or reads back whole (read once).
  bool trusted(const std::string& folder);
  /// Removes every trusted step folder of `dir` older than the `keep`-th
  /// trusted one. io::IoError, removing nothing more, if `written` would be one.
  void prune(const std::string& dir, const std::string& written);

 private:
  int keep_;
  std::map<std::string, bool> readable_;  ///< by folder path: the verdict of trusted()
};

/// The folder name of a step: "step-00000150".
std::string checkpoint_folder_name(int64_t step);

/// Writes the checkpoint of `state.step` into `dir` (created if missing),
/// atomically (see above), then removes all but the newest `keep` trusted
/// checkpoints (KEEPING K; a fresh CheckpointRetention, which reads every
/// folder it did not write). Returns the folder's path. Throws io::IoError naming the file
/// or folder that failed: before the rename, no step-<step> folder has been
/// created and none removed (a replaced one may remain as .step-<step>.old);
/// an old checkpoint that cannot be removed is reported after the new one is
/// in place.
std::string write_checkpoint(const std::string& dir, const CheckpointState& state, const io::NamedTensors& params,
                             const io::StoreTypes& param_types, const io::NamedTensors& optimizer,
                             const io::StoreTypes& optimizer_types, int keep = kDefaultKeep);

/// As above, keeping what `retention` says: a run's checkpoints after the
/// first are written with the retention that wrote (or resumed from) the first.
std::string write_checkpoint(const std::string& dir, const CheckpointState& state, const io::NamedTensors& params,
                             const io::StoreTypes& param_types, const io::NamedTensors& optimizer,
                             const io::StoreTypes& optimizer_types, CheckpointRetention& retention);

/// Checks a state.json already parsed as read_checkpoint does before it
/// reads the tensors (checksum, fields, consistency, the step of `folder`'s
/// name), and returns the state. Throws io::IoError "FOLDER: state.json: reason".
CheckpointState checkpoint_state_from_json(const nlohmann::json& j, const std::string& folder);

/// Reads and verifies the checkpoint folder `path`. Throws io::IoError
/// "PATH: reason" with the reasons find_latest reports.
Checkpoint read_checkpoint(const std::string& path);

/// A checkpoint folder that find_latest refused.
struct RefusedCheckpoint {
  std::string path;    ///< the folder
  std::string reason;  ///< "params.safetensors: checksum mismatch", "missing optimizer.safetensors", …
  std::string message() const { return path + ": " + reason; }
};

/// The result of find_latest.
struct LatestCheckpoint {
  std::optional<Checkpoint> checkpoint;    ///< the newest valid one; none if no folder verifies
  std::vector<RefusedCheckpoint> refused;  ///< every newer folder that failed, newest first
};

/// The newest valid checkpoint in `dir` (see RESUME above). A missing `dir`
/// is no checkpoint; names other than step-<digits> (.tmp and .old folders,
/// stray files) are ignored.
LatestCheckpoint find_latest(const std::string& dir);

}  // namespace quire::train
