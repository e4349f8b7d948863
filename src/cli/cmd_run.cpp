// quire run FILE --entry NAME [--dim B=4] [--seed N] [--params F.safetensors]
//   [--params-out F.safetensors] [--inputs F.npz] [--out F.npy|F.npz]

#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "common.h"
#include "quire/interp/inputs.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/params.h"
#include "quire/io/npy.h"

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

}  // namespace

Handler setup_run(CLI::App& sub) {
  struct Options {
    std::string file, entry, params, params_out, inputs, out;
    std::vector<std::string> dims;
    int64_t seed = 0;
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
  sub.add_option("--out", o->out, "write the result: .npy (one tensor) or .npz (a tuple)");
  return [o]() {
    if (!o->out.empty() && !ends_with(o->out, ".npy") && !ends_with(o->out, ".npz"))
      throw UsageError(fmt::format("--out {}: the result is written as .npy or .npz", o->out));
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
      if (!o->params_out.empty()) interp::save_params(o->params_out, *prog, model, params);
    } else if (!o->params.empty() || !o->params_out.empty()) {
      throw UsageError(fmt::format("`{}` takes no parameter tree: --params and --params-out do not apply", fn.name));
    }
    std::optional<std::string> inputs;
    if (!o->inputs.empty()) inputs = o->inputs;
    interp::Interpreter interp(*prog, dims);
    auto args = interp::entry_arguments(*prog, entry, params_ptr, dims, static_cast<uint64_t>(o->seed), inputs);
    interp::Value result = interp.call(entry, args);
    std::vector<std::pair<std::string, runtime::Tensor>> leaves;
    interp::flatten_value(result, "result", leaves);
    for (const auto& [path, t] : leaves) std::cout << fmt::format("{} = {}\n", path, tensor_text(t));
    if (!o->out.empty()) {
      if (ends_with(o->out, ".npy")) {
        if (result.kind != interp::Value::Kind::Tensor)
          throw UsageError(fmt::format("--out {}: the result is a tuple; write it as .npz", o->out));
        io::write_npy(o->out, result.tensor);
      } else {
        io::write_npz(o->out, leaves);
      }
    }
    return 0;
  };
}

}  // namespace quire::cli
