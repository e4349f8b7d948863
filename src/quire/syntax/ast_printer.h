#pragma once
// The syntax tree printed back in a canonical, fully parenthesized form: one
// declaration a line, members and body lines indented, every binary operation
// and cast in parentheses (so the printout shows how the parser grouped it),
// canonical spellings (`ℝ`, `·`, `θ`). Deterministic: `quire dump --stage ast`
// and golden tests print with it.

#include <string>

#include "quire/syntax/ast.h"

namespace quire::syntax {

/// The whole file, items in source order, each line ending in '\n'.
std::string print_ast(const ast::File& file);

/// One expression on one line: `((x · w) + b)`, `mean(axis model, (x ^ 2))`.
std::string print_expr(const ast::Expr& expr);

/// One type: `ℝ[batch: B, model: 4]`, `(ℝ[], i32[B])`, `params norm.RMSNorm{D}`.
std::string print_type(const ast::TypeExpr& type);

/// A module reference: `lin.Linear{D, D}`, `stack{L}(Block)`.
std::string print_modref(const ast::ModuleRef& ref);

}  // namespace quire::syntax
