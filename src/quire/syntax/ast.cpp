#include "quire/syntax/ast.h"

namespace quire::ast {

Expr::~Expr() {
  std::vector<ExprPtr> pending;
  auto detach = [&pending](Expr& e) {
    for (ExprPtr& c : e.children)
      if (c) pending.push_back(std::move(c));
    for (Arg& a : e.args)
      if (a.value) pending.push_back(std::move(a.value));
    for (Let& l : e.lets)
      if (l.value) pending.push_back(std::move(l.value));
  };
  detach(*this);
  while (!pending.empty()) {
    ExprPtr e = std::move(pending.back());
    pending.pop_back();
    detach(*e);
  }  // each node is freed here with no expression below it
}

const char* binary_op_spelling(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "+";
    case BinaryOp::Sub: return "-";
    case BinaryOp::Mul: return "*";
    case BinaryOp::Div: return "/";
    case BinaryOp::Pow: return "^";
    case BinaryOp::Dot: return "·";
    case BinaryOp::Lt: return "<";
    case BinaryOp::Le: return "≤";
    case BinaryOp::Gt: return ">";
    case BinaryOp::Ge: return "≥";
    case BinaryOp::Eq: return "==";
    case BinaryOp::Ne: return "≠";
  }
  return "?";
}

const char* expr_kind_name(ExprKind kind) {
  switch (kind) {
    case ExprKind::Number: return "Number";
    case ExprKind::Bool: return "Bool";
    case ExprKind::String: return "String";
    case ExprKind::Name: return "Name";
    case ExprKind::Member: return "Member";
    case ExprKind::TupleIndex: return "TupleIndex";
    case ExprKind::Call: return "Call";
    case ExprKind::Binary: return "Binary";
    case ExprKind::Unary: return "Unary";
    case ExprKind::Cast: return "Cast";
    case ExprKind::Tuple: return "Tuple";
    case ExprKind::Block: return "Block";
    case ExprKind::Numerics: return "Numerics";
    case ExprKind::Precision: return "Precision";
  }
  return "?";
}

}  // namespace quire::ast
