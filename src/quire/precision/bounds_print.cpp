// The bounds' printout (`quire check --precision`) and their JSON.

#include "quire/precision/bounds_print.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "quire/precision/number_text.h"
#include "quire/support/text.h"

namespace quire::precision {

namespace {

constexpr int kComp = static_cast<int>(BoundRule::Componentwise);
constexpr int kRunning = static_cast<int>(BoundRule::Running);
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

namespace {

/// "1.95e10× the measured gap", or why there is no ratio.
std::string against(double bound, const std::optional<MeasuredGap>& measured) {
  if (!measured) return "";
  if (measured->gap == 0) return "  the measured gap is 0";
  return fmt::format("  {}× the measured gap", short_sci(bound / measured->gap));
}

std::string relative(double v, double magnitude) {
  if (magnitude == 0) return "";
  return fmt::format("  ({} relative)", short_sci(v / magnitude));
}

std::string seeds(uint64_t first, int count, const std::string& file) {
  const uint64_t last = first + static_cast<uint64_t>(count) - 1;
  if (!file.empty())
    return count == 1 ? fmt::format("sample {} of {}", first, file) : fmt::format("samples {}–{} of {}", first, last, file);
  if (count == 1) return fmt::format("seed {}", first);
  return fmt::format("seeds {}–{}", first, last);
}

/// Descending, NaN and +inf first.
bool larger(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && !std::isnan(b);
  return a > b;
}


}  // namespace

std::string print_bounds(const BoundsReport& b, int sites) {
  std::string out = fmt::format("check --precision: `{}` under {}\n", b.entry, b.label);
  if (b.tensor_output)
    out += fmt::format("  magnitude   {}  (the largest |{}| over the envelope's {})\n", sci(b.magnitude), b.result,
                       plural(b.samples, "sample", "samples"));
  else
    out += fmt::format("  magnitude   -  (the output {} is not one real tensor: the bounds are over its real leaves)\n",
                       b.result);
  for (int k = 0; k < kBoundRules; ++k) {
    const RuleBound& rule = b.rules[static_cast<size_t>(k)];
    out += fmt::format("  bound    {:<14} {}{}{}", bound_rule_name(static_cast<BoundRule>(k)), sci(rule.bound),
                       std::isfinite(rule.bound) ? relative(rule.bound, b.magnitude) : "",
                       std::isfinite(rule.bound) ? against(rule.bound, b.measured) : "");
    if (rule.infinite) out += fmt::format("  from {}: {}", rule.infinite->site, rule.infinite->why);
    out += "\n";
  }
  if (b.estimate)
    out += fmt::format("  estimate {:<14} {}{}{}\n", "first-order", sci(*b.estimate), relative(*b.estimate, b.magnitude),
                       against(*b.estimate, b.measured));
  else
    out += fmt::format("  estimate {:<14} absent: {}\n", "first-order", b.estimate_absent);
  const ProbabilisticEstimate& p = b.probabilistic;
  out += fmt::format("  estimate {:<14} {}{}{}  (confidence {:g} % under independent roundings)\n", "probabilistic",
                     sci(p.estimate), std::isfinite(p.estimate) ? relative(p.estimate, b.magnitude) : "",
                     std::isfinite(p.estimate) ? against(p.estimate, b.measured) : "", p.confidence * 100);
  if (b.measured)
    out += fmt::format(
        "  measured                {}{}  worst of {}, the typed interpreter against the exact reference at {} bits\n",
        sci(b.measured->gap), relative(b.measured->gap, b.magnitude), plural(b.measured->samples, "sample", "samples"),
        b.measured->bits);
  if (b.held_out)
    out += fmt::format("  held-out                {}{}  worst of {} ({})\n", sci(b.held_out->gap),
                       relative(b.held_out->gap, b.magnitude),
                       plural(b.held_out->samples, "fresh sample", "fresh samples"),
                       seeds(b.held_out->first_seed, b.held_out->samples, b.held_out->file));
  else if (b.measured && !b.held_out_absent.empty())
    out += fmt::format("  held-out                none: {}\n", b.held_out_absent);
  const std::string params = !b.params_file.empty() ? fmt::format("parameters from {}", b.params_file)
                                                    : fmt::format("parameters drawn from seed {}", b.seed);
  const std::string inputs = !b.inputs_file.empty() ? fmt::format(", inputs from {}", b.inputs_file) : "";
  out += fmt::format("  envelope    {}{}, {}, {}{}\n", b.envelope_path.empty() ? "" : b.envelope_path + ": ",
                     plural(b.samples, "sample", "samples"), plural(b.envelope_sites, "site", "sites"), params, inputs);

  std::vector<size_t> order(b.sites.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return larger(b.sites[x].bound[kComp], b.sites[y].bound[kComp]); });
  const size_t shown = std::min(order.size(), static_cast<size_t>(std::max(sites, 0)));
  if (shown > 0) {
    out += fmt::format("{:<28} {:>11} {:>14} {:>11} {:>11} {:>11}   {}\n", "site", "magnitude", "componentwise",
                       "relative", "running", "condition",
                       shown < order.size() ? fmt::format("(the {} largest bounds of {})", shown, order.size())
                                            : fmt::format("(every site, {} in all)", order.size()));
    for (size_t i = 0; i < shown; ++i) {
      const SiteBound& s = b.sites[order[i]];
      const double rel = s.magnitude > 0 ? s.bound[kComp] / s.magnitude : kNaN;
      out += fmt::format("{:<28} {:>11} {:>14} {:>11} {:>11} {:>11}\n", s.site, sci(s.magnitude),
                         sci(s.bound[kComp]), s.magnitude > 0 ? sci(rel) : "-",
                         std::isnan(s.bound[kRunning]) ? "-" : sci(s.bound[kRunning]),
                         s.condition ? sci(*s.condition) : "-");
    }
  }
  const std::string k_samples = plural(b.samples, "sample", "samples");
  if (b.measured) {
    // The tightest bound against the measurement, or why there is none.
    int best = -1;
    for (int k = 0; k < kBoundRules; ++k)
      if (std::isfinite(b.rules[static_cast<size_t>(k)].bound) &&
          (best < 0 || b.rules[static_cast<size_t>(k)].bound < b.rules[static_cast<size_t>(best)].bound))
        best = k;
    if (best >= 0) {
      const double bound = b.rules[static_cast<size_t>(best)].bound;
      out += fmt::format("The tightest bound ({}) is {}, conditional on the envelope's {}; the measured gap is {}{}.\n",
                         bound_rule_name(static_cast<BoundRule>(best)), sci(bound), k_samples, sci(b.measured->gap),
                         b.measured->gap > 0 ? fmt::format(", {}× under it", short_sci(bound / b.measured->gap)) : "");
    } else if (b.rules[kComp].infinite) {
      out += fmt::format("No rule bounds the error under this realization: {} ({}); the measured gap is {}.\n",
                         b.rules[kComp].infinite->site, b.rules[kComp].infinite->why, sci(b.measured->gap));
    }
  }
  out += fmt::format(
      "componentwise: a bound, for any input whose values stay within the envelope's magnitudes: every term of a sum "
      "is taken at its largest.\n");
  out +=
      "normwise: a bound under the same condition, carried in Frobenius norms (‖v‖ ≤ √n·max |v|); the output's "
      "norm bounds its largest error.\n";
  out += fmt::format(
      "cond: a bound for inputs no worse conditioned than the envelope's {}: a sum's rounding is bounded by its "
      "recorded condition number where that is smaller.\n",
      k_samples);
  out += fmt::format(
      "running: a bound for the envelope's own {}, not for other inputs: each element's error carried beside its "
      "exact value as a linear form over the run's roundings, a division by its own divisor.\n",
      k_samples);
  out +=
      "first-order: an estimate, not a bound, as `quire solve` makes it: each value's rounding in its realized "
      "type weighted element by element by ∂L/∂v, and each sum's accumulation.\n";
  out += fmt::format(
      "probabilistic: an estimate, not a bound: the running bound's roundings taken as independent and of mean "
      "zero, each output element within λ = {:.2f} times their root sum of squares; it holds with probability "
      "≥ {:g} % under that model (a union bound over {}).\n",
      p.lambda, p.confidence * 100,
      plural(static_cast<int64_t>(p.events), "output element", "output elements of the samples"));
  return out;
}

nlohmann::ordered_json bounds_json(const BoundsReport& b) {
  nlohmann::ordered_json j;
  j["format"] = "quire-bounds";
  j["version"] = 3;
  j["entry"] = b.entry;
  j["result"] = b.result;
  j["realization"] = b.label;
  j["magnitude"] = b.tensor_output ? json_number(b.magnitude) : nlohmann::ordered_json(nullptr);
  j["samples"] = b.samples;
  j["rules"] = nlohmann::ordered_json::object();
  for (int k = 0; k < kBoundRules; ++k) {
    const RuleBound& rule = b.rules[static_cast<size_t>(k)];
    nlohmann::ordered_json r;
    r["bound"] = json_number(rule.bound);
    r["covers"] = rule.covers;
    if (rule.infinite) r["infinite"] = {{"site", rule.infinite->site}, {"why", rule.infinite->why}};
    j["rules"][bound_rule_name(static_cast<BoundRule>(k))] = std::move(r);
  }
  if (b.estimate)
    j["estimate"] = json_number(*b.estimate);
  else {
    j["estimate"] = nullptr;
    j["estimate_absent"] = b.estimate_absent;
  }
  j["probabilistic"] = {{"estimate", json_number(b.probabilistic.estimate)},
                        {"confidence", b.probabilistic.confidence},
                        {"lambda", b.probabilistic.lambda},
                        {"events", b.probabilistic.events},
                        {"covers", b.probabilistic.covers}};
  auto gap = [](const MeasuredGap& g) {
    nlohmann::ordered_json o{
        {"gap", json_number(g.gap)}, {"samples", g.samples}, {"first_seed", g.first_seed}, {"bits", g.bits}};
    if (!g.file.empty()) o["file"] = g.file;
    return o;
  };
  if (b.measured) j["measured"] = gap(*b.measured);
  if (b.held_out) j["held_out"] = gap(*b.held_out);
  j["sites"] = nlohmann::ordered_json::array();
  for (const SiteBound& s : b.sites) {
    nlohmann::ordered_json site;
    site["site"] = s.site;
    site["function"] = s.function;
    site["op"] = s.op;
    site["type"] = s.type;
    site["elements"] = s.elements;
    site["evaluations"] = s.evaluations;
    site["magnitude"] = json_number(s.magnitude);
    for (int k = 0; k < kBoundRules; ++k)
      site[bound_rule_name(static_cast<BoundRule>(k))] = json_number(s.bound[static_cast<size_t>(k)]);
    if (s.condition) site["condition"] = json_number(*s.condition);
    if (s.infinite) site["infinite"] = {{"site", s.infinite->site}, {"why", s.infinite->why}};
    j["sites"].push_back(std::move(site));
  }
  return j;
}

}  // namespace quire::precision
