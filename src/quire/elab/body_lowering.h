#pragma once
// Lowering one function's body to Core (elaboration's body pass): the state
// it carries and the steps it is made of. The expressions are lowered in
// lower_body.cpp, the built-in functions (`sum`, `matmul`, `slice`, …) in
// builtins.cpp, from one table of them. Internal to elab/.
//
// Requires: every module's members and every function's signature resolved
// (elaborator.cpp). Produces: the function's Core body and result value.
// Errors are reported and lowering continues with an Error operand, which
// silences follow-on errors from the same expression.

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "quire/elab/elaborator_impl.h"

namespace quire::elab {

// Lowering recurses once per level of nesting through lower_inner, then
// lower_call or lower_binary, then a builtin's own function. Kept out of line,
// each function's frame holds only its own locals: inlined together (and with
// AddressSanitizer's redzones) one level took 80 KB of stack, so the parser's
// 200 levels overflowed an 8 MB stack.
#define NOINLINE [[gnu::noinline]]

/// What a callee's `...` is bound to at one call: the caller's leading axes.
struct RestBinding {
  bool bound = false;
  bool rest = false;
  std::vector<Axis> axes;
};

/// A generic callee's size parameters at one call (`softmax{N}`): what each
/// is bound to and by which argument axis. An axis declared with exactly a
/// size parameter is named by the caller: it matches an axis of any name, and
/// in the call's result it takes the name of the axis that bound the parameter.
struct SizeParams {
  std::vector<std::string> names;  ///< the callee's, in declaration order
  std::map<std::string, Size> sizes;
  std::map<std::string, std::string> axis_names;  ///< "" when the binding axis is positional
  std::map<std::string, std::string> sources;     ///< "argument `x`", for messages

  /// The size parameter that `s` is exactly, or nullptr.
  const std::string* bare(const Size& s) const {
    for (const std::string& n : names)
      if (s == Size::symbol(n)) return &n;
    return nullptr;
  }
};

class BodyLowering {
 public:
  using OK = Operand::Kind;
  using Instr = core::Instr;
  using Op = core::Op;

  BodyLowering(Elaborator& el, int function)
      : el_(el),
        prog_(el.prog()),
        fn_(prog_.functions[function]),
        fi_(el.fn_file(function)),
        mi_(fn_.module),
        decl_(*el.fn_decl(function)) {}

  void run();

 private:
  // ------------------------------------------------------------ emission

  TypePrinter printer() const { return prog_.printer(); }
  std::string show(const Type& t) const { return printer()(t); }
  std::string show(const TensorType& t) const { return printer().tensor(t); }

  void error(const char* code, SourceRange at, std::string message, std::string hint = "");
  Operand emit(Instr in);
  Instr make(Op op, Type type, std::vector<int> args, SourceRange loc);

  /// A real scalar ℝ[] for a literal or a host scalar (`real(…)`), or nullopt.
  std::optional<Operand> real_scalar(const Operand& op, SourceRange loc);

  /// A tensor value for an operand: literals become `const`, host scalars
  /// `real`; booleans (`true`, a host `bool`) then `bool[]`, since the
  /// kernels mix booleans with no number.
  std::optional<Operand> tensor(const Operand& op, SourceRange loc, const char* what = "this operand");

  // ------------------------------------------------------------ names

  std::optional<Operand> lookup_local(const std::string& name);
  Operand lookup(const std::string& name, SourceRange loc);
  std::string suggestion(const std::string& name);
  std::optional<Operand> lookup_in_file(int file, const std::string& name, SourceRange loc);

  /// An operand that names a module, sub-module, file or function.
  static Operand named(OK kind, int index, SourceRange loc);

  /// θ, the function's own parameter tree (value %1 of a module's function).
  Operand self_tree() const;

  /// θ.name: a parameter (a tensor) or a sub-module's tree. Cached per tree,
  /// name and numerics form: a read inside `numerics(high)` is its own site, so
  /// the precision policy can type each read by the form it is in.
  Operand field(const Operand& tree, const std::string& name, SourceRange loc);

  // ------------------------------------------------------------ expressions

  Operand lower(const ast::Expr& e);
  Operand lower_inner(const ast::Expr& e);
  NOINLINE Operand lower_tuple_index(const ast::Expr& e);
  NOINLINE Operand lower_negation(const ast::Expr& e);
  NOINLINE Operand lower_tuple(const ast::Expr& e);
  NOINLINE Operand lower_numerics(const ast::Expr& e);
  NOINLINE Operand lower_block(const ast::Expr& e);
  void bind(const ast::Pattern& p, const Operand& v, size_t first_new, int depth);
  NOINLINE Operand lower_member(const ast::Expr& e);
  NOINLINE Operand lower_cast(const ast::Expr& e);
  static std::vector<int> identity_map(size_t n);

  /// An element-wise instruction over tensor operands, broadcast by align().
  Operand elementwise(Op op, const std::vector<Operand>& xs, SourceRange loc, Elem result_elem);
  static Elem arithmetic_elem(Elem a, Elem b);
  NOINLINE Operand lower_binary(const ast::Expr& e);

  /// `e`'s operation on its lowered operands.
  NOINLINE Operand combine_binary(const ast::Expr& e, const Operand& a, const Operand& b);
  Operand dot(const Operand& x, const Operand& w, SourceRange loc);

