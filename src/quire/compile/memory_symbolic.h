#pragma once
// memory --symbolic: what one call needs as polynomials in the entry's
// dimensions (docs/memory.md#symbolic), found from counts, not derived.
//
// The call is compiled and counted (memory.h) at every point of a grid
// around the dimensions given: each dimension d takes the values
// given_d + 0 … given_d + kSymbolicDegree, all combinations. A buffer holds
// a product of sizes, so its bytes are a polynomial of degree at most its
// rank in each dimension; the grid's kSymbolicDegree + 1 values per
// dimension determine any polynomial of that degree or less exactly
// (Newton's forward differences, in exact integer arithmetic). Each formula
// is then checked at a point off the grid (every dimension at
// given_d + kSymbolicDegree + 2): a count that differs there, such as a peak
// that moves from one site to another as a dimension grows (a maximum of
// polynomials is not one polynomial), is a SymbolicError naming the
// quantity, never a silently wrong formula. A formula is a statement about
// the sizes from the given ones up (the grid and the check lie there):
// below them the peak may sit at another site (the tutorial's step under
// `store` does at B = 1).
//
// Formulas are kept for the inputs, the outputs, the parameters, the peak
// and the need, and for every buffer of the host program (by instance and
// value) when the host program's instances are the same at every point
// (a dimension that sets a fold's count changes them; then only the totals
// are given).

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "quire/compile/compile.h"
#include "quire/compile/memory.h"

namespace quire::compile {

/// The degree each dimension is fitted to: a buffer of rank ≤ 3 in one
/// dimension (a cube of it) is exact; a higher power fails the check.
inline constexpr int kSymbolicDegree = 3;
/// The most dimensions fitted at once: the grid has (degree + 1)^dims points.
inline constexpr size_t kSymbolicMaxDims = 3;

/// A formula that the check off the grid refutes, or a call that cannot be fitted.
struct SymbolicError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A polynomial in named dimensions with rational coefficients (integers in
/// practice: bytes are products of sizes), by monomial: the exponent of each
/// dimension, in `dims` order.
struct Polynomial {
  std::vector<std::string> dims;
  /// Monomial → numerator; every coefficient is numerator / denominator.
  std::map<std::vector<int>, __int128> terms;
  __int128 denominator = 1;

  /// Exact value at `at` (every dimension of `dims` bound), when it is an integer.
  bool value_at(const std::map<std::string, int64_t>& at, __int128& out) const;
  /// "64·B + 736", highest degree first; "0" for none.
  std::string str() const;
};

struct SymbolicBuffer {
  int instance = -1;
  int value = 0;
  int64_t bytes_at_given = 0;  ///< at the dimensions given
  Polynomial bytes;
};

struct SymbolicMemory {
  std::map<std::string, int64_t> given;        ///< the dimensions as given (the grid's corner)
  std::map<std::string, int64_t> check_point;  ///< where the formulas were checked
  Polynomial parameters, inputs, outputs, peak, needs;
  /// Every buffer with bytes, largest at the given dimensions first; empty
  /// when the instances differ across the grid (`buffers_note` says why).
  std::vector<SymbolicBuffer> buffers;
  std::string buffers_note;
};

/// Fits and checks (see the file comment). `request` is compiled at each
/// point with its dims replaced; it must not ask for a gradient (compile the
/// vjp as the entry instead). SymbolicError when a formula fails its check,
/// when no dimension is given, or when more than kSymbolicMaxDims are.
SymbolicMemory count_symbolic_memory(const elab::Program& prog, const CompileRequest& request);

std::string print_symbolic_memory(const elab::Program& prog, const CompiledProgram& at_given, const SymbolicMemory& s,
                                  const std::string& label, size_t buffers_shown = 12);
nlohmann::ordered_json symbolic_memory_json(const elab::Program& prog, const CompiledProgram& at_given,
                                            const SymbolicMemory& s, const std::string& label);

}  // namespace quire::compile
