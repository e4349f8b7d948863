// The layout plan: what it reads off a kernel, the space it offers, the cost
// model's terms computed by hand, the ranking, and where a layout lands.

#include "quire/kernel/layout.h"

#include <gtest/gtest.h>

#include <cmath>

#include "quire/io/io_error.h"
#include "quire/kernel/kernel_interpreter.h"
#include "quire/kernel/nest_order.h"

namespace quire::kernel {
namespace {

/// out[i, j] = in[i, j] * in[i, j] + 1 over [rows, cols]: both loops independent.
Kernel square_plus_one(int64_t rows, int64_t cols) {
  KernelBuilder b("mul+add");
  const int in = b.buffer(ElemType::F32, {rows, cols});
  const int out = b.buffer(ElemType::F32, {rows, cols});
  Stmt outer;
  outer.kind = StmtKind::Loop;
  outer.var = b.new_loop_var();
  outer.extent = rows;
  outer.independent = true;
  Stmt inner = outer;
  inner.var = b.new_loop_var();
  inner.extent = cols;
  const Affine at{0, {{outer.var, cols}, {inner.var, 1}}};
  const int x = b.load(in, at);
  Stmt store;
  store.kind = StmtKind::Store;
  store.buffer = out;
  store.index = at;
  store.expr = b.round(runtime::FloatType::F32,
                       b.binary(runtime::BinaryOp::Add, b.binary(runtime::BinaryOp::Mul, x, x), b.constant(1.0)));
  inner.body.push_back(store);
  outer.body.push_back(inner);
  b.kernel().body.push_back(outer);
  return b.take();
}

/// c[i, j] = Σ_p a[i, p] · b[p, j] over [m, n] and k, each step rounded to
/// f32: the lowering's fold nest (two independent loops around the fold).
Kernel product_nest(int64_t m, int64_t n, int64_t k) {
  KernelBuilder b("dot");
  const int a = b.buffer(ElemType::F32, {m, k});
  const int w = b.buffer(ElemType::F32, {k, n});
  const int out = b.buffer(ElemType::F32, {m, n});
  auto loop = [&](int64_t extent, bool independent) {
    Stmt s;
    s.kind = StmtKind::Loop;
    s.var = b.new_loop_var();
    s.extent = extent;
    s.independent = independent;
    return s;
  };
  Stmt rows = loop(m, true), cols = loop(n, true), fold = loop(k, false);
  const int acc = b.new_scalar();
  auto set = [&](int scalar, int expr) {
    Stmt s;
    s.kind = StmtKind::Set;
    s.scalar = scalar;
    s.expr = expr;
    return s;
  };
  const runtime::FloatType f32 = runtime::FloatType::F32;
  const int term = b.round(f32, b.binary(runtime::BinaryOp::Mul, b.load(a, Affine{0, {{rows.var, k}, {fold.var, 1}}}),
                                         b.load(w, Affine{0, {{fold.var, n}, {cols.var, 1}}})));
  fold.body.push_back(set(acc, b.round(f32, b.binary(runtime::BinaryOp::Add, b.scalar(acc), term))));
  cols.body.push_back(set(acc, b.constant(0.0)));
  cols.body.push_back(fold);
  Stmt store;
  store.kind = StmtKind::Store;
  store.buffer = out;
  store.index = Affine{0, {{rows.var, n}, {cols.var, 1}}};
  store.expr = b.scalar(acc);
  cols.body.push_back(store);
  rows.body.push_back(cols);
  b.kernel().body.push_back(rows);
  return b.take();
}

machine::Profile model_profile() {
  machine::Profile p;
  p.name = "hand";
  p.cores = 4;
  p.memory_bandwidth = 1e10;
  p.vector_bytes = 64;
  p.caches.l2 = 1 << 20;
  p.caches.l3 = 8 << 20;
  p.l2_bandwidth = 1e11;
  p.l3_bandwidth = 5e10;
  machine::LayoutModel m;
  m.launch_seconds = 1e-7;
  m.spawn_seconds = 1e-5;
  m.op_seconds = 1e-9;
  m.load_seconds = 5e-10;
  m.lane_speedup = 4;
  m.p = 1;
  m.error = 0.1;
  p.layout = m;
  return p;
}

TEST(Layout, FactsCountTheNest) {
  const NestFacts f = nest_facts(square_plus_one(64, 3));
  EXPECT_EQ(f.ops, 64 * 3 * 2);       // a product and a sum per element; the rounding is not counted
  EXPECT_EQ(f.moved, 64 * 3 * 2);     // a load (x read twice: a register holds it) and a store per element
  EXPECT_EQ(f.bytes, 2 * 64 * 3 * 8);  // both buffers, held as 8-byte elements
  EXPECT_EQ(f.split_extent, 64);
  EXPECT_EQ(f.independent, (std::vector<int64_t>{64, 3}));
  EXPECT_EQ(f.calls, 0);
  EXPECT_EQ(f.fresh, 64 * 3 * 8);
}

TEST(Layout, LibraryCallsAndTheFreshOutputHaveTermsOfTheirOwn) {
  KernelBuilder b("exp");
  const int in = b.buffer(ElemType::F64, {100});
  const int out = b.buffer(ElemType::F64, {100});
  Stmt loop;
  loop.kind = StmtKind::Loop;
  loop.var = b.new_loop_var();
  loop.extent = 100;
  loop.independent = true;
  Stmt store;
  store.kind = StmtKind::Store;
  store.buffer = out;
  store.index = Affine{0, {{loop.var, 1}}};
  store.expr = b.unary(runtime::UnaryOp::Exp, b.load(in, store.index));
  loop.body.push_back(store);
  b.kernel().body.push_back(loop);
  const NestFacts f = nest_facts(b.take());
  EXPECT_EQ(f.calls, 100);
  machine::Profile p = model_profile();
  p.layout->call_seconds = 2e-8;
  p.layout->fresh_seconds = 1e-10;
  p.layout->spawn_seconds = 0;  // so that the split pays
  const CostTerms scalar = predict(f, Layout{1, 1}, p), wide = predict(f, Layout{8, 2}, p);
  EXPECT_DOUBLE_EQ(scalar.calls, 100 * 2e-8);
  EXPECT_DOUBLE_EQ(wide.calls, 100 * 2e-8 / 2);  // a split divides the calls; lanes do not
  EXPECT_DOUBLE_EQ(scalar.fresh, 800 * 1e-10);
  EXPECT_DOUBLE_EQ(wide.fresh, 800 * 1e-10);  // allocated before the launch, on one thread
  EXPECT_STREQ(scalar.bound_by, "calls");
}

/// out[j] = Σ_k in[k, j] over [n, n]: a column read down the fold, a load
/// that steps n elements along its loop.
Kernel column_sums(int64_t n) {
  KernelBuilder b("sum axis 0");
  const int in = b.buffer(ElemType::F32, {n, n});
  const int out = b.buffer(ElemType::F32, {n});
  Stmt outer;
  outer.kind = StmtKind::Loop;
  outer.var = b.new_loop_var();
  outer.extent = n;
  outer.independent = true;
  const int s = b.new_scalar();
  Stmt zero;
  zero.kind = StmtKind::Set;
  zero.scalar = s;
  zero.expr = b.constant(0.0);
  Stmt fold;
  fold.kind = StmtKind::Loop;
  fold.var = b.new_loop_var();
  fold.extent = n;
  Stmt step = zero;
  step.expr = b.binary(runtime::BinaryOp::Add, b.scalar(s), b.load(in, Affine{0, {{fold.var, n}, {outer.var, 1}}}));
  fold.body.push_back(step);
  Stmt store;
  store.kind = StmtKind::Store;
  store.buffer = out;
  store.index = Affine{0, {{outer.var, 1}}};
  store.expr = b.scalar(s);
  outer.body = {zero, fold, store};
  b.kernel().body.push_back(outer);
  return b.take();
}

TEST(Layout, StridedLoadsBeyondL1AddALineEach) {
  const NestFacts f = nest_facts(column_sums(64));
  ASSERT_EQ(f.strided.size(), 1u);
  EXPECT_EQ(f.strided[0], (std::pair<int64_t, int64_t>{64 * 64 * 8, 64 * 64}));
  EXPECT_TRUE(nest_facts(square_plus_one(64, 3)).strided.empty());
  machine::Profile p = model_profile();
  p.caches.line = 64;
  p.caches.l1 = 64 * 64 * 8;  // the operand stays in L1: no line of its own
  const double held = predict(f, Layout{1, 1}, p).l2;
  EXPECT_DOUBLE_EQ(held, static_cast<double>(f.bytes) / 1e11);
  p.caches.l1 = 1024;
  EXPECT_DOUBLE_EQ(predict(f, Layout{1, 1}, p).l2, (static_cast<double>(f.bytes) + 64.0 * 64 * 64) / 1e11);
}

TEST(Layout, APackedVariantJoinsTheSpaceWhereTheProfileKnowsItsRate) {
  const Kernel plain = column_sums(64);
  Kernel packed = square_plus_one(64, 1);  // stands for the nest that reads the packed result
  packed.product = PackedProduct{};
  packed.product->m = 64;
  packed.product->n = 1;
  packed.product->k = 64;
  machine::Profile p = model_profile();
  const size_t plain_points = plan_kernel(plain, p, 4).ranked.size();
  EXPECT_EQ(plan_kernel(plain, p, 4, &packed).ranked.size(), plain_points);  // no rate: not offered
  p.layout->packed_flops = 1e9;
  const KernelPlan plan = plan_kernel(plain, p, 4, &packed);
  ASSERT_GT(plan.ranked.size(), plain_points);
  ASSERT_TRUE(plan.packed_facts.has_value());
  bool found = false;
  for (const RankedLayout& r : plan.ranked)
    if (r.layout.pack && r.layout.split == 1 && r.layout.lanes == 1) {
      found = true;
      EXPECT_DOUBLE_EQ(r.cost.product, 2.0 * 64 * 32 * 64 / 1e9);  // one column, computed as a tile of 32
      const double nest = predict(*plan.packed_facts, Layout{1, 1}, p).total;
      EXPECT_NEAR(r.cost.total - r.cost.product, nest, nest * 1e-12);  // the nest's terms, plus the product
      EXPECT_EQ(layout_text(r.layout), "packed product, lanes 1, split none");
    }
  EXPECT_TRUE(found);
  EXPECT_DOUBLE_EQ(packed_flops(*packed.product, p), 2.0 * 64 * 32 * 64);
  packed.product->n = 33;  // two tiles
  EXPECT_DOUBLE_EQ(packed_flops(*packed.product, p), 2.0 * 64 * 64 * 64);
  // The tile is the profile's machine's, whatever processor plans: AVX2's 16 columns.
  machine::Profile avx2 = p;
  avx2.vector_bytes = 32;
  EXPECT_DOUBLE_EQ(packed_flops(*packed.product, avx2), 2.0 * 64 * 48 * 64);
  EXPECT_EQ(product_tile_columns(avx2), 16);
}

TEST(Layout, TheSpaceOffersLanesWhereALoopFillsThemAndSplitsUpToTheCores) {
  const machine::Profile p = model_profile();
  EXPECT_EQ(layout_space(nest_facts(square_plus_one(64, 3)), p).size(), 2u * 4u);  // lanes {1, 8} × split {1..4}
  EXPECT_EQ(layout_space(nest_facts(square_plus_one(3, 5)), p).size(), 1u * 3u);   // no loop of 8; split ≤ 3
  EXPECT_EQ(layout_space(nest_facts(square_plus_one(1, 1)), p).size(), 1u);
}

TEST(Layout, PredictionsFollowTheModelTermByTerm) {
  const machine::Profile p = model_profile();
  const NestFacts f = nest_facts(square_plus_one(64, 3));
  const CostTerms scalar = predict(f, Layout{1, 1}, p);
  EXPECT_DOUBLE_EQ(scalar.launch, 1e-7);
  EXPECT_EQ(scalar.spawn, 0);
  EXPECT_DOUBLE_EQ(scalar.work, 384 * 1e-9);
  EXPECT_DOUBLE_EQ(scalar.loads, 384 * 5e-10);
  EXPECT_DOUBLE_EQ(scalar.l2, 3072 / 1e11);  // fits in L2
  EXPECT_EQ(scalar.l3 + scalar.mem, 0);
  EXPECT_DOUBLE_EQ(scalar.total, 1e-7 + 384e-9 + 384 * 5e-10 + 3072 / 1e11);  // p = 1: a sum
  EXPECT_STREQ(scalar.bound_by, "work");
  // Spawn (10 µs) outweighs what a split saves here: the caller runs both
  // parts itself, so the point costs what the unsplit one does.
  const CostTerms wide = predict(f, Layout{8, 2}, p);
  EXPECT_DOUBLE_EQ(wide.total, predict(f, Layout{8, 1}, p).total);
  EXPECT_EQ(wide.spawn, 0);
  EXPECT_STREQ(wide.bound_by, "spawn");
  // Where the split pays, it divides the work and L2's traffic and adds spawn.
  machine::Profile quick = p;
  quick.layout->spawn_seconds = 1e-8;
  const CostTerms split = predict(f, Layout{8, 2}, quick);
  EXPECT_DOUBLE_EQ(split.spawn, 1e-8);
  EXPECT_DOUBLE_EQ(split.work, 384 * 1e-9 / 4 / 2);
  EXPECT_DOUBLE_EQ(split.l2, 3072 / (1e11 * 2));
  EXPECT_LT(split.total, predict(f, Layout{8, 1}, quick).total);
  // A working set beyond L3 streams from memory, which a split does not widen.
  const CostTerms big = predict(nest_facts(square_plus_one(1024, 1024)), Layout{1, 2}, p);
  EXPECT_DOUBLE_EQ(big.mem, 2.0 * 1024 * 1024 * 8 / 1e10);
}

TEST(Layout, ThePlanRanksEveryPointAndIsDeterministic) {
  const machine::Profile p = model_profile();
  const Kernel small = square_plus_one(64, 3);
  const KernelPlan plan = plan_kernel(small, p, 4);
  ASSERT_EQ(plan.ranked.size(), 8u);
  for (size_t i = 1; i < plan.ranked.size(); ++i) EXPECT_LE(plan.ranked[i - 1].cost.total, plan.ranked[i].cost.total);
  // Small: a split's spawn outweighs what it divides; lanes pay.
  EXPECT_EQ(plan.chosen(), (Layout{8, 1}));
  int within = 0;
  for (const RankedLayout& r : plan.ranked) within += r.cost.total <= plan.ranked[0].cost.total * 1.1 ? 1 : 0;
  EXPECT_EQ(plan.undecided, within);
  // Large: the split pays for its spawn.
  EXPECT_EQ(plan_kernel(square_plus_one(4096, 512), p, 4).chosen(), (Layout{8, 4}));
  // At most the threads allowed.
  EXPECT_EQ(plan_kernel(square_plus_one(4096, 512), p, 2).chosen(), (Layout{8, 2}));
  const KernelPlan again = plan_kernel(small, p, 4);
  for (size_t i = 0; i < plan.ranked.size(); ++i) EXPECT_EQ(again.ranked[i].layout, plan.ranked[i].layout);
}

TEST(Layout, AVersionOneProfileHasNoPlan) {
  machine::Profile p = model_profile();
  p.layout.reset();
  EXPECT_THROW(plan_kernel(square_plus_one(4, 4), p, 1), std::invalid_argument);
}

TEST(Layout, LanesLandOnTheInnermostLoopThatFillsThem) {
  Kernel wide = square_plus_one(4, 64);
  apply_layout(wide, Layout{8, 2});
  EXPECT_EQ(wide.body[0].lanes, 1);
  EXPECT_EQ(wide.body[0].body[0].lanes, 8);
  EXPECT_EQ(wide.split, 2);
  // The inner loop is too short for 8 lanes: the outer one takes them.
  Kernel narrow = square_plus_one(64, 4);
  apply_layout(narrow, Layout{8, 1});
  EXPECT_EQ(narrow.body[0].lanes, 8);
  EXPECT_EQ(narrow.body[0].body[0].lanes, 1);
  EXPECT_EQ(narrow.split, 1);
  EXPECT_NE(print_kernel(narrow).find("for i0 in 0..64 independent lanes 8 {"), std::string::npos)
      << print_kernel(narrow);
}

TEST(Layout, TheShippedProfileHasALayoutModel) {
  const machine::Profile& p = machine::shipped_profile();
  ASSERT_TRUE(p.layout.has_value());
  EXPECT_EQ(p.name, "ci-2core-avx512");
  EXPECT_EQ(p.cores, 2);
  EXPECT_GT(p.layout->points, 0);
  // What the file says is what is compiled in.
  const machine::Profile file = machine::read_profile(std::string(QUIRE_SOURCE_DIR) + "/profiles/ci-2core-avx512.json");
  EXPECT_EQ(file.layout->op_seconds, p.layout->op_seconds);
  EXPECT_EQ(file.memory_bandwidth, p.memory_bandwidth);
  // It offers packed products.
  EXPECT_GT(p.layout->packed_flops, 0);
  EXPECT_EQ(file.layout->packed_flops, p.layout->packed_flops);
}

}  // namespace
}  // namespace quire::kernel

