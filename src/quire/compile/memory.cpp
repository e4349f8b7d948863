#include "quire/compile/memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "quire/compile/build_host.h"
#include "quire/compile/memory_placement.h"
#include "quire/core/printer.h"

namespace quire::compile {

namespace {

const core::Instr* instr_at(const core::Function& fn, int value) {
  const int k = value - static_cast<int>(fn.args.size()) - 1;
  return k >= 0 && static_cast<size_t>(k) < fn.body.size() ? &fn.body[static_cast<size_t>(k)] : nullptr;
}

/// The executor's frames replayed on the host program (executor.cpp's
/// Executor::run and its walk of calls and folds, core/walk.h): the same
/// stores, releases and kept forwards, in the same order, with bytes for
/// values. Each `hold` is a point where the executor updates its peak.
class Replay {
 public:
  /// `prog` sizes each instance's value slots (its functions' value counts).
  Replay(const elab::Program& prog, const HostProgram& host, CallMemory& m) : host_(host), m_(m) {
    const size_t n = host.functions.size();
    bytes_.resize(n);
    released_.resize(n);
    own_peak_.assign(n, 0);
    runs_.assign(n, 0);
    depth_.assign(n, -1);
    for (size_t i = 0; i < n; ++i) {
      const HostFunction& h = host.functions[i];
      const core::Function& fn = prog.functions.at(static_cast<size_t>(h.function));
      bytes_[i].assign(static_cast<size_t>(fn.value_count()) + 1, 0);
      result_value_.push_back(fn.result_value);
      released_[i].resize(h.steps.size());
      for (const HostBuffer& b : h.buffers) {
        bytes_[i].at(static_cast<size_t>(b.value)) = b.bytes;
        if (b.value == fn.result_value) continue;  // a frame's result stays until it returns
        const int k = b.last_read >= 0 ? b.last_read : b.first_write;
        if (k >= 0 && static_cast<size_t>(k) < h.steps.size()) released_[i][static_cast<size_t>(k)].push_back(b.value);
      }
    }
  }

  void call() {
    run(host_.root, -1, false, nullptr, kNothingCarried, nullptr);
    // The arena: every stored value at one offset for its whole life.
    const Placement placement = place_by_size(lives_);
    m_.arena_bytes = placement.arena_bytes;
    for (size_t r = 0; r < lives_.size(); ++r)
      m_.placed.push_back({sites_[r].first, sites_[r].second, lives_[r], placement.offsets[r]});
    for (int id : order_) {
      const size_t i = static_cast<size_t>(id);
      m_.instances.push_back({id, depth_[i], runs_[i], 0, own_peak_[i]});
    }
    for (const PeakFrame& f : m_.peak_at)
      for (InstanceMemory& im : m_.instances)
        if (im.instance == f.instance) im.share = std::max(im.share, f.bytes);
  }

 private:
  /// A fold copy's result passed on as the next copy's carried argument:
  /// its bytes and its open life. None from a kept copy, whose frame holds
  /// its result until the keeper returns (the next copy shares it).
  struct Carried {
    int64_t bytes;
    int64_t life;  ///< index into lives_, or -1
  };
  static constexpr Carried kNothingCarried{0, -1};

  struct Active {
    int instance;
    int step = -1;
    int64_t copy = -1;
    bool reverse = false;
    int64_t live_at_entry = 0;
    const std::vector<int64_t>* counted = nullptr;  ///< the frame's bytes held, by value
  };

  /// After a store: the peak and each running frame's own peak.
  void observe(int value) {
    for (const Active& a : stack_) {
      int64_t& own = own_peak_[static_cast<size_t>(a.instance)];
      own = std::max(own, live_ - a.live_at_entry);
    }
    if (live_ <= m_.peak_bytes) return;
    m_.peak_bytes = live_;
    m_.kept_at_peak = kept_live_;
    m_.peak_value = value;
    m_.peak_at.clear();
    for (const Active& a : stack_) m_.peak_at.push_back({a.instance, a.step, a.copy, a.reverse, live_ - a.live_at_entry});
    // The largest values held now, largest first (the first held on ties).
    std::vector<LiveValue>& largest = m_.largest_at_peak;
    largest.clear();
    for (const Active& a : stack_)
      for (size_t v = 0; v < a.counted->size(); ++v) {
        const int64_t b = (*a.counted)[v];
        if (b <= 0 || (largest.size() == kLargestAtPeak && b <= largest.back().bytes)) continue;
        auto at = std::upper_bound(largest.begin(), largest.end(), b,
                                   [](int64_t x, const LiveValue& l) { return x > l.bytes; });
        largest.insert(at, {a.instance, static_cast<int>(v), b});
        if (largest.size() > kLargestAtPeak) largest.pop_back();
      }
  }

