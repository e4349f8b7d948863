// The prelude: it elaborates cleanly on its own, every function computes the
// formula its comment states (the f64 interpreter against plain loops written
// here, bit for bit), its numerics marks sit where the library puts them, its
// names resolve after the user's own and before the built-ins, and printouts
// show only the part of it a program reaches.

#include "quire/runtime/random.h"
#include "quire/prelude/prelude.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "quire/core/printer.h"
#include "quire/elab/elab_testing.h"
#include "quire/elab/summary.h"
#include "quire/interp/interp_testing.h"
#include "quire/realize/realization.h"
#include "quire/runtime/elementary.h"
#include "quire/runtime/kernels.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace quire::prelude {
namespace {

using interp::Value;
using interp::testing::expect_reals;
using interp::testing::ints;
using interp::testing::reals;
using interp::testing::same_bits;
using runtime::ElemKind;
using runtime::Tensor;

const std::vector<std::string> kFunctions = {"softmax",  "log_softmax", "logsumexp",  "cross_entropy", "softcap",
                                             "rms_norm", "layer_norm",  "batch_norm", "gelu_tanh"};
const std::vector<std::string> kLayers = {"causal_mask", "embedding",        "linear",         "dropout",
                                          "attention",   "causal_attention", "self_attention", "causal_self_attention"};

TEST(Prelude, ElaboratesAloneWithoutDiagnostics) {
  // An error in the prelude would be an internal error: no user could fix it.
  auto e = elab::testing::elaborate_text("");
  EXPECT_TRUE(e->sink.all().empty()) << e->rendered();
  ASSERT_FALSE(files().empty());
  for (const File& f : files()) EXPECT_EQ(f.path.substr(0, 8), "prelude/");
  std::vector<std::string> all = kFunctions;
  all.insert(all.end(), kLayers.begin(), kLayers.end());
  for (const std::string& name : all) {
    int f = e->prog->find_function(name);
    ASSERT_GE(f, 0) << name;
    EXPECT_TRUE(e->prog->functions[f].checked) << name;
    EXPECT_TRUE(e->prog->in_prelude(f)) << name;
    EXPECT_EQ(e->prog->sources.file(e->prog->functions[f].file).path, "prelude/nn.qr");
  }
  // Generic where a size must be inferred, plain where `...` is enough.
  EXPECT_EQ(e->fn("softmax").dims, std::vector<std::string>{"N"});
  EXPECT_EQ(e->fn("batch_norm").dims, (std::vector<std::string>{"B", "C"}));
  EXPECT_TRUE(e->fn("softcap").dims.empty());
  EXPECT_EQ(e->type(e->fn("cross_entropy").args[1].type), "i32[...]");
  EXPECT_TRUE(e->fn("rms_norm").args[2].has_default);
  EXPECT_EQ(e->fn("rms_norm").args[2].default_value, 1e-5);
  // The layers: every size the caller's axes give; a draw's axes spelled out.
  EXPECT_EQ(e->fn("attention").dims, (std::vector<std::string>{"T", "S", "D", "E"}));
  EXPECT_EQ(e->fn("self_attention").dims, (std::vector<std::string>{"T", "C", "H"}));
  EXPECT_EQ(e->type(e->fn("self_attention").args[1].type), "i32[h: H]");
  EXPECT_EQ(e->type(e->fn("causal_self_attention").result), "ℝ[..., t: T, C / 3]");
  EXPECT_EQ(e->type(e->fn("embedding").args[1].type), "i32[...]");
  EXPECT_EQ(e->type(e->fn("dropout").args[1].type), "ℝ[...]");
  EXPECT_FALSE(e->fn("dropout").args[2].has_default);
}

// Each prelude function called at concrete types.
const char* kCalls = R"(fn sm(x : ℝ[b: 2, v: 3]) -> ℝ[b: 2, v: 3] = softmax(x)
fn lsm(x : ℝ[b: 2, v: 3]) -> ℝ[b: 2, v: 3] = log_softmax(x)
fn lse(x : ℝ[b: 2, v: 3]) -> ℝ[b: 2] = logsumexp(x)
fn ce(x : ℝ[b: 2, t: 2, v: 3], ids : i32[b: 2, t: 2]) -> ℝ[] = cross_entropy(x, ids)
fn cap(x : ℝ[b: 2, v: 3]) -> ℝ[b: 2, v: 3] = softcap(x, 1.5)
fn rms(x : ℝ[b: 2, v: 3], g : ℝ[3]) -> ℝ[b: 2, v: 3] = rms_norm(x, g)
fn rms_eps(x : ℝ[b: 2, v: 3], g : ℝ[3]) -> ℝ[b: 2, v: 3] = rms_norm(x, g, eps = 0.25)
fn ln(x : ℝ[b: 2, v: 3], g : ℝ[3], be : ℝ[v: 3]) -> ℝ[b: 2, v: 3] = layer_norm(x, g, be)
fn bn(x : ℝ[b: 2, v: 3], g : ℝ[3], be : ℝ[3]) -> ℝ[b: 2, v: 3] = batch_norm(x, g, be)
fn gt(x : ℝ[n: 41]) -> ℝ[n: 41] = gelu_tanh(x)
)";

