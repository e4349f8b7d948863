// quire memory FILE --entry E [--dim B=4 ...] [--precision f64|f32|bf16|f16 | --realize @r.json]
//   [--grad] [--remat store|recompute] [--format text|json]
//
// What one call of the entry needs, counted from its compiled program at the
// call's dimensions and realized types (compile/memory.h, docs/memory.md):
// the parameters by stored type, the inputs, the outputs, the peak of live
// bytes and where it occurs, and each called instance's share of the peak
// and its own peak. Nothing runs: the call is compiled, not evaluated.

#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "common.h"
#include "quire/compile/compile.h"
#include "quire/compile/memory.h"
#include "quire/grad/vjp.h"
#include "quire/realize/realization.h"

namespace quire::cli {

Handler setup_memory(CLI::App& sub) {
  struct Options {
    std::string file, entry, precision = "f64", realize, remat = "recompute", format = "text";
    std::vector<std::string> dims;
    bool grad = false;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("file", o->file, "the program (.qr)")->required();
  sub.add_option("--entry", o->entry, "the function whose call is counted")->required();
  sub.add_option("--dim", o->dims, "bind a dimension, NAME=SIZE (repeatable)");
  CLI::Option* precision_flag = sub.add_option("--precision", o->precision, "the run policy (f64, f32, bf16, f16)")
                                    ->check(CLI::IsMember({"f64", "f32", "bf16", "f16"}));
  sub.add_option("--realize", o->realize,
                 "count under the solver's decisions, @realization.json (`quire solve --out`); its policy replaces "
                 "--precision")
      ->check(non_empty("--realize names a file", "@FILE"));
  sub.add_option("--remat", o->remat, "how a reverse sweep gets forward values: store (kept) or recompute")
      ->check(CLI::IsMember({"store", "recompute"}));
  sub.add_flag("--grad", o->grad,
               "count the entry's gradient as a training step computes it (its vjp with respect to θ) instead");
  sub.add_option("--format", o->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  return [o, precision_flag]() {
    if (!o->realize.empty() && precision_flag->count() > 0)
      throw UsageError(fmt::format("--realize {} carries its own policy: leave out --precision", o->realize));
    auto prog = load_program(o->file);
    if (!prog) return 1;
    const auto dims = parse_dims(o->dims, *prog);
    const int entry = find_entry(*prog, o->entry);
    compile::CompileRequest request;
    request.entry = entry;
    request.dims = dims;
    request.realize.policy = *precision::parse_policy(o->precision);
    request.remat = *interp::parse_remat(o->remat);
    if (o->grad) request.wrt = gradient_wrt(*prog, entry);
    std::string label = o->precision;
    std::optional<precision::RealizationFile> solved;
    if (!o->realize.empty()) {
      // Under --grad the step's vjp is what runs: a gradient's decisions are checked against it.
      const int vjp = o->grad ? grad::vjp(*prog, entry, request.wrt) : -1;
      solved = load_realization(o->realize, *prog, entry, dims, vjp);
      request.realize.policy = solved->assignment.policy;
      request.realize.assignment = &solved->assignment;
      // As training reads them: a trained parameter keeps its master, its reads rounded.
      request.realize.keep_masters = o->grad;
      label = "@" + (o->realize[0] == '@' ? o->realize.substr(1) : o->realize);
    }
    // Default layouts: what a call holds does not depend on the plan.
    const compile::CompiledProgram compiled = compile::compile(*prog, request);  // adds the vjp under --grad
    const compile::CallMemory m = compile::count_call_memory(*prog, compiled);
    if (o->format == "json")
      std::cout << compile::call_memory_json(*prog, compiled, m, label).dump(2) << "\n";
    else
      std::cout << compile::print_call_memory(*prog, compiled, m, label);
    return 0;
  };
}

}  // namespace quire::cli
