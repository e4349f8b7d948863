#include "quire/core/program.h"

namespace quire::elab {

TypePrinter Program::printer() const {
  TypePrinter p;
  for (const ModuleInfo& m : modules) p.module_names.push_back(m.name);
  return p;
}

int Program::find_function(const std::string& name) const {
  // The main file's functions first: two imported files may both define `loss`.
  FileId main_id = files.empty() ? 0 : files[main_file].id;
  int found = -1;
  for (size_t i = 0; i < functions.size(); ++i)
    if (functions[i].name == name) {
      if (functions[i].file == main_id) return static_cast<int>(i);
      if (found < 0) found = static_cast<int>(i);
    }
  return found;
}

namespace {

std::map<std::string, Size> dim_binding(const ModuleInfo& m, const ParamsType& p) {
  std::map<std::string, Size> binding;
  for (size_t i = 0; i < m.dims.size() && i < p.dims.size(); ++i) binding[m.dims[i]] = p.dims[i];
  return binding;
}

void flatten_into(const Program& prog, const ParamsType& p, const std::string& prefix, std::vector<Size> stack,
                  std::vector<std::pair<std::string, TensorType>>* types, std::vector<const ParamInfo*>* decls,
                  int depth) {
  if (p.module < 0 || depth > 64) return;  // elaboration rejects deeper (recursive) nesting
  const ModuleInfo& m = prog.modules[p.module];
  stack.insert(stack.end(), p.stack.begin(), p.stack.end());
  auto binding = dim_binding(m, p);
  for (const ParamInfo& param : m.params) {
    if (types) {
      TensorType t = param.type;
      bool ok = true;
      for (Axis& a : t.axes) a.size = a.size.substitute(binding, ok);
      std::vector<Axis> axes;
      for (const Size& s : stack) axes.push_back({"", s});
      axes.insert(axes.end(), t.axes.begin(), t.axes.end());
      t.axes = std::move(axes);
      types->push_back({prefix + param.name, t});
    }
    if (decls) decls->push_back(&param);
  }
  for (const UseInfo& use : m.uses) {
    ParamsType inner = use.type;
    bool ok = true;
    for (Size& s : inner.dims) s = s.substitute(binding, ok);
    for (Size& s : inner.stack) s = s.substitute(binding, ok);
    flatten_into(prog, inner, prefix + use.name + ".", stack, types, decls, depth + 1);
  }
}

}  // namespace

std::vector<std::pair<std::string, TensorType>> Program::flatten(const ParamsType& p) const {
  std::vector<std::pair<std::string, TensorType>> out;
  flatten_into(*this, p, "", {}, &out, nullptr, 0);
  return out;
}

std::vector<const ParamInfo*> Program::flatten_decls(const ParamsType& p) const {
  std::vector<const ParamInfo*> out;
  flatten_into(*this, p, "", {}, nullptr, &out, 0);
  return out;
}

bool Program::in_prelude(int function) const {
  FileId id = functions[function].file;
  for (const FileInfo& f : files)
    if (f.id == id) return f.prelude;
  return false;
}

std::vector<int> Program::shown_functions() const {
  size_t n = functions.size();
  std::vector<bool> reached(n, false);
  std::vector<int> work;
  for (size_t f = 0; f < n; ++f)
    if (!in_prelude(static_cast<int>(f))) work.push_back(static_cast<int>(f));
  std::vector<int> users = work;
  while (!work.empty()) {
    int f = work.back();
    work.pop_back();
    for (const core::Instr& in : functions[f].body)
      if ((in.op == core::Op::Call || in.op == core::Op::Fold) && in.callee >= 0 && !reached[in.callee]) {
        reached[in.callee] = true;
        work.push_back(in.callee);
      }
  }
  std::vector<int> out;
  for (size_t f = 0; f < n; ++f)
    if (reached[f] && in_prelude(static_cast<int>(f))) out.push_back(static_cast<int>(f));
  out.insert(out.end(), users.begin(), users.end());
  return out;
}

const TrainingInfo* Program::training() const {
  if (files.empty() || !files[main_file].training) return nullptr;
  return &*files[main_file].training;
}

}  // namespace quire::elab