const std::vector<double> kX = {0.5, -1.25, 2.0, 3.0, 1e-3, -7.5};  // [2, 3]
const std::vector<double> kG = {1.5, -0.5, 2.0};
const std::vector<double> kBeta = {0.25, 0.0, -1.0};

// The helpers below are the formulas of nn.qr written as plain loops, in the
// order of docs/language.md §9-§10: reductions fold left to right from 0.0
// (max from the first element), element-wise expressions as written.
double row_max(const std::vector<double>& x, int row) {
  double m = x[row * 3];
  for (int j = 1; j < 3; ++j) m = x[row * 3 + j] > m ? x[row * 3 + j] : m;  // no NaN here
  return m;
}

double row_lse(const std::vector<double>& x, int row) {
  double m = row_max(x, row);
  double s = 0.0;
  for (int j = 0; j < 3; ++j) s = s + runtime::elementary_exp(x[row * 3 + j] - m);
  return m + std::log(s);
}

TEST(Prelude, SoftmaxFamily) {
  interp::testing::Program p(kCalls);
  Tensor x = reals({2, 3}, kX);
  std::vector<double> sm, lsm, lse;
  for (int i = 0; i < 2; ++i) {
    double m = row_max(kX, i);
    std::vector<double> e;
    double s = 0.0;
    for (int j = 0; j < 3; ++j) {
      e.push_back(runtime::elementary_exp(kX[i * 3 + j] - m));
      s = s + e.back();
    }
    for (int j = 0; j < 3; ++j) sm.push_back(e[j] / s);
    for (int j = 0; j < 3; ++j) lsm.push_back(kX[i * 3 + j] - row_lse(kX, i));
    lse.push_back(row_lse(kX, i));
  }
  Tensor got = p("sm", {x});
  expect_reals(got, {2, 3}, sm);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(got.reals[i * 3] + got.reals[i * 3 + 1] + got.reals[i * 3 + 2], 1.0, 1e-15);
  Tensor log_probs = p("lsm", {x});
  expect_reals(log_probs, {2, 3}, lsm);
  for (int k = 0; k < 6; ++k) EXPECT_NEAR(runtime::elementary_exp(log_probs.reals[k]), got.reals[k], 1e-15);
  expect_reals(p("lse", {x}), {2}, lse);
}

TEST(Prelude, CrossEntropyAveragesOverEveryLeadingPosition) {
  interp::testing::Program p(kCalls);
  // Logits [2, 2, 3] with a -inf beside each target: still finite.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> x = {0.5, -1.25, 2.0, 3.0, 1e-3, -7.5, -inf, 0.75, 1.0, 4.0, -2.0, -inf};
  std::vector<int64_t> ids = {2, 0, 1, 0};
  double total = 0.0;
  for (int r = 0; r < 4; ++r) {
    total = total + (row_lse(x, r) - x[r * 3 + ids[r]]);
  }
  Tensor got = p.call("ce", {Value::of(reals({2, 2, 3}, x)), Value::of(ints(ElemKind::I32, {2, 2}, ids))}).tensor;
  expect_reals(got, {}, {total / 4.0});
  EXPECT_TRUE(std::isfinite(got.reals[0]));
  // An id outside [0, N) stops the run.
  ids[3] = 3;
  EXPECT_THROW(p.call("ce", {Value::of(reals({2, 2, 3}, x)), Value::of(ints(ElemKind::I32, {2, 2}, ids))}),
               std::exception);
}

