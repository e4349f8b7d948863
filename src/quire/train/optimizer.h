#pragma once
// The optimizers of a training run: AdamW and SGD as PyTorch defines them,
// with a learning-rate schedule (schedule.h) and joint gradient-norm clipping.
//
// One update (Optimizer::step) is one pass over a flat list of (parameter,
// gradient, state) triples in path order:
//   1. the joint norm: total = sqrt(Σ g²) over every element of every
//      trainable gradient, accumulated in f64 in path order, then element
//      order; with `clip` set, coef = clip / (total + 1e-6), and when
//      coef < 1 every gradient element is multiplied by coef
//      (torch.nn.utils.clip_grad_norm_'s rule: coef is clamped to 1);
//   2. the update of each element in the order of PyTorch's single-tensor
//      (foreach=False) torch.optim.AdamW / torch.optim.SGD, every operation
//      one f64 operation (never fused):
//      AdamW, t = the update's number from 1, lr from the schedule:
//        p ← p · (1 − lr·wd)                        (skipped when wd = 0)
//        m ← m + (1−β1)·(g − m)                     (torch.lerp; when 1−β1 ≥ 0.5
//                                                    g − (g − m)·(1 − (1−β1)))
//        v ← v·β2 + ((1−β2)·g)·g                    (addcmul)
//        bc1 = 1 − β1^t, bc2 = 1 − β2^t (std::pow), step_size = lr / bc1
//        denom = sqrt(v) / sqrt(bc2) + eps
//        p ← p + ((−step_size)·m) / denom           (addcdiv on the CPU)
//      SGD:
//        g ← g + wd·p                               (when wd ≠ 0)
//        with momentum μ ≠ 0: b ← g on the first update, else
//                             b ← b·μ + (1 − dampening)·g;
//                             g ← g + μ·b (nesterov) or g ← b
//        p ← p + (−lr)·g
//   3. rounding: the new m, v (or b) are rounded once to the run's master
//      type as soon as they are computed, and the rest of the update reads
//      the rounded values (as a PyTorch f32 run reads its f32 state); the new
//      p is rounded once at the end. Under an f64 master nothing rounds.
//      Everything else (the clipped gradient, p·(1 − lr·wd), denom) stays f64.
//
// Frozen parameters (`frozen` marks) take no part: no state, no update, and
// their gradients (if given) do not count in the norm, as parameters with
// requires_grad=False in PyTorch.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/interp/value.h"
#include "quire/io/io_error.h"
#include "quire/runtime/float_types.h"
#include "quire/support/source.h"
#include "quire/train/schedule.h"

namespace quire::train {

/// A malformed optimizer block or optimizer state. what() names the optimizer
/// and, where one is to blame, the field: "optimizer `adamw`: field `beta1`:
/// must be in [0, 1), got 1.5".
struct OptimizerError : std::runtime_error {
  OptimizerError(const std::string& message, SourceRange loc = {}) : std::runtime_error(message), loc(loc) {}
  SourceRange loc;  ///< the field (or block) at fault; empty for state errors
};

enum class OptimizerKind { AdamW, Sgd };

/// "adamw", "sgd".
const char* optimizer_kind_name(OptimizerKind kind);

/// An optimizer's settings. Absent fields take PyTorch's defaults (AdamW:
/// lr 1e-3, β (0.9, 0.999), eps 1e-8, weight_decay 1e-2; SGD: lr 1e-3,
/// momentum 0, dampening 0, weight_decay 0, nesterov false), the schedule is
/// `constant` and there is no clipping.
struct OptimizerConfig {
  std::string name;  ///< the block's name, for messages
  OptimizerKind kind = OptimizerKind::AdamW;
  double lr = 1e-3;
  double beta1 = 0.9;    ///< AdamW
  double beta2 = 0.999;  ///< AdamW
  double eps = 1e-8;     ///< AdamW
  double weight_decay = 1e-2;
  double momentum = 0;    ///< SGD
  double dampening = 0;   ///< SGD
  bool nesterov = false;  ///< SGD: needs momentum > 0 and dampening 0
  Schedule schedule;
  std::optional<double> clip;  ///< joint gradient-norm bound; nullopt: none

