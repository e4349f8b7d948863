#include "quire/precision/realization.h"

#include <fmt/format.h>

#include <functional>
#include <map>
#include <set>

#include "quire/core/printer.h"

namespace quire::precision {

using core::Numerics;
using core::Op;

std::optional<Policy> parse_policy(std::string_view name) {
  if (name == "f64") return Policy::F64;
  if (name == "f32") return Policy::F32;
  if (name == "bf16") return Policy::BF16;
  if (name == "f16") return Policy::F16;
  return std::nullopt;
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::F64: return "f64";
    case Policy::F32: return "f32";
    case Policy::BF16: return "bf16";
    case Policy::F16: return "f16";
  }
  return "?";
}

FloatType policy_type(Policy p) {
  switch (p) {
    case Policy::F64: return FloatType::F64;
    case Policy::F32: return FloatType::F32;
    case Policy::BF16: return FloatType::BF16;
    case Policy::F16: return FloatType::F16;
  }
  return FloatType::F64;
}

const char* reason_name(Reason r) {
  switch (r) {
    case Reason::Policy: return "policy";
    case Reason::Island: return "island";
    case Reason::LibraryMark: return "library mark";
    case Reason::Region: return "region";
    case Reason::ParamMark: return "parameter mark";
    case Reason::Frozen: return "frozen";
    case Reason::Master: return "master";
    case Reason::Cast: return "cast";
    case Reason::OutRequest: return "out = f32";
    case Reason::Carried: return "carried";
    case Reason::Input: return "input";
  }
  return "?";
}

const FunctionRealization* Realization::find(int function, Numerics context) const {
  for (const FunctionRealization& f : functions)
    if (f.function == function && f.context == context) return &f;
  return nullptr;
}

int64_t Realization::param_bytes() const {
  int64_t total = 0;
  for (const ParamStorage& p : params) total += p.elements * runtime::float_type_info(p.stored).storage_bits / 8;
  return total;
}

namespace {

bool is_half(FloatType t) { return t == FloatType::BF16 || t == FloatType::F16; }
const char* name(FloatType t) { return runtime::float_type_name(t); }

bool is_real_tensor(const elab::Type& t) { return t.kind == elab::TypeKind::Tensor && t.tensor.elem == elab::Elem::Real; }

/// The widest of two storage types (f64 > f32 > f16 > bf16 in precision; for
/// the choice between the halves, the one with more significand bits).
FloatType wider(FloatType a, FloatType b) {
  return runtime::float_type_info(a).precision >= runtime::float_type_info(b).precision ? a : b;
}

class Realizer {
 public:
  Realizer(const elab::Program& prog, const RealizeOptions& options) : prog_(prog), options_(options) {
    out_.policy = options.policy;
    out_.half_intermediates = options.half_intermediates;
  }

  Realization run(int entry, const std::map<std::string, int64_t>& dims) {
    out_.entry = entry;
    const core::Function& fn = prog_.functions[entry];
    std::string prefix;
    bool has_params = !fn.args.empty() && fn.args[0].type.kind == elab::TypeKind::Params;
    walk(entry, Numerics::Default, has_params ? std::optional<std::string>("") : std::nullopt, 0);
    if (has_params) realize_params(fn.args[0].type.params, dims);
    return std::move(out_);
  }

 private:
  /// The type and reason a site takes in `mode` (its own mark, or the context's).
  std::pair<FloatType, Reason> mode_type(Numerics mode, bool from_prelude) const {
    FloatType p = policy_type(options_.policy);
    switch (mode) {
      case Numerics::High:
        return {is_half(p) ? FloatType::F32 : p, from_prelude ? Reason::LibraryMark : Reason::Island};
      case Numerics::RegionBf16: return {FloatType::BF16, Reason::Region};
      case Numerics::RegionF16: return {FloatType::F16, Reason::Region};
      case Numerics::Default: break;
    }
    return {p, Reason::Policy};
  }

  bool from_prelude(const core::Instr& in) const {
    for (const elab::FileInfo& f : prog_.files)
      if (f.id == in.loc.begin.file) return f.prelude;
    return false;
  }

  /// The parameter a Field instruction reads, when its tree's path is known.
  const elab::ParamInfo* param_decl(const core::Function& fn, const core::Instr& in) const {
    const elab::Type& tree = fn.type_of(in.args.at(0));
    if (tree.kind != elab::TypeKind::Params || tree.params.module < 0) return nullptr;
    for (const elab::ParamInfo& p : prog_.modules[tree.params.module].params)
      if (p.name == in.text) return &p;
    return nullptr;
  }

