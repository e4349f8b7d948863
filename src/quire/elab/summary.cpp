#include "quire/elab/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

namespace quire::elab {

std::string shown_path(const Program& prog, int file) { return prog.files[file].path; }

namespace {

std::string init_text(const InitExpr& init) {
  if (init.args.empty()) return init.kind;
  std::vector<std::string> args;
  for (double a : init.args) args.push_back(fmt::format("{}", a));
  return fmt::format("{}({})", init.kind, fmt::join(args, ", "));
}

std::string fn_signature(const Program& prog, const core::Function& fn, bool short_name) {
  TypePrinter tp = prog.printer();
  std::vector<std::string> args;
  for (const core::FnArg& a : fn.args) {
    if (a.name == "θ" && fn.module >= 0) continue;  // implicit in a module's function
    std::string dflt = a.has_default ? fmt::format(" = {}", a.default_value) : "";
    args.push_back(fmt::format("{} : {}{}", a.name, tp(a.type), dflt));
  }
  std::string name = fn.name;
  if (short_name && fn.module >= 0) name = name.substr(name.find('.') + 1);
  // A module function's dims are its module's, printed on the module's line.
  std::string size_params = fn.module < 0 && !fn.dims.empty() ? fmt::format("{{{}}}", fmt::join(fn.dims, " ")) : "";
  return fmt::format("fn {}{}({}) -> {}", name, size_params, fmt::join(args, ", "), tp(fn.result));
}

/// Which functions the printouts show (Program::shown_functions), by index.
std::vector<bool> shown_set(const Program& prog) {
  std::vector<bool> shown(prog.functions.size(), false);
  for (int f : prog.shown_functions()) shown[f] = true;
  return shown;
}

/// A prelude file is printed only for the functions of it the program reaches.
bool file_shown(const FileInfo& file, const std::vector<bool>& shown) {
  if (!file.prelude) return true;
  return std::any_of(file.fns.begin(), file.fns.end(), [&](int f) { return shown[f]; });
}

/// Every instance of a module at constant dimensions the program mentions.
std::vector<ParamsType> instances(const Program& prog) {
  std::vector<ParamsType> out;
  auto add = [&](ParamsType p) {
    p.stack.clear();
    if (p.module < 0) return;
    for (const Size& s : p.dims)
      if (!s.is_constant()) return;
    for (const ParamsType& q : out)
      if (q == p) return;
    out.push_back(p);
  };
  for (size_t m = 0; m < prog.modules.size(); ++m) {
    if (prog.modules[m].dims.empty()) add({static_cast<int>(m), {}, {}});
    for (const UseInfo& u : prog.modules[m].uses) add(u.type);
  }
  std::stable_sort(out.begin(), out.end(), [](const ParamsType& a, const ParamsType& b) { return a.module < b.module; });
  return out;
}

}  // namespace

std::string print_elab(const Program& prog) {
  TypePrinter tp = prog.printer();
  std::vector<bool> shown = shown_set(prog);
  std::string out;
  for (int f : prog.file_order) {
    const FileInfo& file = prog.files[f];
    if (!file_shown(file, shown)) continue;
    out += fmt::format("== {}{}\n", file.path, f == prog.main_file ? " (main)" : "");
    for (const auto& [alias, idx] : file.imports) out += fmt::format("import {} = {}\n", alias, prog.files[idx].path);
    if (!file.dims.empty()) out += fmt::format("dim {}\n", fmt::join(file.dims, " "));
    for (const ConstInfo& c : file.consts) out += fmt::format("const {} : {} = {}\n", c.name, scalar_name(c.kind), c.value);
    for (int mi : file.modules) {
      const ModuleInfo& m = prog.modules[mi];
      std::string dims = m.dims.empty() ? "" : fmt::format("{{{} : dim}}", fmt::join(m.dims, " "));
      out += fmt::format("module {}{} {{\n", m.name, dims);
      for (const ParamInfo& p : m.params) {
        std::string marks = p.numerics_high ? "  numerics high" : "";
        if (p.frozen) marks += "  frozen";
        out += fmt::format("  param {} : {}  init {}{}\n", p.name, tp.tensor(p.type), init_text(p.init), marks);
      }
      for (const UseInfo& u : m.uses) out += fmt::format("  use {} : {}\n", u.name, tp.params(u.type));
      for (int fi : m.fn_order) out += "  " + fn_signature(prog, prog.functions[fi], true) + "\n";
      out += "}\n";
    }
    for (int fi : file.fns)
      if (shown[fi]) out += fn_signature(prog, prog.functions[fi], false) + "\n";
    for (int oi : file.optimizers)
      out += fmt::format("optimizer {} ({} fields)\n", prog.optimizers[oi].name, prog.optimizers[oi].fields.size());
    if (file.training) out += "training run\n";
  }
  out += "== instances\n";
  for (const ParamsType& p : instances(prog)) {
    out += tp.params(p) + ":\n";
    for (const auto& [path, type] : prog.flatten(p)) out += fmt::format("  {} : {}\n", path, tp.tensor(type));
  }
  return out;
}

nlohmann::ordered_json elab_json(const Program& prog) {
  TypePrinter tp = prog.printer();
  nlohmann::ordered_json root;
  root["files"] = nlohmann::ordered_json::array();
  std::vector<bool> shown = shown_set(prog);
  for (int f : prog.file_order) {
    const FileInfo& file = prog.files[f];
    if (!file_shown(file, shown)) continue;
    nlohmann::ordered_json j;
    j["path"] = file.path;
    j["main"] = f == prog.main_file;
    j["imports"] = nlohmann::ordered_json::object();
    for (const auto& [alias, idx] : file.imports) j["imports"][alias] = prog.files[idx].path;
    j["dims"] = file.dims;
    j["consts"] = nlohmann::ordered_json::object();
    for (const ConstInfo& c : file.consts) j["consts"][c.name] = c.value;
    j["modules"] = nlohmann::ordered_json::array();
    for (int mi : file.modules) {
      const ModuleInfo& m = prog.modules[mi];
      nlohmann::ordered_json mj;
      mj["name"] = m.name;
      mj["dims"] = m.dims;
      mj["params"] = nlohmann::ordered_json::array();
      for (const ParamInfo& p : m.params)
        mj["params"].push_back({{"name", p.name},
                                {"type", tp.tensor(p.type)},
                                {"init", init_text(p.init)},
                                {"numerics_high", p.numerics_high},
                                {"frozen", p.frozen}});
      mj["uses"] = nlohmann::ordered_json::array();
      for (const UseInfo& u : m.uses) mj["uses"].push_back({{"name", u.name}, {"module", tp.params(u.type)}});
      mj["fns"] = nlohmann::ordered_json::array();
      for (int fi : m.fn_order) mj["fns"].push_back(fn_signature(prog, prog.functions[fi], true));
      j["modules"].push_back(mj);
    }
    j["fns"] = nlohmann::ordered_json::array();
    for (int fi : file.fns)
      if (shown[fi]) j["fns"].push_back(fn_signature(prog, prog.functions[fi], false));
    root["files"].push_back(j);
  }
  root["instances"] = nlohmann::ordered_json::array();
  for (const ParamsType& p : instances(prog)) {
    nlohmann::ordered_json ij;
    ij["module"] = tp.params(p);
    ij["params"] = nlohmann::ordered_json::array();
    for (const auto& [path, type] : prog.flatten(p)) ij["params"].push_back({{"path", path}, {"type", tp.tensor(type)}});
    root["instances"].push_back(ij);
  }
  return root;
}

namespace {

/// Whether an initializer draws from its key (zeros and ones do not).
bool init_draws(const InitExpr& init) { return init.kind != "zeros" && init.kind != "ones"; }

/// Whether initializing module `m` draws: one of its parameters' initializers
/// does, or one of the modules it uses does.
bool module_init_draws(const Program& prog, int m, std::vector<int>& seen) {
  if (std::find(seen.begin(), seen.end(), m) != seen.end()) return false;
  seen.push_back(m);
  const ModuleInfo& mod = prog.modules[static_cast<size_t>(m)];
  for (const ParamInfo& p : mod.params)
    if (init_draws(p.init)) return true;
  for (const UseInfo& u : mod.uses)
    if (module_init_draws(prog, u.type.module, seen)) return true;
  return false;
}

bool module_has_params(const Program& prog, int m) {
  const ModuleInfo& mod = prog.modules[static_cast<size_t>(m)];
  if (!mod.params.empty()) return true;
  for (const UseInfo& u : mod.uses)
    if (module_has_params(prog, u.type.module)) return true;
  return false;
}

std::string print_builtin_effects(const Program& prog) {
  // The built-in functions a program's parameters and training run call:
  // each module's initializer (`init = …` on its parameters and those of the
  // modules it uses) and the training run's optimizer. They are not Core, so
  // they carry no regularity class; their arguments and effects are stated.
  std::string out;
  for (size_t m = 0; m < prog.modules.size(); ++m) {
    const ModuleInfo& mod = prog.modules[m];
    if (prog.files[static_cast<size_t>(mod.file)].prelude || !module_has_params(prog, static_cast<int>(m))) continue;
    std::vector<int> seen;
    const bool draws = module_init_draws(prog, static_cast<int>(m), seen);
    std::vector<std::string> inits;
    for (const ParamInfo& p : mod.params) inits.push_back(fmt::format("{}: {}", p.name, p.init.kind));
    for (const UseInfo& u : mod.uses)
      if (module_has_params(prog, u.type.module))
        inits.push_back(fmt::format("{}: {}.init", u.name, prog.modules[static_cast<size_t>(u.type.module)].name));
    out += fmt::format("{}.init : [key] uses {}  (built in; {})\n", mod.name, draws ? "Rand" : "none",
                       fmt::join(inits, ", "));
  }
  const TrainingInfo* t = prog.training();
  if (t && t->optimizer >= 0) {
    const std::string& name = prog.optimizers[static_cast<size_t>(t->optimizer)].name;
    out += fmt::format("{}.step : [θ, state, g, step] uses none  (built in: the update, deterministic)\n", name);
  }
  return out;
}

}  // namespace

std::string print_summary(const Program& prog) {
  TypePrinter tp = prog.printer();
  std::string out;
  auto file_of = [&](const core::Function& fn) {
    for (size_t f = 0; f < prog.files.size(); ++f)
      if (prog.files[f].id == fn.file) return std::filesystem::path(prog.files[f].path).filename().string();
    return std::string("?");
  };
  std::vector<int> shown = prog.shown_functions();
  for (int f : shown) {
    const core::Function& fn = prog.functions[f];
    std::string size_params = fn.module < 0 && !fn.dims.empty() ? fmt::format("{{{}}}", fmt::join(fn.dims, " ")) : "";
    out += fmt::format("{} {}{} : {}\n", file_of(fn), fn.name, size_params, tp(fn.result));
    for (const core::Instr& in : fn.body)
      if (!in.name.empty() && in.op != core::Op::Field) out += fmt::format("    let {} : {}\n", in.name, tp(in.type));
  }
  out += "-- regularity and effects --\n";
  for (int f : shown) {
    const core::Function& fn = prog.functions[f];
    std::vector<std::string> regs;
    for (size_t a = 0; a < fn.args.size(); ++a)
      regs.push_back(fmt::format("{} {}", fn.args[a].name,
                                 a < fn.arg_regularity.size() ? core::regularity_name(fn.arg_regularity[a]) : "?"));
    out += fmt::format("{} : [{}] uses {}\n", fn.name, fmt::join(regs, ", "), fn.uses_rand ? "Rand" : "none");
  }
  out += print_builtin_effects(prog);
  const TrainingInfo* t = prog.training();
  if (t && t->model >= 0) {
    ParamsType model{t->model, {}, {}};
    auto params = prog.flatten(model);
    std::map<std::string, int64_t> no_dims;
    int64_t total = 0;
    std::string rows;
    for (const auto& [path, type] : params) {
      int64_t n = 1;
      bool known = true;
      for (const Axis& a : type.axes) {
        auto v = a.size.evaluate(no_dims);
        if (!v) known = false;
        else n *= *v;
      }
      rows += fmt::format("    {} : {}  {}\n", path, tp.tensor(type), known ? std::to_string(n) + " reals" : "symbolic");
      total += known ? n : 0;
    }
    out += fmt::format("-- parameters of {}: {} tensors, {} reals --\n", prog.modules[t->model].name, params.size(), total);
    out += rows;
  }
  if (t) {
    out += "-- training --\n";
    std::string model = t->model >= 0 ? prog.modules[t->model].name : "?";
    std::string objective = t->objective >= 0 ? prog.functions[t->objective].name : "?";
    std::string optimizer = t->optimizer >= 0 ? prog.optimizers[t->optimizer].name : "?";
    out += fmt::format("training run: model {}, objective {}, optimizer {}\n", model, objective, optimizer);
    if (t->objective >= 0 && prog.functions[t->objective].args.size() == 2) {
      const Type& batch = prog.functions[t->objective].args[1].type;
      out += fmt::format("    batch   : {}\n", tp(batch));
      // A sample is a batch without its batch axis.
      Type sample = batch;
      std::function<void(Type&)> drop = [&](Type& ty) {
        if (ty.kind == TypeKind::Tuple)
          for (Type& e : ty.elements) drop(e);
        if (ty.kind == TypeKind::Tensor && !ty.tensor.axes.empty() &&
            ty.tensor.axes[0].size == Size::symbol(t->batch_dim))
          ty.tensor.axes.erase(ty.tensor.axes.begin());
      };
      drop(sample);
      out += fmt::format("    sample  : {}\n", tp(sample));
    }
    std::vector<std::string> stages;
    std::string path;
    for (const PipelineStageInfo& s : t->data) {
      if (s.name == "stream") path = s.path;
      else if (!s.args.empty()) stages.push_back(fmt::format("{} {}", s.name, s.args[0].second));
    }
    out += fmt::format("    data    : {} ({})\n", path, fmt::join(stages, ", "));
    out += fmt::format("    epochs  : {}\n", t->epochs);
    if (t->checkpoint_every > 0)
      out += fmt::format("    ckpt    : every {} {} to {}\n", t->checkpoint_every, t->checkpoint_unit, t->checkpoint_dir);
    if (t->evaluate >= 0)
      out += fmt::format("    eval    : {} every {} steps on {}\n", prog.functions[static_cast<size_t>(t->evaluate)].name,
                         t->evaluate_every, t->evaluate_path);
    if (!t->batch_dim.empty()) out += fmt::format("    dims    : {} = {}\n", t->batch_dim, t->batch_size);
    for (const FieldInfo& f : t->other_fields) out += fmt::format("    {:<8}: {}\n", f.key, f.value);
    if (t->optimizer >= 0) {
      const OptimizerInfo& o = prog.optimizers[t->optimizer];
      std::vector<std::string> fields;
      for (const FieldInfo& f : o.fields) fields.push_back(fmt::format("{} = {}", f.key, f.value));
      out += fmt::format("    optimizer {}: {}\n", o.name, fmt::join(fields, ", "));
    }
  }
  return out;
}

}  // namespace quire::elab
