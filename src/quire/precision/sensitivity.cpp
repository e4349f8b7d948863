#include "quire/precision/sensitivity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "quire/core/printer.h"
#include "quire/exact/exact_interpreter.h"
#include "quire/grad/vjp.h"
#include "quire/precision/envelope.h"
#include "quire/precision/number_text.h"

namespace quire::precision {

namespace {

bool is_real_tensor(const elab::Type& t) { return t.is_tensor() && t.tensor.elem == elab::Elem::Real; }

static_assert(std::size(kWeightedTypes) == 1 + std::size(kCandidateTypes));

/// How many standard deviations of independent roundings a term allows
/// (weighted_term).
constexpr double kRoundingSigmas = 3;

/// Running sums at N bits: Σ|ct_i| and, per type of kWeightedTypes, the
/// sums weighted_term combines over a_i = ct_i·(fl_T(v_i) − v_i).
struct Totals {
  struct Weighted {
    exact::Big absolute, sum, squares;  ///< Σ|a_i|, Σa_i, Σa_i²
    explicit Weighted(int bits) : absolute(0.0, bits), sum(0.0, bits), squares(0.0, bits) {}
  };
  exact::Big l1;
  std::vector<Weighted> weighted;
  exact::Big accumulated;  ///< Σ|ct_i|·Σ_j|t_ij|, for sums and contractions

  explicit Totals(int bits)
      : l1(0.0, bits), weighted(std::size(kWeightedTypes), Weighted(bits)), accumulated(0.0, bits) {}

  /// One element: its cotangent and its exact value. An element no
  /// cotangent reaches adds nothing, its overflow included.
  void add(const exact::Big& ct, const exact::Big& v) {
    l1 = exact::add(l1, exact::abs(ct));
    if (ct.is_zero()) return;
    for (size_t k = 0; k < weighted.size(); ++k) {
      const exact::Big a = exact::mul(ct, signed_rounding_error(v, kWeightedTypes[k]));
      Weighted& w = weighted[k];
      w.absolute = exact::add(w.absolute, exact::abs(a));
      w.sum = exact::add(w.sum, a);
      w.squares = exact::add(w.squares, exact::mul(a, a));
    }
  }

  /// Per type: min(Σ|a_i|, max(|Σa_i|, 3·√Σa_i²)). |Σa_i| is the roundings'
  /// first-order effect on L for this input, their signs included; 3·√Σa_i²
  /// covers another input's roundings taken as independent and of either
  /// sign, three standard deviations; Σ|a_i|, every rounding with the sign
  /// that hurts, bounds both. An overflow (an infinite a_i) is +inf.
  WeightedRounding weighted_doubles() const {
    WeightedRounding out;
    for (size_t k = 0; k < weighted.size(); ++k) {
      const Weighted& w = weighted[k];
      const double absolute = w.absolute.to_double();
      if (!std::isfinite(absolute)) {
        out[kWeightedTypes[k]] = absolute;
        continue;
      }
      const double spread = kRoundingSigmas * std::sqrt(w.squares.to_double());
      out[kWeightedTypes[k]] = std::min(absolute, std::max(std::fabs(w.sum.to_double()), spread));
    }
    return out;
  }
};

/// Descending, NaN first; ties keep their order.
bool larger(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && !std::isnan(b);
  return a > b;
}

nlohmann::ordered_json weighted_json(const WeightedRounding& w) {
  nlohmann::ordered_json o = nlohmann::ordered_json::object();
  for (runtime::FloatType t : kWeightedTypes)
    if (auto it = w.find(t); it != w.end()) o[runtime::float_type_name(t)] = json_number(it->second);
  return o;
}

}  // namespace

double stored_term(const WeightedRounding& weighted, runtime::FloatType t, double l1, double rounding) {
  auto it = weighted.find(t);
  if (it != weighted.end()) return it->second;
  return l1 == 0 || rounding == 0 ? 0 : l1 * rounding;  // 0·inf is no error
}

double accumulation_term(double accumulated, int64_t terms, runtime::FloatType accumulator) {
  if (accumulated == 0) return 0;
  return std::sqrt(static_cast<double>(terms)) * runtime::float_type_info(accumulator).unit_roundoff * accumulated;
}

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
  // A vjp among its callees would need the vjp of a vjp, which quire does not
  // build (E0504): its reverse sweep would be left without cotangents.
  for (int f : core::reachable_functions(prog, entry))
    if (prog.functions[static_cast<size_t>(f)].primal >= 0)
      throw std::invalid_argument(fmt::format(
          "`{}` takes a gradient (through `{}`), and quire computes first derivatives only: its values have no "
          "∂L/∂v (to budget a gradient, solve its objective with --of gradient)",
          out.entry, prog.functions[static_cast<size_t>(f)].name));
  const int vjp = grad::vjp(prog, entry, grad::differentiable_args(prog.functions.at(static_cast<size_t>(entry))));
  const elab::Program& frozen = prog;  // no function is added while it runs

