#include "quire/runtime/init.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace quire::runtime {

namespace {

/// Every initializer by source name; parse_init_name and init_name read it.
constexpr std::array<std::pair<std::string_view, InitSpec::Kind>, 7> kInitNames{{
    {"zeros", InitSpec::Zeros},
    {"ones", InitSpec::Ones},
    {"normal", InitSpec::Normal},
    {"uniform", InitSpec::Uniform},
    {"xavier_uniform", InitSpec::XavierUniform},
    {"xavier_normal", InitSpec::XavierNormal},
    {"kaiming_uniform", InitSpec::KaimingUniform},
}};

}  // namespace

Fans compute_fans(const Shape& shape, int stacked_axes) {
  const auto rank = static_cast<int64_t>(shape.size());
  if (stacked_axes < 0 || stacked_axes > rank) {
    throw std::invalid_argument(
        fmt::format("initialize: {} stacked axes for a tensor of shape {}", stacked_axes, shape_string(shape)));
  }
  const auto first = static_cast<size_t>(stacked_axes);
  const size_t r = shape.size() - first;
  if (r == 0) return {1, 1};
  if (r == 1) return {shape[first], shape[first]};
  int64_t receptive = 1;
  for (size_t i = first + 1; i + 1 < shape.size(); ++i) receptive *= shape[i];
  return {shape[first] * receptive, shape.back() * receptive};
}

Tensor initialize(const InitSpec& spec, Key path_key, const Shape& shape, int stacked_axes) {
  const Fans fans = compute_fans(shape, stacked_axes);
  // A zero-sized axis makes a fan 0 and a fan-based bound infinite, but there
  // is then nothing to draw: return the empty tensor before dividing by zero.
  // (Explicit arguments of normal/uniform are still checked.)
  const bool fan_based = spec.kind == InitSpec::XavierUniform || spec.kind == InitSpec::XavierNormal ||
                         spec.kind == InitSpec::KaimingUniform;
  if (fan_based && element_count(shape) == 0) return Tensor::real(shape);
  const auto fan_in = static_cast<double>(fans.fan_in);
  const auto fan_out = static_cast<double>(fans.fan_out);
  switch (spec.kind) {
    case InitSpec::Zeros: return Tensor::real(shape, 0.0);
    case InitSpec::Ones: return Tensor::real(shape, 1.0);
    case InitSpec::Normal: return draw_normal(path_key, shape, 0.0, spec.a);
    case InitSpec::Uniform: return draw_uniform(path_key, shape, spec.a, spec.b);
    case InitSpec::XavierUniform: {
      const double bound = std::sqrt(6.0 / (fan_in + fan_out));
      return draw_uniform(path_key, shape, -bound, bound);
    }
    case InitSpec::XavierNormal: return draw_normal(path_key, shape, 0.0, std::sqrt(2.0 / (fan_in + fan_out)));
    case InitSpec::KaimingUniform: {
      const double bound = std::sqrt(2.0) * std::sqrt(3.0 / fan_in);
      return draw_uniform(path_key, shape, -bound, bound);
    }
  }
  throw std::invalid_argument(fmt::format("initialize: unknown initializer kind {}", static_cast<int>(spec.kind)));
}

std::optional<InitSpec> parse_init_name(std::string_view name) {
  for (const auto& [text, kind] : kInitNames) {
    if (text == name) return InitSpec{kind};
  }
  return std::nullopt;
}

const char* init_name(InitSpec::Kind kind) {
  for (const auto& [text, k] : kInitNames) {
    if (k == kind) return text.data();
  }
  return "?";
}

}  // namespace quire::runtime
