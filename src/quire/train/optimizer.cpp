// AdamW and SGD (optimizer.h): the optimizer block's reading, one update as a
// single pass over (parameter, gradient, state) triples, and the state's
// save and restore.
// Requires: parameters and gradients of the shapes the optimizer was made
// for (checked before anything changes, OptimizerError).
// Keeps: every update's arithmetic in f64, in PyTorch's order of operations;
// the state and parameters rounded once per update to the master type.
#include "quire/train/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <type_traits>
#include <utility>

#include "quire/runtime/workers.h"
#include "quire/runtime/widest_vectors.h"
#include "quire/train/adamw_update.h"

// The reference bits forbid fused multiply-add: PyTorch's formulas round
// after every multiplication. GCC contracts by default in C++ wherever the
// target has FMA and ignores the standard pragma; Clang honours it.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::train {

namespace {

// ---------------------------------------------------------------- the optimizer block

/// Which algorithms a field belongs to.
enum class Applies { Both, AdamW, Sgd };

/// What a field's value must be.
enum class ValueRule {
  NonNegative,   ///< a number ≥ 0
  Positive,      ///< a number > 0
  UnitOpen,      ///< a number in [0, 1)
  UnitClosed,    ///< a number in [0, 1]
  Boolean,       ///< true or false
  ScheduleText,  ///< constant, linear(warmup = W), cosine(warmup = W)
};

/// One settable field of an optimizer block. `number` is the config member a
/// numeric field sets (null for the others, which are set by key).
struct FieldRule {
  const char* key;
  const char* greek;  ///< the same field spelled as the formulas do, or null
  Applies applies;
  ValueRule rule;
  double OptimizerConfig::*number;
};

// The ranges are PyTorch's argument checks ("Invalid beta parameter at index
// 0", ...), plus clip > 0 (a bound of 0 would zero every gradient) and
// dampening ≤ 1 (a larger one reverses the gradient's sign in the buffer).
constexpr FieldRule kFieldRules[] = {
    {"lr", nullptr, Applies::Both, ValueRule::NonNegative, &OptimizerConfig::lr},
    {"weight_decay", nullptr, Applies::Both, ValueRule::NonNegative, &OptimizerConfig::weight_decay},
    {"schedule", nullptr, Applies::Both, ValueRule::ScheduleText, nullptr},
    {"clip", nullptr, Applies::Both, ValueRule::Positive, nullptr},
    {"beta1", "β1", Applies::AdamW, ValueRule::UnitOpen, &OptimizerConfig::beta1},
    {"beta2", "β2", Applies::AdamW, ValueRule::UnitOpen, &OptimizerConfig::beta2},
    {"eps", "ε", Applies::AdamW, ValueRule::NonNegative, &OptimizerConfig::eps},
    {"momentum", nullptr, Applies::Sgd, ValueRule::NonNegative, &OptimizerConfig::momentum},
    {"dampening", nullptr, Applies::Sgd, ValueRule::UnitClosed, &OptimizerConfig::dampening},
    {"nesterov", nullptr, Applies::Sgd, ValueRule::Boolean, nullptr},
};

bool applies_to(Applies a, OptimizerKind kind) {
  return a == Applies::Both || (a == Applies::AdamW) == (kind == OptimizerKind::AdamW);
}

/// "kind, lr, weight_decay, …": the fields `kind` takes.
std::string field_list(OptimizerKind kind) {
  std::string list = "kind";
  for (const FieldRule& r : kFieldRules)
    if (applies_to(r.applies, kind)) list += fmt::format(", {}", r.key);
  return list;
}

std::string unquote(const std::string& s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
  return s;
}

std::optional<OptimizerKind> parse_kind(const std::string& name) {
  if (name == "adamw") return OptimizerKind::AdamW;
  if (name == "sgd") return OptimizerKind::Sgd;
  return std::nullopt;
}

/// The number a numeric field holds, checked against its rule.
double number_of(const elab::FieldInfo& f, ValueRule rule, const auto& field_error) {
  if (!f.is_number) throw field_error(f, fmt::format("must be a number literal, got `{}`", f.value));
  const double x = f.number;
  switch (rule) {
    case ValueRule::NonNegative:
      if (!(x >= 0)) throw field_error(f, fmt::format("must be ≥ 0, got {}", f.value));
      break;
    case ValueRule::Positive:
      if (!(x > 0)) throw field_error(f, fmt::format("must be > 0, got {}", f.value));
      break;
    case ValueRule::UnitOpen:
      if (!(x >= 0 && x < 1)) throw field_error(f, fmt::format("must be in [0, 1), got {}", f.value));
      break;
    case ValueRule::UnitClosed:
      if (!(x >= 0 && x <= 1)) throw field_error(f, fmt::format("must be in [0, 1], got {}", f.value));
      break;
    default:
      break;
  }
  return x;
}

// ---------------------------------------------------------------- one update

/// One trainable parameter's elements, its gradient's and its state's, as
/// one update sees them. All vectors hold the parameter's element count.
struct Slot {
  runtime::RealStorage* param;
  const runtime::RealStorage* grad;
  runtime::RealStorage* first;   ///< exp_avg or the momentum buffer
  runtime::RealStorage* second;  ///< exp_avg_sq (AdamW only)
};

/// Σ g² over `grad`'s elements, in the view the gradient has, in a fixed
/// order that is part of the norm's bits: element i's square goes to partial
/// sum i mod 16 (each partial in increasing i), and the 16 partials are added
/// pairwise, (p0 + p1) + (p2 + p3) and so on up a tree. One chain of 600 000
/// additions took 2 ms a step; 16 independent ones run at the adder's rate,
/// and, compiled for the widest vectors (the 16 partials are two AVX-512
/// vectors), at the memory's: the baseline's 16-byte vectors made it 1.1 % of
/// a training step at D = 256.
template <typename Elem>
inline double squares_summed(const Elem* g, size_t n) {
  constexpr size_t kPartials = 16;
  double partial[kPartials] = {};
  size_t i = 0;
  for (; i + kPartials <= n; i += kPartials)
    for (size_t j = 0; j < kPartials; ++j) {
      const double x = g[i + j];
      partial[j] += x * x;
    }
  for (size_t j = 0; i < n; ++i, ++j) {
    const double x = g[i];
    partial[j] += x * x;
  }
  for (size_t width = kPartials / 2; width > 0; width /= 2)
    for (size_t j = 0; j < width; ++j) partial[j] = partial[2 * j] + partial[2 * j + 1];
  return partial[0];
}
QUIRE_WIDEST_VECTORS double squares_summed_f32(const float* g, size_t n) { return squares_summed(g, n); }
QUIRE_WIDEST_VECTORS double squares_summed_f64(const double* g, size_t n) { return squares_summed(g, n); }

double sum_of_squares(const runtime::RealStorage& grad) {
  return grad.holds_narrow() ? squares_summed_f32(grad.narrow(), grad.size())
                             : squares_summed_f64(grad.data(), grad.size());
}

/// Runs part(lo, hi) over [0, n) in parts of at least kElementsPerPart
/// elements on up to `threads` threads (the caller's among them): the
/// element-wise updates, whose elements do not depend on one another.
void for_parts(size_t n, int threads, const std::function<void(size_t lo, size_t hi)>& part) {
  constexpr size_t kElementsPerPart = 16384;  // ~0.1 ms of AdamW: worth a worker's wake-up
  const size_t parts = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(threads), n / kElementsPerPart));
  if (parts == 1) {
    part(0, n);
    return;
  }
  native::WorkerPool::shared().parallel_for(static_cast<int64_t>(parts), static_cast<int>(parts), [&](int64_t i, int) {
    part(static_cast<size_t>(i) * n / parts, static_cast<size_t>(i + 1) * n / parts);
  });
}

