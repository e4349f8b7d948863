// The declaration pass of elaboration: files and imports, constants, dims,
// modules and their members, function signatures, optimizers and the training
// run; then bodies (lower_body.cpp), call cycles, effects and regularity.

#include "quire/elab/elaborator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

#include "quire/core/verify.h"
#include "quire/elab/elaborator_impl.h"
#include "quire/grad/vjp.h"
#include "quire/prelude/prelude.h"
#include "quire/syntax/parser.h"

namespace quire::elab {

namespace fs = std::filesystem;

FileReader disk_reader() {
  return [](const std::string& path, std::string& error) -> std::optional<std::string> {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      error = "is a directory";
      return std::nullopt;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      error = std::strerror(errno);
      return std::nullopt;
    }
    // Bounded, so that `import "/dev/zero"` is an error and not all of memory.
    constexpr size_t kMaxSourceBytes = size_t{16} << 20;
    std::string text;
    char buffer[1 << 16];
    while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
      if (text.size() + static_cast<size_t>(in.gcount()) > kMaxSourceBytes) {
        error = "is longer than 16 MiB, which no program is";
        return std::nullopt;
      }
      text.append(buffer, static_cast<size_t>(in.gcount()));
    }
    if (in.bad()) {
      error = std::strerror(errno);
      return std::nullopt;
    }
    return text;
  };
}

std::unique_ptr<Program> elaborate(const std::string& path, DiagnosticSink& diags, const FileReader& reader) {
  Elaborator el(diags, reader);
  return el.run(path);
}

namespace {

std::string normalize(const std::string& path) {
  return fs::path(path).lexically_normal().generic_string();
}

SourceRange whole_file(FileId f) { return {{f, 0}, 0}; }

}  // namespace

std::unique_ptr<Program> Elaborator::run(const std::string& path) {
  prog_ = std::make_unique<Program>();
  std::vector<std::string> chain;
  std::string error;
  auto text = reader_(path, error);
  if (!text) {
    // A missing main file is a flag problem: the path and the reason.
    FileId f = prog_->sources.add(path, "");
    diags_.add({Severity::Error, "E0301", whole_file(f), false, fmt::format("cannot read the program: {}", error), ""});
    return std::move(prog_);
  }
  load_file(path, path, chain, {}, 0);
  load_prelude();
  // Dependencies first: every later printout follows this order. The prelude
  // comes first, as every file imports it implicitly.
  std::vector<bool> placed(prog_->files.size(), false);
  std::function<void(int)> place = [&](int f) {
    placed[f] = true;
    for (const auto& [alias, idx] : prog_->files[f].imports)
      if (!placed[idx]) place(idx);
    prog_->file_order.push_back(f);
  };
  for (size_t f = 0; f < prog_->files.size(); ++f)
    if (prog_->files[f].prelude) place(static_cast<int>(f));
  if (!prog_->files.empty()) place(0);
  // Syntax errors stop elaboration: what follows would report their echoes.
  if (diags_.has_errors()) return std::move(prog_);
  // Declarations go through the user's files before the prelude's, so that a
  // program's modules and functions have the indices they would have without it.
  std::vector<int> declaration_order;
  for (int f : prog_->file_order)
    if (!prog_->files[f].prelude) declaration_order.push_back(f);
  for (int f : prog_->file_order)
    if (prog_->files[f].prelude) declaration_order.push_back(f);
  for (int f : declaration_order) declare_file(f);
  for (size_t m = 0; m < prog_->modules.size(); ++m) resolve_module_members(static_cast<int>(m));
  check_module_cycles();
  check_tree_sizes();
  trees_final_ = true;
  for (const ModuleInfo& m : prog_->modules)
    for (const UseInfo& u : m.uses) check_instance_sizes(u.type, u.loc);
  // Signatures of every function before any body, so that calls see them.
  for (int f : declaration_order) {
    const ast::File& file = *asts_[f];
    for (const ast::ModuleDecl& m : file.modules) {
      int mi = -1;
      for (int idx : prog_->files[f].modules)
        if (prog_->modules[idx].name == m.name.text && module_decls_[idx] == &m) mi = idx;
      if (mi < 0) continue;
      for (const ast::FnDecl& fn : m.fns) declare_function(f, mi, fn);
    }
    for (const ast::FnDecl& fn : file.fns) declare_function(f, -1, fn);
  }
  first_gradient_ = static_cast<int>(prog_->functions.size());
  for (size_t i = 0; i < static_cast<size_t>(first_gradient_); ++i) {
    if (diags_.saturated()) break;
    lower_function_body(*this, static_cast<int>(i));
  }
  declare_gradients();
  check_call_cycles();
  build_gradients();
  compute_effects_and_regularity();
  for (int f : prog_->file_order)
    for (const ast::OptimizerDecl& o : asts_[f]->optimizers) elaborate_optimizer(f, o);
  for (int f : prog_->file_order)
    for (const ast::TrainingDecl& t : asts_[f]->trainings) elaborate_training(f, t);
  // Core's invariants, checked where a broken one is cheap to find (core/verify.h).
  if (core::kVerifyCore && !diags_.has_errors()) core::verify_or_throw(prog_->functions);
  return std::move(prog_);
}

void Elaborator::load_prelude() {
  for (const prelude::File& file : prelude::files()) {
    FileInfo info;
    info.path = std::string(file.path);
    info.resolved = "quire:" + info.path;  // never a path on disk: an import of it reads the disk
    info.id = prog_->sources.add(info.path, std::string(file.text));
    info.prelude = true;
    prog_->files.push_back(info);
    asts_.push_back(std::make_unique<ast::File>(syntax::parse_file(prog_->sources, info.id, diags_)));
    if (!asts_.back()->imports.empty())
      throw std::logic_error("prelude invariant: " + info.path +
                             " imports a file; the prelude's files see each other's functions without imports");
  }
}

int Elaborator::load_file(const std::string& path, const std::string& shown, std::vector<std::string>& chain,
                          SourceRange from, FileId from_file) {
  std::string resolved = normalize(path);
  for (size_t i = 0; i < prog_->files.size(); ++i)
    if (prog_->files[i].resolved == resolved) {
      // Already loaded: a cycle if it is on the current chain.
      for (size_t c = 0; c < chain.size(); ++c)
        if (chain[c] == resolved) {
          // Report where the cycle starts: the import in the first file of the
          // cycle, which is the file its user is looking at.
          std::string names;
          for (size_t k = c; k < chain.size(); ++k) names += prog_->files[chain_files_[k]].path + " → ";
          SourceRange at = c < import_stack_.size() ? import_stack_[c] : from;
          error("E0302", at, fmt::format("import cycle: {}{}", names, prog_->files[i].path),
                "a file may not import itself, directly or through others");
          return -1;
        }
      return static_cast<int>(i);
    }
  if (static_cast<int>(chain.size()) >= kMaxImportDepth) {
    error("E0302", from, fmt::format("imports nest deeper than {} files", kMaxImportDepth));
    return -1;
  }
  std::string err;
  auto text = reader_(path, err);
  if (!text) {
    if (chain.empty()) return -1;
    error("E0301", from, fmt::format("cannot read `{}`: {}", shown, err),
          fmt::format("imports are relative to the importing file ({})", prog_->sources.file(from_file).path));
    return -1;
  }
  FileId id = prog_->sources.add(shown, std::move(*text));
  int index = static_cast<int>(prog_->files.size());
  FileInfo info;
  info.path = shown;
  info.resolved = resolved;
  info.id = id;
  prog_->files.push_back(info);
  size_t errors_before = diags_.error_count();
  asts_.push_back(std::make_unique<ast::File>(syntax::parse_file(prog_->sources, id, diags_)));
  // A file with syntax errors is not followed further: its imports may be the
  // parser's recovery, and every later error would be a consequence.
  if (diags_.error_count() > errors_before) return index;
  chain.push_back(resolved);
  chain_files_.push_back(index);
  fs::path dir = fs::path(path).parent_path();
  fs::path shown_dir = fs::path(shown).parent_path();
  // Copy: asts_ may grow (and move its unique_ptrs, not the Files) while we recurse.
  const ast::File* file = asts_[index].get();
  for (const ast::ImportDecl& imp : file->imports) {
    std::string child = (dir / imp.path).generic_string();
    std::string child_shown = normalize((shown_dir / imp.path).generic_string());
    import_stack_.push_back(imp.range);
    int target = load_file(child, child_shown, chain, imp.range, id);
    import_stack_.pop_back();
    if (target >= 0) {
      for (const auto& [alias, idx] : prog_->files[index].imports)
        if (alias == imp.alias.text) error("E0304", imp.alias.range, fmt::format("`{}` is imported twice", alias));
      prog_->files[index].imports.push_back({imp.alias.text, target});
    }
  }
  chain.pop_back();
  chain_files_.pop_back();
  return index;
}

