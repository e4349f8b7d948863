// The `muon` optimizer (optimizer.h): its block's fields and their errors;
// which parameters Muon takes and which its AdamW takes; one update by hand
// against torch.optim.Muon's formulas (the orthogonalization being the
// prelude's newton_schulz, called here through the interpreter by its own
// program), every adjust_lr_fn; the AdamW part's bits against an AdamW
// optimizer; the state's save and restore. And NewtonSchulz
// (newton_schulz.h): on every backend, the bits of the prelude's functions
// evaluated by quire's reference interpreter, on every shape.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "quire/elab/elab_testing.h"
#include "quire/interp/interp_testing.h"
#include "quire/realize/realization.h"
#include "quire/support/testing.h"
#include "quire/train/newton_schulz.h"
#include "quire/train/optimizer.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::train {
namespace {

using interp::ParamMap;
using quire::testing::error_of;
using runtime::FloatType;
using runtime::Tensor;

OptimizerConfig config_of(const std::string& source) {
  auto e = elab::testing::elaborate_text(source);
  if (!e->ok()) throw std::runtime_error(e->rendered());
  return OptimizerConfig::from(e->prog->optimizers.at(0));
}

std::string config_error(const std::string& source) {
  return error_of<OptimizerError>([&] { config_of(source); });
}

bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

/// Elements of many magnitudes and both signs, rounded to `type`.
Tensor random_tensor(runtime::Shape shape, std::mt19937_64& rng, FloatType type) {
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-6, 1);
  Tensor t = Tensor::real(std::move(shape));
  for (double& v : t.reals) v = runtime::round_to(type, std::ldexp(mantissa(rng), exponent(rng)));
  return t;
}

ParamMap gradients(const ParamMap& params, int k, FloatType type) {
  std::mt19937_64 rng(2000 + k);
  ParamMap g;
  for (const auto& [path, t] : params) g[path] = random_tensor(t.shape, rng, type);
  return g;
}

// ---------------------------------------------------------------- the block

TEST(OptimizerMuonConfigTest, PyTorchsDefaults) {
  const OptimizerConfig c = config_of("optimizer muon {\n  lr = 0.02\n}\n");
  EXPECT_EQ(c.kind, OptimizerKind::Muon);
  EXPECT_EQ(c.lr, 0.02);
  EXPECT_EQ(c.weight_decay, 0.1);  // torch.optim.Muon's
  EXPECT_EQ(c.momentum, 0.95);
  EXPECT_TRUE(c.nesterov);
  EXPECT_EQ(c.eps, 1e-7);
  EXPECT_EQ(c.ns_a, 3.4445);
  EXPECT_EQ(c.ns_b, -4.7750);
  EXPECT_EQ(c.ns_c, 2.0315);
  EXPECT_EQ(c.adjust_lr, AdjustLr::Original);
  EXPECT_EQ(c.adamw_lr, 1e-3);  // torch.optim.AdamW's
  EXPECT_EQ(c.adamw_beta1, 0.9);
  EXPECT_EQ(c.adamw_beta2, 0.999);
  EXPECT_EQ(c.adamw_eps, 1e-8);
  EXPECT_EQ(c.adamw_weight_decay, 1e-2);
  EXPECT_TRUE(c.adamw_params.empty());
  EXPECT_FALSE(c.clip);
  EXPECT_EQ(c.schedule, Schedule());
}

