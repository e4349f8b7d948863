#pragma once
// Measurement: a realization's output against the exact reference, on the
// envelope's own samples and on held-out ones (docs/precision.md). This is
// the step that discharges a budget: the solver accepts a candidate only when
// its measured gap is inside, and `quire check --measure` prints the gap
// beside the bounds.
//
// The samples are the envelope's: its parameters (the file it names, or the
// draw from its seed) and, for sample k, the other arguments drawn from
// seed + k as `quire run --seed` draws them (or the .npz it names, one
// sample). Held-out sample j draws from seed + samples + j: inputs the
// envelope never saw, with the same parameters.
//
// The gap of one sample is max |y_i − y*_i| over the output's real elements,
// y the realized run's value and y* the exact one, the difference taken at
// the exact reference's precision and rounded to the nearest double. A
// gradient's (`solve --of gradient`) is ‖∂θ − ∂θ*‖₂, or that over ‖∂θ*‖₂.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/exact/exact_value.h"
#include "quire/interp/value.h"
#include "quire/precision/envelope.h"
#include "quire/realize/realization.h"

namespace quire::precision {

/// The argument lists of samples [first, first + count) of the envelope's
/// draw (θ first for a module's function), or of its file of samples (the
/// slices first … first + count − 1; io::IoError past its end). An --inputs
/// envelope has one sample: asking for any other is std::invalid_argument.
std::vector<std::vector<interp::Value>> envelope_samples(const elab::Program& prog, int entry, const Envelope& e,
                                                         int first, int count);

/// Where held-out samples come from and how many there are.
struct HeldOutSource {
  int count = 0;     ///< at most the number asked for
  uint64_t first = 0;  ///< the first one's seed (drawn), or its index in the envelope's samples_file
  std::string none;  ///< when count is 0: why ("the envelope's one sample is the file F.npz")
  std::string short_of;  ///< when a file holds fewer than asked: "F.npz holds 10 samples, 4 calibrated"
};

/// Up to `wanted` samples after the envelope's own: fresh draws (the seeds
/// after its samples'), or a file of samples' next slices, as many as it
/// holds. An --inputs envelope has none.
HeldOutSource held_out_source(const Envelope& e, int wanted);

/// The exact outputs of the entry on `samples`, at `bits`: computed once,
/// compared against many candidates.
std::vector<exact::ExactValue> exact_outputs(const elab::Program& prog, int entry,
                                             const std::map<std::string, int64_t>& dims,
                                             const std::vector<std::vector<interp::Value>>& samples, int bits);

/// max |y_i − y*_i| over the real leaves of a realized output and its exact
/// counterpart (NaN when either holds a NaN, +inf for an overflow).
double output_gap(const interp::Value& realized, const exact::ExactValue& reference);

/// max |y*_i| over the exact output's real elements.
double output_magnitude(const exact::ExactValue& reference);

/// A gradient against its exact counterpart: ‖∂θ − ∂θ*‖₂ and ‖∂θ*‖₂ over
/// every real leaf of the parameter tree a vjp returns second ((L, ∂θ)), the
/// differences taken at the reference's precision (NaN when either holds a
/// NaN, +inf for an overflow).
struct GradientGap {
  double difference = 0;
  double reference = 0;
  /// difference / reference when `relative` (0/0 is 0: an exact zero
  /// gradient computed exactly), else difference.
  double gap(bool relative) const;
};
GradientGap gradient_gap(const interp::Value& realized, const exact::ExactValue& reference);
/// ‖∂θ*‖₂ of an exact gradient, and ‖∂θ_a − ∂θ_b‖₂ of two the typed
/// interpreter computed (each (L, ∂θ)): the norms the gradient solve's terms are in.
double gradient_norm(const exact::ExactValue& vjp_result);
double gradient_difference(const interp::Value& a, const interp::Value& b);

/// The gaps of one realization, one per sample.
struct Gaps {
  std::vector<double> per_sample;
  double worst() const;  ///< the largest (NaN if any is)
  /// How many are ≤ budget (NaN never is).
  int inside(double budget) const;
};

/// Runs the entry under `r` in the typed interpreter on each sample and
/// measures its gap from the matching exact output.
Gaps measure_gaps(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                  const Realization& r, const std::vector<std::vector<interp::Value>>& samples,
                  const std::vector<exact::ExactValue>& reference);

/// measure_gaps for a vjp `(L, ∂θ)`: each sample's GradientGap::gap(relative).
Gaps measure_gradient_gaps(const elab::Program& prog, int vjp, const std::map<std::string, int64_t>& dims,
                           const Realization& r, const std::vector<std::vector<interp::Value>>& samples,
                           const std::vector<exact::ExactValue>& reference, bool relative);

}  // namespace quire::precision