void Elaborator::declare_file(int fi) {
  const ast::File& file = *asts_[fi];
  FileInfo& info = prog_->files[fi];
  std::set<std::string> names;
  for (const auto& [alias, idx] : info.imports) names.insert(alias);
  auto claim = [&](const ast::Ident& id, const char* what) {
    if (!names.insert(id.text).second) {
      error("E0304", id.range, fmt::format("`{}` is already defined in this file", id.text),
            fmt::format("rename the {}", what));
      return false;
    }
    return true;
  };
  for (const ast::DimDecl& d : file.dims)
    for (const ast::Ident& n : d.names) {
      if (!claim(n, "dimension")) continue;
      info.dims.push_back(n.text);
      if (std::find(prog_->dims.begin(), prog_->dims.end(), n.text) == prog_->dims.end()) prog_->dims.push_back(n.text);
    }
  for (const ast::ConstDecl& c : file.consts) {
    if (!claim(c.name, "constant")) continue;
    ConstInfo ci;
    ci.name = c.name.text;
    ci.loc = c.name.range;
    ci.kind = c.type ? declared_scalar(*c.type, "a constant's") : ScalarKind::F64;
    if (c.value)
      if (auto v = typed_constant(ci.kind, *c.value, fi, fmt::format("`{}`", ci.name))) ci.value = *v;
    info.consts.push_back(ci);
  }
  for (const ast::ModuleDecl& m : file.modules) {
    if (!claim(m.name, "module")) continue;
    declare_module(fi, m);
  }
  for (const ast::FnDecl& f : file.fns) claim(f.name, "function");
}

void Elaborator::declare_module(int fi, const ast::ModuleDecl& m) {
  ModuleInfo info;
  info.name = m.name.text;
  info.file = fi;
  info.loc = m.name.range;
  std::set<std::string> seen;
  for (const ast::Ident& d : m.dims) {
    if (!seen.insert(d.text).second) error("E0304", d.range, fmt::format("dimension `{}` is declared twice", d.text));
    info.dims.push_back(d.text);
  }
  int index = static_cast<int>(prog_->modules.size());
  prog_->modules.push_back(info);
  module_decls_.push_back(&m);
  prog_->files[fi].modules.push_back(index);
}

int Elaborator::find_module(const std::vector<ast::Ident>& name, int file, bool report) {
  int f = file;
  for (size_t i = 0; i + 1 < name.size(); ++i) {
    int next = -1;
    for (const auto& [alias, idx] : prog_->files[f].imports)
      if (alias == name[i].text) next = idx;
    if (next < 0) {
      if (report)
        error("E0303", name[i].range, fmt::format("`{}` is not an imported file here", name[i].text),
              "import it with `import \"file.qr\" as name`");
      return -1;
    }
    f = next;
  }
  if (name.empty()) return -1;
  for (int idx : prog_->files[f].modules)
    if (prog_->modules[idx].name == name.back().text) return idx;
  if (report) error("E0303", name.back().range, fmt::format("no module named `{}`", name.back().text));
  return -1;
}

std::optional<ParamsType> Elaborator::resolve_modref(const ast::ModuleRef& r, int file, int module, int depth) {
  if (depth > kMaxModuleDepth) {
    error("E0501", r.range, "stack{…} nests too deeply");
    return std::nullopt;
  }
  if (r.is_stack) {
    if (!r.inner || !r.stack_count) return std::nullopt;
    auto count = eval_size(*r.stack_count, file, module);
    auto inner = resolve_modref(*r.inner, file, module, depth + 1);
    if (!count || !inner) return std::nullopt;
    auto c = count->constant_value();
    if (c && *c <= 0) {
      error("E0404", r.stack_count->range, fmt::format("a stack needs at least one copy, not {}", *c));
      return std::nullopt;
    }
    inner->stack.insert(inner->stack.begin(), *count);
    return inner;
  }
  int m = find_module(r.name, file, true);
  if (m < 0) return std::nullopt;
  ParamsType p;
  p.module = m;
  const ModuleInfo& target = prog_->modules[m];
  if (r.args.size() != target.dims.size()) {
    error("E0405", r.range,
          fmt::format("module `{}` takes {} dimension(s), given {}", target.name, target.dims.size(), r.args.size()),
          target.dims.empty() ? "" : fmt::format("write {}{{{}}}", target.name, fmt::join(target.dims, ", ")));
    return std::nullopt;
  }
  for (const ast::ExprPtr& a : r.args) {
    auto s = eval_size(*a, file, module);
    if (!s) return std::nullopt;
    if (auto c = s->constant_value(); c && *c <= 0) {
      error("E0404", a->range, fmt::format("a dimension must be positive, not {}", *c));
      return std::nullopt;
    }
    p.dims.push_back(*s);
  }
  return p;
}