TEST(OptimizerMuonConfigTest, EveryField) {
  const OptimizerConfig c = config_of(R"(optimizer hidden {
  kind = muon
  lr = 0.05
  weight_decay = 0
  momentum = 0.9
  nesterov = false
  eps = 1e-6
  ns_a = 2.0
  ns_b = -1.5
  ns_c = 0.5
  ns_steps = 5
  adjust_lr_fn = "match_rms_adamw"
  adamw_lr = 3e-4
  adamw_beta1 = 0.8
  adamw_β2 = 0.95
  adamw_eps = 1e-10
  adamw_weight_decay = 0.0
  adamw_params = "embed, head.w"
  schedule = cosine(warmup = 10)
  clip = 1.0
}
)");
  EXPECT_EQ(c.name, "hidden");
  EXPECT_EQ(c.kind, OptimizerKind::Muon);
  EXPECT_EQ(c.lr, 0.05);
  EXPECT_EQ(c.weight_decay, 0.0);
  EXPECT_EQ(c.momentum, 0.9);
  EXPECT_FALSE(c.nesterov);
  EXPECT_EQ(c.eps, 1e-6);
  EXPECT_EQ(c.ns_a, 2.0);
  EXPECT_EQ(c.ns_b, -1.5);
  EXPECT_EQ(c.ns_c, 0.5);
  EXPECT_EQ(c.adjust_lr, AdjustLr::MatchRmsAdamW);
  EXPECT_EQ(c.adamw_lr, 3e-4);
  EXPECT_EQ(c.adamw_beta1, 0.8);
  EXPECT_EQ(c.adamw_beta2, 0.95);
  EXPECT_EQ(c.adamw_eps, 1e-10);
  EXPECT_EQ(c.adamw_weight_decay, 0.0);
  EXPECT_EQ(c.adamw_params, (std::vector<std::string>{"embed", "head.w"}));
  EXPECT_EQ(c.schedule.to_string(), "cosine(warmup = 10)");
  EXPECT_EQ(c.clip, 1.0);
  // adjust_lr_fn as a bare name; adamw_params as one bare path, or spaces.
  EXPECT_EQ(config_of("optimizer muon {\n  adjust_lr_fn = spectral_unclamped\n}\n").adjust_lr,
            AdjustLr::SpectralUnclamped);
  EXPECT_EQ(config_of("optimizer muon {\n  adjust_lr_fn = original\n}\n").adjust_lr, AdjustLr::Original);
  EXPECT_EQ(config_of("optimizer muon {\n  adamw_params = head.w\n}\n").adamw_params,
            std::vector<std::string>{"head.w"});
  EXPECT_EQ(config_of("optimizer muon {\n  adamw_params = \"a b,c\"\n}\n").adamw_params,
            (std::vector<std::string>{"a", "b", "c"}));
}

TEST(OptimizerMuonConfigTest, ErrorsNameTheField) {
  EXPECT_EQ(config_error("optimizer muon {\n  beta1 = 0.9\n}\n"),
            "optimizer `muon`: field `beta1`: muon has no such field (its fields: kind, lr, weight_decay, schedule, "
            "clip, eps, momentum, nesterov, ns_a, ns_b, ns_c, ns_steps, adjust_lr_fn, adamw_lr, adamw_beta1, "
            "adamw_beta2, adamw_eps, adamw_weight_decay, adamw_params)");
  EXPECT_EQ(config_error("optimizer adamw {\n  adamw_lr = 0.1\n}\n"),
            "optimizer `adamw`: field `adamw_lr`: adamw has no such field (its fields: kind, lr, weight_decay, "
            "schedule, clip, beta1, beta2, eps)");
  EXPECT_EQ(config_error("optimizer muon {\n  adjust_lr_fn = \"spectral\"\n}\n"),
            "optimizer `muon`: field `adjust_lr_fn`: unknown adjustment `\"spectral\"` (original, match_rms_adamw, "
            "spectral_unclamped)");
  EXPECT_EQ(config_error("optimizer muon {\n  ns_steps = 6\n}\n"),
            "optimizer `muon`: field `ns_steps`: must be 5, got `6`: the prelude's newton_schulz writes out its five "
            "steps (the language has no loops)");
  EXPECT_EQ(config_error("optimizer muon {\n  ns_coefficients = (3.4445, -4.775, 2.0315)\n}\n"),
            "optimizer `muon`: field `ns_coefficients`: write `ns_a = …`, `ns_b = …` and `ns_c = …` (a tuple's "
            "elements are not kept by elaboration)");
  EXPECT_EQ(config_error("optimizer muon {\n  adamw_betas = (0.9, 0.95)\n}\n"),
            "optimizer `muon`: field `adamw_betas`: write `adamw_beta1 = …` and `adamw_beta2 = …` (a tuple's "
            "elements are not kept by elaboration)");
  EXPECT_EQ(config_error("optimizer muon {\n  momentum = -0.5\n}\n"),
            "optimizer `muon`: field `momentum`: must be ≥ 0, got -0.5");
  EXPECT_EQ(config_error("optimizer muon {\n  adamw_beta1 = 1\n}\n"),
            "optimizer `muon`: field `adamw_beta1`: must be in [0, 1), got 1");
  EXPECT_EQ(config_error("optimizer muon {\n  ns_b = fast\n}\n"),
            "optimizer `muon`: field `ns_b`: must be a number literal, got `fast`");
  EXPECT_EQ(config_error("optimizer muon {\n  adamw_params = \"\"\n}\n"),
            "optimizer `muon`: field `adamw_params`: names no parameter (write `adamw_params = \"embed.table, "
            "head.w\"`)");
  EXPECT_EQ(config_error("optimizer muon {\n  adamw_beta1 = 0.5\n  adamw_β1 = 0.5\n}\n"),
            "optimizer `muon`: field `adamw_β1`: `adamw_beta1` is set twice");
  // Muon's nesterov needs nothing of SGD's (PyTorch checks nothing).
  EXPECT_TRUE(config_of("optimizer muon {\n  momentum = 0\n  nesterov = true\n}\n").nesterov);
  EXPECT_EQ(config_error("optimizer o {\n  kind = lamb\n}\n"),
            "optimizer `o`: field `kind`: unknown algorithm `lamb` (adamw, sgd, muon)");
}

