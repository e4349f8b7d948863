#pragma once
// The geometry of Core's instructions at run time, shared by the reference
// interpreter (interpreter.cpp) and the exact one (exact/): how a size, an
// operand's alignment, a contraction, a merge or a reduction of the language
// becomes the positional arguments of the runtime kernels, and which
// dimensions a callee runs under. One copy, so that the two interpreters
// cannot disagree on which elements an operation reads.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "quire/core/ir.h"
#include "quire/core/program.h"
#include "quire/core/size.h"
#include "quire/runtime/kernels.h"

namespace quire::interp {

/// A size under a run's dimensions. runtime::RuntimeError (which the caller
/// places at its site) when a dimension is unbound, the size is below 1, or a
/// quotient is not whole.
int64_t eval_size(const elab::Size& s, const std::map<std::string, int64_t>& dims);

/// The run-time alignment map of one operand of an element-wise instruction:
/// its `...` lines up with the result's from the right, its explicit axes by
/// the static map.
runtime::AxisMap axis_map(const elab::OperandAlignment& a, int64_t operand_rank, size_t operand_explicit,
                          int64_t result_rest);

/// The runtime kernels' operation for a Core element-wise or reduction op.
runtime::UnaryOp unary_op(core::Op op);
runtime::BinaryOp binary_op(core::Op op);
runtime::ReduceOp reduce_op(core::Op op);

/// The plan of `contract` over explicit axes `axes` = {d in a, d in b}:
/// `...`, a's other axes (batched with b's axis of the same name), then b's
/// axes that are neither d nor batched; d contracted with b's d. `rest_a`,
/// `rest_b`: the run-time counts of the operands' `...` axes; when b has a
/// `...` it is a's (the same axes, batched one for one), so the counts must
/// be equal (a RuntimeError otherwise; contract checks the sizes).
runtime::ContractPlan contract_plan(int rest_a, int rest_b, const elab::TensorType& ta, const elab::TensorType& tb,
                                    const std::vector<int>& axes, const std::vector<std::pair<int, int>>& pairs);

/// A scan's (or scan_grad_a's) run-time axes: its explicit axes t, n (of x)
/// and m (of a) after the `rest` leading `...` axes the operands share.
runtime::ScanAxes scan_axes(const core::Instr& in, int rest);

/// merge's permutation of x's axes: the merged axes gathered, in the order
/// listed, at the place of the first of them.
std::vector<int> merge_permutation(int rest, int explicit_axes, const std::vector<int>& merged);

/// The map from x's axes to a reduction's result: -1 for a reduced axis.
runtime::AxisMap reduced_map(int rank, int rest, bool all_axes, const std::vector<int>& axes);

/// The run-time axes of x (rank `rank`, `rest` leading `...` axes) that a
/// reduction over its explicit `axes`, or over all of them, sums away.
std::vector<int> reduced_axes(int rank, int rest, bool all_axes, const std::vector<int>& axes);

/// The dims of a Core walker's domain (core/walk.h) that runs at a run's
/// dimensions `run`: a callee's bound to the call's sizes in the caller's
/// (core::callee_dims), a fold's count its first size there.
struct RunDims {
  using Dims = std::map<std::string, int64_t>;
  const elab::Program& prog;
  const Dims& run;

  const elab::Program& program() const { return prog; }
  /// EvalError for a call whose callee did not elaborate; a size as eval_size fails.
  Dims callee_dims(const core::Instr& in, const Dims& caller) const;
  int64_t copies(const core::Instr& in, const Dims& caller) const { return eval_size(in.sizes.at(0), caller); }
};

/// The sub-tree of a parameter tree (path → leaf) under `prefix`, its paths
/// relative to it: subtree({"proj.w": …, "norm.γ": …}, "proj") = {"w": …}.
template <class Tree>
Tree subtree(const Tree& tree, const std::string& prefix) {
  Tree out;
  const std::string p = prefix + ".";
  for (auto it = tree.lower_bound(p); it != tree.end() && it->first.compare(0, p.size(), p) == 0; ++it)
    out.emplace(it->first.substr(p.size()), it->second);
  return out;
}

}  // namespace quire::interp
