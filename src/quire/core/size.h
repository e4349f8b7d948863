#pragma once
// Symbolic axis sizes. A size is an integer polynomial over dimension symbols
// (a program's `dim B`, a module's `{In Out : dim}`), kept in a canonical form
// so that two spellings of one size compare equal (`2 * D` and `D + D`).
// Division is exact when every coefficient divides; otherwise `D / H` stays an
// opaque atom, equal only to itself and to what it is multiplied back into
// (`D / H * H` is `D`: a size's quotients divide exactly, which instances and
// evaluation check).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace quire::elab {

class Size {
 public:
  Size() = default;
  static Size constant(int64_t value);
  static Size symbol(const std::string& name);

  /// The value when it has no symbol.
  std::optional<int64_t> constant_value() const;
  bool is_constant() const { return constant_value().has_value(); }
  bool operator==(const Size& other) const { return terms_ == other.terms_; }

  /// Arithmetic; an overflow of int64 reports through `ok` = false.
  static Size add(const Size& a, const Size& b, bool& ok);
  static Size sub(const Size& a, const Size& b, bool& ok);
  static Size mul(const Size& a, const Size& b, bool& ok);
  static Size div(const Size& a, const Size& b, bool& ok);

  /// Replaces symbols by sizes (a call's dimension arguments, --dim values),
  /// inside opaque quotients too: `D / H` at D = 8, H = 2 is 4.
  Size substitute(const std::map<std::string, Size>& binding, bool& ok) const;
  /// The value under a binding of every symbol to a number; nullopt if a symbol
  /// is unbound or a quotient does not divide exactly.
  std::optional<int64_t> evaluate(const std::map<std::string, int64_t>& binding) const;
  /// Every symbol this size mentions, those inside quotients included.
  std::vector<std::string> symbols() const;

  /// "4", "B", "2·D + 1", "D / H"
  std::string str() const;

 private:
  // A monomial is a sorted list of atoms (symbols or opaque quotients), the
  // empty list being the constant term; terms_ maps monomials to coefficients,
  // never holding a zero coefficient.
  using Monomial = std::vector<std::string>;
  std::map<Monomial, int64_t> terms_;
  // Opaque quotients are spelled "(num)/(den)" as atoms; this keeps them comparable.
  // Their parts are kept beside them (by atom) so that substitution and
  // evaluation can divide again once the symbols are known. The spelling
  // determines the parts, so equality compares terms_ alone.
  using Parts = std::pair<std::shared_ptr<const Size>, std::shared_ptr<const Size>>;
  std::map<std::string, Parts> quotients_;
  void take_quotients(const Size& other) { quotients_.insert(other.quotients_.begin(), other.quotients_.end()); }
  // (N / M)·M = N: a quotient times its whole denominator cancels (mul does this).
  void cancel_quotients(bool& ok);
};

}  // namespace quire::elab
