// Fusion groups: the tutorial's, derived by hand from its Core (07_train.core.txt),
// each reason a value reaches memory on a small program, and the launch
// counts over one call of an entry.

#include "quire/kernel/fusion.h"
#include "quire/kernel/fusion_print.h"

#include <gtest/gtest.h>

#include "quire/core/printer.h"
#include "quire/elab/elab_testing.h"
#include "quire/grad/vjp.h"

namespace quire::kernel {
namespace {

using elab::testing::elaborate_text;
using elab::testing::elaborate_tutorial;
using elab::testing::Elaborated;

struct Fused {
  std::unique_ptr<Elaborated> e;
  Fusion f;

  const FunctionFusion& fn(const std::string& name) const {
    int index = e->prog->find_function(name);
    const FunctionFusion* ff = f.find(index);
    if (!ff) throw std::runtime_error("not fused: " + name);
    return *ff;
  }
  const core::Function& core_fn(const std::string& name) const { return e->fn(name); }

  /// Each group of two steps or more: "root = expression [inputs]".
  std::vector<std::string> groups(const std::string& name) const {
    const core::Function& cf = core_fn(name);
    std::vector<std::string> out;
    for (const FusionGroup& g : fn(name).groups) {
      if (g.steps.size() < 2) continue;
      std::string inputs;
      for (int i : g.inputs) inputs += (inputs.empty() ? "" : " ") + cf.value_name(i);
      out.push_back(cf.value_name(g.root()) + " = " + group_expression(cf, g) + " [" + inputs + "]" +
                    (g.epilogue ? " epilogue" : ""));
    }
    return out;
  }