  /// Converts an operand to an expected type (a function result, an argument,
  /// an annotation): literals are materialized; tensors must match.
  std::optional<int> convert_to(const Operand& op, const Type& expected, SourceRange loc, const std::string& what);

  /// Matches an actual type against a declared one (after substituting the
  /// callee's dimensions), binding the declared `...` to the actual leading
  /// axes when allow_rest. With `sp`, an axis declared with exactly one of a
  /// generic callee's size parameters matches an axis of any name.
  bool unify(const Type& declared, const Type& actual, const std::map<std::string, Size>& dims, RestBinding& rb,
             std::string& err, bool allow_rest = true, const SizeParams* sp = nullptr, int depth = 0);

  /// A declared type instantiated at a call: dims substituted, `...` replaced
  /// by what it was bound to, names taken from the declaration, except that
  /// with `sp` an axis of a size parameter takes the name of the axis that bound it.
  Type instantiate(const Type& declared, const std::map<std::string, Size>& dims, const RestBinding& rb,
                   const SizeParams* sp = nullptr, int depth = 0);

  // ------------------------------------------------------------ calls

  NOINLINE Operand lower_call(const ast::Expr& e);

  /// `grad(f)(args…)` and `value_and_grad(f)(args…)`, optionally with
  /// `wrt = name`: a call of the gradient function the elaborator builds from
  /// f's vjp once every body is lowered (grad/vjp.h). Its arguments are f's,
  /// matched as for a call of f; its result is the cotangent of the chosen
  /// argument (for value_and_grad: f's value, then that cotangent).
  NOINLINE Operand lower_gradient_call(const ast::Expr& form, const ast::Expr& e);

  /// Whether a call `name(…)` of a plain name that is not a local tries the
  /// built-in operations before the functions (docs/language.md §4.2). A
  /// user's file looks in its module's members, then its own functions, then
  /// the prelude's, then the built-ins; a prelude file tries the built-ins
  /// first, so that it can wrap one under its own name (`gelu_tanh`). A call
  /// with an `axis` argument always means a built-in: no function takes one.
  bool names_builtin(const std::string& name, const ast::Expr& e) const;

  /// The prelude's function of this name, or -1.
  int prelude_function(const std::string& name) const;
  NOINLINE Operand call_function(const Operand& f, const ast::Expr& e);

  /// Binds a generic callee's size parameters from one argument: an axis
  /// declared with exactly a parameter binds it to the size of the argument
  /// axis it lines up with (as unify lines them up), unless an earlier axis
  /// already did. Mismatched shapes bind nothing; unify reports them.
  void bind_size_params(const Type& declared, const Type& actual, SizeParams& sp, const std::string& source,
                        int depth = 0);

  /// A callee's declared axes and the caller's `...` may share a name
  /// (`-> ℝ[..., batch: 4]` called with `ℝ[batch: 2, 4]`).
  bool unique_result_names(const Type& t, const std::string& callee, SourceRange loc, int depth = 0);

  // ------------------------------------------------------------ built-in operations (builtins.cpp)

  /// A call's arguments, sorted by kind.
  struct BuiltinArgs {
    std::vector<const ast::Arg*> positional;
    std::vector<const ast::Arg*> axes;
    std::vector<const ast::Arg*> keywords;
    std::vector<const ast::Arg*> sizes;
    std::vector<const ast::Arg*> renames;
  };
  static BuiltinArgs split_args(const ast::Expr& e);
  bool expect_args(const std::string& name, const ast::Expr& e, const BuiltinArgs& b, size_t min_pos, size_t max_pos,
                   bool axes, bool sizes, const std::set<std::string>& keywords);
  int axis_index(const TensorType& t, const ast::Ident& name, const char* op);
  std::optional<double> keyword_const(const BuiltinArgs& b, const std::string& key, double fallback);
  bool unique_names(const TensorType& t, SourceRange loc);

  /// The built-in `name` applied to the call `e`, or nullopt when no built-in
  /// has that name. One table lists them all.
  NOINLINE std::optional<Operand> lower_builtin(const std::string& name, const ast::Expr& e);

  /// How the table lowers a call of a built-in: its name, the operation it
  /// lowers to, the call, and its arguments sorted by kind.
  using BuiltinLowering = Operand (BodyLowering::*)(const std::string& name, Op op, const ast::Expr& e,
                                                    const BuiltinArgs& b);
  NOINLINE Operand builtin_unary(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_extremum(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_min_max(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_reduction(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_arg_extremum(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_where(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_real(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_matmul(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_contract(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_transpose(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_split(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_rename(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand lower_split(const ast::Expr& e, const BuiltinArgs& b);  // split of an axis
  NOINLINE Operand builtin_merge(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_concat(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_slice(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_gather(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_pick(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_scan(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_one_hot(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_iota(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);
  NOINLINE Operand builtin_draw(const std::string& name, Op op, const ast::Expr& e, const BuiltinArgs& b);

  // ------------------------------------------------------------ state

  Elaborator& el_;
  Program& prog_;
  core::Function& fn_;
  int fi_;
  int mi_;
  const ast::FnDecl& decl_;
  std::vector<Scope> scopes_;
  std::map<std::tuple<int, std::string, core::Numerics>, Operand> fields_;
  core::Numerics numerics_ = core::Numerics::Default;
  int depth_ = 0;
};

}  // namespace quire::elab
