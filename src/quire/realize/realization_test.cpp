#include "quire/realize/realization.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "quire/elab/elab_testing.h"
#include "quire/precision/precision_testing.h"

namespace quire::precision {
namespace {

using elab::testing::elaborate_text;

using testing::kEveryMark;

struct Realized {
  std::unique_ptr<elab::testing::Elaborated> e;
  Realization r;

  /// The realized type of the value a `let` named in `fn`.
  const SiteType& site(const std::string& fn_name, const std::string& let) const {
    int f = e->prog->find_function(fn_name);
    const FunctionRealization* fr = r.find(f, core::Numerics::Default);
    for (const core::Instr& in : e->prog->functions[f].body)
      if (in.name == let && fr && fr->values[in.id]) return *fr->values[in.id];
    throw std::runtime_error("no realized site " + let);
  }
  const ParamStorage& param(const std::string& path) const {
    for (const ParamStorage& p : r.params)
      if (p.path == path) return p;
    throw std::runtime_error("no parameter " + path);
  }
};

Realized realize_under(Policy policy) {
  Realized out;
  out.e = elaborate_text(kEveryMark);
  EXPECT_TRUE(out.e->ok()) << out.e->rendered();
  out.r = realize(*out.e->prog, out.e->prog->find_function("loss"), {policy, false}, {});
  return out;
}

TEST(Realization, HalfPolicyWithIslandsRegionsCastsAndParameterMarks) {
  Realized x = realize_under(Policy::BF16);
  EXPECT_EQ(x.site("M.apply", "h").storage, FloatType::BF16);
  EXPECT_EQ(x.site("M.apply", "h").accumulator, FloatType::F32);
  EXPECT_TRUE(x.site("M.apply", "h").read_down);
  EXPECT_EQ(x.site("M.apply", "h").reason, Reason::Policy);
  EXPECT_EQ(x.site("M.apply", "s").storage, FloatType::F32);
  EXPECT_EQ(x.site("M.apply", "s").reason, Reason::Island);
  EXPECT_EQ(x.site("M.apply", "r").storage, FloatType::BF16);
  EXPECT_EQ(x.site("M.apply", "r").reason, Reason::Region);
  EXPECT_EQ(x.site("M.apply", "m").storage, FloatType::F32);
  EXPECT_EQ(x.site("M.apply", "m").reason, Reason::OutRequest);
  EXPECT_EQ(x.site("M.apply", "c").storage, FloatType::F16);
  EXPECT_EQ(x.site("M.apply", "c").reason, Reason::Cast);
  EXPECT_EQ(x.site("M.apply", "k").storage, FloatType::F32);
  EXPECT_EQ(x.site("M.apply", "k").reason, Reason::ParamMark);
}

TEST(Realization, ProductStepFmaWhereTheAccumulatorHoldsTheOperands) {
  auto under = [](Policy policy, bool half_intermediates, bool fused) {
    Realized out;
    out.e = elaborate_text(kEveryMark);
    RealizeOptions o;
    o.policy = policy;
    o.half_intermediates = half_intermediates;
    o.fused_products = fused;
    out.r = realize(*out.e->prog, out.e->prog->find_function("loss"), o, {});
    return out;
  };
  for (Policy p : {Policy::F64, Policy::F32, Policy::BF16, Policy::F16}) {
    Realized fused = under(p, false, true);
    EXPECT_TRUE(fused.r.fused_products);
    // f64 and f32 operands in their own accumulator, halves read down into f32.
    for (const char* product : {"h", "r", "m"}) EXPECT_TRUE(fused.site("M.apply", product).fma) << product;
    // Not a product.
    EXPECT_FALSE(fused.site("M.apply", "k").fma);
    for (const char* product : {"h", "r", "m"}) EXPECT_FALSE(under(p, false, false).site("M.apply", product).fma);
  }
  // Accumulating in the half itself: a fused step would round to a half, which has no fma.
  Realized half = under(Policy::BF16, true, true);
  EXPECT_EQ(half.site("M.apply", "h").accumulator, FloatType::BF16);
  EXPECT_FALSE(half.site("M.apply", "h").fma);
  EXPECT_TRUE(half.site("M.apply", "m").fma);  // `out = f32` keeps its f32 accumulator
  const std::string text = print_realization(*half.e->prog, half.r);
  EXPECT_NE(text.find("--half-intermediates --product-step fma"), std::string::npos) << text;
  EXPECT_NE(text.find("each step one fused multiply-add"), std::string::npos) << text;
}

// `out = T` on a product stores the T accumulator wherever the policy is
// narrower than T (reason `out request`; a half policy still reads the
// operands down), and changes nothing where the policy is T or wider.
TEST(Realization, OutRequestStoresTheRequestedAccumulatorUnderEveryPolicy) {
  struct Want {
    Policy policy;
    FloatType type;
    Reason reason;
    bool read_down;
  };
  const char* source = R"(fn f(x : ℝ[b: 2, 4], w : ℝ[4, 3]) -> (ℝ[b: 2, 3], ℝ[b: 2, 3]) =
  let p64 = matmul(x, w, out = f64)
  let p32 = matmul(x, w, out = f32)
  (p64, p32)
)";
  const Want out_f64[] = {{Policy::F64, FloatType::F64, Reason::Policy, false},
                          {Policy::F32, FloatType::F64, Reason::OutRequest, false},
                          {Policy::BF16, FloatType::F64, Reason::OutRequest, true},
                          {Policy::F16, FloatType::F64, Reason::OutRequest, true}};
  const Want out_f32[] = {{Policy::F64, FloatType::F64, Reason::Policy, false},
                          {Policy::F32, FloatType::F32, Reason::Policy, false},
                          {Policy::BF16, FloatType::F32, Reason::OutRequest, true},
                          {Policy::F16, FloatType::F32, Reason::OutRequest, true}};
  for (const auto& [let, wants] : {std::pair{"p64", out_f64}, std::pair{"p32", out_f32}}) {
    for (int i = 0; i < 4; ++i) {
      const Want& want = wants[i];
      Realized x;
      x.e = elaborate_text(source);
      ASSERT_TRUE(x.e->ok()) << x.e->rendered();
      x.r = realize(*x.e->prog, x.e->prog->find_function("f"), {want.policy, false}, {});
      const SiteType& st = x.site("f", let);
      const std::string at = fmt::format("{} under {}", let, policy_name(want.policy));
      EXPECT_EQ(st.storage, want.type) << at;
      EXPECT_EQ(st.accumulator, want.type) << at;
      EXPECT_EQ(st.reason, want.reason) << at;
      EXPECT_EQ(st.read_down, want.read_down) << at;
      if (want.read_down) {
        EXPECT_EQ(st.read_as, policy_type(want.policy)) << at;
      }
    }
  }
}

TEST(Realization, ParametersUnderAHalfPolicy) {
  Realized x = realize_under(Policy::BF16);
  EXPECT_EQ(x.param("w").stored, FloatType::F32);
  EXPECT_EQ(x.param("w").reason, Reason::Master);
  EXPECT_EQ(x.param("g").reason, Reason::ParamMark);
  // t is read only inside the bf16 region: stored in bf16, half the bytes.
  EXPECT_EQ(x.param("t").stored, FloatType::BF16);
  EXPECT_EQ(x.param("t").reason, Reason::Frozen);
  // u is read in an island: it stays f32.
  EXPECT_EQ(x.param("u").stored, FloatType::F32);
}

TEST(Realization, FrozenParameterReadOnlyInARegionTakesHalfTheBytes) {
  Realized x = realize_under(Policy::F32);
  const ParamStorage& t = x.param("t");
  EXPECT_EQ(t.stored, FloatType::BF16);
  // Bytes are counted at the stored type: 16 elements of bf16 against 16 of f32.
  int64_t t_bytes = 0, w_bytes = 0;
  for (const ParamStorage& p : x.r.params) {
    int64_t bytes = p.elements * runtime::float_type_info(p.stored).storage_bits / 8;
    if (p.path == "t") t_bytes = bytes;
    if (p.path == "w") w_bytes = bytes;
  }
  EXPECT_EQ(t_bytes, 32);
  EXPECT_EQ(w_bytes, 64);
  EXPECT_EQ(x.site("M.apply", "h").storage, FloatType::F32);
  EXPECT_FALSE(x.site("M.apply", "h").read_down);
  EXPECT_EQ(x.site("M.apply", "r").storage, FloatType::BF16);
}

TEST(Realization, F64PolicyKeepsEverythingWideButExplicitChoices) {
  Realized x = realize_under(Policy::F64);
  EXPECT_EQ(x.site("M.apply", "h").storage, FloatType::F64);
  EXPECT_EQ(x.site("M.apply", "s").storage, FloatType::F64);
  EXPECT_EQ(x.site("M.apply", "r").storage, FloatType::BF16);
  EXPECT_EQ(x.site("M.apply", "c").storage, FloatType::F16);
  EXPECT_EQ(x.param("w").stored, FloatType::F64);
}

TEST(Realization, AFunctionCalledInsideARegionIsRealizedInThatContext) {
  auto e = elaborate_text(R"(fn f(x : ℝ[4]) -> ℝ[4] = exp(x)
fn g(x : ℝ[4]) -> ℝ[4] =
  let a = f(x)
  let b = precision(f16) { f(x) }
  a + b
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  Realization r = realize(*e->prog, e->prog->find_function("g"), {Policy::F32, false}, {});
  int f = e->prog->find_function("f");
  const FunctionRealization* plain = r.find(f, core::Numerics::Default);
  const FunctionRealization* region = r.find(f, core::Numerics::RegionF16);
  ASSERT_TRUE(plain && region);
  int exp_site = e->prog->functions[f].result_value;
  EXPECT_EQ(plain->values[exp_site]->storage, FloatType::F32);
  EXPECT_EQ(region->values[exp_site]->storage, FloatType::F16);
  EXPECT_EQ(region->values[exp_site]->reason, Reason::Region);
}

TEST(Realization, NestedFormsInnermostWins) {
  auto e = elaborate_text(R"(fn g(x : ℝ[4]) -> (ℝ[4], ℝ[4]) =
  let a = precision(bf16) { numerics(high) { x * x } }
  let b = numerics(high) { precision(f16) { x * x } }
  (a, b)
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  for (Policy policy : {Policy::F32, Policy::BF16}) {
    Realization r = realize(*e->prog, e->prog->find_function("g"), {policy, false}, {});
    int g = e->prog->find_function("g");
    const FunctionRealization* t = r.find(g, core::Numerics::Default);
    ASSERT_TRUE(t);
    for (const core::Instr& in : e->prog->functions[g].body) {
      if (in.name == "a") {
        EXPECT_EQ(t->values[in.id]->storage, FloatType::F32);
        EXPECT_EQ(t->values[in.id]->reason, Reason::Island);
      }
      if (in.name == "b") {
        EXPECT_EQ(t->values[in.id]->storage, FloatType::F16);
        EXPECT_EQ(t->values[in.id]->reason, Reason::Region);
        EXPECT_TRUE(t->values[in.id]->read_down);
      }
    }
  }
}

// The prelude's marks: under bf16 softmax, cross-entropy and rms_norm's
// statistic are f32 library marks; rms_norm's output meets the bf16 input and
// comes back bf16, as F.rms_norm returns its input's dtype.
TEST(Realization, PreludeMarksAreLibraryIslands) {
  auto e = elaborate_text(R"(module M {
  param w : ℝ[8, 8]  init = xavier_uniform
  param γ : ℝ[8]     init = ones
  fn apply(x : ℝ[b: 2, 8]) -> (ℝ[b: 2, 8], ℝ[b: 2, 8], ℝ[]) =
    let h = x · w
    let n = rms_norm(h, γ)
    (softmax(h), n, sum(logsumexp(axis b, h)))
}
fn f(θ : params M, x : ℝ[b: 2, 8]) -> (ℝ[b: 2, 8], ℝ[b: 2, 8], ℝ[]) = M.apply(θ, x)
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  Realization r = realize(*e->prog, e->prog->find_function("f"), {Policy::BF16, false}, {});
  auto result_of = [&](const std::string& fn) -> const SiteType& {
    int f = e->prog->find_function(fn);
    const FunctionRealization* t = r.find(f, core::Numerics::Default);
    if (!t || !t->values[e->prog->functions[f].result_value]) throw std::runtime_error("no table for " + fn);
    return *t->values[e->prog->functions[f].result_value];
  };
  EXPECT_EQ(result_of("softmax").storage, FloatType::F32);
  EXPECT_EQ(result_of("softmax").reason, Reason::LibraryMark);
  EXPECT_EQ(result_of("rms_norm").storage, FloatType::BF16);
  EXPECT_EQ(result_of("rms_norm").reason, Reason::Policy);
  int rms = e->prog->find_function("rms_norm");
  const FunctionRealization* t = r.find(rms, core::Numerics::Default);
  for (const core::Instr& in : e->prog->functions[rms].body)
    if (in.name == "r") {
      EXPECT_EQ(t->values[in.id]->storage, FloatType::F32);
      EXPECT_EQ(t->values[in.id]->reason, Reason::LibraryMark);
    }
  // The built-in logsumexp reduction is sensitive too.
  int apply = e->prog->find_function("M.apply");
  const FunctionRealization* a = r.find(apply, core::Numerics::Default);
  bool seen = false;
  for (const core::Instr& in : e->prog->functions[apply].body)
    if (in.op == core::Op::LogSumExp) {
      seen = true;
      EXPECT_EQ(a->values[in.id]->storage, FloatType::F32);
      EXPECT_EQ(a->values[in.id]->reason, Reason::LibraryMark);
    }
  EXPECT_TRUE(seen);
}

bool is_real(const elab::Type& t) { return t.is_tensor() && t.tensor.elem == elab::Elem::Real; }

// The gradient is appended before the realization: its reverse sweep carries
// the forward marks (the backward of an island is an island), and a numerics
// form around a `grad` call realizes all that the call appends in its context.
TEST(Realization, TheGradientCarriesTheForwardMarks) {
  auto e = elaborate_text(R"(fn loss(x : ℝ[4], w : ℝ[4, 4]) -> ℝ[] =
  let h = x · w
  let s = numerics(high) { exp(h) }
  sum(s * h)
fn g(x : ℝ[4], w : ℝ[4, 4]) -> ℝ[4] = grad(loss)(x, w)
fn hg(x : ℝ[4], w : ℝ[4, 4]) -> ℝ[4] = numerics(high) { grad(loss)(x, w) }
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  const int vjp = e->prog->find_function("loss.vjp[0]");
  ASSERT_GE(vjp, 0);
  const core::Function& fn = e->prog->functions[vjp];
  const size_t forward = e->prog->functions[fn.primal].body.size();

  Realization plain = realize(*e->prog, e->prog->find_function("g"), {Policy::BF16, false}, {});
  const FunctionRealization* t = plain.find(vjp, core::Numerics::Default);
  ASSERT_TRUE(t);
  int marked = 0, unmarked_half = 0;
  for (size_t k = forward; k < fn.body.size(); ++k) {
    const core::Instr& in = fn.body[k];
    if (!t->values[in.id] || !is_real(in.type)) continue;
    if (in.numerics == core::Numerics::High) {
      ++marked;
      EXPECT_EQ(t->values[in.id]->storage, FloatType::F32) << core::site_name(fn, in.id);
    } else if (t->values[in.id]->storage == FloatType::BF16) {
      ++unmarked_half;
    }
  }
  EXPECT_GT(marked, 0) << "exp's rule carries its mark";
  EXPECT_GT(unmarked_half, 0) << "the rest of the backward is bf16";

  Realization high = realize(*e->prog, e->prog->find_function("hg"), {Policy::BF16, false}, {});
  EXPECT_EQ(high.find(vjp, core::Numerics::Default), nullptr);
  const FunctionRealization* h = high.find(vjp, core::Numerics::High);
  ASSERT_TRUE(h);
  for (const core::Instr& in : fn.body) {
    if (!h->values[in.id] || !is_real(in.type)) continue;
    EXPECT_NE(h->values[in.id]->storage, FloatType::BF16) << core::site_name(fn, in.id) << " under numerics(high)";
  }
}

TEST(Realization, JsonHasOneObjectPerSiteAndParameter) {
  Realized x = realize_under(Policy::BF16);
  auto j = realization_json(*x.e->prog, x.r);
  ASSERT_TRUE(j["sites"].is_array());
  for (const auto& s : j["sites"]) {
    EXPECT_TRUE(s.contains("site") && s.contains("op") && s.contains("type") && s.contains("reason"));
  }
  ASSERT_EQ(j["params"].size(), 4u);
  for (const auto& p : j["params"]) EXPECT_TRUE(p.contains("path") && p.contains("stored") && p.contains("reason"));
}

}  // namespace
}  // namespace quire::precision
