#pragma once
// Lowering: one launch of a realized function (a fusion group, or a launch
// no group holds) to a kernel of the IR, at the concrete shapes and types its
// inputs have at run time (docs/backends.md#kernels).
//
// The nest loops over the launch's result, every loop independent. Inside,
// each step computes its element into a scalar: an element-wise step from
// its operands, a reduction or a product by an inner fold over its reduced
// or contracted axes in row-major order (the order the reference kernels
// state, runtime/kernels.h); the root's scalar is stored. Each step rounds as
// the reference interpreter stores its site: a real operand read down to the
// site's half is rounded first (scalar constants excepted), a reduction or
// product rounds every step of its fold to the accumulator, and the result
// rounds to the site's storage (through f32 first for a computed half value,
// unless the realization keeps half intermediates). So a kernel computes, bit
// for bit, what the reference interpreter computes for the same sites,
// whether or not the steps share one nest.
//
// The adjoint of broadcasting (sum_to) is a fold too: each element of the
// result sums the cotangent elements it was broadcast to, in the cotangent's
// row-major order, as the reference walks them.
//
// Not lowered (the reason is returned, and the caller evaluates the launch's
// instructions one at a time with the reference kernels): data movement,
// draws, the adjoint of gathering, integer arithmetic (its
// overflow checks belong to the reference kernels), a member of a group read
// through a broadcast, empty reductions and mismatched sizes (the reference
// kernels report those).

#include <string>
#include <variant>
#include <vector>

#include <memory>
#include <optional>

#include "quire/core/program.h"
#include "quire/interp/value.h"
#include "quire/kernel/fusion.h"
#include "quire/kernel/kernel_ir.h"
#include "quire/realize/realization.h"

namespace quire::kernel {

struct LoweredLaunch {
  Kernel kernel;
  std::vector<int> inputs;  ///< the value each input buffer reads, in buffer order
  /// Where the group's product can be packed (an f32 `--product-step fma`
  /// site whose axes merge into [batch…] m × n × k): the same launch with
  /// the product computed ahead (Kernel::product) and the nest reading its
  /// scratch, an input whose entry in `inputs` is -1. The plan chooses.
  std::shared_ptr<LoweredLaunch> packed;
};

/// Lowers group `g` of `fn` (its steps in body order, the root last) under
/// `table` (nullptr: an f64 run) with the values its inputs hold in `env`.
/// `half_intermediates` is the realization's. Returns the kernel, or why the
/// group has none.
std::variant<LoweredLaunch, std::string> lower_group(const core::Function& fn, const FusionGroup& g,
                                                     const precision::FunctionRealization* table,
                                                     bool half_intermediates, const std::vector<interp::Value>& env);

}  // namespace quire::kernel