/// Whether a view's pointer is to f32 elements (else f64).
template <typename T>
constexpr bool is_f32_view(T*) {
  return std::is_same_v<std::remove_const_t<T>, float>;
}

/// Calls update(p, grad) with the parameter's elements in the view an update
/// writes them in, and the gradient's in the view it has: an f32 master is
/// updated in its f32 view (exactly: every new value is rounded to f32), which
/// the native kernels of the next step read without a conversion; a kernel's
/// f32 gradient is not widened for the update.
template <class F>
void with_views(const Slot& s, runtime::FloatType master, F&& update) {
  auto with_param = [&](const auto* grad) {
    if (master == runtime::FloatType::F32)
      update(s.param->narrow_for_writing(), grad);
    else
      update(s.param->data(), grad);
  };
  if (s.grad->holds_narrow())
    with_param(s.grad->narrow());
  else
    with_param(s.grad->data());
}

/// Calls update(state...) with the state's elements (one storage or two) as
/// f32 under an f32 master, else as f64. An f32 master rounds every new
/// state value to f32, so its state holds f32 numbers, and f32 storage keeps
/// their bits in half the memory (as PyTorch holds an f32 run's moments). A
/// state that holds other numbers (restored from an f64 run) stays f64 until
/// an update has rounded it.
template <class F, class... State>
void with_state_views(runtime::FloatType master, F&& update, State*... state) {
  if (master == runtime::FloatType::F32 && (state->holds_f32_numbers() && ...))
    update(state->narrow_for_writing()...);
  else
    update(state->data()...);
}

