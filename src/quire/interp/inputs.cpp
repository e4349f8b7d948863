#include "quire/interp/inputs.h"

#include <fmt/format.h>

#include <set>

#include "quire/interp/core_geometry.h"
#include "quire/interp/interpreter.h"
#include "quire/io/npy.h"
#include "quire/runtime/random.h"

namespace quire::interp {

namespace {

struct InputSource {
  std::optional<std::string> path;
  std::map<std::string, runtime::Tensor> entries;
  std::set<std::string> used;
  runtime::Key root;
};

Value make_input(const elab::Program& prog, const elab::Type& type, const std::string& path, InputSource& src,
                 const std::map<std::string, int64_t>& dims, int depth) {
  using elab::TypeKind;
  if (depth > 64) throw EvalError(fmt::format("argument `{}` nests too deeply", path));
  switch (type.kind) {
    case TypeKind::Tuple: {
      std::vector<Value> elems;
      for (size_t i = 0; i < type.elements.size(); ++i)
        elems.push_back(make_input(prog, type.elements[i], fmt::format("{}.{}", path, i), src, dims, depth + 1));
      return Value::of_tuple(std::move(elems));
    }
    case TypeKind::Key: return Value::of_key(runtime::derive_key(src.root, "input:" + path));
    case TypeKind::Params:
      throw EvalError(fmt::format("argument `{}`: only the first argument may be a parameter tree", path));
    case TypeKind::Scalar: {
      if (src.path) {
        auto it = src.entries.find(path);
        if (it != src.entries.end() && it->second.size() == 1) {
          src.used.insert(path);
          const runtime::Tensor& t = it->second;
          return Value::of_host(t.is_real() ? t.reals[0] : static_cast<double>(t.ints[0]));
        }
      }
      throw EvalError(fmt::format("argument `{}` is a host scalar: give it in --inputs as a 0-d array", path));
    }
    case TypeKind::Tensor: {
      if (type.tensor.rest)
        throw EvalError(fmt::format("argument `{}` has `...` axes: an entry needs known shapes", path));
      runtime::Shape shape;
      for (const elab::Axis& a : type.tensor.axes) {
        auto v = a.size.evaluate(dims);
        if (!v) {
          for (const std::string& sym : a.size.symbols())
            if (!dims.count(sym))
              throw EvalError(fmt::format("argument `{}`: give the dimension {} with --dim {}=N", path, sym, sym));
          throw EvalError(fmt::format("argument `{}`: its size {} is not a whole number", path, a.size.str()));
        }
        if (*v < 1)
          throw EvalError(fmt::format("argument `{}`: its size {} is {}, not positive", path, a.size.str(), *v));
        shape.push_back(*v);
      }
      check_element_count(type.tensor, shape, dims);
      if (src.path) {
        auto it = src.entries.find(path);
        if (it == src.entries.end())
          throw io::IoError(*src.path, fmt::format("no array `{}` for argument `{}` (expected shape {})", path, path,
                                                   runtime::shape_string(shape)));
        src.used.insert(path);
        runtime::Tensor t = it->second;
        if (t.shape != shape)
          throw io::IoError(*src.path, fmt::format("array `{}` has shape {}, the argument is {} = shape {}", path,
                                                   runtime::shape_string(t.shape), prog.printer().tensor(type.tensor),
                                                   runtime::shape_string(shape)));
        bool want_int = type.tensor.elem == elab::Elem::I32 || type.tensor.elem == elab::Elem::I64;
        if (type.tensor.elem == elab::Elem::Real && !t.is_real()) {
          if (t.kind == runtime::ElemKind::Bool)
            throw io::IoError(*src.path, fmt::format("array `{}` holds booleans, the argument is real", path));
          t = runtime::cast_kind(t, runtime::ElemKind::Real);
        } else if (want_int && t.kind != runtime::ElemKind::I32 && t.kind != runtime::ElemKind::I64) {
          throw io::IoError(*src.path, fmt::format("array `{}` holds {} values, the argument is an integer tensor", path,
                                                   runtime::elem_kind_name(t.kind)));
        } else if (want_int) {
          t.kind = type.tensor.elem == elab::Elem::I32 ? runtime::ElemKind::I32 : runtime::ElemKind::I64;
          // An i64 array read for an i32 argument must fit: the kernels trust the kind.
          if (t.kind == runtime::ElemKind::I32)
            for (size_t i = 0; i < t.ints.size(); ++i)
              if (t.ints[i] < INT32_MIN || t.ints[i] > INT32_MAX)
                throw io::IoError(*src.path, fmt::format("array `{}` holds {} at {}, outside the range of i32", path,
                                                         t.ints[i], i));
        } else if (type.tensor.elem == elab::Elem::Bool && t.kind != runtime::ElemKind::Bool) {
          throw io::IoError(*src.path, fmt::format("array `{}` must hold booleans", path));
        }
        return Value::of(std::move(t));
      }
      if (type.tensor.elem != elab::Elem::Real)
        throw EvalError(fmt::format("argument `{}` is {}: give it with --inputs FILE.npz", path,
                                    prog.printer().tensor(type.tensor)));
      return Value::of(runtime::draw_normal(runtime::derive_key(src.root, "input:" + path), shape, 0.0, 1.0));
    }
  }
  throw EvalError("unreachable argument kind");
}

}  // namespace

namespace {

/// The arguments of `function` from `src` (its arrays, or draws from its
/// key); every array of a file must be used.
std::vector<Value> arguments_from(const elab::Program& prog, int function, const ParamMap* params,
                                  const std::map<std::string, int64_t>& dims, InputSource& src) {
  const core::Function& fn = prog.functions.at(function);
  std::vector<Value> args;
  for (size_t i = 0; i < fn.args.size(); ++i) {
    const core::FnArg& a = fn.args[i];
    if (a.type.kind == elab::TypeKind::Params && i == 0) {
      if (!params) throw EvalError("the entry's parameters are missing");
      args.push_back(Value::of_params(std::make_shared<const ParamMap>(*params)));
      continue;
    }
    args.push_back(make_input(prog, a.type, a.name, src, dims, 0));
  }
  for (const auto& [name, t] : src.entries)
    if (!src.used.count(name))
      throw io::IoError(*src.path, fmt::format("array `{}` matches no argument of `{}`", name, fn.name));
  return args;
}

/// Slice k of `t` along its first axis, sharing a real tensor's elements.
runtime::Tensor leading_slice(const runtime::Tensor& t, int64_t k) {
  runtime::Tensor out;
  out.kind = t.kind;
  out.shape.assign(t.shape.begin() + 1, t.shape.end());
  const int64_t n = runtime::element_count(out.shape);
  const size_t from = static_cast<size_t>(k * n);
  if (t.is_real())
    out.reals = runtime::RealStorage::window(t.reals, from, static_cast<size_t>(n));
  else
    out.ints.assign(t.ints.begin() + static_cast<std::ptrdiff_t>(from),
                    t.ints.begin() + static_cast<std::ptrdiff_t>(from + static_cast<size_t>(n)));
  return out;
}

}  // namespace

std::vector<Value> entry_arguments(const elab::Program& prog, int function, const ParamMap* params,
                                   const std::map<std::string, int64_t>& dims, uint64_t seed,
                                   const std::optional<std::string>& inputs_path) {
  InputSource src;
  src.path = inputs_path;
  src.root = runtime::key_from_seed(seed);
  if (inputs_path)
    for (auto& [name, t] : io::read_npz(*inputs_path)) src.entries.emplace(name, std::move(t));
  return arguments_from(prog, function, params, dims, src);
}

SampleFile SampleFile::read(const std::string& path) {
  SampleFile file;
  file.path = path;
  for (auto& [name, t] : io::read_npz(path)) {
    if (t.shape.empty())
      throw io::IoError(path, fmt::format("array `{}` has no axes: a file of samples holds each argument's samples "
                                          "along a first axis",
                                          name));
    file.count = file.arrays.empty() ? t.shape[0] : std::min(file.count, t.shape[0]);
    file.arrays.emplace(name, std::move(t));
  }
  if (file.arrays.empty()) throw io::IoError(path, "it holds no array");
  return file;
}

std::vector<Value> sample_arguments(const elab::Program& prog, int function, const ParamMap* params,
                                    const std::map<std::string, int64_t>& dims, uint64_t seed,
                                    const SampleFile& file, int64_t k) {
  if (k < 0 || k >= file.count)
    throw io::IoError(file.path, fmt::format("sample {} asked, but it holds {} (the shortest first axis of its "
                                             "arrays)",
                                             k, file.count));
  InputSource src;
  src.path = file.path;
  src.root = runtime::key_from_seed(seed + static_cast<uint64_t>(k));
  for (const auto& [name, t] : file.arrays) src.entries.emplace(name, leading_slice(t, k));
  return arguments_from(prog, function, params, dims, src);
}

void flatten_value(const Value& v, const std::string& path, std::vector<std::pair<std::string, runtime::Tensor>>& out) {
  switch (v.kind) {
    case Value::Kind::Tensor: out.emplace_back(path, v.tensor); return;
    case Value::Kind::Tuple:
      for (size_t i = 0; i < v.elements.size(); ++i) flatten_value(v.elements[i], fmt::format("{}.{}", path, i), out);
      return;
    case Value::Kind::Host: out.emplace_back(path, runtime::Tensor::scalar(v.host)); return;
    case Value::Kind::Key: {
      runtime::Tensor t = runtime::Tensor::integer(runtime::ElemKind::I64, {2});
      t.ints = {v.key.k0, v.key.k1};
      out.emplace_back(path, t);
      return;
    }
    case Value::Kind::Params:
      for (const auto& [p, t] : *v.params) out.emplace_back(path + "." + p, t);
      return;
  }
}

void check_argument(const elab::Program& prog, const elab::Type& declared, const Value& v,
                    const std::map<std::string, int64_t>& dims, const std::string& what, int depth) {
  using elab::TypeKind;
  if (depth > 64) return;
  switch (declared.kind) {
    case TypeKind::Tensor: {
      if (v.kind != Value::Kind::Tensor) throw EvalError(fmt::format("{}: expected a tensor", what));
      const elab::TensorType& t = declared.tensor;
      size_t n = t.axes.size();
      if (v.tensor.shape.size() < n || (!t.rest && v.tensor.shape.size() != n))
        throw EvalError(fmt::format("{}: expected {} ({} axes), found shape {}", what, prog.printer().tensor(t),
                                    n, runtime::shape_string(v.tensor.shape)));
      size_t lead = v.tensor.shape.size() - n;
      for (size_t i = 0; i < n; ++i) {
        auto want = t.axes[i].size.evaluate(dims);
        if (want && *want != v.tensor.shape[lead + i])
          throw EvalError(fmt::format("{}: expected {}, found shape {}", what, prog.printer().tensor(t),
                                      runtime::shape_string(v.tensor.shape)));
      }
      bool want_int = t.elem == elab::Elem::I32 || t.elem == elab::Elem::I64;
      bool is_int = v.tensor.kind == runtime::ElemKind::I32 || v.tensor.kind == runtime::ElemKind::I64;
      if (want_int != is_int || (t.elem == elab::Elem::Bool) != (v.tensor.kind == runtime::ElemKind::Bool))
        throw EvalError(fmt::format("{}: expected {} elements, found {}", what, elab::elem_name(t.elem),
                                    runtime::elem_kind_name(v.tensor.kind)));
      return;
    }
    case TypeKind::Tuple:
      if (v.kind != Value::Kind::Tuple || v.elements.size() != declared.elements.size())
        throw EvalError(fmt::format("{}: expected a tuple of {}", what, declared.elements.size()));
      for (size_t i = 0; i < declared.elements.size(); ++i)
        check_argument(prog, declared.elements[i], v.elements[i], dims, fmt::format("{}.{}", what, i), depth + 1);
      return;
    case TypeKind::Key:
      if (v.kind != Value::Kind::Key) throw EvalError(fmt::format("{}: expected a key", what));
      return;
    case TypeKind::Scalar:
      if (v.kind != Value::Kind::Host) throw EvalError(fmt::format("{}: expected a host scalar", what));
      return;
    case TypeKind::Params: {
      if (v.kind != Value::Kind::Params) throw EvalError(fmt::format("{}: expected a parameter tree", what));
      for (const auto& [path, type] : prog.flatten(declared.params)) {
        auto it = v.params->find(path);
        if (it == v.params->end()) throw EvalError(fmt::format("{}: parameter `{}` is missing", what, path));
        runtime::Shape want = concrete_shape(type, dims);
        if (it->second.shape != want)
          throw EvalError(fmt::format("{}: parameter `{}` has shape {}, expected {}", what, path,
                                      runtime::shape_string(it->second.shape), runtime::shape_string(want)));
      }
      return;
    }
  }
}


void check_element_count(const elab::TensorType& t, const runtime::Shape& shape,
                         const std::map<std::string, int64_t>& dims) {
  int64_t count = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(count, d, &count) || count > elab::kMaxElements) {
      std::set<std::string> symbols;
      for (const elab::Axis& a : t.axes)
        for (const std::string& sym : a.size.symbols()) symbols.insert(sym);
      std::vector<std::string> bound;
      for (const std::string& sym : symbols)
        if (auto it = dims.find(sym); it != dims.end()) bound.push_back(fmt::format("{} = {}", sym, it->second));
      throw EvalError(fmt::format("at {} a value of shape {} would have more than 2^40 elements, the most a tensor may "
                                  "have: are the dimensions what you meant?",
                                  fmt::join(bound, ", "), runtime::shape_string(shape)));
    }
}

runtime::Shape concrete_shape(const elab::TensorType& t, const std::map<std::string, int64_t>& dims) {
  if (t.rest) throw EvalError("a type with `...` has no concrete shape");
  runtime::Shape s;
  try {
    for (const elab::Axis& a : t.axes) s.push_back(eval_size(a.size, dims));
  } catch (const runtime::RuntimeError& e) {
    throw EvalError(e.what());
  }
  check_element_count(t, s, dims);
  return s;
}

}  // namespace quire::interp
