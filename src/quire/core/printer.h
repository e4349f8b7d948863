#pragma once
// Printers of Core: the text form `quire dump --stage core` shows (one typed
// operation per line, as docs/language.md describes) and a JSON form whose
// every instruction carries its site name.

#include <string>
#include <utility>

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
/// The instruction a realization's decisions name for `in` of `fn`: itself,
/// or, in a vjp's forward part (its first instructions, its primal's one for
/// one: grad/vjp.h), the primal's instruction it copies. Its site is
/// site_name(*first, second->id).
std::pair<const Function*, const Instr*> decision_instr(const elab::Program& prog, const Function& fn, const Instr& in);
/// site_name of decision_instr: `Tower.apply/%4` for the copy of that
/// instruction in `Tower.apply.vjp`, `Tower.apply.vjp/%17` for one of its
/// reverse sweep.
std::string decision_site(const elab::Program& prog, const Function& fn, const Instr& in);

}  // namespace quire::core