  // Σ|∂L/∂v_i| and the weighted roundings at N bits, by (function, value
  // number): the order sites are listed in.
  std::map<std::pair<int, int>, Totals> totals;
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
    // The vjp's arguments are the primal's then `ct`, and its body begins
    // with the primal's, one for one: the primal's %v is its %v among the
    // arguments and its %(v + 1) after them.
    const int primal_args = static_cast<int>(primal.args.size());
    for (int v = 1; v <= primal.value_count(); ++v) {
      if (!is_real_tensor(primal.type_of(v))) continue;
      auto [it, fresh] = totals.try_emplace({fn.primal, v}, bits);
      const int c = fn.cotangent_of[static_cast<size_t>(v)];
      if (!c) continue;
      const exact::ExactValue& ct = env.at(static_cast<size_t>(c));
      const exact::ExactValue& value = env.at(static_cast<size_t>(v <= primal_args ? v : v + 1));
      if (ct.kind != exact::ExactValue::Kind::Tensor || !ct.is_real || value.kind != exact::ExactValue::Kind::Tensor ||
          !value.is_real || ct.real.elems.size() != value.real.elems.size())
        throw std::logic_error(fmt::format("internal: the cotangent of {} in `{}` is not a real tensor of its shape",
                                           core::site_name(primal, v), fn.name));
      for (size_t i = 0; i < ct.real.elems.size(); ++i) it->second.add(ct.real.elems[i], value.real.elems[i]);
      if (v <= primal_args) continue;
      // The vjp's copy of the instruction reads the vjp's own numbering.
      const core::Instr& copy = fn.body.at(static_cast<size_t>(v - primal_args - 1));
      if (!exact::ExactInterpreter::adds_terms(copy.op)) continue;
      const exact::ExactValue absolute = interp.absolute_terms(fn, copy, env);
      if (absolute.real.elems.size() != ct.real.elems.size())
        throw std::logic_error(fmt::format("internal: Σ|terms| of {} has {} elements, its cotangent {}",
                                           core::site_name(primal, v), absolute.real.elems.size(),
                                           ct.real.elems.size()));
      for (size_t i = 0; i < ct.real.elems.size(); ++i)
        it->second.accumulated = exact::add(it->second.accumulated,
                                            exact::mul(exact::abs(ct.real.elems[i]), absolute.real.elems[i]));
    }
  });
  std::vector<interp::Value> vjp_args = args;
  vjp_args.push_back(interp::Value::of(runtime::Tensor::scalar(1.0)));
  const exact::ExactValue result = interp.call(vjp, vjp_args);

  for (const auto& [key, total] : totals) {
    const core::Function& fn = frozen.functions.at(static_cast<size_t>(key.first));
    out.sites.push_back({core::site_name(fn, key.second), fn.name, total.l1.to_double(), total.weighted_doubles(),
                         total.accumulated.to_double()});
  }
  // (L, ∂θ, …): θ's cotangent tree, leaf by leaf in declaration order.
  const core::Function& f = frozen.functions.at(static_cast<size_t>(entry));
  if (!f.args.empty() && f.args[0].type.kind == elab::TypeKind::Params && result.kind == exact::ExactValue::Kind::Tuple &&
      result.elements.size() > 1 && result.elements[1].params) {
    const exact::BigParamMap& grads = *result.elements[1].params;
    const interp::ParamMap* values = args.empty() ? nullptr : args[0].params.get();
    for (const auto& [path, type] : frozen.flatten(f.args[0].type.params)) {
      auto it = grads.find(path);
      if (it == grads.end()) continue;
      const runtime::RealStorage* leaf = nullptr;
      if (values)
        if (auto v = values->find(path); v != values->end() && v->second.is_real()) leaf = &v->second.reals;
      if (!leaf || leaf->size() != it->second.elems.size())
        throw std::logic_error(fmt::format("internal: the gradient of `{}` is not of its parameter's size", path));
      Totals total(bits);
      // A leaf's values are f64 values: its rounding at f64 is 0.
      for (size_t i = 0; i < leaf->size(); ++i) total.add(it->second.elems[i], exact::Big((*leaf)[i], bits));
      out.params.push_back({path, total.l1.to_double(), total.weighted_doubles()});
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
  auto raise_weighted = [&](WeightedRounding& acc, const WeightedRounding& more) {
    for (const auto& [type, v] : more) {
      auto [it, fresh] = acc.try_emplace(type, v);
      if (!fresh) raise(it->second, v);
    }
  };
  std::unordered_map<std::string, size_t> site_at, param_at;
  for (size_t i = 0; i < out.sites.size(); ++i) site_at.emplace(out.sites[i].site, i);
  for (size_t i = 0; i < out.params.size(); ++i) param_at.emplace(out.params[i].path, i);
  for (size_t k = 1; k < samples.size(); ++k) {
    for (const SiteSensitivity& site : samples[k].sites) {
      auto [it, fresh] = site_at.emplace(site.site, out.sites.size());
      if (fresh)
        out.sites.push_back(site);
      else {
        raise(out.sites[it->second].l1, site.l1);
        raise(out.sites[it->second].accumulated, site.accumulated);
        raise_weighted(out.sites[it->second].weighted, site.weighted);
      }
    }
    for (const ParamSensitivity& p : samples[k].params) {
      auto [it, fresh] = param_at.emplace(p.path, out.params.size());
      if (fresh)
        out.params.push_back(p);
      else {
        raise(out.params[it->second].l1, p.l1);
        raise_weighted(out.params[it->second].weighted, p.weighted);
      }
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
  j["version"] = 2;
  j["entry"] = s.entry;
  j["bits"] = s.bits;
  nlohmann::ordered_json sites = nlohmann::ordered_json::array();
  for (const SiteSensitivity& site : s.sites) {
    nlohmann::ordered_json o;
    o["site"] = site.site;
    o["function"] = site.function;
    o["l1"] = json_number(site.l1);
    o["weighted"] = weighted_json(site.weighted);
    if (site.accumulated != 0) o["accumulated"] = json_number(site.accumulated);
    sites.push_back(std::move(o));
  }
  j["sites"] = std::move(sites);
  nlohmann::ordered_json params = nlohmann::ordered_json::array();
  for (const ParamSensitivity& p : s.params)
    params.push_back({{"path", p.path}, {"l1", json_number(p.l1)}, {"weighted", weighted_json(p.weighted)}});
  j["params"] = std::move(params);
  return j;
}

}  // namespace quire::precision