// ---------------------------------------------------------------- which parameters

TEST(OptimizerMuonTest, MuonTakesTheMatricesAndEachStacksCopiesAdamWTheRest) {
  ParamMap params;
  params["blocks.b"] = Tensor::real({2, 4});      // a stack of vectors
  params["blocks.w"] = Tensor::real({2, 4, 4});   // a stack of matrices
  params["embed.table"] = Tensor::real({10, 4});  // listed (by its module)
  params["frozen.w"] = Tensor::real({3, 3});      // frozen: neither
  params["head.w"] = Tensor::real({4, 2});        // listed (by its path)
  params["kernel"] = Tensor::real({2, 3, 4});     // three axes of its own
  params["scale"] = Tensor::real({});             // a scalar
  params["w"] = Tensor::real({3, 5});             // a matrix
  OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::Muon, "muon");
  c.adamw_params = {"embed", "head.w"};
  Optimizer opt(c, params, {"frozen.w"}, {{"blocks.b", 1}, {"blocks.w", 1}});
  EXPECT_EQ(opt.muon_params(), (std::vector<std::string>{"blocks.w", "w"}));
  std::vector<std::string> names;
  for (const auto& [name, t] : opt.state_tensors()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"muon.momentum_buffer.blocks.w", "muon.momentum_buffer.w",
                                             "muon.exp_avg.blocks.b", "muon.exp_avg.embed.table", "muon.exp_avg.head.w",
                                             "muon.exp_avg.kernel", "muon.exp_avg.scale", "muon.exp_avg_sq.blocks.b",
                                             "muon.exp_avg_sq.embed.table", "muon.exp_avg_sq.head.w",
                                             "muon.exp_avg_sq.kernel", "muon.exp_avg_sq.scale"}));
  EXPECT_EQ(opt.state_json(), nlohmann::json::parse(R"({"kind": "muon", "step": 0})"));
  // `embe` is not a module path of embed.table; a frozen parameter is not trainable.
  for (const char* entry : {"embe", "frozen.w"}) {
    c.adamw_params = {entry};
    EXPECT_EQ(error_of<OptimizerError>([&] { Optimizer(c, params, {"frozen.w"}); }),
              fmt::format("optimizer `muon`: field `adamw_params`: `{}` names no trainable parameter", entry));
  }
}

// ---------------------------------------------------------------- one update by hand

