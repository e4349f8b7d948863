#include "quire/realize/realization_file.h"

#include <fmt/format.h>

#include <cmath>

#include "quire/core/printer.h"
#include "quire/io/io_error.h"
#include "quire/io/json_file.h"

namespace quire::precision {

std::map<std::string, double> DecisionRanges::limits() const {
  std::map<std::string, double> out;
  for (const auto& [site, magnitude] : sites) out.emplace(site, magnitude * headroom);
  return out;
}

const char* budget_of_name(BudgetOf of) {
  switch (of) {
    case BudgetOf::Output: return "output";
    case BudgetOf::Gradient: return "gradient";
  }
  return "?";
}

nlohmann::ordered_json realization_file_json(const std::string& entry, const Assignment& a,
                                             nlohmann::ordered_json report, const DecisionRanges* ranges,
                                             BudgetOf of) {
  nlohmann::ordered_json j;
  j["format"] = "quire-realization";
  j["version"] = 3;
  j["entry"] = entry;
  j["of"] = budget_of_name(of);
  j["policy"] = policy_name(a.policy);
  // Plain objects: their keys come sorted from the maps either way, and an
  // ordered_json object finds a key by a linear search (quadratic at 10^5 sites).
  nlohmann::json sites = nlohmann::json::object();
  for (const auto& [site, type] : a.sites) sites.emplace(site, runtime::float_type_name(type));
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [path, type] : a.params) params.emplace(path, runtime::float_type_name(type));
  nlohmann::json accumulators = nlohmann::json::object();
  for (const auto& [site, type] : a.accumulators) accumulators.emplace(site, runtime::float_type_name(type));
  j["decisions"] = {{"sites", std::move(sites)}, {"params", std::move(params)}, {"accumulators", std::move(accumulators)}};
  if (ranges) {
    nlohmann::json magnitudes = nlohmann::json::object();
    for (const auto& [site, magnitude] : ranges->sites) magnitudes.emplace(site, magnitude);
    j["ranges"] = {{"headroom", ranges->headroom}, {"sites", std::move(magnitudes)}};
  }
  j["report"] = std::move(report);
  return j;
}

RealizationFile read_realization_file(const std::string& path) {
  return realization_file_from_json(io::read_json(path), path);
}

RealizationFile realization_file_from_json(const nlohmann::json& j, const std::string& path) {
  auto fail = [&](const std::string& key, const std::string& why) {
    throw io::IoError(path, fmt::format("key `{}`: {}", key, why));
  };
  auto text_at = [&](const nlohmann::json& obj, const char* key, const std::string& where) {
    if (!obj.is_object() || !obj.contains(key)) fail(where, "missing");
    if (!obj[key].is_string()) fail(where, "expected a string");
    return obj[key].get<std::string>();
  };
  if (!j.is_object()) throw io::IoError(path, "the realization is not a JSON object");
  if (text_at(j, "format", "format") != "quire-realization")
    fail("format", "not \"quire-realization\": this is not a realization from `quire solve`");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() < 1 ||
      j["version"].get<int64_t>() > 3)
    fail("version", "only versions 1 to 3 are read");
  RealizationFile out;
  out.entry = text_at(j, "entry", "entry");
  if (j["version"].get<int64_t>() >= 3) {
    const std::string of = text_at(j, "of", "of");
    if (of == "gradient")
      out.of = BudgetOf::Gradient;
    else if (of != "output")
      fail("of", fmt::format("`{}` is neither \"output\" nor \"gradient\"", of));
  }
  const std::string policy = text_at(j, "policy", "policy");
  auto p = parse_policy(policy);
  if (!p) fail("policy", fmt::format("`{}` is not a policy (f64, f32, bf16, f16)", policy));
  out.assignment.policy = *p;
  if (!j.contains("decisions") || !j["decisions"].is_object()) fail("decisions", "missing, or not an object");
  const nlohmann::json& d = j["decisions"];
  for (const char* group : {"sites", "params"}) {
    if (!d.contains(group) || !d[group].is_object()) fail(fmt::format("decisions.{}", group), "missing, or not an object");
    auto& into = std::string(group) == "sites" ? out.assignment.sites : out.assignment.params;
    for (const auto& [name, type] : d[group].items()) {
      const std::string key = fmt::format("decisions.{}.{}", group, name);
      if (!type.is_string()) fail(key, "expected a type name");
      auto t = runtime::parse_float_type(type.get<std::string>());
      if (!t) fail(key, fmt::format("`{}` is not a float type (f64, f32, bf16, f16)", type.get<std::string>()));
      into[name] = *t;
    }
  }
  // Version 3's wide accumulators: each a site narrowed above, f32 or f64.
  if (d.contains("accumulators")) {
    if (!d["accumulators"].is_object()) fail("decisions.accumulators", "not an object");
    for (const auto& [site, type] : d["accumulators"].items()) {
      const std::string key = fmt::format("decisions.accumulators.{}", site);
      auto t = type.is_string() ? runtime::parse_float_type(type.get<std::string>()) : std::nullopt;
      if (!t || (*t != FloatType::F64 && *t != FloatType::F32)) fail(key, "expected f64 or f32");
      auto narrowed = out.assignment.sites.find(site);
      if (narrowed == out.assignment.sites.end() || narrowed->second == FloatType::F64)
        fail(key, "not a site the decisions narrow");
      out.assignment.accumulators[site] = *t;
    }
  }
  if (j["version"].get<int64_t>() >= 2 && j.contains("ranges")) {
    const nlohmann::json& r = j["ranges"];
    if (!r.is_object()) fail("ranges", "not an object");
    DecisionRanges ranges;
    if (!r.contains("headroom") || !r["headroom"].is_number()) fail("ranges.headroom", "missing, or not a number");
    ranges.headroom = r["headroom"].get<double>();
    if (!(ranges.headroom >= 1) || !std::isfinite(ranges.headroom)) fail("ranges.headroom", "must be a finite number ≥ 1");
    if (!r.contains("sites") || !r["sites"].is_object()) fail("ranges.sites", "missing, or not an object");
    for (const auto& [site, magnitude] : r["sites"].items()) {
      const std::string key = fmt::format("ranges.sites.{}", site);
      if (!out.assignment.sites.count(site)) fail(key, "not a site the decisions name");
      if (!magnitude.is_number() || !(magnitude.get<double>() >= 0) || !std::isfinite(magnitude.get<double>()))
        fail(key, "expected a finite magnitude ≥ 0");
      ranges.sites.emplace(site, magnitude.get<double>());
    }
    out.ranges = std::move(ranges);
  }
  return out;
}

