// quire memory FILE --entry E [--dim B=4 ...] [--precision f64|f32|bf16|f16 | --realize @r.json]
//   [--product-step fma|separate] [--grad] [--remat store|recompute] [--format text|json]
// quire memory FILE --step [--dim …] [--precision …] [--format text|json]
// quire memory FILE --entry E --dim … --symbolic [--grad] [--precision …] [--remat …] [--format …]
//
// What one call of the entry needs, counted from its compiled program at the
// call's dimensions and realized types (compile/memory.h, docs/memory.md):
// the parameters by stored type, the inputs, the outputs, the peak of live
// bytes and where it occurs, and each called instance's share of the peak
// and its own peak. Nothing runs: the call is compiled, not evaluated.
//
// --step counts the file's training step instead, under `--remat store` and
// `recompute` side by side: the objective's vjp at the run's batch (its
// inputs, θ and the batch; its peak, with what is kept for the reverse sweep),
// the gradient and the optimizer's state at the master type, and what the
// step needs in all (the same count `train --memory-limit` checks).

#include <fmt/format.h>

#include <iostream>
#include <utility>

#include "commands.h"
#include "common.h"
#include "quire/compile/compile.h"
#include "quire/compile/memory.h"
#include "quire/compile/memory_symbolic.h"
#include "quire/export/c_export.h"
#include "quire/grad/vjp.h"
#include "quire/realize/realization.h"
#include "quire/train/data.h"
#include "quire/train/optimizer.h"