  /// Runs one frame of instance `id`; returns the bytes that outlive it (a
  /// kept frame's values and the forwards it kept in turn), which the frame
  /// that called it owns until it returns.
  /// `outliving` receives the lives (indices into lives_) that a kept frame
  /// leaves to the frame that called it.
  /// `carried_in` (a fold copy after the first): the previous copy's
  /// result, which this frame holds as its carried argument until that
  /// argument's last reader (the executor's fold moves it in); its life goes
  /// on. `carried_out`, when given, receives this frame's result to pass on
  /// so (its life left open), unless the frame is kept.
  int64_t run(int id, int64_t copy, bool reverse, std::vector<size_t>* outliving, Carried carried_in,
              Carried* carried_out) {
    if (stack_.size() > static_cast<size_t>(interp::kMaxCallDepth))
      throw std::logic_error("internal: the host program's calls nest deeper than the executor allows");
    const size_t i = static_cast<size_t>(id);
    const HostFunction& h = host_.functions.at(i);
    if (depth_[i] < 0) {
      depth_[i] = static_cast<int>(stack_.size());
      order_.push_back(id);
    }
    ++runs_[i];
    const bool kept = h.mode == FrameMode::Kept;
    std::vector<int64_t> counted(bytes_[i].size(), 0);
    if (carried_in.bytes > 0) {
      counted.at(kCarriedArgument) = carried_in.bytes;  // already live: the previous copy's result
      live_ += carried_in.bytes;
    }
    stack_.push_back({id, -1, copy, reverse, live_ - carried_in.bytes, &counted});
    int64_t owned = 0;  // kept forwards this frame's callees left behind
    std::vector<size_t> owned_lives;                      // their lives, ended when this frame ends
    std::vector<int64_t> life(bytes_[i].size(), -1);      // by value: its open life in lives_
    if (carried_in.life >= 0) life.at(kCarriedArgument) = carried_in.life;
    auto hold = [&](int v) {
      const int64_t b = bytes_[i].at(static_cast<size_t>(v));
      live_ += b - counted[static_cast<size_t>(v)];
      counted[static_cast<size_t>(v)] = b;
      int64_t& open = life[static_cast<size_t>(v)];
      if (b > 0 && open < 0) {
        open = static_cast<int64_t>(lives_.size());
        lives_.push_back({time_, -1, b});
        sites_.emplace_back(id, v);
      }
      ++time_;
      observe(v);
    };
    auto end_life = [&](int64_t r) {
      if (r >= 0) lives_[static_cast<size_t>(r)].end = time_;
    };
    for (size_t k = 0; k < h.steps.size(); ++k) {
      const HostStep& s = h.steps[k];
      stack_.back().step = static_cast<int>(k);
      ++m_.steps;
      switch (s.kind) {
        case HostStep::Kind::Kernel:
        case HostStep::Kind::Host:
          hold(s.value);
          break;
        case HostStep::Kind::Reference:
          for (int v : s.steps) hold(v);
          break;
        case HostStep::Kind::Call:
          owned += run(s.callee, -1, false, &owned_lives, kNothingCarried, nullptr);
          hold(s.value);
          break;
        case HostStep::Kind::Fold: {
          Carried carried = kNothingCarried;
          for (int64_t c = 0; c < s.count; ++c) {
            Carried next = kNothingCarried;
            owned += run(s.copies.at(static_cast<size_t>(c)), c, false, &owned_lives, carried,
                         c + 1 < s.count ? &next : nullptr);
            carried = next;
          }
          hold(s.value);
          break;
        }
        case HostStep::Kind::FoldVjp:
          // The forward again unless it was kept, then the vjps, last copy first.
          if (!s.copies.empty())
            for (int64_t c = 0; c < s.count; ++c)
              owned += run(s.copies.at(static_cast<size_t>(c)), c, false, &owned_lives, kNothingCarried, nullptr);
          for (int64_t c = s.count; c-- > 0;)
            owned += run(s.vjp_copies.at(static_cast<size_t>(c)), c, true, &owned_lives, kNothingCarried, nullptr);
          hold(s.value);
          break;
      }
      if (!kept)
        for (int v : released_[i][k]) {
          live_ -= counted[static_cast<size_t>(v)];
          counted[static_cast<size_t>(v)] = 0;
          end_life(life[static_cast<size_t>(v)]);
          life[static_cast<size_t>(v)] = -1;
        }
    }
    int64_t held = 0;
    for (int64_t b : counted) held += b;
    stack_.pop_back();
    if (kept && outliving) {
      kept_live_ += held;
      for (int64_t r : life)
        if (r >= 0) outliving->push_back(static_cast<size_t>(r));
      outliving->insert(outliving->end(), owned_lives.begin(), owned_lives.end());
      return held + owned;
    }
    if (carried_out && !kept) {
      const size_t result = static_cast<size_t>(result_value_[i]);
      *carried_out = {counted[result], life[result]};
      life[result] = -1;  // it goes on in the next copy
    }
    for (int64_t r : life) end_life(r);
    for (size_t r : owned_lives) end_life(static_cast<int64_t>(r));
    if (kept) {  // the entry's own frame kept: everything ends with the call
      kept_live_ += held;
      return held + owned;
    }
    live_ -= held + owned;
    kept_live_ -= owned;
    return 0;
  }