/// torch.optim.AdamW's _single_tensor_adam with decoupled weight decay, at
/// update number t (from 1). `coef` scales every gradient (1: unclipped).
/// Whole vectors go through the AVX-512 loop where the CPU has it (the same
/// bits, adamw_update.h), the rest element by element.
void adamw_pass(const std::vector<Slot>& slots, const OptimizerConfig& c, double lr, int64_t t, double coef,
                bool clipped, runtime::FloatType master, int threads) {
  AdamWConstants k;
  k.clipped = clipped;
  k.coef = coef;
  k.decays = c.weight_decay != 0;
  k.decay = 1.0 - lr * c.weight_decay;
  k.m_weight = 1.0 - c.beta1;
  k.beta2 = c.beta2;
  k.v_weight = 1.0 - c.beta2;
  // Python: beta ** step with step the f32 tensor's value (exact below 2^24).
  const double bias_correction1 = 1.0 - std::pow(c.beta1, static_cast<double>(t));
  const double bias_correction2 = 1.0 - std::pow(c.beta2, static_cast<double>(t));
  k.neg_step_size = -(lr / bias_correction1);
  k.bias_correction2_sqrt = std::sqrt(bias_correction2);
  k.eps = c.eps;
  k.master = master;
  const bool vectors = adamw_avx512_available(master);
  for (const Slot& s : slots) {
    const size_t n = s.param->size();
    with_state_views(
        master,
        [&](auto* m, auto* v) {
          with_views(s, master, [&](auto* p, const auto* grad) {
            for_parts(n, threads, [&](size_t lo, size_t hi) {
              for (size_t i = lo; i < hi;) {
                if (vectors)
                  i = adamw_vectors_avx512(k, i, hi, m, v, is_f32_view(m), p, is_f32_view(p), grad, is_f32_view(grad));
                // The tail, or a vector with a NaN result.
                for (const size_t stop = std::min(hi, i + 8); i < stop; ++i) adamw_element(k, i, m, v, p, grad);
              }
            });
          });
        },
        s.first, s.second);
  }
}

