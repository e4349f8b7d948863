#include "quire/train/sampler.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>

#include "quire/compile/compile.h"
#include "quire/compile/executor.h"
#include "quire/interp/core_geometry.h"
#include "quire/interp/params.h"
#include "quire/io/atomic_file.h"
#include "quire/machine/profile.h"
#include "quire/native/native_runner.h"

namespace quire::train {

namespace {

using elab::TypeKind;
using interp::Value;

/// The byte length of the UTF-8 character that starts with `lead`, or 0 if
/// `lead` cannot start one.
size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 0;
}

/// `text` cut into its UTF-8 characters; nullopt at the first invalid byte.
std::optional<std::vector<std::string>> characters_of(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(static_cast<unsigned char>(text[i]));
    if (n == 0 || i + n > text.size()) return std::nullopt;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return std::nullopt;
    out.push_back(text.substr(i, n));
    i += n;
  }
  return out;
}

bool is_i32(const elab::Type& t) { return t.kind == TypeKind::Tensor && t.tensor.elem == elab::Elem::I32; }

}  // namespace

Alphabet Alphabet::read(const std::string& path) {
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const std::exception& e) {
    throw SampleError(fmt::format("{}: cannot read the alphabet: {}", path, e.what()));
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("alphabet") || !j["alphabet"].is_array() || j["alphabet"].empty())
    throw SampleError(fmt::format("{}: not an alphabet: a JSON object {{\"alphabet\": [\"a\", \"b\", …]}} of at least "
                                  "one character",
                                  path));
  std::vector<std::string> characters;
  for (const nlohmann::json& c : j["alphabet"]) {
    if (!c.is_string()) throw SampleError(fmt::format("{}: alphabet entry {} is not a string", path, c.dump()));
    characters.push_back(c.get<std::string>());
  }
  try {
    return Alphabet(std::move(characters));
  } catch (const SampleError& e) {
    throw SampleError(fmt::format("{}: {}", path, e.what()));
  }
}

Alphabet::Alphabet(std::vector<std::string> characters) : characters_(std::move(characters)) {
  if (characters_.empty()) throw SampleError("the alphabet is empty");
  if (characters_.size() > (size_t{1} << 31)) throw SampleError("the alphabet has more than 2^31 characters");
  for (size_t i = 0; i < characters_.size(); ++i) {
    const auto one = characters_of(characters_[i]);
    if (!one || one->size() != 1)
      throw SampleError(fmt::format("alphabet entry {} is {}, not one UTF-8 character", i,
                                    nlohmann::json(characters_[i]).dump()));
    if (!ids_.emplace(characters_[i], static_cast<int32_t>(i)).second)
      throw SampleError(fmt::format("alphabet entry {} repeats {}", i, nlohmann::json(characters_[i]).dump()));
  }
}

std::vector<int32_t> Alphabet::encode(const std::string& text) const {
  const auto chars = characters_of(text);
  if (!chars) throw SampleError("the prompt is not valid UTF-8");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < chars->size(); ++i) {
    auto it = ids_.find((*chars)[i]);
    if (it == ids_.end())
      throw SampleError(fmt::format("the prompt's character {} ({}) is not in the alphabet", i + 1,
                                    nlohmann::json((*chars)[i]).dump()));
    ids.push_back(it->second);
  }
  return ids;
}

const std::string& Alphabet::character(int32_t id) const {
  if (id < 0 || id >= size())
    throw SampleError(fmt::format("the entry drew id {}, outside the alphabet's {} characters", id, size()));
  return characters_[static_cast<size_t>(id)];
}

runtime::Key sample_key(uint64_t seed, int64_t draw) {
  return runtime::derive_key(runtime::key_from_seed(seed), fmt::format("sample:{}", draw));
}

