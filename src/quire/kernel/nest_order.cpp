#include "quire/kernel/nest_order.h"

#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "quire/kernel/kernel_interpreter.h"

namespace quire::kernel {

namespace {

// Unroll and jam: copy c of a statement reads the tiled loop's variable v
// as t·v + c and sets its own scalars (copy 0 keeps the original ones); a
// loop inside is shared, its body the jam of the copies' bodies.
class Jam {
 public:
  Jam(Kernel& k, int var, int tile, std::set<int> own) : k_(k), var_(var), tile_(tile), own_(std::move(own)) {}

  std::vector<Stmt> body(const std::vector<Stmt>& in) {
    std::vector<Stmt> out;
    for (const Stmt& s : in) {
      if (s.kind == StmtKind::Loop) {
        Stmt loop = s;
        loop.body = body(s.body);
        out.push_back(std::move(loop));
        continue;
      }
      for (int copy = 0; copy < tile_; ++copy) {
        Stmt r = s;
        if (s.kind == StmtKind::Set)
          r.scalar = scalar(s.scalar, copy);
        else
          r.index = index(s.index, copy);
        r.expr = expr(s.expr, copy);
        out.push_back(std::move(r));
      }
    }
    return out;
  }

 private:
  int scalar(int s, int copy) {
    if (copy == 0 || !own_.count(s)) return s;
    auto [it, added] = renamed_[copy].emplace(s, k_.scalars);
    if (added) ++k_.scalars;
    return it->second;
  }

  Affine index(Affine a, int copy) const {
    for (auto& [v, coeff] : a.terms)
      if (v == var_) {
        a.offset += coeff * copy;
        coeff *= tile_;
      }
    return a;
  }

  int expr(int e, int copy) {
    Expr x = k_.exprs.at(static_cast<size_t>(e));
    if (x.kind == ExprKind::Load) x.index = index(x.index, copy);
    if (x.kind == ExprKind::Scalar) x.scalar = scalar(x.scalar, copy);
    if (x.a >= 0) x.a = expr(x.a, copy);
    if (x.b >= 0) x.b = expr(x.b, copy);
    if (x.c >= 0) x.c = expr(x.c, copy);
    k_.exprs.push_back(std::move(x));
    return static_cast<int>(k_.exprs.size()) - 1;
  }

  Kernel& k_;
  int var_, tile_;
  std::set<int> own_;
  std::map<int, std::map<int, int>> renamed_;  ///< copy → (scalar → its copy's scalar)
};

}  // namespace

FoldNest fold_nest(const Kernel& k) {
  FoldNest f;
  const std::vector<const Stmt*> chain = independent_loops<const Stmt>(k);
  if (chain.size() < 2 || k.product || reads_output(k)) return f;
  const Stmt& outer = *chain[chain.size() - 2];
  const Stmt& inner = *chain.back();
  if (outer.body.size() != 1 || !holds_loop(inner.body)) return f;
  f.applies = true;
  f.outer = outer.extent;
  f.inner = inner.extent;
  return f;
}

std::vector<int> tiles_for(int64_t extent) {
  std::vector<int> tiles = {1};
  for (int t : {2, 4})
    if (extent >= t && extent % t == 0) tiles.push_back(t);
  return tiles;
}

Kernel reorder_nest(const Kernel& k, bool swap, int tile) {
  if (tile < 1) throw std::invalid_argument(fmt::format("kernel {}: a tile of {}", k.title, tile));
  if (!swap && tile == 1) return k;
  const FoldNest f = fold_nest(k);
  if (!f.applies) throw std::invalid_argument(fmt::format("kernel {}: no fold nest to reorder or tile", k.title));
  Kernel r = k;
  std::vector<Stmt*> chain = independent_loops<Stmt>(r);
  Stmt& outer = *chain[chain.size() - 2];
  Stmt& inner = *chain.back();
  if (swap) {
    // Perfectly nested and both independent: exchanging the headers is the interchange.
    std::swap(outer.var, inner.var);
    std::swap(outer.extent, inner.extent);
  }
  if (tile > 1) {
    if (outer.extent % tile != 0)
      throw std::invalid_argument(
          fmt::format("kernel {}: a tile of {} does not divide the loop's {} iterations", k.title, tile, outer.extent));
    Jam jam(r, outer.var, tile, scalars_set_in(outer.body));
    outer.body = jam.body(outer.body);
    outer.extent /= tile;
  }
  return r;
}

}  // namespace quire::kernel
