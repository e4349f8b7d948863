#include "quire/export/pytorch_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "quire/core/printer.h"
#include "quire/export/pytorch_ops.h"
#include "quire/export/pytorch_runtime.h"

namespace quire::exports {

namespace {

constexpr const char* kPreludeModule = "quire_prelude";
constexpr const char* kRuntimeModule = "quire_runtime";

// Python's keywords, and the names every generated module binds itself.
const std::set<std::string> kReserved = {
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield", "torch", "F", "qr", "range", "tuple",
    "float", "_i", "quire_prelude", "quire_runtime"};

/// A name as a Python identifier: ASCII letters, digits and _ kept, and the
/// Greek letters quire's names use (θ, γ, μ: identifiers in Python 3 as they
/// are); anything else becomes _. A leading digit gets a leading _.
std::string identifier(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size();) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x80) {
      out += std::isalnum(c) || c == '_' ? static_cast<char>(c) : '_';
      ++i;
      continue;
    }
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    len = std::min(len, name.size() - i);
    uint32_t cp = len == 2 ? ((c & 0x1fu) << 6) | (static_cast<unsigned char>(name[i + 1]) & 0x3fu) : 0;
    const bool greek = (cp >= 0x391 && cp <= 0x3a9) || (cp >= 0x3b1 && cp <= 0x3c9);
    out += greek ? name.substr(i, len) : "_";
    i += len;
  }
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
  return out;
}

/// The Python module of a source file: its stem as an identifier ("06_tower.qr" → "_06_tower").
std::string module_for(const std::string& path) {
  std::string stem = path.substr(path.find_last_of('/') + 1);
  if (const size_t dot = stem.rfind('.'); dot != std::string::npos && dot > 0) stem.resize(dot);
  std::string name = identifier(stem);
  if (kReserved.count(name)) name += "_qr";
  return name;
}

class Exporter {
 public:
  Exporter(const elab::Program& prog, const std::vector<int>& entries) : prog_(prog), entries_(entries) {
    std::set<int> seen;
    for (int e : entries)
      for (int f : core::reachable_functions(prog, e))
        if (seen.insert(f).second) reached_.push_back(f);
    std::sort(reached_.begin(), reached_.end());
    name_modules();
    find_needed_sizes();
  }

  std::vector<ExportedFile> files(const std::string& source) {
    std::vector<ExportedFile> out;
    // Every function is translated (and any that cannot be, refused) before
    // anything is returned.
    for (int file : prog_.file_order)
      if (!prog_.files[file].prelude && modules_used_.count(module_of_file_.at(file)))
        out.push_back({module_of_file_.at(file) + ".py", module_text(module_of_file_.at(file))});
    if (modules_used_.count(kPreludeModule))
      out.push_back({std::string(kPreludeModule) + ".py", module_text(kPreludeModule)});
    out.push_back({std::string(kRuntimeModule) + ".py", std::string(pytorch_runtime_module())});
    out.push_back({"README.md", readme(source)});
    return out;
  }

 private:
  const core::Function& fn(int f) const { return prog_.functions.at(static_cast<size_t>(f)); }
  const std::string& module_of(int f) const { return module_of_file_.at(file_of(f)); }
  int file_of(int f) const {
    const FileId id = fn(f).file;
    for (size_t i = 0; i < prog_.files.size(); ++i)
      if (prog_.files[i].id == id) return static_cast<int>(i);
    throw std::logic_error(fmt::format("internal: {} belongs to no file of the program", fn(f).name));
  }

  void name_modules() {
    std::set<std::string> taken;
    for (int file : prog_.file_order) {
      if (prog_.files[file].prelude) {
        module_of_file_[file] = kPreludeModule;
        continue;
      }
      std::string name = module_for(prog_.files[file].path);
      for (int k = 2; taken.count(name); ++k) name = fmt::format("{}_{}", module_for(prog_.files[file].path), k);
      taken.insert(name);
      module_of_file_[file] = name;
    }
    for (int f : reached_) modules_used_.insert(module_of(f));
    modules_used_.insert(module_of_file_.at(prog_.main_file));
  }

