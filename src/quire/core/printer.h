#pragma once
// Printers of Core: the text form `quire dump --stage core` shows (one typed
// operation per line, as docs/language.md describes) and a JSON form whose
// every instruction carries its site name.

#include <string>

#include <nlohmann/json.hpp>

#include "quire/core/program.h"

namespace quire::core {

/// The functions of the program in Core text, in declaration order (those of
/// the prelude only when the program calls them: elab::Program::shown_functions).
/// When `reachable_from` names a function, only the functions it reaches (callees first).
std::string print_core(const elab::Program& prog, int reachable_from = -1);
/// One instruction's right-hand side: `add %3, b`, `mean axis model %3`.
std::string print_instr(const elab::Program& prog, const Function& fn, const Instr& in);
nlohmann::ordered_json core_json(const elab::Program& prog, int reachable_from = -1);
/// The functions `root` calls, transitively, callees before callers, `root` last.
std::vector<int> reachable_functions(const elab::Program& prog, int root);
/// "Linear.apply/%3"
std::string site_name(const Function& fn, int id);

}  // namespace quire::core
