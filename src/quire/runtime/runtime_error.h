#pragma once
// The two ways a tensor kernel can fail. The interpreter has already checked
// names, kinds, broadcasting and axis choices statically, so a kernel fails
// only on what the static types cannot see: the values of the data and the
// run-time sizes of symbolic axes (RuntimeError, reported to the user), or a
// call that breaks a kernel's stated preconditions (KernelMisuse, a bug in the
// interpreter that must never be blamed on the program).

#include <stdexcept>

namespace quire::runtime {

/// A data-dependent failure of one run: an id out of range in gather, two
/// run-time sizes that disagree, a value that does not fit the target kind.
/// The message names the operation, the axis (or index) and both sizes, e.g.
/// "gather: id 50304 at [3, 7] is outside the table's axis 0 of size 50257".
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A kernel called against its preconditions (an axis index out of range, an
/// alignment map that names an axis twice, an element kind the operation does
/// not take). Static checking should make these impossible; the message starts
/// with "internal:" and names the broken invariant.
struct KernelMisuse : std::logic_error {
  using std::logic_error::logic_error;
};

}  // namespace quire::runtime
