#pragma once
// Dynamic loss scaling for f16 training, as torch.amp.GradScaler with its
// defaults. The loss is multiplied by scale() before the backward pass, so
// that small f16 gradients do not flush to zero; then, every update:
//
//   bool ok = scaler.unscale(grads);   // grads ← grads · (1/scale); all finite?
//   if (ok) optimizer.step(...);       // a step with an Inf/NaN is skipped
//   scaler.update(!ok);
//
// update(found_inf): found_inf → scale ← scale · backoff_factor and the count
// of good steps restarts at 0; else the count grows, and when it reaches
// growth_interval, scale ← scale · growth_factor (kept only if finite) and the
// count restarts at 0. PyTorch holds the scale in an f32 tensor, so every new
// scale is rounded to f32 (exact for the default powers of two).
//
// unscale multiplies by inv_scale = f32(1/scale), as GradScaler does
// (_amp_foreach_non_finite_check_and_unscale_): for a power-of-two scale, as
// with the defaults, that is exactly division by the scale. The products are
// not rounded: gradients go to the master (f32 or f64) parameters.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "quire/interp/value.h"

namespace quire::train {

/// A loss scaler's settings or saved state that cannot be used.
struct LossScaleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// GradScaler's constructor arguments, with its defaults.
struct LossScaleConfig {
  double init_scale = 65536.0;  ///< 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  /// LossScaleError unless init_scale > 0, growth_factor > 1,
  /// 0 < backoff_factor < 1 and growth_interval ≥ 1 (GradScaler's checks).
  explicit LossScaler(LossScaleConfig config = {});

  /// The factor the loss is multiplied by before the backward pass.
  double scale() const { return scale_; }
  /// Good steps since the last growth or skip (GradScaler's _growth_tracker).
  int64_t growth_tracker() const { return growth_tracker_; }
  const LossScaleConfig& config() const { return config_; }

  /// Multiplies every gradient element by f32(1/scale()). Returns whether
  /// every element was finite before (the step may be taken).
  bool unscale(interp::ParamMap& grads) const;
  /// After each attempted step: backs off on found_inf, grows after
  /// growth_interval good steps in a row (see the file comment).
  void update(bool found_inf);

  /// GradScaler.state_dict()'s keys: {"scale", "growth_factor",
  /// "backoff_factor", "growth_interval", "_growth_tracker"}.
  nlohmann::json state_json() const;
  /// Restores a state_json(); the settings saved replace this scaler's.
  /// LossScaleError, changing nothing, for a missing or ill-typed key or a
  /// setting outside its range.
  void restore(const nlohmann::json& state);

 private:
  LossScaleConfig config_;
  double scale_;
  int64_t growth_tracker_ = 0;
};

}  // namespace quire::train
