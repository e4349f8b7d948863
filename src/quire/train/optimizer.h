#pragma once
// The optimizers of a training run: AdamW, SGD and Muon as PyTorch defines
// them, with a learning-rate schedule (schedule.h) and joint gradient-norm
// clipping.
//
// One update (Optimizer::step) is one pass over a flat list of (parameter,
// gradient, state) triples in path order:
//   1. the joint norm: total = sqrt(Σ g²) over every element of every
//      trainable gradient, accumulated in f64 in path order, then element
//      order; with `clip` set, coef = clip / (total + 1e-6), and when
//      coef < 1 every gradient element is multiplied by coef
//      (torch.nn.utils.clip_grad_norm_'s rule: coef is clamped to 1);
//   2. the update of each element in the order of PyTorch's single-tensor
//      (foreach=False) torch.optim.AdamW / torch.optim.SGD /
//      torch.optim.Muon, every operation one f64 operation (never fused):
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
//      Muon, on each matrix it takes (below), b starting at 0:
//        b ← lerp(b, g, 1 − μ)                      (torch.lerp, as AdamW's m)
//        u ← lerp(g, b, μ) (nesterov) or u ← b
//        O ← newton_schulz(u), or newton_schulz_tall(u) when R ≥ C: the
//            prelude's functions, evaluated by quire (newton_schulz.h)
//        lr' = lr · ratio(A = C, B = R)             (adjust_lr_fn)
//        p ← p · (1 − lr·wd) + (−lr')·O
//      and AdamW, with its own adamw_* settings, on every other parameter;
//   3. rounding: the new m, v (or b) are rounded once to the run's master
//      type as soon as they are computed, and the rest of the update reads
//      the rounded values (as a PyTorch f32 run reads its f32 state); so is
//      Muon's u (PyTorch holds it in the parameter's dtype); the new p is
//      rounded once at the end. Under an f64 master nothing rounds.
//      Everything else (the clipped gradient, p·(1 − lr·wd), denom) stays f64.
//
// MUON'S MATRICES. Muon takes every trainable parameter that is a matrix,
// [R, C], or a stack's copies of one, [L…, R, C] (`stack{L}` adds the
// leading axes; each copy is a matrix of its own: its own orthogonalization
// and learning-rate ratio), unless its path is listed in `adamw_params`. It
// reads a matrix as a linear layer's weight in quire's [in, out] layout
// (docs/language.md §14), the transpose of PyTorch's [out, in]: R is the
// fan-in and C the fan-out, so PyTorch's shape is [C, R] and its rule
// "transpose when rows > cols" is quire's "newton_schulz_tall when R ≥ C",
// and the ratio's A (PyTorch's shape[0]) is C. Everything else (vectors,
// scalars, listed matrices, anything of more axes) takes AdamW.
//
// Frozen parameters (`frozen` marks) take no part: no state, no update, and
// their gradients (if given) do not count in the norm, as parameters with
// requires_grad=False in PyTorch.

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/interp/value.h"
#include "quire/io/io_error.h"
#include "quire/kernel/engine.h"
#include "quire/runtime/float_types.h"
#include "quire/support/source.h"
#include "quire/train/newton_schulz.h"
#include "quire/train/schedule.h"