std::map<std::string, SiteFreedom> site_freedoms(const elab::Program& prog, const Realization& base) {
  std::map<std::string, SiteFreedom> out;
  for (const FunctionRealization& fr : base.functions) {
    const core::Function& fn = prog.functions[fr.function];
    for (const core::Instr& in : fn.body) {
      const auto& st = fr.values[in.id];
      if (!st) continue;
      // A vjp's copy of a forward value is decided as its primal's site.
      SiteFreedom& f = out[core::decision_site(prog, fn, in)];
      switch (st->reason) {
        case Reason::Carried:
        case Reason::Input: continue;
        case Reason::Cast:
        case Reason::OutRequest:
          f.fixed = true;
          f.fixed_why = in.op == core::Op::Cast
                            ? fmt::format("an explicit `as {}`", core::cast_target_name(in.attr<core::attr::CastTo>().target))
                        : core::requested_out(in) == core::attr::ProductOut::Out::F64 ? "an explicit `out = f64`"
                                                                                       : "an explicit `out = f32`";
          break;
        case Reason::Region:
          f.fixed = true;
          f.fixed_why = fmt::format("inside {}: it stays in its half", core::numerics_name(fr.context == core::Numerics::Default ? in.numerics : fr.context));
          break;
        case Reason::Island:
        case Reason::LibraryMark:
        case Reason::ParamMark:
          f.at_least_f32 = true;
          f.floor_why = st->reason == Reason::ParamMark ? "it reads a `numerics high` parameter"
                        : st->reason == Reason::Island   ? "it is inside numerics(high)"
                                                         : "it is inside a library function's numerics(high)";
          break;
        default: break;
      }
      if (core::requested_out(in) == core::attr::ProductOut::Out::F32 && !f.fixed) {
        // Under a wide policy the request changes nothing; narrowed, it is a floor.
        f.at_least_f32 = true;
        f.floor_why = "`out = f32` asks for the f32 accumulator";
      }
      if (core::requested_out(in) == core::attr::ProductOut::Out::F64 && !f.fixed) {
        // Under f64 the request changes nothing, but it is a floor of f64: nothing to decide.
        f.fixed = true;
        f.fixed_why = "an explicit `out = f64`: the f64 accumulator is stored";
      }
      if (in.op == core::Op::Field) {
        f.fixed = true;
        f.fixed_why = "it reads a parameter, which is decided by its path";
      }
      f.stored = true;
    }
  }
  return out;
}

std::vector<std::string> check_assignment(const elab::Program& prog, int entry, const Assignment& a,
                                          const std::map<std::string, int64_t>& dims) {
  RealizeOptions options;
  options.policy = a.policy;
  const Realization base = realize(prog, entry, options, dims);
  const std::map<std::string, SiteFreedom> freedoms = site_freedoms(prog, base);
  const std::string entry_name = prog.functions[entry].name;
  std::vector<std::string> problems;
  for (const auto& [site, type] : a.sites) {
    auto it = freedoms.find(site);
    if (it == freedoms.end() || !it->second.stored) {
      problems.push_back(fmt::format("site `{}` is not a value `{}` stores{}", site, entry_name,
                                     it == freedoms.end() ? "" : " (it carries another site's value)"));
      continue;
    }
    const SiteFreedom& f = it->second;
    if (f.fixed)
      problems.push_back(fmt::format("site `{}` cannot be decided: {}", site, f.fixed_why));
    else if (f.at_least_f32 && is_half(type))
      problems.push_back(fmt::format("site `{}` cannot be {}: {}, which never goes below f32", site,
                                     runtime::float_type_name(type), f.floor_why));
  }
  std::map<std::string, core::Op> ops;  // each reached site's operation
  for (const FunctionRealization& fr : base.functions) {
    const core::Function& fn = prog.functions[fr.function];
    for (const core::Instr& in : fn.body) ops.emplace(core::decision_site(prog, fn, in), in.op);
  }
  for (const auto& [site, type] : a.accumulators) {
    auto op = ops.find(site);
    if (op == ops.end() || !core::op_info(op->second).reduction)
      problems.push_back(fmt::format("accumulator of `{}`: not a sum or contraction `{}` stores", site, entry_name));
  }
  for (const auto& [path, type] : a.params) {
    const ParamStorage* p = base.param(path);
    if (!p)
      problems.push_back(fmt::format("parameter `{}` is not in `{}`'s parameter tree", path, entry_name));
    else if (p->numerics_high && is_half(type))
      problems.push_back(fmt::format("parameter `{}` is `numerics high`: it cannot be {}", path,
                                     runtime::float_type_name(type)));
  }
  return problems;
}

}  // namespace quire::precision
