// AdamW and SGD against scalar re-implementations of PyTorch's single-tensor
// formulas (one element at a time, one step at a time, written here from
// torch/optim/adamw.py and sgd.py), under an f64 and an f32 master type; the
// joint-norm clipping; frozen parameters; the state's save and restore; the
// reading of optimizer blocks.

#include "quire/train/optimizer.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "quire/elab/elab_testing.h"
#include "quire/io/safetensors.h"
#include "quire/support/testing.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::train {
namespace {

using interp::ParamMap;
using runtime::FloatType;
using runtime::Tensor;

using quire::testing::error_of;

Tensor reals(runtime::Shape shape, std::vector<double> values) {
  Tensor t = Tensor::real(std::move(shape));
  t.reals = std::move(values);
  return t;
}

/// Values of many magnitudes and both signs, rounded to `type`, so that any
/// other order of operations would round differently somewhere.
Tensor random_tensor(runtime::Shape shape, std::mt19937_64& rng, FloatType type, int min_exp = -8, int max_exp = 2) {
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(min_exp, max_exp);
  Tensor t = Tensor::real(std::move(shape));
  for (double& v : t.reals) v = runtime::round_to(type, std::ldexp(mantissa(rng), exponent(rng)));
  return t;
}

/// Three parameters, one of them a scalar; keys in path order.
ParamMap initial_params(FloatType type, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  ParamMap p;
  p["blocks.proj.w"] = random_tensor({2, 3}, rng, type, -2, 1);
  p["head.b"] = random_tensor({4}, rng, type, -2, 1);
  p["scale"] = random_tensor({}, rng, type, -2, 1);
  return p;
}

/// The gradients of update `k` (a different draw each update).
ParamMap gradients(const ParamMap& params, int k, FloatType type) {
  std::mt19937_64 rng(1000 + k);
  ParamMap g;
  for (const auto& [path, t] : params) g[path] = random_tensor(t.shape, rng, type);
  return g;
}

bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

void expect_close(double got, double want, FloatType master, const std::string& where) {
  if (master == FloatType::F64) {
    EXPECT_LE(std::abs(got - want), 1e-15 * std::abs(want)) << where << ": " << got << " vs " << want;
  } else {
    EXPECT_TRUE(same_bits(got, want)) << where << ": " << got << " vs " << want;
    EXPECT_EQ(got, runtime::round_to(FloatType::F32, got)) << where << " is not an f32 value";
  }
}

// ---------------------------------------------------------------- the references

/// One element of torch.optim.AdamW (foreach=False), t from 1. The state and
/// the parameter are stored at `master` after each update.
struct AdamWElement {
  double p, m = 0, v = 0;

  void update(double g, double lr, int t, const OptimizerConfig& c, FloatType master) {
    double param = p;
    if (c.weight_decay != 0) param *= 1 - lr * c.weight_decay;  // param.mul_(1 - lr * weight_decay)
    const double w = 1 - c.beta1;                               // exp_avg.lerp_(grad, 1 - beta1)
    m = runtime::round_to(master, w < 0.5 ? m + w * (g - m) : g - (g - m) * (1 - w));
    double sq = v * c.beta2;  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    sq = sq + (1 - c.beta2) * g * g;
    v = runtime::round_to(master, sq);
    const double bias_correction1 = 1 - std::pow(c.beta1, t);
    const double bias_correction2 = 1 - std::pow(c.beta2, t);
    const double step_size = lr / bias_correction1;
    const double denom = std::sqrt(v) / std::sqrt(bias_correction2) + c.eps;
    p = runtime::round_to(master, param + -step_size * m / denom);  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
};

/// One element of torch.optim.SGD (foreach=False).
struct SgdElement {
  double p, buf = 0;
  bool has_buf = false;