namespace quire::train {

/// A malformed optimizer block or optimizer state. what() names the optimizer
/// and, where one is to blame, the field: "optimizer `adamw`: field `beta1`:
/// must be in [0, 1), got 1.5".
struct OptimizerError : std::runtime_error {
  OptimizerError(const std::string& message, SourceRange loc = {}) : std::runtime_error(message), loc(loc) {}
  SourceRange loc;  ///< the field (or block) at fault; empty for state errors
};

enum class OptimizerKind { AdamW, Sgd, Muon };

/// "adamw", "sgd", "muon".
const char* optimizer_kind_name(OptimizerKind kind);

/// Muon's learning-rate ratio for a matrix of fan-out A and fan-in B
/// (PyTorch's adjust_lr_fn): lr' = lr · ratio.
enum class AdjustLr {
  Original,           ///< "original" (PyTorch's default, Keller Jordan's): sqrt(max(1, A / B))
  MatchRmsAdamW,      ///< "match_rms_adamw" (Moonshot's): 0.2 · sqrt(max(A, B))
  SpectralUnclamped,  ///< "spectral_unclamped" (Bernstein's): sqrt(A / B)
};

/// "original", "match_rms_adamw", "spectral_unclamped".
const char* adjust_lr_name(AdjustLr a);

/// An optimizer's settings. Absent fields take PyTorch's defaults (AdamW:
/// lr 1e-3, β (0.9, 0.999), eps 1e-8, weight_decay 1e-2; SGD: lr 1e-3,
/// momentum 0, dampening 0, weight_decay 0, nesterov false; Muon: lr 1e-3,
/// weight_decay 0.1, momentum 0.95, nesterov true, ns_coefficients (3.4445,
/// −4.7750, 2.0315), eps 1e-7, adjust_lr_fn original, and torch.optim.AdamW's
/// defaults for its adamw_* fields), the schedule is `constant` and there is
/// no clipping.
struct OptimizerConfig {
  std::string name;  ///< the block's name, for messages
  OptimizerKind kind = OptimizerKind::AdamW;
  double lr = 1e-3;
  double beta1 = 0.9;    ///< AdamW
  double beta2 = 0.999;  ///< AdamW
  double eps = 1e-8;     ///< AdamW's ε; Muon's Newton–Schulz eps
  double weight_decay = 1e-2;
  double momentum = 0;         ///< SGD, Muon
  double dampening = 0;        ///< SGD
  bool nesterov = false;       ///< SGD (needs momentum > 0 and dampening 0), Muon
  Schedule schedule;           ///< Muon: scales adamw_lr too
  std::optional<double> clip;  ///< joint gradient-norm bound; nullopt: none

  // Muon: its Newton–Schulz coefficients (PyTorch's ns_coefficients = (a, b, c)).
  double ns_a = 3.4445;
  double ns_b = -4.7750;
  double ns_c = 2.0315;
  AdjustLr adjust_lr = AdjustLr::Original;
  // Muon: the AdamW of the parameters Muon does not take (torch.optim.AdamW's defaults).
  double adamw_lr = 1e-3;
  double adamw_beta1 = 0.9;
  double adamw_beta2 = 0.999;
  double adamw_eps = 1e-8;
  double adamw_weight_decay = 1e-2;
  /// Muon: matrices given to AdamW instead (embeddings, a read-out head), each
  /// a parameter's path or a sub-module's (`embed` names `embed.table`).
  std::vector<std::string> adamw_params;
  SourceRange adamw_params_loc;  ///< the field, for errors found when the parameters are known

  /// The defaults of `kind`.
  static OptimizerConfig defaults(OptimizerKind kind, std::string name = "");

  /// Reads an optimizer block. The algorithm is the field `kind` (adamw, sgd
  /// or muon) when given, else the block's name. Fields: kind, lr,
  /// weight_decay, schedule, clip and, for AdamW, beta1, beta2, eps (or β1,
  /// β2, ε); for SGD, momentum, dampening, nesterov (true/false); for Muon,
  /// momentum, nesterov, eps, ns_a, ns_b, ns_c, ns_steps (5), adjust_lr_fn,
  /// adamw_lr, adamw_beta1, adamw_beta2, adamw_eps, adamw_weight_decay and
  /// adamw_params (docs/training.md). Numbers must be literals (elaboration
  /// keeps no other value). Throws OptimizerError for an unknown algorithm,
  /// an unknown or repeated field, a field of another algorithm or a bad value.
  static OptimizerConfig from(const elab::OptimizerInfo& info);
};

/// What one update did.
struct StepReport {
  int64_t step = 0;      ///< the update's index from 0 (the schedule's step)
  double lr = 0;         ///< the learning rate the schedule gave it
  double grad_norm = 0;  ///< the joint norm of the gradients before clipping
  bool clipped = false;  ///< whether the gradients were scaled down
};

/// A trainable parameter's path, axes (a stack's copies included) and elements.
struct ParamExtent {
  std::string path;
  int64_t rank = 0;
  int64_t elements = 0;
};

/// The bytes an Optimizer made over parameters of these extents would hold
/// in state at `master` (the rule of its constructor, without making it:
/// `quire memory --step` sizes a model whose parameters it never allocates).
int64_t state_bytes_of(const OptimizerConfig& config, const std::vector<ParamExtent>& trainable,
                       const std::map<std::string, int>& stacked, runtime::FloatType master);

/// By parameter path, how many leading axes of the model's parameter are a
/// stack's copies (`stack{L}`: the flattened parameter has them, its
/// declaration does not); a parameter of no stack is absent.
std::map<std::string, int> stacked_copies(const elab::Program& prog, const elab::ParamsType& model);

/// An optimizer and its state: AdamW's exp_avg and exp_avg_sq, SGD's
/// momentum buffer, or Muon's momentum buffer for its matrices and AdamW's
/// moments for the rest, per trainable parameter, and the number of updates
/// made.
class Optimizer {
 public:
  /// The trainable parameters are those of `params` not in `frozen`; their
  /// paths and shapes are fixed from here on. State starts at zero.
  /// `stacked` gives, by path, how many leading axes of a parameter are a
  /// stack's copies (absent: none): Muon takes each copy's matrix. Muon:
  /// OptimizerError (at adamw_params_loc) if an adamw_params entry names no
  /// trainable parameter.
  Optimizer(OptimizerConfig config, const interp::ParamMap& params, std::set<std::string> frozen = {},
            const std::map<std::string, int>& stacked = {});
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

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
  void set_threads(int threads);
  /// How Muon's Newton–Schulz calls run (newton_schulz.h; Interp by default):
  /// every backend gives the same bits.
  void set_backend(kernel::Backend backend);

