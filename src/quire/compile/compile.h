#pragma once
// compile: the pipeline from an elaborated program to the host program of
// one entry, as one list of stages (docs/architecture.md):
//
//   1. vjp      (grad/vjp.h)             the entry's reverse sweep, when asked for
//   2. realize  (realize/realization.h) a type and a reason per site and parameter
//   3. fuse     (kernel/fusion.h)        element-wise steps grouped into loop nests
//   4. lower    (kernel/lower.h)         every launch a kernel at the run's shapes (build_host.h)
//   5. plan     (kernel/layout.h)        each kernel's layout under the machine profile
//
// then a backend takes the result: the kernel engine gives every kernel to
// its runner before the first launch (6. emit: native/c_emit.h, compiled and
// loaded by native/native_runner.h; the kernel interpreter takes them as
// they are). Elaboration (elab/elaborator.h) comes before: compile takes its
// program.
//
// Built once per (entry, dims, realization, options) and reused: `run
// --repeat` and every training step look their kernels up in it.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "quire/compile/host_program.h"
#include "quire/machine/profile.h"
#include "quire/realize/realization.h"

namespace quire::compile {

struct CompileRequest {
  int entry = -1;
  std::map<std::string, int64_t> dims;
  /// Differentiate the entry with respect to these arguments (empty: compile the entry itself).
  std::vector<int> wrt;
  precision::RealizeOptions realize;  ///< its `assignment`, when given, outlives the compile
  interp::Remat remat = interp::Remat::Recompute;
  /// Plan every kernel under this profile for at most `threads` threads (null: default layouts).
  const machine::Profile* profile = nullptr;
  int threads = 1;
  /// The call's arguments, when known (only their shapes are read): an
  /// entry with `...` axes takes its shapes from them. Otherwise its
  /// declared types at `dims` give them.
  const std::vector<interp::Value>* arguments = nullptr;
  /// Run the prelude functions that have one as a library kernel
  /// (library_kernel.h) where their sites allow it; false: every function
  /// runs its lines (the kernel interpreter's backend, the C export).
  bool library_kernels = true;
};

struct CompiledProgram {
  int entry = -1;  ///< the function compiled (the vjp, when one was asked for)
  std::map<std::string, int64_t> dims;
  /// Held by pointer: the catalog keys launches by its tables' addresses.
  std::unique_ptr<precision::Realization> realization;
  std::shared_ptr<kernel::KernelCatalog> catalog;
  HostProgram host;
};

/// The stages in order, as `compile` runs them and `--after` names them.
const std::vector<std::string_view>& stage_names();

/// Called after each stage with its name and what is built so far (for
/// printing the program after any stage).
using StageHook = std::function<void(std::string_view stage, const CompiledProgram& so_far)>;

/// Runs the stages on `prog` (a vjp is added to it when asked for).
/// Throws interp::EvalError for a shape the call cannot have.
CompiledProgram compile(elab::Program& prog, const CompileRequest& request, const StageHook& after = nullptr);
/// The same for a request without `wrt`, which leaves the program as it is
/// (std::logic_error for one with `wrt`).
CompiledProgram compile(const elab::Program& prog, const CompileRequest& request, const StageHook& after = nullptr);

}  // namespace quire::compile