  FunctionRealization& realize_function(int f, Numerics context) {
    for (FunctionRealization& r : out_.functions)
      if (r.function == f && r.context == context) return r;
    const core::Function& fn = prog_.functions[f];
    FunctionRealization r;
    r.function = f;
    r.context = context;
    r.values.resize(fn.value_count() + 1);
    FloatType p = policy_type(options_.policy);
    for (const core::FnArg& a : fn.args) {
      if (!is_real_tensor(a.type)) continue;
      if (f == out_.entry) r.values[a.id] = SiteType{p, p, false, Reason::Input, "an argument of the entry, cast on entry"};
      else r.values[a.id] = SiteType{p, p, false, Reason::Carried, "an argument: the caller's value"};
    }
    // Values that read a `numerics high` parameter compute in f32.
    std::set<int> high_reads;
    for (const core::Instr& in : fn.body) {
      if (in.op == Op::Field && is_real_tensor(in.type)) {
        const elab::ParamInfo* decl = param_decl(fn, in);
        if (decl && decl->numerics_high) high_reads.insert(in.id);
      }
    }
    for (const core::Instr& in : fn.body) {
      if (!is_real_tensor(in.type)) continue;
      Numerics mode = in.numerics != Numerics::Default ? in.numerics : context;
      auto [type, reason] = mode_type(mode, from_prelude(in));
      SiteType st{type, type, false, reason, ""};
      const char* form = reason == Reason::Region ? "inside precision(…)" : reason == Reason::Island ? "inside numerics(high)"
                         : reason == Reason::LibraryMark ? "a library function's numerics(high)" : "the policy";
      st.why = fmt::format("{} under --precision {}", form, policy_name(options_.policy));
      bool region = mode == Numerics::RegionBf16 || mode == Numerics::RegionF16;
      st.read_down = region;
      switch (in.op) {
        case Op::Cast:
          if (auto t = runtime::parse_float_type(in.text)) {
            st = {*t, *t, false, Reason::Cast, fmt::format("`as {}`", in.text)};
          } else if (in.text == "f32acc") {
            st = {FloatType::F32, FloatType::F32, false, Reason::Cast, "`as f32acc`: the f32 accumulator is kept"};
          }
          break;
        case Op::Const:
        case Op::Real:
          // A scalar constant is not rounded to a half, as PyTorch keeps Python scalars wide.
          if (is_half(type)) {
            st.storage = st.accumulator = FloatType::F32;
            st.why = "a scalar constant stays f32 beside half values";
          }
          break;
        case Op::Field: {
          const elab::ParamInfo* decl = param_decl(fn, in);
          if (decl && decl->numerics_high && mode != Numerics::RegionBf16 && mode != Numerics::RegionF16) {
            st = {wider(type, FloatType::F32), FloatType::F32, false, Reason::ParamMark,
                  "a `numerics high` parameter: its master is read directly"};
          } else if (decl && is_half(type)) {
            st.why = fmt::format("the parameter's master cast down to {} once a step", name(type));
          }
          break;
        }
        case Op::Dot:
        case Op::Contract:
          // Products read half operands (autocast's rule) and accumulate in f32.
          if (is_half(type)) {
            st.read_down = true;
            st.accumulator = options_.half_intermediates ? type : FloatType::F32;
            if (in.text == "out=f32" && mode != Numerics::High) {
              st.storage = FloatType::F32;
              st.reason = Reason::OutRequest;
              st.why = fmt::format("{} operands, the f32 accumulator stored (`out = f32`)", name(type));
            }
          }
          break;
        case Op::Sum:
        case Op::Mean:
        case Op::LogSumExp:
        case Op::ReduceMax:
        case Op::ReduceMin:
          if (is_half(type)) st.accumulator = options_.half_intermediates ? type : FloatType::F32;
          break;
        case Op::Call:
        case Op::Fold:
        case Op::TupleGet:
          st.reason = Reason::Carried;
          st.why = in.op == Op::TupleGet ? "a tuple's element" : "the callee's result";
          break;
        default: break;
      }
      if (in.op != Op::Field && in.op != Op::Cast && st.reason != Reason::Carried && !region)
        for (int a : in.args)
          if (high_reads.count(a)) {
            st.storage = st.accumulator = wider(st.storage, FloatType::F32);
            st.read_down = false;
            st.reason = Reason::ParamMark;
            st.why = fmt::format("reads the `numerics high` parameter `{}`", fn.value_name(a));
          }
      r.values[in.id] = st;
    }
    out_.functions.push_back(std::move(r));
    return out_.functions.back();
  }