  /// Every value reaching memory in `name`: "value reason reader", in body order.
  std::vector<std::string> stored(const std::string& name) const {
    const core::Function& cf = core_fn(name);
    std::vector<std::string> out;
    for (const StoredValue& s : fn(name).stored)
      out.push_back(cf.value_name(s.value) + " " + memory_reason_key(s.reason) +
                    (s.reader ? " " + cf.value_name(s.reader) : ""));
    return out;
  }
};

Fused fuse_text(const std::string& text, const std::string& entry, const std::map<std::string, int64_t>& dims = {}) {
  Fused out;
  out.e = elaborate_text(text);
  EXPECT_TRUE(out.e->ok()) << out.e->rendered();
  out.f = fuse(*out.e->prog, out.e->prog->find_function(entry), dims);
  return out;
}

Fused fuse_tutorial(bool gradient) {
  Fused out;
  out.e = elaborate_tutorial();
  EXPECT_TRUE(out.e->ok()) << out.e->rendered();
  int entry = out.e->prog->find_function("loss");
  if (gradient) entry = grad::vjp(*out.e->prog, entry, grad::differentiable_args(out.e->prog->functions[entry]));
  out.f = fuse(*out.e->prog, entry, {{"B", 4}});
  return out;
}

// ------------------------------------------------------------------ the tutorial

TEST(FusionTutorial, GroupsAndReasonsOfEveryFunction) {
  Fused t = fuse_tutorial(false);
  // Callees first, as core::reachable_functions orders them.
  std::vector<std::string> names;
  for (const FunctionFusion& ff : t.f.functions) names.push_back(t.e->prog->functions[ff.function].name);
  EXPECT_EQ(names, (std::vector<std::string>{"RMSNorm.apply", "Linear.apply", "Block.apply", "Tower.apply", "loss"}));

  // Linear.apply: %4 = dot x, w; %6 = add %4, b, the result. The dot's only
  // reader is the add, of its shape: the add is its epilogue.
  EXPECT_EQ(t.groups("Linear.apply"), (std::vector<std::string>{"%6 = dot(i0,i1);add(s0,i2) [x w b] epilogue"}));
  EXPECT_EQ(t.stored("Linear.apply"), (std::vector<std::string>{"%6 result"}));

  // RMSNorm.apply: %4 = pow 2 x is read by the mean (a reduction); ms itself
  // is read only by the add of its shape, but no group holds a reduction;
  // %7 = add ms, %6 and %8 = sqrt %7 are ℝ[...], which the div of
  // ℝ[..., model: D] reads; %9 = div and %11 = mul, the result, share a nest.
  EXPECT_EQ(t.groups("RMSNorm.apply"),
            (std::vector<std::string>{"%8 = add(i0,i1);sqrt(s0) [ms %6]", "%11 = div(i0,i1);mul(s0,i2) [x %8 γ]"}));
  EXPECT_EQ(t.stored("RMSNorm.apply"), (std::vector<std::string>{"%4 read_by_reduction ms", "ms not_element_wise",
                                                                 "%8 other_shape %9", "%11 result"}));

  // Block.apply: the gelu is read by the call of Linear.apply; the residual
  // add is the result.
  EXPECT_EQ(t.groups("Block.apply"), std::vector<std::string>{});
  EXPECT_EQ(t.stored("Block.apply"), (std::vector<std::string>{"%6 read_by_call %8", "%9 result"}));

  // Tower.apply only folds and calls.
  EXPECT_EQ(t.fn("Tower.apply").launches, 0);
  EXPECT_EQ(t.stored("Tower.apply"), std::vector<std::string>{});

  // loss: %6 = sub %5, y and %7 = pow 2 %6 share a nest, which the mean reads.
  EXPECT_EQ(t.groups("loss"), (std::vector<std::string>{"%7 = sub(i0,i1);pow 2(s0) [%5 y]"}));
  EXPECT_EQ(t.stored("loss"), (std::vector<std::string>{"%7 read_by_reduction %8", "%8 result"}));
}

TEST(FusionTutorial, LaunchCountsOverOneCall) {
  Fused t = fuse_tutorial(false);
  // Per function: launches without and with fusion, and evaluations per call
  // (Block.apply three times by the fold, Linear.apply once per block and once
  // as the head).
  struct Row {
    const char* name;
    int launches, fused;
    int64_t evaluations;
  };
  for (const Row& r : {Row{"RMSNorm.apply", 6, 4, 3}, Row{"Linear.apply", 2, 1, 4}, Row{"Block.apply", 2, 2, 3},
                       Row{"Tower.apply", 0, 0, 1}, Row{"loss", 3, 2, 1}}) {
    SCOPED_TRACE(r.name);
    EXPECT_EQ(t.fn(r.name).launches, r.launches);
    EXPECT_EQ(t.fn(r.name).fused_launches, r.fused);
    EXPECT_EQ(t.fn(r.name).evaluations, r.evaluations);
  }
  // 6·3 + 2·4 + 2·3 + 0 + 3 = 35; 4·3 + 1·4 + 2·3 + 0 + 2 = 24.
  EXPECT_EQ(t.f.launches, 35);
  EXPECT_EQ(t.f.fused_launches, 24);
  EXPECT_EQ(t.f.unknown, "");
}

TEST(FusionTutorial, TheGradientsReverseSweep) {
  Fused t = fuse_tutorial(true);
  // loss.vjp: %7 = sub is read by the pow (%8, alone: the mean reads it) and
  // by %12 = mul 2, %7, which shares a nest with %10 = expand_mean ct, %8
  // (the mean's share of ct, read through a broadcast; %8 gives its shape
  // only, and is an input, not a reader) and %13 = mul %10, %12; %13 is read
  // by the call of Tower.apply.vjp; %14 = neg %13 is a part of the result.
  EXPECT_EQ(t.groups("loss.vjp"),
            (std::vector<std::string>{"%13 = expand_mean(i0,i1);mul(i2,i3);mul(s0,s1) [ct %8 %11 %7]"}));
  EXPECT_EQ(t.stored("loss.vjp"), (std::vector<std::string>{"%7 several_groups", "%8 read_by_reduction %9", "%9 result",
                                                            "%13 read_by_call %15", "%14 result"}));
  EXPECT_EQ(t.fn("loss.vjp").launches, 7);
  EXPECT_EQ(t.fn("loss.vjp").fused_launches, 5);
  // Linear.apply.vjp: the forward's dot and add, then the three products of
  // the reverse sweep, each a part of the result tuple or tree.
  EXPECT_EQ(t.groups("Linear.apply.vjp"), (std::vector<std::string>{"%7 = dot(i0,i1);add(s0,i2) [x w b] epilogue"}));
  EXPECT_EQ(t.stored("Linear.apply.vjp"),
            (std::vector<std::string>{"%7 result", "%8 result", "%9 result", "%10 result"}));
  // Evaluations: loss.vjp calls Tower.apply and its vjp; each folds
  // Block.apply 3 times (the vjp's fold_vjp 3 times more, with Block.apply.vjp);
  // each Block.apply and Block.apply.vjp calls RMSNorm.apply and Linear.apply.
  struct Row {
    const char* name;
    int64_t evaluations;
  };
  for (const Row& r : {Row{"loss.vjp", 1}, Row{"Tower.apply", 1}, Row{"Tower.apply.vjp", 1}, Row{"Block.apply", 9},
                       Row{"Block.apply.vjp", 3}, Row{"RMSNorm.apply", 12}, Row{"RMSNorm.apply.vjp", 3},
                       Row{"Linear.apply", 14}, Row{"Linear.apply.vjp", 4}}) {
    SCOPED_TRACE(r.name);
    EXPECT_EQ(t.fn(r.name).evaluations, r.evaluations);
  }
  ASSERT_TRUE(t.f.launches && t.f.fused_launches);
  EXPECT_LT(*t.f.fused_launches, *t.f.launches);
}

// ------------------------------------------------------------------ each reason

TEST(FusionReasons, EachReasonOnASmallProgram) {
  const char* program = R"(module B {
  param w : ℝ[m: 4]
  fn apply(x : ℝ[..., m: 4]) -> ℝ[..., m: 4] = exp(x * w)
}
fn g(x : ℝ[n: 4]) -> ℝ[n: 4] = x * 2.0
fn call(x : ℝ[n: 4]) -> ℝ[n: 4] = g(exp(x))
fn fold(θ : params stack{3}(B), x : ℝ[m: 4]) -> ℝ[m: 4] = B.apply(θ, exp(x))
fn red(x : ℝ[n: 4]) -> ℝ[] = sum(exp(x))
fn prod(x : ℝ[a: 2, n: 4], w : ℝ[n: 4, o: 3]) -> ℝ[a: 2, o: 3] = exp(x) · w
fn mov(x : ℝ[a: 2, b: 3]) -> ℝ[b: 3, a: 2] = transpose(exp(x), axis a, axis b)
fn draw(k : key, p : f64) -> ℝ[n: 4] =
  let keep = bernoulli(k, 1.0 - real(p), n: 4)
  where(keep, 1.0, 0.0)
fn tup(x : ℝ[n: 4]) -> ℝ[n: 4] =
  let t = (exp(x), x)
  t.0 + t.1
fn shape(x : ℝ[a: 2, n: 4]) -> ℝ[a: 2, n: 4] = x * sqrt(mean(axis n, x))
fn unread(x : ℝ[n: 4]) -> ℝ[n: 4] =
  let u = exp(x)
  x + 1.0
fn returned(x : ℝ[n: 4]) -> (ℝ[n: 4], ℝ[n: 4]) =
  let e = exp(x)
  (e, e + 1.0)
)";
  struct Case {
    const char* fn;
    std::vector<std::string> stored;
  };
  for (const Case& c : {
           Case{"call", {"%2 read_by_call %3"}},
           Case{"fold", {"%3 read_by_fold %4"}},
           Case{"red", {"%2 read_by_reduction %3", "%3 result"}},
           Case{"prod", {"%3 read_by_product %4", "%4 result"}},
           Case{"mov", {"%2 read_by_data_movement %3", "%3 result"}},
           // 1 - real(p) is an ℝ[] launch; the draw reads it; the where reads the draw.
           Case{"draw", {"%5 read_by_draw keep", "keep not_element_wise", "%9 result"}},
           Case{"tup", {"%2 read_by_structure t", "%6 result"}},
           // sqrt(mean) is ℝ[a: 2], read by a mul of ℝ[a: 2, n: 4].
           Case{"shape", {"%2 not_element_wise", "%3 other_shape %4", "%4 result"}},
           Case{"unread", {"u unread", "%4 result"}},
           // A part of the returned tuple is the result even when a group reads it.
           Case{"returned", {"e result", "%4 result"}},
       }) {
    Fused t = fuse_text(program, c.fn);
    SCOPED_TRACE(c.fn);
    EXPECT_EQ(t.stored(c.fn), c.stored);
  }
}

