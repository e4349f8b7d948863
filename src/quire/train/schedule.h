#pragma once
// Learning-rate schedules: the factor the optimizer's base learning rate is
// multiplied by at each update. Defined as Hugging Face transformers'
// (optimization.py) LambdaLR multipliers, which PyTorch's LambdaLR applies as
// lr = base_lr · multiplier(step):
//
//   constant             get_constant_schedule: 1
//   constant(warmup = W) get_constant_schedule_with_warmup:
//                          step < W: step / max(1, W), else 1
//   linear(warmup = W)   get_linear_schedule_with_warmup:
//                          step < W: step / max(1, W)
//                          else max(0, (total − step) / max(1, total − W))
//   cosine(warmup = W)   get_cosine_schedule_with_warmup (num_cycles = 0.5):
//                          step < W: step / max(1, W)
//                          else max(0, 0.5 · (1 + cos(π · progress))),
//                          progress = (step − W) / max(1, total − W)
//
// `step` counts updates from 0: the first update uses step 0, so under a
// warmup W > 0 it has multiplier 0 (learning rate 0), step W − 1 has
// (W − 1)/W and step W is the first at the full rate; with W = 0 the first
// update already uses 1. A run of `total` updates uses steps 0 … total − 1;
// linear's last update has 1/(total − W), and it reaches 0 only at step
// `total`. Steps past `total` follow the formulas as Hugging Face does:
// linear stays 0, cosine rises again (cos past π).
//
// Every operation is one f64 operation in the order written, as Python
// evaluates the Hugging Face lambdas (π·0.5·2·progress of the original is
// exactly π·progress), so the multipliers are those of a Python run.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace quire::train {

/// One learning-rate schedule, as written in an optimizer block
/// (`schedule : cosine(warmup = 20)`).
struct Schedule {
  enum class Kind { Constant, Linear, Cosine };

  Kind kind = Kind::Constant;
  int64_t warmup = 0;  ///< W: updates 0 … W − 1 ramp up linearly from 0

  /// The factor of the base learning rate at update `step` (from 0) of a run
  /// of `total_steps` updates (see the file comment). Requires step ≥ 0.
  double multiplier(int64_t step, int64_t total_steps) const;
  /// base_lr · multiplier(step, total_steps).
  double lr_at(int64_t step, double base_lr, int64_t total_steps) const;
  /// As written in source: "constant", "linear(warmup = 10)".
  std::string to_string() const;

  friend bool operator==(const Schedule&, const Schedule&) = default;
};

/// Reads a schedule as elaboration prints it: `constant`, `constant()`,
/// `linear`, `linear(warmup = 10)`, `cosine(warmup = 20)` (warmup a natural
/// number, 0 when absent). nullopt, with the reason in `*error`, for
/// anything else.
std::optional<Schedule> parse_schedule(std::string_view text, std::string* error);

}  // namespace quire::train