  void update(double g, double lr, const OptimizerConfig& c, FloatType master) {
    if (c.weight_decay != 0) g = g + c.weight_decay * p;  // grad.add(param, alpha=weight_decay)
    if (c.momentum != 0) {
      if (!has_buf) {
        buf = runtime::round_to(master, g);  // torch.clone(grad).detach()
        has_buf = true;
      } else {
        buf = runtime::round_to(master, buf * c.momentum + (1 - c.dampening) * g);
      }
      g = c.nesterov ? g + c.momentum * buf : buf;
    }
    p = runtime::round_to(master, p + -lr * g);  // param.add_(grad, alpha=-lr)
  }
};

/// Runs `steps` updates of `c` over initial_params() with the optimizer and
/// with the scalar reference, and compares every parameter and state element
/// after every update.
void compare_with_reference(const OptimizerConfig& c, FloatType master, int steps, int64_t total_steps) {
  ParamMap params = initial_params(master);
  Optimizer opt(c, params);
  std::map<std::string, std::vector<AdamWElement>> adamw;
  std::map<std::string, std::vector<SgdElement>> sgd;
  for (const auto& [path, t] : params)
    for (double x : t.reals) {
      adamw[path].push_back({x});
      sgd[path].push_back({x});
    }
  for (int k = 0; k < steps; ++k) {
    const ParamMap grads = gradients(params, k, master);
    const StepReport r = opt.step(params, grads, master, total_steps);
    const double lr = c.schedule.lr_at(k, c.lr, total_steps);
    EXPECT_EQ(r.step, k);
    EXPECT_EQ(r.lr, lr);
    EXPECT_FALSE(r.clipped);
    const io::NamedTensors state = opt.state_tensors();
    for (const auto& [path, t] : params)
      for (size_t i = 0; i < t.reals.size(); ++i) {
        const double g = grads.at(path).reals[i];
        const std::string where = fmt::format("update {} {}[{}]", k, path, i);
        if (c.kind == OptimizerKind::AdamW) {
          AdamWElement& e = adamw[path][i];
          e.update(g, lr, k + 1, c, master);
          expect_close(t.reals[i], e.p, master, where + " p");
          for (const auto& [name, s] : state) {
            if (name == "adamw.exp_avg." + path) expect_close(s.reals[i], e.m, master, where + " m");
            if (name == "adamw.exp_avg_sq." + path) expect_close(s.reals[i], e.v, master, where + " v");
          }
        } else {
          SgdElement& e = sgd[path][i];
          e.update(g, lr, c, master);
          expect_close(t.reals[i], e.p, master, where + " p");
          for (const auto& [name, s] : state)
            if (name == "sgd.momentum_buffer." + path) expect_close(s.reals[i], e.buf, master, where + " buf");
        }
      }
  }
}

OptimizerConfig adamw_config() {
  OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::AdamW, "adamw");
  c.lr = 0.01;
  c.weight_decay = 0.1;
  c.schedule.kind = Schedule::Kind::Cosine;
  c.schedule.warmup = 2;
  return c;
}

// ---------------------------------------------------------------- AdamW

TEST(OptimizerAdamWTest, MatchesTheScalarReferenceUnderF64) {
  compare_with_reference(adamw_config(), FloatType::F64, 7, 10);
}

TEST(OptimizerAdamWTest, MatchesTheF32RoundedReferenceExactlyUnderF32) {
  compare_with_reference(adamw_config(), FloatType::F32, 7, 10);
}

// Parameters held as f32 alone (the trainer holds an f32 master so) get
// state held as f32 alone from the start, keep both so through updates and a
// restore, and give the bits of the same run on f64-held parameters.
TEST(OptimizerAdamWTest, F32HeldParametersKeepF32HeldStateWithTheSameBits) {
  auto held_alone = [](const runtime::Tensor& t) { return t.reals.holds_narrow() && !t.reals.holds_wide(); };
  ParamMap wide = initial_params(FloatType::F32);
  ParamMap narrow = wide;
  for (auto& [path, t] : narrow) t.reals.narrow_for_writing();
  Optimizer a(adamw_config(), wide), b(adamw_config(), narrow);
  for (const auto& [name, t] : b.state_tensors()) EXPECT_TRUE(held_alone(t)) << name << " at the start";
  for (int k = 0; k < 3; ++k) {
    const ParamMap grads = gradients(wide, k, FloatType::F32);
    a.step(wide, grads, FloatType::F32, 10);
    b.step(narrow, grads, FloatType::F32, 10);
  }
  const io::NamedTensors sa = a.state_tensors(), sb = b.state_tensors();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t k = 0; k < sb.size(); ++k) {
    const auto& [name, t] = sb[k];
    ASSERT_EQ(name, sa[k].first);
    EXPECT_TRUE(held_alone(t)) << name << " after 3 updates";
    for (size_t i = 0; i < t.reals.size(); ++i) EXPECT_TRUE(same_bits(t.reals.narrow()[i], sa[k].second.reals[i])) << name;
  }
  for (const auto& [path, t] : narrow) {
    EXPECT_TRUE(held_alone(t)) << path;
    for (size_t i = 0; i < t.reals.size(); ++i) EXPECT_TRUE(same_bits(t.reals.narrow()[i], wide.at(path).reals[i])) << path;
  }
  // A checkpoint's reader holds the state as f64: restored, it is f32 alone.
  io::NamedTensors read;
  for (const auto& [name, t] : sb) {
    runtime::Tensor wide_copy = runtime::Tensor::real(t.shape);
    wide_copy.reals = runtime::RealStorage(t.reals.to_vector());
    read.emplace_back(name, wide_copy);
  }
  Optimizer c(adamw_config(), narrow);
  c.restore(read, b.state_json());
  for (const auto& [name, t] : c.state_tensors()) EXPECT_TRUE(held_alone(t)) << name << " restored";
  // f64-held parameters keep f64 state.
  Optimizer d(adamw_config(), initial_params(FloatType::F64));
  for (const auto& [name, t] : d.state_tensors()) EXPECT_TRUE(t.reals.holds_wide()) << name;
}

TEST(OptimizerAdamWTest, DefaultsWithoutWeightDecayOrSchedule) {
  OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::AdamW);
  c.weight_decay = 0;
  compare_with_reference(c, FloatType::F64, 5, 5);
  compare_with_reference(c, FloatType::F32, 5, 5);
}

