// quire run FILE --entry NAME [--dim B=4] [--seed N] [--precision f64|f32|bf16|f16|exact] [--bits N]
//   [--backend native|kernels|interp] [--threads N] [--profile P.json] [--repeat N]
//   [--half-intermediates] [--params F.safetensors] [--params-out F.safetensors]
//   [--inputs F.npz] [--out F.npy|F.npz|F.safetensors] [--remat store|recompute]
//   [--realize @realization.json [--strict-envelope]] [--memory-limit BYTES]
//
// --memory-limit refuses the call before it runs when its inputs and its
// peak of live bytes, as `quire memory` counts them from the compiled
// program (compile/memory.h), pass the limit; the error names the figures
// and the largest values live at the peak.
//
// Under --realize with the solver's ranges (a version 2 realization), every
// value stored at a narrowed site is checked against the range its type was
// chosen for (interp/envelope_guard.h); the first that leaves it is named
// with its source line in a warning, or, with --strict-envelope, an error
// (status 1, nothing written).
//
// Every run evaluates under a realization (f64 unless --precision says
// otherwise); results are printed with their realized type and written in it.
// `--precision exact` runs the exact reference (MPFR at --bits N, 128 by
// default) instead, and writes the f64 rounding of its result.

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "commands.h"
#include "common.h"
#include "quire/compile/compile.h"
#include "quire/compile/executor.h"
#include "quire/compile/memory.h"
#include "quire/exact/exact_interpreter.h"
#include "quire/interp/envelope_guard.h"
#include "quire/interp/inputs.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/params.h"
#include "quire/io/npy.h"
#include "quire/io/safetensors.h"
#include "quire/kernel/engine.h"
#include "quire/native/native_runner.h"
#include "quire/realize/realization.h"
#include "quire/support/diagnostics.h"

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

/// Nested brackets, row-major, with `element(i)` for element i; a long
/// tensor shows its first six elements.
template <class Element>
std::string nested_text(const runtime::Shape& shape, Element element) {
  const int64_t size = runtime::element_count(shape);
  if (shape.empty()) return element(0);
  const size_t limit = 256;
  if (static_cast<size_t>(size) > limit) {
    std::vector<std::string> head;
    for (size_t i = 0; i < 6; ++i) head.push_back(element(i));
    return fmt::format("shape {}: {}, … ({} elements; write them with --out)", runtime::shape_string(shape),
                       fmt::join(head, ", "), size);
  }
  std::string out;
  std::vector<int64_t> strides = runtime::contiguous_strides(shape);
  for (int64_t i = 0; i < size; ++i) {
    for (size_t d = 0; d < shape.size(); ++d)
      if (i % (strides[d] * shape[d]) == 0) out += "[";
    out += element(static_cast<size_t>(i));
    size_t closed = 0;
    for (size_t d = shape.size(); d-- > 0;)
      if ((i + 1) % (strides[d] * shape[d]) == 0) {
        out += "]";
        ++closed;
      } else {
        break;
      }
    if (i + 1 < size) out += closed ? ",\n" + std::string(shape.size() - closed, ' ') : ", ";
  }
  return out;
}

/// Every element exact (shortest round-trip form).
std::string tensor_text(const runtime::Tensor& t) {
  return nested_text(t.shape, [&](size_t i) { return element(t, i); });
}

/// An exact run's result leaf: a real one with `digits` significant digits.
std::string exact_text(const exact::ExactValue& v, int digits) {
  if (!v.is_real) return tensor_text(v.other);
  return nested_text(v.real.shape, [&](size_t i) { return v.real.elems[i].str(digits); });
}

/// `quire run --precision exact`: the entry in the exact interpreter at `bits`;
/// each real leaf printed with the digits that tell N-bit values apart, the
/// f64 rounding written by --out.
int run_exact(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
              const std::vector<interp::Value>& args, int bits, const std::string& out) {
  exact::ExactInterpreter interp(prog, dims, bits);
  exact::ExactValue result = interp.call(entry, args);
  std::vector<std::pair<std::string, exact::ExactValue>> exact_leaves;
  exact::flatten(result, "result", exact_leaves);
  const int digits = exact::Big::digits_for(bits);
  for (const auto& [path, leaf] : exact_leaves)
    std::cout << fmt::format("{}{} = {}\n", path, leaf.is_real ? fmt::format(" : exact({})", bits) : "",
                             exact_text(leaf, digits));
  if (out.empty()) return 0;
  interp::Value rounded = exact::to_f64(result);
  std::vector<std::pair<std::string, runtime::Tensor>> leaves;
  interp::flatten_value(rounded, "result", leaves);
  if (ends_with(out, ".npy")) {
    if (rounded.kind != interp::Value::Kind::Tensor)
      throw UsageError(fmt::format("--out {}: the result is a tuple; write it as .npz or .safetensors", out));
    io::write_npy(out, rounded.tensor, io::StoreType::F64);
  } else if (ends_with(out, ".npz")) {
    io::write_npz(out, leaves, io::StoreType::F64);
  } else {
    io::write_safetensors(out, leaves, {{"format", "quire"}, {"precision", fmt::format("exact({})", bits)}},
                          io::StoreType::F64);
  }
  return 0;
}