void Elaborator::resolve_module_members(int mi) {
  const ast::ModuleDecl& decl = *module_decls_[mi];
  int fi = prog_->modules[mi].file;
  std::set<std::string> names;
  for (const ast::ParamDecl& p : decl.params) {
    if (!names.insert(p.name.text).second) {
      error("E0304", p.name.range, fmt::format("`{}` is already a member of module `{}`", p.name.text, decl.name.text));
      continue;
    }
    ParamInfo info;
    info.name = p.name.text;
    info.loc = p.name.range;
    info.numerics_high = p.numerics_high;
    info.frozen = p.frozen;
    if (p.type) {
      auto t = resolve_type(*p.type, fi, mi);
      if (t && t->kind != TypeKind::Tensor) {
        error("E0401", p.type->range, "a parameter must be a real tensor");
        continue;
      } else if (t && (t->tensor.rest || t->tensor.elem != Elem::Real)) {
        error("E0401", p.type->range, "a parameter must be a real tensor of known axes (no `...`)");
        continue;
      } else if (!t) {
        continue;
      }
      info.type = t->tensor;
    }
    if (p.init) {
      const ast::Expr& e = *p.init;
      info.init.loc = e.range;
      const ast::Expr* callee = &e;
      if (e.kind == ast::ExprKind::Call && !e.children.empty()) callee = e.children[0].get();
      if (callee->kind != ast::ExprKind::Name) {
        error("E0401", e.range, "an initializer is a name such as `xavier_uniform` or a call such as `normal(0.02)`");
      } else {
        info.init.kind = callee->name;
        static const std::map<std::string, std::pair<size_t, size_t>> arity = {
            {"zeros", {0, 0}},          {"ones", {0, 0}},           {"normal", {0, 1}},
            {"uniform", {0, 2}},        {"xavier_uniform", {0, 0}}, {"xavier_normal", {0, 0}},
            {"kaiming_uniform", {0, 0}}};
        auto it = arity.find(callee->name);
        if (it == arity.end()) {
          error("E0303", callee->range, fmt::format("unknown initializer `{}`", callee->name),
                "zeros, ones, normal(std), uniform(a, b), xavier_uniform, xavier_normal, kaiming_uniform");
        } else {
          if (&e != callee) {
            for (const ast::Arg& a : e.args) {
              bool is_int = false;
              if (a.kind != ast::Arg::Kind::Positional || !a.value) {
                error("E0405", a.range, "initializer arguments are positional numbers");
                continue;
              }
              if (auto v = eval_const(*a.value, fi, is_int)) info.init.args.push_back(*v);
            }
          }
          if (info.init.args.size() > it->second.second)
            error("E0405", e.range,
                  fmt::format("`{}` takes at most {} argument(s)", callee->name, it->second.second));
          if (info.init.kind == "normal" && info.init.args.empty()) info.init.args = {1.0};
          if (info.init.kind == "uniform" && info.init.args.size() < 2) {
            if (e.args.empty()) info.init.args = {0.0, 1.0};
            else if (e.args.size() < 2) error("E0405", e.range, "uniform(a, b) needs both bounds");
          } else if (info.init.kind == "uniform" && info.init.args.size() == 2 &&
                     !(info.init.args[0] <= info.init.args[1])) {
            error("E0401", e.range, "uniform(a, b) needs a ≤ b");
          }
          if (info.init.kind == "normal" && info.init.args[0] < 0)
            error("E0401", e.range, "normal(std) needs std ≥ 0");
        }
      }
    }
    prog_->modules[mi].params.push_back(info);
  }
  for (const ast::UseDecl& u : decl.uses) {
    if (!names.insert(u.name.text).second) {
      error("E0304", u.name.range, fmt::format("`{}` is already a member of module `{}`", u.name.text, decl.name.text));
      continue;
    }
    auto p = resolve_modref(u.module, fi, mi);
    if (!p) continue;
    prog_->modules[mi].uses.push_back({u.name.text, *p, u.range});
  }
  for (const ast::FnDecl& f : decl.fns)
    if (!names.insert(f.name.text).second)
      error("E0304", f.name.range, fmt::format("`{}` is already a member of module `{}`", f.name.text, decl.name.text));
}

void Elaborator::check_module_cycles() {
  // A module that uses itself, directly or through others, has no finite
  // parameter tree: reject it at the use that closes the cycle.
  size_t n = prog_->modules.size();
  std::vector<int> state(n, 0);  // 0 unvisited, 1 on stack, 2 done
  std::function<bool(int)> visit = [&](int m) -> bool {
    state[m] = 1;
    for (UseInfo& use : prog_->modules[m].uses) {
      int t = use.type.module;
      if (t < 0) continue;
      if (state[t] == 1) {
        error("E0501", use.loc,
              fmt::format("module `{}` contains itself through `{}`", prog_->modules[t].name, use.name),
              "a module's parameters must form a finite tree");
        use.type.module = -1;  // cut the cycle so later stages stay finite
        continue;
      }
      if (state[t] == 0) visit(t);
    }
    state[m] = 2;
    return true;
  };
  for (size_t m = 0; m < n; ++m)
    if (state[m] == 0) visit(static_cast<int>(m));
}

void Elaborator::check_tree_sizes() {
  // Leaves per module, callees first (the use graph is acyclic now); a module
  // over the limit is reported once and cut like a cycle.
  size_t n = prog_->modules.size();
  std::vector<int64_t> leaves(n, -1);
  bool reported = false;  // once: every module above the first one would repeat it
  std::function<int64_t(int)> count = [&](int m) -> int64_t {
    if (leaves[m] >= 0) return leaves[m];
    leaves[m] = 0;  // a cut cycle cannot recur here; this only guards
    int64_t total = static_cast<int64_t>(prog_->modules[m].params.size());
    for (UseInfo& use : prog_->modules[m].uses) {
      if (use.type.module < 0) continue;
      total += count(use.type.module);
      if (total > kMaxParameterTensors) {
        if (!reported)
          error("E0501", use.loc,
                fmt::format("module `{}` would hold more than {} parameter tensors", prog_->modules[m].name,
                            kMaxParameterTensors),
                "a tree of shared sub-modules doubles at every level");
        reported = true;
        use.type.module = -1;  // cut, as a cycle is
        total = kMaxParameterTensors;
        break;
      }
    }
    return leaves[m] = total;
  };
  for (size_t m = 0; m < n; ++m) count(static_cast<int>(m));
}

void Elaborator::check_instance_sizes(const ParamsType& p, SourceRange at) {
  // Sizes with symbols are checked where the symbols are bound; this catches
  // the instances that fix every dimension. Before the module cycles are cut
  // (a param's type is resolved with the members) a tree may be infinite.
  if (!trees_final_) return;
  // The walk of flatten(), visiting each distinct instance once: a tree may
  // hold exponentially many paths through a few modules.
  TypePrinter tp = prog_->printer();
  std::set<std::string> seen;
  std::function<bool(const ParamsType&, const std::string&, int)> walk = [&](const ParamsType& q,
                                                                             const std::string& prefix, int depth) {
    if (q.module < 0 || depth > kMaxModuleDepth) return true;
    if (!seen.insert(fmt::format("{}:{}", q.module, tp.params(q))).second) return true;
    const ModuleInfo& m = prog_->modules[q.module];
    std::map<std::string, Size> binding;
    for (size_t i = 0; i < m.dims.size() && i < q.dims.size(); ++i) binding[m.dims[i]] = q.dims[i];
    bool ok = true;
    for (const ParamInfo& param : m.params) {
      TensorType type;
      for (const Size& s : q.stack) type.axes.push_back({"", s});  // stacked copies: leading axes, outermost first
      for (const Axis& a : param.type.axes) type.axes.push_back({a.name, a.size.substitute(binding, ok)});
      if (exceeds_element_limit(type)) {
        error("E0404", at,
              fmt::format("`{}` gives parameter `{}` the type {}, more than 2^40 elements", tp.params(p),
                          prefix + param.name, tp.tensor(type)));
        return false;
      }
      for (const Axis& a : type.axes) {
        if (!a.size.symbols().empty()) continue;
        auto c = a.size.constant_value();
        if (c && *c > 0) continue;
        error("E0404", at,
              fmt::format("`{}` gives parameter `{}` the size {}, which is not a positive whole number", tp.params(p),
                          prefix + param.name, a.size.str()),
              "choose dimensions that divide exactly and leave every axis at least 1");
        return false;
      }
    }
    for (const UseInfo& use : m.uses) {
      ParamsType inner = use.type;
      for (Size& s : inner.dims) s = s.substitute(binding, ok);
      std::vector<Size> stack = q.stack;
      for (const Size& s : inner.stack) stack.push_back(s.substitute(binding, ok));
      inner.stack = std::move(stack);
      if (!walk(inner, prefix + use.name + ".", depth + 1)) return false;
    }
    return true;
  };
  walk(p, "", 0);
}

namespace {

/// Whether some tensor axis of `t` (inside tuples too) has exactly the size `symbol`.
bool names_an_axis(const Type& t, const Size& symbol, int depth = 0) {
  if (depth > 256) return false;  // types nest at most as deep as the parser allows
  if (t.kind == TypeKind::Tuple) {
    for (const Type& e : t.elements)
      if (names_an_axis(e, symbol, depth + 1)) return true;
    return false;
  }
  if (t.kind != TypeKind::Tensor) return false;
  for (const Axis& a : t.tensor.axes)
    if (a.size == symbol) return true;
  return false;
}

}  // namespace