// cross_entropy picks the target's logit; until it could, it summed the
// logits under a one-hot mask. A pick is a copy, the masked sum the logit
// plus exact zeros, so the two give the same bits, value and gradient, under
// every policy (the gradient's zeros beside the target are +0.0 either way).
TEST(Prelude, CrossEntropyPicksTheBitsTheOneHotFormSummed) {
  interp::testing::Program p(R"(fn hot{N}(logits : ℝ[..., n: N], targets : i32[...]) -> ℝ[] =
  numerics(high) {
    let target = one_hot(targets, n: N) == 1.0
    let picked = sum(axis n, where(target, logits, 0.0))
    mean(logsumexp(axis n, logits) - picked)
  }
fn ce(x : ℝ[b: 3, t: 5, v: 37], ids : i32[b: 3, t: 5]) -> ℝ[] = cross_entropy(x, ids)
fn ce_hot(x : ℝ[b: 3, t: 5, v: 37], ids : i32[b: 3, t: 5]) -> ℝ[] = hot(x, ids)
fn d_ce(x : ℝ[b: 3, t: 5, v: 37], ids : i32[b: 3, t: 5]) -> ℝ[b: 3, t: 5, v: 37] = grad(ce)(x, ids)
fn d_ce_hot(x : ℝ[b: 3, t: 5, v: 37], ids : i32[b: 3, t: 5]) -> ℝ[b: 3, t: 5, v: 37] = grad(ce_hot)(x, ids)
)");
  ASSERT_TRUE(p.e->ok()) << p.e->rendered();
  std::vector<double> x(3 * 5 * 37);
  uint64_t state = 7;
  for (double& v : x) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<double>(static_cast<int64_t>(state >> 11) % 20001 - 10000) / 997.0;
  }
  x[5] = -std::numeric_limits<double>::infinity();  // beside a target: still the same
  std::vector<int64_t> ids(15);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 11 + 3) % 37);
  ids[0] = 4;
  const std::vector<Value> args = {Value::of(reals({3, 5, 37}, x)), Value::of(ints(ElemKind::I32, {3, 5}, ids))};
  for (precision::Policy policy : {precision::Policy::F64, precision::Policy::F32, precision::Policy::BF16}) {
    for (const auto& [fn, hot] : {std::pair{"ce", "ce_hot"}, std::pair{"d_ce", "d_ce_hot"}}) {
      precision::Realization r1 = precision::realize(p.prog(), p.index(fn), {policy, false}, p.dims);
      precision::Realization r2 = precision::realize(p.prog(), p.index(hot), {policy, false}, p.dims);
      const Tensor got = interp::Interpreter(p.prog(), p.dims, &r1).call(p.index(fn), args).tensor;
      const Tensor want = interp::Interpreter(p.prog(), p.dims, &r2).call(p.index(hot), args).tensor;
      ASSERT_EQ(got.reals.size(), want.reals.size());
      for (size_t i = 0; i < got.reals.size(); ++i)
        ASSERT_TRUE(same_bits(got.reals[i], want.reals[i])) << fn << " under " << precision::policy_name(policy) << " at " << i;
    }
  }
}

TEST(Prelude, Softcap) {
  interp::testing::Program p(kCalls);
  std::vector<double> want;
  for (double v : kX) want.push_back(1.5 * std::tanh(v / 1.5));
  Tensor got = p("cap", {reals({2, 3}, kX)});
  expect_reals(got, {2, 3}, want);
  for (double v : got.reals) EXPECT_LT(std::fabs(v), 1.5);
}

TEST(Prelude, RmsNorm) {
  interp::testing::Program p(kCalls);
  auto expected = [&](double eps) {
    std::vector<double> out;
    for (int i = 0; i < 2; ++i) {
      double ss = 0.0;
      for (int j = 0; j < 3; ++j) ss = ss + kX[i * 3 + j] * kX[i * 3 + j];
      double r = 1.0 / std::sqrt(ss / 3.0 + eps);
      for (int j = 0; j < 3; ++j) out.push_back(kX[i * 3 + j] * r * kG[j]);
    }
    return out;
  };
  expect_reals(p("rms", {reals({2, 3}, kX), reals({3}, kG)}), {2, 3}, expected(1e-5));
  expect_reals(p("rms_eps", {reals({2, 3}, kX), reals({3}, kG)}), {2, 3}, expected(0.25));
}

TEST(Prelude, LayerNorm) {
  interp::testing::Program p(kCalls);
  std::vector<double> want;
  for (int i = 0; i < 2; ++i) {
    double s = 0.0;
    for (int j = 0; j < 3; ++j) s = s + kX[i * 3 + j];
    double mu = s / 3.0;
    double sq = 0.0;
    for (int j = 0; j < 3; ++j) sq = sq + (kX[i * 3 + j] - mu) * (kX[i * 3 + j] - mu);
    double r = 1.0 / std::sqrt(sq / 3.0 + 1e-5);
    for (int j = 0; j < 3; ++j) want.push_back((kX[i * 3 + j] - mu) * r * kG[j] + kBeta[j]);
  }
  expect_reals(p("ln", {reals({2, 3}, kX), reals({3}, kG), reals({3}, kBeta)}), {2, 3}, want);
  // With γ = 1, β = 0 each row has mean 0 and (biased) variance 1, up to eps.
  Tensor unit = p("ln", {reals({2, 3}, kX), reals({3}, {1, 1, 1}), reals({3}, {0, 0, 0})});
  for (int i = 0; i < 2; ++i) {
    double m = (unit.reals[i * 3] + unit.reals[i * 3 + 1] + unit.reals[i * 3 + 2]) / 3.0;
    double v = 0.0;
    for (int j = 0; j < 3; ++j) v += unit.reals[i * 3 + j] * unit.reals[i * 3 + j] / 3.0;
    EXPECT_NEAR(m, 0.0, 1e-15);
    EXPECT_NEAR(v, 1.0, 1e-4);
  }
}

