// quire export FILE --target pytorch -o DIR [--entry E ...]
// quire export FILE --target c --entry E [--dim N=V ...] [--precision P | --realize @R.json]
//   [--product-step fma|separate] [--params F.safetensors] [--inputs F.npz] [--seed N] [--profile P.json] -o DIR
//
// pytorch: the functions the entries reach as PyTorch modules, one module
// per source file, with the helpers and a README (export/pytorch_export.h).
// Without --entry, every function of the main file is an entry.
//
// c: one entry, compiled at its dimensions and types as `quire run` compiles
// it, as a standalone C program (export/c_export.h); the call is run once on
// the native backend, on the inputs `run` would use, and its inputs and
// outputs recorded beside the program for `make check`.
//
// Each file is written atomically; nothing is written when an entry cannot
// be exported (docs/export.md).

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "common.h"
#include "quire/compile/compile.h"
#include "quire/compile/executor.h"
#include "quire/export/c_export.h"
#include "quire/export/pytorch_export.h"
#include "quire/interp/inputs.h"
#include "quire/interp/params.h"
#include "quire/interp/reference_step.h"
#include "quire/io/atomic_file.h"
#include "quire/io/io_error.h"
#include "quire/kernel/engine.h"
#include "quire/native/native_runner.h"
#include "quire/support/sha256.h"

namespace quire::cli {

namespace {

struct ExportOptions {
  std::string file;
  std::string target;
  std::string out;
  std::vector<std::string> entries;
  // --target c
  std::vector<std::string> dims;
  std::string precision = "f64";
  std::string realize;
  bool fused_products = true;
  std::string params;
  std::string inputs;
  int64_t seed = 0;
  std::string profile;
  std::string command;            ///< for the README: its files by base name
  std::vector<std::string> read;  ///< for the README: each file it read, with its SHA-256
};

/// The files into `out`, each atomically; the folder made first.
size_t write_files(const std::string& out, const std::vector<exports::ExportedFile>& files) {
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec || !std::filesystem::is_directory(out))
    throw UsageError(fmt::format("-o {}: cannot make the folder ({})", out, ec ? ec.message() : "not a folder"));
  size_t lines = 0;
  for (const exports::ExportedFile& f : files) {
    const std::filesystem::path path = std::filesystem::path(out) / f.name;
    std::filesystem::create_directories(path.parent_path(), ec);
    try {
      io::write_file_atomically(path.string(), f.text);
    } catch (const io::IoError& e) {
      throw UsageError(fmt::format("-o {}: {}", out, e.what()));
    }
    // Lines of text; a NumPy file's bytes are no lines.
    if (f.name.size() < 4 || f.name.compare(f.name.size() - 4, 4, ".npy") != 0)
      lines += static_cast<size_t>(std::count(f.text.begin(), f.text.end(), '\n'));
  }
  return lines;
}

int run_export_c(const ExportOptions& o) {
  if (o.entries.size() != 1) throw UsageError("--target c exports one entry: name it with --entry");
  if (!o.inputs.empty() && (o.inputs.size() < 4 || o.inputs.compare(o.inputs.size() - 4, 4, ".npz") != 0))
    throw UsageError(fmt::format("--inputs {}: inputs are read from an .npz", o.inputs));
  std::unique_ptr<elab::Program> prog = load_program(o.file);
  if (!prog) return 1;
  const std::map<std::string, int64_t> dims = parse_dims(o.dims, *prog);
  const int entry = find_entry(*prog, o.entries.front());
  const core::Function& fn = prog->functions.at(static_cast<size_t>(entry));
  precision::RealizeOptions options;
  options.policy = *precision::parse_policy(o.precision);
  options.fused_products = o.fused_products;
  std::optional<precision::RealizationFile> solved;
  if (!o.realize.empty()) {
    solved = load_realization(o.realize, *prog, entry, dims);
    options.policy = solved->assignment.policy;
    options.assignment = &solved->assignment;
  }
  std::optional<interp::ParamMap> params = entry_params(*prog, fn, o.params, static_cast<uint64_t>(o.seed), dims);
  if (!params && !o.params.empty())
    throw UsageError(fmt::format("`{}` takes no parameter tree: --params does not apply", fn.name));
  std::optional<std::string> inputs;
  if (!o.inputs.empty()) inputs = o.inputs;
  const std::vector<interp::Value> args =
      interp::entry_arguments(*prog, entry, params ? &*params : nullptr, dims, static_cast<uint64_t>(o.seed), inputs);
  const machine::Profile profile = machine::planning_profile(o.profile);
  compile::CompileRequest request;
  request.entry = entry;
  request.dims = dims;
  request.realize = options;
  request.profile = &profile;
  request.arguments = &args;
  request.library_kernels = false;  // the C export writes every function's lines
  const compile::CompiledProgram compiled = compile::compile(*prog, request);
  // The recorded outputs: the native backend's, on the arguments as cast on entry.
  std::unique_ptr<kernel::KernelRunner> runner = native::make_runner(kernel::Backend::Native, 1);
  kernel::KernelEngine engine(compiled.catalog, *runner, native::warn_native_unavailable);
  compile::Executor executor(*prog, compiled, engine);
  exports::CExportRequest r;
  r.prog = prog.get();
  r.compiled = &compiled;
  for (const interp::Value& a : args)
    r.arguments.push_back(compiled.realization ? interp::cast_entry_argument(*compiled.realization, a) : a);
  std::vector<exports::ExportedFile> files;
  try {
    r.result = executor.call(args);
    r.source = o.file;
    r.command = o.command;
    r.read = o.read;
    files = exports::export_c(r);
  } catch (const exports::ExportError& e) {
    throw UsageError(fmt::format("cannot export to C: {}", e.what()));
  }
  const size_t lines = write_files(o.out, files);
  std::cout << fmt::format(
      "quire export: `{}` as C: {} files, {} lines, into {} (`make -C {} check` builds it and "
      "compares its outputs with the native backend's)\n",
      fn.name, files.size(), lines, o.out, o.out);
  return 0;
}

/// The entries: those named, or every function of the main file (a vjp
/// elaboration added excepted).
std::vector<int> export_entries(const elab::Program& prog, const std::vector<std::string>& named) {
  std::vector<int> out;
  for (const std::string& name : named) out.push_back(find_entry(prog, name));
  if (!named.empty()) return out;
  const FileId main = prog.files.at(static_cast<size_t>(prog.main_file)).id;
  for (size_t f = 0; f < prog.functions.size(); ++f)
    if (prog.functions[f].file == main && prog.functions[f].primal < 0) out.push_back(static_cast<int>(f));
  if (out.empty()) throw UsageError("the main file has no function to export; name one with --entry");
  return out;
}

int run_export(const ExportOptions& o) {
  if (o.target == "c") return run_export_c(o);
  if (o.target != "pytorch")
    throw UsageError(fmt::format("--target {}: unknown target; the targets are pytorch and c", o.target));
  std::unique_ptr<elab::Program> prog = load_program(o.file);
  if (!prog) return 1;
  const std::vector<int> entries = export_entries(*prog, o.entries);
  std::vector<exports::ExportedFile> files;
  try {
    files = exports::export_pytorch(*prog, entries, o.file);
  } catch (const exports::ExportError& e) {
    throw UsageError(fmt::format("cannot export to PyTorch: {}", e.what()));
  }
  const size_t lines = write_files(o.out, files);
  std::vector<std::string> names;
  for (int e : entries) names.push_back(prog->functions[static_cast<size_t>(e)].name);
  std::cout << fmt::format("quire export: {} ({}) as PyTorch: {} files, {} lines, into {}\n",
                           entries.size() == 1 ? "1 entry" : fmt::format("{} entries", entries.size()),
                           fmt::join(names, ", "), files.size(), lines, o.out);
  return 0;
}

}  // namespace

