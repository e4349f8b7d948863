// Dynamic loss scaling (loss_scale.h): torch.amp.GradScaler's unscale and
// update, and its state_dict.
#include "quire/train/loss_scale.h"

#include <fmt/format.h>

#include <cmath>

#include "quire/runtime/float_types.h"

namespace quire::train {

namespace {

void check(const LossScaleConfig& c) {
  if (!(c.init_scale > 0) || !std::isfinite(c.init_scale))
    throw LossScaleError(fmt::format("loss scale: the scale must be finite and > 0, got {}", c.init_scale));
  if (!(c.growth_factor > 1) || !std::isfinite(c.growth_factor))
    throw LossScaleError(fmt::format("loss scale: growth_factor must be > 1, got {}", c.growth_factor));
  if (!(c.backoff_factor > 0 && c.backoff_factor < 1))
    throw LossScaleError(fmt::format("loss scale: backoff_factor must be in (0, 1), got {}", c.backoff_factor));
  if (c.growth_interval < 1)
    throw LossScaleError(fmt::format("loss scale: growth_interval must be ≥ 1, got {}", c.growth_interval));
}

}  // namespace

LossScaler::LossScaler(LossScaleConfig config) : config_(config) {
  check(config_);
  scale_ = runtime::round_to(runtime::FloatType::F32, config_.init_scale);
}

bool LossScaler::unscale(interp::ParamMap& grads) const {
  // GradScaler: inv_scale = self._scale.double().reciprocal().float().
  const double inv_scale = runtime::round_to(runtime::FloatType::F32, 1.0 / scale_);
  bool finite = true;
  for (auto& [path, g] : grads)
    for (double& x : g.reals) {
      if (!std::isfinite(x)) finite = false;
      x = x * inv_scale;
    }
  return finite;
}

void LossScaler::update(bool found_inf) {
  // ATen's _amp_update_scale_ (f32 arithmetic on the f32 scale).
  if (found_inf) {
    scale_ = runtime::round_to(runtime::FloatType::F32, scale_ * config_.backoff_factor);
    growth_tracker_ = 0;
    return;
  }
  const int64_t successful = growth_tracker_ + 1;
  if (successful == config_.growth_interval) {
    const double grown = runtime::round_to(runtime::FloatType::F32, scale_ * config_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    growth_tracker_ = successful;
  }
}

nlohmann::json LossScaler::state_json() const {
  return {{"scale", scale_},
          {"growth_factor", config_.growth_factor},
          {"backoff_factor", config_.backoff_factor},
          {"growth_interval", config_.growth_interval},
          {"_growth_tracker", growth_tracker_}};
}

void LossScaler::restore(const nlohmann::json& state) {
  auto number = [&](const char* key) {
    if (!state.is_object() || !state.contains(key) || !state[key].is_number())
      throw LossScaleError(fmt::format("loss scale: the saved state has no number \"{}\"", key));
    return state[key].get<double>();
  };
  auto natural = [&](const char* key) {
    if (!state.is_object() || !state.contains(key) || !state[key].is_number_integer() || state[key].get<int64_t>() < 0)
      throw LossScaleError(fmt::format("loss scale: the saved state has no natural number \"{}\"", key));
    return state[key].get<int64_t>();
  };
  LossScaleConfig c;
  c.init_scale = number("scale");
  c.growth_factor = number("growth_factor");
  c.backoff_factor = number("backoff_factor");
  c.growth_interval = natural("growth_interval");
  const int64_t tracker = natural("_growth_tracker");
  check(c);
  if (tracker >= c.growth_interval)
    throw LossScaleError(fmt::format("loss scale: the saved \"_growth_tracker\" {} is not below growth_interval {}",
                                     tracker, c.growth_interval));
  c.init_scale = config_.init_scale;  // the saved scale is the current one, not a setting
  config_ = c;
  scale_ = runtime::round_to(runtime::FloatType::F32, number("scale"));
  growth_tracker_ = tracker;
}

}  // namespace quire::train
