#pragma once
// Internal to elaboration: the state shared by the declaration pass
// (elaborator.cpp) and the body pass that lowers expressions to Core
// (lower_body.cpp). Not part of libquire's interface.

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "quire/elab/elaborator.h"
#include "quire/syntax/ast.h"

namespace quire::elab {

/// What an expression elaborated to: a Core value, a compile-time number, or
/// a name that is not a value (a module, an import alias, a sub-module).
struct Operand {
  enum class Kind { Error, Value, Literal, Module, Use, File, Function } kind = Kind::Error;
  int id = 0;        ///< Value: its number
  Type type;         ///< Value: its type
  double number = 0; ///< Literal
  bool is_integer = false;
  bool is_bool = false;
  int index = -1;    ///< Module/Use/File/Function: which
  SourceRange loc;

  static Operand error() { return {}; }
  bool ok() const { return kind != Kind::Error; }
};

/// A local scope of a function body: names → values or literals.
struct Scope {
  std::map<std::string, Operand> names;
};

class Elaborator {
 public:
  Elaborator(DiagnosticSink& diags, const FileReader& reader) : diags_(diags), reader_(reader) {}
  std::unique_ptr<Program> run(const std::string& path);

  // ---- shared with lower_body.cpp
  Program& prog() { return *prog_; }
  DiagnosticSink& diags() { return diags_; }
  void error(const char* code, SourceRange at, std::string message, std::string hint = "") {
    diags_.error(code, at, std::move(message), std::move(hint));
  }
  /// A size expression in the context of `file` and (if ≥ 0) module `module`.
  std::optional<Size> eval_size(const ast::Expr& e, int file, int module);
  /// A compile-time scalar (const values, default arguments, init arguments).
  std::optional<double> eval_const(const ast::Expr& e, int file, bool& is_integer, int depth = 0);
  /// The scalar kind a `const`'s or a field's type annotation names (nat, int,
  /// f64, bool); E0401 for any other type. `what` is "a constant's", "a field's".
  ScalarKind declared_scalar(const ast::TypeExpr& type, const char* what);
  /// `value` evaluated as a constant of `kind`, or E0401 (naming `name`, at the
  /// value) where it is not one: a string or a boolean for a number, a number
  /// for a bool, a fraction for nat or int, a negative nat.
  std::optional<double> typed_constant(ScalarKind kind, const ast::Expr& value, int file, const std::string& name);
  std::optional<Type> resolve_type(const ast::TypeExpr& t, int file, int module);
  std::optional<ParamsType> resolve_modref(const ast::ModuleRef& r, int file, int module, int depth = 0);
  /// A module by qualified name from `file` (`Linear`, `lin.Linear`), or -1 with an error.
  int find_module(const std::vector<ast::Ident>& name, int file, bool report);
  const ast::FnDecl* fn_decl(int function) const { return fn_decls_[function]; }
  /// The function `grad(f)` (`value_and_grad(f)` when `with_value`) with
  /// respect to argument `wrt` of `target`, by the index it will have once
  /// every body is lowered (declare_gradients appends it).
  int request_gradient(int target, int wrt, bool with_value, SourceRange at);
  int fn_file(int function) const { return fn_files_[function]; }

  /// While alive, a top-level function's size parameters are sizes to
  /// eval_size, as a module's dimensions are inside the module: set around
  /// the function's signature and its body.
  class SizeParamsInScope {
   public:
    SizeParamsInScope(Elaborator& el, std::vector<std::string> params)
        : el_(el), saved_(std::exchange(el.size_params_, std::move(params))) {}
    ~SizeParamsInScope() { el_.size_params_ = std::move(saved_); }
    SizeParamsInScope(const SizeParamsInScope&) = delete;
    SizeParamsInScope& operator=(const SizeParamsInScope&) = delete;

   private:
    Elaborator& el_;
    std::vector<std::string> saved_;
  };

 private:
  /// Adds the prelude's files (prelude/prelude.h) to the program, parsed.
  void load_prelude();
  int load_file(const std::string& path, const std::string& shown, std::vector<std::string>& chain,
                SourceRange from, FileId from_file);
  void declare_file(int file);
  void declare_module(int file, const ast::ModuleDecl& m);
  void resolve_module_members(int module);
  void check_module_cycles();
  /// Reports a module whose flattened tree would exceed kMaxParameterTensors.
  void check_tree_sizes();
  /// Reports an instance whose parameters would have a size that is not a
  /// positive whole number (`Heads{7, 2}` with `param w : ℝ[D / H]`).
  void check_instance_sizes(const ParamsType& p, SourceRange at);
  void declare_function(int file, int module, const ast::FnDecl& f);
  void elaborate_optimizer(int file, const ast::OptimizerDecl& o);
  void elaborate_training(int file, const ast::TrainingDecl& t);
  void check_call_cycles();
  void compute_effects_and_regularity();
  /// Appends the requested gradient functions, each with a provisional body
  /// (a call of its target) so that the call-cycle check sees the edge.
  void declare_gradients();
  /// Gives each gradient function its body: the target's vjp at cotangent 1.
  void build_gradients();

  struct GradientRequest {
    int target = -1;
    int wrt = 0;
    bool with_value = false;
    SourceRange at;  ///< the first `grad(…)` that asked for it
  };
  std::vector<GradientRequest> gradients_;
  int first_gradient_ = -1;  // the index the first requested gradient function gets

  DiagnosticSink& diags_;
  const FileReader& reader_;
  std::unique_ptr<Program> prog_;
  std::vector<std::unique_ptr<ast::File>> asts_;      // per file index
  std::vector<const ast::ModuleDecl*> module_decls_;  // per module index
  std::vector<const ast::FnDecl*> fn_decls_;          // per function index
  std::vector<int> fn_files_;
  std::vector<std::string> size_params_;    // see SizeParamsInScope
  bool trees_final_ = false;                // members resolved and module cycles cut: flatten() is finite
  std::vector<int> chain_files_;            // the files being loaded, outermost first
  std::vector<SourceRange> import_stack_;   // import_stack_[k]: chain_files_[k]'s import being followed
};

/// Whether the constant axes of `t` alone hold more than kMaxElements elements.
bool exceeds_element_limit(const TensorType& t);

/// The value of the literal spelled `name`: `inf` (+∞) or `nan` (a quiet NaN);
/// nullopt for any other name. A local, parameter, function or constant of
/// that name is found first (docs/language.md §3).
std::optional<double> special_literal(const std::string& name);

/// Lowers one function's body to Core (lower_body.cpp).
void lower_function_body(Elaborator& el, int function);

}  // namespace quire::elab