/// torch.optim.SGD's _single_tensor_sgd. `first_update`: the momentum buffer
/// is created from this update's gradient.
void sgd_pass(const std::vector<Slot>& slots, const OptimizerConfig& c, double lr, bool first_update, double coef,
              bool clipped, runtime::FloatType master, int threads) {
  const double buffer_weight = 1.0 - c.dampening;
  for (const Slot& s : slots) {
    const size_t n = s.param->size();
    auto update = [&](auto* buffer) {
      using Buffered = std::remove_pointer_t<decltype(buffer)>;
      with_views(s, master, [&](auto* p, const auto* grad) {
        using Held = std::remove_pointer_t<decltype(p)>;
        for_parts(n, threads, [&](size_t lo, size_t hi) {
          for (size_t i = lo; i < hi; ++i) {
            double g = clipped ? grad[i] * coef : grad[i];
            if (c.weight_decay != 0) g = g + c.weight_decay * p[i];
            if (c.momentum != 0) {
              const double b = runtime::round_to(
                  master, first_update ? g : static_cast<double>(buffer[i]) * c.momentum + buffer_weight * g);
              buffer[i] = static_cast<Buffered>(b);
              g = c.nesterov ? g + c.momentum * b : b;
            }
            p[i] = static_cast<Held>(runtime::round_to(master, p[i] + (-lr) * g));
          }
        });
      });
    };
    // Without momentum there is no buffer (an empty state): nothing to view.
    if (c.momentum != 0)
      with_state_views(master, update, s.first);
    else
      update(static_cast<double*>(nullptr));
  }
}

}  // namespace

const char* optimizer_kind_name(OptimizerKind kind) { return kind == OptimizerKind::AdamW ? "adamw" : "sgd"; }

OptimizerConfig OptimizerConfig::defaults(OptimizerKind kind, std::string name) {
  OptimizerConfig c;
  c.name = std::move(name);
  c.kind = kind;
  c.weight_decay = kind == OptimizerKind::AdamW ? 1e-2 : 0.0;
  return c;
}

OptimizerConfig OptimizerConfig::from(const elab::OptimizerInfo& info) {
  auto field_error = [&](const elab::FieldInfo& f, const std::string& what) {
    return OptimizerError(fmt::format("optimizer `{}`: field `{}`: {}", info.name, f.key, what), f.loc);
  };

  const elab::FieldInfo* kind_field = nullptr;
  for (const elab::FieldInfo& f : info.fields)
    if (f.key == "kind") kind_field = &f;
  std::optional<OptimizerKind> kind = parse_kind(kind_field ? unquote(kind_field->value) : info.name);
  if (!kind && kind_field)
    throw field_error(*kind_field, fmt::format("unknown algorithm `{}` (adamw, sgd)", kind_field->value));
  if (!kind)
    throw OptimizerError(fmt::format("optimizer `{}`: unknown algorithm; name the block `adamw` or `sgd`, or set "
                                     "`kind = adamw` or `kind = sgd`",
                                     info.name),
                         info.loc);

  OptimizerConfig c = defaults(*kind, info.name);
  std::set<const FieldRule*> seen;  // `beta1` and `β1` are one field
  for (const elab::FieldInfo& f : info.fields) {
    if (f.key == "kind") continue;
    const FieldRule* rule = nullptr;
    for (const FieldRule& r : kFieldRules)
      if (f.key == r.key || (r.greek && f.key == r.greek)) rule = &r;
    if (f.key == "betas" && c.kind == OptimizerKind::AdamW)
      throw field_error(f, "write `beta1 = …` and `beta2 = …` (a tuple's elements are not kept by elaboration)");
    if (!rule || !applies_to(rule->applies, c.kind))
      throw field_error(
          f, fmt::format("{} has no such field (its fields: {})", optimizer_kind_name(c.kind), field_list(c.kind)));
    if (!seen.insert(rule).second) throw field_error(f, fmt::format("`{}` is set twice", rule->key));
    switch (rule->rule) {
      case ValueRule::Boolean:
        if (f.value != "true" && f.value != "false")
          throw field_error(f, fmt::format("must be true or false, got `{}`", f.value));
        c.nesterov = f.value == "true";
        break;
      case ValueRule::ScheduleText: {
        std::string why;
        std::optional<Schedule> s = parse_schedule(f.value, &why);
        if (!s) throw field_error(f, why);
        c.schedule = *s;
        break;
      }
      default: {
        const double x = number_of(f, rule->rule, field_error);
        if (rule->number)
          c.*(rule->number) = x;
        else
          c.clip = x;
      }
    }
  }
  if (c.nesterov && (c.momentum <= 0 || c.dampening != 0))
    for (const elab::FieldInfo& f : info.fields)
      if (f.key == "nesterov") throw field_error(f, "needs momentum > 0 and dampening = 0 (as in PyTorch)");
  return c;
}

