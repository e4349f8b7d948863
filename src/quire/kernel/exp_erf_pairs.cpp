// The exp sites that pair with an erf site of the same element (exp_erf_pairs.h).

#include "quire/kernel/exp_erf_pairs.h"

#include <optional>
#include <set>
#include <utility>

#include "quire/kernel/kernel_walk.h"

namespace quire::kernel {

namespace {

class PairFinder {
 public:
  explicit PairFinder(const Kernel& k) : k_(k) {}

  /// The scalars set exactly once among `body`'s statements (loops
  /// included), each with its expression.
  static std::map<int, int> single_sets(const std::vector<Stmt>& body) {
    std::map<int, int> once;
    std::set<int> twice;
    for (const auto& [scalar, expr] : assignments(body))
      if (!once.emplace(scalar, expr).second) twice.insert(scalar);
    for (int s : twice) once.erase(s);
    return once;
  }

  /// e, or the expression the scalar it reads is set to (and so on), per `sets`.
  int resolved(int e, const std::map<int, int>& sets) const {
    for (size_t hops = 0; hops <= sets.size() && valid_expr(e); ++hops) {
      const Expr& x = k_.exprs[static_cast<size_t>(e)];
      const auto it = x.kind == ExprKind::Scalar ? sets.find(x.scalar) : sets.end();
      if (it == sets.end()) return e;
      e = it->second;
    }
    return e;
  }

  /// Whether x and y compute the same value in one iteration: the same
  /// tree, scalars followed per `sets`, a product's operands in either order.
  /// It only decides a pairing: a wrong answer costs time, never bits.
  bool same_value(int x, int y, const std::map<int, int>& sets, int depth = 0) const {
    x = resolved(x, sets);
    y = resolved(y, sets);
    if (x == y) return valid_expr(x);
    if (!valid_expr(x) || !valid_expr(y) || depth > 32) return false;
    const Expr& a = k_.exprs[static_cast<size_t>(x)];
    const Expr& b = k_.exprs[static_cast<size_t>(y)];
    if (a.kind != b.kind) return false;
    auto same = [&](int p, int q) { return same_value(p, q, sets, depth + 1); };
    switch (a.kind) {
      case ExprKind::Const:
        return std::bit_cast<uint64_t>(a.value) == std::bit_cast<uint64_t>(b.value);
      case ExprKind::Load:
        return a.buffer == b.buffer && a.buffer != k_.output() && a.index.offset == b.index.offset &&
               a.index.terms == b.index.terms;
      case ExprKind::Scalar:
        return a.scalar == b.scalar;
      case ExprKind::Unary:
        return a.unary == b.unary && same(a.a, b.a);
      case ExprKind::Round:
        return a.type == b.type && same(a.a, b.a);
      case ExprKind::Binary:
        if (a.binary != b.binary) return false;
        if (same(a.a, b.a) && same(a.b, b.b)) return true;
        return (a.binary == runtime::BinaryOp::Mul || a.binary == runtime::BinaryOp::Add) && same(a.a, b.b) &&
               same(a.b, b.a);
      // Never asked of a pairing's arguments: not told apart, so not paired.
      case ExprKind::Where:
      case ExprKind::Fma:
      case ExprKind::Finite:
        return false;
    }
    return false;
  }

  /// The operands of e when e (scalars followed) is round_f32(p · q).
  std::optional<std::pair<int, int>> f32_product(int e, const std::map<int, int>& sets) const {
    e = resolved(e, sets);
    if (!valid_expr(e)) return std::nullopt;
    const Expr& r = k_.exprs[static_cast<size_t>(e)];
    if (r.kind != ExprKind::Round || r.type != runtime::FloatType::F32 || !valid_expr(r.a)) return std::nullopt;
    const Expr& m = k_.exprs[static_cast<size_t>(r.a)];
    if (m.kind != ExprKind::Binary || m.binary != runtime::BinaryOp::Mul) return std::nullopt;
    return std::make_pair(m.a, m.b);
  }

  /// Whether e reads inputs alone (no scalar, no load of the output), so
  /// that it has its value wherever in an iteration it is evaluated.
  bool from_inputs(int e) const {
    if (!valid_expr(e)) return false;
    const Expr& x = k_.exprs[static_cast<size_t>(e)];
    if (x.kind == ExprKind::Scalar || (x.kind == ExprKind::Load && x.buffer == k_.output())) return false;
    for (int o : {x.a, x.b, x.c})
      if (o >= 0 && !from_inputs(o)) return false;
    return true;
  }

  /// The exp sites of a fast block's `body` that pair with an erf site: exp
  /// site (its rounding's expression) → the erf's argument, as an
  /// expression of the inputs. A pair: the erf's argument is round_f32(x ·
  /// c) and the exp's round_f32(k · round_f32(x · x)), for one x.
  std::map<int, int> exp_partners(const std::vector<Stmt>& body) const {
    const std::map<int, int> sets = single_sets(body);
    const std::vector<int> computed = reached(k_, statement_exprs(body));
    // The argument a of round_f32(op(a)) at e, or -1.
    auto rounded_unary = [&](int e, runtime::UnaryOp op) {
      const Expr* u = rounded_f32_unary(k_, k_.exprs[static_cast<size_t>(e)]);
      return u && u->unary == op ? u->a : -1;
    };
    struct ErfArg {
      int u;     ///< resolved, and from the inputs alone
      int p, q;  ///< u = round_f32(p · q)
    };
    std::vector<ErfArg> erf_args;
    for (int e : computed) {
      const int u = resolved(rounded_unary(e, runtime::UnaryOp::Erf), sets);
      if (!valid_expr(u) || !from_inputs(u)) continue;
      if (const auto pq = f32_product(u, sets)) erf_args.push_back({u, pq->first, pq->second});
    }
    std::map<int, int> partners;
    for (int e : computed) {
      const auto w = f32_product(rounded_unary(e, runtime::UnaryOp::Exp), sets);
      if (!w) continue;
      for (int factor : {w->first, w->second}) {
        const auto square = f32_product(factor, sets);
        if (!square || !same_value(square->first, square->second, sets)) continue;
        for (const ErfArg& a : erf_args)
          if (same_value(a.p, square->first, sets) || same_value(a.q, square->first, sets)) partners.emplace(e, a.u);
      }
    }
    return partners;
  }

 private:
  bool valid_expr(int e) const { return e >= 0 && e < static_cast<int>(k_.exprs.size()); }

  const Kernel& k_;
};

}  // namespace

std::map<int, int> exp_erf_partners(const Kernel& k, const std::vector<Stmt>& body) {
  return PairFinder(k).exp_partners(body);
}

}  // namespace quire::kernel
