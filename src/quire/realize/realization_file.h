#pragma once
// The realization artifact (`quire solve --out realization.json`) and its use
// (`quire run|train|check --realize @realization.json`): the solver's
// decisions, a storage type per site and per parameter path over a base
// policy, beside the report that explains them (docs/precision.md).
//
//   {"format": "quire-realization", "version": 3, "entry": "loss",
//    "of": "output",          ← or "gradient": the decisions cover loss's vjp
//    "policy": "f64",
//    "decisions": {"sites": {"RMSNorm.apply/%3": "f32", …},
//                  "params": {"blocks.proj.w": "bf16", …}},
//    "ranges": {"headroom": 4, "sites": {"RMSNorm.apply/%3": 7.4948, …}},
//    "report": {…}}          ← the solver's, read by no one but people
//
// `ranges` gives each narrowed site the envelope's largest |v|, on which its
// type was chosen with the headroom (solver.h's range rule): a run under the
// realization checks its values against |v| × headroom (the envelope guard,
// interp/envelope_guard.h). Version 1 files have none, and no guard;
// versions 1 and 2 have no `of` and are the output's.
//
// An assignment is checked against the program before it is used
// (check_assignment): every site must be one the entry stores, every path a
// parameter of its tree, and no decision may break a mark of the program.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "quire/core/program.h"
#include "quire/realize/realization.h"

namespace quire::precision {

/// The ranges the decisions rest on: each narrowed site's largest |v| on
/// the envelope's samples, and the headroom its type was checked with.
struct DecisionRanges {
  double headroom = 1;
  std::map<std::string, double> sites;  ///< site → the envelope's largest |v|

  /// The largest |v| a run may store at each site and stay in the range
  /// its type was chosen for: |v| × headroom.
  std::map<std::string, double> limits() const;
};

/// What the budget the decisions were solved under bounds: the entry's
/// output, or the gradient of its first argument (`solve --of gradient`),
/// whose decisions cover the entry's vjp, the reverse sweep's sites named by
/// their own functions (`Tower.apply.vjp/%17`).
enum class BudgetOf : uint8_t { Output, Gradient };
const char* budget_of_name(BudgetOf of);  ///< "output", "gradient"

/// The file's decisions and the entry they were solved for.
struct RealizationFile {
  std::string entry;
  BudgetOf of = BudgetOf::Output;  ///< version 3's `of`; earlier files are the output's
  Assignment assignment;
  std::optional<DecisionRanges> ranges;  ///< absent in version 1 files
};

/// The artifact with `report` as its report, and `ranges` when given.
nlohmann::ordered_json realization_file_json(const std::string& entry, const Assignment& a,
                                             nlohmann::ordered_json report, const DecisionRanges* ranges = nullptr,
                                             BudgetOf of = BudgetOf::Output);

/// Reads a realization artifact. io::IoError(path, "key `decisions.sites.X`: …")
/// for a file that is unreadable or malformed.
RealizationFile read_realization_file(const std::string& path);
/// The same from JSON already read; `path` names it in errors.
RealizationFile realization_file_from_json(const nlohmann::json& j, const std::string& path);

/// What may be decided at a site, from the marks around it in every table
/// of the base realization that holds it.
struct SiteFreedom {
  bool stored = false;          ///< some table stores it (it is an instruction, not carried or an input)
  bool fixed = false;           ///< an explicit type or a region: not a decision
  std::string fixed_why;        ///< "`as f32`", "inside precision(bf16)"
  bool at_least_f32 = false;    ///< an island, a library mark, a `numerics high` read or `out = f32`: never a half
  std::string floor_why;
};

/// Every instruction site the entry reaches, by its decision name
/// (core::decision_site: a vjp's forward copies as their primal's), with its freedom
/// (reached through the policy's realization of `entry`).
std::map<std::string, SiteFreedom> site_freedoms(const elab::Program& prog, const Realization& base);

/// The decisions that name no stored site or parameter of `entry`, or break
/// a mark (a half inside numerics(high), anything inside a region or under an
/// explicit type), one message each; empty when the assignment is usable.
std::vector<std::string> check_assignment(const elab::Program& prog, int entry, const Assignment& a,
                                          const std::map<std::string, int64_t>& dims);

}  // namespace quire::precision