namespace quire::cli {

namespace {

/// The training step under one remat: the compiled vjp and its count.
struct StepCount {
  compile::CompiledProgram compiled;
  compile::CallMemory m;
};

int print_step(elab::Program& prog, std::map<std::string, int64_t> user_dims, const std::string& precision,
               bool fused_products, const std::string& format) {
  const elab::TrainingInfo* run = prog.training();
  if (!run) throw UsageError("--step: the program has no `training run` block; count one call with --entry");
  const std::map<std::string, int64_t> dims = train::run_dims(*run, std::move(user_dims));
  // Copies: compiling the vjp adds functions to the program, moving its others.
  const std::string objective = prog.functions.at(static_cast<size_t>(run->objective)).name;
  const elab::ParamsType model = prog.functions.at(static_cast<size_t>(run->objective)).args.at(0).type.params;
  const precision::Policy policy = *precision::parse_policy(precision);
  const runtime::FloatType master =
      policy == precision::Policy::F64 ? runtime::FloatType::F64 : runtime::FloatType::F32;
  std::vector<StepCount> counts;
  for (interp::Remat remat : {interp::Remat::Store, interp::Remat::Recompute}) {
    compile::CompileRequest request;
    request.entry = run->objective;
    request.dims = dims;
    request.realize.policy = policy;
    request.realize.keep_masters = true;  // as training stores them
    request.realize.fused_products = fused_products;
    request.remat = remat;
    request.wrt = gradient_wrt(prog, run->objective);
    compile::CompiledProgram compiled = compile::compile(prog, request);
    compile::CallMemory m = compile::count_call_memory(prog, compiled);
    counts.push_back({std::move(compiled), std::move(m)});
  }
  // The optimizer's state by the trainer's rule, sized from the parameters'
  // extents (none is allocated: a model's state can be gigabytes).
  const precision::Realization& realization = *counts.front().compiled.realization;
  std::map<std::string, int64_t> rank;
  for (const auto& [path, type] : prog.flatten(model)) rank[path] = static_cast<int64_t>(type.axes.size());
  std::vector<train::ParamExtent> trainable;
  int64_t gradient = 0;
  for (const precision::ParamStorage& p : realization.params)
    if (!p.frozen) {
      trainable.push_back({p.path, rank.count(p.path) ? rank.at(p.path) : 0, p.elements});
      gradient += p.elements * runtime::float_type_info(master).storage_bits / 8;
    }
  int64_t state = 0;
  train::OptimizerConfig config;
  try {
    config = train::OptimizerConfig::from(prog.optimizers.at(run->optimizer));
    state = train::state_bytes_of(config, trainable, train::stacked_copies(prog, model), master);
  } catch (const train::OptimizerError& e) {
    throw UsageError(fmt::format("--step: the optimizer block: {} (`quire train` says where)", e.what()));
  }
  const std::string kind = train::optimizer_kind_name(config.kind);
  // The loop holds θ and the optimizer's state across the step; the vjp
  // adds the batch and its own peak; the update (in place: every parameter
  // and moment written where it is) adds the gradient the vjp returned, which
  // the vjp's peak already holds at its end, so the vjp's is the step's peak.
  auto needs = [&](const StepCount& c) { return c.m.input_bytes + c.m.peak_bytes + state; };
  auto update = [&](const StepCount& c) { return c.m.parameter_bytes + state + c.m.output_bytes; };
  auto rest = [&](const StepCount& c) { return c.m.peak_bytes - c.m.kept_at_peak - c.m.output_at_peak; };
  if (format == "json") {
    nlohmann::ordered_json j;
    j["format"] = "quire-memory-step";
    j["version"] = 1;
    j["objective"] = objective;
    j["dims"] = dims;
    j["precision"] = precision;
    j["optimizer"] = kind;
    j["master"] = runtime::float_type_name(master);
    for (const StepCount& c : counts) {
      const char* remat = interp::remat_name(c.compiled.host.remat);
      j["remat"][remat] = {{"parameters", c.m.parameter_bytes},
                           {"batch", c.m.input_bytes - c.m.parameter_bytes},
                           {"peak", c.m.peak_bytes},
                           {"kept", c.m.kept_at_peak},
                           {"gradient_at_peak", c.m.output_at_peak},
                           {"update", update(c)},
                           {"optimizer_state", state},
                           {"gradient", gradient},
                           {"needs", needs(c)},
                           {"call", compile::call_memory_json(prog, c.compiled, c.m, precision)}};
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  const StepCount& store = counts[0];
  const StepCount& recompute = counts[1];
  std::string dims_text;
  for (const auto& [k, v] : dims) dims_text += fmt::format("{}{} = {}", dims_text.empty() ? "" : ", ", k, v);
  std::cout << fmt::format("quire memory --step: `{}`'s training step at {} in {} ({} masters), optimizer {}\n",
                           objective, dims_text, precision, runtime::float_type_name(master), kind);
  auto row = [&](const std::string& what, int64_t a, int64_t b) {
    std::cout << fmt::format("  {:<34} {:>12} {:>12}\n", what, a, b);
  };
  std::cout << fmt::format("  {:<34} {:>12} {:>12}\n", "bytes", "store", "recompute");
  row("parameters (θ, as the vjp reads it)", store.m.parameter_bytes, recompute.m.parameter_bytes);
  row("batch (and the loss's cotangent)", store.m.input_bytes - store.m.parameter_bytes,
      recompute.m.input_bytes - recompute.m.parameter_bytes);
  row(fmt::format("optimizer state ({})", kind), state, state);
  row("gradient (at the master type)", gradient, gradient);
  row("peak of the vjp's live values", store.m.peak_bytes, recompute.m.peak_bytes);
  row("  of which kept for the backward", store.m.kept_at_peak, recompute.m.kept_at_peak);
  row("  of which the gradient made so far", store.m.output_at_peak, recompute.m.output_at_peak);
  row("  the rest", rest(store), rest(recompute));
  row("the vjp with what the loop holds", needs(store), needs(recompute));
  row(fmt::format("the update ({}, in place) with it", kind), update(store), update(recompute));
  row("needs: the step's peak", needs(store), needs(recompute));
  for (const StepCount* c : {&store, &recompute}) {
    std::cout << fmt::format("the peak under {}:\n", interp::remat_name(c->compiled.host.remat));
    for (const compile::PeakFrame& f : c->m.peak_at) {
      const compile::HostFunction& h = c->compiled.host.functions.at(static_cast<size_t>(f.instance));
      std::cout << fmt::format("  in `{}` #{} step {}{}: {} bytes\n",
                               prog.functions.at(static_cast<size_t>(h.function)).name, f.instance, f.step,
                               f.copy >= 0
                                   ? fmt::format(", iteration {}{}", f.copy, f.reverse ? " of the reverse sweep" : "")
                                   : std::string(),
                               f.bytes);
    }
  }
  return 0;
}

}  // namespace

Handler setup_memory(CLI::App& sub) {
  struct Options {
    std::string file, entry, precision = "f64", realize, remat = "recompute", format = "text";
    std::vector<std::string> dims;
    bool grad = false, step = false, symbolic = false;
    bool fused_products = true;  // fma unless --product-step separate, as run and train realize
  };
  auto o = std::make_shared<Options>();
  sub.add_option("file", o->file, "the program (.qr)")->required();
  CLI::Option* entry_flag = sub.add_option("--entry", o->entry, "the function whose call is counted");
  CLI::Option* step_flag =
      sub.add_flag("--step", o->step,
                   "count the training run's whole step instead (the objective's vjp under --remat store and "
                   "recompute side by side, the gradient and the optimizer's state)");
  sub.add_option("--dim", o->dims, "bind a dimension, NAME=SIZE (repeatable)");
  CLI::Option* precision_flag = sub.add_option("--precision", o->precision, "the run policy (f64, f32, bf16, f16)")
                                    ->check(CLI::IsMember({"f64", "f32", "bf16", "f16"}));
  add_product_step_option(sub, o->fused_products);
  sub.add_option("--realize", o->realize,
                 "count under the solver's decisions, @realization.json (`quire solve --out`); its policy replaces "
                 "--precision")
      ->check(non_empty("--realize names a file", "@FILE"));
  CLI::Option* remat_flag =
      sub.add_option("--remat", o->remat, "how a reverse sweep gets forward values: store (kept) or recompute")
          ->check(CLI::IsMember({"store", "recompute"}));
  sub.add_flag("--grad", o->grad,
               "count the entry's gradient as a training step computes it (its vjp with respect to θ) instead");
  sub.add_flag("--symbolic", o->symbolic,
               "each count as a polynomial in the --dim dimensions, fitted on a grid of them and checked off it");
  sub.add_option("--format", o->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  return [o, precision_flag, entry_flag, step_flag, remat_flag]() {
    if (!o->realize.empty() && precision_flag->count() > 0)
      throw UsageError(fmt::format("--realize {} carries its own policy: leave out --precision", o->realize));
    if ((entry_flag->count() > 0) == (step_flag->count() > 0))
      throw UsageError("give --entry E (one call of E) or --step (the training run's step), one of the two");
    if (o->step && (o->grad || !o->realize.empty() || remat_flag->count() > 0))
      throw UsageError(fmt::format("--step counts the training step's vjp under both remats: leave out {}",
                                   o->grad               ? "--grad"
                                   : !o->realize.empty() ? "--realize"
                                                         : "--remat"));
    auto prog = load_program(o->file);
    if (!prog) return 1;
    const auto dims = parse_dims(o->dims, *prog);
    if (o->step && o->symbolic) throw UsageError("--symbolic counts one call (--entry), not --step");
    if (o->step) return print_step(*prog, dims, o->precision, o->fused_products, o->format);
    const int entry = find_entry(*prog, o->entry);
    compile::CompileRequest request;
    request.entry = entry;
    request.dims = dims;
    request.realize.policy = *precision::parse_policy(o->precision);
    request.realize.fused_products = o->fused_products;
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
      // As `run --realize` runs: the lines, whose every site the guard watches.
      request.library_kernels = false;
      // As training reads them: a trained parameter keeps its master, its reads rounded.
      request.realize.keep_masters = o->grad;
      label = "@" + (o->realize[0] == '@' ? o->realize.substr(1) : o->realize);
    }
    if (o->symbolic) {
      // The vjp built once, then compiled as the entry at each point of the grid.
      if (o->grad) {
        request.entry = grad::vjp(*prog, entry, request.wrt);
        request.wrt.clear();
      }
      const compile::SymbolicMemory s = compile::count_symbolic_memory(*prog, request);
      const compile::CompiledProgram at_given = compile::compile(std::as_const(*prog), request);
      if (o->format == "json")
        std::cout << compile::symbolic_memory_json(*prog, at_given, s, label).dump(2) << "\n";
      else
        std::cout << compile::print_symbolic_memory(*prog, at_given, s, label);
      return 0;
    }
    // Default layouts: what a call holds does not depend on the plan.
    const compile::CompiledProgram compiled = compile::compile(*prog, request);  // adds the vjp under --grad
    compile::CallMemory m = compile::count_call_memory(*prog, compiled);
    // The arena the C export of this call allocates.
    m.c_export.emplace();
    try {
      const exports::CArena a = exports::c_arena(*prog, compiled);
      m.c_export->bytes = a.bytes;
      m.c_export->peak = a.peak;
      m.c_export->allocations = a.allocations;
    } catch (const exports::ExportError& e) {
      m.c_export->unavailable = e.what();
    }
    if (o->format == "json")
      std::cout << compile::call_memory_json(*prog, compiled, m, label).dump(2) << "\n";
    else
      std::cout << compile::print_call_memory(*prog, compiled, m, label);
    return 0;
  };
}

}  // namespace quire::cli