Handler setup_export(CLI::App& sub) {
  auto o = std::make_shared<ExportOptions>();
  sub.add_option("file", o->file, "the program (.qr)")->required();
  sub.add_option("--target", o->target, "what to write: pytorch (modules) or c (a standalone program of one entry)")
      ->required();
  sub.add_option("-o,--out", o->out, "the folder to write the modules into (made if missing)")
      ->required()
      ->check(non_empty("-o needs a folder", "DIR"));
  sub.add_option("--entry", o->entries,
                 "a function to export, with everything it calls (repeat for several; default: every function "
                 "of the main file)");
  sub.add_option("--dim", o->dims, "c: bind a dimension, NAME=SIZE (repeatable)");
  CLI::Option* precision =
      sub.add_option("--precision", o->precision, "c: the run policy: f64 (default), f32, bf16 or f16")
          ->check(CLI::IsMember({"f64", "f32", "bf16", "f16"}));
  sub.add_option("--realize", o->realize, "c: compile under the solver's decisions, @realization.json");
  add_product_step_option(sub, o->fused_products);
  sub.add_option("--params", o->params, "c: the parameters of the recorded call, from a safetensors file");
  sub.add_option("--inputs", o->inputs, "c: the arguments of the recorded call, from an .npz (x, batch.0)");
  sub.add_option("--seed", o->seed, "c: seed of the parameters' and the inputs' draws (default 0)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--profile", o->profile, "c: the machine profile the kernels' layouts are planned under");
  return [o, precision, &sub] {
    if (!o->realize.empty() && precision->count() > 0)
      throw UsageError(fmt::format("--realize {} carries its own policy: leave out --precision", o->realize));
    if (o->target != "c")
      for (const char* flag :
           {"--dim", "--precision", "--realize", "--product-step", "--params", "--inputs", "--seed", "--profile"})
        if (sub.count(flag) > 0) throw UsageError(fmt::format("{} applies to --target c alone", flag));
    // The command for the README, the same bytes wherever its files lie: a
    // file it read is named by its base name, with its SHA-256 beside.
    o->command = "quire export " + std::filesystem::path(o->file).filename().string() + " --target c";
    for (const std::string& e : o->entries) o->command += " --entry " + e;
    for (const std::string& d : o->dims) o->command += " --dim " + d;
    if (precision->count() > 0) o->command += " --precision " + o->precision;
    std::vector<std::string> read;
    auto named = [&](const char* flag, std::string path, const char* prefix) {
      if (path.empty()) return;
      if (prefix[0] && path.rfind(prefix, 0) == 0) path = path.substr(1);
      const std::string name = std::filesystem::path(path).filename().string();
      o->command += fmt::format(" {} {}{}", flag, prefix, name);
      std::string digest = "(unreadable)";
      try {
        digest = support::sha256_hex(io::read_file(path));
      } catch (const io::IoError&) {
        // The command itself reports the file.
      }
      read.push_back(fmt::format("`{}` (SHA-256 {})", name, digest));
    };
    named("--realize", o->realize, "@");
    named("--params", o->params, "");
    named("--inputs", o->inputs, "");
    named("--profile", o->profile, "");
    if (o->seed != 0) o->command += fmt::format(" --seed {}", o->seed);
    o->read = read;
    return run_export(*o);
  };
}

}  // namespace quire::cli