  /// Walks the calls from `f` in `context`, realizing each function reached and
  /// recording which type each parameter path is read in.
  void walk(int f, Numerics context, std::optional<std::string> theta_prefix, int depth) {
    if (f < 0 || depth > 256) return;
    std::string key = fmt::format("{}|{}|{}", f, static_cast<int>(context), theta_prefix.value_or("-"));
    if (!walked_.insert(key).second) return;
    realize_function(f, context);
    const core::Function& fn = prog_.functions[f];
    // Parameter-tree paths of this function's values.
    std::map<int, std::string> tree_path;
    if (theta_prefix && !fn.args.empty() && fn.args[0].type.kind == elab::TypeKind::Params) tree_path[1] = *theta_prefix;
    for (const core::Instr& in : fn.body) {
      Numerics mode = in.numerics != Numerics::Default ? in.numerics : context;
      if (in.op == Op::Field) {
        auto it = tree_path.find(in.args.at(0));
        if (it == tree_path.end()) continue;
        std::string path = it->second + in.text;
        if (in.type.kind == elab::TypeKind::Params) tree_path[in.id] = path + ".";
        else if (const FunctionRealization* r = out_.find(f, context); r && r->values[in.id])
          reads_[path].push_back({r->values[in.id]->storage, core::site_name(fn, in.id)});
        continue;
      }
      if ((in.op == Op::Call || in.op == Op::Fold) && in.callee >= 0) {
        std::optional<std::string> prefix;
        if (!in.args.empty()) {
          auto it = tree_path.find(in.args[0]);
          if (it != tree_path.end()) prefix = it->second;
        }
        walk(in.callee, mode, prefix, depth + 1);
        // A call's result is stored as its callee's result is.
        const core::Function& callee = prog_.functions[in.callee];
        FunctionRealization* caller = nullptr;
        for (FunctionRealization& r : out_.functions)
          if (r.function == f && r.context == context) caller = &r;
        const FunctionRealization* cr = out_.find(in.callee, mode);
        if (caller && cr && caller->values[in.id] && callee.result_value > 0 && cr->values[callee.result_value]) {
          caller->values[in.id]->storage = cr->values[callee.result_value]->storage;
          caller->values[in.id]->accumulator = caller->values[in.id]->storage;
          caller->values[in.id]->why = fmt::format("the result of {}", core::site_name(callee, callee.result_value));
        }
      }
    }
  }

  void realize_params(const elab::ParamsType& model, const std::map<std::string, int64_t>& dims) {
    auto types = prog_.flatten(model);
    auto decls = prog_.flatten_decls(model);
    FloatType p = policy_type(options_.policy);
    FloatType master = p == FloatType::F64 ? FloatType::F64 : FloatType::F32;
    for (size_t i = 0; i < types.size(); ++i) {
      ParamStorage s;
      s.path = types[i].first;
      s.frozen = decls[i]->frozen;
      s.numerics_high = decls[i]->numerics_high;
      s.elements = 1;
      for (const elab::Axis& a : types[i].second.axes) s.elements *= a.size.evaluate(dims).value_or(0);
      const auto& reads = reads_[s.path];
      if (s.frozen) {
        // Stored as its readers read it: the widest read type, if any reader reads it.
        FloatType widest = reads.empty() ? master : reads.front().first;
        std::string wide_site = reads.empty() ? "" : reads.front().second;
        for (const auto& [t, site] : reads)
          if (wider(t, widest) == t && t != widest) {
            widest = t;
            wide_site = site;
          }
        s.stored = widest;
        s.reason = Reason::Frozen;
        s.why = reads.empty() ? "frozen, and read nowhere: kept at the master type"
                : is_half(widest) ? fmt::format("frozen: every reader reads {}, so it is stored so (rounded once)", name(widest))
                                  : fmt::format("frozen: read in {} at {}", name(widest), wide_site);
      } else if (s.numerics_high) {
        s.stored = master;
        s.reason = Reason::ParamMark;
        s.why = "`numerics high`: its master is read directly";
      } else {
        s.stored = master;
        s.reason = Reason::Master;
        s.why = is_half(p) ? fmt::format("the trained master stays {}; reads are cast to {} once a step", name(master), name(p))
                           : fmt::format("the trained value, in the policy's {}", name(master));
      }
      out_.params.push_back(s);
    }
  }

