#pragma once
// The training run: `quire train FILE` runs the main file's `training run`
// block. One step is
//
//   batch  ← the loader's next batch (data.h)
//   (L, ∂θ) ← objective.vjp(θ, batch, s)     s = the loss scale under f16, else 1
//             objective.vjp(θ, batch, k, s)  an objective that takes a key: k = step_key(seed, step)
//   check   L and ∂θ finite (see NON-FINITE below)
//   f16:    ∂θ ← ∂θ · f32(1/s); skip the update if any element is not finite
//   θ, state ← the optimizer's update (optimizer.h: clip, AdamW/SGD/Muon, schedule)
//   log     a metrics line (metrics.h) and the progress line (progress.h)
//   every N steps (or epochs): an atomic checkpoint (checkpoint.h)
//
// The gradient is the objective's vjp (grad/vjp.h) with respect to θ only,
// realized under the run's policy like any other function, and evaluated by
// the reference interpreter, so a step's bits depend only on the program,
// the data, the policy and the state, never on time or threads.
//
// PRECISION. θ is kept at its stored type: f64 under f64, f32 masters under
// f32, bf16 and f16 (frozen parameters as their readers read them); the
// optimizer's moments are kept at the same master type. The realization reads
// the masters down where the policy says. Under f16 the loss is scaled
// dynamically (loss_scale.h, GradScaler's defaults): the backward pass is
// seeded with the scale instead of 1, which is the same as scaling the loss.
//
// NON-FINITE. A loss that is not finite stops the run (scaling cannot help a
// forward value). A gradient that is not finite stops it too, except under
// f16 loss scaling, where the update is skipped and the scale halved. Either
// way the step is evaluated once more with the interpreter watching every
// stored value, and the first site whose value was not finite, in evaluation
// order (the forward sweep comes first), is named with its operation and
// source line.
//
// SHARDS. `--shards N` splits every batch into N shards of contiguous rows,
// evaluates the vjp on each (one after another, in shard order) and sums
// their rows-weighted gradients and losses along a fixed tree; shards.h
// states the split, the weights, the types and the order. N = 1 (the
// default) is the step above, unchanged. An MPI run of N ranks
// (`mpirun -n N quire train`, `world` below) computes shard r on rank r and
// sums by messages along the same tree, so it ends with the bits of
// `--shards N` in one process. Every rank holds θ and the optimizer state
// and applies the same update; rank 0 alone writes metrics, checkpoints,
// the loss curve and --params-out, evaluates the held-out loss (on whole
// batches, as one process does) and prints progress; the others print only
// errors. Before the first step the ranks compare what they are about to run
// (the program's and the data's digests, quire's version, the policy, the
// settings that decide the steps) and refuse to start if any differs
// (distributed/handshake.h).
//
// MEMORY. Under --memory-limit a step's need is counted before the first
// step, from the compiled vjp as `quire memory --grad` counts it (its inputs:
// θ, the batch of the largest shard; its peak of live bytes, the gradient
// among them) plus the optimizer's state (the moments, at the master type);
// a run that needs more stops there with the figures and the largest values
// live at the peak.
//
// RESUME. A checkpoint holds θ, the optimizer's state, the data position,
// the loss scale and the settings a resume must repeat (the policy, and the
// seed of a keyed objective's keys: they depend on the seed and the step
// number only, so a resumed step draws the bits the first run drew). A run
// resumed from step k evaluates exactly the steps a run never stopped
// evaluates after step k, so it ends with the same bits. A checkpoint
// records the shard count; a run resumed with another one goes on, saying
// that its steps from there differ in their bits from the uninterrupted run's.
// Every rank of an MPI run reads the checkpoint rank 0 chose (the run folder
// must be the same folder on every node) and checks its digest.

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "quire/core/program.h"
#include "quire/distributed/communicator.h"
#include "quire/interp/interpreter.h"
#include "quire/kernel/engine.h"
#include "quire/realize/realization_file.h"
#include "quire/runtime/random.h"
#include "quire/train/loss_scale.h"

