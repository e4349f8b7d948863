#pragma once
// The bounds' rules for element-wise operations: how far f(x̂) can be from
// f(x), and a two-operand operation's result from its exact value, when each
// operand carries an error. The walk (bounds.cpp) applies them to each site,
// per rule (componentwise, normwise, cond), then adds the site's own rounding.
// A new element-wise operation adds its case here (the switches list every
// operation, so it does not build until it does).
//
// Notation as in bounds.cpp: M, m an operand's largest and smallest |x| (its
// envelope), δ its error under the rule being computed; under normwise δ is a
// 2-norm E ≥ max_i |x̂_i − x_i|, so every domain condition reads δ = E.

#include <limits>
#include <string>

#include "quire/core/ir.h"

namespace quire::precision {

/// a·b with 0·∞ = 0: an exact operand contributes nothing, however large the other.
inline double times(double a, double b) { return a == 0 || b == 0 ? 0 : a * b; }

/// What the rules know of one operand under one rule.
struct RuleOperand {
  double max_abs = 0;  ///< M
  double min_abs = 0;  ///< m
  double error = 0;    ///< δ
  /// The exact values' signed range where it is known (the running rule's
  /// one element); NaN: [−M, M]. exp's slope is taken at the top, log1p's at
  /// the bottom.
  double top = std::numeric_limits<double>::quiet_NaN();
  double bottom = std::numeric_limits<double>::quiet_NaN();
};

/// A rule's result: the result's error, why it is infinite (empty when it is
/// finite, or infinite only because an operand's is), and whether the rule
/// read an operand's smallest |x| (the envelope must then record it).
struct Propagated {
  double error = 0;
  std::string why;
  bool reads_min_abs = false;
};

/// x ↦ f(x) for the one-operand element-wise `in`: f's Lipschitz constant over
/// [m − δ, M + δ] times δ (√ has its own rule). `count`: x's elements (√'s
/// normwise rule grows with count^¼). Real and Cast are not bounded here.
Propagated unary_rule(const core::Instr& in, const RuleOperand& x, bool normwise, double count);

/// a ∘ b for a two-operand element-wise `op` (not a comparison, not `where`):
/// `ea`, `eb` the operands' errors as they reach the result (under normwise,
/// each one's norm grown by its broadcast).
Propagated binary_rule(core::Op op, const RuleOperand& a, const RuleOperand& b, double ea, double eb, bool normwise);

/// A linearization of one element-wise operation at one element's exact
/// operand values, the running bound's (running_bounds.h): for every error
/// e with |e| ≤ δ, f(x + e) = f(x) + slope·e + q with |q| ≤ remainder.
/// The remainder is the second-order term, ½·sup|f''|·δ² over [x − δ, x + δ]
/// (for a product, δa·δb). `valid` is false where there is no such form (a
/// kink within δ of x, an interval that leaves the domain): the Lipschitz
/// rule (unary_rule, binary_rule) bounds the element instead. The slope is
/// f' at x as the double nearest it; the caller widens δ by x's distance to
/// it, which the remainder then covers.
struct Linearized {
  double slope = 0, slope_b = 0;  ///< ∂/∂a (the one operand), ∂/∂b
  double remainder = 0;
  bool valid = false;
};

/// One operand: `in`'s f at x, δ its error (widened as above).
Linearized unary_linearization(const core::Instr& in, double x, double delta);

/// Two operands (add, sub, mul, div, min, max): a and b, δa and δb.
Linearized binary_linearization(core::Op op, double a, double b, double delta_a, double delta_b);

}  // namespace quire::precision