void Elaborator::declare_function(int fi, int mi, const ast::FnDecl& f) {
  core::Function fn;
  fn.name = mi >= 0 ? prog_->modules[mi].name + "." + f.name.text : f.name.text;
  fn.module = mi;
  fn.file = prog_->files[fi].id;
  fn.loc = f.name.range;
  bool ok = true;
  // A top-level function's size parameters are its `dims`, as a module's
  // dimensions are its functions': each call binds them (Call's `sizes`).
  std::vector<const ast::Ident*> size_params;
  if (mi < 0) {
    const FileInfo& file = prog_->files[fi];
    for (const ast::Ident& p : f.size_params) {
      bool is_dim = std::find(file.dims.begin(), file.dims.end(), p.text) != file.dims.end();
      bool is_const =
          std::any_of(file.consts.begin(), file.consts.end(), [&](const ConstInfo& c) { return c.name == p.text; });
      if (std::find(fn.dims.begin(), fn.dims.end(), p.text) != fn.dims.end()) {
        error("E0304", p.range, fmt::format("size parameter `{}` is declared twice", p.text));
      } else if (is_dim || is_const) {
        // Inside the function the parameter would hide the file's size, and
        // two different sizes would print and compare as one symbol.
        error("E0304", p.range,
              fmt::format("`{}` is already a {} of this file", p.text, is_dim ? "dimension" : "constant"),
              "rename the size parameter");
      } else {
        fn.dims.push_back(p.text);
        size_params.push_back(&p);
        continue;
      }
      ok = false;
    }
  }
  SizeParamsInScope scope(*this, mi < 0 ? fn.dims : std::vector<std::string>{});
  if (mi >= 0) {
    fn.dims = prog_->modules[mi].dims;
    ParamsType self;
    self.module = mi;
    for (const std::string& d : fn.dims) self.dims.push_back(Size::symbol(d));
    fn.args.push_back({1, "θ", Type::make_params(self), f.name.range});
  }
  std::set<std::string> seen;
  for (const ast::FnArg& a : f.args) {
    if (!seen.insert(a.name.text).second)
      error("E0304", a.name.range, fmt::format("argument `{}` is named twice", a.name.text));
    std::optional<Type> t = a.type ? resolve_type(*a.type, fi, mi) : std::nullopt;
    if (!t) ok = false;
    core::FnArg arg;
    arg.id = static_cast<int>(fn.args.size()) + 1;
    arg.name = a.name.text;
    arg.type = t ? *t : Type::real_scalar();
    arg.loc = a.name.range;
    if (a.default_value) {
      bool is_int = false;
      DiagnosticSink quiet;  // the body pass reports a bad default where it is written
      std::swap(quiet, diags_);
      auto v = eval_const(*a.default_value, fi, is_int);
      std::swap(quiet, diags_);
      if (v) {
        arg.has_default = true;
        arg.default_value = *v;
      }
    }
    fn.args.push_back(arg);
  }
  // A call infers each size parameter from an argument axis of exactly that
  // size; one that no argument's axis has could never be bound.
  for (const ast::Ident* p : size_params) {
    if (!ok) break;  // an argument's type is unknown: it may be the one
    bool bound = std::any_of(fn.args.begin(), fn.args.end(),
                             [&](const core::FnArg& a) { return names_an_axis(a.type, Size::symbol(p->text)); });
    if (bound) continue;
    error("E0407", p->range,
          fmt::format("size parameter `{}` of `{}` is not the size of any argument's axis, so no call can infer it",
                      p->text, fn.name),
          fmt::format("give an argument an axis of exactly that size, e.g. `x : ℝ[..., n: {}]`", p->text));
    ok = false;
  }
  if (f.result) {
    auto t = resolve_type(*f.result, fi, mi);
    if (t) fn.result = *t;
    else ok = false;
  }
  fn.checked = ok;
  int index = static_cast<int>(prog_->functions.size());
  prog_->functions.push_back(std::move(fn));
  fn_decls_.push_back(&f);
  fn_files_.push_back(fi);
  if (mi >= 0) {
    prog_->modules[mi].fns[f.name.text] = index;
    prog_->modules[mi].fn_order.push_back(index);
  } else {
    prog_->files[fi].fns.push_back(index);
  }
}

