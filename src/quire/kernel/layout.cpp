#include "quire/kernel/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <tuple>

#include "quire/kernel/nest_order.h"
#include "quire/runtime/gemm.h"

namespace quire::kernel {

namespace {

// Whether the expression evaluates a costly function, charged as a call of
// `call_seconds` each: the C library's log, tanh and pow (one scalar call per
// evaluation, which the vectorizer does not widen without fast-math) and
// quire's own exp and erf (runtime/elementary.h: inline and vectorized, but
// every range of them evaluated, tens of operations each).
bool library_call(const Expr& e) {
  if (e.kind == ExprKind::Binary) return e.binary == runtime::BinaryOp::Pow;
  if (e.kind != ExprKind::Unary) return false;
  switch (e.unary) {
    case runtime::UnaryOp::Exp:
    case runtime::UnaryOp::Log:
    case runtime::UnaryOp::Tanh:
    case runtime::UnaryOp::Erf:
    case runtime::UnaryOp::Sigmoid:
    case runtime::UnaryOp::Gelu:
    case runtime::UnaryOp::GeluTanh:
    case runtime::UnaryOp::Silu:
    case runtime::UnaryOp::Log1p:
    case runtime::UnaryOp::Expm1:
    case runtime::UnaryOp::Softplus:
      return true;
    default: return false;
  }
}

// Loads whose index steps by more than one element along the loop around
// them (a column of a row-major operand, read down a fold), by buffer.
void strided_loads(const Kernel& k, const std::vector<Stmt>& body, int inner_var, int64_t times,
                   std::vector<int64_t>& by_buffer) {
  for (const Stmt& s : body) {
    if (s.kind == StmtKind::Loop) {
      strided_loads(k, s.body, s.var, times * s.extent, by_buffer);
      continue;
    }
    (void)count_in_expr(k, s.expr, [&](const Expr& e) -> int64_t {
      if (e.kind != ExprKind::Load) return 0;
      for (auto [var, coeff] : e.index.terms)
        if (var == inner_var && (coeff > 1 || coeff < -1)) by_buffer.at(static_cast<size_t>(e.buffer)) += times;
      return 0;
    });
  }
}

// Loads and stores one run of `body` makes, and of those loads the ones
// that step by more than one element along `lane_var` (the loop lanes go
// on: gathered). Within the statements of one loop body a load of the same
// element is made once: the compiler keeps it in a register (a tile's
// copies share the row of `b` they read).
std::pair<int64_t, int64_t> moved_in(const Kernel& k, const std::vector<Stmt>& body, int lane_var) {
  std::set<std::pair<int, std::vector<int64_t>>> loads;
  int64_t moved = 0, gathered = 0;
  for (const Stmt& s : body) {
    if (s.kind == StmtKind::Loop) {
      const auto [m, g] = moved_in(k, s.body, lane_var);
      moved += s.extent * m;
      gathered += s.extent * g;
      continue;
    }
    (void)count_in_expr(k, s.expr, [&](const Expr& e) -> int64_t {
      if (e.kind != ExprKind::Load) return 0;
      std::vector<int64_t> at = {e.index.offset};
      for (auto [var, coeff] : e.index.terms) at.insert(at.end(), {var, coeff});
      if (!loads.emplace(e.buffer, std::move(at)).second) return 0;
      ++moved;
      for (auto [var, coeff] : e.index.terms)
        if (var == lane_var && (coeff > 1 || coeff < -1)) ++gathered;
      return 0;
    });
    if (s.kind == StmtKind::Store) ++moved;
  }
  return {moved, gathered};
}

}  // namespace

Stmt* lane_loop(Kernel& k, int lanes) {
  std::vector<Stmt*> chain = independent_loops<Stmt>(k);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    if ((*it)->extent >= lanes) return *it;
  return nullptr;
}

NestFacts nest_facts(const Kernel& k) {
  NestFacts f;
  f.ops = kernel_flops(k);
  const std::vector<const Stmt*> chain = independent_loops<const Stmt>(k);
  std::tie(f.moved, f.gathered) = moved_in(k, k.body, chain.empty() ? -1 : chain.back()->var);
  for (const Buffer& b : k.buffers) f.bytes += runtime::element_count(b.shape) * 8;
  std::vector<int64_t> strided(k.buffers.size(), 0);
  strided_loads(k, k.body, -1, 1, strided);
  for (size_t b = 0; b < strided.size(); ++b)
    if (strided[b] > 0) f.strided.push_back({runtime::element_count(k.buffers[b].shape) * 8, strided[b]});
  f.fresh = runtime::element_count(k.buffers.back().shape) * 8;
  f.calls = count_executed(k, k.body, [&](const Stmt& s) {
    return count_in_expr(k, s.expr, [](const Expr& e) -> int64_t { return library_call(e) ? 1 : 0; });
  });
  if (const Stmt* s = split_loop(k)) f.split_extent = s->extent;
  for (const Stmt* s : chain) f.independent.push_back(s->extent);
  return f;
}

std::string layout_text(const Layout& l) {
  return fmt::format("{}{}{}lanes {}, split {}", l.pack ? "packed product, " : "",
                     l.tile > 1 ? fmt::format("tile {}, ", l.tile) : "", l.swap ? "order JI, " : "", l.lanes,
                     l.split > 1 ? std::to_string(l.split) : "none");
}

int64_t product_tile_columns(const machine::Profile& profile) {
  // The tile of the machine the profile describes, read from its widest
  // vector register, never from the processor making the plan: a plan
  // depends on its profile alone (an AVX2 machine planning under the shipped
  // AVX-512 profile makes the AVX-512 machine's plan).
  native::GemmPath path = native::GemmPath::Portable;
  if (profile.vector_bytes >= 64) path = native::GemmPath::Avx512;
  if (profile.vector_bytes == 32) path = native::GemmPath::Avx2;
#if defined(__aarch64__)
  if (profile.vector_bytes == 16) path = native::GemmPath::Neon;
#endif
  return native::sgemm_tile_columns(path);
}

double packed_flops(const PackedProduct& p, const machine::Profile& profile) {
  const double batch = static_cast<double>(runtime::element_count(p.batch));
  // sgemm computes whole register tiles across the columns: a product
  // narrower than a tile pays for the tile (its panels are zero-padded).
  const int64_t tile = product_tile_columns(profile);
  const int64_t columns = (p.n + tile - 1) / tile * tile;
  return 2 * batch * static_cast<double>(p.m) * static_cast<double>(columns) * static_cast<double>(p.k);
}

CostTerms predict(const NestFacts& f, const Layout& l, const machine::Profile& p, double product_flops) {
  if (!p.layout) throw std::invalid_argument("the profile has no layout model");
  const machine::LayoutModel& m = *p.layout;
  const double split = l.split;
  const double lanes = l.lanes > 1 ? m.lane_speedup : 1.0;
  CostTerms c;
  c.launch = m.launch_seconds;
  c.spawn = l.split > 1 ? m.spawn_seconds * (l.pack ? 2 : 1) : 0.0;
  if (l.pack) c.product = m.packed_flops > 0 ? product_flops / (m.packed_flops * split) : HUGE_VAL;
  c.work = static_cast<double>(f.ops) * m.op_seconds / lanes / split;
  // A gathered load (lanes reading elements apart) gains nothing from the lanes.
  const double gathered = l.lanes > 1 ? static_cast<double>(f.gathered) : 0.0;
  c.loads = ((static_cast<double>(f.moved) - gathered) / lanes + gathered) * m.load_seconds / split;
  c.calls = static_cast<double>(f.calls) * m.call_seconds / split;
  c.fresh = static_cast<double>(f.fresh) * m.fresh_seconds;
  // The working set names the level; a strided load from a buffer larger
  // than L1 adds a line of its own (a smaller one stays in L1), shared by
  // the lanes, which read neighbouring elements of it (a row of the operand
  // a fold walks down).
  double bytes = static_cast<double>(f.bytes);
  for (auto [buffer_bytes, loads] : f.strided)
    if (buffer_bytes > p.caches.l1) bytes += static_cast<double>(loads) * p.caches.line / l.lanes;
  if (f.bytes <= p.caches.l2)
    c.l2 = bytes / (p.l2_bandwidth * split);  // private caches: each worker streams its own part
  else if (f.bytes <= p.caches.l3)
    c.l3 = bytes / p.l3_bandwidth;
  else
    c.mem = bytes / p.memory_bandwidth;
  const double traffic = c.l2 + c.l3 + c.mem;
  c.total = c.launch + c.spawn + c.fresh + c.product +
            std::pow(std::pow(c.work, m.p) + std::pow(c.loads, m.p) + std::pow(c.calls, m.p) + std::pow(traffic, m.p),
                     1.0 / m.p);
  if (l.split > 1) {
    // The pool's caller claims parts until the workers come (runtime/workers.h),
    // so a split launch costs at most what the caller alone would take.
    Layout unsplit = l;
    unsplit.split = 1;
    CostTerms alone = predict(f, unsplit, p, product_flops);
    if (alone.total <= c.total) {
      alone.bound_by = "spawn";
      return alone;
    }
  }
  const std::pair<const char*, double> terms[] = {{"launch", c.launch}, {"spawn", c.spawn}, {"fresh", c.fresh}, {"product", c.product},
                                                  {"work", c.work},     {"loads", c.loads}, {"calls", c.calls},
                                                  {"l2", c.l2},         {"l3", c.l3},       {"mem", c.mem}};
  double largest = -1;
  for (const auto& [name, v] : terms)
    if (v > largest) {
      largest = v;
      c.bound_by = name;
    }
  return c;
}

std::vector<Layout> layout_space(const NestFacts& f, const machine::Profile& p) {
  std::vector<int> lanes = {1};
  const int vector_lanes = p.vector_bytes / 8;
  const bool fills = std::any_of(f.independent.begin(), f.independent.end(),
                                 [&](int64_t extent) { return extent >= vector_lanes; });
  if (vector_lanes > 1 && fills) lanes.push_back(vector_lanes);
  std::vector<int> splits = {1};
  for (int t = 2; t <= p.cores; ++t)
    if (f.split_extent >= t) splits.push_back(t);
  std::vector<Layout> space;
  for (int l : lanes)
    for (int s : splits) space.push_back(Layout{l, s});
  return space;
}

KernelPlan plan_kernel(const Kernel& k, const machine::Profile& p, int threads, const Kernel* packed) {
  if (!p.layout)
    throw std::invalid_argument(fmt::format("the profile `{}` has no layout model (a version 1 file): run `quire "
                                            "profile calibrate`",
                                            p.name));
  KernelPlan plan;
  plan.facts = nest_facts(k);
  for (const Layout& l : layout_space(plan.facts, p))
    if (l.split <= std::max(1, threads)) plan.ranked.push_back(RankedLayout{l, predict(plan.facts, l, p)});
  // A fold nest's orders and tiles: each reordered nest costed on its own facts.
  const FoldNest nest = fold_nest(k);
  if (nest.applies)
    for (bool swap : {false, true})
      for (int tile : tiles_for(swap ? nest.inner : nest.outer)) {
        if (!swap && tile == 1) continue;
        const NestFacts facts = nest_facts(reorder_nest(k, swap, tile));
        for (Layout l : layout_space(facts, p)) {
          if (l.split > std::max(1, threads)) continue;
          l.swap = swap;
          l.tile = tile;
          plan.ranked.push_back(RankedLayout{l, predict(facts, l, p)});
        }
      }
  if (packed && packed->product && p.layout->packed_flops > 0) {
    plan.packed_facts = nest_facts(*packed);
    const double flops = packed_flops(*packed->product, p);
    // The product divides its rows over the split's threads: offered up to the cores.
    NestFacts space = *plan.packed_facts;
    space.split_extent = std::max(space.split_extent, packed->product->m);
    for (Layout l : layout_space(space, p)) {
      if (l.split > std::max(1, threads)) continue;
      l.pack = true;
      plan.ranked.push_back(RankedLayout{l, predict(*plan.packed_facts, l, p, flops)});
    }
  }
  std::stable_sort(plan.ranked.begin(), plan.ranked.end(), [](const RankedLayout& a, const RankedLayout& b) {
    if (a.cost.total != b.cost.total) return a.cost.total < b.cost.total;
    if (a.layout.pack != b.layout.pack) return !a.layout.pack;
    if (a.layout.tile != b.layout.tile) return a.layout.tile < b.layout.tile;
    if (a.layout.swap != b.layout.swap) return !a.layout.swap;
    if (a.layout.lanes != b.layout.lanes) return a.layout.lanes < b.layout.lanes;
    return a.layout.split < b.layout.split;
  });
  const double best = plan.ranked.front().cost.total;
  for (const RankedLayout& r : plan.ranked)
    if (r.cost.total <= best * (1 + p.layout->error)) ++plan.undecided;
  return plan;
}

void apply_layout(Kernel& k, const Layout& l) {
  if (l.swap || l.tile > 1) k = reorder_nest(k, l.swap, l.tile);
  if (l.lanes > 1)
    if (Stmt* s = lane_loop(k, l.lanes)) s->lanes = l.lanes;
  // A packed product divides its rows over the split even where its nest has no split loop.
  k.split = split_loop(k) || (l.pack && k.product) ? l.split : 1;
}

}  // namespace quire::kernel