/// The prelude's function `fn` (newton_schulz or newton_schulz_tall) of one
/// R × C matrix, evaluated by the reference interpreter under the master's
/// policy from a program of this test's own (not NewtonSchulz's).
std::vector<double> prelude_call(const std::string& fn, const std::vector<double>& u, int64_t R, int64_t C,
                                 FloatType master) {
  interp::testing::Program p(fmt::format("fn f(g : ℝ[{}, {}]) -> ℝ[{}, {}] = {}(g)\n", R, C, R, C, fn));
  precision::RealizeOptions options;
  options.policy = master == FloatType::F64 ? precision::Policy::F64 : precision::Policy::F32;
  precision::Realization r = precision::realize(p.prog(), p.index("f"), options, p.dims);
  interp::Interpreter interp(p.prog(), p.dims, &r);
  Tensor g = Tensor::real({R, C});
  g.reals = u;
  return interp.call(p.index("f"), {interp::Value::of(g)}).tensor.reals.to_vector();
}

/// torch.lerp.
double lerp(double self, double end, double w) {
  return w < 0.5 ? self + w * (end - self) : end - (end - self) * (1 - w);
}

/// torch.optim.Muon's step on one matrix (its momentum buffer `buf`), as
/// _single_tensor_muon writes it, with quire's rounding of the state, the
/// update and the parameter to `master`.
void muon_by_hand(std::vector<double>& p, std::vector<double>& buf, const std::vector<double>& g, int64_t R, int64_t C,
                  const OptimizerConfig& c, double lr, FloatType master) {
  std::vector<double> update(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    buf[i] = runtime::round_to(master, lerp(buf[i], g[i], 1 - c.momentum));  // buf.lerp_(grad, 1 - momentum)
    update[i] = runtime::round_to(master, c.nesterov ? lerp(g[i], buf[i], c.momentum) : buf[i]);
  }
  // PyTorch's shape is [C, R]: it transposes when C > R, so the form is
  // newton_schulz for R < C and newton_schulz_tall for R ≥ C; A = C, B = R.
  const std::vector<double> o = prelude_call(R < C ? "newton_schulz" : "newton_schulz_tall", update, R, C, master);
  const double A = static_cast<double>(C), B = static_cast<double>(R);
  const double ratio = c.adjust_lr == AdjustLr::Original        ? std::sqrt(std::max(1.0, A / B))
                       : c.adjust_lr == AdjustLr::MatchRmsAdamW ? 0.2 * std::sqrt(std::max(A, B))
                                                                : std::sqrt(A / B);
  const double adjusted = lr * ratio;
  for (size_t i = 0; i < p.size(); ++i)  // param.mul_(1 - lr * wd); param.add_(update, alpha=-adjusted_lr)
    p[i] = runtime::round_to(master, p[i] * (1 - lr * c.weight_decay) + -adjusted * o[i]);
}

