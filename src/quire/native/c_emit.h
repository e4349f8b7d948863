#pragma once
// C emission: a kernel of the IR (kernel/kernel_ir.h) as one self-contained
// C99 translation unit, the native backend's compiled form of it.
//
// Requires: a well-formed kernel (every index names loop variables of loops
// around it; KernelMisuse otherwise). Keeps: the kernel interpreter's bits
// (kernel_interpreter.h) for every input, NaN payloads aside. That holds only
// when the text is compiled without contraction or fast-math
// (c_compiler.h's flags), and because the helpers of c_prelude() are the
// runtime's f64 expressions (runtime::apply_unary, apply_binary, round_to)
// written out in C with the same formulas, order and constants.
//
// The storage convention is runtime::Tensor's: a float buffer is an array of
// double (each value exact in the buffer's type), an integer or boolean
// buffer an array of int64_t (a bool is 0 or 1).

#include <string>

#include "quire/kernel/kernel_ir.h"

namespace quire::native {

/// The symbol emit_c names a kernel's function by default: one name serves
/// all and keeps the text (and the cache key) independent of kernel ids; a
/// batch of kernels compiled as one unit renames it per kernel
/// (c_compiler.h, BATCHES), which the guarded prelude allows.
inline constexpr const char* kKernelSymbol = "quire_kernel";

/// The C helpers (`quire_round_bf16`, `quire_gelu`, `quire_max`, …) that
/// emitted kernels call, with the includes they need; emit_c's text starts
/// with it. Exposed so that tests can compile the helpers on their own.
std::string c_prelude();

/// The kernel as C: the prelude, the kernel's IR text as a comment, then
/// `void <symbol>(const void* const* inputs, void* output, int64_t lo,
/// int64_t hi)`, where inputs[b] is input buffer b's data and output the
/// output buffer's (already holding zeros, as run_kernel's output does).
/// The call runs iterations [lo, hi) of the kernel's split loop
/// (kernel::split_loop), or the whole kernel when it has none (lo and hi
/// unused); calls on disjoint ranges may run at once.
std::string emit_c(const kernel::Kernel& k, const std::string& symbol = kKernelSymbol);

}  // namespace quire::native
