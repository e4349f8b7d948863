#pragma once
// The sensitivities: ‖∂L/∂v‖₁ at every site, from one reverse sweep in the
// exact reference (DESIGN.md §5 step 2, docs/precision.md).
//
// L is the entry's scalar result. The entry's vjp (grad/vjp.h) runs in the
// exact interpreter at N bits with the cotangent 1; every vjp it evaluates
// (the entry's, each call's, each fold copy's) holds, for each value v of the
// function it differentiates, v's total cotangent ∂L/∂v in that evaluation
// (core::Function::cotangent_of). A site's sensitivity is Σ|∂L/∂v_i| over its
// elements, summed over every evaluation of the site: a function called twice
// counts both calls, a fold's callee once per copy. It is how far an error of
// one unit in every element of v moves L, to first order.
//
// The same sweep gives each site's per-element estimate of storing it in a
// type T. With aᵢ = ∂L/∂vᵢ·(fl_T(vᵢ) − vᵢ) over its elements and
// evaluations (fl_T(vᵢ) the exact value rounded to T, envelope.h), it is
//
//   min(Σ|aᵢ|, max(|Σaᵢ|, 3·√Σaᵢ²))
//
// |Σaᵢ| is the first-order effect of those roundings on L for this input,
// signs included; 3·√Σaᵢ² is three standard deviations of the same roundings
// taken as independent and of either sign, which another input's may be;
// Σ|aᵢ| (every rounding with the sign that hurts) bounds both. Each element's
// cotangent meets that element's own rounding, where ‖∂L/∂v‖₁ times the
// largest rounding pairs the largest cotangent with the largest value's
// rounding: for −log p over a softmax the two are 1/p at the smallest p and
// the rounding of the largest p, and their product is no error any element
// makes.
//
// A sum or contraction (ExactInterpreter::adds_terms) also gets the weight
// of its accumulation, Σᵢ |∂L/∂vᵢ|·Σⱼ|tᵢⱼ| over its result elements i and
// their terms tᵢⱼ (ExactInterpreter::absolute_terms): the solver turns it
// into an estimate of the accumulator's rounding (solver.h).
//
// Sites are the real tensors (arguments and instructions) of every function
// whose vjp the sweep evaluates; a site no cotangent reaches has 0. Tuples and
// parameter trees are not sites (their real leaves are, where read).
//
// Requires: an elaborated program without errors; an entry returning ℝ[];
// arguments that check against its types. Modifies: appends the entry's vjp
// (and its callees') to the program, as grad::vjp does.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/interp/value.h"
#include "quire/runtime/float_types.h"

namespace quire::precision {

/// The estimate above by type, for f64 and each of envelope.h's
/// kCandidateTypes: the first-order change of L were v stored in T. +inf
/// where an element with a nonzero cotangent overflows T.
using WeightedRounding = std::map<runtime::FloatType, double>;

/// The types WeightedRounding holds: f64, then envelope.h's kCandidateTypes.
inline constexpr runtime::FloatType kWeightedTypes[] = {runtime::FloatType::F64, runtime::FloatType::F32,
                                                        runtime::FloatType::BF16, runtime::FloatType::F16};

/// A value's term of the first-order estimate stored in `t` (solver.h): its
/// weighted rounding in t, or `l1` times `rounding` (s·r) where the sweep
/// gave none for t.
double stored_term(const WeightedRounding& weighted, runtime::FloatType t, double l1, double rounding);

/// A sum's accumulation term: √terms·u_A·accumulated, its `terms` per result
/// element rounding partial sums of either sign in `accumulator` A.
double accumulation_term(double accumulated, int64_t terms, runtime::FloatType accumulator);

/// One site's ‖∂L/∂v‖₁, summed over its evaluations.
struct SiteSensitivity {
  std::string site;      ///< core::site_name: "RMSNorm.apply/%4"
  std::string function;  ///< "RMSNorm.apply"
  double l1 = 0;
  WeightedRounding weighted;  ///< summed over its evaluations, as l1
  /// A sum or contraction: Σᵢ |∂L/∂vᵢ|·Σⱼ|tᵢⱼ|, summed over its evaluations;
  /// 0 for any other site.
  double accumulated = 0;
};

/// One parameter leaf's ‖∂L/∂θ.path‖₁: its gradient's 1-norm (a stacked
/// leaf's over every copy), whichever sites read it.
struct ParamSensitivity {
  std::string path;  ///< `blocks.proj.w`
  double l1 = 0;
  WeightedRounding weighted;  ///< over its elements; 0 at f64, where its values are exact
};

struct Sensitivities {
  std::string entry;
  int bits = 128;
  /// By function in program order (Program::functions), then by value number.
  std::vector<SiteSensitivity> sites;
  /// The entry's parameter leaves in declaration order (empty without θ).
  std::vector<ParamSensitivity> params;

  const SiteSensitivity* site(const std::string& name) const;
  const ParamSensitivity* param(const std::string& path) const;
};

/// Runs the vjp of `entry` (which must return ℝ[]) at `bits` on `args` (θ
/// first for a module's function) with cotangent 1 and sums |∂L/∂v| at every
/// site. std::invalid_argument for an entry whose result is not ℝ[];
/// interp::EvalError as the run throws.
Sensitivities sensitivities(elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                            const std::vector<interp::Value>& args, int bits);

/// Site by site and path by path, the largest of several samples'
/// sensitivities (l1, accumulated and each type's weighted rounding on its own) (all of one entry, listing the same sites). std::invalid_argument if empty.
Sensitivities largest_of(const std::vector<Sensitivities>& samples);

/// Two tables: the functions by Σ of their sites' sensitivities, descending;
/// then the `top` sites by sensitivity, descending.
std::string print_sensitivities(const Sensitivities& s, int top = 30);

/// {"format": "quire-sensitivities", "version": 2, entry, bits, sites: [{site, function, l1,
/// weighted: {f64, f32, bf16, f16}, accumulated (sums and contractions)}], params: [{path, l1, weighted}]};
/// a non-finite number is the string "inf" or "nan".
nlohmann::ordered_json sensitivities_json(const Sensitivities& s);

}  // namespace quire::precision