TEST(OptimizerMuonTest, UpdatesByHandEveryShapeAndAdjustment) {
  for (FloatType master : {FloatType::F64, FloatType::F32})
    for (AdjustLr adjust : {AdjustLr::Original, AdjustLr::MatchRmsAdamW, AdjustLr::SpectralUnclamped})
      for (bool nesterov : {true, false}) {
        SCOPED_TRACE(
            fmt::format("{} {} nesterov {}", runtime::float_type_name(master), adjust_lr_name(adjust), nesterov));
        OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::Muon, "muon");
        c.lr = 0.02;
        c.weight_decay = 0.05;
        c.adjust_lr = adjust;
        c.nesterov = nesterov;
        c.schedule.kind = Schedule::Kind::Linear;
        std::mt19937_64 rng(11);
        ParamMap params;
        params["tall"] = random_tensor({3, 2}, rng, master);    // newton_schulz_tall
        params["square"] = random_tensor({2, 2}, rng, master);  // newton_schulz_tall (R ≥ C)
        params["wide"] = random_tensor({2, 3}, rng, master);    // newton_schulz
        params["row"] = random_tensor({1, 4}, rng, master);     // newton_schulz
        Optimizer opt(c, params);
        std::map<std::string, std::vector<double>> p, buf;
        for (const auto& [path, t] : params) {
          p[path] = t.reals.to_vector();
          buf[path].assign(t.size(), 0.0);
        }
        for (int k = 0; k < 3; ++k) {
          const ParamMap grads = gradients(params, k, master);
          const StepReport r = opt.step(params, grads, master, 5);
          const double lr = c.schedule.lr_at(k, c.lr, 5);
          EXPECT_EQ(r.lr, lr);
          for (const auto& [path, t] : params) {
            muon_by_hand(p[path], buf[path], grads.at(path).reals.to_vector(), t.shape[0], t.shape[1], c, lr, master);
            for (size_t i = 0; i < p[path].size(); ++i)
              ASSERT_TRUE(same_bits(t.reals[i], p[path][i]))
                  << "update " << k << " " << path << "[" << i << "] " << t.reals[i] << " vs " << p[path][i];
          }
          for (const auto& [name, t] : opt.state_tensors())
            for (size_t i = 0; i < t.reals.size(); ++i)
              ASSERT_TRUE(same_bits(t.reals[i], buf[name.substr(std::string("muon.momentum_buffer.").size())][i]))
                  << name;
        }
      }
}

TEST(OptimizerMuonTest, ItsAdamWPartIsAdamWWithTheAdamWFields) {
  OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::Muon, "muon");
  c.adamw_lr = 0.01;
  c.adamw_beta1 = 0.8;
  c.adamw_beta2 = 0.99;
  c.adamw_eps = 1e-6;
  c.adamw_weight_decay = 0.1;
  c.schedule.kind = Schedule::Kind::Cosine;
  c.schedule.warmup = 1;
  c.clip = 0.5;
  OptimizerConfig a = OptimizerConfig::defaults(OptimizerKind::AdamW, "adamw");
  a.lr = 0.01;
  a.beta1 = 0.8;
  a.beta2 = 0.99;
  a.eps = 1e-6;
  a.weight_decay = 0.1;
  a.schedule = c.schedule;
  a.clip = 0.5;
  for (FloatType master : {FloatType::F64, FloatType::F32}) {
    std::mt19937_64 rng(5);
    ParamMap params;
    params["b"] = random_tensor({5}, rng, master);
    params["w"] = random_tensor({5, 3}, rng, master);
    ParamMap alone = {{"b", params["b"]}, {"w", params["w"]}};
    Optimizer muon(c, params);
    OptimizerConfig listed = c;
    listed.adamw_params = {"w"};  // AdamW takes the matrix too
    Optimizer muon_listed(listed, alone);
    Optimizer adamw(a, alone);
    ParamMap listed_params = alone;
    for (int k = 0; k < 4; ++k) {
      const ParamMap grads = gradients(params, k, master);
      muon.step(params, grads, master, 6);
      muon_listed.step(listed_params, grads, master, 6);
      adamw.step(alone, grads, master, 6);
      for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(same_bits(params["b"].reals[i], alone["b"].reals[i]));
      for (const auto& [path, t] : alone)
        for (size_t i = 0; i < t.reals.size(); ++i)
          EXPECT_TRUE(same_bits(listed_params[path].reals[i], t.reals[i])) << path;
    }
  }
}

// ---------------------------------------------------------------- the state

