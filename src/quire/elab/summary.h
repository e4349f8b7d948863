#pragma once
// Printers of the elaborated program: `quire dump --stage elab` (every file's
// declarations and the module instances with their parameters' paths and
// shapes) and `quire check --summary` (types of every function and let,
// regularity and effects, parameters, the training run as elaborated).

#include <string>

#include <nlohmann/json.hpp>

#include "quire/core/program.h"

namespace quire::elab {

std::string print_elab(const Program& prog);
nlohmann::ordered_json elab_json(const Program& prog);
std::string print_summary(const Program& prog);

/// A file's path as dumps show it: relative to the main file's folder.
std::string shown_path(const Program& prog, int file);

}  // namespace quire::elab
