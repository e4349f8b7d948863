// The sensitivities against closed forms: a product and its operands, a chain
// of products, a function called twice (its evaluations add up), and the
// tutorial's loss: every real site listed, 1 at L itself, and ‖∂L/∂x‖₁ of the
// input equal to the gradient the f64 interpreter computes.

#include "quire/precision/sensitivity.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "quire/core/printer.h"
#include "quire/interp/inputs.h"
#include "quire/interp/interp_testing.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/params.h"
#include "quire/support/testing.h"

namespace quire::precision {
namespace {

using interp::Value;
using interp::testing::Program;
using interp::testing::reals;

Value v(runtime::Tensor t) { return Value::of(std::move(t)); }

std::map<std::string, double> by_site(const Sensitivities& s) {
  std::map<std::string, double> out;
  for (const SiteSensitivity& site : s.sites) out[site.site] = site.l1;
  return out;
}

/// The value number of the one instruction of `function` whose op is `op`.
int only(const elab::Program& prog, const std::string& function, core::Op op) {
  const core::Function& fn = prog.functions.at(static_cast<size_t>(prog.find_function(function)));
  int found = 0;
  for (const core::Instr& in : fn.body)
    if (in.op == op) {
      EXPECT_EQ(found, 0) << "two instructions of that op in " << function;
      found = in.id;
    }
  EXPECT_NE(found, 0) << "no instruction of that op in " << function;
  return found;
}

TEST(SensitivityClosedForm, ProductAndItsOperands) {
  Program p("fn f(x : ℝ[4], w : ℝ[4]) -> ℝ[] = sum(x * w)\n");
  elab::Program& prog = *p.e->prog;
  const Sensitivities s =
      sensitivities(prog, p.index("f"), {}, {v(reals({4}, {1, -2, 3, 0.5})), v(reals({4}, {0.25, -4, 2, -1}))}, 128);
  EXPECT_EQ(s.entry, "f");
  auto m = by_site(s);
  EXPECT_EQ(m.at("f/%1"), 0.25 + 4 + 2 + 1);                                   // ∂L/∂x = w
  EXPECT_EQ(m.at("f/%2"), 1 + 2 + 3 + 0.5);                                    // ∂L/∂w = x
  EXPECT_EQ(m.at(fmt::format("f/%{}", only(prog, "f", core::Op::Mul))), 4.0);  // ∂L/∂(x·w)_i = 1
  EXPECT_EQ(m.at(fmt::format("f/%{}", only(prog, "f", core::Op::Sum))), 1.0);  // L itself
  EXPECT_EQ(m.size(), 4u);
}

TEST(SensitivityClosedForm, ChainOfProducts) {
  Program p("fn f(a : ℝ[3], b : ℝ[3], c : ℝ[3]) -> ℝ[] = sum(a * b * c)\n");
  elab::Program& prog = *p.e->prog;
  const std::vector<double> a{1, -2, 3}, b{0.5, 4, -1}, c{-3, 0.25, 2};
  const Sensitivities s =
      sensitivities(prog, p.index("f"), {}, {v(reals({3}, a)), v(reals({3}, b)), v(reals({3}, c))}, 128);
  auto m = by_site(s);
  double bc = 0, ac = 0, ab = 0, sc = 0;
  for (size_t i = 0; i < 3; ++i) {
    bc += std::fabs(b[i] * c[i]);
    ac += std::fabs(a[i] * c[i]);
    ab += std::fabs(a[i] * b[i]);
    sc += std::fabs(c[i]);
  }
  EXPECT_EQ(m.at("f/%1"), bc);  // ∂L/∂a = b·c
  EXPECT_EQ(m.at("f/%2"), ac);
  EXPECT_EQ(m.at("f/%3"), ab);
  // (a·b) is read by the second product: its cotangent is c; the second's is 1.
  const core::Function& f = prog.functions.at(static_cast<size_t>(p.index("f")));
  std::vector<int> products;
  for (const core::Instr& in : f.body)
    if (in.op == core::Op::Mul) products.push_back(in.id);
  ASSERT_EQ(products.size(), 2u);
  EXPECT_EQ(m.at(fmt::format("f/%{}", products[0])), sc);
  EXPECT_EQ(m.at(fmt::format("f/%{}", products[1])), 3.0);
  EXPECT_EQ(m.at(fmt::format("f/%{}", only(prog, "f", core::Op::Sum))), 1.0);
}

TEST(SensitivityClosedForm, EvaluationsOfACalleeAddUp) {
  Program p("fn g(x : ℝ[2]) -> ℝ[2] = x * 2.0\nfn f(x : ℝ[2]) -> ℝ[] = sum(g(g(x)))\n");
  elab::Program& prog = *p.e->prog;
  const Sensitivities s = sensitivities(prog, p.index("f"), {}, {v(reals({2}, {1, -3}))}, 128);
  auto m = by_site(s);
  // L = Σ 4x. The outer call's product has cotangent 1 per element, the inner's 2.
  EXPECT_EQ(m.at(fmt::format("g/%{}", only(prog, "g", core::Op::Mul))), 2.0 + 4.0);
  // g's argument: 2 per element in the outer call, 4 in the inner.
  EXPECT_EQ(m.at("g/%1"), 4.0 + 8.0);
  // The literal 2.0: Σ x·ct per call, |2·1 − 6·1| + |1·2 − 3·2|.
  EXPECT_EQ(m.at(fmt::format("g/%{}", only(prog, "g", core::Op::Const))), 4.0 + 4.0);
  EXPECT_EQ(m.at("f/%1"), 8.0);  // ∂L/∂x = 4
  // The printout lists g first (Σ 22 against f's 8 + 2 + 1).
  const std::string text = print_sensitivities(s, 3);
  EXPECT_NE(text.find("-- sensitivity of `f`"), std::string::npos) << text;
  EXPECT_LT(text.find("\ng "), text.find("\nf ")) << text;
  EXPECT_NE(text.find("g/%1                                     1.2000e1"), std::string::npos) << text;
}

TEST(SensitivityClosedForm, NotAScalarIsRefused) {
  Program p("fn f(x : ℝ[2]) -> ℝ[2] = x * 2.0\n");
  EXPECT_THROW(sensitivities(*p.e->prog, p.index("f"), {}, {v(reals({2}, {1, 2}))}, 128), std::invalid_argument);
}

// A function that takes a gradient would need second derivatives: its
// reverse sweep's values would have no cotangents, so it is refused rather
// than given sensitivities of 0.
TEST(SensitivityClosedForm, AnEntryThatTakesAGradientIsRefused) {
  Program p(
      "fn f(x : ℝ[2]) -> ℝ[] = sum(x * x * x)\n"
      "fn g(x : ℝ[2]) -> ℝ[] = sum(grad(f)(x))\n");
  try {
    sensitivities(*p.e->prog, p.index("g"), {}, {v(reals({2}, {1, 2}))}, 128);
    FAIL() << "an entry that takes a gradient was given sensitivities";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("`g` takes a gradient (through `f."), std::string::npos) << e.what();
  }
}

TEST(SensitivityTutorial, EverySiteAndTheInputAgainstF64) {
  auto e = elab::testing::elaborate_tutorial();
  ASSERT_TRUE(e->ok()) << e->rendered();
  elab::Program& prog = *e->prog;
  const std::map<std::string, int64_t> dims{{"B", 4}};
  const int entry = prog.find_function("loss");
  interp::ParamMap params =
      interp::init_params(prog, prog.functions.at(static_cast<size_t>(entry)).args[0].type.params, 0, dims);
  const std::vector<Value> args = interp::entry_arguments(prog, entry, &params, dims, 0, std::nullopt);
  const Sensitivities s = sensitivities(prog, entry, dims, args, 128);
  auto m = by_site(s);
  EXPECT_EQ(m.size(), s.sites.size()) << "each site once";

  std::set<std::string> functions;
  for (const SiteSensitivity& site : s.sites) {
    functions.insert(site.function);
    EXPECT_TRUE(std::isfinite(site.l1) && site.l1 >= 0) << site.site;
  }
  for (const char* f : {"loss", "Tower.apply", "Block.apply", "RMSNorm.apply", "Linear.apply"})
    EXPECT_TRUE(functions.count(f)) << f;
  for (const core::Function& fn : prog.functions) {
    if (!functions.count(fn.name) || fn.primal >= 0) continue;
    for (int id = 1; id <= fn.value_count(); ++id) {
      const elab::Type& t = fn.type_of(id);
      if (t.is_tensor() && t.tensor.elem == elab::Elem::Real) {
        EXPECT_TRUE(m.count(core::site_name(fn, id))) << core::site_name(fn, id);
      }
    }
  }
  const core::Function& loss = prog.functions.at(static_cast<size_t>(entry));
  EXPECT_EQ(m.at(core::site_name(loss, loss.result_value)), 1.0);

  // ‖∂L/∂x‖₁ of the batch's input x, against the f64 interpreter's gradient.
  int x = 0;
  for (const core::Instr& in : loss.body)
    if (in.op == core::Op::TupleGet && in.attr<core::attr::Element>().index == 0 && in.args.at(0) == 2) x = in.id;
  ASSERT_NE(x, 0);
  std::vector<Value> vjp_args = args;
  vjp_args.push_back(Value::of(runtime::Tensor::scalar(1.0)));
  interp::Interpreter f64(prog, dims);
  const Value r = f64.call(prog.find_function("loss.vjp"), vjp_args);
  double dx = 0;
  for (double g : r.elements.at(2).elements.at(0).tensor.reals) dx += std::fabs(g);
  EXPECT_GT(dx, 0);
  EXPECT_NEAR(m.at(core::site_name(loss, x)), dx, 1e-12 * dx);

  // The printout: both tables, L's site at 1.
  const std::string text = print_sensitivities(s, 30);
  EXPECT_NE(text.find("module                                 Σ ‖∂L/∂v‖₁"), std::string::npos) << text;
  EXPECT_NE(text.find(core::site_name(loss, loss.result_value)), std::string::npos) << text;
}

// Each element's cotangent meets its own element's rounding. x = (3, 1 + 2⁻¹²)
// with w = (1000, 0.001): 3 is exact in every type, 1 + 2⁻¹² is exact in f32
// and rounds to 1 in bf16 and f16 (an error of 2⁻¹²), and its cotangent is
// 0.001. So x's term in a half is 0.001·2⁻¹², where ‖∂L/∂x‖₁ times the largest
// rounding would be 1000.001·2⁻¹², a million times more.
TEST(SensitivityWeighted, EachElementsCotangentMeetsItsOwnRounding) {
  Program p("fn f(x : ℝ[2], w : ℝ[2]) -> ℝ[] = sum(x * w)\n");
  elab::Program& prog = *p.e->prog;
  const double eps = std::ldexp(1.0, -12);
  const Sensitivities s =
      sensitivities(prog, p.index("f"), {}, {v(reals({2}, {3, 1 + eps})), v(reals({2}, {1000, 0.001}))}, 128);
  const SiteSensitivity* x = s.site("f/%1");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->l1, 1000.001);
  EXPECT_EQ(x->weighted.at(runtime::FloatType::F64), 0);
  EXPECT_EQ(x->weighted.at(runtime::FloatType::F32), 0);
  EXPECT_EQ(x->weighted.at(runtime::FloatType::BF16), 0.001 * eps);
  EXPECT_EQ(x->weighted.at(runtime::FloatType::F16), 0.001 * eps);
  // w = (1000, 0.001) with cotangent x: 1000 = 0b1111101000 has 7 significant
  // bits, exact in every type here; 0.001 is exact in none narrower than f64,
  // and its term is (1 + 2⁻¹²)·|fl_T(0.001) − 0.001| in each (both sides
  // round that exact product to f64 once).
  const SiteSensitivity* w = s.site("f/%2");
  ASSERT_NE(w, nullptr);
  for (runtime::FloatType t : {runtime::FloatType::F32, runtime::FloatType::BF16, runtime::FloatType::F16}) {
    const double r = std::fabs(runtime::round_to(t, 0.001) - 0.001);  // exact: r is a multiple of 0.001's last bit
    EXPECT_EQ(w->weighted.at(t), (1 + eps) * r) << runtime::float_type_name(t);
  }
  // The sum's accumulation weight: its cotangent 1 times Σ|x_i·w_i|; no other
  // site adds terms.
  for (const SiteSensitivity& site : s.sites) {
    if (site.site == fmt::format("f/%{}", only(prog, "f", core::Op::Sum)))
      EXPECT_DOUBLE_EQ(site.accumulated, 3000 + 0.001 * (1 + eps));
    else
      EXPECT_EQ(site.accumulated, 0) << site.site;
  }
}

// The largest of several samples keeps each type's weighted rounding on its own.
TEST(SensitivityWeighted, TheLargestOfSamplesIsTakenTypeByType) {
  SiteSensitivity a{"f/%1", "f", 2, {{runtime::FloatType::F32, 1}, {runtime::FloatType::F16, 5}}};
  SiteSensitivity b{"f/%1", "f", 1, {{runtime::FloatType::F32, 3}, {runtime::FloatType::F16, 4}}};
  Sensitivities sa, sb;
  sa.sites = {a};
  sb.sites = {b};
  const Sensitivities m = largest_of({sa, sb});
  ASSERT_EQ(m.sites.size(), 1u);
  EXPECT_EQ(m.sites[0].l1, 2);
  EXPECT_EQ(m.sites[0].weighted.at(runtime::FloatType::F32), 3);
  EXPECT_EQ(m.sites[0].weighted.at(runtime::FloatType::F16), 5);
}

}  // namespace
}  // namespace quire::precision