TEST(Prelude, BatchNormUsesTheBatchStatisticsPerChannel) {
  interp::testing::Program p(kCalls);
  std::vector<double> want(6);
  for (int j = 0; j < 3; ++j) {
    double mu = (0.0 + kX[j] + kX[3 + j]) / 2.0;
    double var = (0.0 + (kX[j] - mu) * (kX[j] - mu) + (kX[3 + j] - mu) * (kX[3 + j] - mu)) / 2.0;
    double r = 1.0 / std::sqrt(var + 1e-5);
    for (int i = 0; i < 2; ++i) want[i * 3 + j] = (kX[i * 3 + j] - mu) * r * kG[j] + kBeta[j];
  }
  expect_reals(p("bn", {reals({2, 3}, kX), reals({3}, kG), reals({3}, kBeta)}), {2, 3}, want);
}

TEST(Prelude, GeluTanhHasTheBitsOfTheBuiltin) {
  // 0.7978845608028654 in nn.qr is read as exactly the kernel's k.
  EXPECT_EQ(0.7978845608028654, 0x1.9884533d43651p-1);
  interp::testing::Program p(kCalls);
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> edges = {0.0, -0.0, 1e-300, -1e-300, 1e300, -1e300, inf, -inf, 5e-324};
  // Many inputs: a sweep through [-8, 8] in uneven steps, then the edges.
  for (int batch = 0; batch < 25; ++batch) {
    Tensor x = Tensor::real({41});
    for (int k = 0; k < 41; ++k) x.reals[k] = -8.0 + (batch * 41 + k) * (16.0 / 1025.0) * 1.000123;
    if (batch == 0)
      for (size_t k = 0; k < edges.size(); ++k) x.reals[k] = edges[k];
    Tensor lib = p("gt", {x});
    Tensor builtin = runtime::unary(runtime::UnaryOp::GeluTanh, x);
    ASSERT_EQ(lib.reals.size(), builtin.reals.size());
    for (size_t k = 0; k < lib.reals.size(); ++k)
      EXPECT_TRUE(same_bits(lib.reals[k], builtin.reals[k])) << "x = " << x.reals[k];
  }
}

// The layers called at concrete types, with axis names other than the prelude's:
// each declared result checks that the caller's names come back.
const char* kLayerCalls =
    R"(fn emb(t : ℝ[vocab: 4, model: 3], ids : i32[batch: 2, time: 3]) -> ℝ[batch: 2, time: 3, model: 3] = embedding(t, ids)
fn lin(x : ℝ[batch: 2, model: 3], w : ℝ[model: 3, hidden: 2], b : ℝ[2]) -> ℝ[batch: 2, hidden: 2] = linear(x, w, b)
fn att(q : ℝ[query: 2, d: 3], k : ℝ[pos: 3, d: 3], v : ℝ[pos: 3, e: 2]) -> ℝ[query: 2, e: 2] = attention(q, k, v)
fn catt(q : ℝ[query: 2, d: 3], k : ℝ[pos: 3, d: 3], v : ℝ[pos: 3, e: 2]) -> ℝ[query: 2, e: 2] = causal_attention(q, k, v)
fn sa(qkv : ℝ[time: 3, c: 12]) -> ℝ[time: 3, model: 4] = self_attention(qkv, iota(h: 2))
fn csa(qkv : ℝ[time: 3, c: 12], k : key) -> ℝ[time: 3, model: 4] = causal_self_attention(qkv, iota(h: 2), 0.0, k)
fn csa_drop(qkv : ℝ[time: 3, c: 12], k : key) -> ℝ[time: 3, model: 4] = causal_self_attention(qkv, iota(h: 2), 0.5, k)
fn weights_mask(k : key) -> bool[h: 2, t: 3, s: 3] = bernoulli(k, 0.5, h: 2, t: 3, s: 3)
fn bad_heads(qkv : ℝ[time: 3, c: 12]) -> ℝ[time: 3, model: 4] = self_attention(qkv, iota(h: 3))
fn drop(k : key, x : ℝ[a: 2, b: 3, c: 4]) -> ℝ[a: 2, b: 3, c: 4] = dropout(k, x, 0.25)
fn keep_all(k : key, x : ℝ[a: 2, b: 3, c: 4]) -> ℝ[a: 2, b: 3, c: 4] = dropout(k, x, 0.0)
fn mask(k : key) -> bool[a: 2, b: 3, c: 4] = bernoulli(k, 0.75, a: 2, b: 3, c: 4)
fn drop4(k : key, x : ℝ[a: 2, b: 3, c: 4, d: 5]) -> ℝ[a: 2, b: 3, c: 4, d: 5] =
  split(axis ab, dropout(k, merge(axis a, axis b, x, ab: 6), 0.25), a: 2, b: 3)
fn mask4(k : key) -> bool[a: 2, b: 3, c: 4, d: 5] = bernoulli(k, 0.75, a: 2, b: 3, c: 4, d: 5)
)";

