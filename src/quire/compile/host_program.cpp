#include "quire/compile/host_program.h"

#include <fmt/format.h>

#include "quire/core/printer.h"

namespace quire::compile {

std::vector<std::vector<int>> released_after(const HostFunction& h, const core::Function& fn) {
  std::vector<std::vector<int>> released(h.steps.size());
  for (const HostBuffer& b : h.buffers) {
    if (b.value == fn.result_value) continue;
    const int k = b.last_read >= 0 ? b.last_read : b.first_write;
    if (k >= 0 && static_cast<size_t>(k) < h.steps.size()) released[static_cast<size_t>(k)].push_back(b.value);
  }
  return released;
}

const char* frame_mode_name(FrameMode m) {
  switch (m) {
    case FrameMode::Fused:
      return "fused";
    case FrameMode::Kept:
      return "kept";
    case FrameMode::Reusing:
      return "reusing";
  }
  return "?";
}

namespace {

const char* step_kind_name(HostStep::Kind k) {
  switch (k) {
    case HostStep::Kind::Kernel:
      return "kernel";
    case HostStep::Kind::Reference:
      return "reference";
    case HostStep::Kind::Call:
      return "call";
    case HostStep::Kind::Fold:
      return "fold";
    case HostStep::Kind::FoldVjp:
      return "fold_vjp";
    case HostStep::Kind::Host:
      return "host";
    case HostStep::Kind::Library:
      return "library";
  }
  return "?";
}

std::string buffer_type(const HostBuffer& b) {
  switch (b.kind) {
    case interp::Value::Kind::Tensor:
      return fmt::format(
          "{}{}",
          b.elem == runtime::ElemKind::Real ? runtime::float_type_name(b.type) : runtime::elem_kind_name(b.elem),
          runtime::shape_string(b.shape));
    case interp::Value::Kind::Key:
      return "key";
    case interp::Value::Kind::Tuple:
      return "tuple";
    case interp::Value::Kind::Params:
      return "params";
    case interp::Value::Kind::Host:
      return "host";
  }
  return "?";
}

/// "#3" or "#3 (copy 0), #4 (copies 1–7)": the instances of a fold's copies, in runs.
std::string copies_text(const std::vector<int>& copies) {
  std::string out;
  for (size_t i = 0; i < copies.size();) {
    size_t j = i;
    while (j + 1 < copies.size() && copies[j + 1] == copies[i]) ++j;
    if (!out.empty()) out += ", ";
    if (i == 0 && j + 1 == copies.size()) return fmt::format("#{}", copies[i]);
    out += i == j ? fmt::format("#{} (copy {})", copies[i], i) : fmt::format("#{} (copies {}–{})", copies[i], i, j);
    i = j + 1;
  }
  return out;
}

std::string values_text(const core::Function& fn, const std::vector<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ", ") + (v < 0 ? std::string("scratch") : fn.value_name(v));
  return out;
}

}  // namespace

std::string print_host(const elab::Program& prog, const HostProgram& host) {
  std::string out = fmt::format(
      "-- the host program of `{}`: {} instances, {} kernels; per call {} kernel launches, {} instructions on the "
      "reference kernels\n",
      prog.functions.at(static_cast<size_t>(host.entry)).name, host.functions.size(), host.catalog->kernels().size(),
      host.kernel_launches, host.reference_launches);
  for (size_t i = 0; i < host.functions.size(); ++i) {
    const HostFunction& h = host.functions[i];
    const core::Function& fn = prog.functions.at(static_cast<size_t>(h.function));
    std::string dims;
    for (const std::string& d : fn.dims)
      if (auto it = h.dims.find(d); it != h.dims.end())
        dims += fmt::format("{}{}={}", dims.empty() ? "" : ", ", d, it->second);
    out += fmt::format(
        "\n#{} {}{}{}{}: {}{}, {} evaluation{} a call\n", i, fn.name, dims.empty() ? "" : "{" + dims + "}",
        h.signature.empty() ? "" : " " + h.signature,
        h.context == core::Numerics::Default ? "" : fmt::format(" in {}", core::numerics_name(h.context)),
        frame_mode_name(h.mode),
        h.mode == FrameMode::Reusing ? fmt::format(" #{} (its first {} instructions)", h.reused_from, h.first) : "",
        h.evaluations, h.evaluations == 1 ? "" : "s");
    for (size_t k = 0; k < h.steps.size(); ++k) {
      const HostStep& s = h.steps[k];
      const std::string value = fn.value_name(s.value);
      std::string what;
      switch (s.kind) {
        case HostStep::Kind::Kernel:
          what = fmt::format("k{}({})", s.kernel, values_text(fn, s.inputs));
          break;
        case HostStep::Kind::Reference:
          what = fmt::format("reference kernels ({}): {}", s.why, values_text(fn, s.steps));
          break;
        case HostStep::Kind::Call:
          what = fmt::format("call #{}({})", s.callee, values_text(fn, s.reads));
          break;
        case HostStep::Kind::Fold:
          what = fmt::format("fold {} × {}({})", s.count, copies_text(s.copies), values_text(fn, s.reads));
          break;
        case HostStep::Kind::FoldVjp:
          what = fmt::format("fold_vjp {} × {}{}({})", s.count,
                             s.copies.empty() ? std::string() : "forward " + copies_text(s.copies) + ", then ",
                             copies_text(s.vjp_copies), values_text(fn, s.reads));
          break;
        case HostStep::Kind::Host:
          // As Core prints it: the host runs the instruction itself.
          what = core::print_instr(prog, fn,
                                   fn.body.at(static_cast<size_t>(s.value - static_cast<int>(fn.args.size()) - 1)));
          break;
        case HostStep::Kind::Library:
          what = fmt::format("library kernel {}({})", library_kernel_name(s.library), values_text(fn, s.reads));
          break;
      }
      out += fmt::format("  s{:<3} {} = {}\n", k, value, what);
    }
    out += "  buffers:";
    int listed = 0;
    for (const HostBuffer& b : h.buffers) {
      if (b.kind != interp::Value::Kind::Tensor) continue;
      out += fmt::format("{}{} {} {} B [{}, {}]", listed++ % 4 == 0 ? "\n    " : "; ", fn.value_name(b.value),
                         buffer_type(b), b.bytes,
                         b.first_write < 0 ? std::string("in") : fmt::format("s{}", b.first_write),
                         b.last_read < 0                                   ? std::string("unread")
                         : b.last_read == static_cast<int>(h.steps.size()) ? std::string("out")
                                                                           : fmt::format("s{}", b.last_read));
    }
    out += listed == 0 ? " none\n" : "\n";
  }
  return out;
}

