// Library kernels in the compiled program: the prelude's attention,
// causal_attention and causal_self_attention (with dropout and without),
// layer_norm and dropout_add_layer_norm (with dropout and without), forward
// and gradient, run as one library kernel each
// under f32 with fused product steps, with the reference interpreter's bits
// (the lines, one instruction at a time) under either remat; under every
// other policy they run their lines, and the host says why.

#include "quire/compile/library_kernel.h"

#include <gtest/gtest.h>

#include "quire/compile/compile.h"
#include "quire/compile/executor.h"
#include "quire/kernel/engine.h"
#include "quire/kernel/kernel_testing.h"

namespace quire::compile {
namespace {

using interp::Value;

constexpr const char* kAttention = R"(dim T
dim S
fn causal(q : ℝ[b: 2, t: T, d: 8], k : ℝ[b: 2, s: S, d: 8], v : ℝ[b: 2, s: S, e: 4], w : ℝ[b: 2, t: T, e: 4]) -> ℝ[] =
  sum(causal_attention(q, k, v) * w)
fn plain(q : ℝ[b: 2, t: T, d: 8], k : ℝ[b: 2, s: S, d: 8], v : ℝ[b: 2, s: S, e: 4], w : ℝ[b: 2, t: T, e: 4]) -> ℝ[] =
  sum(attention(q, k, v) * w)
fn causal_dq(q : ℝ[b: 2, t: T, d: 8], k : ℝ[b: 2, s: S, d: 8], v : ℝ[b: 2, s: S, e: 4], w : ℝ[b: 2, t: T, e: 4]) -> ℝ[b: 2, t: T, d: 8] =
  grad(causal)(q, k, v, w)
fn causal_dk(q : ℝ[b: 2, t: T, d: 8], k : ℝ[b: 2, s: S, d: 8], v : ℝ[b: 2, s: S, e: 4], w : ℝ[b: 2, t: T, e: 4]) -> ℝ[b: 2, s: S, d: 8] =
  grad(causal, wrt = k)(q, k, v, w)
fn causal_dv(q : ℝ[b: 2, t: T, d: 8], k : ℝ[b: 2, s: S, d: 8], v : ℝ[b: 2, s: S, e: 4], w : ℝ[b: 2, t: T, e: 4]) -> ℝ[b: 2, s: S, e: 4] =
  grad(causal, wrt = v)(q, k, v, w)
fn plain_dk(q : ℝ[b: 2, t: T, d: 8], k : ℝ[b: 2, s: S, d: 8], v : ℝ[b: 2, s: S, e: 4], w : ℝ[b: 2, t: T, e: 4]) -> ℝ[b: 2, s: S, d: 8] =
  grad(plain, wrt = k)(q, k, v, w)
fn mha(qkv : ℝ[b: 2, t: T, c: 24], w : ℝ[b: 2, t: T, 8], k : key) -> ℝ[] =
  sum(causal_self_attention(qkv, iota(h: 2), 0.1, k) * w)
fn mha_nodrop(qkv : ℝ[b: 2, t: T, c: 24], w : ℝ[b: 2, t: T, 8], k : key) -> ℝ[] =
  sum(causal_self_attention(qkv, iota(h: 2), 0.0, k) * w)
fn mha_dqkv(qkv : ℝ[b: 2, t: T, c: 24], w : ℝ[b: 2, t: T, 8], k : key) -> ℝ[b: 2, t: T, c: 24] =
  grad(mha)(qkv, w, k)
fn mha_nodrop_dqkv(qkv : ℝ[b: 2, t: T, c: 24], w : ℝ[b: 2, t: T, 8], k : key) -> ℝ[b: 2, t: T, c: 24] =
  grad(mha_nodrop)(qkv, w, k)
fn ln(x : ℝ[b: 3, t: T, d: 16], g : ℝ[d: 16], bb : ℝ[d: 16], w : ℝ[b: 3, t: T, d: 16]) -> ℝ[] =
  sum(layer_norm(x, g, bb, 1e-3) * w)
fn ln_dx(x : ℝ[b: 3, t: T, d: 16], g : ℝ[d: 16], bb : ℝ[d: 16], w : ℝ[b: 3, t: T, d: 16]) -> ℝ[b: 3, t: T, d: 16] =
  grad(ln)(x, g, bb, w)
fn ln_dg(x : ℝ[b: 3, t: T, d: 16], g : ℝ[d: 16], bb : ℝ[d: 16], w : ℝ[b: 3, t: T, d: 16]) -> ℝ[d: 16] =
  grad(ln, wrt = g)(x, g, bb, w)
fn ln_db(x : ℝ[b: 3, t: T, d: 16], g : ℝ[d: 16], bb : ℝ[d: 16], w : ℝ[b: 3, t: T, d: 16]) -> ℝ[d: 16] =
  grad(ln, wrt = bb)(x, g, bb, w)
fn res(k : key, y : ℝ[b: 3, t: T, d: 16], x : ℝ[b: 3, t: T, d: 16], g : ℝ[d: 16], bb : ℝ[d: 16], w : ℝ[b: 3, t: T, d: 16]) -> ℝ[] =
  let (s, n) = dropout_add_layer_norm(k, y, 0.25, x, g, bb, 1e-3)
  sum(s * w) + sum(n * y)
fn res_dy(k : key, y : ℝ[b: 3, t: T, d: 16], x : ℝ[b: 3, t: T, d: 16], g : ℝ[d: 16], bb : ℝ[d: 16], w : ℝ[b: 3, t: T, d: 16]) -> ℝ[b: 3, t: T, d: 16] =
  grad(res, wrt = y)(k, y, x, g, bb, w)
fn res_dx(k : key, y : ℝ[b: 3, t: T, d: 16], x : ℝ[b: 3, t: T, d: 16], g : ℝ[d: 16], bb : ℝ[d: 16], w : ℝ[b: 3, t: T, d: 16]) -> ℝ[b: 3, t: T, d: 16] =
  grad(res, wrt = x)(k, y, x, g, bb, w)
fn res_dg(k : key, y : ℝ[b: 3, t: T, d: 16], x : ℝ[b: 3, t: T, d: 16], g : ℝ[d: 16], bb : ℝ[d: 16], w : ℝ[b: 3, t: T, d: 16]) -> ℝ[d: 16] =
  grad(res, wrt = g)(k, y, x, g, bb, w)
fn res_db(k : key, y : ℝ[b: 3, t: T, d: 16], x : ℝ[b: 3, t: T, d: 16], g : ℝ[d: 16], bb : ℝ[d: 16], w : ℝ[b: 3, t: T, d: 16]) -> ℝ[d: 16] =
  grad(res, wrt = bb)(k, y, x, g, bb, w)
fn res_nodrop(k : key, y : ℝ[b: 3, t: T, d: 16], x : ℝ[b: 3, t: T, d: 16], g : ℝ[d: 16], bb : ℝ[d: 16]) -> ℝ[] =
  let (s, n) = dropout_add_layer_norm(k, y, 0.0, x, g, bb)
  sum(n * s)
fn res_nodrop_dy(k : key, y : ℝ[b: 3, t: T, d: 16], x : ℝ[b: 3, t: T, d: 16], g : ℝ[d: 16], bb : ℝ[d: 16]) -> ℝ[b: 3, t: T, d: 16] =
  grad(res_nodrop, wrt = y)(k, y, x, g, bb)
fn row(x : ℝ[d: 5], g : ℝ[d: 5], bb : ℝ[d: 5], w : ℝ[d: 5]) -> ℝ[] =
  sum(layer_norm(x, g, bb) * w)
fn row_dx(x : ℝ[d: 5], g : ℝ[d: 5], bb : ℝ[d: 5], w : ℝ[d: 5]) -> ℝ[d: 5] =
  grad(row)(x, g, bb, w)
)";

struct Ran {
  Value kernels, reference;
  int64_t library_launches = 0;
  std::string listing;
};

Ran run(const elab::Program& prog, int fn, const std::vector<Value>& args, const std::map<std::string, int64_t>& dims,
        const precision::RealizeOptions& o, interp::Remat remat) {
  CompileRequest request;
  request.entry = fn;
  request.dims = dims;
  request.realize = o;
  request.remat = remat;
  request.threads = 2;
  request.arguments = &args;
  const CompiledProgram c = compile(prog, request);
  Ran r;
  interp::Interpreter reference(prog, dims, c.realization.get());
  reference.set_remat(remat);
  r.reference = reference.call(fn, args);
  kernel::InterpretingRunner runner;
  kernel::KernelEngine engine(c.catalog, runner);
  Executor executor(prog, c, engine);
  r.kernels = executor.call(args);
  r.library_launches = c.host.library_launches;
  r.listing = print_kernels(prog, c.host);
  return r;
}

precision::RealizeOptions f32_fused() {
  precision::RealizeOptions o;
  o.policy = precision::Policy::F32;
  o.fused_products = true;
  return o;
}

TEST(LibraryKernel, AttentionAndItsGradientsRunAsOneKernelEachWithTheLinesBits) {
  // T = 1; T within a block; T across blocks and not a multiple of one; S
  // other than T both ways.
  const int64_t b = runtime::kAttentionBlockRows;
  interp::testing::Program p(kAttention);
  for (auto [T, S] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 7}, {b + 9, b + 9}, {b + 3, 5}, {5, b + 3}}) {
    const std::map<std::string, int64_t> dims = {{"T", T}, {"S", S}};
    for (const char* entry : {"causal", "plain", "causal_dq", "causal_dk", "causal_dv", "plain_dk", "mha", "mha_nodrop",
                              "mha_dqkv", "mha_nodrop_dqkv", "ln", "ln_dx", "ln_dg", "ln_db", "row", "row_dx", "res", "res_dy", "res_dx", "res_dg", "res_db",
                              "res_nodrop", "res_nodrop_dy"}) {
      const int fn = p.index(entry);
      const std::vector<Value> args = kernel::testing::drawn_arguments(p.prog(), fn, dims);
      for (interp::Remat remat : {interp::Remat::Store, interp::Remat::Recompute}) {
        SCOPED_TRACE(testing::Message() << entry << " at T = " << T << ", S = " << S << ", remat "
                                        << (remat == interp::Remat::Store ? "store" : "recompute"));
        const Ran r = run(p.prog(), fn, args, dims, f32_fused(), remat);
        kernel::testing::expect_same(r.kernels, r.reference, entry);
        const bool gradient = std::string(entry).find("_d") != std::string::npos;
        EXPECT_EQ(r.library_launches, gradient ? 2 : 1) << r.listing;
        EXPECT_NE(r.listing.find("one library kernel"), std::string::npos) << r.listing;
      }
    }
  }
}

