#pragma once
// What a step evaluated on the reference kernels (reference_step.h) does
// with storage: where its value keeps its elements (in storage of its own,
// or in its first operand's, shared), and which operands' elements it reads
// (the others lend it their shape alone). A reshape shares always (a split,
// reshape_as); a transpose, a merge (and merge's cotangent) and a slice (and
// concat's cotangent) share when the view they take of a real operand is
// dense already, as the runtime decides (runtime::transpose_shares,
// slice_shares); every other operation makes elements of its own. The
// memory count (compile/memory.h) asks it of every such step, without
// running anything.

#include <vector>

#include "quire/core/program.h"
#include "quire/runtime/tensor.h"

namespace quire::interp {

struct StepStorage {
  bool shares = false;      ///< the value's elements are operand 0's (a real operand 0)
  std::vector<bool> reads;  ///< by operand: whether its elements are read, not its shape alone
};

/// evaluate_step's use of storage for `in`; `shapes`: every operand's shape
/// at run time. Calls, folds, tuples and trees (the Core walker's) share
/// nothing here.
StepStorage step_storage(const core::Function& fn, const core::Instr& in, const std::vector<runtime::Shape>& shapes);

}  // namespace quire::interp
