#pragma once
// Which operand elements each result element of an instruction reads, for
// the running bound (running_bounds.cpp), which carries a form per element
// and so must follow every element to where it goes. Each map comes from the
// runtime's own kernels run on element numbers (1, 2, …, as reals) rather
// than from a restatement of their geometry: a copy kernel moves the
// numbers, a broadcast spreads them, a gather picks them, so that the maps
// cannot drift from what the kernels do. Element numbers are row-major
// offsets; −1 means none.
//
// Requires: shapes that the instruction accepts (the exact run has run it).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/runtime/kernels.h"

namespace quire::precision {

/// For each result element, the operand element it reads: an element-wise
/// operand aligned through `map` to `result`'s shape.
std::vector<int64_t> aligned_elements(const runtime::Shape& operand, const runtime::AxisMap& map,
                                      const runtime::Shape& result);

/// For each result element of a sum (or max, or logsumexp) of `operand`
/// through `map` (interp::reduced_map) to `result`, the operand elements it
/// adds, in the order the kernel folds them.
std::vector<std::vector<int64_t>> reduced_elements(const runtime::Shape& operand, const runtime::AxisMap& map,
                                                   const runtime::Shape& result);

/// Groups operand elements by the result element they add into: owner[i]
/// (−1: none), each group in increasing i, the order of a fold over the
/// operand in row-major order (sum_to's, gather_grad's).
std::vector<std::vector<int64_t>> group_by_owner(const std::vector<int64_t>& owner, size_t results);

/// For each result element of sum_to(ct, `map`, `operand`) (the adjoint of
/// broadcasting `operand` to ct's shape), the ct elements it adds.
std::vector<std::vector<int64_t>> summed_to(const runtime::Shape& ct, const runtime::AxisMap& map,
                                            const runtime::Shape& operand);

/// For each result element of gather_adjoint(ct, `table`, axis, ids), the ct elements it adds.
std::vector<std::vector<int64_t>> gathered_back(const runtime::Shape& table, int axis, const runtime::Tensor& ids,
                                                size_t results);

/// A contraction's terms: result element j adds the products of p[p_at[t]]
/// and q[q_at[t]] for t in [j·k, (j + 1)·k), in the kernel's order (the
/// contracted index tuples in row-major order of the pairs as listed).
struct ContractionTerms {
  std::vector<int64_t> p_at, q_at;
  size_t k = 0;
};
ContractionTerms contraction_terms(const runtime::ContractPlan& plan, const runtime::Shape& p,
                                   const runtime::Shape& q);

/// A copy instruction (transpose, split, merge, concat, slice, gather,
/// reshape_as, merge_grad, concat_grad, slice_grad) run by the reference
/// kernels on its operands' element numbers: for each result element, which
/// operand and which of its elements it is a copy of ({-1, -1}: none, a
/// scatter's zero). `operands` are the instruction's own (their shapes; a
/// gather's ids as they are).
struct CopiedFrom {
  std::vector<int> operand;
  std::vector<int64_t> element;
};
CopiedFrom copied_from(const core::Function& fn, const core::Instr& in, const std::vector<const runtime::Tensor*>& operands,
                       const std::map<std::string, int64_t>& dims);

}  // namespace quire::precision