std::optional<double> special_literal(const std::string& name) {
  if (name == "inf") return std::numeric_limits<double>::infinity();
  if (name == "nan") return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

bool exceeds_element_limit(const TensorType& t) {
  int64_t count = 1;
  for (const Axis& a : t.axes) {
    auto c = a.size.constant_value();
    if (!c || *c <= 0) continue;
    if (__builtin_mul_overflow(count, *c, &count) || count > kMaxElements) return true;
  }
  return false;
}

std::optional<Type> Elaborator::resolve_type(const ast::TypeExpr& t, int fi, int mi) {
  switch (t.kind) {
    case ast::TypeKind::Scalar: {
      if (t.elem == "nat") return Type::make_scalar(ScalarKind::Nat);
      if (t.elem == "int") return Type::make_scalar(ScalarKind::Int);
      if (t.elem == "bool") return Type::make_scalar(ScalarKind::Bool);
      return Type::make_scalar(ScalarKind::F64);
    }
    case ast::TypeKind::Key: return Type::make_key();
    case ast::TypeKind::Tuple: {
      std::vector<Type> elems;
      for (const ast::TypePtr& e : t.elements) {
        if (!e) return std::nullopt;
        auto r = resolve_type(*e, fi, mi);
        if (!r) return std::nullopt;
        elems.push_back(*r);
      }
      return Type::make_tuple(std::move(elems));
    }
    case ast::TypeKind::Params: {
      if (t.module_ref) {  // params stack{L}(Block)
        auto p = resolve_modref(*t.module_ref, fi, mi);
        if (!p) return std::nullopt;
        check_instance_sizes(*p, t.range);
        return Type::make_params(*p);
      }
      ast::ModuleRef ref;
      ref.range = t.range;
      ref.name = t.module;
      // The AST keeps module args as expressions; resolve_modref reads them from the ref.
      for (const ast::ExprPtr& a : t.module_args) (void)a;
      int m = find_module(t.module, fi, true);
      if (m < 0) return std::nullopt;
      ParamsType p;
      p.module = m;
      if (!t.module_args.empty()) {
        for (const ast::ExprPtr& a : t.module_args) {
          auto s = a ? eval_size(*a, fi, mi) : std::nullopt;
          if (!s) return std::nullopt;
          p.dims.push_back(*s);
        }
      } else {
        // `params Linear` inside Linear's own functions, or a module without dims.
        for (const std::string& d : prog_->modules[m].dims) p.dims.push_back(Size::symbol(d));
      }
      if (p.dims.size() != prog_->modules[m].dims.size()) {
        error("E0405", t.range, fmt::format("module `{}` takes {} dimension(s)", prog_->modules[m].name,
                                            prog_->modules[m].dims.size()));
        return std::nullopt;
      }
      check_instance_sizes(p, t.range);
      return Type::make_params(p);
    }
    case ast::TypeKind::Tensor: {
      TensorType tt;
      if (t.elem == "i32") tt.elem = Elem::I32;
      else if (t.elem == "i64") tt.elem = Elem::I64;
      else if (t.elem == "bool") tt.elem = Elem::Bool;
      else tt.elem = Elem::Real;
      std::set<std::string> names;
      bool ok = true;
      for (size_t i = 0; i < t.axes.size(); ++i) {
        const ast::AxisExpr& a = t.axes[i];
        if (a.kind == ast::AxisExpr::Kind::Rest) {
          if (i != 0) {
            error("E0401", a.range, "`...` stands for the leading axes: it must come first");
            ok = false;
          }
          tt.rest = true;
          continue;
        }
        Axis axis;
        if (a.name) {
          axis.name = a.name->text;
          if (!names.insert(axis.name).second) {
            error("E0401", a.name->range, fmt::format("axis `{}` appears twice in one type", axis.name));
            ok = false;
          }
        }
        auto s = a.size ? eval_size(*a.size, fi, mi) : std::nullopt;
        if (!s) {
          ok = false;
          continue;
        }
        if (auto c = s->constant_value(); c && *c <= 0) {
          error("E0404", a.range, fmt::format("an axis must have a positive size, not {}", *c));
          ok = false;
        }
        axis.size = *s;
        tt.axes.push_back(axis);
      }
      if (!ok) return std::nullopt;
      if (exceeds_element_limit(tt)) {
        error("E0404", t.range, fmt::format("{} has more than 2^40 elements", prog_->printer().tensor(tt)),
              "no tensor of quire's reference interpreter is that large");
        return std::nullopt;
      }
      return Type::make_tensor(tt);
    }
  }
  return std::nullopt;
}

std::optional<Size> Elaborator::eval_size(const ast::Expr& e, int fi, int mi) {
  bool ok = true;
  switch (e.kind) {
    case ast::ExprKind::Number:
      if (!e.is_integer || e.number < 0) {
        error("E0404", e.range, fmt::format("a size is a natural number, not {}", e.name));
        return std::nullopt;
      }
      return Size::constant(e.integer);  // exact: the double may have rounded
    case ast::ExprKind::Name: {
      if (mi >= 0)
        for (const std::string& d : prog_->modules[mi].dims)
          if (d == e.name) return Size::symbol(d);
      for (const std::string& d : size_params_)
        if (d == e.name) return Size::symbol(d);
      for (const ConstInfo& c : prog_->files[fi].consts)
        if (c.name == e.name) {
          if (c.kind != ScalarKind::Nat && c.kind != ScalarKind::Int) break;
          return Size::constant(static_cast<int64_t>(c.value));
        }
      for (const std::string& d : prog_->files[fi].dims)
        if (d == e.name) return Size::symbol(d);
      error("E0303", e.range, fmt::format("`{}` is not a dimension or a natural-number constant here", e.name),
            mi >= 0 ? fmt::format("module `{}` has dimensions {{{}}}", prog_->modules[mi].name,
                                  fmt::join(prog_->modules[mi].dims, ", "))
                    : "declare it with `dim` or `const NAME : nat = …`");
      return std::nullopt;
    }
    case ast::ExprKind::Member: {
      // alias.CONST
      if (e.children.empty() || e.children[0]->kind != ast::ExprKind::Name) break;
      for (const auto& [alias, idx] : prog_->files[fi].imports)
        if (alias == e.children[0]->name) {
          ast::Expr inner;
          inner.kind = ast::ExprKind::Name;
          inner.name = e.name;
          inner.range = e.range;
          SizeParamsInScope other_file(*this, {});  // `t.N` names the other file's N, never a size parameter
          return eval_size(inner, idx, -1);
        }
      break;
    }
    case ast::ExprKind::Binary: {
      if (e.children.size() != 2) break;
      auto a = eval_size(*e.children[0], fi, mi);
      auto b = eval_size(*e.children[1], fi, mi);
      if (!a || !b) return std::nullopt;
      Size r;
      switch (e.binary) {
        case ast::BinaryOp::Add: r = Size::add(*a, *b, ok); break;
        case ast::BinaryOp::Sub: r = Size::sub(*a, *b, ok); break;
        case ast::BinaryOp::Mul: r = Size::mul(*a, *b, ok); break;
        case ast::BinaryOp::Div:
          if (b->constant_value() == std::optional<int64_t>(0)) {
            error("E0404", e.range, "a size divided by zero");
            return std::nullopt;
          }
          if (a->is_constant() && b->is_constant() && *a->constant_value() % *b->constant_value() != 0) {
            error("E0404", e.range,
                  fmt::format("{} is not a multiple of {}", *a->constant_value(), *b->constant_value()));
            return std::nullopt;
          }
          r = Size::div(*a, *b, ok);
          break;
        default:
          error("E0404", e.range, "a size is built from + - * / only");
          return std::nullopt;
      }
      if (!ok) {
        error("E0404", e.range, "the size overflows 64 bits");
        return std::nullopt;
      }
      return r;
    }
    default: break;
  }
  error("E0404", e.range, "expected a size: a natural number, a dimension, or + - * / of them");
  return std::nullopt;
}

ScalarKind Elaborator::declared_scalar(const ast::TypeExpr& type, const char* what) {
  if (type.kind == ast::TypeKind::Scalar) {
    if (type.elem == "nat") return ScalarKind::Nat;
    if (type.elem == "int") return ScalarKind::Int;
    if (type.elem == "bool") return ScalarKind::Bool;
    return ScalarKind::F64;
  }
  error("E0401", type.range, fmt::format("{} type must be nat, int, f64 or bool", what));
  return ScalarKind::F64;
}

std::optional<double> Elaborator::typed_constant(ScalarKind kind, const ast::Expr& value, int fi,
                                                 const std::string& name) {
  // A literal of the wrong kind is named as such, before eval_const would
  // call it "not a constant".
  const bool is_bool = value.kind == ast::ExprKind::Bool;
  if (value.kind == ast::ExprKind::String || (is_bool && kind != ScalarKind::Bool) ||
      (!is_bool && kind == ScalarKind::Bool && value.kind != ast::ExprKind::Name)) {
    const char* found = value.kind == ast::ExprKind::String ? "a string" : is_bool ? "a boolean" : "not a boolean";
    error("E0401", value.range, fmt::format("{} is declared {}, but its value is {}", name, scalar_name(kind), found));
    return std::nullopt;
  }
  bool is_int = false;
  std::optional<double> v = eval_const(value, fi, is_int);
  if (!v) return std::nullopt;
  if ((kind == ScalarKind::Nat || kind == ScalarKind::Int) && (*v != std::floor(*v) || !is_int)) {
    error("E0401", value.range,
          fmt::format("{} is declared {} but its value {} is not an integer", name, scalar_name(kind), *v));
    return std::nullopt;
  }
  if (kind == ScalarKind::Nat && *v < 0) {
    error("E0401", value.range, fmt::format("{} is declared nat but its value {} is negative", name, *v));
    return std::nullopt;
  }
  return v;
}

std::optional<double> Elaborator::eval_const(const ast::Expr& e, int fi, bool& is_integer, int depth) {
  if (depth > 200) {
    error("E0202", e.range, "constant expression nested too deeply");
    return std::nullopt;
  }
  switch (e.kind) {
    case ast::ExprKind::Number: is_integer = e.is_integer; return e.number;
    case ast::ExprKind::Bool: is_integer = true; return e.boolean ? 1.0 : 0.0;
    case ast::ExprKind::Name:
      for (const ConstInfo& c : prog_->files[fi].consts)
        if (c.name == e.name) {
          is_integer = c.kind != ScalarKind::F64;
          return c.value;
        }
      if (std::optional<double> v = special_literal(e.name)) return *v;
      error("E0303", e.range, fmt::format("`{}` is not a constant", e.name), "a constant is declared with `const`");
      return std::nullopt;
    case ast::ExprKind::Unary: {
      if (e.children.empty()) return std::nullopt;
      auto v = eval_const(*e.children[0], fi, is_integer, depth + 1);
      if (!v) return std::nullopt;
      return -*v;
    }
    case ast::ExprKind::Binary: {
      if (e.children.size() != 2) return std::nullopt;
      bool ia = false, ib = false;
      auto a = eval_const(*e.children[0], fi, ia, depth + 1);
      auto b = eval_const(*e.children[1], fi, ib, depth + 1);
      if (!a || !b) return std::nullopt;
      is_integer = ia && ib;
      double r = 0;
      switch (e.binary) {
        case ast::BinaryOp::Add: r = *a + *b; break;
        case ast::BinaryOp::Sub: r = *a - *b; break;
        case ast::BinaryOp::Mul: r = *a * *b; break;
        case ast::BinaryOp::Div:
          if (*b == 0) {
            error("E0701", e.range, "division by zero in a constant");
            return std::nullopt;
          }
          r = *a / *b;
          if (is_integer) r = std::trunc(r);
          break;
        case ast::BinaryOp::Pow:
          r = std::pow(*a, *b);
          if (r != std::trunc(r)) is_integer = false;  // 2 ^ -1
          break;
        default: error("E0701", e.range, "this operation is not allowed in a constant"); return std::nullopt;
      }
      if (!std::isfinite(r) || (is_integer && std::fabs(r) > 9007199254740992.0)) {
        error("E0701", e.range, "the constant overflows");
        return std::nullopt;
      }
      return r;
    }
    case ast::ExprKind::Member:
      if (!e.children.empty() && e.children[0]->kind == ast::ExprKind::Name)
        for (const auto& [alias, idx] : prog_->files[fi].imports)
          if (alias == e.children[0]->name) {
            ast::Expr inner;
            inner.kind = ast::ExprKind::Name;
            inner.name = e.name;
            inner.range = e.range;
            return eval_const(inner, idx, is_integer, depth + 1);
          }
      break;
    default: break;
  }
  error("E0701", e.range, "expected a constant: a number, a `const`, or arithmetic of them");
  return std::nullopt;
}

namespace {

std::string print_expr(const ast::Expr& e, int depth = 0) {
  if (depth > 50) return "…";
  switch (e.kind) {
    case ast::ExprKind::Number: return e.name.empty() ? fmt::format("{}", e.number) : e.name;
    case ast::ExprKind::Bool: return e.boolean ? "true" : "false";
    case ast::ExprKind::String: return fmt::format("\"{}\"", e.name);
    case ast::ExprKind::Name: return e.name;
    case ast::ExprKind::Member: return e.children.empty() ? e.name : print_expr(*e.children[0], depth + 1) + "." + e.name;
    case ast::ExprKind::Unary: return e.children.empty() ? "-" : "-" + print_expr(*e.children[0], depth + 1);
    case ast::ExprKind::Binary:
      if (e.children.size() != 2) return "?";
      return fmt::format("{} {} {}", print_expr(*e.children[0], depth + 1), ast::binary_op_spelling(e.binary),
                         print_expr(*e.children[1], depth + 1));
    case ast::ExprKind::Call: {
      std::vector<std::string> args;
      for (const ast::Arg& a : e.args) {
        std::string v = a.value ? print_expr(*a.value, depth + 1) : "";
        switch (a.kind) {
          case ast::Arg::Kind::Positional: args.push_back(v); break;
          case ast::Arg::Kind::Axis: args.push_back("axis " + (a.name ? a.name->text : "")); break;
          case ast::Arg::Kind::Keyword: args.push_back((a.name ? a.name->text : "") + " = " + v); break;
          case ast::Arg::Kind::AxisSize: args.push_back((a.name ? a.name->text : "") + ": " + v); break;
          case ast::Arg::Kind::Rename: args.push_back((a.name ? a.name->text : "") + " → " + v); break;
        }
      }
      return fmt::format("{}({})", e.children.empty() ? "?" : print_expr(*e.children[0], depth + 1), fmt::join(args, ", "));
    }
    default: return "…";
  }
}

FieldInfo field_info(Elaborator& el, const ast::Field& f, int fi) {
  FieldInfo info;
  info.key = f.key.text;
  info.loc = f.range;
  if (f.type) info.type = f.type->kind == ast::TypeKind::Scalar ? f.type->elem : "…";
  if (!f.value) return info;
  info.value = print_expr(*f.value);
  if (f.type) {
    // A declared type is a promise the value must keep, as a `const`'s is.
    const ScalarKind kind = el.declared_scalar(*f.type, "a field's");
    if (auto v = el.typed_constant(kind, *f.value, fi, fmt::format("field `{}`", info.key))) {
      info.number = *v;
      info.is_number = kind != ScalarKind::Bool;
    }
  } else if (f.value->kind == ast::ExprKind::Number ||
             (f.value->kind == ast::ExprKind::Unary && !f.value->children.empty() &&
              f.value->children[0]->kind == ast::ExprKind::Number)) {
    bool is_int = false;
    if (auto v = el.eval_const(*f.value, fi, is_int)) {
      info.number = *v;
      info.is_number = true;
    }
  }
  return info;
}

}  // namespace

void Elaborator::elaborate_optimizer(int fi, const ast::OptimizerDecl& o) {
  OptimizerInfo info;
  info.name = o.name.text;
  info.loc = o.name.range;
  for (const OptimizerInfo& other : prog_->optimizers)
    if (other.name == info.name) error("E0304", o.name.range, fmt::format("optimizer `{}` is defined twice", info.name));
  std::set<std::string> keys;
  for (const ast::Field& f : o.fields) {
    if (!keys.insert(f.key.text).second)
      error("E0304", f.key.range, fmt::format("field `{}` is set twice", f.key.text));
    info.fields.push_back(field_info(*this, f, fi));
  }
  prog_->files[fi].optimizers.push_back(static_cast<int>(prog_->optimizers.size()));
  prog_->optimizers.push_back(info);
}

void Elaborator::elaborate_training(int fi, const ast::TrainingDecl& t) {
  FileInfo& file = prog_->files[fi];
  if (file.training) {
    error("E0601", t.range, "a file has at most one `training run`");
    return;
  }
  TrainingInfo info;
  info.loc = t.range;
  bool have_model = false, have_objective = false, have_optimizer = false;
  for (const ast::Field& f : t.fields) {
    const std::string& key = f.key.text;
    if (!f.value) continue;
    const ast::Expr& v = *f.value;
    if (key == "model") {
      have_model = true;
      std::vector<ast::Ident> name;
      const ast::Expr* cur = &v;
      std::vector<const ast::Expr*> parts;
      while (cur->kind == ast::ExprKind::Member && !cur->children.empty()) {
        parts.push_back(cur);
        cur = cur->children[0].get();
      }
      if (cur->kind != ast::ExprKind::Name) {
        error("E0601", v.range, "`model` names a module, e.g. `model = t.Tower`");
        continue;
      }
      name.push_back({cur->name, cur->range});
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) name.push_back({(*it)->name, (*it)->range});
      info.model = find_module(name, fi, true);
      if (info.model >= 0 && !prog_->modules[info.model].dims.empty())
        error("E0601", v.range,
              fmt::format("the model `{}` has dimensions; train a module without them (one that fixes its sizes)",
                          prog_->modules[info.model].name));
    } else if (key == "objective") {
      have_objective = true;
      if (v.kind != ast::ExprKind::Name) {
        error("E0601", v.range, "`objective` names a function of this file");
        continue;
      }
      for (int idx : file.fns)
        if (prog_->functions[idx].name == v.name) info.objective = idx;
      if (info.objective < 0) error("E0303", v.range, fmt::format("no function named `{}` in this file", v.name));
    } else if (key == "optimizer") {
      have_optimizer = true;
      if (v.kind != ast::ExprKind::Name) {
        error("E0601", v.range, "`optimizer` names an optimizer block");
        continue;
      }
      for (size_t i = 0; i < prog_->optimizers.size(); ++i)
        if (prog_->optimizers[i].name == v.name) info.optimizer = static_cast<int>(i);
      if (info.optimizer < 0) error("E0303", v.range, fmt::format("no optimizer named `{}`", v.name));
    } else if (key == "epochs") {
      bool is_int = false;
      auto e = eval_const(v, fi, is_int);
      if (e && (!is_int || *e < 1)) error("E0601", v.range, "`epochs` is a positive natural number");
      else if (e) info.epochs = static_cast<int64_t>(*e);
    } else {
      info.other_fields.push_back(field_info(*this, f, fi));
    }
  }
  if (!have_model) error("E0601", t.range, "the training run names no `model`");
  if (!have_objective) error("E0601", t.range, "the training run names no `objective`");
  if (!have_optimizer) error("E0601", t.range, "the training run names no `optimizer`");
  for (const ast::PipelineStage& s : t.data) {
    PipelineStageInfo stage;
    stage.name = s.name.text;
    stage.path = s.path;
    if (stage.name != "stream" && stage.name != "shuffle" && stage.name != "batch") {
      error("E0601", s.name.range, fmt::format("unknown data stage `{}`", stage.name), "stream, shuffle, batch");
      continue;
    }
    for (const ast::Arg& a : s.args) {
      bool is_int = false;
      if (a.kind != ast::Arg::Kind::Keyword || !a.name || !a.value) {
        error("E0601", a.range, fmt::format("`{}` takes `name = value` arguments", stage.name));
        continue;
      }
      auto value = eval_const(*a.value, fi, is_int);
      if (!value) continue;
      if (!is_int || *value < 0) {
        error("E0601", a.range, fmt::format("`{}` must be a natural number", a.name->text));
        continue;
      }
      stage.args.push_back({a.name->text, *value});
      if (stage.name == "batch") {
        if (std::find(file.dims.begin(), file.dims.end(), a.name->text) == file.dims.end())
          error("E0601", a.name->range, fmt::format("`batch({} = …)` binds a dimension, but `{}` is not a `dim` of this file",
                                                    a.name->text, a.name->text));
        else if (*value < 1) error("E0601", a.range, "a batch holds at least one sample");
        info.batch_dim = a.name->text;
        info.batch_size = static_cast<int64_t>(*value);
      } else if (stage.name == "shuffle" && a.name->text != "seed") {
        error("E0601", a.name->range, "shuffle takes `seed = N`");
      }
    }
    info.data.push_back(stage);
  }
  if (t.data.empty()) error("E0601", t.range, "the training run has no `data = stream \"file\" |> …` line");
  else if (t.data.front().name.text != "stream")
    error("E0601", t.data.front().range, "data starts with `stream \"file.npy\"`");
  if (t.checkpoint) {
    bool is_int = false;
    auto every = t.checkpoint->every ? eval_const(*t.checkpoint->every, fi, is_int) : std::nullopt;
    if (every && (!is_int || *every < 1)) error("E0601", t.checkpoint->range, "checkpoint every N: N ≥ 1");
    else if (every) info.checkpoint_every = static_cast<int64_t>(*every);
    info.checkpoint_unit = t.checkpoint->unit;
    if (info.checkpoint_unit != "steps" && info.checkpoint_unit != "epochs")
      error("E0601", t.checkpoint->range, "checkpoint every N steps (or epochs)");
    info.checkpoint_dir = t.checkpoint->dir;
  }
  if (t.evaluate) {
    const ast::EvaluateClause& c = *t.evaluate;
    bool is_int = false;
    auto every = c.every ? eval_const(*c.every, fi, is_int) : std::nullopt;
    if (every && (!is_int || *every < 1)) error("E0601", c.range, "evaluate … every N steps: N ≥ 1");
    else if (every) info.evaluate_every = static_cast<int64_t>(*every);
    if (c.unit != "steps") error("E0601", c.range, "evaluate … every N steps");
    info.evaluate_path = c.path;
    for (int idx : file.fns)
      if (prog_->functions[idx].name == c.function.text) info.evaluate = idx;
    if (info.evaluate < 0)
      error("E0303", c.function.range, fmt::format("no function named `{}` in this file", c.function.text));
  }
  // The objective's first argument is the model's parameters.
  if (info.objective >= 0 && info.model >= 0) {
    const core::Function& obj = prog_->functions[info.objective];
    if (obj.args.empty() || obj.args[0].type.kind != TypeKind::Params || obj.args[0].type.params.module != info.model)
      error("E0601", fn_decls_[info.objective]->name.range,
            fmt::format("the objective `{}` must take `params {}` as its first argument", obj.name,
                        prog_->modules[info.model].name));
    else if (obj.args.size() < 2 || obj.args.size() > 3 ||
             (obj.args.size() == 3 && obj.args[2].type.kind != TypeKind::Key))
      error("E0601", fn_decls_[info.objective]->name.range,
            fmt::format("the objective `{}` takes the parameters, one batch and optionally a key", obj.name),
            "`fn loss(θ : params M, batch : …, k : key)`: the trainer passes each step its own key");
    // The evaluation takes what the objective takes and returns a scalar.
    if (info.evaluate >= 0) {
      const core::Function& ev = prog_->functions[info.evaluate];
      bool same = ev.args.size() == obj.args.size() && ev.result == Type::real_scalar();
      for (size_t i = 0; same && i < ev.args.size(); ++i) same = ev.args[i].type == obj.args[i].type;
      if (!same)
        error("E0601", t.evaluate->function.range,
              fmt::format("`{}` is evaluated on held-out batches: it takes the objective `{}`'s arguments and returns "
                          "ℝ[]",
                          ev.name, obj.name));
    }
  }
  file.training = info;
}