TEST(OptimizerMuonTest, SaveAndRestoreContinueBitForBit) {
  OptimizerConfig c = OptimizerConfig::defaults(OptimizerKind::Muon, "muon");
  c.lr = 0.05;
  c.adamw_lr = 0.01;
  for (FloatType master : {FloatType::F64, FloatType::F32}) {
    std::mt19937_64 rng(3);
    ParamMap params;
    params["b"] = random_tensor({4}, rng, master);
    params["blocks.w"] = random_tensor({2, 4, 3}, rng, master);
    params["w"] = random_tensor({3, 4}, rng, master);
    const std::map<std::string, int> stacked = {{"blocks.w", 1}};
    Optimizer a(c, params, {}, stacked);
    for (int k = 0; k < 3; ++k) a.step(params, gradients(params, k, master), master, 10);
    ParamMap resumed = params;
    Optimizer fresh(c, resumed, {}, stacked);
    fresh.restore(a.state_tensors(), a.state_json());
    EXPECT_EQ(fresh.steps_taken(), 3);
    for (int k = 3; k < 6; ++k) {
      a.step(params, gradients(params, k, master), master, 10);
      fresh.step(resumed, gradients(resumed, k, master), master, 10);
    }
    for (const auto& [path, t] : params)
      for (size_t i = 0; i < t.reals.size(); ++i) EXPECT_TRUE(same_bits(t.reals[i], resumed[path].reals[i])) << path;
    // A state of the wrong algorithm, or one without Muon's buffer, is refused.
    Optimizer target(c, params, {}, stacked);
    io::NamedTensors missing = a.state_tensors();
    missing.erase(missing.begin());
    EXPECT_EQ(error_of<OptimizerError>([&] { target.restore(missing, a.state_json()); }),
              "optimizer `muon`: cannot restore its state: tensor `muon.momentum_buffer.blocks.w` is missing");
    EXPECT_EQ(error_of<OptimizerError>([&] {
                target.restore(a.state_tensors(), nlohmann::json{{"kind", "adamw"}, {"step", 3}});
              }),
              "optimizer `muon`: cannot restore its state: the state is adamw's, not muon's");
    EXPECT_EQ(target.steps_taken(), 0);
  }
}

// ---------------------------------------------------------------- NewtonSchulz on every backend

TEST(NewtonSchulzTest, EveryBackendGivesThePreludeFunctionsInterpretedBits) {
  struct Case {
    runtime::Shape shape;  // [L, R, C]
    NewtonSchulzForm form;
  };
  const Case cases[] = {{{1, 3, 5}, NewtonSchulzForm::Wide}, {{1, 5, 3}, NewtonSchulzForm::Tall},
                        {{1, 4, 4}, NewtonSchulzForm::Tall}, {{1, 4, 4}, NewtonSchulzForm::Wide},
                        {{1, 1, 6}, NewtonSchulzForm::Wide}, {{2, 3, 5}, NewtonSchulzForm::Wide},
                        {{3, 6, 2}, NewtonSchulzForm::Tall}};
  NewtonSchulz interpreted({}, kernel::Backend::Interp);
  NewtonSchulz kernels({}, kernel::Backend::Kernels);
  NewtonSchulz native({}, kernel::Backend::Native, 2);
  std::mt19937_64 rng(9);
  for (FloatType master : {FloatType::F64, FloatType::F32})
    for (const Case& k : cases) {
      SCOPED_TRACE(fmt::format("{} {} {}", runtime::shape_string(k.shape),
                               k.form == NewtonSchulzForm::Wide ? "wide" : "tall", runtime::float_type_name(master)));
      const Tensor g = random_tensor(k.shape, rng, master);
      const Tensor want = interpreted(k.form, g, master);
      // The reference: each matrix through the prelude's function, from this test's own program.
      const int64_t R = k.shape[1], C = k.shape[2];
      for (int64_t l = 0; l < k.shape[0]; ++l) {
        const std::vector<double> one(g.reals.begin() + l * R * C, g.reals.begin() + (l + 1) * R * C);
        const std::vector<double> o =
            prelude_call(k.form == NewtonSchulzForm::Wide ? "newton_schulz" : "newton_schulz_tall", one, R, C, master);
        for (int64_t i = 0; i < R * C; ++i) ASSERT_TRUE(same_bits(want.reals[l * R * C + i], o[i])) << l << "," << i;
      }
      for (NewtonSchulz* backend : {&kernels, &native}) {
        const Tensor got = (*backend)(k.form, g, master);
        ASSERT_EQ(got.shape, k.shape);
        for (size_t i = 0; i < want.reals.size(); ++i) ASSERT_TRUE(same_bits(got.reals[i], want.reals[i])) << i;
      }
    }
}

}  // namespace
}  // namespace quire::train
