#pragma once
// The kernel interpreter: runs a kernel of the IR (kernel_ir.h) statement by
// statement and so defines the bits every backend of kernels must produce.
// It is slow (a walk over the expression tree per element) and single-
// threaded: splitting an independent loop cannot change a bit, so it never
// needs to.
//
// Buffers are runtime tensors: a float buffer's values are held as f64
// (each exactly a value of the buffer's type), integer and boolean buffers
// as int64. Requires: one input tensor per input buffer, of its shape and
// kind (KernelMisuse otherwise).

#include <vector>

#include "quire/kernel/kernel_ir.h"
#include "quire/runtime/tensor.h"

namespace quire::kernel {

/// KernelMisuse unless there is one input per input buffer, each of its
/// buffer's shape and kind and holding as many values as its shape says
/// (compiled kernels read every element without bounds checks). A packed
/// product's scratch (Kernel::product) may be null: the runner fills it.
void check_inputs(const Kernel& k, const std::vector<const runtime::Tensor*>& inputs);

/// Runs `k` on its inputs (in buffer order) and returns its output. A null
/// scratch of a packed product is computed first, by its definition
/// (native::sgemm_reference, through with_packed_product).
runtime::Tensor run_kernel(const Kernel& k, const std::vector<const runtime::Tensor*>& inputs);

/// The tensor kind a buffer of this type is held in.
runtime::ElemKind held_kind(ElemType t);
/// The output buffer a runner hands `k`: zeros when `k` reads its output,
/// else not filled (k stores every element; kernel_ir.h). With `narrow`, an
/// output of a narrow float type is held as f32 alone (held_as_f32), for a
/// compiled kernel that writes f32.
runtime::Tensor output_for(const Kernel& k, bool narrow = false);

}  // namespace quire::kernel
