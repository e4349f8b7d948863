#include "quire/compile/memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "quire/core/printer.h"

namespace quire::compile {

namespace {

const core::Instr* instr_at(const core::Function& fn, int value) {
  const int k = value - static_cast<int>(fn.args.size()) - 1;
  return k >= 0 && static_cast<size_t>(k) < fn.body.size() ? &fn.body[static_cast<size_t>(k)] : nullptr;
}

std::string instance_name(const elab::Program& prog, const HostProgram& host, int id) {
  const HostFunction& h = host.functions.at(static_cast<size_t>(id));
  const std::string& name = prog.functions.at(static_cast<size_t>(h.function)).name;
  return h.mode == FrameMode::Fused ? fmt::format("`{}`", name) : fmt::format("`{}` ({})", name, frame_mode_name(h.mode));
}

std::string dims_text(const std::map<std::string, int64_t>& dims) {
  std::string out;
  for (const auto& [k, v] : dims) out += fmt::format("{}{} = {}", out.empty() ? "" : ", ", k, v);
  return out.empty() ? "no dimensions" : out;
}

/// "`Tower.apply` #2 step 4 (copy 0 of the fold)": one frame on the way to the peak.
std::string frame_text(const elab::Program& prog, const HostProgram& host, const PeakFrame& f) {
  const HostFunction& h = host.functions.at(static_cast<size_t>(f.instance));
  std::string out = fmt::format("{} #{} step {} of {}", instance_name(prog, host, f.instance), f.instance, f.step,
                                h.steps.size());
  if (f.copy >= 0) out += fmt::format(", iteration {}{}", f.copy, f.reverse ? " of the reverse sweep" : "");
  return out;
}

/// "the peak exactly" or "4.8 % over the peak" (offsets aligned to 64 bytes count in it).
std::string arena_excess(const CallMemory& m) {
  if (m.arena_bytes == m.peak_bytes || m.peak_bytes == 0) return "the peak exactly";
  return fmt::format("{:.1f} % over the peak",
                     100.0 * static_cast<double>(m.arena_bytes - m.peak_bytes) / static_cast<double>(m.peak_bytes));
}

std::string site_text(const elab::Program& prog, const HostProgram& host, const CallMemory& m) {
  if (m.peak_at.empty()) return "none";
  const HostFunction& h = host.functions.at(static_cast<size_t>(m.peak_at.back().instance));
  const core::Function& fn = prog.functions.at(static_cast<size_t>(h.function));
  const core::Instr* in = instr_at(fn, m.peak_value);
  return fmt::format("`{}` ({}){}", core::site_name(fn, m.peak_value), in ? core::op_info(in->op).spelling : "argument",
                     m.peak_leaf.empty() ? "" : fmt::format(", its leaf `{}`", m.peak_leaf));
}

}  // namespace

std::optional<std::string> memory_limit_refusal(const elab::Program& prog, const CompiledProgram& compiled,
                                                const CallMemory& m, int64_t limit, const std::string& what,
                                                int64_t extra, const std::string& extra_what) {
  const int64_t needs = m.input_bytes + m.peak_bytes + extra;
  if (needs <= limit) return std::nullopt;
  const HostProgram& host = compiled.host;
  std::string out = fmt::format("{} needs {} bytes, over --memory-limit {}: its inputs {} (the parameters {}), "
                                "its peak {} at {}",
                                what, needs, limit, m.input_bytes, m.parameter_bytes, m.peak_bytes,
                                site_text(prog, host, m));
  if (host.remat == interp::Remat::Store && m.kept_at_peak > 0)
    out += fmt::format(" ({} of them kept for a reverse sweep)", m.kept_at_peak);
  if (extra > 0) out += fmt::format(", {} {}", extra_what, extra);
  out += "\nthe largest values live at the peak:";
  for (const LiveValue& l : m.largest_at_peak) {
    const HostFunction& h = host.functions.at(static_cast<size_t>(l.instance));
    const core::Function& fn = prog.functions.at(static_cast<size_t>(h.function));
    const core::Instr* in = instr_at(fn, l.value);
    std::string type;
    for (const HostBuffer& b : h.buffers)
      if (b.value == l.value && l.leaf.empty())
        type = fmt::format("{}{}",
                           b.elem == runtime::ElemKind::Real ? runtime::float_type_name(b.type)
                                                             : runtime::elem_kind_name(b.elem),
                           runtime::shape_string(b.shape));
    if (!l.leaf.empty()) type = fmt::format("its leaf `{}`", l.leaf);
    out += fmt::format("\n  {:>12} bytes  `{}` ({}) {}", l.bytes, core::site_name(fn, l.value),
                       in ? core::op_info(in->op).spelling : "argument", type);
  }
  return out;
}

std::string print_call_memory(const elab::Program& prog, const CompiledProgram& compiled, const CallMemory& m,
                              const std::string& label) {
  const HostProgram& host = compiled.host;
  const core::Function& entry = prog.functions.at(static_cast<size_t>(host.entry));
  std::string out = fmt::format("quire memory: `{}` at {} in {}, remat {}: {} instances, {} steps, {} launches\n",
                                entry.name, dims_text(compiled.dims), label, interp::remat_name(host.remat),
                                host.functions.size(), m.steps, host.kernel_launches + host.reference_launches);
  std::string types;
  for (const auto& [t, eb] : m.parameters_by_type)
    types += fmt::format(", {} in {}", eb.first, runtime::float_type_name(t));
  out += fmt::format("  parameters  {} bytes: {} elements{}\n", m.parameter_bytes, m.parameter_elements, types);
  out += fmt::format("  inputs      {} bytes, the parameters among them\n", m.input_bytes);
  out += fmt::format("  outputs     {} bytes\n", m.output_bytes);
  out += fmt::format("  peak        {} bytes live, at {}", m.peak_bytes, site_text(prog, host, m));
  if (host.remat == interp::Remat::Store) out += fmt::format(", {} of them kept for a reverse sweep", m.kept_at_peak);
  if (m.output_at_peak > 0) out += fmt::format(", {} of them the result's", m.output_at_peak);
  out += "\n";
  for (const PeakFrame& f : m.peak_at) out += fmt::format("              in {}\n", frame_text(prog, host, f));
  out += fmt::format("  needs       {} bytes: the inputs and the peak\n", m.input_bytes + m.peak_bytes);
  out += fmt::format("  arena       {} bytes: the {} blocks at fixed offsets, greedy by size: {}\n",
                     m.arena_bytes, m.placed.size(), arena_excess(m));
  if (m.c_export && m.c_export->unavailable.empty())
    out += fmt::format(
        "  C export    {} bytes: the arena `quire export --target c` allocates, its {} allocations at fixed offsets "
        "(values at the widths the native backend holds them, conversions and product scratch among them; {} "
        "live at most)\n",
        m.c_export->bytes, m.c_export->allocations, m.c_export->peak);
  else if (m.c_export)
    out += fmt::format("  C export    none: {}\n", m.c_export->unavailable);
  out += "calls: their shares of the peak and their own peaks (bytes, their callees' included)\n";
  size_t width = 4;
  for (const InstanceMemory& im : m.instances)
    width = std::max(width, 2 * static_cast<size_t>(im.depth) + instance_name(prog, host, im.instance).size() + 5);
  out += fmt::format("  {:<{}} {:>6} {:>10} {:>10}\n", "call", width, "runs", "share", "own peak");
  for (const InstanceMemory& im : m.instances) {
    const std::string name = fmt::format("{}{} #{}", std::string(2 * static_cast<size_t>(im.depth), ' '),
                                         instance_name(prog, host, im.instance), im.instance);
    out += fmt::format("  {:<{}} {:>6} {:>10} {:>10}\n", name, width, im.runs, im.share, im.own_peak);
  }
  return out;
}

nlohmann::ordered_json call_memory_json(const elab::Program& prog, const CompiledProgram& compiled,
                                        const CallMemory& m, const std::string& label) {
  const HostProgram& host = compiled.host;
  nlohmann::ordered_json j;
  j["format"] = "quire-memory";
  j["version"] = 1;
  j["entry"] = prog.functions.at(static_cast<size_t>(host.entry)).name;
  j["dims"] = compiled.dims;
  j["realization"] = label;
  j["remat"] = interp::remat_name(host.remat);
  nlohmann::ordered_json by_type = nlohmann::ordered_json::object();
  for (const auto& [t, eb] : m.parameters_by_type)
    by_type[runtime::float_type_name(t)] = {{"elements", eb.first}, {"bytes", eb.second}};
  j["parameters"] = {{"bytes", m.parameter_bytes}, {"elements", m.parameter_elements}, {"by_type", by_type}};
  j["inputs"] = m.input_bytes;
  j["outputs"] = m.output_bytes;
  nlohmann::ordered_json at = nlohmann::ordered_json::array();
  for (const PeakFrame& f : m.peak_at) {
    const HostFunction& h = host.functions.at(static_cast<size_t>(f.instance));
    at.push_back({{"instance", f.instance},
                  {"function", prog.functions.at(static_cast<size_t>(h.function)).name},
                  {"mode", frame_mode_name(h.mode)},
                  {"step", f.step},
                  {"iteration", f.copy >= 0 ? nlohmann::ordered_json(f.copy) : nlohmann::ordered_json(nullptr)},
                  {"reverse", f.reverse},
                  {"bytes", f.bytes}});
  }
  std::string site;
  if (!m.peak_at.empty()) {
    const HostFunction& h = host.functions.at(static_cast<size_t>(m.peak_at.back().instance));
    site = core::site_name(prog.functions.at(static_cast<size_t>(h.function)), m.peak_value);
  }
  j["peak"] = {{"bytes", m.peak_bytes}, {"kept", m.kept_at_peak}, {"output", m.output_at_peak},
               {"site", site},         {"leaf", m.peak_leaf},     {"at", at}};
  j["needs"] = m.input_bytes + m.peak_bytes;
  nlohmann::ordered_json placed = nlohmann::ordered_json::array();
  for (const PlacedValue& p : m.placed) {
    const HostFunction& h = host.functions.at(static_cast<size_t>(p.instance));
    placed.push_back({{"instance", p.instance},
                      {"site", core::site_name(prog.functions.at(static_cast<size_t>(h.function)), p.value)},
                      {"leaf", p.leaf},
                      {"offset", p.offset},
                      {"bytes", p.life.bytes},
                      {"from", p.life.start},
                      {"to", p.life.end}});
  }
  j["arena"] = {{"bytes", m.arena_bytes}, {"alignment", kArenaAlignment}, {"values", placed}};
  if (m.c_export && m.c_export->unavailable.empty())
    j["c_export_arena"] = {{"bytes", m.c_export->bytes},
                           {"peak", m.c_export->peak},
                           {"allocations", m.c_export->allocations}};
  else if (m.c_export)
    j["c_export_arena"] = {{"unavailable", m.c_export->unavailable}};
  j["steps"] = m.steps;
  nlohmann::ordered_json calls = nlohmann::ordered_json::array();
  for (const InstanceMemory& im : m.instances) {
    const HostFunction& h = host.functions.at(static_cast<size_t>(im.instance));
    calls.push_back({{"instance", im.instance},
                     {"function", prog.functions.at(static_cast<size_t>(h.function)).name},
                     {"mode", frame_mode_name(h.mode)},
                     {"depth", im.depth},
                     {"runs", im.runs},
                     {"share", im.share},
                     {"own_peak", im.own_peak}});
  }
  j["calls"] = calls;
  return j;
}

}  // namespace quire::compile