  const OptimizerConfig& config() const { return config_; }
  /// Updates made so far (PyTorch's `step` state).
  int64_t steps_taken() const { return steps_; }
  /// The paths of the parameters Muon takes, in path order (none for AdamW, SGD).
  std::vector<std::string> muon_params() const;

  /// The bytes the state holds when kept at `master` (the moments; not the
  /// parameters, the gradients or the step count).
  int64_t state_bytes(runtime::FloatType master) const;
  /// The state tensors, by kind then path: "adamw.exp_avg.<path>",
  /// "adamw.exp_avg_sq.<path>", or "sgd.momentum_buffer.<path>" (none for SGD
  /// without momentum); Muon's "muon.momentum_buffer.<path>" for its
  /// matrices, then "muon.exp_avg.<path>" and "muon.exp_avg_sq.<path>" for
  /// the parameters its AdamW takes. Present (zero) before the first update too.
  io::NamedTensors state_tensors() const;
  /// {"kind": "adamw", "step": N} (Muon's AdamW counts the same updates).
  nlohmann::json state_json() const;
  /// Replaces the state by a saved one. OptimizerError, changing nothing, if
  /// the JSON is not this algorithm's or a tensor is missing, extra, not real
  /// or of another shape than its parameter.
  void restore(const io::NamedTensors& tensors, const nlohmann::json& state);

 private:
  /// One trainable parameter's state. AdamW uses both moments; SGD and Muon
  /// keep their momentum buffer in `first` (SGD's meaningful only after the
  /// first update).
  struct ParamState {
    std::string path;
    runtime::Shape shape;
    bool muon = false;            ///< Muon takes it (else AdamW, under Muon)
    runtime::RealStorage first;   ///< exp_avg, or the momentum buffer
    runtime::RealStorage second;  ///< exp_avg_sq
  };
  /// One kind of state tensor: its name, whether it lives in `first` or
  /// `second`, and whether Muon's parameters (true) or the others hold it
  /// (Muon only; the other algorithms' kinds belong to every parameter).
  struct StateKind {
    std::string name;
    bool in_first = true;
    bool muon = false;
  };
  /// The kinds of state tensor, in state_tensors() order: {"exp_avg",
  /// "exp_avg_sq"}, {"momentum_buffer"}, none, or Muon's three.
  std::vector<StateKind> state_kinds() const;
  bool holds(const StateKind& k, const ParamState& s) const;

  OptimizerConfig config_;
  std::set<std::string> frozen_;
  std::vector<ParamState> states_;  ///< trainable parameters in path order
  int64_t steps_ = 0;
  int threads_ = 1;
  kernel::Backend backend_ = kernel::Backend::Interp;
  std::unique_ptr<NewtonSchulz> newton_schulz_;  ///< Muon's; made at its first update
};

}  // namespace quire::train