TEST(FusionReasons, ReasonsInWords) {
  Fused t = fuse_tutorial(false);
  const core::Function& norm = t.core_fn("RMSNorm.apply");
  std::vector<std::string> why;
  for (const StoredValue& s : t.fn("RMSNorm.apply").stored) why.push_back(memory_reason_text(*t.e->prog, norm, s));
  EXPECT_EQ(why, (std::vector<std::string>{
                     "read by ms : ℝ[...] = mean axis model %4: a reduction", "not element-wise (a reduction)",
                     "read by %9 : ℝ[..., model: D] = div x, %8, of another shape", "the function's result"}));
}

// ------------------------------------------------------------------ groups

TEST(FusionGroups, AValueReadByTwoGroupsReachesMemory) {
  // a is read by b and by c, each alone in its group (a sum reads each).
  Fused t = fuse_text(R"(fn two(x : ℝ[n: 4]) -> ℝ[] =
  let a = exp(x)
  let b = a * 2.0
  let c = a + 1.0
  sum(b) + sum(c)
)",
                      "two");
  EXPECT_EQ(t.stored("two"),
            (std::vector<std::string>{"a several_groups", "b read_by_reduction %7", "c read_by_reduction %8",
                                      "%7 not_element_wise", "%8 not_element_wise", "%9 result"}));
  EXPECT_EQ(t.groups("two"), std::vector<std::string>{});
  EXPECT_EQ(t.fn("two").launches, 6);
  EXPECT_EQ(t.fn("two").fused_launches, 6);
}