TEST(LibraryKernel, UnderEveryOtherPolicyTheLinesRunAndTheListingSaysWhy) {
  interp::testing::Program p(kAttention);
  const std::map<std::string, int64_t> dims = {{"T", 9}, {"S", 9}};
  const int fn = p.index("causal_dq");
  const std::vector<Value> args = kernel::testing::drawn_arguments(p.prog(), fn, dims);
  for (const precision::RealizeOptions& o : kernel::testing::every_policy()) {
    if (o.policy == precision::Policy::F32 && o.fused_products) continue;
    SCOPED_TRACE(precision::policy_name(o.policy) + std::string(o.fused_products ? " fma" : "") +
                 (o.half_intermediates ? " half-intermediates" : ""));
    const Ran r = run(p.prog(), fn, args, dims, o, interp::Remat::Store);
    kernel::testing::expect_same(r.kernels, r.reference, "causal_dq");
    EXPECT_EQ(r.library_launches, 0);
    EXPECT_NE(r.listing.find("its lines, not the library kernel: "), std::string::npos) << r.listing;
  }
}

TEST(LibraryKernel, TheRealizeStageNamesALayerNormOfADropoutSumWrittenOut) {
  interp::testing::Program p(R"(fn apart(k : key, x : ℝ[t: 4, d: 8], y : ℝ[t: 4, d: 8], g : ℝ[d: 8], b : ℝ[d: 8]) -> ℝ[] =
  let a = x + dropout(k, y, 0.1)
  sum(layer_norm(a, g, b)) + sum(layer_norm(dropout(k, y, 0.1) + x, g, b)) + sum(layer_norm(x + y, g, b))
fn together(k : key, x : ℝ[t: 4, d: 8], y : ℝ[t: 4, d: 8], g : ℝ[d: 8], b : ℝ[d: 8]) -> ℝ[] =
  let (s, n) = dropout_add_layer_norm(k, y, 0.1, x, g, b)
  sum(n) + apart(k, x, y, g, b) + sum(grad(apart, wrt = x)(k, x, y, g, b))
)");
  const int fn = p.index("together");
  const std::vector<Value> args = kernel::testing::drawn_arguments(p.prog(), fn, {});
  CompileRequest request;
  request.entry = fn;
  request.realize = f32_fused();
  request.arguments = &args;
  const CompiledProgram c = compile(p.prog(), request);
  ASSERT_TRUE(c.realization);
  const std::vector<ResidualNormHint> hints = residual_norm_hints(p.prog(), *c.realization);
  // Both orders of the add in `apart`; not the plain sum, not the fused
  // call, and not again in apart's vjp, whose forward lines are apart's.
  ASSERT_EQ(hints.size(), 2u);
  for (const ResidualNormHint& h : hints) EXPECT_EQ(h.function, p.index("apart"));
  const std::string text = print_library_plan(p.prog(), *c.realization);
  EXPECT_NE(text.find("-- residual norms not fused: the layer norm of a sum with a dropout\n  apart/%"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("dropout_add_layer_norm (-, f32, -, f32, f32, f32, -): one library kernel"), std::string::npos)
      << text;
  const nlohmann::ordered_json json = library_plan_json(p.prog(), *c.realization);
  int named = 0;
  for (const auto& e : json) named += e.contains("value") && e["function"] == "apart";
  EXPECT_EQ(named, 2) << json.dump(2);
}

TEST(LibraryKernel, ACompileWithoutLibraryKernelsRunsTheLines) {
  interp::testing::Program p(kAttention);
  const std::map<std::string, int64_t> dims = {{"T", 9}, {"S", 9}};
  const int fn = p.index("causal_dq");
  const std::vector<Value> args = kernel::testing::drawn_arguments(p.prog(), fn, dims);
  CompileRequest request;
  request.entry = fn;
  request.dims = dims;
  request.realize = f32_fused();
  request.arguments = &args;
  request.library_kernels = false;
  const CompiledProgram c = compile(p.prog(), request);
  EXPECT_EQ(c.host.library_launches, 0);
  EXPECT_GT(c.host.kernel_launches, 10);
}

}  // namespace
}  // namespace quire::compile
