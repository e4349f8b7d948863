#pragma once
// Reverse-mode differentiation of Core: the vector-Jacobian product of a
// function, as another Core function.
//
//   fn f.vjp(args of f…, ct : result of f) -> (result of f, ∂args[wrt[0]], ∂args[wrt[1]], …)
//
// The body is f's own instructions (the forward sweep, every value kept),
// then the reverse sweep: for each instruction, last first, the rule of its
// operation turns the cotangent of its result into contributions to its
// operands' cotangents, which add up where a value is read more than once.
// A call's rule calls the callee's vjp (which recomputes the callee's forward
// values: each function keeps its own, none of its callees'); a fold's is
// `fold_vjp`, which runs the copies' vjps last copy first.
//
// Each instruction of the reverse sweep carries the numerics mark of the
// forward instruction it differentiates, so the realization treats the
// backward of a sensitive value as sensitive; the gradient is appended before
// any realization runs and is realized like the forward.
//
// The vjp records, for each value of f that is a real tensor, which of its
// own values holds that value's total cotangent when the reverse sweep is
// done (core::Function::cotangent_of); precision/sensitivity.h reads them.
//
// Differentiable arguments are real tensors, parameter trees and tuples of
// them; the cotangent of a parameter tree is a tree of the same shape. Values
// that are not real (integers, booleans, keys, host scalars) have no cotangent.
// Requires: a program elaborated without errors.

#include <string>
#include <vector>

#include "quire/core/program.h"

namespace quire::grad {

/// Whether a value of this type can have a cotangent: a real tensor, a
/// parameter tree, or a tuple holding one.
bool differentiable(const elab::Type& t);

/// f's arguments that can have a cotangent, by index into f.args.
std::vector<int> differentiable_args(const core::Function& f);

/// The vjp of `function` with respect to the arguments `wrt` (indices into
/// its args, each differentiable): appended to prog.functions on first use,
/// with the vjps of every function it calls, and returned by index. Named
/// `<f>.vjp` when `wrt` is every differentiable argument, `<f>.vjp[i,j]` otherwise.
int vjp(elab::Program& prog, int function, const std::vector<int>& wrt);

}  // namespace quire::grad
