#pragma once
// The metrics file of a training run: one JSON object per line, one line per
// optimizer step, in step order ("JSON lines"). Each line is written and
// flushed as its step ends, so a killed run leaves every step it finished,
// plus at most one torn line (no trailing newline) that readers ignore.
//
// A resumed run continues from its last checkpoint, which may be older than
// the last line logged: MetricsFile drops the lines after the checkpoint's
// step before appending, so the file never holds a step twice.
//
// JSON has no NaN or Infinity, yet a diverging loss or gradient norm is
// exactly what the file must record: a non-finite double is written as the
// string "nan", "inf" or "-inf". Finite doubles are written in the shortest
// form that reads back bit-exactly.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace quire::train {

/// What one optimizer step reports; a line of the metrics file.
struct StepRecord {
  int64_t step = 0;         ///< steps done after this one, from 1
  int64_t total_steps = 0;  ///< the run's steps (all epochs)
  int64_t epoch = 0;        ///< the epoch this step belongs to, from 0
  int64_t epochs = 0;
  double loss = 0;  ///< the objective on this step's batch, before the update (may be NaN/Inf)
  double lr = 0;
  double grad_norm = 0;  ///< joint gradient norm before clipping (may be NaN/Inf)
  bool clipped = false;
  bool skipped = false;              ///< f16 loss scaling: gradients not finite, update skipped
  std::optional<double> loss_scale;  ///< only f16 runs have one
  double samples_per_s = 0;          ///< throughput over the recent steps (train/pace.h)
  double elapsed_s = 0;              ///< wall time of this invocation so far
  double eta_s = 0;                  ///< seconds left at the recent steps' pace
  /// The run's `evaluate` function's mean over the held-out batches after
  /// this step's update, on the steps it ran (every N and the last).
  std::optional<double> held_out_loss;
  /// Under a realization with ranges: the values this step stored beyond the
  /// range their narrowed type was chosen for (interp/envelope_guard.h).
  std::optional<int64_t> envelope_exceeded;
};

/// The record as a JSON object, keys in the field order of StepRecord;
/// non-finite doubles as "nan", "inf" or "-inf"; no "loss_scale" (or
/// "held_out_loss", "envelope_exceeded") key when the record has none.
nlohmann::ordered_json to_json(const StepRecord& r);

/// The inverse of to_json. Keys it does not know are ignored (a newer quire
/// may log more). std::runtime_error naming the key when one is missing or of
/// the wrong type, e.g. "missing key `loss`", "key `step` is not an integer".
StepRecord step_record_from_json(const nlohmann::json& j);

/// An open metrics file that steps are appended to.
class MetricsFile {
 public:
  /// Opens `path` for appending, creating it if absent. Lines whose "step"
  /// is > keep_through_step are dropped first, and so is a torn last line;
  /// when anything is dropped the file is rewritten atomically, so a kill
  /// during the rewrite leaves the old file whole. keep_through_step = 0 (a
  /// fresh run) empties the file without reading it. io::IoError naming the
  /// path when it cannot be read, rewritten or opened, and "PATH:LINE: reason"
  /// for a malformed complete line (it is not silently thrown away).
  MetricsFile(const std::string& path, int64_t keep_through_step);

  /// Appends the record's line and flushes it to the OS, so a kill loses at
  /// most the line being written. io::IoError naming the path on failure.
  void append(const StepRecord& r);

  const std::string& path() const { return path_; }
  /// What opening the file repaired, for the user ("" when nothing): a torn
  /// last line means a step's metrics were lost, which must not go unsaid.
  const std::string& repair() const { return repair_; }

 private:
  struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::string repair_;
  std::unique_ptr<std::FILE, CloseFile> file_;
};

/// Every complete line of the metrics file at `path`, in file order; a torn
/// last line is ignored. io::IoError when the file cannot be read, and for a
/// malformed complete line one whose `path` member is "PATH:LINE" (lines from
/// 1), so that what() reads "PATH:LINE: reason" like a compiler's message.
std::vector<StepRecord> read_metrics(const std::string& path);

}  // namespace quire::train