  /// The function's Python name within its module: a module's function is
  /// the class's static method, a free function a module-level def.
  std::string class_of(int f) const { return fn(f).module >= 0 ? identifier(prog_.modules[fn(f).module].name) : ""; }
  std::string method_of(int f) const {
    std::string name = fn(f).name;
    if (fn(f).module >= 0) name = name.substr(prog_.modules[fn(f).module].name.size() + 1);
    name = identifier(name);
    return kReserved.count(name) ? name + "_" : name;
  }
  std::string qualified(int f, const std::string& from_module) const {
    std::string local = fn(f).module >= 0 ? class_of(f) + "." + method_of(f) : method_of(f);
    return module_of(f) == from_module ? local : module_of(f) + "." + local;
  }

  /// The size symbols each function's body needs bound: the sizes its own
  /// operations name (split, iota, one_hot, draws, a fold's count) and those
  /// it passes to callees that need them. A symbol a function does not
  /// declare (a program's `dim B`) is passed down by name.
  void find_needed_sizes() {
    for (bool changed = true; changed;) {
      changed = false;
      for (int f : reached_) {
        std::set<std::string>& need = needed_[f];
        const size_t before = need.size();
        auto add = [&](const elab::Size& s) {
          for (const std::string& sym : s.symbols()) need.insert(sym);
        };
        for (const core::Instr& in : fn(f).body) {
          const bool call = in.op == core::Op::Call, fold = in.op == core::Op::Fold;
          if (!call && !fold) {
            if (in.op == core::Op::SplitAxis || in.op == core::Op::OneHot || in.op == core::Op::Iota ||
                core::op_info(in.op).draws)
              for (const elab::Size& s : in.sizes) add(s);
            continue;
          }
          if (fold && !in.sizes.empty()) add(in.sizes[0]);
          const core::Function& callee = fn(in.callee);
          const size_t first = call ? 0 : 1;
          for (const std::string& sym : needed_[in.callee]) {
            const auto at = std::find(callee.dims.begin(), callee.dims.end(), sym);
            if (at == callee.dims.end()) {
              need.insert(sym);
              continue;
            }
            const size_t k = first + static_cast<size_t>(at - callee.dims.begin());
            if (k < in.sizes.size()) add(in.sizes[k]);
          }
        }
        changed = changed || need.size() != before;
      }
    }
  }

  std::vector<std::string> size_keywords(const core::Instr& in) const {
    const core::Function& callee = fn(in.callee);
    const size_t first = in.op == core::Op::Call ? 0 : 1;
    std::vector<std::string> out;
    for (const std::string& sym : needed_.at(in.callee)) {
      const auto at = std::find(callee.dims.begin(), callee.dims.end(), sym);
      const size_t k = first + static_cast<size_t>(at - callee.dims.begin());
      const std::string value = at == callee.dims.end() || k >= in.sizes.size() ? sym : python_size(in.sizes[k]);
      out.push_back(fmt::format("{}={}", sym, value));
    }
    return out;
  }

  /// Where an entry's caller can read a size from: an axis of an argument
  /// whose size is exactly the symbol ("x.shape[-2]"), or empty.
  std::string size_source(const std::string& expr, const elab::Type& t, const std::string& sym) const {
    const elab::Size want = elab::Size::symbol(sym);
    auto in_tensor = [&](const std::string& e, const elab::TensorType& tt) -> std::string {
      const int n = static_cast<int>(tt.axes.size());
      for (int i = 0; i < n; ++i)
        if (tt.axes[i].size == want) return fmt::format("{}.shape[{}]", e, i - n);
      return "";
    };
    switch (t.kind) {
      case elab::TypeKind::Tensor: return in_tensor(expr, t.tensor);
      case elab::TypeKind::Tuple:
        for (size_t k = 0; k < t.elements.size(); ++k)
          if (std::string s = size_source(fmt::format("{}[{}]", expr, k), t.elements[k], sym); !s.empty()) return s;
        return "";
      case elab::TypeKind::Params:
        for (const auto& [path, tt] : prog_.flatten(t.params))
          if (std::string s = in_tensor(fmt::format("{}[\"{}\"]", expr, path), tt); !s.empty()) return s;
        return "";
      case elab::TypeKind::Scalar:
      case elab::TypeKind::Key: return "";
    }
    return "";
  }

  std::string signature_doc(const core::Function& f) const {
    elab::TypePrinter tp = prog_.printer();
    std::vector<std::string> args;
    for (const core::FnArg& a : f.args) args.push_back(fmt::format("{} : {}", a.name, tp(a.type)));
    std::string dims = f.dims.empty() ? "" : fmt::format("{{{}}}", fmt::join(f.dims, " "));
    return fmt::format("fn {}{}({}) -> {}", f.name, dims, fmt::join(args, ", "), tp(f.result));
  }