TEST(OptimizerAdamWTest, SmallBeta1TakesLerpsOtherForm) {
  // 1 − β1 = 0.7 ≥ 0.5: torch.lerp computes end − (end − self)·(1 − w).
  OptimizerConfig c = adamw_config();
  c.beta1 = 0.3;
  c.beta2 = 0.9;
  c.eps = 1e-3;
  compare_with_reference(c, FloatType::F64, 5, 10);
  compare_with_reference(c, FloatType::F32, 5, 10);
}

TEST(OptimizerAdamWTest, FirstUpdateMovesEachWeightByAboutLr) {
  // With m̂ = g and v̂ = g² after bias correction, the first update is
  // −lr·g/(|g| + eps): a known landmark of Adam.
  OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::AdamW);
  c.weight_decay = 0;
  c.eps = 0;
  ParamMap params{{"w", reals({2}, {1.0, -1.0})}};
  Optimizer opt(c, params);
  opt.step(params, {{"w", reals({2}, {0.5, -4.0})}}, FloatType::F64, 1);
  EXPECT_NEAR(params["w"].reals[0], 1.0 - 1e-3, 1e-15);
  EXPECT_NEAR(params["w"].reals[1], -1.0 + 1e-3, 1e-15);
}

TEST(OptimizerThreadsTest, AnyThreadCountGivesTheSameBits) {
  // Large enough to be divided among threads (parts of 16384 elements), with
  // the parameters in their f32 view (as a run's f32 master holds them) and
  // in f64, and a gradient in each view.
  for (FloatType master : {FloatType::F32, FloatType::F64}) {
    std::mt19937_64 rng(11);
    const Tensor w0 = random_tensor({300, 333}, rng, master);
    std::vector<Tensor> grads;
    for (int k = 0; k < 3; ++k) grads.push_back(random_tensor({300, 333}, rng, FloatType::F32));
    (void)grads[1].reals.narrow();  // one gradient held as f32 too
    auto run = [&](OptimizerKind kind, int threads) {
      OptimizerConfig c = OptimizerConfig::defaults(kind);
      if (kind == OptimizerKind::Sgd) c.momentum = 0.9;
      ParamMap params{{"w", w0}};
      if (master == FloatType::F32) (void)params["w"].reals.narrow();
      Optimizer opt(c, params);
      opt.set_threads(threads);
      for (int k = 0; k < 3; ++k) opt.step(params, {{"w", grads[static_cast<size_t>(k)]}}, master, 3);
      return std::make_pair(params["w"], opt.state_tensors());
    };
    for (OptimizerKind kind : {OptimizerKind::AdamW, OptimizerKind::Sgd}) {
      const auto [one, one_state] = run(kind, 1);
      for (int threads : {2, 3}) {
        const auto [many, many_state] = run(kind, threads);
        ASSERT_EQ(one.reals.size(), many.reals.size());
        for (size_t i = 0; i < one.reals.size(); ++i)
          ASSERT_EQ(std::bit_cast<uint64_t>(one.reals[i]), std::bit_cast<uint64_t>(many.reals[i]))
              << threads << " threads, element " << i;
        for (size_t s = 0; s < one_state.size(); ++s) EXPECT_EQ(one_state[s].second.reals, many_state[s].second.reals);
      }
    }
  }
}

// ---------------------------------------------------------------- SGD

TEST(OptimizerSgdTest, MatchesTheScalarReference) {
  struct Case {
    const char* name;
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const Case cases[] = {
      {"plain", 0, 0, 0, false},      {"weight decay", 0, 0, 0.05, false},
      {"momentum", 0.9, 0, 0, false}, {"momentum, dampening, weight decay", 0.9, 0.25, 0.01, false},
      {"nesterov", 0.9, 0, 0, true},  {"nesterov, weight decay", 0.8, 0, 0.02, true},
  };
  for (const Case& k : cases)
    for (FloatType master : {FloatType::F64, FloatType::F32}) {
      SCOPED_TRACE(fmt::format("{} under {}", k.name, runtime::float_type_name(master)));
      OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::Sgd, "sgd");
      c.lr = 0.1;
      c.momentum = k.momentum;
      c.dampening = k.dampening;
      c.weight_decay = k.weight_decay;
      c.nesterov = k.nesterov;
      c.schedule.kind = Schedule::Kind::Linear;
      c.schedule.warmup = 1;
      compare_with_reference(c, master, 6, 8);
    }
}

TEST(OptimizerSgdTest, PlainSgdByHand) {
  OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::Sgd);
  c.lr = 0.5;
  ParamMap params{{"w", reals({2}, {1.0, 2.0})}};
  Optimizer opt(c, params);
  const StepReport r = opt.step(params, {{"w", reals({2}, {0.25, -1.0})}}, FloatType::F64, 10);
  EXPECT_EQ(params["w"].reals, (std::vector<double>{0.875, 2.5}));
  EXPECT_EQ(r.lr, 0.5);
  EXPECT_EQ(r.grad_norm, std::sqrt(1.0625));
  EXPECT_TRUE(opt.state_tensors().empty());  // no momentum, no state
}

