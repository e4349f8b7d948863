#include "quire/precision/measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "quire/exact/exact_interpreter.h"
#include "quire/interp/inputs.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/params.h"

namespace quire::precision {

namespace {


/// acc = max(acc, v), a NaN on either side winning.
void raise(double& acc, double v) {
  if (std::isnan(acc)) return;
  if (std::isnan(v) || v > acc) acc = v;
}

/// The real leaves of both values side by side (tuples in order).
void pair_leaves(const interp::Value& a, const exact::ExactValue& b, double& worst, int depth) {
  if (depth > 64) return;
  if (a.kind == interp::Value::Kind::Tuple && b.kind == exact::ExactValue::Kind::Tuple) {
    if (a.elements.size() != b.elements.size()) throw std::logic_error("internal: outputs of different arity");
    for (size_t i = 0; i < a.elements.size(); ++i) pair_leaves(a.elements[i], b.elements[i], worst, depth + 1);
    return;
  }
  if (a.kind == interp::Value::Kind::Params && b.kind == exact::ExactValue::Kind::Params && a.params && b.params) {
    for (const auto& [path, t] : *a.params) {
      auto it = b.params->find(path);
      if (it == b.params->end() || !t.is_real()) continue;
      if (static_cast<size_t>(t.size()) != it->second.elems.size()) throw std::logic_error("internal: leaves differ");
      for (size_t i = 0; i < it->second.elems.size(); ++i) {
        const exact::Big& y = it->second.elems[i];
        raise(worst, exact::abs(exact::sub(exact::Big(t.reals[i], y.bits()), y)).to_double());
      }
    }
    return;
  }
  if (a.kind != interp::Value::Kind::Tensor || b.kind != exact::ExactValue::Kind::Tensor || !a.tensor.is_real() ||
      !b.is_real)
    return;
  if (a.tensor.reals.size() != b.real.elems.size()) throw std::logic_error("internal: outputs of different sizes");
  for (size_t i = 0; i < b.real.elems.size(); ++i) {
    const exact::Big& y = b.real.elems[i];
    // The difference at the reference's precision, then rounded: |y − y*| is
    // not the difference of two doubles.
    raise(worst, exact::abs(exact::sub(exact::Big(a.tensor.reals[i], y.bits()), y)).to_double());
  }
}

void magnitude_of(const exact::ExactValue& v, double& worst, int depth) {
  if (depth > 64) return;
  if (v.kind == exact::ExactValue::Kind::Tuple) {
    for (const exact::ExactValue& e : v.elements) magnitude_of(e, worst, depth + 1);
  } else if (v.kind == exact::ExactValue::Kind::Params && v.params) {
    for (const auto& [path, t] : *v.params)
      for (const exact::Big& x : t.elems) raise(worst, std::fabs(x.to_double()));
  } else if (v.kind == exact::ExactValue::Kind::Tensor && v.is_real) {
    for (const exact::Big& x : v.real.elems) raise(worst, std::fabs(x.to_double()));
  }
}

/// The parameter tree a vjp returns second.
const interp::ParamMap& gradient_tree(const interp::Value& v) {
  if (v.kind != interp::Value::Kind::Tuple || v.elements.size() < 2 ||
      v.elements[1].kind != interp::Value::Kind::Params || !v.elements[1].params)
    throw std::logic_error("internal: a vjp's result is not (L, ∂θ, …)");
  return *v.elements[1].params;
}

const exact::BigParamMap& gradient_tree(const exact::ExactValue& v) {
  if (v.kind != exact::ExactValue::Kind::Tuple || v.elements.size() < 2 ||
      v.elements[1].kind != exact::ExactValue::Kind::Params || !v.elements[1].params)
    throw std::logic_error("internal: a vjp's exact result is not (L, ∂θ, …)");
  return *v.elements[1].params;
}

/// √Σ of squares accumulated in long double: a gradient of 10⁷ elements
/// keeps its norm to a few ulps of a double; NaN and inf carry through.
struct SquareSum {
  long double sum = 0;
  void add(double x) { sum += static_cast<long double>(x) * static_cast<long double>(x); }
  double norm() const { return static_cast<double>(std::sqrt(sum)); }
};

}  // namespace

double GradientGap::gap(bool relative) const {
  if (!relative) return difference;
  if (reference == 0 && difference == 0) return 0;
  return difference / reference;
}

GradientGap gradient_gap(const interp::Value& realized, const exact::ExactValue& reference) {
  const interp::ParamMap& got = gradient_tree(realized);
  SquareSum difference, norm;
  for (const auto& [path, want] : gradient_tree(reference)) {
    auto it = got.find(path);
    if (it == got.end() || !it->second.is_real() || static_cast<size_t>(it->second.size()) != want.elems.size())
      throw std::logic_error(fmt::format("internal: the gradient's leaf `{}` differs from the reference's", path));
    for (size_t i = 0; i < want.elems.size(); ++i) {
      const exact::Big& y = want.elems[i];
      difference.add(exact::sub(exact::Big(it->second.reals[i], y.bits()), y).to_double());
      norm.add(y.to_double());
    }
  }
  return {difference.norm(), norm.norm()};
}

double gradient_norm(const exact::ExactValue& vjp_result) {
  SquareSum norm;
  for (const auto& [path, leaf] : gradient_tree(vjp_result))
    for (const exact::Big& x : leaf.elems) norm.add(x.to_double());
  return norm.norm();
}

double gradient_difference(const interp::Value& a, const interp::Value& b) {
  const interp::ParamMap& other = gradient_tree(b);
  SquareSum difference;
  for (const auto& [path, leaf] : gradient_tree(a)) {
    if (!leaf.is_real()) continue;
    auto it = other.find(path);
    if (it == other.end() || it->second.size() != leaf.size())
      throw std::logic_error(fmt::format("internal: two gradients differ at the leaf `{}`", path));
    // Two doubles' difference, rounded once: within an ulp of it, far below
    // the narrowing it measures.
    for (size_t i = 0; i < leaf.reals.size(); ++i) difference.add(leaf.reals[i] - it->second.reals[i]);
  }
  return difference.norm();
}

std::vector<std::vector<interp::Value>> envelope_samples(const elab::Program& prog, int entry, const Envelope& e,
                                                         int first, int count) {
  const core::Function& fn = prog.functions.at(static_cast<size_t>(entry));
  if (fn.name != e.entry)
    throw std::invalid_argument(fmt::format("the envelope is of `{}`, not of `{}`", e.entry, fn.name));
  if (count <= 0) return {};
  std::optional<std::string> inputs;
  if (!e.inputs_file.empty()) {
    if (first != 0 || count > 1)
      throw std::invalid_argument(fmt::format(
          "the envelope's one sample is the file {}: there are no other samples to draw", e.inputs_file));
    inputs = e.inputs_file;
  }
  std::optional<interp::ParamMap> params;
  if (!fn.args.empty() && fn.args[0].type.kind == elab::TypeKind::Params) {
    const elab::ParamsType& model = fn.args[0].type.params;
    params = e.params_file.empty() ? interp::init_params(prog, model, e.seed, e.dims)
                                   : interp::load_params(e.params_file, prog, model, e.dims);
  }
  std::vector<std::vector<interp::Value>> out;
  if (!e.samples_file.empty()) {
    const interp::SampleFile file = interp::SampleFile::read(e.samples_file);
    for (int k = first; k < first + count; ++k)
      out.push_back(interp::sample_arguments(prog, entry, params ? &*params : nullptr, e.dims, e.seed, file, k));
    return out;
  }
  for (int k = first; k < first + count; ++k)
    out.push_back(interp::entry_arguments(prog, entry, params ? &*params : nullptr, e.dims,
                                          e.seed + static_cast<uint64_t>(k), inputs));
  return out;
}

HeldOutSource held_out_source(const Envelope& e, int wanted) {
  HeldOutSource h;
  if (wanted <= 0) {
    h.none = fmt::format("--held-out {}", wanted);
    return h;
  }
  if (!e.inputs_file.empty()) {
    h.none = fmt::format("the envelope's one sample is the file {}", e.inputs_file);
    return h;
  }
  const int64_t first = e.samples;
  if (!e.samples_file.empty()) {
    const int64_t held = interp::SampleFile::read(e.samples_file).count;
    const int64_t left = std::max<int64_t>(held - first, 0);
    h.count = static_cast<int>(std::min<int64_t>(left, wanted));
    h.first = static_cast<uint64_t>(first);
    if (h.count < wanted)
      h.short_of = fmt::format("{} holds {} samples, {} calibrated", e.samples_file, held, first);
    if (h.count == 0) h.none = fmt::format("{}: every one of its {} samples was calibrated", e.samples_file, held);
    return h;
  }
  h.count = wanted;
  h.first = e.seed + static_cast<uint64_t>(first);
  return h;
}

std::vector<exact::ExactValue> exact_outputs(const elab::Program& prog, int entry,
                                             const std::map<std::string, int64_t>& dims,
                                             const std::vector<std::vector<interp::Value>>& samples, int bits) {
  exact::ExactInterpreter interp(prog, dims, bits);
  std::vector<exact::ExactValue> out;
  for (const auto& args : samples) out.push_back(interp.call(entry, args));
  return out;
}

double output_gap(const interp::Value& realized, const exact::ExactValue& reference) {
  double worst = 0;
  pair_leaves(realized, reference, worst, 0);
  return worst;
}

double output_magnitude(const exact::ExactValue& reference) {
  double worst = 0;
  magnitude_of(reference, worst, 0);
  return worst;
}

double Gaps::worst() const {
  double w = 0;
  for (double g : per_sample) raise(w, g);
  return w;
}

int Gaps::inside(double budget) const {
  int n = 0;
  for (double g : per_sample) n += g <= budget ? 1 : 0;
  return n;
}

Gaps measure_gaps(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                  const Realization& r, const std::vector<std::vector<interp::Value>>& samples,
                  const std::vector<exact::ExactValue>& reference) {
  if (samples.size() != reference.size()) throw std::logic_error("internal: samples and references differ in number");
  interp::Interpreter interp(prog, dims, &r);
  Gaps g;
  for (size_t k = 0; k < samples.size(); ++k) g.per_sample.push_back(output_gap(interp.call(entry, samples[k]), reference[k]));
  return g;
}

Gaps measure_gradient_gaps(const elab::Program& prog, int vjp, const std::map<std::string, int64_t>& dims,
                           const Realization& r, const std::vector<std::vector<interp::Value>>& samples,
                           const std::vector<exact::ExactValue>& reference, bool relative) {
  if (samples.size() != reference.size()) throw std::logic_error("internal: samples and references differ in number");
  interp::Interpreter interp(prog, dims, &r);
  Gaps g;
  for (size_t k = 0; k < samples.size(); ++k)
    g.per_sample.push_back(gradient_gap(interp.call(vjp, samples[k]), reference[k]).gap(relative));
  return g;
}

}  // namespace quire::precision