int Elaborator::request_gradient(int target, int wrt, bool with_value, SourceRange at) {
  for (size_t k = 0; k < gradients_.size(); ++k)
    if (gradients_[k].target == target && gradients_[k].wrt == wrt && gradients_[k].with_value == with_value)
      return first_gradient_ + static_cast<int>(k);
  gradients_.push_back({target, wrt, with_value, at});
  return first_gradient_ + static_cast<int>(gradients_.size()) - 1;
}

void Elaborator::declare_gradients() {
  for (const GradientRequest& req : gradients_) {
    const core::Function& t = prog_->functions.at(req.target);
    core::Function g;
    const core::FnArg& wrt = t.args.at(req.wrt);
    g.name = fmt::format("{}.{}{}", t.name, req.with_value ? "value_and_grad" : "grad",
                         req.wrt == 0 ? "" : fmt::format("[{}]", wrt.name));
    g.module = t.module;
    g.dims = t.dims;
    g.args = t.args;
    g.result = req.with_value ? Type::make_tuple({t.result, wrt.type}) : wrt.type;
    g.file = t.file;
    g.loc = req.at;
    g.checked = false;  // until build_gradients gives it its body
    core::Instr call;
    call.op = core::Op::Call;
    call.id = static_cast<int>(t.args.size()) + 1;
    call.type = t.result;
    for (const core::FnArg& a : t.args) call.args.push_back(a.id);
    call.callee = req.target;
    for (const std::string& d : t.dims) call.sizes.push_back(Size::symbol(d));
    call.loc = req.at;
    g.body.push_back(std::move(call));
    g.result_value = g.body.back().id;
    prog_->functions.push_back(std::move(g));
    fn_decls_.push_back(nullptr);
    fn_files_.push_back(fn_files_.at(req.target));
  }
}