// ---------------------------------------------------------------- clipping

TEST(OptimizerClipTest, TheNormSumsSixteenInterleavedPartialsPairwise) {
  // 1 then sixteen squares of 2^-54. One chain in element order gives 1 (each
  // 1 + 2^-54 ties back to 1). The documented order: partial 0 holds 1 + 2^-54
  // = 1 and partials 1..15 hold 2^-54; up the tree 1 + 2^-54 = 1, then
  // 1 + 2^-53 ties to 1, then 1 + 2^-52, and with 2^-51 the sum 1 + 3·2^-52.
  OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::Sgd);
  c.lr = 0.5;
  std::vector<double> g(17, 0x1p-27);
  g[0] = 1.0;
  ParamMap params{{"w", reals({17}, std::vector<double>(17, 0.0))}};
  Optimizer opt(c, params);
  const StepReport r = opt.step(params, {{"w", reals({17}, g)}}, FloatType::F64, 1);
  EXPECT_EQ(r.grad_norm, std::sqrt(1.0 + 3 * 0x1p-52));
  EXPECT_NE(r.grad_norm, 1.0);
}

TEST(OptimizerClipTest, AnF32GradientsNormTakesTheSameOrder) {
  // A gradient held as f32 (a kernel's output), long enough for several
  // vectors and a tail: the norm is the documented order's, computed here
  // one element at a time, and not one chain's.
  const size_t n = 16 * 37 + 5;
  runtime::RealStorage narrow = runtime::RealStorage::narrow_for_overwrite(n);
  float* f = narrow.narrow_for_writing();
  for (size_t i = 0; i < n; ++i) f[i] = i % 16 == 3 ? 1.0f : std::ldexp(1.0f + static_cast<float>(i % 7), -27);
  double partial[16] = {}, chain = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = f[i];
    partial[i % 16] += x * x;
    chain += x * x;
  }
  for (size_t width = 8; width > 0; width /= 2)
    for (size_t j = 0; j < width; ++j) partial[j] = partial[2 * j] + partial[2 * j + 1];
  ASSERT_NE(partial[0], chain);
  Tensor grad;
  grad.shape = {static_cast<int64_t>(n)};
  grad.reals = std::move(narrow);
  OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::Sgd);
  ParamMap params{{"w", reals({static_cast<int64_t>(n)}, std::vector<double>(n, 0.0))}};
  Optimizer opt(c, params);
  const StepReport r = opt.step(params, {{"w", std::move(grad)}}, FloatType::F64, 1);
  EXPECT_EQ(r.grad_norm, std::sqrt(partial[0]));
}

TEST(OptimizerClipTest, NormBelowTheBoundLeavesGradientsAlone) {
  OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::Sgd);
  c.lr = 1;
  c.clip = 10;
  ParamMap params{{"a", reals({1}, {0.0})}, {"b", reals({1}, {0.0})}};
  Optimizer opt(c, params);
  const StepReport r = opt.step(params, {{"a", reals({1}, {3})}, {"b", reals({1}, {4})}}, FloatType::F64, 1);
  EXPECT_EQ(r.grad_norm, 5.0);
  EXPECT_FALSE(r.clipped);
  EXPECT_EQ(params["a"].reals[0], -3.0);
  EXPECT_EQ(params["b"].reals[0], -4.0);
}

TEST(OptimizerClipTest, NormAboveTheBoundScalesEveryGradient) {
  // The norm is joint: 3 and 4 in two tensors make 5, scaled by 1 / (5 + 1e-6).
  OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::Sgd);
  c.lr = 1;
  c.clip = 1;
  ParamMap params{{"a", reals({1}, {0.0})}, {"b", reals({1}, {0.0})}};
  Optimizer opt(c, params);
  const StepReport r = opt.step(params, {{"a", reals({1}, {3})}, {"b", reals({1}, {4})}}, FloatType::F64, 1);
  const double coef = 1.0 / (5.0 + 1e-6);
  EXPECT_EQ(r.grad_norm, 5.0);  // before clipping
  EXPECT_TRUE(r.clipped);
  EXPECT_EQ(params["a"].reals[0], -(3 * coef));
  EXPECT_EQ(params["b"].reals[0], -(4 * coef));
}

TEST(OptimizerClipTest, ClippedAdamWMatchesTheReferenceOnClippedGradients) {
  OptimizerConfig c = adamw_config();
  c.clip = 0.5;
  ParamMap params = initial_params(FloatType::F64);
  ParamMap by_hand = params;
  Optimizer opt(c, params);
  OptimizerConfig unclipped = c;
  unclipped.clip.reset();
  Optimizer reference(unclipped, by_hand);
  for (int k = 0; k < 3; ++k) {
    const ParamMap grads = gradients(params, k, FloatType::F64);
    double sum = 0;
    for (const auto& [path, g] : grads)
      for (double x : g.reals) sum += x * x;
    const double coef = 0.5 / (std::sqrt(sum) + 1e-6);
    ASSERT_LT(coef, 1.0);
    ParamMap scaled = grads;
    for (auto& [path, g] : scaled)
      for (double& x : g.reals) x *= coef;
    const StepReport r = opt.step(params, grads, FloatType::F64, 10);
    EXPECT_TRUE(r.clipped);
    EXPECT_EQ(r.grad_norm, std::sqrt(sum));
    reference.step(by_hand, scaled, FloatType::F64, 10);
    for (const auto& [path, t] : params)
      for (size_t i = 0; i < t.reals.size(); ++i) EXPECT_TRUE(same_bits(t.reals[i], by_hand[path].reals[i])) << path;
  }
}

