#include "quire/export/c_export.h"

#include <fmt/format.h>

#include <cstring>

#include "quire/export/c_host.h"
#include "quire/export/c_runtime.h"
#include "quire/native/c_emit.h"
#include "quire/realize/realization.h"

namespace quire::exports {

namespace {

using namespace c_detail;

// ---- values as .npy bytes, as quire_runtime.c writes them ----

std::string npy_bytes(const std::string& descr, const std::string& data, const runtime::Shape& shape) {
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': (", descr);
  for (size_t d = 0; d < shape.size(); ++d) dict += fmt::format("{}{}", d ? ", " : "", shape[d]);
  if (shape.size() == 1) dict += ",";
  dict += "), }";
  const size_t unpadded = 10 + dict.size() + 1;
  const size_t header = dict.size() + 1 + (64 - unpadded % 64) % 64;
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header & 0xff);
  out += static_cast<char>(header >> 8);
  out += dict;
  out += std::string(header - dict.size() - 1, ' ');
  out += '\n';
  out += data;
  return out;
}

template <class T>
void append(std::string& data, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  data.append(bytes, sizeof(T));
}

/// A leaf's value as the exported program reads and writes it.
std::string leaf_npy(const Leaf& l, const Value& v) {
  std::string data;
  switch (l.kind) {
    case Value::Kind::Key:
      append<int64_t>(data, v.key.k0);
      append<int64_t>(data, v.key.k1);
      return npy_bytes("<i8", data, {2});
    case Value::Kind::Host:
      append<double>(data, v.host);
      return npy_bytes("<f8", data, {});
    case Value::Kind::Tensor:
    case Value::Kind::Tuple:
    case Value::Kind::Params:
      break;
  }
  const runtime::Tensor& t = v.tensor;
  if (!t.is_real()) {
    for (int64_t x : t.ints) append<int64_t>(data, x);
    return npy_bytes("<i8", data, t.shape);
  }
  const size_t n = t.reals.size();
  if (l.storage == kFloat) {
    for (size_t i = 0; i < n; ++i) append<float>(data, static_cast<float>(t.reals[i]));
    return npy_bytes("<f4", data, t.shape);
  }
  for (size_t i = 0; i < n; ++i) append<double>(data, t.reals[i]);
  return npy_bytes("<f8", data, t.shape);
}

/// The leaves of a run-time value, in leaves_of's order.
void value_leaves(const Value& v, std::vector<Value>& out) {
  switch (v.kind) {
    case Value::Kind::Tensor:
    case Value::Kind::Key:
    case Value::Kind::Host:
      out.push_back(v);
      return;
    case Value::Kind::Tuple:
      for (const Value& e : v.elements) value_leaves(e, out);
      return;
    case Value::Kind::Params:
      for (const auto& [path, t] : *v.params) out.push_back(Value::of(t));
      return;
  }
}

/// The descriptor of an entry argument (or a result) from its run-time value.
CValue describe(const Value& v, const precision::Realization* r, const std::string& path) {
  CValue c;
  c.kind = v.kind;
  switch (v.kind) {
    case Value::Kind::Tensor:
      c.leaf.kind = Value::Kind::Tensor;
      c.leaf.elem = v.tensor.kind;
      c.leaf.type = v.type;
      c.leaf.shape = v.tensor.shape;
      c.leaf.storage = v.tensor.is_real() ? storage_of(v.type) : kInt;
      return c;
    case Value::Kind::Key:
    case Value::Kind::Host:
      c.leaf.kind = v.kind;
      return c;
    case Value::Kind::Tuple:
      for (size_t i = 0; i < v.elements.size(); ++i)
        c.elements.push_back(describe(v.elements[i], r, fmt::format("{}.{}", path, i)));
      return c;
    case Value::Kind::Params:
      for (const auto& [p, t] : *v.params) {
        Leaf l;
        l.kind = Value::Kind::Tensor;
        l.elem = t.kind;
        l.shape = t.shape;
        const precision::ParamStorage* stored = r ? r->param(p) : nullptr;
        l.type = stored ? stored->stored : FloatType::F64;
        l.storage = t.is_real() ? storage_of(l.type) : kInt;
        c.params.emplace(p, std::move(l));
      }
      return c;
  }
  return c;
}

/// A C string literal of `s` (UTF-8 bytes kept; quotes, backslashes and controls escaped).
std::string c_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\')
      out += fmt::format("\\{}", static_cast<char>(ch));
    else if (ch < 0x20)
      out += fmt::format("\\{:03o}", ch);
    else
      out += static_cast<char>(ch);
  }
  return out + "\"";
}