  const elab::Program& prog_;
  RealizeOptions options_;
  Realization out_;
  std::set<std::string> walked_;
  std::map<std::string, std::vector<std::pair<FloatType, std::string>>> reads_;
};

}  // namespace

Realization realize(const elab::Program& prog, int entry, const RealizeOptions& options,
                    const std::map<std::string, int64_t>& dims) {
  Realizer r(prog, options);
  return r.run(entry, dims);
}

std::string print_realization(const elab::Program& prog, const Realization& r) {
  std::string out = fmt::format("realization of `{}` under --precision {}{}\n", prog.functions[r.entry].name,
                                policy_name(r.policy), r.half_intermediates ? " --half-intermediates" : "");
  out += fmt::format("{:<28} {:<10} {:<6} {:<6} {:<14} {}\n", "site", "op", "type", "acc", "reason", "why");
  for (const FunctionRealization& fr : r.functions) {
    const core::Function& fn = prog.functions[fr.function];
    if (fr.context != Numerics::Default)
      out += fmt::format("-- {} called inside {}\n", fn.name, core::numerics_name(fr.context));
    for (int id = 1; id <= fn.value_count(); ++id) {
      const auto& st = fr.values[id];
      if (!st) continue;
      bool is_arg = id <= static_cast<int>(fn.args.size());
      const char* op = is_arg ? "arg" : core::op_info(fn.body[id - fn.args.size() - 1].op).spelling;
      bool reduces = !is_arg && (core::op_info(fn.body[id - fn.args.size() - 1].op).reduction);
      out += fmt::format("{:<28} {:<10} {:<6} {:<6} {:<14} {}\n", core::site_name(fn, id), op, name(st->storage),
                         reduces ? name(st->accumulator) : "", reason_name(st->reason), st->why);
    }
  }
  if (!r.params.empty()) {
    out += fmt::format("{:<28} {:<6} {:>10} {:<14} {}\n", "parameter", "stored", "bytes", "reason", "why");
    for (const ParamStorage& p : r.params)
      out += fmt::format("{:<28} {:<6} {:>10} {:<14} {}\n", p.path, name(p.stored),
                         p.elements * runtime::float_type_info(p.stored).storage_bits / 8, reason_name(p.reason), p.why);
    out += fmt::format("parameters at rest: {} bytes\n", r.param_bytes());
  }
  return out;
}

nlohmann::ordered_json realization_json(const elab::Program& prog, const Realization& r) {
  nlohmann::ordered_json j;
  j["entry"] = prog.functions[r.entry].name;
  j["policy"] = policy_name(r.policy);
  j["half_intermediates"] = r.half_intermediates;
  j["sites"] = nlohmann::ordered_json::array();
  for (const FunctionRealization& fr : r.functions) {
    const core::Function& fn = prog.functions[fr.function];
    for (int id = 1; id <= fn.value_count(); ++id) {
      const auto& st = fr.values[id];
      if (!st) continue;
      bool is_arg = id <= static_cast<int>(fn.args.size());
      nlohmann::ordered_json s;
      s["site"] = core::site_name(fn, id);
      s["op"] = is_arg ? "arg" : core::op_info(fn.body[id - fn.args.size() - 1].op).spelling;
      s["type"] = name(st->storage);
      s["accumulator"] = name(st->accumulator);
      s["reason"] = reason_name(st->reason);
      s["why"] = st->why;
      if (fr.context != Numerics::Default) s["context"] = core::numerics_name(fr.context);
      j["sites"].push_back(s);
    }
  }
  j["params"] = nlohmann::ordered_json::array();
  for (const ParamStorage& p : r.params)
    j["params"].push_back({{"path", p.path},
                           {"stored", name(p.stored)},
                           {"reason", reason_name(p.reason)},
                           {"why", p.why},
                           {"elements", p.elements},
                           {"bytes", p.elements * runtime::float_type_info(p.stored).storage_bits / 8}});
  j["param_bytes"] = r.param_bytes();
  return j;
}

}  // namespace quire::precision