/// The leaves of a result with their realized types, named as `flatten_value` names them.
void leaf_types(const interp::Value& v, const std::string& path, io::StoreTypes& types, int depth = 0) {
  if (depth > 64) return;
  if (v.kind == interp::Value::Kind::Tensor) types.by_name[path] = io::store_type_of(v.type);
  // A tree's leaves carry no type of their own: one held as f32 numbers (a
  // gradient or a master under f32, bf16 or f16) is written and shown as f32.
  if (v.kind == interp::Value::Kind::Params && v.params)
    for (const auto& [name, t] : *v.params)
      if (t.is_real() && t.reals.holds_narrow()) types.by_name[path + "." + name] = io::StoreType::F32;
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
    bool fused_products = true;  // --product-step fma, the default
    std::string remat = "store";
    std::string backend = "native";
    std::string library_kernels = "on";
    int threads = default_threads();
    std::string profile;
    int repeat = 0;
    std::string realize;
    std::string memory_limit;
    bool strict_envelope = false;
    int bits = 128;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("file", o->file, "the program (.qr)")->required();
  sub.add_option("--entry", o->entry, "the function to evaluate (e.g. loss, Tower.apply)")->required();
  sub.add_option("--dim", o->dims, "bind a dimension, NAME=SIZE (repeatable)");
  sub.add_option("--seed", o->seed, "seed of the parameters' and the inputs' draws (default 0)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--params", o->params, "read the parameters from a safetensors file");
  add_output_option(sub, "--params-out", o->params_out, "write the parameters used to a safetensors file");
  sub.add_option("--inputs", o->inputs, "read the arguments from an .npz, each under its path (x, batch.0)");
  CLI::Option* precision_flag = sub.add_option("--precision", o->precision,
                 "the run policy: f64 (default), f32, bf16 or f16; or exact, the MPFR reference at --bits")
      ->check(CLI::IsMember({"f64", "f32", "bf16", "f16", "exact"}));
  CLI::Option* bits = sub.add_option("--bits", o->bits, "with --precision exact: the bits of every real (default 128)");
  sub.add_option("--realize", o->realize,
                 "run under the solver's decisions, @realization.json (`quire solve --out`); its policy replaces --precision");
  sub.add_flag("--strict-envelope", o->strict_envelope,
               "with --realize: a value beyond the range its narrowed type was chosen for is an error, not a warning");
  sub.add_flag("--half-intermediates", o->half_intermediates,
               "round every intermediate step of a half value to the half (reductions accumulate in it)");
  CLI::Option* product_step = add_product_step_option(sub, o->fused_products);
  sub.add_option("--remat", o->remat,
                 "how a gradient's backward pass gets the forward values of calls: store (default) or recompute")
      ->check(CLI::IsMember({"store", "recompute"}));
  CLI::Option* backend_flag = sub.add_option("--backend", o->backend,
                 "native (the fused loop nests compiled as C, default), kernels (the same nests in the kernel "
                 "interpreter) or interp (the reference interpreter): the same bits")
      ->check(CLI::IsMember({"native", "kernels", "interp"}));
  sub.add_option("--threads", o->threads, "threads a native kernel may use (default: the machine's cores); the same bits")
      ->check(CLI::Range(1, 256));
  sub.add_option("--library-kernels", o->library_kernels,
                 "on (default): the native backend runs the prelude's attention functions and layer_norm, and their gradients, as one "
                 "fused kernel each where their sites are f32 (the same bits); off: their lines")
      ->check(CLI::IsMember({"on", "off"}));
  sub.add_option("--profile", o->profile,
                 "the machine profile the kernels' layouts are planned under (default: this machine's: the one that "
                 "ships where it describes this machine, else one measured here on first use and kept)");
  sub.add_option("--memory-limit", o->memory_limit,
                 "refuse the call, before it runs, if its inputs and peak of live bytes (as `quire memory` counts "
                 "them) pass this many bytes (64MiB, 2GB, 1048576)");
  sub.add_option("--repeat", o->repeat,
                 "after the call, time N more calls of the entry and print the median (compilation excluded)")
      ->check(CLI::PositiveNumber);
  add_output_option(sub, "--out", o->out,
                 "write the result in its realized type: .npy (one tensor), .npz or .safetensors (bf16 is <f4 in NumPy files)");
  return [o, bits, precision_flag, backend_flag, product_step]() {
    const bool exact = o->precision == "exact";
    if (!o->realize.empty() && precision_flag->count() > 0)
      throw UsageError(fmt::format("--realize {} carries its own policy: leave out --precision", o->realize));
    if (bits->count() > 0 && !exact)
      throw UsageError(fmt::format("--bits {}: the number of bits applies only with --precision exact", o->bits));
    if (exact && (o->bits < exact::kMinBits || o->bits > exact::kMaxBits))
      throw UsageError(fmt::format("--bits {}: the exact reference takes {} to {} bits", o->bits, exact::kMinBits,
                                   exact::kMaxBits));
    if (exact && o->repeat > 0) throw UsageError("--repeat: the exact reference is not timed");
    if (exact && backend_flag->count() > 0)
      throw UsageError(fmt::format("--backend {}: the exact reference runs in its own interpreter", o->backend));
    if (exact && product_step->count() > 0)
      throw UsageError("--product-step: the exact reference rounds nothing");
    if (exact && !o->memory_limit.empty())
      throw UsageError("--memory-limit: the exact reference's memory is not counted (it holds MPFR numbers)");
    const int64_t memory_limit = o->memory_limit.empty() ? 0 : parse_bytes("--memory-limit", o->memory_limit);  // 0: none
    if (exact && o->half_intermediates)
      throw UsageError("--half-intermediates: the exact reference has no half values");
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
    std::optional<interp::ParamMap> params = entry_params(*prog, fn, o->params, static_cast<uint64_t>(o->seed), dims);
    const interp::ParamMap* params_ptr = params ? &*params : nullptr;
    if (!params && (!o->params.empty() || !o->params_out.empty())) {
      throw UsageError(fmt::format("`{}` takes no parameter tree: --params and --params-out do not apply", fn.name));
    }
    std::optional<std::string> inputs;
    if (!o->inputs.empty()) inputs = o->inputs;
    if (exact) {
      if (!o->params_out.empty()) interp::save_params(o->params_out, *prog, fn.args[0].type.params, *params);
      auto args = interp::entry_arguments(*prog, entry, params_ptr, dims, static_cast<uint64_t>(o->seed), inputs);
      return run_exact(*prog, entry, dims, args, o->bits, o->out);
    }
    precision::RealizeOptions options;
    options.policy = *precision::parse_policy(o->precision);
    options.half_intermediates = o->half_intermediates;
    options.fused_products = o->fused_products;
    std::optional<precision::RealizationFile> solved;
    if (!o->realize.empty()) {
      solved = load_realization(o->realize, *prog, entry, dims);
      options.policy = solved->assignment.policy;
      options.assignment = &solved->assignment;
    }
    auto args = interp::entry_arguments(*prog, entry, params_ptr, dims, static_cast<uint64_t>(o->seed), inputs);
    // The call compiled once (kernels lowered at its shapes, planned, and
    // given to the runner) before it runs, then run by the executor, which
    // follows the host program without walking Core; `--repeat` reuses it.
    // `--backend interp` is the reference interpreter alone.
    std::unique_ptr<kernel::KernelRunner> runner = native::make_runner(*kernel::parse_backend(o->backend), o->threads);
    const machine::Profile profile =
        machine::planning_profile(o->backend == "native" ? execution_profile(o->profile) : o->profile);
    std::optional<compile::CompiledProgram> compiled;
    std::optional<kernel::KernelEngine> engine;
    std::optional<compile::Executor> executor;
    std::unique_ptr<precision::Realization> reference_realization;
    if (runner) {
      compile::CompileRequest request;
      request.entry = entry;
      request.dims = dims;
      request.realize = options;
      request.remat = *interp::parse_remat(o->remat);
      request.profile = &profile;
      request.threads = o->threads;
      request.arguments = &args;
      // A solver's realization is watched site by site (the envelope guard),
      // which a library kernel's inner sites would escape: its lines run.
      request.library_kernels = o->backend == "native" && o->library_kernels == "on" && o->realize.empty();
      compiled.emplace(compile::compile(*prog, request));
      engine.emplace(compiled->catalog, *runner, native::warn_native_unavailable);
      executor.emplace(*prog, *compiled, *engine);
    } else {
      reference_realization =
          std::make_unique<precision::Realization>(precision::realize(*prog, entry, options, dims));
    }
    if (memory_limit > 0) {
      // The compiled program's count (`quire memory`), whichever backend
      // runs the call: the interpreter's frames hold at least as much.
      std::optional<compile::CompiledProgram> counted;
      if (!compiled) {
        compile::CompileRequest request;
        request.entry = entry;
        request.dims = dims;
        request.realize = options;
        request.remat = *interp::parse_remat(o->remat);
        counted.emplace(compile::compile(*prog, request));
      }
      const compile::CompiledProgram& c = compiled ? *compiled : *counted;
      const compile::CallMemory m = compile::count_call_memory(*prog, c);
      if (auto refusal = compile::memory_limit_refusal(*prog, c, m, memory_limit, fmt::format("one call of `{}`", fn.name)))
        throw compile::MemoryLimitError(*refusal);
    }
    const precision::Realization& realization = compiled ? *compiled->realization : *reference_realization;
    if (!o->params_out.empty()) {
      // The parameters as the run stores them: f64, f32 masters, or a frozen one as its readers read it.
      io::StoreTypes types;
      for (const precision::ParamStorage& p : realization.params) types.by_name[p.path] = io::store_type_of(p.stored);
      interp::save_params(o->params_out, *prog, fn.args[0].type.params, *params, types);
    }
    std::optional<interp::Interpreter> reference;
    if (!executor) {
      reference.emplace(*prog, dims, &realization);
      reference->set_remat(*interp::parse_remat(o->remat));
    }
    // The envelope guard: the solver's ranges, checked on every call.
    std::optional<interp::EnvelopeGuard> guard;
    if (solved && solved->ranges) {
      guard.emplace(solved->ranges->limits());
      if (executor) executor->set_guard(&*guard);
      if (reference) reference->set_guard(&*guard);
    } else if (o->strict_envelope) {
      throw UsageError(o->realize.empty()
                           ? std::string("--strict-envelope: it checks a run under --realize; there is none")
                           : fmt::format("--strict-envelope: {} records no ranges (a version 1 realization): solve "
                                         "again to guard a run",
                                         o->realize));
    }
    auto call = [&] { return executor ? executor->call(args) : reference->call(entry, args); };
    interp::Value result = call();
    if (guard && guard->first()) {
      Diagnostic d;
      d.severity = o->strict_envelope ? Severity::Error : Severity::Warning;
      d.code = o->strict_envelope ? "E0801" : "W0801";
      d.range = guard->first()->loc;
      d.message = interp::exceeded_message(*guard->first());
      if (guard->count() > 1) d.message += fmt::format(" ({} values left their ranges in all)", guard->count());
      std::cerr << render_diagnostic(prog->sources, d);
      if (o->strict_envelope) return 1;
    }
    // Timed after the first call, so that lowering and compiling are not in it.
    std::optional<double> median_ms;
    if (o->repeat > 0) {
      std::vector<double> ms;
      for (int i = 0; i < o->repeat; ++i) {
        const auto start = std::chrono::steady_clock::now();
        call();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      }
      std::sort(ms.begin(), ms.end());
      median_ms = ms.size() % 2 ? ms[ms.size() / 2] : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2;
    }
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
    if (median_ms) {
      std::string compiled;
      if (const auto* n = dynamic_cast<const native::NativeRunner*>(runner.get()); n && engine && engine->fell_back().empty())
        compiled = fmt::format("; {} kernels: {} compiled ({} compiler run{}), {} from the cache",
                               engine->kernels().size(), n->built(), n->compilations(),
                               n->compilations() == 1 ? "" : "s", n->cache_hits());
      std::cout << fmt::format("-- {} calls on the {} backend: median {:.4g} ms a call, the first call (lowering and "
                               "compiling) not counted{}\n",
                               o->repeat, o->backend, *median_ms, compiled);
    }
    if (!o->out.empty()) {
      if (ends_with(o->out, ".npy")) {
        if (result.kind != interp::Value::Kind::Tensor)
          throw UsageError(fmt::format("--out {}: the result is a tuple; write it as .npz or .safetensors", o->out));
        io::write_npy(o->out, result.tensor, types.of("result"));
      } else if (ends_with(o->out, ".npz")) {
        io::write_npz(o->out, leaves, types);
      } else {
        io::write_safetensors(o->out, leaves, {{"format", "quire"}, {"precision", solved ? "solved" : o->precision}}, types);
      }
    }
    return 0;
  };
}

}  // namespace quire::cli
