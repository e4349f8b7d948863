#pragma once
// The sections of `quire explain`'s document, each built from the printout
// of the command its appendix lists (run again by this binary: self_command.h).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/explain/document.h"

namespace quire::cli {

/// What `quire explain` was asked for (docs/explain.md).
struct ExplainRequest {
  std::string file;               ///< the program, as given (relative to the current directory)
  std::string entry;              ///< the function explained (the training run's objective under --step)
  std::vector<std::string> dims;  ///< the --dim flags, as given
  std::string budget;             ///< --budget as given (checked > 0): solve the types; empty: `precision`'s
  std::string precision = "f64";
  std::string profile;  ///< --profile; empty: the shipped profile
  std::string inputs;   ///< --inputs F.npz: the arguments the evaluating commands read; empty: drawn from the seed
  std::string remat = "recompute";
  std::vector<std::string> targets;  ///< native, pytorch
  bool measure = false;
  bool step = false;
  int64_t seed = 0;
  int bits = 128;
  int sites = 12;                   ///< how many sites §12 follows (the largest sensitivities)
  std::vector<std::string> follow;  ///< --site: sites §12 follows first, by name (`Block.apply/%9`)

  bool solved() const { return !budget.empty(); }
};

/// Builds the document for `request` on the elaborated `prog`, running its
/// commands with `doc_dir` (an absolute path) as $DOC: the artifacts they
/// write land in $DOC/artifacts, and every printout is also written whole to
/// $DOC/listings/NAME.txt. Throws std::runtime_error naming the command when
/// one that every program supports fails.
explain::Document build_explain_document(const ExplainRequest& request, const elab::Program& prog,
                                         const std::string& doc_dir);

}  // namespace quire::cli