// ---------------------------------------------------------------- frozen parameters

TEST(OptimizerFrozenTest, FrozenParametersAreNotUpdatedNorCounted) {
  OptimizerConfig c = adamw_config();
  c.clip = 1e9;
  ParamMap params = initial_params(FloatType::F64);
  const Tensor frozen_before = params["head.b"];
  Optimizer opt(c, params, {"head.b"});
  ParamMap grads = gradients(params, 0, FloatType::F64);
  double sum = 0;
  for (const auto& [path, g] : grads)
    if (path != "head.b")
      for (double x : g.reals) sum += x * x;
  const StepReport r = opt.step(params, grads, FloatType::F64, 10);
  EXPECT_EQ(r.grad_norm, std::sqrt(sum));
  EXPECT_EQ(params["head.b"].reals, frozen_before.reals);
  for (const auto& [name, t] : opt.state_tensors()) EXPECT_EQ(name.find("head.b"), std::string::npos) << name;
  EXPECT_EQ(opt.state_tensors().size(), 4u);  // two moments of two parameters
  // The frozen parameter's gradient may also be left out.
  grads.erase("head.b");
  opt.step(params, grads, FloatType::F64, 10);
  EXPECT_EQ(params["head.b"].reals, frozen_before.reals);
}

// ---------------------------------------------------------------- state

/// Runs updates [from, to) of `opt` on `params`.
void run(Optimizer& opt, ParamMap& params, int from, int to, FloatType master) {
  for (int k = from; k < to; ++k) opt.step(params, gradients(params, k, master), master, 10);
}

void expect_round_trip_continues_exactly(const OptimizerConfig& c, FloatType master) {
  ParamMap straight = initial_params(master);
  Optimizer a(c, straight);
  run(a, straight, 0, 10, master);

  ParamMap resumed = initial_params(master);
  Optimizer b(c, resumed);
  run(b, resumed, 0, 5, master);
  // Through the bytes a checkpoint holds: safetensors (f64) and JSON text.
  const io::NamedTensors saved =
      io::decode_safetensors(io::encode_safetensors(b.state_tensors(), {}, io::StoreType::F64, "state"), "state");
  const nlohmann::json saved_json = nlohmann::json::parse(b.state_json().dump());
  Optimizer fresh(c, resumed);
  fresh.restore(saved, saved_json);
  EXPECT_EQ(fresh.steps_taken(), 5);
  run(fresh, resumed, 5, 10, master);

  EXPECT_EQ(fresh.steps_taken(), a.steps_taken());
  for (const auto& [path, t] : straight)
    for (size_t i = 0; i < t.reals.size(); ++i) EXPECT_TRUE(same_bits(t.reals[i], resumed[path].reals[i])) << path;
  const io::NamedTensors sa = a.state_tensors(), sf = fresh.state_tensors();
  ASSERT_EQ(sa.size(), sf.size());
  for (size_t k = 0; k < sa.size(); ++k) {
    EXPECT_EQ(sa[k].first, sf[k].first);
    for (size_t i = 0; i < sa[k].second.reals.size(); ++i)
      EXPECT_TRUE(same_bits(sa[k].second.reals[i], sf[k].second.reals[i])) << sa[k].first;
  }
}

TEST(OptimizerStateTest, RoundTripContinuesBitForBit) {
  OptimizerConfig adamw = adamw_config();
  adamw.clip = 0.75;
  expect_round_trip_continues_exactly(adamw, FloatType::F64);
  expect_round_trip_continues_exactly(adamw, FloatType::F32);
  OptimizerConfig sgd = OptimizerConfig::defaults(OptimizerKind::Sgd);
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  sgd.nesterov = true;
  sgd.weight_decay = 0.01;
  expect_round_trip_continues_exactly(sgd, FloatType::F64);
  expect_round_trip_continues_exactly(sgd, FloatType::F32);
}