void Elaborator::build_gradients() {
  // A function that takes a gradient cannot itself be differentiated: that
  // would differentiate a reverse sweep (second derivatives), not supported.
  auto reaches_gradient = [&](int root) {
    std::vector<bool> seen(prog_->functions.size(), false);
    std::function<bool(int)> visit = [&](int f) {
      if (f < 0 || seen[f]) return false;
      seen[f] = true;
      if (f >= first_gradient_) return true;
      for (const core::Instr& in : prog_->functions[f].body)
        if ((in.op == core::Op::Call || in.op == core::Op::Fold) && visit(in.callee)) return true;
      return false;
    };
    return visit(root);
  };
  // A function that failed to elaborate has its error reported and no body to
  // differentiate: a gradient reaching one is left unbuilt (and unchecked).
  auto reaches_unchecked = [&](int root) {
    std::vector<bool> seen(prog_->functions.size(), false);
    std::function<bool(int)> visit = [&](int f) {
      if (f < 0 || seen[f]) return false;
      seen[f] = true;
      if (!prog_->functions[f].checked) return true;
      for (const core::Instr& in : prog_->functions[f].body)
        if ((in.op == core::Op::Call || in.op == core::Op::Fold) && visit(in.callee)) return true;
      return false;
    };
    return visit(root);
  };
  for (size_t k = 0; k < gradients_.size(); ++k) {
    const GradientRequest req = gradients_[k];
    const int gi = first_gradient_ + static_cast<int>(k);
    if (!prog_->functions.at(req.target).checked) continue;
    if (reaches_gradient(req.target)) {
      error("E0504", req.at,
            fmt::format("`{}` takes a gradient itself, so it cannot be differentiated", prog_->functions[req.target].name),
            "quire computes first derivatives only");
      continue;
    }
    if (reaches_unchecked(req.target)) continue;
    const int v = grad::vjp(*prog_, req.target, {req.wrt});
    core::Function& g = prog_->functions.at(gi);
    const core::Function& vf = prog_->functions.at(v);
    g.body.clear();
    auto emit = [&](core::Instr in) {
      in.id = g.value_count() + 1;
      in.loc = req.at;
      g.body.push_back(std::move(in));
      return g.body.back().id;
    };
    core::Instr one;
    one.op = core::Op::Const;
    one.type = Type::real_scalar();
    one.set(core::attr::Literal{1.0});
    int ct = emit(one);
    core::Instr call;
    call.op = core::Op::Call;
    call.type = vf.result;
    for (const core::FnArg& a : g.args) call.args.push_back(a.id);
    call.args.push_back(ct);
    call.callee = v;
    for (const std::string& d : g.dims) call.sizes.push_back(Size::symbol(d));
    int r = emit(call);
    auto get = [&](int k2) {
      core::Instr in;
      in.op = core::Op::TupleGet;
      in.type = vf.result.elements.at(static_cast<size_t>(k2));
      in.args = {r};
      in.set(core::attr::Element{k2});
      return emit(in);
    };
    int grad_value = get(1);
    if (req.with_value) {
      int value = get(0);
      core::Instr t;
      t.op = core::Op::MakeTuple;
      t.type = g.result;
      t.args = {value, grad_value};
      g.result_value = emit(t);
    } else {
      g.result_value = grad_value;
    }
    g.checked = true;
  }
  // The vjps appended for the gradients have no declaration of their own.
  fn_decls_.resize(prog_->functions.size(), nullptr);
  while (fn_files_.size() < prog_->functions.size()) {
    int file = 0;
    for (size_t i = 0; i < prog_->files.size(); ++i)
      if (prog_->files[i].id == prog_->functions[fn_files_.size()].file) file = static_cast<int>(i);
    fn_files_.push_back(file);
  }
}

