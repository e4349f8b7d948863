#include "common.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <set>
#include <thread>

#include "quire/calibrate/machine_profile.h"
#include "quire/elab/elaborator.h"
#include "quire/grad/vjp.h"
#include "quire/interp/inputs.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/params.h"
#include "quire/native/c_compiler.h"

namespace quire::cli {

std::unique_ptr<elab::Program> load_program(const std::string& path) {
  DiagnosticSink diags;
  auto prog = elab::elaborate(path, diags);
  std::cerr << diags.render(prog->sources);
  if (diags.has_errors()) {
    if (diags.error_count() > 1) std::cerr << fmt::format("{} errors\n", diags.error_count());
    return nullptr;
  }
  return prog;
}

int64_t parse_bytes(const std::string& flag, const std::string& text) {
  static const std::pair<const char*, int64_t> kUnits[] = {
      {"", 1},           {"B", 1},
      {"kB", 1000},      {"KB", 1000},           {"MB", 1000 * 1000}, {"GB", 1000LL * 1000 * 1000},
      {"TB", 1000LL * 1000 * 1000 * 1000},       {"KiB", 1024},       {"MiB", 1024 * 1024},
      {"GiB", 1024LL * 1024 * 1024},             {"TiB", 1024LL * 1024 * 1024 * 1024}};
  auto refuse = [&](const std::string& why) {
    return UsageError(fmt::format("{} {}: {}; give a whole number of bytes, optionally with a unit (64MiB, 2GB, 1048576)",
                                  flag, text, why));
  };
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) throw refuse("not a number of bytes");
  if (digits > 15) throw refuse("too large");
  const int64_t count = std::stoll(text.substr(0, digits));
  const std::string unit = text.substr(digits);
  for (const auto& [name, scale] : kUnits)
    if (unit == name) {
      if (count == 0) throw refuse("the limit must be above 0");
      if (count > std::numeric_limits<int64_t>::max() / scale) throw refuse("too large");
      return count * scale;
    }
  throw refuse(fmt::format("unknown unit `{}`", unit));
}

std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& flags, const elab::Program& prog) {
  std::map<std::string, int64_t> dims;
  for (const std::string& flag : flags) {
    size_t eq = flag.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError(fmt::format("--dim {}: expected NAME=SIZE, e.g. --dim B=4", flag));
    std::string name = flag.substr(0, eq);
    std::string value = flag.substr(eq + 1);
    int64_t n = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || end != value.data() + value.size())
      throw UsageError(fmt::format("--dim {}: `{}` is not an integer", flag, value));
    if (n < 1) throw UsageError(fmt::format("--dim {}: a dimension is at least 1", flag));
    if (n > (int64_t{1} << 40)) throw UsageError(fmt::format("--dim {}: too large", flag));
    if (std::find(prog.dims.begin(), prog.dims.end(), name) == prog.dims.end())
      throw UsageError(fmt::format("--dim {}: the program has no dimension `{}` (it has: {})", flag, name,
                                   prog.dims.empty() ? "none" : fmt::format("{}", fmt::join(prog.dims, ", "))));
    if (dims.count(name)) throw UsageError(fmt::format("--dim {}: `{}` is given twice", flag, name));
    dims[name] = n;
  }
  return dims;
}

int find_entry(const elab::Program& prog, const std::string& name) {
  int f = prog.find_function(name);
  if (f >= 0) return f;
  // The prelude's functions are callable from the program but are not its own.
  std::set<FileId> prelude;
  for (const elab::FileInfo& file : prog.files)
    if (file.prelude) prelude.insert(file.id);
  std::vector<std::string> names;
  for (const core::Function& fn : prog.functions)
    if (!prelude.count(fn.file)) names.push_back(fn.name);
  throw UsageError(fmt::format("--entry {}: no such function (the program has: {})", name, fmt::join(names, ", ")));
}

