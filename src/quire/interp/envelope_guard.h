#pragma once
// The envelope guard (docs/precision.md, "The guard"): a run under a
// realization from `quire solve` checks each value stored at a narrowed site
// against the range its type was chosen for, the envelope's largest |v| times
// the headroom (realize/realization_file.h's `ranges`). The solver's claim
// (every sample and every held-out one inside the budget) is about inputs
// like the envelope's; a value beyond that range is an input it does not
// cover, and the first one is named with its source line.
//
// The check reads each stored value's largest magnitude from its bits
// (runtime::largest_magnitude): one pass over the values a narrowed site
// stores, none over the others. A NaN or an infinity leaves every range.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "quire/core/program.h"
#include "quire/interp/value.h"

namespace quire::interp {

class EnvelopeGuard {
 public:
  /// `limits`: site (core::site_name) → the largest |v| it may store. With
  /// `prog`, a vjp's forward instructions (its first ones, its primal's one
  /// for one) are checked as the primal's sites (core::decision_site): a
  /// training step's values are those of the objective's vjp, whose reverse
  /// sweep has ranges of its own under a gradient budget.
  explicit EnvelopeGuard(const std::map<std::string, double>& limits, const elab::Program* prog = nullptr);

  /// The first value that left its range since the last reset.
  struct Exceeded {
    std::string site;  ///< "RMSNorm.apply/%4"
    std::string op;    ///< its operation's spelling
    SourceRange loc;
    double magnitude = 0;  ///< its largest |v|: NaN for a NaN
    double limit = 0;
  };

  /// Checks a value stored at instruction `in` of `fn`.
  void observe(const core::Function& fn, const core::Instr& in, const Value& v);

  const std::optional<Exceeded>& first() const { return first_; }
  /// Values that left their range since the last reset (each evaluation counts).
  int64_t count() const { return count_; }
  void reset() {
    first_.reset();
    count_ = 0;
  }
  bool empty() const { return limits_.empty(); }

 private:
  /// function name → value number → its limit, so that a site's name is
  /// built only for the functions that have a guarded site.
  std::unordered_map<std::string, std::unordered_map<int, double>> limits_;
  std::optional<Exceeded> first_;
  int64_t count_ = 0;
  const elab::Program* prog_ = nullptr;
};

/// "`RMSNorm.apply/%4` (pow) stored |v| = 3.1e5, beyond 3.0e1, the envelope's
/// largest |v| times the headroom its type was chosen with: the realization's
/// error budget does not cover this input".
std::string exceeded_message(const EnvelopeGuard::Exceeded& e);

}  // namespace quire::interp