nlohmann::ordered_json host_json(const elab::Program& prog, const HostProgram& host) {
  nlohmann::ordered_json j;
  j["entry"] = prog.functions.at(static_cast<size_t>(host.entry)).name;
  j["root"] = host.root;
  j["kernel_launches"] = host.kernel_launches;
  j["reference_launches"] = host.reference_launches;
  j["library_launches"] = host.library_launches;
  nlohmann::ordered_json kernels = nlohmann::ordered_json::array();
  for (size_t k = 0; k < host.catalog->kernels().size(); ++k) {
    const kernel::KernelRecord& r = host.catalog->kernels()[k];
    kernels.push_back({{"id", k}, {"launches", host.launches.at(k)}, {"sites", r.sites}, {"text", r.text}});
  }
  j["kernels"] = std::move(kernels);
  nlohmann::ordered_json functions = nlohmann::ordered_json::array();
  for (const HostFunction& h : host.functions) {
    const core::Function& fn = prog.functions.at(static_cast<size_t>(h.function));
    nlohmann::ordered_json f;
    f["function"] = fn.name;
    f["signature"] = h.signature;
    f["context"] = core::numerics_name(h.context);
    f["mode"] = frame_mode_name(h.mode);
    if (h.mode == FrameMode::Reusing) {
      f["reused_from"] = h.reused_from;
      f["skipped"] = h.first;
    }
    f["dims"] = h.dims;
    f["evaluations"] = h.evaluations;
    if (!h.library_why_not.empty()) f["library_why_not"] = h.library_why_not;
    nlohmann::ordered_json steps = nlohmann::ordered_json::array();
    for (const HostStep& s : h.steps) {
      nlohmann::ordered_json st{{"kind", step_kind_name(s.kind)}, {"site", core::site_name(fn, s.value)}};
      if (s.kind == HostStep::Kind::Kernel) {
        st["kernel"] = s.kernel;
        st["inputs"] = s.inputs;
      }
      if (s.kind == HostStep::Kind::Reference) st["why"] = s.why;
      if (s.kind == HostStep::Kind::Library) st["library"] = library_kernel_name(s.library);
      if (!s.steps.empty()) st["steps"] = s.steps;
      if (s.kind == HostStep::Kind::Call) st["callee"] = s.callee;
      if (s.kind == HostStep::Kind::Fold || s.kind == HostStep::Kind::FoldVjp) {
        st["count"] = s.count;
        st["copies"] = s.copies;
      }
      if (s.kind == HostStep::Kind::FoldVjp) st["vjp_copies"] = s.vjp_copies;
      st["reads"] = s.reads;
      steps.push_back(std::move(st));
    }
    f["steps"] = std::move(steps);
    nlohmann::ordered_json buffers = nlohmann::ordered_json::array();
    for (const HostBuffer& b : h.buffers) {
      if (b.kind != interp::Value::Kind::Tensor) continue;
      buffers.push_back({{"value", b.value},
                         {"type", buffer_type(b)},
                         {"bytes", b.bytes},
                         {"first_write", b.first_write},
                         {"last_read", b.last_read}});
    }
    f["buffers"] = std::move(buffers);
    functions.push_back(std::move(f));
  }
  j["functions"] = std::move(functions);
  return j;
}

std::string print_kernels(const elab::Program& prog, const HostProgram& host) {
  std::string out = host.catalog->print(host.launches, host.kernel_launches, host.reference_launches);
  // The library functions: each instance one library kernel, or its lines and why.
  std::string library;
  for (const HostFunction& h : host.functions) {
    const core::Function& fn = prog.functions.at(static_cast<size_t>(h.function));
    const std::string name = fmt::format("{}{} ({})", fn.name, h.signature.empty() ? "" : " " + h.signature,
                                         frame_mode_name(h.mode));
    if (h.steps.size() == 1 && h.steps[0].kind == HostStep::Kind::Library) {
      const HostStep& s = h.steps[0];
      std::vector<runtime::Shape> shapes;
      for (int v : s.reads) shapes.push_back(h.buffers.at(static_cast<size_t>(v - 1)).shape);
      library += fmt::format("  {}: one library kernel, {} evaluation{} a call: {}\n", name, h.evaluations,
                             h.evaluations == 1 ? "" : "s", library_launch_text(s.library, shapes));
    } else if (!h.library_why_not.empty()) {
      library += fmt::format("  {}: its lines, not the library kernel: {}\n", name, h.library_why_not);
    }
  }
  if (!library.empty())
    out += fmt::format("\n-- library kernels: {} launch{} a call\n{}", host.library_launches,
                       host.library_launches == 1 ? "" : "es", library);
  return out;
}

}  // namespace quire::compile
