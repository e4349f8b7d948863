#pragma once
// `quire export --target c`: a compiled entry (compile/compile.h) as a
// standalone C11 program that needs libc and libm alone (docs/export.md).
//
// The program is the host program of the call, written out: one C function
// per instance, its steps in order. A kernel step calls the kernel as the
// native backend compiles it (native/c_emit.h, the same text), a packed
// product first computes its chain (kernel::PackedProduct) in the runtime;
// a launch without a kernel calls the runtime's twin of the reference
// kernel (copies as boxes that the reference kernel itself was seen to copy,
// export/c_copies.h; gathers, draws, keys); a host step becomes a constant,
// a parameter's pointer, or nothing (tuples and trees are the generator's
// bookkeeping); calls and folds call their instances, a fold's parameters
// sliced by pointer. Every value is stored as the native backend stores it
// and rounded where store_at_site rounds it, so the outputs are the native
// backend's, bit for bit; buffers are freed after their last reader.
//
// Beside the program: the runtime (export/c_runtime.h), a Makefile whose
// `check` builds the program with -Wall -Wextra -Werror, runs it on the
// recorded inputs and compares every output file with the native backend's
// byte for byte, the recorded inputs and outputs as .npy files, and a README.
//
// Refused with ExportError, naming the site: a gradient's reverse sweep
// (a fold's vjp, kept or reusing frames), and a launch without a kernel whose
// operation has no C twin here (an element-wise step, reduction or product
// the lowering left to the reference kernels; a mean's broadcast cotangent).

#include <string>
#include <vector>

#include "quire/compile/compile.h"
#include "quire/export/pytorch_export.h"
#include "quire/interp/value.h"

namespace quire::exports {

struct CExportRequest {
  const elab::Program* prog = nullptr;
  const compile::CompiledProgram* compiled = nullptr;
  /// The entry's arguments as the executor casts them on entry: the recorded inputs.
  std::vector<interp::Value> arguments;
  /// The native backend's result on them: the recorded outputs.
  interp::Value result;
  std::string source;             ///< the program's path as given (for the README)
  std::string command;            ///< the command that made the export (for the README)
  std::vector<std::string> read;  ///< the files it read, each "`name` (SHA-256 …)" (for the README)
};

/// The arena the exported program of `compiled` allocates (its arguments'
/// shapes and types as compiled): bytes, the most live at once, allocations.
/// ExportError when the entry cannot be exported.
struct CArena {
  int64_t bytes = 0;
  int64_t peak = 0;
  int64_t allocations = 0;
};
CArena c_arena(const elab::Program& prog, const compile::CompiledProgram& compiled);

/// The files of the export, in a stable order: program.c, kernels.c,
/// quire_prelude.h, quire_runtime.h, quire_runtime.c, Makefile, README.md,
/// then check/inputs/*.npy and check/expected/*.npy.
std::vector<ExportedFile> export_c(const CExportRequest& request);

}  // namespace quire::exports