// ---------------------------------------------------------------- Optimizer

Optimizer::Optimizer(OptimizerConfig config, const interp::ParamMap& params, std::set<std::string> frozen)
    : config_(std::move(config)), frozen_(std::move(frozen)) {
  const bool has_first = config_.kind == OptimizerKind::AdamW || config_.momentum != 0;
  const bool has_second = config_.kind == OptimizerKind::AdamW;
  for (const auto& [path, tensor] : params) {
    if (frozen_.count(path)) continue;
    if (!tensor.is_real())
      throw OptimizerError(fmt::format("optimizer `{}`: parameter `{}` is not real", config_.name, path));
    const size_t n = static_cast<size_t>(tensor.size());
    states_.push_back(
        {path, tensor.shape, runtime::RealStorage(has_first ? n : 0), runtime::RealStorage(has_second ? n : 0)});
  }
}

StepReport Optimizer::step(interp::ParamMap& params, const interp::ParamMap& grads, runtime::FloatType master,
                           int64_t total_steps) {
  auto mismatch = [&](const std::string& what) {
    return OptimizerError(fmt::format("optimizer `{}`: {}", config_.name, what));
  };
  // Check everything before changing anything.
  std::vector<Slot> slots;
  slots.reserve(states_.size());
  for (ParamState& s : states_) {
    auto p = params.find(s.path);
    if (p == params.end()) throw mismatch(fmt::format("parameter `{}` is missing", s.path));
    if (!p->second.is_real() || p->second.shape != s.shape)
      throw mismatch(fmt::format("parameter `{}` has shape {}, not {}", s.path, runtime::shape_string(p->second.shape),
                                 runtime::shape_string(s.shape)));
    auto g = grads.find(s.path);
    if (g == grads.end()) throw mismatch(fmt::format("no gradient for parameter `{}`", s.path));
    if (!g->second.is_real() || g->second.shape != s.shape)
      throw mismatch(fmt::format("the gradient of `{}` has shape {}, not {}", s.path,
                                 runtime::shape_string(g->second.shape), runtime::shape_string(s.shape)));
    slots.push_back({&p->second.reals, &g->second.reals, &s.first, &s.second});
  }
  auto trainable_count = [&](const interp::ParamMap& m) {
    return std::count_if(m.begin(), m.end(), [&](const auto& e) { return !frozen_.count(e.first); });
  };
  auto first_unknown = [&](const interp::ParamMap& m) {
    for (const auto& [path, t] : m)
      if (!frozen_.count(path) && !std::ranges::binary_search(states_, path, {}, &ParamState::path)) return path;
    return std::string();
  };
  if (static_cast<size_t>(trainable_count(params)) != states_.size())
    throw mismatch(fmt::format("parameter `{}` is not one it was made for", first_unknown(params)));
  if (static_cast<size_t>(trainable_count(grads)) != states_.size())
    throw mismatch(fmt::format("gradient `{}` belongs to no trainable parameter", first_unknown(grads)));

  // The joint norm: each tensor's sum of squares (sum_of_squares' order),
  // added in path order.
  double sum_sq = 0;
  for (const Slot& s : slots) sum_sq += sum_of_squares(*s.grad);
  StepReport report;
  report.step = steps_;
  report.grad_norm = std::sqrt(sum_sq);
  double coef = 1.0;
  if (config_.clip) {
    // clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1.
    const double c = *config_.clip / (report.grad_norm + 1e-6);
    report.clipped = c < 1.0;
    if (report.clipped) coef = c;
  }
  report.lr = config_.schedule.lr_at(steps_, config_.lr, total_steps);
  const int64_t t = ++steps_;
  if (config_.kind == OptimizerKind::AdamW)
    adamw_pass(slots, config_, report.lr, t, coef, report.clipped, master, threads_);
  else
    sgd_pass(slots, config_, report.lr, t == 1, coef, report.clipped, master, threads_);
  return report;
}

