#include "quire/compile/compile.h"

#include "quire/compile/build_host.h"
#include "quire/grad/vjp.h"

#include <stdexcept>

namespace quire::compile {

const std::vector<std::string_view>& stage_names() {
  static const std::vector<std::string_view> names = {"vjp", "realize", "fuse", "lower"};
  return names;
}

namespace {

CompiledProgram compile_entry(const elab::Program& prog, elab::Program* extended, const CompileRequest& request,
                              const StageHook& after) {
  auto done = [&](std::string_view stage, const CompiledProgram& so_far) {
    if (after) after(stage, so_far);
  };
  CompiledProgram out;
  out.dims = request.dims;
  out.entry = request.entry;
  // 1. vjp: requires a checked entry; adds its reverse sweep (and its callees') to prog.
  if (!request.wrt.empty()) {
    if (!extended) throw std::logic_error("internal: a vjp was asked of a program that cannot be extended");
    out.entry = grad::vjp(*extended, request.entry, request.wrt);
  }
  done("vjp", out);
  // 2. realize: requires what the entry reaches; keeps Core unchanged.
  out.realization =
      std::make_unique<precision::Realization>(precision::realize(prog, out.entry, request.realize, request.dims));
  done("realize", out);
  // 3. fuse: requires Core; groups per function, independent of the types.
  out.catalog =
      std::make_shared<kernel::KernelCatalog>(prog, out.entry, request.dims, request.realize.half_intermediates);
  if (request.profile) out.catalog->set_plan(*request.profile, request.threads);
  done("fuse", out);
  // 4–5. lower and plan: requires the realization's tables (the catalog keys
  // by their addresses, so they stay where they are from here on).
  out.host =
      build_host(prog, out.entry, request.dims, out.realization.get(), out.catalog, request.remat, request.arguments,
                 request.library_kernels, request.threads);
  done("lower", out);
  return out;
}

}  // namespace

CompiledProgram compile(elab::Program& prog, const CompileRequest& request, const StageHook& after) {
  return compile_entry(prog, &prog, request, after);
}

CompiledProgram compile(const elab::Program& prog, const CompileRequest& request, const StageHook& after) {
  return compile_entry(prog, nullptr, request, after);
}

}  // namespace quire::compile
