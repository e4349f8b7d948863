#pragma once
// The elaborated program: every file with its imports, constants and dims;
// every module with its dimensions, parameters (type, initializer, marks) and
// sub-modules; every function in Core; the optimizers and the training run.
// Produced by elaborate() (elaborator.h); read by every later stage.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "quire/core/ir.h"
#include "quire/core/type.h"
#include "quire/support/source.h"

namespace quire::elab {

/// A parameter's initializer as written: `xavier_uniform`, `normal(0.02)`.
struct InitExpr {
  std::string kind = "zeros";
  std::vector<double> args;
  SourceRange loc;
};

struct ParamInfo {
  std::string name;
  TensorType type;  ///< in the module's dimension symbols
  InitExpr init;
  bool numerics_high = false;
  bool frozen = false;
  SourceRange loc;
};

struct UseInfo {
  std::string name;
  ParamsType type;  ///< dims and stack counts in the enclosing module's symbols
  SourceRange loc;
};

struct ModuleInfo {
  std::string name;
  int file = 0;                     ///< index into Program::files
  std::vector<std::string> dims;
  std::vector<ParamInfo> params;
  std::vector<UseInfo> uses;
  std::map<std::string, int> fns;   ///< name → index into Program::functions
  std::vector<int> fn_order;        ///< the functions in source order
  SourceRange loc;
};

struct ConstInfo {
  std::string name;
  ScalarKind kind = ScalarKind::Nat;
  double value = 0;
  SourceRange loc;
};

/// One `key = value` field of an optimizer or a training run, kept as printed.
struct FieldInfo {
  std::string key;
  std::string type;   ///< as declared, or empty
  std::string value;  ///< the expression, printed
  double number = 0;  ///< its value when it is a number
  bool is_number = false;
  SourceRange loc;
};

struct OptimizerInfo {
  std::string name;
  std::vector<FieldInfo> fields;
  SourceRange loc;
};

struct PipelineStageInfo {
  std::string name;  ///< stream, shuffle, batch
  std::string path;  ///< stream's file, as written (relative to the program's file)
  std::vector<std::pair<std::string, double>> args;  ///< seed = 3, B = 8
};

struct TrainingInfo {
  int model = -1;          ///< module index
  int objective = -1;      ///< function index
  int optimizer = -1;      ///< index into Program::optimizers
  std::vector<PipelineStageInfo> data;
  std::string batch_dim;   ///< the dim `batch(B = 8)` binds
  int64_t batch_size = 0;
  int64_t epochs = 1;
  int64_t checkpoint_every = 0;
  std::string checkpoint_unit;
  std::string checkpoint_dir;
  /// `evaluate f every N steps on "file"`: f (-1: none) on the held-out data
  /// every N steps and after the last.
  int evaluate = -1;
  int64_t evaluate_every = 0;
  std::string evaluate_path;
  std::vector<FieldInfo> other_fields;
  SourceRange loc;
};

struct FileInfo {
  std::string path;        ///< as shown in diagnostics and dumps
  std::string resolved;    ///< normalized path used to detect re-imports and cycles
  FileId id = 0;
  std::vector<std::pair<std::string, int>> imports;  ///< alias → file index
  std::vector<std::string> dims;
  std::vector<ConstInfo> consts;
  std::vector<int> modules;
  std::vector<int> fns;
  std::vector<int> optimizers;
  std::optional<TrainingInfo> training;
  bool prelude = false;    ///< part of the standard library shipped with the compiler (quire/prelude/)
};

struct Program {
  SourceManager sources;
  std::vector<FileInfo> files;
  int main_file = 0;
  std::vector<int> file_order;  ///< the prelude's files, then the others with every import before its importer; the main file last
  std::vector<ModuleInfo> modules;
  std::vector<core::Function> functions;
  std::vector<OptimizerInfo> optimizers;
  std::vector<std::string> dims;  ///< the program's free dimensions (`dim B`), bound at run time

  TypePrinter printer() const;
  /// A function by its qualified name ("loss", "Tower.apply"); -1 if none.
  int find_function(const std::string& name) const;
  /// A parameter tree flattened to (path, tensor type) in declaration order:
  /// `blocks.proj.w : ℝ[3, 4, 4]` (stacked copies gain leading axes). Sizes are
  /// in the symbols of the ParamsType's context.
  std::vector<std::pair<std::string, TensorType>> flatten(const ParamsType& p) const;
  /// The declaration of each flattened parameter (for its initializer and marks).
  std::vector<const ParamInfo*> flatten_decls(const ParamsType& p) const;
  /// The training run of the main file, if it has one.
  const TrainingInfo* training() const;
  /// Whether the function belongs to a prelude file.
  bool in_prelude(int function) const;
  /// The functions whole-program printouts show (`dump --stage elab|core`,
  /// `check --summary`), in the order they print: the prelude's functions
  /// that the user's reach, directly or through other prelude functions,
  /// first (the prelude is imported before every file), then all the user's.
  /// A program that calls nothing of the prelude prints as if it had none.
  std::vector<int> shown_functions() const;
};

}  // namespace quire::elab