TEST(FusionGroups, TheSizeLimitSplitsALongChain) {
  // 18 exps in a row: the last 16 fill one group; the second is refused by
  // it and starts another, which the first joins.
  std::string body = "x";
  for (int i = 0; i < 18; ++i) body = "exp(" + body + ")";
  Fused t = fuse_text("fn chain(x : ℝ[n: 4]) -> ℝ[n: 4] = " + body + "\n", "chain");
  const FunctionFusion& ff = t.fn("chain");
  ASSERT_EQ(ff.groups.size(), 2u);
  EXPECT_EQ(ff.groups[0].steps, (std::vector<int>{2, 3}));
  EXPECT_EQ(ff.groups[1].steps.size(), static_cast<size_t>(kMaxGroupSteps));
  EXPECT_EQ(ff.groups[1].steps.front(), 4);
  EXPECT_EQ(ff.groups[1].root(), 19);
  EXPECT_EQ(t.stored("chain"), (std::vector<std::string>{"%3 size_limit %4", "%19 result"}));
  EXPECT_EQ(ff.launches, 18);
  EXPECT_EQ(ff.fused_launches, 2);
}

TEST(FusionGroups, AProductTakesTheGroupThatAloneReadsItAsItsEpilogue) {
  // The group of the add, the relu and the mul is x·w's epilogue (the later
  // product: the walk goes from the last instruction back); x·v, read by the
  // same group, finds it taken.
  Fused t = fuse_text(R"(fn f(x : ℝ[a: 2, n: 4], w : ℝ[n: 4, o: 3], v : ℝ[n: 4, o: 3], b : ℝ[o: 3]) -> ℝ[a: 2, o: 3] =
  (x · v) * relu(x · w + b)
)",
                      "f");
  EXPECT_EQ(t.groups("f"),
            (std::vector<std::string>{"%9 = dot(i0,i1);add(s0,i2);relu(s1);mul(i3,s2) [x w b %5] epilogue"}));
  EXPECT_EQ(t.stored("f"), (std::vector<std::string>{"%5 product_taken %9", "%9 result"}));
  EXPECT_EQ(t.fn("f").launches, 5);
  EXPECT_EQ(t.fn("f").fused_launches, 2);
}

TEST(FusionGroups, AProductBeforeEarlierStepsComesFirst) {
  // e is computed before the dot, yet the dot is the group's first step: its
  // operands are inputs, so it depends on no other step.
  Fused t = fuse_text(R"(fn f(x : ℝ[a: 2, n: 4], w : ℝ[n: 4, o: 3], y : ℝ[a: 2, o: 3]) -> ℝ[a: 2, o: 3] =
  let e = exp(y)
  (x · w) + e
)",
                      "f");
  EXPECT_EQ(t.groups("f"), (std::vector<std::string>{"%6 = dot(i0,i1);exp(i2);add(s0,s1) [x w y] epilogue"}));
}