std::optional<interp::ParamMap> entry_params(const elab::Program& prog, const core::Function& fn,
                                             const std::string& file, uint64_t seed,
                                             const std::map<std::string, int64_t>& dims) {
  if (fn.args.empty() || fn.args[0].type.kind != elab::TypeKind::Params) return std::nullopt;
  const elab::ParamsType& model = fn.args[0].type.params;
  return file.empty() ? interp::init_params(prog, model, seed, dims) : interp::load_params(file, prog, model, dims);
}

precision::RealizationFile load_realization(const std::string& flag, const elab::Program& prog, int entry,
                                            const std::map<std::string, int64_t>& dims, int entry_vjp) {
  const std::string path = !flag.empty() && flag[0] == '@' ? flag.substr(1) : flag;
  precision::RealizationFile file = precision::read_realization_file(path);
  const std::string& name = prog.functions[static_cast<size_t>(entry)].name;
  if (file.entry != name)
    throw UsageError(fmt::format("--realize {}: the realization was solved for `{}`, not for `{}`", path, file.entry, name));
  const bool gradient = file.of == precision::BudgetOf::Gradient;
  if (gradient && entry_vjp < 0)
    throw UsageError(fmt::format("--realize {}: the realization was solved for the gradient of `{}` (`solve --of "
                                 "gradient`), which `quire train --realize` runs; solve `{}`'s output for this command",
                                 path, file.entry, file.entry));
  std::vector<std::string> problems =
      precision::check_assignment(prog, gradient ? entry_vjp : entry, file.assignment, dims);
  if (!problems.empty())
    throw UsageError(fmt::format("--realize {}: {} of its decisions cannot apply:\n  {}", path, problems.size(),
                                 fmt::join(problems, "\n  ")));
  return file;
}

CLI::Option* add_product_step_option(CLI::App& sub, bool& fused) {
  return sub
      .add_option_function<std::string>(
          "--product-step", [&fused](const std::string& v) { fused = v == "fma"; },
          "how a product's steps round: fma (one fused multiply-add per step where the accumulator is f64 or "
          "f32, which lets f32 products run on the native matrix-multiply micro-kernel; default) or separate "
          "(the product rounded, then the sum)")
      ->check(CLI::IsMember({"separate", "fma"}));
}

CLI::Validator non_empty(const std::string& why, const std::string& name) {
  return CLI::Validator([why](std::string& value) { return value.empty() ? why : std::string(); }, name);
}

CLI::Option* add_output_option(CLI::App& sub, const std::string& flags, std::string& path, const std::string& help) {
  return sub.add_option(flags, path, help)
      ->check(non_empty("an empty file name: give a path, or - for standard output", "FILE"));
}

int default_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(std::min(cores, 256u));
}

std::string execution_profile(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("QUIRE_PROFILE"); env && *env) {
    const std::string value = env;
    if (value == "shipped") return "";
    if (value == "machine") {
      // the machine's, as when the variable is unset
    } else {
      // A file, read (and checked) as --profile's; one that is not there is
      // named with the variable that gave it.
      std::error_code ec;
      if (!std::filesystem::is_regular_file(value, ec))
        throw UsageError(fmt::format("QUIRE_PROFILE={}: no such profile file (give `shipped`, `machine` or a profile "
                                     "file that `quire profile calibrate` wrote)",
                                     value));
      return value;
    }
  }
  const machine::MachineProfile m =
      machine::machine_profile(machine::this_machine(), native::CompilerSettings::from_environment().cache_dir);
  if (!m.note.empty()) std::cerr << m.note << "\n";
  return m.path;
}

std::vector<int> gradient_wrt(const elab::Program& prog, int entry) {
  const core::Function& fn = prog.functions.at(static_cast<size_t>(entry));
  std::vector<int> wrt = !fn.args.empty() && fn.args[0].type.kind == elab::TypeKind::Params
                             ? std::vector<int>{0}
                             : grad::differentiable_args(fn);
  if (wrt.empty()) throw UsageError(fmt::format("--grad: `{}` has no argument to differentiate", fn.name));
  return wrt;
}

}  // namespace quire::cli