std::vector<std::string> Optimizer::state_kinds() const {
  if (config_.kind == OptimizerKind::AdamW) return {"exp_avg", "exp_avg_sq"};
  if (config_.momentum != 0) return {"momentum_buffer"};
  return {};
}

io::NamedTensors Optimizer::state_tensors() const {
  io::NamedTensors out;
  const std::vector<std::string> kinds = state_kinds();
  for (size_t k = 0; k < kinds.size(); ++k)
    for (const ParamState& s : states_) {
      runtime::Tensor t = runtime::Tensor::real(s.shape);
      t.reals = k == 0 ? s.first : s.second;
      out.emplace_back(fmt::format("{}.{}.{}", optimizer_kind_name(config_.kind), kinds[k], s.path), std::move(t));
    }
  return out;
}

nlohmann::json Optimizer::state_json() const { return {{"kind", optimizer_kind_name(config_.kind)}, {"step", steps_}}; }

void Optimizer::restore(const io::NamedTensors& tensors, const nlohmann::json& state) {
  auto refuse = [&](const std::string& why) {
    return OptimizerError(fmt::format("optimizer `{}`: cannot restore its state: {}", config_.name, why));
  };
  const char* kind = optimizer_kind_name(config_.kind);
  if (!state.is_object() || !state.contains("kind") || !state["kind"].is_string())
    throw refuse("the state JSON has no \"kind\"");
  if (state["kind"].get<std::string>() != kind)
    throw refuse(fmt::format("the state is {}'s, not {}'s", state["kind"].get<std::string>(), kind));
  if (!state.contains("step") || !state["step"].is_number_integer() || state["step"].get<int64_t>() < 0)
    throw refuse("the state JSON's \"step\" is not a natural number");
  const int64_t steps = state["step"].get<int64_t>();

  std::map<std::string, const runtime::Tensor*> by_name;
  for (const auto& [name, t] : tensors)
    if (!by_name.emplace(name, &t).second) throw refuse(fmt::format("tensor `{}` is given twice", name));
  // Stage the new state so that a refusal changes nothing.
  std::vector<ParamState> restored = states_;
  const std::vector<std::string> kinds = state_kinds();
  for (size_t k = 0; k < kinds.size(); ++k)
    for (ParamState& s : restored) {
      const std::string name = fmt::format("{}.{}.{}", kind, kinds[k], s.path);
      auto it = by_name.find(name);
      if (it == by_name.end()) throw refuse(fmt::format("tensor `{}` is missing", name));
      const runtime::Tensor& t = *it->second;
      if (!t.is_real() || t.shape != s.shape)
        throw refuse(fmt::format("tensor `{}` is {} {}, not real {}", name, runtime::elem_kind_name(t.kind),
                                 runtime::shape_string(t.shape), runtime::shape_string(s.shape)));
      (k == 0 ? s.first : s.second) = t.reals.to_vector();
      by_name.erase(it);
    }
  if (!by_name.empty())
    throw refuse(fmt::format("tensor `{}` belongs to no trainable parameter", by_name.begin()->first));
  states_ = std::move(restored);
  steps_ = steps;
}

}  // namespace quire::train
