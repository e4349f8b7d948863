// quire dump FILE --stage S [--format text|json] [--entry E] …: the program as one stage leaves it.
// The stages are one table (kStages below): its name, whether it needs an
// entry, whether it prints JSON, and its printer.

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "commands.h"
#include "common.h"
#include "quire/compile/compile.h"
#include "quire/compile/library_kernel.h"
#include "quire/core/printer.h"
#include "quire/elab/elaborator.h"
#include "quire/elab/summary.h"
#include "quire/exact/big.h"
#include "quire/grad/vjp.h"
#include "quire/interp/inputs.h"
#include "quire/interp/interpreter.h"
#include "quire/kernel/fusion.h"
#include "quire/kernel/fusion_print.h"
#include "quire/machine/profile.h"
#include "quire/realize/realization.h"
#include "quire/precision/sensitivity.h"
#include "quire/syntax/ast_printer.h"
#include "quire/syntax/lexer.h"
#include "quire/syntax/parser.h"

namespace quire::cli {

namespace {

/// tokens and ast are per-file stages: they read the one file, no imports.
int dump_syntax(const std::string& path, const std::string& stage) {
  std::string error;
  auto text = elab::disk_reader()(path, error);
  if (!text) throw UsageError(fmt::format("{}: cannot read: {}", path, error));
  SourceManager sources;
  FileId id = sources.add(path, *text);
  DiagnosticSink diags;
  if (stage == "tokens") std::cout << syntax::dump_tokens(sources, syntax::lex(sources, id, diags));
  else std::cout << syntax::print_ast(syntax::parse_file(sources, id, diags));
  std::cerr << diags.render(sources);
  return diags.has_errors() ? 1 : 0;
}

struct DumpOptions {
  std::string file, stage, format = "text", entry, precision = "f64", profile, remat = "recompute", inputs;
  std::string realize;  ///< --realize @FILE: a solver's decisions in place of --precision
  std::vector<std::string> dims;
  /// The decisions --realize names, read once the program is loaded.
  std::shared_ptr<const precision::RealizationFile> solved;
  bool half_intermediates = false;
  bool fused_products = true;  // --product-step fma, the default
  bool grad = false;
  int bits = 128;
  int64_t seed = 0;
  int sites = 30;
};

enum class EntryUse : uint8_t { None, Optional, Required };

struct DumpStage {
  const char* name;
  EntryUse entry;
  bool json;         ///< prints --format json too
  const char* what;  ///< with its entry: what it prints, for --help and the errors
  /// Prints the stage of `prog` for function `root` (-1: no entry given).
  void (*print)(const DumpOptions& o, elab::Program& prog, int root);
};

precision::RealizeOptions realize_options(const DumpOptions& o) {
  precision::RealizeOptions options;
  options.policy = *precision::parse_policy(o.precision);
  options.half_intermediates = o.half_intermediates;
  options.fused_products = o.fused_products;
  if (o.solved) {
    options.policy = o.solved->assignment.policy;
    options.assignment = &o.solved->assignment;
    // As training reads them: a trained parameter keeps its master, its reads rounded.
    options.keep_masters = o.grad;
  }
  return options;
}

void print_elab(const DumpOptions& o, elab::Program& prog, int) {
  if (o.format == "json")
    std::cout << elab::elab_json(prog).dump(2) << "\n";
  else
    std::cout << elab::print_elab(prog);
}

void print_core(const DumpOptions& o, elab::Program& prog, int root) {
  if (o.format == "json")
    std::cout << core::core_json(prog, root).dump(2) << "\n";
  else
    std::cout << core::print_core(prog, root);
}

void print_vjp(const DumpOptions& o, elab::Program& prog, int root) {
  // The entry's vjp with respect to every argument that can have a cotangent.
  std::vector<int> wrt = grad::differentiable_args(prog.functions[static_cast<size_t>(root)]);
  if (wrt.empty())
    throw UsageError(fmt::format(
        "`{}` has no argument to differentiate (a real tensor, a parameter tree or a tuple of them)", o.entry));
  print_core(o, prog, grad::vjp(prog, root, wrt));
}

void print_sensitivity(const DumpOptions& o, elab::Program& prog, int root) {
  if (o.bits < exact::kMinBits || o.bits > exact::kMaxBits)
    throw UsageError(
        fmt::format("--bits {}: the exact reference takes {} to {} bits", o.bits, exact::kMinBits, exact::kMaxBits));
  // The parameters and inputs `quire run` draws from the seed.
  const auto dims = parse_dims(o.dims, prog);
  const core::Function& fn = prog.functions[static_cast<size_t>(root)];
  const elab::Type& result = fn.result;
  if (!result.is_tensor() || result.tensor.elem != elab::Elem::Real || !result.tensor.axes.empty() ||
      result.tensor.rest)
    throw UsageError(fmt::format("`{}` does not return a scalar ℝ[]: --stage sensitivity needs one", o.entry));
  std::optional<interp::ParamMap> params = entry_params(prog, fn, "", static_cast<uint64_t>(o.seed), dims);
  std::optional<std::string> inputs;
  if (!o.inputs.empty()) inputs = o.inputs;
  std::vector<interp::Value> args =
      interp::entry_arguments(prog, root, params ? &*params : nullptr, dims, static_cast<uint64_t>(o.seed), inputs);
  const precision::Sensitivities s = [&] {
    try {
      return precision::sensitivities(prog, root, dims, args, o.bits);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());  // an entry that takes a gradient itself
    }
  }();
  if (o.format == "json")
    std::cout << precision::sensitivities_json(s).dump(2) << "\n";
  else
    std::cout << precision::print_sensitivities(s, o.sites);
}

void print_precision(const DumpOptions& o, elab::Program& prog, int root) {
  auto r = precision::realize(prog, root, realize_options(o), parse_dims(o.dims, prog));
  if (o.format == "json")
    std::cout << precision::realization_json(prog, r).dump(2) << "\n";
  else
    std::cout << precision::print_realization(prog, r);
}

void print_realize(const DumpOptions& o, elab::Program& prog, int root) {
  const std::map<std::string, int64_t> dims = parse_dims(o.dims, prog);
  const kernel::Fusion fusion = kernel::fuse(prog, root, dims);
  // The groups are the lines' whatever the types; which library functions
  // run as one kernel instead depends on them (compile/library_kernel.h).
  const precision::Realization r = precision::realize(prog, root, realize_options(o), dims);
  if (o.format == "json") {
    nlohmann::ordered_json j = kernel::fusion_json(prog, fusion);
    j["library_kernels"] = compile::library_plan_json(prog, r);
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << kernel::print_fusion(prog, fusion) << compile::print_library_plan(prog, r);
  }
}

/// The compiled program of one call of the entry, built without running it:
/// kernels lowered at the shapes the call has, planned under the profile at
/// its cores (so the printout depends on the profile alone).
compile::CompiledProgram compiled(const DumpOptions& o, elab::Program& prog, int root,
                                  const machine::Profile& profile) {
  compile::CompileRequest request;
  request.entry = root;
  if (o.grad) {
    request.wrt = gradient_wrt(prog, root);
  }
  request.dims = parse_dims(o.dims, prog);
  request.realize = realize_options(o);
  request.remat = *interp::parse_remat(o.remat);
  request.profile = &profile;
  request.threads = profile.cores;
  return compile::compile(prog, request);
}

void print_kernel(const DumpOptions& o, elab::Program& prog, int root) {
  const machine::Profile profile = machine::planning_profile(o.profile);
  std::cout << compile::print_kernels(prog, compiled(o, prog, root, profile).host);
}

void print_host(const DumpOptions& o, elab::Program& prog, int root) {
  const machine::Profile profile = machine::planning_profile(o.profile);
  const compile::CompiledProgram c = compiled(o, prog, root, profile);
  if (o.format == "json")
    std::cout << compile::host_json(prog, c.host).dump(2) << "\n";
  else
    std::cout << compile::print_host(prog, c.host);
}

/// The stages in pipeline order. tokens and ast are per-file: they read the one file, no imports.
const DumpStage kStages[] = {
    {"tokens", EntryUse::None, false, "the tokens of the file", nullptr},
    {"ast", EntryUse::None, false, "the syntax tree of the file", nullptr},
    {"elab", EntryUse::None, true, "the elaborated program: modules, parameters, functions", print_elab},
    {"core", EntryUse::Optional, true, "Core; with --entry, only the functions it reaches", print_core},
    {"vjp", EntryUse::Required, true, "the reverse sweep of the entry", print_vjp},
    {"precision", EntryUse::Required, true, "the realization of the entry under --precision", print_precision},
    {"sensitivity", EntryUse::Required, true, "the sensitivities of the scalar entry", print_sensitivity},
    {"realize", EntryUse::Required, true, "the fusion groups of what the entry reaches", print_realize},
    {"kernel", EntryUse::Required, false, "the kernels of one call of the entry", print_kernel},
    {"host", EntryUse::Required, true, "the host program of one call of the entry", print_host},
};

const DumpStage* find_stage(const std::string& name) {
  for (const DumpStage& s : kStages)
    if (name == s.name) return &s;
  return nullptr;
}

}  // namespace

