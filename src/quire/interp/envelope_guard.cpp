#include "quire/interp/envelope_guard.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "quire/core/printer.h"
#include "quire/runtime/element_scan.h"

namespace quire::interp {

EnvelopeGuard::EnvelopeGuard(const std::map<std::string, double>& limits, const elab::Program* prog) : prog_(prog) {
  for (const auto& [site, limit] : limits) {
    // core::site_name: "function/%id".
    const size_t at = site.rfind("/%");
    if (at == std::string::npos || at + 2 >= site.size())
      throw std::invalid_argument(fmt::format("`{}` is not a site name (function/%n)", site));
    size_t used = 0;
    const int id = std::stoi(site.substr(at + 2), &used);
    if (used != site.size() - at - 2) throw std::invalid_argument(fmt::format("`{}` is not a site name", site));
    limits_[site.substr(0, at)][id] = limit;
  }
}

void EnvelopeGuard::observe(const core::Function& fn, const core::Instr& in, const Value& v) {
  // A vjp's copy of a forward value is checked as its primal's site; the
  // reverse sweep's values as their own (a gradient budget decides them).
  const auto [site_fn, site_in] =
      prog_ ? core::decision_instr(*prog_, fn, in) : std::pair<const core::Function*, const core::Instr*>{&fn, &in};
  auto f = limits_.find(site_fn->name);
  if (f == limits_.end()) return;
  auto it = f->second.find(site_in->id);
  if (it == f->second.end() || v.kind != Value::Kind::Tensor || !v.tensor.is_real()) return;
  const double magnitude = runtime::largest_magnitude(v.tensor.reals);
  if (magnitude <= it->second) return;  // a NaN compares false, and is counted
  ++count_;
  if (!first_)
    first_ = Exceeded{core::site_name(*site_fn, site_in->id), core::op_info(site_in->op).spelling, site_in->loc,
                      magnitude, it->second};
}

std::string exceeded_message(const EnvelopeGuard::Exceeded& e) {
  return fmt::format(
      "`{}` ({}) stored |v| = {:.4e}, beyond {:.4e}, the envelope's largest |v| times the headroom its type was "
      "chosen with: the realization's error budget does not cover this input",
      e.site, e.op, e.magnitude, e.limit);
}

}  // namespace quire::interp
