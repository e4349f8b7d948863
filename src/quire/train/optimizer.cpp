// AdamW, SGD and Muon (optimizer.h): the optimizer block's reading, one
// update as a single pass over (parameter, gradient, state) triples, and the
// state's save and restore. Muon's orthogonalization is not here: it is the
// prelude's newton_schulz, evaluated by quire (newton_schulz.h), so that the
// iteration is written once, in quire, and the optimizer's bits are those of
// `quire run` on it.
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

/// Which algorithms a field belongs to: a set of bits, one per OptimizerKind.
using Applies = unsigned;
constexpr Applies kAdamW = 1u << static_cast<unsigned>(OptimizerKind::AdamW);
constexpr Applies kSgd = 1u << static_cast<unsigned>(OptimizerKind::Sgd);
constexpr Applies kMuon = 1u << static_cast<unsigned>(OptimizerKind::Muon);
constexpr Applies kAll = kAdamW | kSgd | kMuon;

/// What a field's value must be.
enum class ValueRule {
  NonNegative,   ///< a number ≥ 0
  Positive,      ///< a number > 0
  UnitOpen,      ///< a number in [0, 1)
  UnitClosed,    ///< a number in [0, 1]
  Finite,        ///< any finite number
  Boolean,       ///< true or false
  ScheduleText,  ///< constant, linear(warmup = W), cosine(warmup = W)
  NsSteps,       ///< 5, the steps the prelude's newton_schulz writes out
  AdjustLrText,  ///< original, match_rms_adamw, spectral_unclamped
  ParamList,     ///< parameter or module paths, in a string, separated by spaces or commas
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
// Muon's fields are torch.optim.Muon's arguments, with its tuple
// ns_coefficients written as ns_a, ns_b, ns_c, and its AdamW's
// torch.optim.AdamW's, prefixed `adamw_`.
constexpr FieldRule kFieldRules[] = {
    {"lr", nullptr, kAll, ValueRule::NonNegative, &OptimizerConfig::lr},
    {"weight_decay", nullptr, kAll, ValueRule::NonNegative, &OptimizerConfig::weight_decay},
    {"schedule", nullptr, kAll, ValueRule::ScheduleText, nullptr},
    {"clip", nullptr, kAll, ValueRule::Positive, nullptr},
    {"beta1", "β1", kAdamW, ValueRule::UnitOpen, &OptimizerConfig::beta1},
    {"beta2", "β2", kAdamW, ValueRule::UnitOpen, &OptimizerConfig::beta2},
    {"eps", "ε", kAdamW | kMuon, ValueRule::NonNegative, &OptimizerConfig::eps},
    {"momentum", nullptr, kSgd | kMuon, ValueRule::NonNegative, &OptimizerConfig::momentum},
    {"dampening", nullptr, kSgd, ValueRule::UnitClosed, &OptimizerConfig::dampening},
    {"nesterov", nullptr, kSgd | kMuon, ValueRule::Boolean, nullptr},
    {"ns_a", nullptr, kMuon, ValueRule::Finite, &OptimizerConfig::ns_a},
    {"ns_b", nullptr, kMuon, ValueRule::Finite, &OptimizerConfig::ns_b},
    {"ns_c", nullptr, kMuon, ValueRule::Finite, &OptimizerConfig::ns_c},
    {"ns_steps", nullptr, kMuon, ValueRule::NsSteps, nullptr},
    {"adjust_lr_fn", nullptr, kMuon, ValueRule::AdjustLrText, nullptr},
    {"adamw_lr", nullptr, kMuon, ValueRule::NonNegative, &OptimizerConfig::adamw_lr},
    {"adamw_beta1", "adamw_β1", kMuon, ValueRule::UnitOpen, &OptimizerConfig::adamw_beta1},
    {"adamw_beta2", "adamw_β2", kMuon, ValueRule::UnitOpen, &OptimizerConfig::adamw_beta2},
    {"adamw_eps", "adamw_ε", kMuon, ValueRule::NonNegative, &OptimizerConfig::adamw_eps},
    {"adamw_weight_decay", nullptr, kMuon, ValueRule::NonNegative, &OptimizerConfig::adamw_weight_decay},
    {"adamw_params", nullptr, kMuon, ValueRule::ParamList, nullptr},
};

/// An argument PyTorch takes as a tuple, which elaboration does not keep,
/// and the fields to write instead.
struct TupleField {
  const char* key;
  Applies applies;
  const char* instead;
};
constexpr TupleField kTupleFields[] = {
    {"betas", kAdamW, "write `beta1 = …` and `beta2 = …`"},
    {"ns_coefficients", kMuon, "write `ns_a = …`, `ns_b = …` and `ns_c = …`"},
    {"adamw_betas", kMuon, "write `adamw_beta1 = …` and `adamw_beta2 = …`"},
};

bool applies_to(Applies a, OptimizerKind kind) { return (a & (1u << static_cast<unsigned>(kind))) != 0; }

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
  if (name == "muon") return OptimizerKind::Muon;
  return std::nullopt;
}

