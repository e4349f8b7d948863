#pragma once
// Walks over a kernel's statements and expression trees that more than one
// reader of the kernel IR needs (the C emitter, exp_erf_pairs.h).

#include <utility>
#include <vector>

#include "quire/kernel/kernel_ir.h"

namespace quire::kernel {

/// Every (scalar, expression) a `Set` among `body`'s statements assigns,
/// loops included, in statement order.
std::vector<std::pair<int, int>> assignments(const std::vector<Stmt>& body);

/// The expression each statement of `body` (loops included) computes: the
/// roots of its trees.
std::vector<int> statement_exprs(const std::vector<Stmt>& body);

/// The expressions of `k` in the trees of `roots`, each once, operands that
/// name no expression left out.
std::vector<int> reached(const Kernel& k, std::vector<int> roots);

/// The unary operation when `e` is round_f32(op(a)), else nullptr.
const Expr* rounded_f32_unary(const Kernel& k, const Expr& e);

}  // namespace quire::kernel