TEST(OptimizerStateTest, AnF32MastersStateIsHeldAsF32UnlessItHoldsOtherNumbers) {
  // Under an f32 master every state value is an f32 number, held as f32
  // (half the bytes the update streams); a restored state holding another
  // number (an f64 run's) stays f64, and the update reads it as it is.
  ParamMap params = initial_params(FloatType::F32);
  Optimizer opt(adamw_config(), params);
  opt.step(params, gradients(params, 0, FloatType::F32), FloatType::F32, 10);
  io::NamedTensors state = opt.state_tensors();
  for (const auto& [name, t] : state) EXPECT_TRUE(t.reals.holds_narrow()) << name;

  // blocks.proj.w's exp_avg, the first state tensor: its two moments stay f64.
  state.front().second.reals = state.front().second.reals.to_vector();
  state.front().second.reals[0] += 0x1p-40;  // not an f32 number
  Optimizer restored(adamw_config(), params);
  restored.restore(state, opt.state_json());
  restored.step(params, gradients(params, 1, FloatType::F32), FloatType::F32, 10);
  for (const auto& [name, t] : restored.state_tensors())
    EXPECT_EQ(t.reals.holds_narrow(), name.find("blocks.proj.w") == std::string::npos) << name;
}

TEST(OptimizerStateTest, NamesAndJson) {
  ParamMap params = initial_params(FloatType::F64);
  Optimizer opt(adamw_config(), params);
  std::vector<std::string> names;
  for (const auto& [name, t] : opt.state_tensors()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"adamw.exp_avg.blocks.proj.w", "adamw.exp_avg.head.b",
                                             "adamw.exp_avg.scale", "adamw.exp_avg_sq.blocks.proj.w",
                                             "adamw.exp_avg_sq.head.b", "adamw.exp_avg_sq.scale"}));
  EXPECT_EQ(opt.state_json(), nlohmann::json::parse(R"({"kind": "adamw", "step": 0})"));
  OptimizerConfig sgd = OptimizerConfig::defaults(OptimizerKind::Sgd);
  sgd.momentum = 0.5;
  Optimizer s(sgd, params);
  EXPECT_EQ(s.state_tensors().front().first, "sgd.momentum_buffer.blocks.proj.w");
}

TEST(OptimizerStateTest, RestoreRefusesStateThatDoesNotFit) {
  ParamMap params = initial_params(FloatType::F64);
  Optimizer opt(adamw_config(), params);
  run(opt, params, 0, 2, FloatType::F64);
  const io::NamedTensors good = opt.state_tensors();
  const nlohmann::json json = opt.state_json();

  auto refusal = [&](const io::NamedTensors& tensors, const nlohmann::json& j) {
    Optimizer target(adamw_config(), params);
    std::string message = error_of<OptimizerError>([&] { target.restore(tensors, j); });
    EXPECT_EQ(target.steps_taken(), 0) << "a refused restore changed the optimizer";
    return message;
  };
  io::NamedTensors missing = good;
  missing.erase(missing.begin() + 1);
  EXPECT_EQ(refusal(missing, json),
            "optimizer `adamw`: cannot restore its state: tensor `adamw.exp_avg.head.b` is missing");
  io::NamedTensors extra = good;
  extra.emplace_back("adamw.exp_avg.gone", Tensor::real({1}));
  EXPECT_EQ(refusal(extra, json),
            "optimizer `adamw`: cannot restore its state: tensor `adamw.exp_avg.gone` belongs to no trainable "
            "parameter");
  io::NamedTensors misshaped = good;
  misshaped[0].second = Tensor::real({3, 2});
  EXPECT_EQ(refusal(misshaped, json),
            "optimizer `adamw`: cannot restore its state: tensor `adamw.exp_avg.blocks.proj.w` is real [3, 2], not "
            "real [2, 3]");
  io::NamedTensors twice = good;
  twice.push_back(good[0]);
  EXPECT_NE(refusal(twice, json).find("is given twice"), std::string::npos);
  EXPECT_NE(refusal(good, nlohmann::json::parse(R"({"kind": "sgd", "step": 2})")).find("the state is sgd's"),
            std::string::npos);
  EXPECT_NE(refusal(good, nlohmann::json::parse(R"({"kind": "adamw", "step": -1})")).find("\"step\""),
            std::string::npos);
  EXPECT_NE(refusal(good, nlohmann::json::parse(R"({"step": 2})")).find("no \"kind\""), std::string::npos);
}

TEST(OptimizerStateTest, StepRefusesParametersOrGradientsThatDoNotFit) {
  ParamMap params = initial_params(FloatType::F64);
  Optimizer opt(adamw_config(), params);
  const ParamMap grads = gradients(params, 0, FloatType::F64);
  auto refusal = [&](ParamMap p, const ParamMap& g) {
    std::string message = error_of<OptimizerError>([&] { opt.step(p, g, FloatType::F64, 10); });
    EXPECT_EQ(opt.steps_taken(), 0);
    return message;
  };
  ParamMap no_grad = grads;
  no_grad.erase("head.b");
  EXPECT_EQ(refusal(params, no_grad), "optimizer `adamw`: no gradient for parameter `head.b`");
  ParamMap bad_grad = grads;
  bad_grad["scale"] = Tensor::real({1});
  EXPECT_EQ(refusal(params, bad_grad), "optimizer `adamw`: the gradient of `scale` has shape [1], not []");
  ParamMap extra_grad = grads;
  extra_grad["other"] = Tensor::real({1});
  EXPECT_EQ(refusal(params, extra_grad), "optimizer `adamw`: gradient `other` belongs to no trainable parameter");
  ParamMap extra_param = params;
  extra_param["other"] = Tensor::real({1});
  EXPECT_EQ(refusal(extra_param, grads), "optimizer `adamw`: parameter `other` is not one it was made for");
  ParamMap missing_param = params;
  missing_param.erase("scale");
  EXPECT_EQ(refusal(missing_param, grads), "optimizer `adamw`: parameter `scale` is missing");
}