  /// One function as a Python def, indented by `indent`.
  std::string function_text(int f, const std::string& module, const std::string& indent,
                            const std::set<std::string>& module_names) const {
    const core::Function& func = fn(f);
    std::set<std::string> used = kReserved;
    used.insert(module_names.begin(), module_names.end());
    const std::set<std::string>& dims = needed_.at(f);
    used.insert(dims.begin(), dims.end());
    std::vector<std::string> names(static_cast<size_t>(func.value_count() + 1));
    auto take = [&](const std::string& wanted, int id) {
      std::string name = wanted.empty() ? fmt::format("t{}", id) : identifier(wanted);
      if (name[0] == '_') name = "v" + name;
      if (used.count(name)) name = fmt::format("{}_{}", name, id);
      used.insert(name);
      names.at(static_cast<size_t>(id)) = name;
    };
    std::vector<std::string> params;
    for (const core::FnArg& a : func.args) take(a.name, a.id);
    // Python takes defaults only after the arguments without: quire's
    // trailing defaults, and none if a default is followed by an argument
    // without one.
    for (size_t k = 0; k < func.args.size(); ++k) {
      const core::FnArg& a = func.args[k];
      bool trailing = true;
      for (size_t j = k; j < func.args.size(); ++j) trailing = trailing && func.args[j].has_default;
      params.push_back(trailing ? fmt::format("{}={}", names[a.id], python_float(a.default_value)) : names[a.id]);
    }
    std::vector<std::string> inferred;
    if (!dims.empty()) {
      params.push_back("*");
      for (const std::string& sym : dims) {
        std::string source;
        for (const core::FnArg& a : func.args)
          if (source.empty()) source = size_source(names[a.id], a.type, sym);
        if (source.empty()) {
          params.push_back(sym);  // a required keyword: nothing the arguments hold gives it
          continue;
        }
        params.push_back(sym + "=None");
        inferred.push_back(fmt::format("if {} is None:", sym));
        inferred.push_back(fmt::format("    {} = {}", sym, source));
      }
    }
    for (const core::Instr& in : func.body) take(in.name, in.id);

    const std::string body = indent + "    ";
    std::string out;
    if (func.module >= 0) out += indent + "@staticmethod\n";
    out += fmt::format("{}def {}({}):\n", indent, method_of(f), fmt::join(params, ", "));
    out += fmt::format("{}\"\"\"{}\"\"\"\n", body, signature_doc(func));
    for (const std::string& line : inferred) out += body + line + "\n";
    InstrScope scope{prog_, func, [&](int id) { return names.at(static_cast<size_t>(id)); },
                     [&](const core::Instr& in) { return qualified(in.callee, module); },
                     [&](const core::Instr& in) { return size_keywords(in); }};
    elab::TypePrinter tp = prog_.printer();
    for (const core::Instr& in : func.body) {
      std::vector<std::string> lines = translate_instr(scope, in, names[in.id]);
      for (size_t k = 0; k < lines.size(); ++k) {
        out += body + lines[k];
        if (k == 0) out += fmt::format("  # %{} : {}", in.id, tp(in.type));
        out += "\n";
      }
    }
    out += fmt::format("{}return {}\n", body, names.at(static_cast<size_t>(func.result_value)));
    return out;
  }

