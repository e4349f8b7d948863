#pragma once
// Symbolic axis sizes. A size is an integer polynomial over dimension symbols
// (a program's `dim B`, a module's `{In Out : dim}`), kept in a canonical form
// so that two spellings of one size compare equal (`2 * D` and `D + D`).
// Division is exact when every coefficient divides; otherwise `D / H` stays an
// opaque atom, equal only to itself.

#include <cstdint>
#include <map>
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

  /// Replaces symbols by sizes (a call's dimension arguments, --dim values).
  Size substitute(const std::map<std::string, Size>& binding, bool& ok) const;
  /// The value under a binding of every symbol to a number; nullopt if a symbol is unbound.
  std::optional<int64_t> evaluate(const std::map<std::string, int64_t>& binding) const;
  /// Every symbol this size mentions.
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
};

}  // namespace quire::elab
