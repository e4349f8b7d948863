// The prelude: it elaborates cleanly on its own, every function computes the
// formula its comment states (the f64 interpreter against plain loops written
// here, bit for bit), its numerics marks sit where the library puts them, its
// names resolve after the user's own and before the built-ins, and printouts
// show only the part of it a program reaches.

#include "quire/prelude/prelude.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "quire/core/printer.h"
#include "quire/elab/elab_testing.h"
#include "quire/elab/summary.h"
#include "quire/interp/interp_testing.h"
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

TEST(Prelude, ElaboratesAloneWithoutDiagnostics) {
  // An error in the prelude would be an internal error: no user could fix it.
  auto e = elab::testing::elaborate_text("");
  EXPECT_TRUE(e->sink.all().empty()) << e->rendered();
  ASSERT_FALSE(files().empty());
  for (const File& f : files()) EXPECT_EQ(f.path.substr(0, 8), "prelude/");
  for (const std::string& name : kFunctions) {
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
    double picked = 0.0;
    for (int j = 0; j < 3; ++j) picked = picked + (j == ids[r] ? x[r * 3 + j] : 0.0);
    total = total + (row_lse(x, r) - picked);
  }
  Tensor got = p.call("ce", {Value::of(reals({2, 2, 3}, x)), Value::of(ints(ElemKind::I32, {2, 2}, ids))}).tensor;
  expect_reals(got, {}, {total / 4.0});
  EXPECT_TRUE(std::isfinite(got.reals[0]));
  // An id outside [0, N) stops the run.
  ids[3] = 3;
  EXPECT_THROW(p.call("ce", {Value::of(reals({2, 2, 3}, x)), Value::of(ints(ElemKind::I32, {2, 2}, ids))}),
               std::exception);
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
  EXPECT_EQ(marks(e->fn("cross_entropy")), "one_hot! const! eq! const! where! sum! logsumexp! sub! mean!");
  EXPECT_EQ(marks(e->fn("softcap")), "real! div! tanh! real! mul!");
  // RMS norm's statistic is an island; the product is in the input's type.
  EXPECT_EQ(marks(e->fn("rms_norm")), "pow! mean! real! add! rsqrt! mul mul");
  EXPECT_EQ(marks(e->fn("layer_norm")), "mean! sub! pow! mean! real! add! rsqrt! sub mul mul add");
  EXPECT_EQ(marks(e->fn("batch_norm")), "mean! sub! pow! mean! real! add! rsqrt! sub mul mul add");
  EXPECT_EQ(marks(e->fn("gelu_tanh")), "const mul const mul mul mul add const mul tanh const add mul");
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
