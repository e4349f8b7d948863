#pragma once
// core::verify: Core's invariants (ir.h), written once, apart from the
// passes that must keep them. It runs after elaboration and after every
// Core-to-Core pass (the vjp) in Debug, sanitizer and fuzz builds
// (kVerifyCore), where a broken invariant is an internal error naming it.
//
//   - values are numbered arguments first (1 …), then one per instruction in
//     body order: every site `<function>/%<n>` is unique and stable;
//   - every operand is defined before its use, in the same function;
//   - an instruction has its operation's operand count (ops.def), and an
//     element-wise one an alignment per operand;
//   - operands of element-wise operations, reductions and contractions are
//     tensors; calls and folds name functions of the program;
//   - the result is a value of the function.

#include <cstddef>
#include <string>
#include <vector>

#include "quire/core/ir.h"

namespace quire::core {

#if !defined(NDEBUG) || defined(QUIRE_VERIFY)
inline constexpr bool kVerifyCore = true;
#else
inline constexpr bool kVerifyCore = false;
#endif

/// Every broken invariant of `fn`, one line each ("loss/%7: operand %9 is
/// defined after its use"); empty when it holds them all. `functions` is the
/// number of functions of its program (a callee's index is below it).
std::vector<std::string> verify(const Function& fn, size_t functions);

/// verify() on every function from `first` on; std::logic_error listing the
/// problems when any is found.
void verify_or_throw(const std::vector<Function>& functions, size_t first = 0);

}  // namespace quire::core
