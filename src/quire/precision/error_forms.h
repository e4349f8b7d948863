#pragma once
// The running bound's representation of errors (running_bounds.h): for each
// element i of a value, its error v̂_i − v_i as a linear form over the
// rounding errors of the run, plus what the form cannot carry:
//
//   v̂_i − v_i = c_i + Σ_k a_ik·ε_k + r_i,   |ε_k| ≤ 1,  |r_i| ≤ ρ_i
//
// c_i is an error known exactly (an entry argument's or a parameter's own
// rounding on the sample), each ε_k one local error of the run scaled to
// [−1, 1] (a rounding, a library function's error, an accumulation's), and
// ρ_i bounds what is not linear in them (a product of two errors, a
// linearization's remainder, an error whose form was given up). A form keeps
// the signs with which one local error reaches an element by several paths,
// so that x + (−x) or a division by a row's own norm cancels them as the
// exact run does: this is affine arithmetic (Stolfi & de Figueiredo), the
// bound of element i being |c_i| + Σ_k |a_ik| + ρ_i.
//
// Each symbol also records how it may be read as a random variable, for the
// probabilistic estimate: a rounding's error is a sum of roundings (one, or
// an accumulation's steps) each bounded by a known constant, whose root sum
// of squares is `spread`·a; a library function's error is not a rounding
// and is never taken as random (spread 0).
//
// Rows are condensed: an element whose form grows past kMaxTerms terms keeps
// its largest and moves the others' Σ|a| into ρ, which loses only the
// cancellations those small terms could have made.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace quire::precision {

/// The most terms one element's form keeps.
inline constexpr size_t kMaxTerms = 1024;

/// The run's local errors: symbol k's spread (0 ≤ spread ≤ 1; 0: not random).
class ErrorSymbols {
 public:
  /// A new symbol.
  uint32_t fresh(double spread);
  double spread(uint32_t k) const { return spread_[k]; }
  size_t size() const { return spread_.size(); }

 private:
  std::vector<float> spread_;
};

/// The forms of one value's elements, immutable once built (values share it).
struct ErrorForms {
  std::vector<double> center;   ///< c_i
  std::vector<double> rest;     ///< ρ_i
  std::vector<double> total;    ///< |c_i| + Σ|a_ik| + ρ_i: the element's bound
  std::vector<size_t> offset;   ///< element i's terms are [offset[i], offset[i + 1])
  std::vector<uint32_t> symbol;
  std::vector<double> coefficient;

  size_t size() const { return center.size(); }
  /// The largest bound over the elements (NaN counts as +inf), 0 for none.
  double largest() const;
  /// Element i's bound read as an estimate: |c| + ρ + the non-random terms'
  /// Σ|a|, and λ·√Σ(spread·a)² for the random ones (Azuma–Hoeffding: with
  /// probability ≥ 1 − 2·exp(−λ²/2) under the model), never above `total`.
  double estimate(size_t i, const ErrorSymbols& symbols, double lambda) const;
};

using SharedForms = std::shared_ptr<const ErrorForms>;

/// Forms with no error (n elements), and forms that only bound (ρ = rest).
SharedForms exact_forms(size_t n);
SharedForms bound_forms(const std::vector<double>& rest);

/// Builds a value's forms element by element, each a linear combination of
/// other forms' elements, plus new terms: a dense accumulator over the
/// symbols, so that each element costs the terms it reads.
class FormBuilder {
 public:
  explicit FormBuilder(ErrorSymbols& symbols) : symbols_(symbols) {}

  /// Starts forms of `n` elements.
  void begin(size_t n);
  /// Adds scale · element i of f to the current element.
  void add(const ErrorForms& f, size_t i, double scale);
  void add_center(double c) { center_ += c; }
  void add_rest(double r) { rest_ += r; }
  /// Adds a term coefficient·ε_k.
  void add_term(uint32_t k, double coefficient);
  /// The current element's bound so far: |c| + Σ|a| + ρ.
  double current_total() const;
  /// Replaces the current element by a bound alone (its form given up for a
  /// smaller bound another rule gives).
  void replace_by_bound(double bound);
  /// Ends the current element (condensing it to kMaxTerms terms) and starts the next.
  void next();
  /// The forms built; every element must have been ended.
  SharedForms finish();

 private:
  ErrorSymbols& symbols_;
  std::unique_ptr<ErrorForms> out_;
  std::vector<double> dense_;    ///< by symbol
  std::vector<uint8_t> seen_;    ///< by symbol: whether touched_ lists it
  std::vector<uint32_t> touched_;
  double center_ = 0, rest_ = 0;
};

}  // namespace quire::precision
