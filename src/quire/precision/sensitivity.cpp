#include "quire/precision/sensitivity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "quire/core/printer.h"
#include "quire/exact/exact_interpreter.h"
#include "quire/grad/vjp.h"
#include "quire/precision/number_text.h"

namespace quire::precision {

namespace {

bool is_real_tensor(const elab::Type& t) { return t.is_tensor() && t.tensor.elem == elab::Elem::Real; }

/// Descending, NaN first; ties keep their order.
bool larger(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && !std::isnan(b);
  return a > b;
}


}  // namespace

Sensitivities sensitivities(elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                            const std::vector<interp::Value>& args, int bits) {
  Sensitivities out;
  out.bits = bits;
  {
    const core::Function& f = prog.functions.at(static_cast<size_t>(entry));
    out.entry = f.name;
    if (!is_real_tensor(f.result) || !f.result.tensor.axes.empty() || f.result.tensor.rest)
      throw std::invalid_argument(fmt::format("`{}` does not return a scalar ℝ[]: it has no sensitivities", f.name));
  }
  const int vjp = grad::vjp(prog, entry, grad::differentiable_args(prog.functions.at(static_cast<size_t>(entry))));
  const elab::Program& frozen = prog;  // no function is added while it runs

  // Σ|∂L/∂v_i| at N bits, by (function, value number): the order sites are listed in.
  std::map<std::pair<int, int>, exact::Big> totals;
  exact::ExactInterpreter interp(frozen, dims, bits);
  interp.set_observer([&](const core::Function& fn, const core::Instr& in, const exact::ExactValue&,
                          const std::vector<exact::ExactValue>& env) {
    // At a vjp's last instruction every value it computed is in env, the
    // argument `ct` (the result's cotangent, or part of it) included: each
    // evaluation of a vjp is read once, there.
    if (fn.primal < 0 || &in != &fn.body.back()) return;
    const core::Function& primal = frozen.functions.at(static_cast<size_t>(fn.primal));
    if (fn.cotangent_of.size() != static_cast<size_t>(primal.value_count() + 1))
      throw std::logic_error(fmt::format("internal: `{}` records {} cotangents for {} values of `{}`", fn.name,
                                         fn.cotangent_of.size(), primal.value_count(), primal.name));
    for (int v = 1; v <= primal.value_count(); ++v) {
      if (!is_real_tensor(primal.type_of(v))) continue;
      auto [it, fresh] = totals.try_emplace({fn.primal, v}, exact::Big(0.0, bits));
      const int c = fn.cotangent_of[static_cast<size_t>(v)];
      if (!c) continue;
      const exact::ExactValue& ct = env.at(static_cast<size_t>(c));
      if (ct.kind != exact::ExactValue::Kind::Tensor || !ct.is_real)
        throw std::logic_error(fmt::format("internal: the cotangent of {} in `{}` is not a real tensor",
                                           core::site_name(primal, v), fn.name));
      for (const exact::Big& e : ct.real.elems) it->second = exact::add(it->second, exact::abs(e));
    }
  });
  std::vector<interp::Value> vjp_args = args;
  vjp_args.push_back(interp::Value::of(runtime::Tensor::scalar(1.0)));
  const exact::ExactValue result = interp.call(vjp, vjp_args);

  for (const auto& [key, total] : totals) {
    const core::Function& fn = frozen.functions.at(static_cast<size_t>(key.first));
    out.sites.push_back({core::site_name(fn, key.second), fn.name, total.to_double()});
  }
  // (L, ∂θ, …): θ's cotangent tree, leaf by leaf in declaration order.
  const core::Function& f = frozen.functions.at(static_cast<size_t>(entry));
  if (!f.args.empty() && f.args[0].type.kind == elab::TypeKind::Params && result.kind == exact::ExactValue::Kind::Tuple &&
      result.elements.size() > 1 && result.elements[1].params) {
    const exact::BigParamMap& grads = *result.elements[1].params;
    for (const auto& [path, type] : frozen.flatten(f.args[0].type.params)) {
      auto it = grads.find(path);
      if (it == grads.end()) continue;
      exact::Big total(0.0, bits);
      for (const exact::Big& e : it->second.elems) total = exact::add(total, exact::abs(e));
      out.params.push_back({path, total.to_double()});
    }
  }
  return out;
}

const SiteSensitivity* Sensitivities::site(const std::string& name) const {
  for (const SiteSensitivity& s : sites)
    if (s.site == name) return &s;
  return nullptr;
}

const ParamSensitivity* Sensitivities::param(const std::string& path) const {
  for (const ParamSensitivity& p : params)
    if (p.path == path) return &p;
  return nullptr;
}

Sensitivities largest_of(const std::vector<Sensitivities>& samples) {
  if (samples.empty()) throw std::invalid_argument("largest_of: no sensitivities");
  Sensitivities out = samples.front();
  auto raise = [](double& acc, double v) {
    if (std::isnan(acc)) return;
    if (std::isnan(v) || v > acc) acc = v;
  };
  std::unordered_map<std::string, size_t> site_at, param_at;
  for (size_t i = 0; i < out.sites.size(); ++i) site_at.emplace(out.sites[i].site, i);
  for (size_t i = 0; i < out.params.size(); ++i) param_at.emplace(out.params[i].path, i);
  for (size_t k = 1; k < samples.size(); ++k) {
    for (const SiteSensitivity& site : samples[k].sites) {
      auto [it, fresh] = site_at.emplace(site.site, out.sites.size());
      if (fresh)
        out.sites.push_back(site);
      else
        raise(out.sites[it->second].l1, site.l1);
    }
    for (const ParamSensitivity& p : samples[k].params) {
      auto [it, fresh] = param_at.emplace(p.path, out.params.size());
      if (fresh)
        out.params.push_back(p);
      else
        raise(out.params[it->second].l1, p.l1);
    }
  }
  return out;
}

std::string print_sensitivities(const Sensitivities& s, int top) {
  std::string out =
      fmt::format("-- sensitivity of `{}`: ‖∂L/∂v‖₁ at each site, one reverse sweep at {} bits\n", s.entry, s.bits);
  // Per function, in the order functions first appear, then by Σ.
  std::vector<std::pair<std::string, double>> functions;
  for (const SiteSensitivity& site : s.sites) {
    auto it = std::find_if(functions.begin(), functions.end(), [&](const auto& f) { return f.first == site.function; });
    if (it == functions.end())
      functions.push_back({site.function, site.l1});
    else
      it->second += site.l1;
  }
  std::stable_sort(functions.begin(), functions.end(),
                   [](const auto& a, const auto& b) { return larger(a.second, b.second); });
  // The headers' symbols are wider in bytes than on screen: padded by hand.
  out += fmt::format("{:<39}Σ ‖∂L/∂v‖₁\n", "module");
  for (const auto& [name, total] : functions) out += fmt::format("{:<33}{:>16}\n", name, sci(total));
  std::vector<const SiteSensitivity*> sites;
  for (const SiteSensitivity& site : s.sites) sites.push_back(&site);
  std::stable_sort(sites.begin(), sites.end(), [](const auto* a, const auto* b) { return larger(a->l1, b->l1); });
  if (top >= 0 && sites.size() > static_cast<size_t>(top)) sites.resize(static_cast<size_t>(top));
  out += fmt::format("\n{:<41}‖∂L/∂v‖₁\n", "site");
  for (const SiteSensitivity* site : sites) out += fmt::format("{:<33}{:>16}\n", site->site, sci(site->l1));
  return out;
}

nlohmann::ordered_json sensitivities_json(const Sensitivities& s) {
  nlohmann::ordered_json j;
  j["format"] = "quire-sensitivities";
  j["version"] = 1;
  j["entry"] = s.entry;
  j["bits"] = s.bits;
  nlohmann::ordered_json sites = nlohmann::ordered_json::array();
  for (const SiteSensitivity& site : s.sites) {
    nlohmann::ordered_json o;
    o["site"] = site.site;
    o["function"] = site.function;
    o["l1"] = json_number(site.l1);
    sites.push_back(std::move(o));
  }
  j["sites"] = std::move(sites);
  nlohmann::ordered_json params = nlohmann::ordered_json::array();
  for (const ParamSensitivity& p : s.params) params.push_back({{"path", p.path}, {"l1", json_number(p.l1)}});
  j["params"] = std::move(params);
  return j;
}

}  // namespace quire::precision