Handler setup_dump(CLI::App& sub) {
  auto o = std::make_shared<DumpOptions>();
  std::vector<std::string> names;
  std::string stages_help;
  for (const DumpStage& s : kStages) {
    names.push_back(s.name);
    stages_help += fmt::format("{}{}", stages_help.empty() ? "" : ", ", s.name);
  }
  sub.add_option("file", o->file, "the program (.qr)")->required();
  sub.add_option("--stage", o->stage, stages_help)->required()->check(CLI::IsMember(names));
  sub.add_option("--format", o->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  sub.add_option("--entry", o->entry,
                 "core: only the functions this one reaches; vjp: the function differentiated; "
                 "precision: the entry realized; sensitivity: the scalar L differentiated; realize: the entry whose "
                 "fusion groups are printed; kernel, host: the entry compiled for one call");
  CLI::Option* precision_flag =
      sub.add_option("--precision", o->precision, "precision, kernel, host: the run policy (f64, f32, bf16, f16)")
          ->check(CLI::IsMember({"f64", "f32", "bf16", "f16"}));
  sub.add_option("--realize", o->realize,
                 "precision, kernel, host: the types a solver chose (`quire solve --out`), @FILE, in place of "
                 "--precision")
      ->check(non_empty("--realize names a file", "@FILE"));
  sub.add_flag("--half-intermediates", o->half_intermediates, "precision: reductions accumulate in the half itself");
  add_product_step_option(sub, o->fused_products);
  sub.add_option("--dim", o->dims,
                 "precision, sensitivity, realize, kernel, host: bind a dimension, NAME=SIZE (sizes the parameters' "
                 "bytes; the run's tensors; the fold counts of the launch totals)");
  sub.add_option("--profile", o->profile,
                 "kernel, host: the machine profile the layouts are planned under (default: the one that ships)");
  sub.add_option("--remat", o->remat,
                 "kernel, host: how a gradient's backward pass gets the forward values of calls: recompute "
                 "(default) or store")
      ->check(CLI::IsMember({"store", "recompute"}));
  sub.add_flag("--grad", o->grad,
               "precision, realize: the stage of the entry's vjp; kernel, host: compile the entry's gradient as a "
               "training step does (with respect to θ, or to every "
               "differentiable argument of an entry without parameters)");
  sub.add_option("--bits", o->bits, "sensitivity: the bits of every real in the exact reference (default 128)");
  sub.add_option("--seed", o->seed,
                 "sensitivity: seed of the parameters and inputs, as `quire run` draws them (default 0)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--inputs", o->inputs,
                 "sensitivity: read the arguments from an .npz, each under its path (x, batch.0), as `run` does; "
                 "integer arguments (token ids, class targets) must be given so");
  sub.add_option("--sites", o->sites, "sensitivity: how many sites the second table lists (default 30)")
      ->check(CLI::NonNegativeNumber);
  return [o, precision_flag]() {
    const DumpStage& stage = *find_stage(o->stage);
    if (!o->entry.empty() && stage.entry == EntryUse::None) {
      std::string with;
      for (const DumpStage& s : kStages)
        if (s.entry != EntryUse::None) with += fmt::format("{}{}", with.empty() ? "" : ", ", s.name);
      throw UsageError(fmt::format("--entry applies to --stage {}, not to --stage {}", with, o->stage));
    }
    if (o->entry.empty() && stage.entry == EntryUse::Required)
      throw UsageError(fmt::format("--stage {} prints {}: give --entry NAME", o->stage, stage.what));
    if (o->format == "json" && !stage.json) throw UsageError(fmt::format("--stage {} prints text only", o->stage));
    if (o->grad && o->stage != "kernel" && o->stage != "host" && o->stage != "precision" && o->stage != "realize")
      throw UsageError(
          fmt::format("--grad applies to --stage precision, realize, kernel and host, not to --stage {}", o->stage));
    if (!o->inputs.empty() && o->stage != "sensitivity")
      throw UsageError(
          fmt::format("--inputs applies to --stage sensitivity (the only stage that evaluates), not to "
                      "--stage {}",
                      o->stage));
    if (!o->realize.empty() && o->stage != "precision" && o->stage != "kernel" && o->stage != "host")
      throw UsageError(fmt::format("--realize applies to --stage precision, kernel and host, not to --stage {}",
                                   o->stage));
    if (!o->realize.empty() && precision_flag->count() > 0)
      throw UsageError(fmt::format("--realize {} carries its own policy: leave out --precision", o->realize));
    if (!stage.print) return dump_syntax(o->file, o->stage);
    auto prog = load_program(o->file);
    if (!prog) return 1;
    const int root = o->entry.empty() ? -1 : find_entry(*prog, o->entry);
    // precision and realize print a function's own stage: under --grad, the
    // vjp's (kernel and host compile the entry with its gradient instead).
    const int printed = o->grad && (o->stage == "precision" || o->stage == "realize")
                            ? grad::vjp(*prog, root, gradient_wrt(*prog, root))
                            : root;
    if (!o->realize.empty()) {
      // Under --grad the step's vjp is what is compiled: a gradient's decisions are checked against it.
      const int vjp = o->grad ? grad::vjp(*prog, root, gradient_wrt(*prog, root)) : -1;
      o->solved = std::make_shared<const precision::RealizationFile>(
          load_realization(o->realize, *prog, root, parse_dims(o->dims, *prog), vjp));
    }
    stage.print(*o, *prog, printed);
    return 0;
  };
}

}  // namespace quire::cli