/// nn.qr's attention on one head as plain loops: q [T, D], k [S, D], v [S, E]
/// row-major; each sum from 0.0 in increasing index, the softmax as softmax's.
std::vector<double> attend(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                           int T, int S, int D, int E, bool causal) {
  const double scale = std::sqrt(static_cast<double>(D - 1) + 1.0);
  std::vector<double> out(T * E);
  for (int t = 0; t < T; ++t) {
    std::vector<double> w(S);
    for (int s = 0; s < S; ++s) {
      double acc = 0.0;
      for (int d = 0; d < D; ++d) acc = acc + q[t * D + d] * k[s * D + d];
      w[s] = causal && s > t ? -std::numeric_limits<double>::infinity() : acc / scale;
    }
    double m = w[0];
    for (int s = 1; s < S; ++s) m = w[s] > m ? w[s] : m;
    double total = 0.0;
    for (int s = 0; s < S; ++s) {
      w[s] = runtime::elementary_exp(w[s] - m);
      total = total + w[s];
    }
    for (int s = 0; s < S; ++s) w[s] = w[s] / total;
    for (int e = 0; e < E; ++e) {
      double acc = 0.0;
      for (int s = 0; s < S; ++s) acc = acc + w[s] * v[s * E + e];
      out[t * E + e] = acc;
    }
  }
  return out;
}

TEST(Prelude, EmbeddingPicksRowsAndLinearIsXTimesWPlusB) {
  interp::testing::Program p(kLayerCalls);
  const std::vector<double> table = {0.5, -1.25, 2.0, 3.0, 1e-3, -7.5, 0.25, 4.0, -0.125, 9.0, 1.5, -2.0};
  const std::vector<int64_t> ids = {3, 0, 3, 1, 2, 0};
  std::vector<double> rows;
  for (int64_t id : ids)
    for (int j = 0; j < 3; ++j) rows.push_back(table[id * 3 + j]);
  Tensor got = p.call("emb", {Value::of(reals({4, 3}, table)), Value::of(ints(ElemKind::I32, {2, 3}, ids))}).tensor;
  expect_reals(got, {2, 3, 3}, rows);

  const std::vector<double> w = {1.5, -0.5, 2.0, 0.25, -3.0, 0.75};  // [3, 2]
  const std::vector<double> b = {0.125, -1.0};
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int o = 0; o < 2; ++o) {
      double acc = 0.0;
      for (int j = 0; j < 3; ++j) acc = acc + kX[i * 3 + j] * w[j * 2 + o];
      want.push_back(acc + b[o]);
    }
  expect_reals(p("lin", {reals({2, 3}, kX), reals({3, 2}, w), reals({2}, b)}), {2, 2}, want);
}

TEST(Prelude, AttentionIsTheSoftmaxOfScaledScoresTimesTheValues) {
  interp::testing::Program p(kLayerCalls);
  const std::vector<double> q = {0.5, -1.25, 2.0, 3.0, 1e-3, -7.5};                  // [2, 3]
  const std::vector<double> k = {1.5, -0.5, 2.0, 0.25, -3.0, 0.75, 0.0, 1.0, -1.0};  // [3, 3]
  const std::vector<double> v = {0.125, -1.0, 4.0, 0.5, -2.5, 1.25};                 // [3, 2]
  Tensor plain = p("att", {reals({2, 3}, q), reals({3, 3}, k), reals({3, 2}, v)});
  expect_reals(plain, {2, 2}, attend(q, k, v, 2, 3, 3, 2, false));
  Tensor causal = p("catt", {reals({2, 3}, q), reals({3, 3}, k), reals({3, 2}, v)});
  expect_reals(causal, {2, 2}, attend(q, k, v, 2, 3, 3, 2, true));
  // Query 0 sees key 0 only: its output is exactly v's first row.
  EXPECT_EQ(causal.reals[0], v[0]);
  EXPECT_EQ(causal.reals[1], v[1]);
}

