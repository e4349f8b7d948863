#pragma once
// Forward error bounds under a realization (docs/precision.md, "Bounds and the
// measurement"). An abstract interpretation walks the entry's Core in the
// order the typed interpreter evaluates it (through every call and every fold
// copy, at the envelope's dimensions, each call under the realization table of
// its function, numerics form and argument types) and carries, for every real
// value v, a bound on max_i |v̂_i − v_i|: v̂ the typed interpreter's value, v
// the exact one.
//
// Three of the bounds are conditional on the envelope: every value's
// magnitude is taken to be at most its recorded max |x| (and at least its min
// |x| where a division, a logarithm or a root needs it). They are theorems
// about the envelope's samples and about any input that stays inside its
// magnitudes. They differ in how they bound a sum's rounding and in the norm:
//
//   - componentwise: every term of a sum at the envelope's largest magnitude;
//   - normwise: Frobenius norms carried instead (‖v‖ ≤ √n·max|v|), the
//     output's bound being its norm;
//   - cond: a sum's terms bounded through its recorded condition number,
//     Σ|terms| ≤ cond·|Σ terms| (never above the componentwise S), so it holds
//     for inputs no worse conditioned than the samples.
//
// The fourth, running (running_bounds.h), is conditional on the envelope's
// samples themselves: the same rules carried element by element beside each
// sample's exact run, each element with its own magnitude.
//
// Beside them two estimates, which do not bound: the first-order estimate of
// `quire solve` (solver.h), each value rounded in its realized type weighted
// element by element by ∂L/∂v, and each sum's accumulation in its
// accumulator; and the probabilistic one, the running walk's forms read with
// their roundings as random (Azuma–Hoeffding), at a stated confidence under
// the model of independent, mean-zero rounding errors.
//
// Requires: an elaborated program without errors; an envelope of `entry`
// calibrated on `samples` at `dims`; a realization of `entry`. Keeps: the
// program unchanged. Anything the walk cannot bound soundly is +inf with its
// reason ("not covered: …"), never an exception; an envelope that does not
// describe the program (other dimensions, other sites) is std::invalid_argument.

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/interp/value.h"
#include "quire/precision/envelope.h"
#include "quire/realize/realization.h"
#include "quire/precision/sensitivity.h"

namespace quire::precision {

/// The four bounds, in the order the printout lists them: the envelope's
/// walk computes the first kEnvelopeRules, running_bounds.h the last.
enum class BoundRule : uint8_t { Componentwise, Normwise, Cond, Running };
inline constexpr int kBoundRules = 4;
inline constexpr int kEnvelopeRules = 3;
/// "componentwise", "normwise", "cond", "running".
const char* bound_rule_name(BoundRule r);

/// Where a bound became +inf: the first site on its path that could not be bounded.
struct InfiniteCause {
  std::string site;  ///< "RMSNorm.apply/%9"
  std::string why;   ///< "a division by values whose smallest |x| (0) is not above their error (0)"
};

/// One rule's bound on the output's largest error.
struct RuleBound {
  double bound = 0;
  std::string covers;                     ///< what it is conditional on
  std::optional<InfiniteCause> infinite;  ///< when bound is +inf (or NaN)
};

/// One site's bounds, each the largest over its evaluations.
struct SiteBound {
  std::string site;  ///< core::site_name
  std::string function;
  std::string op;
  std::string type;      ///< its realized storage type(s), "f32" or "f32/bf16"
  int64_t elements = 0;  ///< the most over its evaluations
  int64_t evaluations = 0;
  double magnitude = 0;                     ///< the envelope's max |x| (NaN when it records none)
  std::array<double, kBoundRules> bound{};  ///< by BoundRule (running: NaN where the walk did not evaluate it)
  std::optional<double> condition;          ///< the envelope's, for sums and contractions
  std::optional<InfiniteCause> infinite;    ///< the componentwise bound's cause, when +inf
};

/// A measured gap: the worst |y − y*| over some samples (precision/measure.h).
struct MeasuredGap {
  double gap = 0;
  int samples = 0;
  uint64_t first_seed = 0;  ///< the seed of the first sample's draw, or its index in `file`
  int bits = 128;           ///< of the exact reference
  std::string file;         ///< the file of samples they were taken from ("": drawn)
};

/// The probabilistic estimate (running_bounds.h): not a bound.
struct ProbabilisticEstimate {
  double estimate = 0;
  double confidence = 0;  ///< under the model of independent, mean-zero rounding errors
  double lambda = 0;      ///< of λ·√(Σ bound²)
  double events = 0;      ///< the output elements × samples the confidence's union bound counts
  std::string covers;     ///< what it is conditional on
};

struct BoundsReport {
  std::string entry;
  std::string result;         ///< the result's site
  std::string label;          ///< the realization: "f64", "f64+solved (9 sites, 4 parameters)"
  double magnitude = 0;       ///< the envelope's max |output| (0 when the output is not one real tensor)
  bool tensor_output = true;  ///< the output is one real tensor, whose magnitude the envelope records
  int samples = 0;            ///< the envelope's
  int envelope_sites = 0;
  uint64_t seed = 0;
  std::string params_file, inputs_file;      ///< the envelope's
  std::string envelope_path;                 ///< as the user named it (the printout's "envelope" line)
  std::array<RuleBound, kBoundRules> rules;  ///< by BoundRule
  std::optional<double> estimate;  ///< the first-order estimate
  std::string estimate_absent;    ///< why there is none
  ProbabilisticEstimate probabilistic;
  /// Every real instruction site the walk evaluated, in the order first evaluated.
  std::vector<SiteBound> sites;
  std::optional<MeasuredGap> measured;  ///< on the envelope's samples (filled by the caller)
  std::optional<MeasuredGap> held_out;  ///< on fresh samples (filled by the caller)
  std::string held_out_absent;          ///< why there is no held-out measurement, when measured
};

/// The sensitivities of `entry` at each of the envelope's samples (the
/// arguments `samples`), each site's largest. Appends the entry's vjp to the
/// program, as sensitivities() does. std::invalid_argument for an entry whose
/// result is not ℝ[].
Sensitivities envelope_sensitivities(elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                                     const std::vector<std::vector<interp::Value>>& samples, int bits);

/// The ways `e` does not describe `entry` of `prog`, one message each: another
/// entry, a dimension the program lacks, a site the program does not have or
/// has as another operation. Empty when the envelope fits.
std::vector<std::string> envelope_mismatches(const elab::Program& prog, int entry, const Envelope& e);

/// The bounds of `entry` under `r`, conditional on `e`, whose samples are
/// `samples` (envelope_samples). `sens` (nullable) gives the first-order
/// estimate; `dims` are the envelope's. The running bound and the
/// probabilistic estimate run the exact reference on the samples at the
/// envelope's bits. std::invalid_argument when the walk meets a site the
/// envelope does not describe at these dimensions.
BoundsReport bound_errors(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                          const Realization& r, const Envelope& e,
                          const std::vector<std::vector<interp::Value>>& samples, const Sensitivities* sens);

}  // namespace quire::precision
