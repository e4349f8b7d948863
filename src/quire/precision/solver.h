#pragma once
// The solver: from a budget on the output's error to a storage type for
// every value the entry stores and every parameter (DESIGN.md §5 steps 3–4,
// docs/precision.md "The solver").
//
// 1. Choices. Every instruction site the entry stores, and every parameter
//    leaf (keyed by its path), starts at f64. Rules leave some unoffered,
//    each named in the output: a value of one element (rule 1); a value
//    whose first narrowing saves less than θ times the mean choice's
//    all-f64 cost (rule 2); a value a discontinuous operation reads (a comparison, a
//    where's condition, a Bernoulli's probability) unless the discontinuity
//    is to be measured (rule 3). Marks bound the rest: an explicit type or a
//    `precision(…)` region is not a choice; a `numerics(high)` island (or a
//    `numerics high` parameter's reader) never goes below f32.
// 2. The estimate. Σ over the choices of each one's term in its type T:
//    with aᵢ = ∂L/∂vᵢ·(fl_T(vᵢ) − vᵢ) over its elements and evaluations,
//    min(Σ|aᵢ|, max(|Σaᵢ|, 3·√Σaᵢ²)) from the exact reverse sweep
//    (sensitivity.h), the largest over the samples. At
//    f64 a site's term is its values' own rounding to f64, a parameter's 0.
//    A sum's or contraction's term adds its accumulation's:
//    √n·u_A·Σᵢ |∂L/∂vᵢ|·Σⱼ|tᵢⱼ|, n its terms per element, A its accumulator
//    (f64 at f64, f32 once narrowed, or f64 where that accumulator is
//    decided wide): n roundings of partial sums that grow to Σ|t|, each of
//    either sign, in the sequential order of the kernels.
//    First order: it ranks, it does not guarantee.
// 3. Narrowing. Every move (a choice one type narrower: f64 → f32 → the
//    better of bf16 and f16) is ranked by the cost it saves per unit of
//    estimate it adds; the best is taken while the estimate stays inside the
//    budget, and the choice's next move joins the queue. Cost is bytes moved
//    (the value written once and read by each reader, per evaluation), or
//    the profile's roofline time of those bytes and the value's arithmetic.
// 4. Measurement. The candidate runs in the typed interpreter against the
//    exact reference on the envelope's samples; while the worst gap exceeds
//    the budget, the choices with the largest terms are widened one type
//    (one in the first round, two in the second, four in the third, …) and
//    it is measured again. The gaps are measured on the envelope's samples
//    and on held-out ones (fresh draws, the seeds after the envelope's), and
//    the result is accepted only when every one of both is inside the budget.
//
// Requires: an elaborated program, the entry's envelope (its samples are
// rebuilt from it) and sensitivities. Produces: a Solution, its printout and
// the realization artifact (realization_file.h).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "quire/core/program.h"
#include "quire/machine/profile.h"
#include "quire/precision/envelope.h"
#include "quire/realize/realization.h"
#include "quire/realize/realization_file.h"
#include "quire/precision/sensitivity.h"

namespace quire::precision {

struct SolveOptions {
  double budget = 1e-3;
  bool relative = true;  ///< the budget is a fraction of the output's largest |y*| (else absolute)
  const machine::Profile* profile = nullptr;  ///< null: cost is bytes
  /// The types a choice may take besides f64, widest first.
  std::vector<FloatType> menu = {FloatType::F32, FloatType::BF16, FloatType::F16};
  bool measure_discontinuous = false;  ///< rule 3 offers those values, and the measurement decides
  double negligible = 1e-3;            ///< rule 2's θ, a fraction of the mean choice's all-f64 cost
  int held_out = 32;                   ///< fresh samples that must be inside the budget too
  /// A type is offered only where the largest |v| of the samples times this
  /// is finite in it (range as a hard constraint).
  double headroom = 4;
};

/// One narrowing taken.
struct Move {
  int number = 0;  ///< the order the solver took it in, from 1
  FloatType to = FloatType::F64;
  bool wide_accumulator = false;  ///< taken accumulating in f64: in f32 it left the budget
  double saving = 0;          ///< cost saved
  double added = 0;           ///< estimate added
  double estimate_after = 0;  ///< the estimate once taken
  int undone_in_round = 0;    ///< the widening round that reverted it (0: kept)
};

/// Why a choice is not offered (None: it is).
enum class Unoffered : uint8_t { None, OneElement, NegligibleTraffic, Discontinuity, NoNarrowerType };

/// A site or a parameter the solver could decide.
struct Choice {
  bool param = false;
  std::string name;       ///< the site (`RMSNorm.apply/%4`) or the path (`blocks.proj.w`)
  std::string operation;  ///< `pow 2 x`, or "a parameter, by its path"
  int64_t elements = 0;   ///< per evaluation
  int64_t evaluations = 1;
  int64_t reads = 0;      ///< readers in its function (a function's result counts its caller)
  int64_t terms = 1;      ///< terms per element (sums and contractions), for the arithmetic
  double magnitude = 0;   ///< the envelope's max |x|
  double sensitivity = 0;
  std::map<FloatType, double> rounding;  ///< r(T) for f64 and the menu: the largest rounding, for the printout and the half's choice
  WeightedRounding weighted;             ///< its stored value's rounding by type, weighted element by element (sensitivity.h)
  /// A gradient's solve: by type, ‖δ∂θ‖ (relative to ‖∂θ*‖ under a
  /// relative budget) with this choice alone narrowed to it, measured; the
  /// term itself when present.
  std::map<FloatType, double> alone;
  double accumulated = 0;                ///< a sum or contraction: Σᵢ |∂L/∂vᵢ|·Σⱼ|tᵢⱼ| (sensitivity.h); else 0
  /// The accumulator once narrowed: f32, or f64 where its accumulation in
  /// f32 would overdraw the budget (a choice of its own, realization.h's
  /// Assignment::accumulators). At f64 it is f64.
  FloatType accumulator = FloatType::F32;
  std::vector<FloatType> allowed;        ///< f64 then the narrower types it may take
  Unoffered rule = Unoffered::None;      ///< the rule that leaves it unoffered
  std::string unoffered;                 ///< that rule's sentence for it ("" if it is offered)
  std::string note;                      ///< a mark's floor, or a discontinuity to measure
  FloatType type = FloatType::F64;
  std::vector<Move> moves;