  std::string module_text(const std::string& module) const {
    std::vector<int> fns;
    for (int f : reached_)
      if (module_of(f) == module) fns.push_back(f);
    std::set<std::string> imports, defined;
    for (int f : fns) {
      defined.insert(fn(f).module >= 0 ? class_of(f) : method_of(f));
      for (const core::Instr& in : fn(f).body)
        if (core::op_info(in.op).calls && module_of(in.callee) != module) imports.insert(module_of(in.callee));
    }
    std::set<std::string> module_names = defined;
    module_names.insert(imports.begin(), imports.end());

    std::vector<std::string> files;
    for (int file : prog_.file_order)
      if (module_of_file_.at(file) == module) files.push_back(prog_.files[file].path);
    std::string out = fmt::format(
        "\"\"\"{}: {} as PyTorch, written by `quire export --target pytorch` (docs/export.md).\n\n"
        "Each function is quire's elaborated Core, one statement per operation (its site and type\n"
        "in the comment), computing in float64 what `quire run --precision f64` computes. A module's\n"
        "functions are its class's static methods; θ is a dict of tensors keyed by parameter path.\n"
        "\"\"\"\n",
        module + ".py", module == kPreludeModule ? "the prelude's functions that the entries use"
                                                 : fmt::format("{}", fmt::join(files, ", ")));
    out += "import torch\nimport torch.nn.functional as F\n\nimport quire_runtime as qr\n";
    for (const std::string& m : imports) out += fmt::format("import {}\n", m);
    // Classes in the order of their first function, each holding its functions.
    std::vector<int> done;
    for (int f : fns) {
      if (std::find(done.begin(), done.end(), f) != done.end()) continue;
      out += "\n\n";
      if (fn(f).module < 0) {
        out += function_text(f, module, "", module_names);
        done.push_back(f);
        continue;
      }
      out += fmt::format("class {}:\n", class_of(f));
      out += fmt::format("    \"\"\"module {}: θ holds its parameters.\"\"\"\n", prog_.modules[fn(f).module].name);
      for (int g : fns)
        if (fn(g).module == fn(f).module) {
          out += "\n" + function_text(g, module, "    ", module_names);
          done.push_back(g);
        }
    }
    return out;
  }

  std::string readme(const std::string& source) const {
    elab::TypePrinter tp = prog_.printer();
    std::string out = fmt::format("# {} as PyTorch\n\n", source);
    out += fmt::format(
        "Written by `quire export {} --target pytorch`. One module per source file (the prelude's\n"
        "functions in `{}.py`, the helpers in `{}.py`); every function computes in float64 what\n"
        "`quire run --precision f64` computes, within rounding (see quire's docs/export.md).\n\n",
        source, kPreludeModule, kRuntimeModule);
    out += "## Entries\n\n";
    for (int e : entries_) {
      out += fmt::format("- `{}` (`{}.py`): `{}`\n", qualified(e, ""), module_of(e), signature_doc(fn(e)));
      if (!needed_.at(e).empty())
        out += fmt::format("  (sizes {} are read from the arguments' shapes, or given as keywords)\n",
                           fmt::join(needed_.at(e), ", "));
    }
    out += "\n## Parameters\n\n"
           "θ is a dict of float64 tensors keyed by parameter path (`blocks.proj.w`), laid out as quire\n"
           "lays them out: a weight is [in, out] (`x @ w`), and `stack{L}(M)`'s copies share one leading\n"
           "axis of L. Write them with `quire run … --params-out params.safetensors` (or a training\n"
           "checkpoint) and read them with safetensors:\n\n"
           "```python\nimport sys\nsys.path.insert(0, \"THIS_FOLDER\")\n"
           "import torch\nfrom safetensors.torch import load_file\n";
    const int first = entries_.empty() ? -1 : entries_[0];
    if (first >= 0) {
      out += fmt::format("import {}\n\nθ = load_file(\"params.safetensors\")  # float64 under --precision f64\n",
                         module_of(first));
      std::vector<std::string> args;
      for (const core::FnArg& a : fn(first).args) {
        if (a.type.kind == elab::TypeKind::Params) {
          args.push_back("θ");
          continue;
        }
        args.push_back(identifier(a.name));
        const char* what = a.type.kind == elab::TypeKind::Key ? "a key: None will do" : "float64 reals, int32 ids";
        out += fmt::format("{} = ...  # {} ({})\n", args.back(), tp(a.type), what);
      }
      out += fmt::format("print({}({}))\n", qualified(first, ""), fmt::join(args, ", "));
    }
    out += "```\n\n## Keys and draws\n\n"
           "quire's random draws come from Philox counters that PyTorch cannot reproduce. A `key`\n"
           "argument is carried unchanged (pass `None`), and a draw is exported only where its\n"
           "outcome is certain: a bernoulli of probability 1 or 0, so dropout at p = 0 keeps every\n"
           "element exactly. Any other draw raises `quire_runtime.DrawError` when it runs.\n";
    return out;
  }

  const elab::Program& prog_;
  std::vector<int> entries_;
  std::vector<int> reached_;
  std::map<int, std::string> module_of_file_;
  std::set<std::string> modules_used_;
  std::map<int, std::set<std::string>> needed_;
};

}  // namespace

std::vector<ExportedFile> export_pytorch(const elab::Program& prog, const std::vector<int>& entries,
                                         const std::string& source) {
  return Exporter(prog, entries).files(source);
}

}  // namespace quire::exports
