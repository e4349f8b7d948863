#include "quire/syntax/ast.h"

namespace quire::ast {

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