std::string sample(const elab::Program& prog, const Alphabet& alphabet, const SampleOptions& options,
                   const std::function<void(const std::string&)>& emit) {
  const int entry = prog.find_function(options.entry);
  if (entry < 0) throw SampleError(fmt::format("the program has no function `{}` to sample with", options.entry));
  const core::Function& fn = prog.functions[static_cast<size_t>(entry)];
  const std::string shape =
      "(θ : params M, context : i32[…, time: T], at : i32[…], temperature : f64, k : key) -> i32[…]";
  if (fn.args.size() != 5 || fn.args[0].type.kind != TypeKind::Params || !is_i32(fn.args[1].type) ||
      fn.args[1].type.tensor.axes.empty() || fn.args[1].type.tensor.rest || !is_i32(fn.args[2].type) ||
      fn.args[2].type.tensor.rest || fn.args[3].type.kind != TypeKind::Scalar || fn.args[4].type.kind != TypeKind::Key ||
      !is_i32(fn.result))
    throw SampleError(fmt::format("`{}` is not a sampling entry: it should be {}", fn.name, shape));
  if (options.length < 0) throw SampleError("the length is a natural number");
  if (!(options.temperature > 0) || !std::isfinite(options.temperature))
    throw SampleError(fmt::format("the temperature {} is not a positive number", options.temperature));

  // One sequence: the context's dimensions before its last axis, unless given, are 1.
  std::map<std::string, int64_t> dims = options.dims;
  const elab::TensorType& context_type = fn.args[1].type.tensor;
  for (size_t a = 0; a + 1 < context_type.axes.size(); ++a)
    for (const std::string& s : context_type.axes[a].size.symbols()) dims.emplace(s, 1);
  auto shape_of = [&](const elab::TensorType& t) {
    runtime::Shape out;
    for (const elab::Axis& a : t.axes) {
      const std::optional<int64_t> n = a.size.evaluate(dims);
      if (!n) throw SampleError(fmt::format("`{}`: the size {} is unbound (give it with --dim)", fn.name, a.size.str()));
      out.push_back(*n);
    }
    return out;
  };
  const runtime::Shape context_shape = shape_of(context_type);
  const runtime::Shape at_shape = shape_of(fn.args[2].type.tensor);
  if (runtime::element_count(context_shape) != context_shape.back() || runtime::element_count(at_shape) != 1)
    throw SampleError(fmt::format("`{}` takes one sequence: its context is {} and its `at` {}, at {} and {}", fn.name,
                                  prog.printer()(fn.args[1].type), prog.printer()(fn.args[2].type),
                                  runtime::shape_string(context_shape), runtime::shape_string(at_shape)));
  const int64_t window = context_shape.back();

  std::vector<int32_t> text = alphabet.encode(options.prompt);
  if (text.empty()) throw SampleError("the prompt is empty: give at least one character to continue");
  auto params = std::make_shared<const interp::ParamMap>(
      interp::load_params(options.params, prog, fn.args[0].type.params, dims));

  auto arguments = [&](int64_t draw) {
    runtime::Tensor context = runtime::Tensor::integer(runtime::ElemKind::I32, context_shape, 0);
    const size_t from = text.size() > static_cast<size_t>(window) ? text.size() - static_cast<size_t>(window) : 0;
    for (size_t i = from; i < text.size(); ++i) context.ints[i - from] = text[i];
    runtime::Tensor at = runtime::Tensor::integer(runtime::ElemKind::I32, at_shape,
                                                  static_cast<int64_t>(text.size() - from) - 1);
    return std::vector<Value>{Value::of_params(params), Value::of(std::move(context)), Value::of(std::move(at)),
                              Value::of_host(options.temperature), Value::of_key(sample_key(options.seed, draw))};
  };

  // Compiled once; every draw is one call of the executor (or of the reference interpreter).
  const std::vector<Value> first = arguments(0);
  std::unique_ptr<kernel::KernelRunner> runner = native::make_runner(options.backend, options.threads);
  const machine::Profile profile = machine::planning_profile("");
  std::optional<compile::CompiledProgram> compiled;
  std::optional<kernel::KernelEngine> engine;
  std::optional<compile::Executor> executor;
  std::optional<interp::Interpreter> reference;
  precision::RealizeOptions realize;
  std::unique_ptr<precision::Realization> realization;
  if (runner) {
    compile::CompileRequest request;
    request.entry = entry;
    request.dims = dims;
    request.realize = realize;
    request.profile = &profile;
    request.threads = options.threads;
    request.arguments = &first;
    compiled.emplace(compile::compile(prog, request));
    engine.emplace(compiled->catalog, *runner, native::warn_native_unavailable);
    executor.emplace(prog, *compiled, *engine);
  } else {
    realization = std::make_unique<precision::Realization>(precision::realize(prog, entry, realize, dims));
    reference.emplace(prog, dims, realization.get());
  }
  std::string drawn;
  for (int64_t draw = 0; draw < options.length; ++draw) {
    const std::vector<Value> args = draw == 0 ? first : arguments(draw);
    const Value next = executor ? executor->call(args) : reference->call(entry, args);
    const int64_t id = next.tensor.ints.at(0);
    const std::string& c = alphabet.character(static_cast<int32_t>(std::clamp<int64_t>(id, -1, INT32_MAX)));
    text.push_back(static_cast<int32_t>(id));
    drawn += c;
    if (emit) emit(c);
  }
  return drawn;
}

}  // namespace quire::train