namespace quire::kernel {
namespace {

TEST(Layout, AFoldNestOffersEachOrderAndTileWithTheKernelsBits) {
  const Kernel k = product_nest(8, 12, 5);
  const FoldNest nest = fold_nest(k);
  ASSERT_TRUE(nest.applies);
  EXPECT_EQ(nest.outer, 8);
  EXPECT_EQ(nest.inner, 12);
  EXPECT_FALSE(fold_nest(square_plus_one(8, 8)).applies) << "no fold inside";
  EXPECT_EQ(tiles_for(12), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(tiles_for(6), (std::vector<int>{1, 2}));
  EXPECT_EQ(tiles_for(1), (std::vector<int>{1}));
  EXPECT_THROW((void)reorder_nest(k, false, 3), std::invalid_argument) << "3 does not divide 8";
  EXPECT_THROW((void)reorder_nest(square_plus_one(8, 8), true, 1), std::invalid_argument);

  // Every order and tile computes what the nest computes, bit for bit.
  runtime::Tensor a = runtime::Tensor::real({8, 5}), w = runtime::Tensor::real({5, 12});
  for (size_t i = 0; i < a.reals.size(); ++i) a.reals[i] = static_cast<float>(0.1 * static_cast<double>(i) - 1.7);
  for (size_t i = 0; i < w.reals.size(); ++i) w.reals[i] = static_cast<float>(1.3 - 0.07 * static_cast<double>(i));
  const runtime::Tensor want = run_kernel(k, {&a, &w});
  for (bool swap : {false, true})
    for (int tile : tiles_for(swap ? nest.inner : nest.outer)) {
      const Kernel r = reorder_nest(k, swap, tile);
      EXPECT_EQ(run_kernel(r, {&a, &w}).reals, want.reals) << "order " << (swap ? "JI" : "IJ") << ", tile " << tile;
    }

  // A tile of 4 rows loads each element of b once for the 4: per step of the
  // fold 4 loads of a and 1 of b instead of 4 and 4.
  const NestFacts plain = nest_facts(k), tiled = nest_facts(reorder_nest(k, false, 4));
  EXPECT_EQ(plain.moved, 8 * 12 * (5 * 2 + 1));
  EXPECT_EQ(tiled.moved, 2 * 12 * (5 * (4 + 1) + 4));
  EXPECT_EQ(plain.ops, tiled.ops);
  // Order JI puts the rows innermost, where the lanes go: a's loads step by
  // k along them (gathered), b's do not move.
  EXPECT_EQ(plain.gathered, 0);
  EXPECT_EQ(nest_facts(reorder_nest(k, true, 1)).gathered, 8 * 12 * 5);

  // The plan offers them all and prints them.
  const KernelPlan plan = plan_kernel(k, model_profile(), 1);
  int tiled_points = 0, swapped_points = 0;
  for (const RankedLayout& r : plan.ranked) {
    tiled_points += r.layout.tile > 1;
    swapped_points += r.layout.swap;
  }
  // Orders × tiles: IJ {1, 2, 4} and JI {1, 2, 4}, each with lanes 1 and 8 (12 columns, 8 rows fill them).
  EXPECT_EQ(plan.ranked.size(), 12u);
  EXPECT_EQ(tiled_points, 8);
  EXPECT_EQ(swapped_points, 6);
  EXPECT_EQ(layout_text(Layout{8, 2, false, true, 4}), "tile 4, order JI, lanes 8, split 2");
  EXPECT_EQ(layout_text(Layout{8, 1, false, false, 2}), "tile 2, lanes 8, split none");
  EXPECT_EQ(plan.chosen().swap, false) << "the columns stay innermost, under the lanes";
}

}  // namespace
}  // namespace quire::kernel
