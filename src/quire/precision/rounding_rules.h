#pragma once
// The rounding rules of the bounds (docs/precision.md, "Bounds and the
// measurement"), stated once for both walks: bounds.cpp applies them to the
// envelope's largest magnitudes, running_bounds.cpp to each sample's own
// values, element by element. Each rule takes, of one value, a magnitude M
// that bounds its exact value's |v| and the error δ carried to it, so that
// the computed |ŵ| ≤ M + δ; each returns the error after the step. These are
// the componentwise forms: bounds.cpp's normwise rule states its Frobenius
// forms beside their use.
//
// Which roundings the typed interpreter performs (a store through f32 to a
// half, a read-down, none for a value its type holds) is the interpreter's
// (interp/reference_step.h); store_roundings and reads_down restate those
// decisions in terms of types alone, for both walks.

#include <optional>
#include <string>
#include <vector>

#include "quire/core/ir.h"
#include "quire/realize/realization.h"
#include "quire/runtime/float_types.h"

namespace quire::precision {

/// A type's unit roundoff u (2^-p).
double unit(runtime::FloatType t);
/// A type's smallest subnormal η: a rounding's absolute error below its normal range is at most η/2.
double tiny(runtime::FloatType t);
/// u_f64.
inline constexpr double kU64 = 0x1p-53;

/// Whether every value of `narrow` is a value of `wide` (f64 holds all; f32 holds bf16 and f16).
bool holds(runtime::FloatType wide, runtime::FloatType narrow);
/// The narrowest type that holds values of both.
runtime::FloatType join(runtime::FloatType a, runtime::FloatType b);

/// Whether the f64 kernel of `in` is a library function, whose own error
/// the bounds add (kernel_charged): anything but + − × ÷ √, the copies and
/// the selections, which are correctly rounded or exact. `pow 2` is x·x
/// (runtime::BinaryOp::Pow squares a literal 2), so it is not one.
bool library_function(const core::Instr& in);

/// γ_j(u) = j·u / (1 − j·u): the relative error of j roundings of unit u
/// (Higham, Accuracy and Stability, Lemma 3.1); +inf once j·u ≥ 1.
double gamma(double j, double u);

/// The unit of one step of an accumulator of type `acc`: the f64 kernel's
/// rounding, then (for a narrower type) the rounding to `acc`.
double step_unit(runtime::FloatType acc);

/// The rounded steps on each term's path through a sum of k terms: k − 1
/// additions (the first adds the term to +0, exactly), k for a mean (its
/// division), one more where the terms must themselves be rounded to the
/// accumulator (`terms_rounded`).
double sum_steps(double k, bool mean, bool terms_rounded);

/// One rounding to `t` of a value with |ŵ| ≤ magnitude + error: its own
/// error, u_t·(magnitude + error) + η_t/2; +inf where (magnitude + error)·(1 +
/// u_t) may exceed t's largest finite number.
double rounding_error(double magnitude, double error, runtime::FloatType t);
/// The error after that rounding: error + rounding_error(magnitude, error, t).
double rounded(double error, double magnitude, runtime::FloatType t);
/// Why `rounded` gave +inf: "its values (up to X with their error) may overflow T".
std::string overflow_why(double magnitude, double error, runtime::FloatType t);

/// A library function's own error at an element of scale ≥ max(|x̂|, |v̂|):
/// 8·u_f64·scale (see kernel_charged).
double library_error(double scale);

/// The f64 kernel's own error on a computed element whose exact value has
/// |v| ≤ magnitude and to which `error` has propagated: a library function's
/// 8·u_f64·library_scale (glibc's functions are within a few ulps, quire's exp
/// and erf within one, composite ones such as gelu lose a few more relative to
/// their argument; library_scale bounds max(|x̂|, |v̂|), < 0 for a correctly
/// rounded operation), then the kernel's rounding of the result.
double kernel_charged(double error, double magnitude, double library_scale);

/// logsumexp's own error on one result element, computed as
/// m + log Σ exp(x − m) over k terms accumulated in steps of unit `ua`:
/// relative to Σ ∈ [1, k], each term's x − m rounding (|x − m| ≤ 2·x_scale,
/// x_scale ≥ max |x̂|), the library's exp and its rounding, and the sum's
/// rounding `sum_gamma` (γ_(k−1)); then log's library error and rounding, and
/// the final add's rounding (out_scale ≥ |lse| + its propagated error).
/// +inf where the terms lose every digit to their rounding.
double logsumexp_rounding(double k, double ua, double x_scale, double out_scale, double sum_gamma);

/// The roundings a site's computed value takes on store, in order, as
/// interp::store_at_site performs them: through f32 first for a computed
/// half (unless half intermediates are kept or the operation is stored
/// directly), then to the site's type; none for a value whose type already
/// holds it. `lies_in`: the type the value's elements are values of (nullopt:
/// 0s and 1s, exact in every type). Not for a carried site (Reason::Carried).
std::vector<runtime::FloatType> store_roundings(const SiteType& st, bool half_intermediates, core::Op op,
                                                std::optional<runtime::FloatType> lies_in);

/// Whether a site that reads down reads an operand of type `operand_type`
/// (realized as `operand_site`) in its own `read_as` type (scalar constants
/// are never read down), as interp::evaluate_step does. The caller rounds it
/// unless read_as holds operand_type.
bool reads_down(const SiteType* st, const std::optional<SiteType>& operand_site, runtime::FloatType operand_type);

}  // namespace quire::precision