// ---------------------------------------------------------------- optimizer blocks

/// The config of the only optimizer block of `source`.
OptimizerConfig config_of(const std::string& source) {
  auto e = elab::testing::elaborate_text(source);
  if (!e->ok()) throw std::runtime_error(e->rendered());
  if (e->prog->optimizers.size() != 1) throw std::runtime_error("expected one optimizer");
  return OptimizerConfig::from(e->prog->optimizers[0]);
}

std::string config_error(const std::string& source) {
  return error_of<OptimizerError>([&] { config_of(source); });
}

TEST(OptimizerConfigTest, TheTutorialsBlock) {
  const OptimizerConfig c = config_of(R"(optimizer adamw {
  lr           : f64 = 0.01
  weight_decay : f64 = 0.0
  schedule     : cosine(warmup = 20)
}
)");
  EXPECT_EQ(c.name, "adamw");
  EXPECT_EQ(c.kind, OptimizerKind::AdamW);
  EXPECT_EQ(c.lr, 0.01);
  EXPECT_EQ(c.weight_decay, 0.0);
  EXPECT_EQ(c.schedule.kind, Schedule::Kind::Cosine);
  EXPECT_EQ(c.schedule.warmup, 20);
  EXPECT_EQ(c.beta1, 0.9);
  EXPECT_EQ(c.beta2, 0.999);
  EXPECT_EQ(c.eps, 1e-8);
  EXPECT_FALSE(c.clip);
}

TEST(OptimizerConfigTest, PyTorchDefaults) {
  const OptimizerConfig a = config_of("optimizer adamw {\n  lr = 1e-3\n}\n");
  EXPECT_EQ(a.weight_decay, 1e-2);
  EXPECT_EQ(a.schedule, Schedule());
  const OptimizerConfig s = config_of("optimizer sgd {\n  lr = 0.1\n}\n");
  EXPECT_EQ(s.kind, OptimizerKind::Sgd);
  EXPECT_EQ(s.lr, 0.1);
  EXPECT_EQ(s.momentum, 0.0);
  EXPECT_EQ(s.dampening, 0.0);
  EXPECT_EQ(s.weight_decay, 0.0);
  EXPECT_FALSE(s.nesterov);
  EXPECT_EQ(config_of("optimizer sgd {\n  momentum = 0.9\n}\n").lr, 1e-3);
}

TEST(OptimizerConfigTest, EveryField) {
  const OptimizerConfig a = config_of(R"(optimizer fast {
  kind = adamw
  beta1 = 0.8
  beta2 = 0.99
  eps = 1e-6
  clip = 1.0
  schedule = linear(warmup = 5)
}
)");
  EXPECT_EQ(a.kind, OptimizerKind::AdamW);
  EXPECT_EQ(a.name, "fast");
  EXPECT_EQ(a.beta1, 0.8);
  EXPECT_EQ(a.beta2, 0.99);
  EXPECT_EQ(a.eps, 1e-6);
  ASSERT_TRUE(a.clip);
  EXPECT_EQ(*a.clip, 1.0);
  EXPECT_EQ(a.schedule.to_string(), "linear(warmup = 5)");
  const OptimizerConfig s = config_of(R"(optimizer plain {
  kind = sgd
  momentum = 0.9
  nesterov = true
  dampening = 0
  weight_decay = 5e-4
}
)");
  EXPECT_EQ(s.kind, OptimizerKind::Sgd);
  EXPECT_EQ(s.momentum, 0.9);
  EXPECT_TRUE(s.nesterov);
  EXPECT_EQ(s.weight_decay, 5e-4);
  // The Greek spellings (`epsilon` lexes as `ε`).
  const OptimizerConfig g = config_of("optimizer adamw {\n  β1 = 0.5\n  β2 = 0.75\n  epsilon = 1e-4\n}\n");
  EXPECT_EQ(g.beta1, 0.5);
  EXPECT_EQ(g.beta2, 0.75);
  EXPECT_EQ(g.eps, 1e-4);
}