std::string main_function(const HostWriter& w, const std::vector<CValue>& args, const std::vector<std::string>& names,
                          const std::vector<std::string>& result_names) {
  std::string text =
      "int main(int argc, char** argv) {\n"
      "  if (argc != 3) {\n"
      "    fprintf(stderr, \"usage: %s INPUTS OUTPUTS (folders: each input and output is a .npy file named as listed "
      "in README.md)\\n\", argv[0]);\n"
      "    return 2;\n"
      "  }\n"
      "  char path[4096];\n";
  std::vector<std::string> slots;
  std::string frees;
  int j = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    std::vector<const Leaf*> leaves;
    leaves_of(args[i], leaves);
    std::vector<std::string> leaf_path;
    leaf_names(args[i], names[i], leaf_path);
    for (size_t k = 0; k < leaves.size(); ++k, ++j) {
      const Leaf& l = *leaves[k];
      text += fmt::format("  snprintf(path, sizeof path, \"%s/%s.npy\", argv[1], {});\n", c_string(leaf_path[k]));
      if (l.kind == Value::Kind::Key) {
        text += fmt::format("  const quire_key a{} = quire_read_key(path);\n", j);
        slots.push_back(fmt::format("{{.k = a{}}}", j));
      } else if (l.kind == Value::Kind::Host) {
        text += fmt::format("  const double a{} = quire_read_scalar(path);\n", j);
        slots.push_back(fmt::format("{{.h = a{}}}", j));
      } else {
        const std::string round = l.elem == runtime::ElemKind::Real && l.type != FloatType::F64
                                      ? fmt::format("quire_round_{}", runtime::float_type_name(l.type))
                                      : "NULL";
        text += fmt::format("  void* a{} = quire_read_npy(path, {}, {}, {}, {});\n", j, storage_name(l.storage),
                            c_array(l.shape), l.shape.size(), round);
        slots.push_back(fmt::format("{{.p = a{}}}", j));
        frees += fmt::format("  free(a{});\n", j);
      }
    }
  }
  std::vector<const Leaf*> results;
  leaves_of(w.root().result, results);
  text += "  quire_arena_open(quire_arena_bytes, quire_arena_sizes, quire_arena_offsets, quire_arena_count);\n";
  text += fmt::format("  quire_slot result[{}];\n  {}((const quire_slot[]){{{}}}, result);\n",
                      std::max<size_t>(results.size(), 1), w.root().name,
                      slots.empty() ? "{.h = 0}" : fmt::format("{}", fmt::join(slots, ", ")));
  for (size_t k = 0; k < results.size(); ++k) {
    const Leaf& l = *results[k];
    text += fmt::format("  snprintf(path, sizeof path, \"%s/%s.npy\", argv[2], {});\n", c_string(result_names[k]));
    if (l.kind == Value::Kind::Key)
      text += fmt::format("  quire_write_key(path, result[{}].k);\n", k);
    else if (l.kind == Value::Kind::Host)
      text += fmt::format("  quire_write_scalar(path, result[{}].h);\n", k);
    else
      text += fmt::format("  quire_write_npy(path, result[{}].p, {}, {}, {});\n", k, storage_name(l.storage),
                          c_array(l.shape), l.shape.size());
  }
  // The outputs the root made are released; those it borrowed are the inputs'.
  for (size_t k = 0; k < results.size(); ++k)
    if (w.root().origins.at(k).group >= 0) {
      bool first = true;
      for (size_t e = 0; e < k; ++e) first = first && w.root().origins[e].group != w.root().origins[k].group;
      if (first) text += fmt::format("  quire_release(result[{}].p);\n", k);
    }
  text += "  quire_arena_close();\n";
  text += frees;  // the inputs, read into memory of their own
  text += "  return 0;\n}\n";
  return text;
}

constexpr const char* kMakefile = R"(# Builds the exported program and checks it against the native backend.
#   make            the program
#   make check      runs it on check/inputs and compares every output with
#                   check/expected, byte for byte
# The flags after $(CFLAGS) keep the bits: no contraction of a*b+c into an
# FMA, no fast-math (the same flags the native backend compiles kernels with).
# -DQUIRE_NO_ARENA in CFLAGS gives each allocation memory of its own (for
# AddressSanitizer) instead of its place in the arena.
CC ?= cc
CFLAGS ?= -O2
QUIRE_FLAGS = -std=c11 -ffp-contract=off -fno-fast-math -fopenmp-simd -fno-math-errno -Wall -Wextra -Werror
SOURCES = program.c kernels.c quire_runtime.c