  /// The defaults of `kind` (weight_decay differs between the two).
  static OptimizerConfig defaults(OptimizerKind kind, std::string name = "");

  /// Reads an optimizer block. The algorithm is the field `kind` (adamw or
  /// sgd) when given, else the block's name. Fields: kind, lr, weight_decay,
  /// schedule, clip and, for AdamW, beta1, beta2, eps (or β1, β2, ε); for
  /// SGD, momentum, dampening, nesterov (true/false). Numbers must be
  /// literals (elaboration keeps no other value). Throws OptimizerError for an
  /// unknown algorithm, an unknown or repeated field, a field of the other
  /// algorithm or a bad value.
  static OptimizerConfig from(const elab::OptimizerInfo& info);
};

/// What one update did.
struct StepReport {
  int64_t step = 0;      ///< the update's index from 0 (the schedule's step)
  double lr = 0;         ///< the learning rate the schedule gave it
  double grad_norm = 0;  ///< the joint norm of the gradients before clipping
  bool clipped = false;  ///< whether the gradients were scaled down
};

/// An optimizer and its state: AdamW's exp_avg and exp_avg_sq, or SGD's
/// momentum buffer, per trainable parameter, and the number of updates made.
class Optimizer {
 public:
  /// The trainable parameters are those of `params` not in `frozen`; their
  /// paths and shapes are fixed from here on. State starts at zero.
  Optimizer(OptimizerConfig config, const interp::ParamMap& params, std::set<std::string> frozen = {});

  /// One update of every trainable parameter (the file comment gives the
  /// formulas). `grads` holds a gradient of each trainable parameter's shape
  /// (frozen ones may be present and are ignored); `master` is the type
  /// parameters and state are kept in (F64 for an f64 run, else F32);
  /// `total_steps` is the run's number of updates, for the schedule.
  /// OptimizerError if params or grads do not match the trainable set.
  StepReport step(interp::ParamMap& params, const interp::ParamMap& grads, runtime::FloatType master,
                  int64_t total_steps);

  /// Threads an update's element loops may use (≥ 1; 1 by default): the
  /// elements of a parameter are divided among the native backend's worker
  /// pool. Every element's update is its own, so any count gives the same bits.
  void set_threads(int threads) { threads_ = threads < 1 ? 1 : threads; }

  const OptimizerConfig& config() const { return config_; }
  /// Updates made so far (PyTorch's `step` state).
  int64_t steps_taken() const { return steps_; }

  /// The state tensors, by kind then path: "adamw.exp_avg.<path>",
  /// "adamw.exp_avg_sq.<path>", or "sgd.momentum_buffer.<path>" (none for SGD
  /// without momentum). Present (zero) before the first update too.
  io::NamedTensors state_tensors() const;
  /// {"kind": "adamw", "step": N}.
  nlohmann::json state_json() const;
  /// Replaces the state by a saved one. OptimizerError, changing nothing, if
  /// the JSON is not this algorithm's or a tensor is missing, extra, not real
  /// or of another shape than its parameter.
  void restore(const io::NamedTensors& tensors, const nlohmann::json& state);

 private:
  /// One trainable parameter's state. AdamW uses both moments; SGD keeps its
  /// momentum buffer in `first` (meaningful only after the first update).
  struct ParamState {
    std::string path;
    runtime::Shape shape;
    runtime::RealStorage first;   ///< exp_avg, or the momentum buffer
    runtime::RealStorage second;  ///< exp_avg_sq
  };
  /// The kinds of state tensor, in state_tensors() order: {"exp_avg",
  /// "exp_avg_sq"}, {"momentum_buffer"} or none. Kind k lives in `first`
  /// (k = 0) or `second` (k = 1).
  std::vector<std::string> state_kinds() const;

  OptimizerConfig config_;
  std::set<std::string> frozen_;
  std::vector<ParamState> states_;  ///< trainable parameters in path order
  int64_t steps_ = 0;
  int threads_ = 1;
};

}  // namespace quire::train