std::optional<AdjustLr> parse_adjust_lr(const std::string& name) {
  for (AdjustLr a : {AdjustLr::Original, AdjustLr::MatchRmsAdamW, AdjustLr::SpectralUnclamped})
    if (name == adjust_lr_name(a)) return a;
  return std::nullopt;
}

/// The paths of an adamw_params value: `"embed.table, head.w"` (one string
/// literal, paths separated by commas or spaces) or a single bare path.
std::vector<std::string> param_list(const std::string& value) {
  std::vector<std::string> paths;
  std::string path;
  for (char ch : unquote(value) + " ") {
    if (ch == ' ' || ch == ',' || ch == '\t') {
      if (!path.empty()) paths.push_back(path);
      path.clear();
    } else {
      path += ch;
    }
  }
  return paths;
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
    case ValueRule::Finite:
      if (!std::isfinite(x)) throw field_error(f, fmt::format("must be a finite number, got {}", f.value));
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
/// Whole vectors go through the widest vector loop the CPU has (the same
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
  const AdamWVectors vectors = adamw_vectors_for(master, runtime::widest_isa());
  for (const Slot& s : slots) {
    const size_t n = s.param->size();
    with_state_views(
        master,
        [&](auto* m, auto* v) {
          with_views(s, master, [&](auto* p, const auto* grad) {
            for_parts(n, threads, [&](size_t lo, size_t hi) {
              for (size_t i = lo; i < hi;) {
                if (vectors)
                  i = vectors(k, i, hi, m, v, is_f32_view(m), p, is_f32_view(p), grad, is_f32_view(grad));
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

/// PyTorch's _adjust_lr: the learning rate of a matrix of fan-out A and
/// fan-in B (quire's [in, out] matrix is [B, A]).
double adjusted_lr(double lr, AdjustLr adjust, int64_t fan_out, int64_t fan_in) {
  const double a = static_cast<double>(fan_out);
  const double b = static_cast<double>(fan_in);
  double ratio = 1.0;
  switch (adjust) {
    case AdjustLr::Original:
      ratio = std::sqrt(std::max(1.0, a / b));
      break;
    case AdjustLr::MatchRmsAdamW:
      ratio = 0.2 * std::sqrt(std::max(a, b));
      break;
    case AdjustLr::SpectralUnclamped:
      ratio = std::sqrt(a / b);
      break;
  }
  return lr * ratio;
}

/// One of Muon's parameters as its update sees it: its elements (a Slot) and
/// its copies' matrices, [L, R, C] (L = 1 for one matrix).
struct MuonSlot {
  Slot slot;
  runtime::Shape matrices;
};

/// torch.optim.Muon's _single_tensor_muon on each of Muon's parameters: the
/// momentum buffer and the update element by element, the update's
/// orthogonalization by the prelude's functions (`ns`), then the parameter.
void muon_pass(const std::vector<MuonSlot>& slots, const OptimizerConfig& c, double lr, double coef, bool clipped,
               runtime::FloatType master, int threads, NewtonSchulz& ns) {
  const double buffer_weight = 1.0 - c.momentum;  // buf.lerp_(grad, 1 - momentum)
  const double decay = 1.0 - lr * c.weight_decay;
  for (const MuonSlot& m : slots) {
    const Slot& s = m.slot;
    const size_t n = s.param->size();
    // u, in the master's values (PyTorch's `update` is a tensor of the parameter's dtype).
    runtime::Tensor u = runtime::Tensor::real(m.matrices);
    double* update = u.reals.data();
    with_state_views(
        master,
        [&](auto* buffer) {
          using Buffered = std::remove_pointer_t<decltype(buffer)>;
          with_views(s, master, [&](auto*, const auto* grad) {
            for_parts(n, threads, [&](size_t lo, size_t hi) {
              for (size_t i = lo; i < hi; ++i) {
                const double g = clipped ? grad[i] * coef : grad[i];
                const double b = runtime::round_to(master, adamw_lerp(buffer[i], g, buffer_weight));
                buffer[i] = static_cast<Buffered>(b);
                update[i] = runtime::round_to(master, c.nesterov ? adamw_lerp(g, b, c.momentum) : b);
              }
            });
          });
        },
        s.first);
    // PyTorch transposes its [C, R] matrix when C > R: quire's newton_schulz
    // is its form for R < C, newton_schulz_tall (on the transposes) for R ≥ C.
    const int64_t rows = m.matrices[1];
    const int64_t cols = m.matrices[2];
    const runtime::Tensor o = ns(rows < cols ? NewtonSchulzForm::Wide : NewtonSchulzForm::Tall, u, master);
    const double* orthogonal = o.reals.data();
    const double neg_lr = -adjusted_lr(lr, c.adjust_lr, cols, rows);
    with_views(s, master, [&](auto* p, const auto*) {
      using Held = std::remove_pointer_t<decltype(p)>;
      for_parts(n, threads, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i)
          p[i] = static_cast<Held>(runtime::round_to(master, p[i] * decay + neg_lr * orthogonal[i]));
      });
    });
  }
}

}  // namespace

const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::AdamW:
      return "adamw";
    case OptimizerKind::Sgd:
      return "sgd";
    case OptimizerKind::Muon:
      return "muon";
  }
  return "?";
}

const char* adjust_lr_name(AdjustLr a) {
  switch (a) {
    case AdjustLr::Original:
      return "original";
    case AdjustLr::MatchRmsAdamW:
      return "match_rms_adamw";
    case AdjustLr::SpectralUnclamped:
      return "spectral_unclamped";
  }
  return "?";
}

OptimizerConfig OptimizerConfig::defaults(OptimizerKind kind, std::string name) {
  OptimizerConfig c;
  c.name = std::move(name);
  c.kind = kind;
  switch (kind) {
    case OptimizerKind::AdamW:
      c.weight_decay = 1e-2;
      break;
    case OptimizerKind::Sgd:
      c.weight_decay = 0.0;
      break;
    case OptimizerKind::Muon:
      c.weight_decay = 0.1;
      c.momentum = 0.95;
      c.nesterov = true;
      c.eps = 1e-7;
      break;
  }
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
    throw field_error(*kind_field, fmt::format("unknown algorithm `{}` (adamw, sgd, muon)", kind_field->value));
  if (!kind)
    throw OptimizerError(fmt::format("optimizer `{}`: unknown algorithm; name the block `adamw`, `sgd` or `muon`, or "
                                     "set `kind = adamw`, `kind = sgd` or `kind = muon`",
                                     info.name),
                         info.loc);

  OptimizerConfig c = defaults(*kind, info.name);
  std::set<const FieldRule*> seen;  // `beta1` and `β1` are one field
  for (const elab::FieldInfo& f : info.fields) {
    if (f.key == "kind") continue;
    const FieldRule* rule = nullptr;
    for (const FieldRule& r : kFieldRules)
      if (f.key == r.key || (r.greek && f.key == r.greek)) rule = &r;
    for (const TupleField& t : kTupleFields)
      if (f.key == t.key && applies_to(t.applies, c.kind))
        throw field_error(f, fmt::format("{} (a tuple's elements are not kept by elaboration)", t.instead));
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
      case ValueRule::NsSteps:
        if (!f.is_number || f.number != 5)
          throw field_error(f, fmt::format("must be 5, got `{}`: the prelude's newton_schulz writes out its five "
                                           "steps (the language has no loops)",
                                           f.value));
        break;
      case ValueRule::AdjustLrText: {
        std::optional<AdjustLr> a = parse_adjust_lr(unquote(f.value));
        if (!a)
          throw field_error(
              f, fmt::format("unknown adjustment `{}` (original, match_rms_adamw, spectral_unclamped)", f.value));
        c.adjust_lr = *a;
        break;
      }
      case ValueRule::ParamList:
        c.adamw_params = param_list(f.value);
        c.adamw_params_loc = f.loc;
        if (c.adamw_params.empty())
          throw field_error(f, "names no parameter (write `adamw_params = \"embed.table, head.w\"`)");
        break;
      default: {
        const double x = number_of(f, rule->rule, field_error);
        if (rule->number)
          c.*(rule->number) = x;
        else
          c.clip = x;
      }
    }
  }
  if (c.kind == OptimizerKind::Sgd && c.nesterov && (c.momentum <= 0 || c.dampening != 0))
    for (const elab::FieldInfo& f : info.fields)
      if (f.key == "nesterov") throw field_error(f, "needs momentum > 0 and dampening = 0 (as in PyTorch)");
  return c;
}

// ---------------------------------------------------------------- Optimizer

namespace {

// An adamw_params entry names a parameter's path or a sub-module's: `embed` names embed.table.
bool names(const std::string& entry, const std::string& path) {
  return path == entry || path.rfind(entry + ".", 0) == 0;
}

/// The state a trainable parameter of `rank` axes (`copies` of them a
/// stack's) and `elements` elements takes: Muon's momentum (a 2-D matrix
/// not listed in adamw_params, under Muon) or AdamW's two moments, or SGD's
/// momentum; the elements of each of its two buffers.
struct StatePlan {
  bool muon = false;
  size_t first = 0, second = 0;
};
StatePlan plan_state(const OptimizerConfig& c, const std::string& path, int64_t rank, int copies, size_t elements) {
  const bool listed =
      std::ranges::any_of(c.adamw_params, [&](const std::string& entry) { return names(entry, path); });
  StatePlan p;
  p.muon = c.kind == OptimizerKind::Muon && rank - copies == 2 && !listed;
  const bool adam = c.kind == OptimizerKind::AdamW || (c.kind == OptimizerKind::Muon && !p.muon);
  p.first = adam || p.muon || c.momentum != 0 ? elements : 0;
  p.second = adam ? elements : 0;
  return p;
}

}  // namespace

int64_t state_bytes_of(const OptimizerConfig& config, const std::vector<ParamExtent>& trainable,
                       const std::map<std::string, int>& stacked, runtime::FloatType master) {
  int64_t elements = 0;
  for (const ParamExtent& p : trainable) {
    auto copies = stacked.find(p.path);
    const StatePlan plan = plan_state(config, p.path, p.rank, copies == stacked.end() ? 0 : copies->second,
                                      static_cast<size_t>(p.elements));
    elements += static_cast<int64_t>(plan.first + plan.second);
  }
  return elements * runtime::float_type_info(master).storage_bits / 8;
}

namespace {

/// n zeros, held as f32 alone for a parameter held so (an f32, bf16 or f16
/// master's): its state then starts as the f32 numbers an update keeps it in
/// (with_state_views), where f64 zeros would hold twice the bytes until the
/// first update narrowed them (GPT-2 small's moments: 1.98 GB during the
/// first step, docs/memory.md).
runtime::RealStorage zero_state(size_t n, bool narrow) {
  if (!narrow) return runtime::RealStorage(n);
  runtime::RealStorage s = runtime::RealStorage::narrow_for_overwrite(n);
  std::fill_n(s.narrow_for_writing(), n, 0.0f);
  return s;
}

/// A restored state's elements (a checkpoint's reader holds them as f64):
/// as f32 alone where they are f32 numbers, which the update of an f32
/// master writes in place, and which an f64 master's update widens exactly.
runtime::RealStorage held_as_read(const runtime::RealStorage& read) {
  runtime::RealStorage s = read;
  if (s.holds_f32_numbers()) s.narrow_for_writing();
  return s;
}

}  // namespace

Optimizer::Optimizer(OptimizerConfig config, const interp::ParamMap& params, std::set<std::string> frozen,
                     const std::map<std::string, int>& stacked)
    : config_(std::move(config)), frozen_(std::move(frozen)) {
  for (const auto& [path, tensor] : params) {
    if (frozen_.count(path)) continue;
    if (!tensor.is_real())
      throw OptimizerError(fmt::format("optimizer `{}`: parameter `{}` is not real", config_.name, path));
    auto copies = stacked.find(path);
    const StatePlan plan = plan_state(config_, path, tensor.rank(), copies == stacked.end() ? 0 : copies->second,
                                      static_cast<size_t>(tensor.size()));
    const bool narrow = tensor.reals.holds_narrow() && !tensor.reals.holds_wide();
    states_.push_back({path, tensor.shape, plan.muon, zero_state(plan.first, narrow), zero_state(plan.second, narrow)});
  }
  for (const std::string& entry : config_.adamw_params)
    if (!std::ranges::any_of(states_, [&](const ParamState& s) { return names(entry, s.path); }))
      throw OptimizerError(
          fmt::format("optimizer `{}`: field `adamw_params`: `{}` names no trainable parameter", config_.name, entry),
          config_.adamw_params_loc);
}

Optimizer::~Optimizer() = default;

void Optimizer::set_threads(int threads) {
  threads_ = threads < 1 ? 1 : threads;
  newton_schulz_.reset();
}

void Optimizer::set_backend(kernel::Backend backend) {
  backend_ = backend;
  newton_schulz_.reset();
}

std::vector<std::string> Optimizer::muon_params() const {
  std::vector<std::string> out;
  for (const ParamState& s : states_)
    if (s.muon) out.push_back(s.path);
  return out;
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
  const int64_t k = steps_;
  const int64_t t = ++steps_;
  switch (config_.kind) {
    case OptimizerKind::AdamW:
      adamw_pass(slots, config_, report.lr, t, coef, report.clipped, master, threads_);
      break;
    case OptimizerKind::Sgd:
      sgd_pass(slots, config_, report.lr, t == 1, coef, report.clipped, master, threads_);
      break;
    case OptimizerKind::Muon: {
      // Two PyTorch optimizers stepped together: torch.optim.Muon on the
      // matrices, torch.optim.AdamW on the rest, each under the schedule.
      std::vector<MuonSlot> matrices;
      std::vector<Slot> others;
      for (size_t i = 0; i < slots.size(); ++i) {
        if (!states_[i].muon) {
          others.push_back(slots[i]);
          continue;
        }
        const runtime::Shape& shape = states_[i].shape;
        const int64_t r = shape[shape.size() - 2];
        const int64_t c = shape[shape.size() - 1];
        matrices.push_back({slots[i], {runtime::element_count(shape) / (r * c), r, c}});
      }
      OptimizerConfig adamw = OptimizerConfig::defaults(OptimizerKind::AdamW, config_.name);
      adamw.beta1 = config_.adamw_beta1;
      adamw.beta2 = config_.adamw_beta2;
      adamw.eps = config_.adamw_eps;
      adamw.weight_decay = config_.adamw_weight_decay;
      const double adamw_lr = config_.schedule.lr_at(k, config_.adamw_lr, total_steps);
      adamw_pass(others, adamw, adamw_lr, t, coef, report.clipped, master, threads_);
      if (!newton_schulz_)
        newton_schulz_ = std::make_unique<NewtonSchulz>(
            NewtonSchulzSettings{config_.ns_a, config_.ns_b, config_.ns_c, config_.eps}, backend_, threads_);
      muon_pass(matrices, config_, report.lr, coef, report.clipped, master, threads_, *newton_schulz_);
      break;
    }
  }
  return report;
}

std::vector<Optimizer::StateKind> Optimizer::state_kinds() const {
  switch (config_.kind) {
    case OptimizerKind::AdamW:
      return {{"exp_avg", true, false}, {"exp_avg_sq", false, false}};
    case OptimizerKind::Sgd:
      if (config_.momentum != 0) return {{"momentum_buffer", true, false}};
      return {};
    case OptimizerKind::Muon:
      return {{"momentum_buffer", true, true}, {"exp_avg", true, false}, {"exp_avg_sq", false, false}};
  }
  return {};
}

bool Optimizer::holds(const StateKind& k, const ParamState& s) const {
  return config_.kind != OptimizerKind::Muon || k.muon == s.muon;
}

int64_t Optimizer::state_bytes(runtime::FloatType master) const {
  int64_t elements = 0;
  for (const StateKind& k : state_kinds())
    for (const ParamState& s : states_)
      if (holds(k, s)) elements += static_cast<int64_t>((k.in_first ? s.first : s.second).size());
  return elements * runtime::float_type_info(master).storage_bits / 8;
}

std::map<std::string, int> stacked_copies(const elab::Program& prog, const elab::ParamsType& model) {
  std::map<std::string, int> stacked;
  const auto flat = prog.flatten(model);
  const auto decls = prog.flatten_decls(model);
  for (size_t i = 0; i < flat.size() && i < decls.size(); ++i)
    if (const size_t copies = flat[i].second.axes.size() - decls[i]->type.axes.size(); copies > 0)
      stacked[flat[i].first] = static_cast<int>(copies);
  return stacked;
}

io::NamedTensors Optimizer::state_tensors() const {
  io::NamedTensors out;
  for (const StateKind& k : state_kinds())
    for (const ParamState& s : states_) {
      if (!holds(k, s)) continue;
      runtime::Tensor t = runtime::Tensor::real(s.shape);
      t.reals = k.in_first ? s.first : s.second;
      out.emplace_back(fmt::format("{}.{}.{}", optimizer_kind_name(config_.kind), k.name, s.path), std::move(t));
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
  for (const StateKind& k : state_kinds())
    for (ParamState& s : restored) {
      if (!holds(k, s)) continue;
      const std::string name = fmt::format("{}.{}.{}", kind, k.name, s.path);
      auto it = by_name.find(name);
      if (it == by_name.end()) throw refuse(fmt::format("tensor `{}` is missing", name));
      const runtime::Tensor& t = *it->second;
      if (!t.is_real() || t.shape != s.shape)
        throw refuse(fmt::format("tensor `{}` is {} {}, not real {}", name, runtime::elem_kind_name(t.kind),
                                 runtime::shape_string(t.shape), runtime::shape_string(s.shape)));
      (k.in_first ? s.first : s.second) = held_as_read(t.reals);
      by_name.erase(it);
    }
  if (!by_name.empty())
    throw refuse(fmt::format("tensor `{}` belongs to no trainable parameter", by_name.begin()->first));
  states_ = std::move(restored);
  steps_ = steps;
}

}  // namespace quire::train