TEST(FusionGroups, BroadcastScalarsAreInputsNotMembers) {
  // real(s) · 2 is an ℝ[] launch; the group of ℝ[n: 4] reads it and the
  // constant 1 as inputs.
  Fused t = fuse_text("fn scal(x : ℝ[n: 4], s : f64) -> ℝ[n: 4] = x * (real(s) * 2.0) + 1.0\n", "scal");
  EXPECT_EQ(t.groups("scal"), (std::vector<std::string>{"%8 = mul(i0,i1);add(s0,i2) [x %5 %7]"}));
  EXPECT_EQ(t.stored("scal"), (std::vector<std::string>{"%5 other_shape %6", "%8 result"}));
  // real is not a launch: the mul of two scalars and the group.
  EXPECT_EQ(t.fn("scal").launches, 3);
  EXPECT_EQ(t.fn("scal").fused_launches, 2);
}

TEST(FusionGroups, NotLaunches) {
  Fused t = fuse_text("fn f(x : ℝ[n: 4], s : f64) -> (ℝ[], ℝ[n: 4]) = (real(s), x)\n", "f");
  EXPECT_EQ(t.fn("f").launches, 0);
  EXPECT_EQ(t.fn("f").stored.size(), 0u);
}

// ------------------------------------------------------------------ launch counts

const char* kStack = R"(dim L
module B {
  param w : ℝ[m: 4]
  fn apply(x : ℝ[..., m: 4]) -> ℝ[..., m: 4] = exp(x * w)
}
fn inner(θ : params stack{L}(B), x : ℝ[m: 4]) -> ℝ[m: 4] = B.apply(θ, x)
fn outer(θ : params stack{L}(B), x : ℝ[m: 4]) -> ℝ[m: 4] = inner(θ, inner(θ, exp(x)))
)";

TEST(FusionLaunches, AFoldsCopyCountMultipliesItsCallee) {
  // outer: 1 launch; calls inner twice; inner folds L copies of B.apply (2
  // launches, 1 fused). At L = 5: 1 + 2·5·2 = 21 launches, 1 + 2·5·1 = 11.
  Fused t = fuse_text(kStack, "outer", {{"L", 5}});
  EXPECT_EQ(t.fn("inner").evaluations, 2);
  EXPECT_EQ(t.fn("B.apply").evaluations, 10);
  EXPECT_EQ(t.f.launches, 21);
  EXPECT_EQ(t.f.fused_launches, 11);
}

TEST(FusionLaunches, AnUnboundFoldCountLeavesTheTotalsUnknown) {
  Fused t = fuse_text(kStack, "outer");
  EXPECT_FALSE(t.f.launches.has_value());
  EXPECT_FALSE(t.fn("B.apply").evaluations.has_value());
  EXPECT_EQ(t.fn("inner").evaluations, 2);
  EXPECT_EQ(t.f.unknown, "the fold inner/%3 runs L copies: give --dim L=N");
  // The groups do not depend on the dimensions.
  EXPECT_EQ(t.groups("B.apply"), (std::vector<std::string>{"%5 = mul(i0,i1);exp(s0) [x w]"}));
  EXPECT_NE(print_fusion(*t.e->prog, t.f).find("The launches over one call are unknown: the fold inner/%3"),
            std::string::npos);
}

TEST(FusionLaunches, ThePrintoutAndJsonAgree) {
  Fused t = fuse_tutorial(false);
  const std::string text = print_fusion(*t.e->prog, t.f);
  EXPECT_NE(text.find("  %8 = add(i0,i1);sqrt(s0) [2 inputs, 2 steps] i0 = ms, i1 = %6\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Over one call, fusion takes 35 launches to 24.\n"), std::string::npos) << text;
  nlohmann::ordered_json j = fusion_json(*t.e->prog, t.f);
  EXPECT_EQ(j["entry"], "loss");
  EXPECT_EQ(j["launches"], 35);
  EXPECT_EQ(j["fused_launches"], 24);
  EXPECT_EQ(j["functions"][0]["name"], "RMSNorm.apply");
  EXPECT_EQ(j["functions"][0]["groups"][0]["expression"], "add(i0,i1);sqrt(s0)");
  EXPECT_EQ(j["functions"][0]["stored"][2]["reason"], "other_shape");
  EXPECT_EQ(j["functions"][0]["stored"][2]["reader"], "RMSNorm.apply/%9");
  // Deterministic: a second run prints the same.
  EXPECT_EQ(print_fusion(*t.e->prog, fuse(*t.e->prog, t.f.entry, {{"B", 4}})), text);
}

}  // namespace
}  // namespace quire::kernel
