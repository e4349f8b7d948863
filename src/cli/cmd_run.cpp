// quire run FILE --entry NAME [--dim B=4] [--seed N] [--precision f64|f32|bf16|f16]
//   [--half-intermediates] [--params F.safetensors] [--params-out F.safetensors]
//   [--inputs F.npz] [--out F.npy|F.npz|F.safetensors] [--remat store|recompute]
//
// Every run evaluates under a realization (f64 unless --precision says
// otherwise); results are printed with their realized type and written in it.

#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "common.h"
#include "quire/interp/inputs.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/params.h"
#include "quire/io/npy.h"
#include "quire/io/safetensors.h"
#include "quire/precision/realization.h"

namespace quire::cli {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string element(const runtime::Tensor& t, size_t i) {
  if (t.is_real()) return fmt::format("{}", t.reals[i]);
  if (t.kind == runtime::ElemKind::Bool) return t.ints[i] ? "true" : "false";
  return std::to_string(t.ints[i]);
}

/// Nested brackets, row-major, every element exact (shortest round-trip form).
std::string tensor_text(const runtime::Tensor& t) {
  if (t.shape.empty()) return element(t, 0);
  const size_t limit = 256;
  if (static_cast<size_t>(t.size()) > limit) {
    std::vector<std::string> head;
    for (size_t i = 0; i < 6; ++i) head.push_back(element(t, i));
    return fmt::format("shape {}: {}, … ({} elements; write them with --out)", runtime::shape_string(t.shape),
                       fmt::join(head, ", "), t.size());
  }
  std::string out;
  std::vector<int64_t> strides = runtime::contiguous_strides(t.shape);
  for (int64_t i = 0; i < t.size(); ++i) {
    for (size_t d = 0; d < t.shape.size(); ++d)
      if (i % (strides[d] * t.shape[d]) == 0) out += "[";
    out += element(t, static_cast<size_t>(i));
    size_t closed = 0;
    for (size_t d = t.shape.size(); d-- > 0;)
      if ((i + 1) % (strides[d] * t.shape[d]) == 0) {
        out += "]";
        ++closed;
      } else {
        break;
      }
    if (i + 1 < t.size()) out += closed ? ",\n" + std::string(t.shape.size() - closed, ' ') : ", ";
  }
  return out;
}

/// The leaves of a result with their realized types, named as `flatten_value` names them.
void leaf_types(const interp::Value& v, const std::string& path, io::StoreTypes& types, int depth = 0) {
  if (depth > 64) return;
  if (v.kind == interp::Value::Kind::Tensor) types.by_name[path] = io::store_type_of(v.type);
  if (v.kind == interp::Value::Kind::Tuple)
    for (size_t i = 0; i < v.elements.size(); ++i)
      leaf_types(v.elements[i], fmt::format("{}.{}", path, i), types, depth + 1);
}

}  // namespace