void Elaborator::check_call_cycles() {
  size_t n = prog_->functions.size();
  std::vector<int> state(n, 0);
  std::function<void(int)> visit = [&](int f) {
    state[f] = 1;
    for (core::Instr& in : prog_->functions[f].body) {
      if (in.op != core::Op::Call && in.op != core::Op::Fold) continue;
      int c = in.callee;
      if (c < 0) continue;
      if (state[c] == 1) {
        error("E0502", in.loc,
              fmt::format("`{}` calls `{}`, which leads back to it: recursion is not allowed",
                          prog_->functions[f].name, prog_->functions[c].name),
              "quire programs are loop-free: use stack{L}(Module) for repetition");
        prog_->functions[f].checked = false;
        in.callee = -1;  // later stages must stay finite
        continue;
      }
      if (state[c] == 0) visit(c);
    }
    state[f] = 2;
  };
  for (size_t f = 0; f < n; ++f)
    if (state[f] == 0) visit(static_cast<int>(f));
}

void Elaborator::compute_effects_and_regularity() {
  // Functions are visited callees first (a post-order of the now-acyclic call graph).
  size_t n = prog_->functions.size();
  std::vector<int> order, state(n, 0);
  std::function<void(int)> visit = [&](int f) {
    state[f] = 1;
    for (const core::Instr& in : prog_->functions[f].body)
      if ((in.op == core::Op::Call || in.op == core::Op::Fold) && in.callee >= 0 && state[in.callee] == 0)
        visit(in.callee);
    order.push_back(f);
  };
  for (size_t f = 0; f < n; ++f)
    if (state[f] == 0) visit(static_cast<int>(f));
  for (int fidx : order) {
    core::Function& fn = prog_->functions[fidx];
    size_t nargs = fn.args.size();
    // reg[v][a]: the regularity of value v in argument a (Smooth when v does not depend on a).
    std::vector<std::vector<core::Regularity>> reg(fn.value_count() + 1,
                                                   std::vector<core::Regularity>(nargs, core::Regularity::Smooth));
    std::vector<std::vector<bool>> dep(fn.value_count() + 1, std::vector<bool>(nargs, false));
    for (size_t a = 0; a < nargs; ++a) dep[a + 1][a] = true;
    for (const core::Instr& in : fn.body) {
      if (in.op == core::Op::Uniform || in.op == core::Op::Normal || in.op == core::Op::Bernoulli ||
          in.op == core::Op::KeySplit)
        fn.uses_rand = true;
      const core::Function* callee =
          (in.op == core::Op::Call || in.op == core::Op::Fold) && in.callee >= 0 ? &prog_->functions[in.callee] : nullptr;
      if (callee && callee->uses_rand) fn.uses_rand = true;
      for (size_t k = 0; k < in.args.size(); ++k) {
        int src = in.args[k];
        if (src <= 0 || src > fn.value_count()) continue;
        core::Regularity op_reg = core::op_info(in.op).regularity;
        if (in.op == core::Op::Where && k > 0) op_reg = core::Regularity::Smooth;  // jumps only in the condition
        if ((in.op == core::Op::Gather || in.op == core::Op::Pick) && k == 0) op_reg = core::Regularity::Smooth;
        if (in.op == core::Op::Cast && in.type.is_tensor() && in.type.tensor.elem != Elem::Real)
          op_reg = core::Regularity::Discontinuous;  // to an integer or a boolean: a step
        if (callee) {
          // Through a call: the callee's regularity in the matching argument.
          op_reg = k < callee->arg_regularity.size() ? callee->arg_regularity[k] : core::Regularity::Smooth;
        }
        for (size_t a = 0; a < nargs; ++a) {
          if (!dep[src][a]) continue;
          dep[in.id][a] = true;
          reg[in.id][a] = std::min({reg[in.id][a], reg[src][a], op_reg});
        }
      }
    }
    fn.arg_regularity.assign(nargs, core::Regularity::Smooth);
    int r = fn.result_value;
    if (r > 0 && r <= fn.value_count())
      for (size_t a = 0; a < nargs; ++a) fn.arg_regularity[a] = reg[r][a];
  }
}

}  // namespace quire::elab
