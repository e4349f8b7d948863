// quire dump FILE --stage tokens|ast|elab|core|vjp|precision|sensitivity|realize|kernel [--format text|json] [--entry E]
//   realize: --entry E [--dim B=4]
//   kernel: --entry E [--dim B=4] [--precision P] [--seed S] [--profile P]: the kernels and the host of one call
//   sensitivity: --entry E [--dim B=4] [--bits N] [--seed N] [--sites K]

#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "common.h"
#include "quire/core/printer.h"
#include "quire/elab/elaborator.h"
#include "quire/elab/summary.h"
#include "quire/exact/big.h"
#include "quire/grad/vjp.h"
#include "quire/interp/inputs.h"
#include "quire/interp/interpreter.h"
#include "quire/kernel/engine.h"
#include "quire/kernel/fusion.h"
#include "quire/precision/realization.h"
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

}  // namespace

Handler setup_dump(CLI::App& sub) {
  struct Options {
    std::string file, stage, format = "text", entry, precision = "f64", profile;
    std::vector<std::string> dims;
    bool half_intermediates = false;
    bool fused_products = false;
    int bits = 128;
    int64_t seed = 0;
    int sites = 30;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("file", o->file, "the program (.qr)")->required();
  sub.add_option("--stage", o->stage, "tokens, ast, elab, core, vjp, precision, sensitivity, realize or kernel")
      ->required()
      ->check(CLI::IsMember({"tokens", "ast", "elab", "core", "vjp", "precision", "sensitivity", "realize", "kernel"}));
  sub.add_option("--format", o->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  sub.add_option("--entry", o->entry,
                 "core: only the functions this one reaches; vjp: the function differentiated; "
                 "precision: the entry realized; sensitivity: the scalar L differentiated; realize: the entry whose "
                 "fusion groups are printed; kernel: the entry called once");
  sub.add_option("--precision", o->precision, "precision, kernel: the run policy (f64, f32, bf16, f16)")
      ->check(CLI::IsMember({"f64", "f32", "bf16", "f16"}));
  sub.add_flag("--half-intermediates", o->half_intermediates, "precision: reductions accumulate in the half itself");
  add_product_step_option(sub, o->fused_products);
  sub.add_option("--dim", o->dims,
                 "precision, sensitivity, realize: bind a dimension, NAME=SIZE (sizes the parameters' bytes; "
                 "the run's tensors; the fold counts of the launch totals)");
  sub.add_option("--profile", o->profile, "kernel: the machine profile the layouts are planned under (default: the one that ships)");
  sub.add_option("--bits", o->bits, "sensitivity: the bits of every real in the exact reference (default 128)");
  sub.add_option("--seed", o->seed,
                 "sensitivity: seed of the parameters and inputs, as `quire run` draws them (default 0)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--sites", o->sites, "sensitivity: how many sites the second table lists (default 30)")
      ->check(CLI::NonNegativeNumber);
  return [o]() {
    if (!o->entry.empty() && o->stage != "core" && o->stage != "precision" && o->stage != "vjp" &&
        o->stage != "sensitivity" && o->stage != "realize" && o->stage != "kernel")
      throw UsageError(fmt::format(
          "--entry applies to --stage core, vjp, precision, sensitivity, realize and kernel, not to --stage {}", o->stage));
    if (o->stage == "sensitivity" && o->entry.empty())
      throw UsageError("--stage sensitivity differentiates one scalar function: give --entry NAME");
    if (o->stage == "sensitivity" && (o->bits < exact::kMinBits || o->bits > exact::kMaxBits))
      throw UsageError(
          fmt::format("--bits {}: the exact reference takes {} to {} bits", o->bits, exact::kMinBits, exact::kMaxBits));
    if (o->stage == "precision" && o->entry.empty())
      throw UsageError("--stage precision realizes one entry: give --entry NAME");
    if (o->stage == "realize" && o->entry.empty())
      throw UsageError("--stage realize groups what one entry reaches: give --entry NAME");
    if (o->stage == "kernel" && o->entry.empty())
      throw UsageError("--stage kernel lowers what one call of an entry launches: give --entry NAME");
    if (o->stage == "kernel" && o->format == "json") throw UsageError("--stage kernel prints text only");
    if (o->stage == "vjp" && o->entry.empty())
      throw UsageError("--stage vjp differentiates one function: give --entry NAME");
    if (o->stage == "tokens" || o->stage == "ast") {
      if (o->format == "json") throw UsageError(fmt::format("--stage {} prints text only", o->stage));
      return dump_syntax(o->file, o->stage);
    }
    auto prog = load_program(o->file);
    if (!prog) return 1;
    if (o->stage == "elab") {
      if (o->format == "json") std::cout << elab::elab_json(*prog).dump(2) << "\n";
      else std::cout << elab::print_elab(*prog);
      return 0;
    }
    int root = o->entry.empty() ? -1 : find_entry(*prog, o->entry);
    if (o->stage == "vjp") {
      // The entry's vjp with respect to every argument that can have a cotangent.
      std::vector<int> wrt = grad::differentiable_args(prog->functions[root]);
      if (wrt.empty())
        throw UsageError(fmt::format("`{}` has no argument to differentiate (a real tensor, a parameter tree or a tuple of them)",
                                     o->entry));
      root = grad::vjp(*prog, root, wrt);
    }
    if (o->stage == "sensitivity") {
      // The parameters and inputs `quire run` draws from the seed.
      const auto dims = parse_dims(o->dims, *prog);
      const core::Function& fn = prog->functions[static_cast<size_t>(root)];
      const elab::Type& result = fn.result;
      if (!result.is_tensor() || result.tensor.elem != elab::Elem::Real || !result.tensor.axes.empty() ||
          result.tensor.rest)
        throw UsageError(fmt::format("`{}` does not return a scalar ℝ[]: --stage sensitivity needs one", o->entry));
      std::optional<interp::ParamMap> params = entry_params(*prog, fn, "", static_cast<uint64_t>(o->seed), dims);
      std::vector<interp::Value> args = interp::entry_arguments(*prog, root, params ? &*params : nullptr, dims,
                                                                static_cast<uint64_t>(o->seed), std::nullopt);
      const precision::Sensitivities s = precision::sensitivities(*prog, root, dims, args, o->bits);
      if (o->format == "json") std::cout << precision::sensitivities_json(s).dump(2) << "\n";
      else std::cout << precision::print_sensitivities(s, o->sites);
      return 0;
    }
    if (o->stage == "precision") {
      precision::RealizeOptions options;
      options.policy = *precision::parse_policy(o->precision);
      options.half_intermediates = o->half_intermediates;
      options.fused_products = o->fused_products;
      auto r = precision::realize(*prog, root, options, parse_dims(o->dims, *prog));
      if (o->format == "json") std::cout << precision::realization_json(*prog, r).dump(2) << "\n";
      else std::cout << precision::print_realization(*prog, r);
      return 0;
    }
    if (o->stage == "kernel") {
      // One call of the entry on the arguments `quire run` draws: kernels are
      // lowered at the shapes the call has, and planned under the profile at
      // its cores (so the printout depends on the profile alone).
      const auto dims = parse_dims(o->dims, *prog);
      precision::RealizeOptions options;
      options.policy = *precision::parse_policy(o->precision);
      options.half_intermediates = o->half_intermediates;
      options.fused_products = o->fused_products;
      const precision::Realization r = precision::realize(*prog, root, options, dims);
      const machine::Profile profile = machine::planning_profile(o->profile);
      kernel::InterpretingRunner runner;
      kernel::KernelEngine engine(*prog, root, dims, options.half_intermediates, runner);
      engine.set_plan(profile, profile.cores);
      call_through(*prog, root, dims, r, static_cast<uint64_t>(o->seed), engine);
      std::cout << engine.print();
      return 0;
    }
    if (o->stage == "realize") {
      const kernel::Fusion fusion = kernel::fuse(*prog, root, parse_dims(o->dims, *prog));
      if (o->format == "json") std::cout << kernel::fusion_json(*prog, fusion).dump(2) << "\n";
      else std::cout << kernel::print_fusion(*prog, fusion);
      return 0;
    }
    if (o->format == "json") std::cout << core::core_json(*prog, root).dump(2) << "\n";
    else std::cout << core::print_core(*prog, root);
    return 0;
  };
}

}  // namespace quire::cli
