#include "quire/kernel/kernel_walk.h"

#include <functional>

namespace quire::kernel {

namespace {

bool names_expr(const Kernel& k, int e) { return e >= 0 && e < static_cast<int>(k.exprs.size()); }

}  // namespace

std::vector<std::pair<int, int>> assignments(const std::vector<Stmt>& body) {
  std::vector<std::pair<int, int>> sets;
  std::function<void(const std::vector<Stmt>&)> collect = [&](const std::vector<Stmt>& b) {
    for (const Stmt& s : b) {
      if (s.kind == StmtKind::Loop) collect(s.body);
      if (s.kind == StmtKind::Set) sets.emplace_back(s.scalar, s.expr);
    }
  };
  collect(body);
  return sets;
}

std::vector<int> statement_exprs(const std::vector<Stmt>& body) {
  std::vector<int> roots;
  std::function<void(const std::vector<Stmt>&)> walk = [&](const std::vector<Stmt>& b) {
    for (const Stmt& s : b) s.kind == StmtKind::Loop ? walk(s.body) : roots.push_back(s.expr);
  };
  walk(body);
  return roots;
}

std::vector<int> reached(const Kernel& k, std::vector<int> roots) {
  std::vector<int> out;
  std::vector<bool> seen(k.exprs.size(), false);
  while (!roots.empty()) {
    const int i = roots.back();
    roots.pop_back();
    if (!names_expr(k, i) || seen[static_cast<size_t>(i)]) continue;
    seen[static_cast<size_t>(i)] = true;
    out.push_back(i);
    const Expr& e = k.exprs[static_cast<size_t>(i)];
    roots.insert(roots.end(), {e.a, e.b, e.c});
  }
  return out;
}

const Expr* rounded_f32_unary(const Kernel& k, const Expr& e) {
  if (e.kind != ExprKind::Round || e.type != runtime::FloatType::F32 || !names_expr(k, e.a)) return nullptr;
  const Expr& op = k.exprs[static_cast<size_t>(e.a)];
  return op.kind == ExprKind::Unary ? &op : nullptr;
}

}  // namespace quire::kernel
