#pragma once
// Core: the program in A-normal form, one typed operation per line.
//
// A value is numbered %n within its function: the arguments first (θ is %1 in
// a module's function), then one number per instruction in order. A site is
// `<function>/%<n>`; that name is stable across runs and every later stage keys
// its results by it. An instruction may carry its source name (`ms`), printed
// in place of %n, but its site stays `/%n`.
//
// Invariants (checked by verify()): every operand is defined before use in
// the same function; an instruction's operand count matches its op's arity;
// element-wise instructions carry one alignment per operand; it carries the
// attribute family ops.def names for its op (core/attrs.h).

#include <cstdint>
#include <stdexcept>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "quire/core/attrs.h"
#include "quire/core/type.h"
#include "quire/support/source.h"

namespace quire::core {

enum class Op : uint8_t {
#define QUIRE_OP(E, N, S, A, REG, FLAGS, ATTRS) E,
#include "quire/core/ops.def"
#undef QUIRE_OP
};

enum class Regularity : uint8_t { Discontinuous = 0, Continuous = 1, Smooth = 2 };
const char* regularity_name(Regularity r);  // "C∞", "C⁰", "discontinuous"

/// The flags column of ops.def, whose header says what each one means.
namespace op_flag {
inline constexpr uint16_t NoFlags = 0, Elementwise = 1 << 0, Reduction = 1 << 1, Product = 1 << 2, Copies = 1 << 3,
                          StoredDirectly = 1 << 4, Selects = 1 << 5, Compares = 1 << 6, Draws = 1 << 7,
                          Calls = 1 << 8;
}  // namespace op_flag

/// One row of the operation table (ops.def), its flags spelled out.
struct OpInfo {
  const char* name;      ///< unique: files name the operation so
  const char* spelling;  ///< as printed: max and min name two operations each
  int arity;
  Regularity regularity;
  bool elementwise;
  bool reduction;
  bool product;
  bool copies;
  bool stored_directly;
  bool selects;
  bool compares;
  bool draws;
  bool calls;
  size_t attrs;  ///< the index in Attrs of the family its instructions carry
};
const OpInfo& op_info(Op op);
/// The operation named `name` ("contract", "reduce_max"), if any.
std::optional<Op> op_by_name(std::string_view name);

/// The innermost numerics form an instruction was created in: none,
/// `numerics(high) { … }`, or `precision(bf16|f16) { … }`. The precision
/// policy reads these marks; the f64 interpreter ignores them.
enum class Numerics : uint8_t { Default, High, RegionBf16, RegionF16 };
const char* numerics_name(Numerics n);

struct Instr {
  Op op = Op::Const;
  int id = 0;                 ///< the value's number %n
  std::string name;           ///< its source name (`ms`), or empty
  elab::Type type;
  std::vector<int> args;      ///< operand value numbers
  SourceRange loc;            ///< the expression it came from

  // Attributes; which are meaningful depends on `op` (see ops.def).
  std::vector<elab::OperandAlignment> align;  ///< element-wise: one per operand
  std::vector<int> axes;      ///< explicit axes of the (first) operand: reduced, split, concatenated, permuted, ...
  bool all_axes = false;      ///< a reduction over every axis, `...` included
  Attrs attrs;                ///< the family ops.def names for `op`: set() and attr() check it
  int callee = -1;            ///< Call/Fold: index into Program::functions
  std::vector<elab::Size> sizes;  ///< Call/Fold: the callee's dims (module dimensions or inferred size parameters); split/draw/one_hot sizes; Fold's count first
  std::vector<std::pair<int, int>> pairs;  ///< Contract: batch axes (a, b) paired by name
  std::vector<std::string> paths;  ///< MakeParams: where each part goes ("w", "proj.w"; "proj." or "" for a sub-tree)
  Numerics numerics = Numerics::Default;  ///< the innermost numerics form around it

  /// The attributes of family A; an internal error (std::logic_error) when
  /// `op` carries another family.
  template <class A>
  const A& attr() const {
    if (const A* a = std::get_if<A>(&attrs)) return *a;
    wrong_family(attr_index<A>());
  }
  template <class A>
  A& attr() {
    if (A* a = std::get_if<A>(&attrs)) return *a;
    wrong_family(attr_index<A>());
  }
  /// Sets the attributes; an internal error when ops.def gives `op` another family.
  template <class A>
  Instr& set(A a) {
    if (op_info(op).attrs != attr_index<A>()) wrong_family(attr_index<A>());
    attrs = std::move(a);
    return *this;
  }

 private:
  [[noreturn]] void wrong_family(size_t asked) const;
};

/// The attributes an instruction of `op` starts with: its family's defaults.
Attrs default_attrs(Op op);

/// The operand whose shape a draw takes (`bernoulli(k, p, like = x)`: its
/// last), or -1 when the draw's sizes give its shape (or `in` is no draw).
inline int draw_like(const Instr& in) {
  const size_t base = in.op == Op::Bernoulli ? 2 : 1;
  const bool draw = in.op == Op::Uniform || in.op == Op::Normal || in.op == Op::Bernoulli;
  return draw && in.args.size() > base ? static_cast<int>(base) : -1;
}

/// A product's `out = …`: Dot's attribute; Policy for every other operation.
attr::ProductOut::Out requested_out(const Instr& in);

struct FnArg {
  int id = 0;
  std::string name;
  elab::Type type;
  SourceRange loc;
  bool has_default = false;  ///< a constant default value, filled in at each call that omits it
  double default_value = 0;
};

struct Function {
  std::string name;                 ///< "Linear.apply", "loss"
  int module = -1;                  ///< the module that owns it, or -1
  std::vector<std::string> dims;    ///< the module's dimension symbols (In, Out), or a top-level function's size parameters (N)
  std::vector<FnArg> args;
  elab::Type result;
  std::vector<Instr> body;
  int result_value = 0;             ///< the value it returns
  FileId file = 0;
  SourceRange loc;
  bool uses_rand = false;           ///< the effect Rand, itself or through a call
  std::vector<Regularity> arg_regularity;  ///< of the result in each argument
  bool checked = false;             ///< elaborated without error
  /// A vjp (grad/vjp.h): the function it differentiates, whose body is its
  /// first instructions, one for one; -1 for any other function.
  int primal = -1;
  /// A vjp: for each value %n of `primal` (index n), the value of this
  /// function holding its total cotangent once the reverse sweep is done; 0
  /// where it has none (not a real tensor, or no cotangent reached it). Several
  /// values may share one (a cotangent that passes through unchanged).
  std::vector<int> cotangent_of;

  /// Total number of values (arguments and instructions).
  int value_count() const { return static_cast<int>(args.size() + body.size()); }
  /// The type of value %n.
  const elab::Type& type_of(int id) const;
  /// "ms" or "%5"
  std::string value_name(int id) const;
};

}  // namespace quire::core