TEST(Prelude, SelfAttentionReadsGpt2sFusedLayout) {
  // qkv [T = 3, 12]: q, k, v of E = 4 values each, two heads of 2 side by side.
  interp::testing::Program p(kLayerCalls);
  const int T = 3, E = 4, H = 2, W = E / H;
  std::vector<double> qkv(T * 3 * E);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::sin(1.0 + 0.7 * static_cast<double>(i)) * 2.0;
  for (bool causal : {false, true}) {
    std::vector<double> want(T * E);
    for (int h = 0; h < H; ++h) {
      std::vector<double> q, k, v;
      for (int t = 0; t < T; ++t)
        for (int j = 0; j < W; ++j) {
          q.push_back(qkv[t * 3 * E + h * W + j]);
          k.push_back(qkv[t * 3 * E + E + h * W + j]);
          v.push_back(qkv[t * 3 * E + 2 * E + h * W + j]);
        }
      std::vector<double> head = attend(q, k, v, T, T, W, W, causal);
      for (int t = 0; t < T; ++t)
        for (int j = 0; j < W; ++j) want[t * E + h * W + j] = head[t * W + j];
    }
    const Value key = Value::of_key(runtime::Key{5, 8});
    expect_reals(causal ? p.call("csa", {Value::of(reals({T, 3 * E}, qkv)), key}).tensor
                        : p("sa", {reals({T, 3 * E}, qkv)}),
                 {T, E}, want);
  }
  // Dropout on the attention weights: each head's weights kept where
  // bernoulli(k, 1 − p) over [h, t, s] is true and scaled by 1 / (1 − p).
  {
    const Value key = Value::of_key(runtime::Key{5, 8});
    const Tensor mask = p.call("weights_mask", {key}).tensor;
    std::vector<double> want(T * E, 0.0);
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        // The head's softmax weights of query t, as attend computes them, then masked.
        std::vector<double> w(T, 0.0), scores;
        double m = -std::numeric_limits<double>::infinity();
        for (int s = 0; s <= t; ++s) {
          double dot = 0.0;
          for (int j = 0; j < W; ++j) dot = dot + qkv[t * 3 * E + h * W + j] * qkv[s * 3 * E + E + h * W + j];
          scores.push_back(dot / std::sqrt(static_cast<double>(W - 1) + 1.0));
          m = std::max(m, scores.back());
        }
        double z = 0.0;
        for (int s = 0; s < T; ++s) z = z + (s <= t ? std::exp(scores[s] - m) : 0.0);
        for (int s = 0; s <= t; ++s) w[s] = std::exp(scores[s] - m) / z;
        for (int s = 0; s < T; ++s) w[s] = mask.ints[(h * T + t) * T + s] ? w[s] / 0.5 : 0.0;
        for (int j = 0; j < W; ++j) {
          double acc = 0.0;
          for (int s = 0; s < T; ++s) acc = acc + w[s] * qkv[s * 3 * E + 2 * E + h * W + j];
          want[t * E + h * W + j] = acc;
        }
      }
    const Tensor dropped = p.call("csa_drop", {Value::of(reals({T, 3 * E}, qkv)), key}).tensor;
    ASSERT_EQ(dropped.reals.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(dropped.reals[i], want[i], 1e-12 * (1 + std::fabs(want[i])));
    int kept = 0;
    for (int64_t i = 0; i < mask.size(); ++i) kept += mask.ints[i] ? 1 : 0;
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, mask.size());
  }
  // Three heads do not divide E = 4: the split of qkv stops the run, naming it.
  try {
    p("bad_heads", {reals({T, 3 * E}, qkv)});
    ADD_FAILURE() << "three heads of 4 / 3 values ran";
  } catch (const std::exception& err) {
    EXPECT_NE(std::string(err.what()).find("(C / 3) / H is not a whole number at C = 12, H = 3"), std::string::npos)
        << err.what();
  }
}

TEST(Prelude, DropoutKeepsWhereItsKeysDrawIsTrue) {
  interp::testing::Program p(kLayerCalls);
  const Value key = Value::of_key(runtime::Key{7, 11});
  Tensor x = Tensor::real({2, 3, 4});
  for (int64_t i = 0; i < x.size(); ++i) x.reals[i] = 0.5 + static_cast<double>(i) * 0.375;
  Tensor mask = p.call("mask", {key}).tensor;
  std::vector<double> want;
  int kept = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    want.push_back(mask.ints[i] ? x.reals[i] / (1.0 - 0.25) : 0.0);
    kept += mask.ints[i] != 0;
  }
  ASSERT_GT(kept, 0);
  ASSERT_LT(kept, x.size());  // the draw both keeps and drops here
  expect_reals(p.call("drop", {key, Value::of(x)}).tensor, {2, 3, 4}, want);
  // p = 0 keeps x exactly.
  expect_reals(p.call("keep_all", {key, Value::of(x)}).tensor, {2, 3, 4}, x.reals);
  // Four axes merged to three around the call: the mask of a four-axis draw.
  Tensor x4 = Tensor::real({2, 3, 4, 5});
  for (int64_t i = 0; i < x4.size(); ++i) x4.reals[i] = 1.0 + static_cast<double>(i);
  Tensor mask4 = p.call("mask4", {key}).tensor;
  std::vector<double> want4;
  for (int64_t i = 0; i < x4.size(); ++i) want4.push_back(mask4.ints[i] ? x4.reals[i] / 0.75 : 0.0);
  expect_reals(p.call("drop4", {key, Value::of(x4)}).tensor, {2, 3, 4, 5}, want4);
}

