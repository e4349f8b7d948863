#include "quire/interp/params.h"

#include <fmt/format.h>

#include "quire/interp/inputs.h"
#include "quire/interp/interpreter.h"
#include "quire/io/safetensors.h"
#include "quire/runtime/init.h"

namespace quire::interp {

namespace {

runtime::Shape shape_of(const elab::TensorType& t, const std::map<std::string, int64_t>& dims, const std::string& path) {
  runtime::Shape s;
  for (const elab::Axis& a : t.axes) {
    auto v = a.size.evaluate(dims);
    if (!v) {
      for (const std::string& sym : a.size.symbols())
        if (!dims.count(sym))
          throw EvalError(fmt::format("parameter `{}`: size {} is not bound (give --dim)", path, a.size.str()));
      throw EvalError(fmt::format("parameter `{}`: size {} is not a whole number", path, a.size.str()));
    }
    if (*v < 1) throw EvalError(fmt::format("parameter `{}`: size {} is {}, not positive", path, a.size.str(), *v));
    s.push_back(*v);
  }
  check_element_count(t, s, dims);
  return s;
}

}  // namespace

ParamMap init_params(const elab::Program& prog, const elab::ParamsType& model, uint64_t seed,
                     const std::map<std::string, int64_t>& dims) {
  auto types = prog.flatten(model);
  auto decls = prog.flatten_decls(model);
  runtime::Key root = runtime::key_from_seed(seed);
  ParamMap out;
  for (size_t i = 0; i < types.size(); ++i) {
    const auto& [path, type] = types[i];
    const elab::ParamInfo& decl = *decls[i];
    runtime::Shape shape = shape_of(type, dims, path);
    auto spec = runtime::parse_init_name(decl.init.kind);
    if (!spec) throw EvalError(fmt::format("parameter `{}`: unknown initializer `{}`", path, decl.init.kind));
    if (!decl.init.args.empty()) spec->a = decl.init.args[0];
    if (decl.init.args.size() > 1) spec->b = decl.init.args[1];
    int stacked = static_cast<int>(type.axes.size() - decl.type.axes.size());
    out.emplace(path, runtime::initialize(*spec, runtime::derive_key(root, path), shape, stacked));
  }
  return out;
}

ParamMap load_params(const std::string& path, const elab::Program& prog, const elab::ParamsType& model,
                     const std::map<std::string, int64_t>& dims) {
  io::NamedTensors file = io::read_safetensors(path);
  std::map<std::string, runtime::Tensor> given;
  for (auto& [name, t] : file) given.emplace(name, std::move(t));
  ParamMap out;
  for (const auto& [p, type] : prog.flatten(model)) {
    auto it = given.find(p);
    if (it == given.end()) throw io::IoError(path, fmt::format("parameter `{}` is missing", p));
    runtime::Shape want = shape_of(type, dims, p);
    if (it->second.shape != want)
      throw io::IoError(path, fmt::format("parameter `{}` has shape {}, the model declares {}", p,
                                          runtime::shape_string(it->second.shape), runtime::shape_string(want)));
    if (it->second.kind != runtime::ElemKind::Real)
      throw io::IoError(path, fmt::format("parameter `{}` holds {} values, not reals", p,
                                          runtime::elem_kind_name(it->second.kind)));
    out.emplace(p, std::move(it->second));
    given.erase(it);
  }
  if (!given.empty())
    throw io::IoError(path, fmt::format("tensor `{}` is not a parameter of `{}`", given.begin()->first,
                                        prog.modules[model.module].name));
  return out;
}

void save_params(const std::string& path, const elab::Program& prog, const elab::ParamsType& model,
                 const ParamMap& params, const io::StoreTypes& types) {
  io::NamedTensors out;
  for (const auto& [p, type] : prog.flatten(model)) out.emplace_back(p, params.at(p));
  io::write_safetensors(path, out, {{"format", "quire"}, {"model", prog.modules[model.module].name}}, types);
}

}  // namespace quire::interp