TEST(OptimizerConfigTest, ErrorsNameTheOptimizerAndTheField) {
  EXPECT_EQ(config_error("optimizer adamw {\n  momentum = 0.9\n}\n"),
            "optimizer `adamw`: field `momentum`: adamw has no such field (its fields: kind, lr, weight_decay, "
            "schedule, clip, beta1, beta2, eps)");
  EXPECT_EQ(config_error("optimizer sgd {\n  lrr = 0.9\n}\n"),
            "optimizer `sgd`: field `lrr`: sgd has no such field (its fields: kind, lr, weight_decay, schedule, "
            "clip, momentum, dampening, nesterov)");
  EXPECT_EQ(config_error("optimizer adam {\n  lr = 0.1\n}\n"),
            "optimizer `adam`: unknown algorithm; name the block `adamw`, `sgd` or `muon`, or set `kind = adamw`, "
            "`kind = sgd` or `kind = muon`");
  EXPECT_EQ(config_error("optimizer o {\n  kind = lamb\n}\n"),
            "optimizer `o`: field `kind`: unknown algorithm `lamb` (adamw, sgd, muon)");
  EXPECT_EQ(config_error("optimizer adamw {\n  beta1 = 1.0\n}\n"),
            "optimizer `adamw`: field `beta1`: must be in [0, 1), got 1.0");
  EXPECT_EQ(config_error("optimizer adamw {\n  lr = -0.1\n}\n"),
            "optimizer `adamw`: field `lr`: must be ≥ 0, got -0.1");
  EXPECT_EQ(config_error("optimizer adamw {\n  clip = 0\n}\n"), "optimizer `adamw`: field `clip`: must be > 0, got 0");
  EXPECT_EQ(config_error("optimizer adamw {\n  lr = fast\n}\n"),
            "optimizer `adamw`: field `lr`: must be a number literal, got `fast`");
  EXPECT_EQ(config_error("optimizer adamw {\n  betas = (0.9, 0.99)\n}\n"),
            "optimizer `adamw`: field `betas`: write `beta1 = …` and `beta2 = …` (a tuple's elements are not kept "
            "by elaboration)");
  EXPECT_EQ(config_error("optimizer adamw {\n  beta1 = 0.5\n  β1 = 0.5\n}\n"),
            "optimizer `adamw`: field `β1`: `beta1` is set twice");
  EXPECT_EQ(config_error("optimizer sgd {\n  nesterov = 1\n}\n"),
            "optimizer `sgd`: field `nesterov`: must be true or false, got `1`");
  EXPECT_EQ(config_error("optimizer sgd {\n  nesterov = true\n}\n"),
            "optimizer `sgd`: field `nesterov`: needs momentum > 0 and dampening = 0 (as in PyTorch)");
  EXPECT_EQ(config_error("optimizer sgd {\n  schedule = step(size = 2)\n}\n"),
            "optimizer `sgd`: field `schedule`: unknown schedule `step(size = 2)` (constant, linear(warmup = W), "
            "cosine(warmup = W))");
}

TEST(OptimizerConfigTest, ErrorsCarryTheFieldsLocation) {
  auto e = elab::testing::elaborate_text("optimizer adamw {\n  lr = 0.1\n  eps = -1\n}\n");
  ASSERT_TRUE(e->ok());
  try {
    OptimizerConfig::from(e->prog->optimizers[0]);
    FAIL() << "no error";
  } catch (const OptimizerError& err) {
    const LineCol lc = e->prog->sources.line_col(err.loc.begin);
    EXPECT_EQ(lc.line, 3u);
    EXPECT_EQ(lc.column, 3u);
  }
}

// state_bytes_of sizes the state by the constructor's rule without making
// it: the same bytes as the state an Optimizer holds, for every kind.
TEST(OptimizerStateBytes, TheRuleWithoutTheStateIsTheStatesSize) {
  interp::ParamMap params;
  params.emplace("w", runtime::Tensor::real({4, 3}));     // a matrix: Muon's
  params.emplace("b", runtime::Tensor::real({3}));        // a vector: AdamW's under Muon
  params.emplace("s", runtime::Tensor::real({2, 4, 3}));  // a stack of 2 matrices: Muon's
  params.emplace("e.t", runtime::Tensor::real({5, 3}));   // a matrix listed in adamw_params
  const std::map<std::string, int> stacked = {{"s", 1}};
  std::vector<ParamExtent> extents;
  for (const auto& [path, t] : params) extents.push_back({path, t.rank(), t.size()});
  OptimizerConfig sgd_momentum = OptimizerConfig::defaults(OptimizerKind::Sgd);
  sgd_momentum.momentum = 0.9;
  OptimizerConfig muon = OptimizerConfig::defaults(OptimizerKind::Muon);
  muon.adamw_params = {"e"};
  for (const OptimizerConfig& c : {OptimizerConfig::defaults(OptimizerKind::AdamW),
                                   OptimizerConfig::defaults(OptimizerKind::Sgd), sgd_momentum, muon})
    for (runtime::FloatType master : {runtime::FloatType::F64, runtime::FloatType::F32}) {
      const int64_t made = Optimizer(c, params, {}, stacked).state_bytes(master);
      EXPECT_EQ(state_bytes_of(c, extents, stacked, master), made) << optimizer_kind_name(c.kind);
    }
  // By hand: Muon keeps one buffer for w and s (12 + 24), two for b and e.t (3 + 15), in f32.
  EXPECT_EQ(state_bytes_of(muon, extents, stacked, runtime::FloatType::F32), 4 * (12 + 24 + 2 * (3 + 15)));
  EXPECT_EQ(state_bytes_of(OptimizerConfig::defaults(OptimizerKind::Sgd), extents, stacked, runtime::FloatType::F64), 0);
}

}  // namespace
}  // namespace quire::train