namespace quire::train {

/// A training run that cannot start or go on: no training block, a bad
/// optimizer block, a resume that does not fit, a loss that is not finite.
/// what() is the whole message, source excerpts included where they apply.
struct TrainError : std::runtime_error {
  explicit TrainError(const std::string& message, bool diagnostic = false)
      : std::runtime_error(message), diagnostic(diagnostic) {}
  /// what() is a rendered `file:line:col: error[E…]` diagnostic, printed as it is.
  bool diagnostic = false;
};

struct TrainOptions {
  std::string precision = "f64";  ///< the run policy: f64, f32, bf16 or f16
  bool half_intermediates = false;
  bool fused_products = false;  ///< `--product-step fma` (precision::RealizeOptions::fused_products)
  /// The parameters' initialization (ignored with params_in or a resume), and
  /// the keys of an objective that takes one (step_key).
  uint64_t seed = 0;
  std::string run_dir;            ///< metrics, the loss curve, and relative checkpoint folders go here
  bool resume = false;            ///< continue from the newest valid checkpoint
  std::optional<int64_t> max_steps;  ///< stop (with a checkpoint) once this many steps are done in all
  std::string params_in;          ///< initial parameters from a safetensors file instead of the seed
  std::string params_out;         ///< where to write the final parameters (empty: nowhere)
  std::map<std::string, int64_t> dims;  ///< dimensions the program needs besides the batch's
  int64_t log_every = 0;          ///< plain progress lines every N steps; 0: progress.h's default
  LossScaleConfig loss_scale;     ///< f16 runs only
  interp::Remat remat = interp::Remat::Store;  ///< how the reverse sweep gets its callees' forward values
  kernel::Backend backend = kernel::Backend::Interp;  ///< how launches run (the same bits either way)
  int threads = 1;  ///< threads a native kernel may use (the same bits on any count)
  /// The native backend runs the prelude's attention functions as library
  /// kernels (compile/library_kernel.h; the same bits); false: their lines.
  bool library_kernels = true;
  std::string profile;  ///< the machine profile kernels are planned under ("": the one that ships)
  /// The solver's decisions for the objective (`--realize @realization.json`):
  /// its policy replaces `precision`; parameters keep their master type and
  /// their reads are rounded to the decision.
  std::optional<precision::RealizationFile> realization;
  std::string realization_path;  ///< for messages
  /// `--shards N`: each batch split into N shards, computed one after
  /// another and summed in a fixed order (SHARDS above). Under `world` it
  /// must be 1 or the rank count.
  int shards = 1;
  /// `--memory-limit`: refuse the run before its first step when one step
  /// needs more bytes than this (MEMORY below); none when unset.
  std::optional<int64_t> memory_limit;
  /// The ranks of an MPI run (one shard each), or null for a run in one process.
  distributed::Communicator* world = nullptr;
};

/// What a call of train() did.
struct TrainOutcome {
  int64_t start_step = 0;    ///< the step it started from (a resumed run's checkpoint)
  int64_t steps_done = 0;    ///< the step count when it stopped
  int64_t total_steps = 0;   ///< the run's steps over every epoch
  int64_t skipped = 0;       ///< f16 steps whose update was skipped, in this call
  double last_loss = 0;      ///< the loss of the last step taken (NaN if none)
  std::string checkpoint;    ///< the last checkpoint written or resumed from ("" if none)
  interp::EvalStats per_step;  ///< the interpreter's work and memory of one step (the last taken)
  int shards = 1;              ///< the shards of each step (the rank count under MPI)
  int64_t reduction_bytes = 0;     ///< bytes one shard's term of a step's sum holds (0 for one shard)
  double reduction_seconds = 0;    ///< time this process spent summing the shards, over the steps of this call
  bool finished() const { return steps_done >= total_steps; }
};

/// The key of step `step` (0 for the first) of a run seeded with `seed`, passed
/// to an objective that takes one: derive_key(key_from_seed(seed), "train:step:N")
/// (runtime/random.h), counter-based, so it depends on nothing else.
runtime::Key step_key(uint64_t seed, int64_t step);

/// Runs the main file's training run. `prog` gains the objective's vjp.
/// Progress goes to `out`, updated in place when `tty`, in plain lines
/// otherwise. Throws TrainError, io::IoError (a file that cannot be read or
/// written, data that does not match the objective), or DataError.
TrainOutcome train(elab::Program& prog, const TrainOptions& options, std::ostream& out, bool tty);

}  // namespace quire::train
