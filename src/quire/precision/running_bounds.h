#pragma once
// The running bound (docs/precision.md, "Bounds and the measurement"): a
// realization's error on each of the envelope's samples, bounded element by
// element as the sample runs.
//
// For one sample the exact interpreter's run gives every value's exact
// elements v_i. The walk then carries, beside each real element, its error
// v̂_i − v_i (v̂ the typed interpreter's value under the realization) as a
// linear form over the run's local errors plus a bounded remainder
// (error_forms.h): affine arithmetic along the exact run.
//
//   - Every rounding (the f64 kernel's, a store's, a read-down's, a cast's)
//     is a new local error of at most u_t·(|v_i| + T_i) + η_t/2, T_i the
//     element's bound so far (rounding_rules.h); a library function adds its
//     own 8·u·scale; an entry argument's or a parameter's rounding on entry
//     is known exactly.
//   - An element-wise operation is linearized at the element's exact values
//     (f'(v)·form, plus a second-order remainder); where that is undefined or
//     larger (a kink within the error, a domain the interval leaves), its
//     Lipschitz bound over [v − T, v + T] replaces the form
//     (elementwise_bounds.h). A division divides by its own divisor; a
//     comparison flips only where its operands are within their errors of
//     each other, and `where` takes the exact run's branch otherwise.
//   - A sum or contraction adds its terms' forms and one new local error: its
//     running error, each step's rounding bounded by u_a times a bound on the
//     partial sum it rounds, taken in the kernel's order from the exact
//     partial sums (Higham, Accuracy and Stability, §3.3).
//
// A form keeps the signs with which one local error reaches an element by
// several paths, so a residual block, a norm and a product by signed weights
// cancel what they cancel in the exact run. Each step is then a theorem about
// that sample, and the bound, the largest |c| + Σ|a| + ρ over the output's
// elements and the samples, is one about the samples.
//
// It is conditional on the samples themselves: inputs the envelope did not
// see are the measurement's held-out samples' to cover.
//
// Beside it, the probabilistic estimate: the same forms read under the model
// in which every rounding's relative error is a random variable of mean zero
// given the run before it (Higham & Mary, "A new approach to probabilistic
// rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019). An output
// element's error is then, up to its known and non-random parts, a sum of
// martingale differences each bounded by a known constant: by the
// Azuma–Hoeffding inequality it is at most λ·√(Σ bound²) with probability at
// least 1 − 2·exp(−λ²/2) (an accumulation's k steps contribute their root sum
// of squares, Higham & Mary's λ·√k·u in place of γ_k). λ is chosen so that
// the union over every output element of every sample fails with
// probability at most 1 − confidence. It is an estimate, not a bound:
// rounding is deterministic and does not always meet the model (a long sum
// in a narrow accumulator stagnates, its errors all of one sign).
//
// Requires: an elaborated program; `samples`, the entry's argument lists (θ
// first for a module's function), all of whose exact runs succeed; a
// realization of `entry`. Keeps: the program unchanged. What the walk cannot
// bound is +inf with its reason, never an exception. Not counted: the walk's
// own arithmetic in doubles, rounded to nearest (relative 10⁻¹⁵ of a bound),
// and the exact reference's own rounding at `bits` (2^-bits relative per
// operation): v is the reference's value, as the measurement's is.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/interp/value.h"
#include "quire/precision/bounds.h"
#include "quire/realize/realization.h"

namespace quire::precision {

/// The confidence the probabilistic estimate is stated at.
inline constexpr double kEstimateConfidence = 0.99;

struct RunningBounds {
  double bound = 0;                       ///< the largest over the output's real elements and the samples
  std::optional<InfiniteCause> infinite;  ///< where it became +inf
  double estimate = 0;                    ///< the probabilistic estimate, the same largest
  double confidence = 0;                  ///< its confidence under the model
  double lambda = 0;                      ///< its λ
  double events = 0;                      ///< output elements × samples: the union bound's count
  int samples = 0;
  /// Each real site's largest bound over its elements, its evaluations and the samples.
  std::map<std::string, double> sites;
};

/// The running bound of `entry` under `r` on each of `samples` (the exact
/// reference at `bits`), and the probabilistic estimate at `confidence`.
/// interp::EvalError if an exact run fails.
RunningBounds running_bounds(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                             const Realization& r, const std::vector<std::vector<interp::Value>>& samples, int bits,
                             double confidence = kEstimateConfidence);

}  // namespace quire::precision