TEST(Prelude, CategoricalDrawsEachIdAsOftenAsItsSoftmaxSays) {
  // 40000 rows of the same logits: each id's share within 5σ of softmax(logits),
  // and the draw is the first largest of logits - log(-log(u)) with u the key's uniform draw.
  interp::testing::Program p(R"(fn draws(k : key, logits : ℝ[n: 4]) -> i32[row: 40000] =
  let (k1, k2) = split(k)
  categorical(k1, split(axis n, logits, row: 1, n: 4) + 0.0 * uniform(k2, row: 40000, n: 4))
)");
  const std::vector<double> logits = {0.5, -1.0, 1.25, 0.0};
  const Tensor ids = p.call("draws", {Value::of_key(runtime::Key{3, 9}), Value::of(reals({4}, logits))}).tensor;
  ASSERT_EQ(ids.shape, (runtime::Shape{40000}));
  double z = 0;
  for (double l : logits) z += std::exp(l);
  std::vector<int> count(4, 0);
  for (int64_t id : ids.ints) {
    ASSERT_TRUE(id >= 0 && id < 4) << id;
    ++count[static_cast<size_t>(id)];
  }
  for (size_t i = 0; i < 4; ++i) {
    const double prob = std::exp(logits[i]) / z;
    const double sigma = std::sqrt(prob * (1 - prob) / 40000);
    EXPECT_NEAR(count[i] / 40000.0, prob, 5 * sigma) << "id " << i;
  }
  // Row 0 by the definition.
  const Tensor u = runtime::draw_uniform(runtime::split_key(runtime::Key{3, 9}).first, {40000, 4}, 0.0, 1.0);
  int want = 0;
  double best = -INFINITY;
  for (int i = 0; i < 4; ++i) {
    const double g = logits[static_cast<size_t>(i)] - std::log(-std::log(u.reals[static_cast<size_t>(i)]));
    if (g > best) {
      best = g;
      want = i;
    }
  }
  EXPECT_EQ(ids.ints[0], want);
}

TEST(Prelude, ALayerCalledWithTheWrongShapesSaysWhichAxis) {
  auto e = elab::testing::elaborate_text(
      R"(fn f(q : ℝ[query: 5, d: 4], k : ℝ[pos: 7, d: 3], v : ℝ[pos: 7, e: 6]) -> ℝ[query: 5, e: 6] = attention(q, k, v)
fn g(k : key, x : ℝ[batch: 2, model: 4]) -> ℝ[batch: 2, model: 4] = dropout(k, x, 0.5)  -- any shape
fn h(t : ℝ[vocab: 9, model: 4], ids : i64[batch: 2]) -> ℝ[batch: 2, model: 4] = embedding(t, ids)
)");
  EXPECT_TRUE(e->has_error("E0401", 1, 107,
                           "argument `k` of `attention` should be ℝ[s: 7, d: 4], but is ℝ[pos: 7, d: 3]: axis `d` has "
                           "size 3, but `D` is 4 (bound by argument `q`, axis `d`)"))
      << e->rendered();
  EXPECT_TRUE(e->has_error("E0401", 3, 94, "element type i64 is not i32")) << e->rendered();
  EXPECT_EQ(e->errors().size(), 2u) << e->rendered();
}

/// Each instruction of a function as `op` or `op!` when it carries numerics(high).
std::string marks(const core::Function& fn) {
  std::string out;
  for (const core::Instr& in : fn.body)
    out += std::string(out.empty() ? "" : " ") + core::op_info(in.op).spelling +
           (in.numerics == core::Numerics::High ? "!" : "");
  return out;
}

TEST(Prelude, TheLibraryMarksItsIslands) {
  auto e = elab::testing::elaborate_text("");
  ASSERT_TRUE(e->ok()) << e->rendered();
  EXPECT_EQ(marks(e->fn("softmax")), "max! sub! exp! sum! div!");
  EXPECT_EQ(marks(e->fn("log_softmax")), "logsumexp! sub!");
  EXPECT_EQ(marks(e->fn("logsumexp")), "logsumexp!");
  EXPECT_EQ(marks(e->fn("cross_entropy")), "logsumexp! pick! sub! mean!");
  EXPECT_EQ(marks(e->fn("softcap")), "real! div! tanh! real! mul!");
  // RMS norm's statistic is an island; the product is in the input's type.
  EXPECT_EQ(marks(e->fn("rms_norm")), "pow! mean! real! add! rsqrt! mul mul");
  EXPECT_EQ(marks(e->fn("layer_norm")), "mean! sub! pow! mean! real! add! rsqrt! sub mul mul add");
  EXPECT_EQ(marks(e->fn("batch_norm")), "mean! sub! pow! mean! real! add! rsqrt! sub mul mul add");
  EXPECT_EQ(marks(e->fn("gelu_tanh")), "const mul const mul mul mul add const mul tanh const add mul");
  // The layers add no island of their own: attention's is its softmax's.
  EXPECT_EQ(marks(e->fn("embedding")), "gather");
  EXPECT_EQ(marks(e->fn("linear")), "dot add");
  EXPECT_EQ(marks(e->fn("dropout")), "const real sub bernoulli div const where");
  EXPECT_EQ(marks(e->fn("attention")), "contract iota max const add sqrt div call contract");
  EXPECT_EQ(marks(e->fn("causal_attention")),
            "contract iota max const add sqrt div call call contract");
  // The recurrences compute in f32 under a half policy: matrix_scan's scan
  // is an island, and linear_scan runs through it.
  EXPECT_EQ(marks(e->fn("matrix_scan")), "scan!");
  EXPECT_EQ(marks(e->fn("linear_scan")), "transpose split transpose split call merge transpose");
}