Handler setup_run(CLI::App& sub) {
  struct Options {
    std::string file, entry, params, params_out, inputs, out, precision = "f64";
    std::vector<std::string> dims;
    int64_t seed = 0;
    bool half_intermediates = false;
    std::string remat = "store";
  };
  auto o = std::make_shared<Options>();
  sub.add_option("file", o->file, "the program (.qr)")->required();
  sub.add_option("--entry", o->entry, "the function to evaluate (e.g. loss, Tower.apply)")->required();
  sub.add_option("--dim", o->dims, "bind a dimension, NAME=SIZE (repeatable)");
  sub.add_option("--seed", o->seed, "seed of the parameters' and the inputs' draws (default 0)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--params", o->params, "read the parameters from a safetensors file");
  sub.add_option("--params-out", o->params_out, "write the parameters used to a safetensors file");
  sub.add_option("--inputs", o->inputs, "read the arguments from an .npz, each under its path (x, batch.0)");
  sub.add_option("--precision", o->precision, "the run policy: f64 (default), f32, bf16 or f16")
      ->check(CLI::IsMember({"f64", "f32", "bf16", "f16"}));
  sub.add_flag("--half-intermediates", o->half_intermediates,
               "round every intermediate step of a half value to the half (reductions accumulate in it)");
  sub.add_option("--remat", o->remat,
                 "how a gradient's backward pass gets the forward values of calls: store (default) or recompute")
      ->check(CLI::IsMember({"store", "recompute"}));
  sub.add_option("--out", o->out,
                 "write the result in its realized type: .npy (one tensor), .npz or .safetensors (bf16 is <f4 in NumPy files)");
  return [o]() {
    if (!o->out.empty() && !ends_with(o->out, ".npy") && !ends_with(o->out, ".npz") &&
        !ends_with(o->out, ".safetensors"))
      throw UsageError(fmt::format("--out {}: the result is written as .npy, .npz or .safetensors", o->out));
    if (!o->inputs.empty() && !ends_with(o->inputs, ".npz"))
      throw UsageError(fmt::format("--inputs {}: inputs are read from an .npz", o->inputs));
    auto prog = load_program(o->file);
    if (!prog) return 1;
    auto dims = parse_dims(o->dims, *prog);
    int entry = find_entry(*prog, o->entry);
    const core::Function& fn = prog->functions[entry];
    if (ends_with(o->out, ".npy") && fn.result.kind != elab::TypeKind::Tensor)
      throw UsageError(fmt::format("--out {}: `{}` returns {}; write it as .npz", o->out, fn.name,
                                   prog->printer()(fn.result)));
    interp::ParamMap params;
    const interp::ParamMap* params_ptr = nullptr;
    if (!fn.args.empty() && fn.args[0].type.kind == elab::TypeKind::Params) {
      const elab::ParamsType& model = fn.args[0].type.params;
      params = o->params.empty() ? interp::init_params(*prog, model, static_cast<uint64_t>(o->seed), dims)
                                 : interp::load_params(o->params, *prog, model, dims);
      params_ptr = &params;
    } else if (!o->params.empty() || !o->params_out.empty()) {
      throw UsageError(fmt::format("`{}` takes no parameter tree: --params and --params-out do not apply", fn.name));
    }
    std::optional<std::string> inputs;
    if (!o->inputs.empty()) inputs = o->inputs;
    precision::RealizeOptions options;
    options.policy = *precision::parse_policy(o->precision);
    options.half_intermediates = o->half_intermediates;
    const precision::Realization realization = precision::realize(*prog, entry, options, dims);
    if (!o->params_out.empty()) {
      // The parameters as the run stores them: f64, f32 masters, or a frozen one as its readers read it.
      io::StoreTypes types;
      for (const precision::ParamStorage& p : realization.params) types.by_name[p.path] = io::store_type_of(p.stored);
      interp::save_params(o->params_out, *prog, fn.args[0].type.params, params, types);
    }
    interp::Interpreter interp(*prog, dims, &realization);
    interp.set_remat(*interp::parse_remat(o->remat));
    auto args = interp::entry_arguments(*prog, entry, params_ptr, dims, static_cast<uint64_t>(o->seed), inputs);
    interp::Value result = interp.call(entry, args);
    std::vector<std::pair<std::string, runtime::Tensor>> leaves;
    interp::flatten_value(result, "result", leaves);
    io::StoreTypes types;
    leaf_types(result, "result", types);
    for (const auto& [path, t] : leaves) {
      // The type is named when it is not f64, so f64 printouts read as before.
      io::StoreType st = types.of(path);
      const char* type = !t.is_real() || st == io::StoreType::F64 ? nullptr
                         : st == io::StoreType::F32 ? "f32" : st == io::StoreType::BF16 ? "bf16" : "f16";
      std::cout << fmt::format("{}{} = {}\n", path, type ? fmt::format(" : {}", type) : "", tensor_text(t));
    }
    if (!o->out.empty()) {
      if (ends_with(o->out, ".npy")) {
        if (result.kind != interp::Value::Kind::Tensor)
          throw UsageError(fmt::format("--out {}: the result is a tuple; write it as .npz or .safetensors", o->out));
        io::write_npy(o->out, result.tensor, types.of("result"));
      } else if (ends_with(o->out, ".npz")) {
        io::write_npz(o->out, leaves, types);
      } else {
        io::write_safetensors(o->out, leaves, {{"format", "quire"}, {"precision", o->precision}}, types);
      }
    }
    return 0;
  };
}

}  // namespace quire::cli