  const HostProgram& host_;
  CallMemory& m_;
  std::vector<int> result_value_;  ///< by instance: its function's result value
  std::vector<std::vector<int64_t>> bytes_;
  std::vector<std::vector<std::vector<int>>> released_;
  std::vector<int64_t> own_peak_, runs_;
  std::vector<int> depth_;
  std::vector<int> order_;
  std::vector<Active> stack_;
  int64_t live_ = 0;
  int64_t kept_live_ = 0;
  int64_t time_ = 0;                           ///< store events so far: the clock of the lives
  std::vector<Lifetime> lives_;                ///< every stored value's life, in store order
  std::vector<std::pair<int, int>> sites_;     ///< by life: (instance, value)
};

int64_t element_bytes(runtime::FloatType t) { return runtime::float_type_info(t).storage_bits / 8; }

/// The result's tensors: a tuple's made in the entry's frame, element by element.
int64_t result_bytes(const core::Function& fn, const HostFunction& h, int value, int depth = 0) {
  if (depth > 64) return 0;
  for (const HostBuffer& b : h.buffers)
    if (b.value == value && b.kind != interp::Value::Kind::Tuple) return b.bytes;
  const core::Instr* in = instr_at(fn, value);
  if (!in || in->op != core::Op::MakeTuple) return 0;
  int64_t sum = 0;
  for (int a : in->args) sum += result_bytes(fn, h, a, depth + 1);
  return sum;
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
  return fmt::format("`{}` ({})", core::site_name(fn, m.peak_value), in ? core::op_info(in->op).spelling : "argument");
}

}  // namespace

CallMemory count_call_memory(const elab::Program& prog, const CompiledProgram& compiled) {
  const HostProgram& host = compiled.host;
  CallMemory m;
  if (compiled.realization)
    for (const precision::ParamStorage& p : compiled.realization->params) {
      auto& [elements, bytes] = m.parameters_by_type[p.stored];
      elements += p.elements;
      bytes += p.elements * element_bytes(p.stored);
      m.parameter_elements += p.elements;
      m.parameter_bytes += p.elements * element_bytes(p.stored);
    }
  for (const interp::Value& a : host.arguments) {
    if (a.kind == interp::Value::Kind::Params) {
      if (!compiled.realization && a.params)
        for (const auto& [path, t] : *a.params) {
          auto& [elements, bytes] = m.parameters_by_type[runtime::FloatType::F64];
          elements += t.size();
          bytes += t.size() * 8;
          m.parameter_elements += t.size();
          m.parameter_bytes += t.size() * 8;
        }
      m.input_bytes += m.parameter_bytes;
    } else if (a.kind == interp::Value::Kind::Tuple) {
      for (const interp::Value& e : a.elements) m.input_bytes += buffer_bytes(e);
    } else {
      m.input_bytes += buffer_bytes(a);
    }
  }
  const HostFunction& root = host.functions.at(static_cast<size_t>(host.root));
  const core::Function& entry = prog.functions.at(static_cast<size_t>(root.function));
  m.output_bytes = result_bytes(entry, root, entry.result_value);
  Replay(prog, host, m).call();
  return m;
}

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
      if (b.value == l.value)
        type = fmt::format("{}{}",
                           b.elem == runtime::ElemKind::Real ? runtime::float_type_name(b.type)
                                                             : runtime::elem_kind_name(b.elem),
                           runtime::shape_string(b.shape));
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
  out += "\n";
  for (const PeakFrame& f : m.peak_at) out += fmt::format("              in {}\n", frame_text(prog, host, f));
  out += fmt::format("  needs       {} bytes: the inputs and the peak\n", m.input_bytes + m.peak_bytes);
  out += fmt::format("  arena       {} bytes: the {} stored values at fixed offsets, greedy by size: {}\n",
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
  j["peak"] = {{"bytes", m.peak_bytes}, {"kept", m.kept_at_peak}, {"site", site}, {"at", at}};
  j["needs"] = m.input_bytes + m.peak_bytes;
  nlohmann::ordered_json placed = nlohmann::ordered_json::array();
  for (const PlacedValue& p : m.placed) {
    const HostFunction& h = host.functions.at(static_cast<size_t>(p.instance));
    placed.push_back({{"instance", p.instance},
                      {"site", core::site_name(prog.functions.at(static_cast<size_t>(h.function)), p.value)},
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