TEST(Prelude, UserFunctionsComeFirstThenThePreludeThenBuiltins) {
  auto e = elab::testing::elaborate_files({{"main.qr", R"(import "other.qr" as o
fn softmax(x : ℝ[3]) -> ℝ[3] = x * 2.0
fn mine(x : ℝ[3]) -> ℝ[3] = softmax(x)
fn theirs(x : ℝ[3]) -> ℝ[3] = o.f(x)
fn exp(x : ℝ[3]) -> ℝ[3] = x
fn own_exp(x : ℝ[3]) -> ℝ[3] = exp(x)
fn sum(x : ℝ[3]) -> ℝ[] = 0.0
fn lse_axis(x : ℝ[a: 2, b: 3]) -> ℝ[a: 2] = logsumexp(axis b, x)
fn lse_last(x : ℝ[a: 2, b: 3]) -> ℝ[a: 2] = logsumexp(x)
fn sum_axis(x : ℝ[a: 2, b: 3]) -> ℝ[a: 2] = sum(axis b, x)
fn gelu(x : ℝ[3]) -> ℝ[3] = gelu_tanh(x)
)"},
                                           {"other.qr", "fn f(x : ℝ[3]) -> ℝ[3] = softmax(x)\n"}});
  ASSERT_TRUE(e->ok()) << e->rendered();
  const elab::Program& prog = *e->prog;
  auto callee = [&](const std::string& fn) {
    const core::Instr& in = e->fn(fn).body.back();
    return in.op == core::Op::Call ? in.callee : -1;
  };
  // A user's function shadows the prelude's in its own file only.
  int user_softmax = callee("mine");
  ASSERT_GE(user_softmax, 0);
  EXPECT_FALSE(prog.in_prelude(user_softmax));
  int imported = prog.find_function("f");
  const core::Instr& in_other = prog.functions[imported].body.back();
  ASSERT_EQ(in_other.op, core::Op::Call);
  EXPECT_TRUE(prog.in_prelude(in_other.callee));
  EXPECT_EQ(prog.functions[in_other.callee].name, "softmax");
  // A user's function replaces a built-in of its name, as before the prelude.
  EXPECT_FALSE(prog.in_prelude(callee("own_exp")));
  // `axis` arguments always name the built-in reduction, whatever the file defines.
  EXPECT_EQ(e->fn("lse_axis").body.back().op, core::Op::LogSumExp);
  EXPECT_EQ(e->fn("sum_axis").body.back().op, core::Op::Sum);
  // Without them, the prelude's logsumexp reduces the last axis only.
  ASSERT_GE(callee("lse_last"), 0);
  EXPECT_TRUE(prog.in_prelude(callee("lse_last")));
  EXPECT_EQ(e->type(e->fn("lse_last").body.back().type), "ℝ[a: 2]");
  EXPECT_NE(e->core_of("lse_last").find("call logsumexp{N = 3}(x)"), std::string::npos) << e->core_of("lse_last");
  // The prelude wraps a built-in of its own name: its gelu_tanh calls nothing.
  EXPECT_TRUE(prog.in_prelude(callee("gelu")));
  for (const core::Instr& in : e->fn("gelu_tanh").body) EXPECT_NE(in.op, core::Op::Call);
}

TEST(Prelude, PrintoutsShowOnlyWhatTheProgramReaches) {
  auto none = elab::testing::elaborate_text("fn f(x : ℝ[3]) -> ℝ[3] = exp(x)\n");
  ASSERT_TRUE(none->ok()) << none->rendered();
  EXPECT_EQ(core::print_core(*none->prog).find("softmax"), std::string::npos);
  EXPECT_EQ(elab::print_elab(*none->prog).find("prelude/"), std::string::npos);
  EXPECT_EQ(elab::print_summary(*none->prog).find("nn.qr"), std::string::npos);
  EXPECT_EQ(core::core_json(*none->prog)["functions"].size(), 1u);
  EXPECT_EQ(elab::elab_json(*none->prog)["files"].size(), 1u);

  // A call of log_softmax shows it; it calls nothing else of the prelude.
  auto some = elab::testing::elaborate_text("fn f(x : ℝ[v: 3]) -> ℝ[v: 3] = log_softmax(x)\n");
  ASSERT_TRUE(some->ok()) << some->rendered();
  std::string core_text = core::print_core(*some->prog);
  EXPECT_EQ(core_text.find("fn log_softmax{N}(x : ℝ[..., n: N]) -> ℝ[..., n: N] {"), 0u) << core_text;
  EXPECT_EQ(core_text.find("fn softmax"), std::string::npos) << core_text;
  std::string elab_text = elab::print_elab(*some->prog);
  EXPECT_EQ(elab_text.find("== prelude/nn.qr\nfn log_softmax{N}(x : ℝ[..., n: N]) -> ℝ[..., n: N]\n== main.qr (main)"),
            0u)
      << elab_text;
  EXPECT_NE(elab::print_summary(*some->prog).find("nn.qr log_softmax{N} : ℝ[..., n: N]"), std::string::npos);
}

}  // namespace
}  // namespace quire::prelude