  /// Its term of the estimate in `t`: the weighted rounding (or s·r(t)
  /// where the sweep gave none for t), plus its accumulation's in the
  /// accumulator `t` implies.
  double term_in(FloatType t) const;
  /// The accumulation's part of term_in(t): √terms·u_A·accumulated, A f64
  /// at f64 and `accumulator` otherwise (or `acc` when given).
  double accumulation_in(FloatType t, std::optional<FloatType> acc = std::nullopt) const;
  /// Whether its accumulator is a choice: a sum or contraction with
  /// sensitivities (a gradient's terms are measured with f32).
  bool accumulates() const { return accumulated > 0 && alone.empty(); }
  double term() const { return term_in(type); }
};

/// A stored value the solver did not decide, and why.
struct Follower {
  std::string site;
  std::string operation;
  std::string role;  ///< "carried", "follows blocks.proj.w", "fixed: an explicit `as f32`"
  FloatType type = FloatType::F64;
  double magnitude = 0;
  double sensitivity = 0;
};

struct WideningRound {
  int round = 0;
  double measured_before = 0;
  /// Choice, the type it went back to; "NAME's accumulator" for an
  /// accumulator widened to f64 (the value's type kept).
  std::vector<std::pair<std::string, FloatType>> widened;
};

struct Solution {
  BudgetOf of = BudgetOf::Output;  ///< what the budget bounds
  std::string entry;
  std::string function;        ///< whose values the choices are: the entry, or its vjp (`loss.vjp[0]`)
  double budget = 0;           ///< as given
  bool relative = true;
  double magnitude = 0;        ///< the output's largest |y*| (the envelope's); a gradient's largest ‖∂θ*‖₂
  /// What each sample's measurement is held to: the output's absolute error,
  /// or a gradient's ‖∂θ − ∂θ*‖₂, over ‖∂θ*‖₂ of the same sample when relative.
  double budget_absolute = 0;
  std::string cost_unit;       ///< "bytes", or "s (the roofline of profile NAME)"
  double theta_cost = 0;       ///< rule 2's threshold in cost units
  std::vector<Choice> choices; ///< sites in program order, then parameters in declaration order
  std::vector<Follower> followers;
  int moves = 0;
  double proposal_cost = 0;    ///< the cost before any widening
  double cost = 0;
  double cost_all_f64 = 0;
  double estimate = 0;
  std::vector<double> measured;  ///< per calibration sample, of the accepted candidate
  std::vector<WideningRound> rounds;
  bool accepted = false;
  std::vector<double> held_out;  ///< per held-out sample
  /// Each held-out sample's seed (fresh draws), or its index in held_out_file.
  std::vector<uint64_t> held_out_seeds;
  std::string held_out_file;     ///< the file of samples they come from ("": drawn)
  std::string held_out_note;     ///< why there are none, or fewer than asked
  int bits = 128;
  int samples = 0;
  double headroom = 4;  ///< the range rule's, as solved
  Assignment assignment;

  double worst_measured() const;
};

/// Solves `entry` (which must be the envelope's, returning ℝ[]) under
/// `options`. std::invalid_argument for an envelope of another entry or
/// dims, or sensitivities of another entry.
Solution solve(const elab::Program& prog, int entry, const Envelope& envelope, const Sensitivities& sensitivities,
               const SolveOptions& options);

/// Solves the types of `objective`'s vjp with respect to its parameters (the
/// function a training step evaluates: its forward copies decided as the
/// primal's sites, its reverse sweep's values as their own, the parameters
/// by path, read as training reads them) under a budget on the gradient:
/// each sample's ‖∂θ − ∂θ*‖₂, relative to its ‖∂θ*‖₂ unless absolute. A
/// choice's term is measured (Choice::alone), not first order: quire takes
/// no second derivatives. Appends the vjp to `prog`. std::invalid_argument
/// as solve(), and for an objective that does not take parameters first.
Solution solve_gradient(elab::Program& prog, int objective, const Envelope& envelope, const SolveOptions& options);

/// The seed's §6.3 in quire's words: the summary, the decisions with their
/// terms, the moves, the values not offered, the followers (`sites` rows of
/// each table at most; negative: all).
std::string print_solution(const Solution& s, int sites = -1);

/// The ranges the narrowed sites' types were chosen for: each site decided
/// away from f64 with the envelope's largest |v|, and the headroom (the
/// realization file's `ranges`, which the envelope guard checks runs against).
DecisionRanges decision_ranges(const Solution& s);

/// The report the artifact carries beside its decisions.
nlohmann::ordered_json solution_report(const Solution& s);

}  // namespace quire::precision