program: $(SOURCES) quire_runtime.h quire_prelude.h
	$(CC) $(CFLAGS) $(QUIRE_FLAGS) -o $@ $(SOURCES) -lm

check: program
	rm -rf check/out
	mkdir -p check/out
	./program check/inputs check/out
	@n=0; for f in check/expected/*.npy; do \
	  cmp "$$f" "check/out/$${f##*/}" || exit 1; n=$$((n + 1)); \
	done; echo "check: $$n outputs equal to the native backend's, bit for bit"

clean:
	rm -rf program check/out

.PHONY: check clean
)";

}  // namespace

CArena c_arena(const elab::Program& prog, const compile::CompiledProgram& compiled) {
  const core::Function& entry = prog.functions.at(static_cast<size_t>(compiled.host.entry));
  std::vector<CValue> args;
  for (size_t i = 0; i < compiled.host.arguments.size(); ++i)
    args.push_back(describe(compiled.host.arguments[i], compiled.realization.get(), entry.args.at(i).name));
  CExportRequest request;
  request.prog = &prog;
  request.compiled = &compiled;
  HostWriter w(request);
  w.write_program(args);
  const Arena a = w.arena();
  return {a.bytes, a.peak, static_cast<int64_t>(a.sizes.size())};
}

std::vector<ExportedFile> export_c(const CExportRequest& request) {
  const elab::Program& prog = *request.prog;
  const compile::CompiledProgram& compiled = *request.compiled;
  const core::Function& entry = prog.functions.at(static_cast<size_t>(compiled.host.entry));
  const precision::Realization* r = compiled.realization.get();
  if (request.arguments.size() != entry.args.size())
    throw ExportError(
        fmt::format("`{}` takes {} arguments, given {}", entry.name, entry.args.size(), request.arguments.size()));
  std::vector<CValue> args;
  std::vector<std::string> names;
  for (size_t i = 0; i < request.arguments.size(); ++i) {
    names.push_back(entry.args[i].name);
    args.push_back(describe(request.arguments[i], r, names.back()));
  }
  HostWriter w(request);
  w.write_program(args);

  std::vector<std::string> result_names;
  leaf_names(w.root().result, "result", result_names);

  std::vector<ExportedFile> files;
  // program.c: the host program and main.
  std::string program = fmt::format(
      "/* program.c: `{}` of {} as a standalone C program, written by quire export --target c.\n"
      "   One function per instance of the host program (quire dump --stage host), the root last,\n"
      "   then main, which reads the inputs and writes the outputs as .npy files. */\n"
      "#include <stdio.h>\n#include <stdlib.h>\n\n#include \"quire_prelude.h\"\n#include \"quire_runtime.h\"\n\n",
      entry.name, request.source);
  for (int k : w.kernels())
    program += fmt::format("void quire_k{}(const void* const* inputs, void* output, int64_t lo, int64_t hi);\n", k);
  program += "\n/* Where a value is stored in a narrower type than it was computed in (store_at_site). */\n";
  for (const std::string& f : w.roundings()) program += f;
  const Arena arena = w.arena();
  auto numbers = [](const std::vector<int64_t>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += fmt::format("{}{}", i == 0 ? "" : i % 16 == 0 ? ",\n  " : ", ", v[i]);
    return v.empty() ? std::string("0") : out;
  };
  program += fmt::format(
      "\n/* The arena: the call's {} allocations in the order it makes them, each at a fixed offset for its life\n"
      "   (placed greedy by size; the most live at once is {} bytes). */\n"
      "static const int64_t quire_arena_bytes = {};\nstatic const int64_t quire_arena_count = {};\n"
      "static const int64_t quire_arena_sizes[] = {{\n  {}}};\nstatic const int64_t quire_arena_offsets[] = {{\n  "
      "{}}};\n",
      arena.sizes.size(), arena.peak, arena.bytes, arena.sizes.size(), numbers(arena.sizes), numbers(arena.offsets));
  program += "\n" + w.functions();
  program += main_function(w, args, names, result_names);
  files.push_back({"program.c", program});

  const std::string prelude = native::c_prelude();
  std::string kernels =
      "/* kernels.c: the kernels of the host program, as the native backend emits them. */\n#include "
      "\"quire_prelude.h\"\n";
  for (int k : w.kernels()) {
    const kernel::KernelRecord& rec = compiled.catalog->kernels().at(static_cast<size_t>(k));
    kernels += fmt::format("\n/* ---- kernel k{}: {} ---- */\n", k, rec.kernel.title);
    // Each emitted text begins with the prelude (guarded); here it is included once, above.
    std::string text = native::emit_c(rec.kernel, fmt::format("quire_k{}", k));
    if (text.compare(0, prelude.size(), prelude) == 0) text.erase(0, prelude.size());
    kernels += text;
  }
  if (w.kernels().empty()) kernels += "typedef int quire_no_kernels; /* a translation unit may not be empty */\n";
  files.push_back({"kernels.c", kernels});
  files.push_back({"quire_prelude.h",
                   "/* quire_prelude.h: the element helpers every kernel uses (native/c_emit.h). */\n" + prelude});
  files.push_back({"quire_runtime.h", c_runtime_header()});
  files.push_back({"quire_runtime.c", c_runtime_source()});
  files.push_back({"Makefile", kMakefile});

  // The recorded inputs and outputs.
  std::vector<std::string> input_lines, output_lines;
  for (size_t i = 0; i < args.size(); ++i) {
    std::vector<Value> values;
    value_leaves(request.arguments[i], values);
    std::vector<const Leaf*> leaves;
    leaves_of(args[i], leaves);
    std::vector<std::string> leaf_path;
    leaf_names(args[i], names[i], leaf_path);
    if (values.size() != leaves.size()) throw ExportError("internal: the arguments' leaves disagree");
    for (size_t k = 0; k < leaves.size(); ++k) {
      files.push_back({"check/inputs/" + leaf_path[k] + ".npy", leaf_npy(*leaves[k], values[k])});
      input_lines.push_back(leaf_path[k]);
    }
  }
  std::vector<Value> result_values;
  value_leaves(request.result, result_values);
  std::vector<const Leaf*> result_leaves;
  leaves_of(w.root().result, result_leaves);
  if (result_values.size() != result_leaves.size()) throw ExportError("internal: the result's leaves disagree");
  for (size_t k = 0; k < result_leaves.size(); ++k) {
    files.push_back({"check/expected/" + result_names[k] + ".npy", leaf_npy(*result_leaves[k], result_values[k])});
    output_lines.push_back(result_names[k]);
  }

  // The lists, one line each.
  auto list = [](const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& l : lines) out += fmt::format("- `{}`\n", l);
    return out.empty() ? std::string("(none)\n") : out;
  };
  const std::string readme = fmt::format(
      "# `{}` as a C program\n\n"
      "Written by `{}`{}.\n\n"
      "A standalone C11 program: the host program of one call of `{}` at the dimensions and types it was compiled "
      "for, its kernels as quire's native backend compiles them, and a runtime. It needs a C compiler, libc and "
      "libm, nothing else.\n\n"
      "```\nmake                 # builds ./program\n./program INPUTS OUTPUTS\nmake check           # runs it on "
      "check/inputs and compares each output with check/expected, byte for byte\n```\n\n"
      "`check/expected` holds what quire's native backend computed on `check/inputs`; `make check` passes only when "
      "every output file is the same bytes. Under AddressSanitizer, each allocation on its own: `make clean check "
      "CFLAGS=\"-O1 -g -fsanitize=address,undefined -DQUIRE_NO_ARENA\"`.\n\n"
      "## Memory\n\nOne arena of {} bytes holds every value the call stores, each at a fixed offset for its life "
      "(placed greedy by size, as `quire memory` places its arena; at most {} bytes live at once): {} allocations in "
      "the order the program makes them, each checked against that schedule as it runs. The inputs are read into "
      "memory of their own.\n\n"
      "## Inputs\n\nEach is `INPUTS/<name>.npy`, little-endian, in C order, of the shape it was exported for: `<f8` "
      "or `<f4` for reals (rounded to their type on reading), `<i8`, `<i4` or `|b1` for integers and booleans, a "
      "key as two `<i8` words, a host scalar as a 0-d `<f8`.\n\n{}\n"
      "## Outputs\n\nEach is written as `OUTPUTS/<name>.npy`: `<f8` for f64, `<f4` for f32, bf16 and f16 (each "
      "value exact in f32), `<i8` for integers and booleans.\n\n{}",
      entry.name, request.command,
      request.read.empty() ? std::string() : fmt::format(", which read {}", fmt::join(request.read, ", ")), entry.name,
      arena.bytes, arena.peak, arena.sizes.size(), list(input_lines), list(output_lines));
  files.insert(files.begin() + 6, {"README.md", readme});
  return files;
}

}  // namespace quire::exports
