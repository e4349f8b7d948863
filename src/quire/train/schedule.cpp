// Learning-rate schedules (schedule.h): the Hugging Face multipliers and the
// reader of their source form.
#include "quire/train/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace quire::train {

namespace {

// A warmup of more than 2^40 updates is surely a typo; below 2^53 every step
// count and difference converts to f64 exactly, as Python's float() does.
constexpr int64_t kMaxWarmup = int64_t{1} << 40;

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

const char* kind_name(Schedule::Kind kind) {
  switch (kind) {
    case Schedule::Kind::Constant:
      return "constant";
    case Schedule::Kind::Linear:
      return "linear";
    case Schedule::Kind::Cosine:
      return "cosine";
  }
  return "?";
}

}  // namespace

double Schedule::multiplier(int64_t step, int64_t total_steps) const {
  if (step < 0) throw std::logic_error(fmt::format("internal: schedule step {} is negative", step));
  // Python's float(current_step) / float(max(1, num_warmup_steps)).
  if (step < warmup) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup));
  switch (kind) {
    case Kind::Constant:
      return 1.0;
    case Kind::Linear:
      return std::max(0.0, static_cast<double>(total_steps - step) / span);
    case Kind::Cosine: {
      const double progress = static_cast<double>(step - warmup) / span;
      return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
    }
  }
  return 1.0;
}

double Schedule::lr_at(int64_t step, double base_lr, int64_t total_steps) const {
  return base_lr * multiplier(step, total_steps);
}

std::string Schedule::to_string() const {
  if (kind == Kind::Constant && warmup == 0) return "constant";
  return fmt::format("{}(warmup = {})", kind_name(kind), warmup);
}

std::optional<Schedule> parse_schedule(std::string_view text, std::string* error) {
  auto fail = [&](std::string why) -> std::optional<Schedule> {
    if (error) *error = std::move(why);
    return std::nullopt;
  };
  text = trim(text);
  const size_t open = text.find('(');
  const std::string_view name = trim(text.substr(0, open));
  Schedule s;
  if (name == "constant")
    s.kind = Schedule::Kind::Constant;
  else if (name == "linear")
    s.kind = Schedule::Kind::Linear;
  else if (name == "cosine")
    s.kind = Schedule::Kind::Cosine;
  else
    return fail(fmt::format("unknown schedule `{}` (constant, linear(warmup = W), cosine(warmup = W))", text));
  if (open == std::string_view::npos) return s;
  if (text.back() != ')') return fail(fmt::format("`{}` is not `{}(warmup = W)`", text, name));
  std::string_view args = trim(text.substr(open + 1, text.size() - open - 2));
  if (args.empty()) return s;
  if (args.find(',') != std::string_view::npos) return fail(fmt::format("`{}` takes one argument, `warmup = W`", name));
  const size_t eq = args.find('=');
  if (eq == std::string_view::npos || trim(args.substr(0, eq)) != "warmup")
    return fail(fmt::format("`{}` takes `warmup = W`, not `{}`", name, args));
  const std::string_view value = trim(args.substr(eq + 1));
  int64_t w = -1;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), w);
  if (ec != std::errc() || end != value.data() + value.size() || w < 0 || w > kMaxWarmup)
    return fail(fmt::format("`warmup` is a natural number of updates, not `{}`", value));
  s.warmup = w;
  return s;
}

}  // namespace quire::train
