#include "quire/precision/envelope.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "quire/core/printer.h"
#include "quire/core/type.h"
#include "quire/exact/exact_interpreter.h"
#include "quire/io/io_error.h"
#include "quire/precision/number_text.h"

namespace quire::precision {

using exact::Big;
using runtime::FloatType;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kTypes = std::size(kCandidateTypes);

/// acc = max(acc, v), where a NaN on either side wins (a NaN seen once stays).
void raise(double& acc, double v) {
  if (std::isnan(acc)) return;
  if (std::isnan(v) || v > acc) acc = v;
}

/// One site's running maxima over its evaluations.
struct Tally {
  const core::Function* fn = nullptr;
  const core::Instr* in = nullptr;
  int64_t elements = 0;
  double max_abs = 0;
  double min_abs = kInf;
  int64_t evaluations = 0;   // over all samples
  int64_t this_sample = 0;   // in the sample being run
  bool has_condition = false;
  int64_t terms = 0;
  double condition = 1;  // 0/0 = 1: an empty or all-zero sum is not ill-conditioned
  double rounding[kTypes] = {};
};

/// Σ|terms| / |Σ terms| of one result element, at N bits, rounded to a double.
double condition_of(const Big& absolute_sum, const Big& sum) {
  if (absolute_sum.is_nan() || sum.is_nan()) return kNaN;
  if (sum.is_zero()) return absolute_sum.is_zero() ? 1 : kInf;
  return exact::div(absolute_sum, exact::abs(sum)).to_double();  // inf/inf (an infinite term) is NaN
}

void measure(Tally& t, const exact::ExactValue& value, const exact::ExactValue* absolute) {
  const exact::BigTensor& x = value.real;
  t.elements = std::max(t.elements, x.size());
  for (size_t i = 0; i < x.elems.size(); ++i) {
    const Big& e = x.elems[i];
    const double magnitude = std::fabs(e.to_double());
    raise(t.max_abs, magnitude);
    if (std::isnan(magnitude) || magnitude < t.min_abs) t.min_abs = magnitude;
    for (size_t k = 0; k < kTypes; ++k) raise(t.rounding[k], rounding_error(e, kCandidateTypes[k]).to_double());
    if (absolute) raise(t.condition, condition_of(absolute->real.elems.at(i), e));
  }
}

/// The terms each result element of a sum or contraction adds: the same
/// reduction run on operands of ones counts them (a mean's is its count).
int64_t terms_per_element(exact::ExactInterpreter& interp, const core::Function& fn, const core::Instr& in,
                          const std::vector<exact::ExactValue>& env, const exact::ExactValue& value) {
  if (in.op == core::Op::Mean) {
    const int64_t out = value.real.size();
    return out == 0 ? 0 : env.at(static_cast<size_t>(in.args.at(0))).real.size() / out;
  }
  int64_t most = 0;
  for (const Big& x : interp.absolute_terms(fn, in, env, /*ones=*/true).real.elems)
    most = std::max<int64_t>(most, static_cast<int64_t>(x.to_double()));
  return most;
}

double relative_error(double error, double max_abs, FloatType t) {
  if (std::isnan(error) || std::isnan(max_abs)) return kNaN;
  if (std::isinf(error)) return kInf;
  if (error == 0) return 0;
  return error / (runtime::float_type_info(t).unit_roundoff * max_abs);
}

// ---------------------------------------------------------------------------
// JSON: numbers, with the non-finite ones as strings (JSON has none).


/// Reads one key of a JSON object, naming the key's path in any error.
using elab::kMaxElements;  // no tensor has more elements

struct Reader {
  const std::string& file;

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw io::IoError(file, fmt::format("key `{}`: {}", key, why));
  }
  const nlohmann::json& at(const nlohmann::json& obj, const std::string& name, const std::string& key) const {
    if (!obj.is_object()) fail(key, "expected an object around it");
    auto it = obj.find(name);
    if (it == obj.end()) fail(key, "missing");
    return *it;
  }
  double real(const nlohmann::json& v, const std::string& key) const {
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      if (s == "inf") return kInf;
      if (s == "-inf") return -kInf;
      if (s == "nan") return kNaN;
    }
    fail(key, "expected a number (or \"inf\", \"-inf\", \"nan\")");
  }
  int64_t integer(const nlohmann::json& v, const std::string& key) const {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}))
      fail(key, "expected an integer");
    return v.get<int64_t>();
  }
  /// An integer in [lo, hi]: counts and sizes are used to allocate and loop.
  int64_t count(const nlohmann::json& v, const std::string& key, int64_t lo, int64_t hi) const {
    const int64_t n = integer(v, key);
    if (n < lo || n > hi) fail(key, fmt::format("{} is outside [{}, {}]", n, lo, hi));
    return n;
  }
  /// A largest |x|, a rounding error, a ratio: ≥ 0, +inf or NaN (a measurement
  /// that met a NaN keeps it); a negative one would lower every bound built on it.
  double magnitude(const nlohmann::json& v, const std::string& key) const {
    const double x = real(v, key);
    if (x < 0) fail(key, fmt::format("{} is negative; a magnitude is ≥ 0", x));
    return x;
  }
  std::string text(const nlohmann::json& v, const std::string& key) const {
    if (!v.is_string()) fail(key, "expected a string");
    return v.get<std::string>();
  }
  /// {"f32": …, "bf16": …, "f16": …}: one number per candidate type.
  std::map<std::string, double> by_type(const nlohmann::json& v, const std::string& key) const {
    std::map<std::string, double> out;
    for (FloatType t : kCandidateTypes) {
      const std::string type = runtime::float_type_name(t);
      out[type] = magnitude(at(v, type, key + "." + type), key + "." + type);
    }
    return out;
  }
};

/// One number per candidate type, in kCandidateTypes' order.
nlohmann::ordered_json by_type_json(const std::map<std::string, double>& values) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (FloatType t : kCandidateTypes) {
    auto it = values.find(runtime::float_type_name(t));
    if (it != values.end()) out[it->first] = json_number(it->second);
  }
  return out;
}

// ---------------------------------------------------------------------------
// The printout.

std::string ratio_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return "inf";
  return fmt::format("{:.3f}", v);
}

/// Descending with NaN first (a NaN is the worst a maximum can be).
bool worse(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && !std::isnan(b);
  return a > b;
}

const char* plural(int64_t n, const char* one, const char* many) { return n == 1 ? one : many; }

}  // namespace

// ---------------------------------------------------------------------------

Big rounding_error(const Big& x, FloatType t) { return exact::abs(signed_rounding_error(x, t)); }

Big signed_rounding_error(const Big& x, FloatType t) {
  // T's values are the multiples of T's spacing at x that fit its exponent
  // range. Rather than narrowing MPFR's exponent range to T's and calling
  // mpfr_subnormalize (global, per-thread state), we round to that spacing
  // directly: x = m·2^e with 1/2 ≤ |m| < 1 (MPFR's convention), so x is a
  // normal number of T when e − 1 ≥ min_exp, with spacing 2^(e−p); below,
  // the spacing is the smallest subnormal's, 2^(min_exp + 1 − p). x / spacing
  // is a scaling by a power of two (exact), and rounding it to an integer,
  // ties to even (mpfr_rint, RNDN), is IEEE rounding to nearest; the integer
  // has at most p + 1 ≤ 25 bits, exact at N ≥ 53. A result beyond T's largest
  // finite value is an overflow: ±inf, and an infinite error. Otherwise
  // |r − x| ≤ spacing/2 is a multiple of x's last bit with fewer than N
  // significant bits, so the subtraction is exact too.
  const runtime::FloatTypeInfo& info = runtime::float_type_info(t);
  const int bits = x.bits();
  if (x.is_nan()) return x;
  if (mpfr_inf_p(x.get()) || x.is_zero()) return Big(bits);
  const long e = static_cast<long>(mpfr_get_exp(x.get()));
  const long spacing_exp = std::max<long>(e, info.min_exp + 1) - info.precision;
  Big r(bits);
  mpfr_mul_2si(r.get(), x.get(), -spacing_exp, MPFR_RNDN);
  mpfr_rint(r.get(), r.get(), MPFR_RNDN);
  mpfr_mul_2si(r.get(), r.get(), spacing_exp, MPFR_RNDN);
  if (mpfr_cmpabs(r.get(), Big(info.largest_finite, bits).get()) > 0) return Big(mpfr_signbit(x.get()) ? -kInf : kInf, bits);
  return exact::sub(r, x);
}

Envelope calibrate(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims,
                   const std::vector<std::vector<interp::Value>>& samples, int bits) {
  if (samples.empty()) throw std::invalid_argument("calibrate: no samples to run");
  exact::ExactInterpreter interp(prog, dims, bits);
  // Keyed by (function index, value number): the order the sites are listed in.
  std::map<std::pair<size_t, int>, Tally> tallies;
  interp.set_observer([&](const core::Function& fn, const core::Instr& in, const exact::ExactValue& value,
                          const std::vector<exact::ExactValue>& env) {
    if (value.kind != exact::ExactValue::Kind::Tensor || !value.is_real) return;
    const size_t function = static_cast<size_t>(&fn - prog.functions.data());
    Tally& t = tallies[{function, in.id}];
    t.fn = &fn;
    t.in = &in;
    t.this_sample += 1;
    if (!exact::ExactInterpreter::adds_terms(in.op)) return measure(t, value, nullptr);
    t.has_condition = true;
    if (t.terms == 0) t.terms = terms_per_element(interp, fn, in, env, value);
    const exact::ExactValue absolute = interp.absolute_terms(fn, in, env);
    if (absolute.real.elems.size() != value.real.elems.size())
      throw std::logic_error(fmt::format("internal: {}: Σ|terms| has {} elements, the sum {}",
                                         core::site_name(fn, in.id), absolute.real.elems.size(),
                                         value.real.elems.size()));
    measure(t, value, &absolute);
  });
  for (const std::vector<interp::Value>& args : samples) {
    interp.call(entry, args);
    for (auto& [key, t] : tallies) {
      t.evaluations = std::max(t.evaluations, t.this_sample);
      t.this_sample = 0;
    }
  }

  Envelope e;
  const core::Function& fn = prog.functions.at(static_cast<size_t>(entry));
  e.entry = fn.name;
  e.result = core::site_name(fn, fn.result_value);
  e.bits = bits;
  e.samples = static_cast<int>(samples.size());
  e.dims = dims;
  for (const auto& [key, t] : tallies) {
    SiteEnvelope s;
    s.site = core::site_name(*t.fn, t.in->id);
    s.function = t.fn->name;
    s.op = core::op_info(t.in->op).name;
    s.op_code = t.in->op;
    s.elements = t.elements;
    s.max_abs = t.max_abs;
    s.min_abs = t.elements == 0 ? 0 : t.min_abs;
    s.evaluations = t.evaluations;
    if (s.site == e.result) e.result_max_abs = s.max_abs;
    if (t.has_condition) {
      s.condition = t.condition;
      s.terms = t.terms;
    }
    for (size_t k = 0; k < kTypes; ++k) {
      const std::string name = runtime::float_type_name(kCandidateTypes[k]);
      s.rounding[name] = t.rounding[k];
      s.relative[name] = relative_error(t.rounding[k], t.max_abs, kCandidateTypes[k]);
    }
    e.sites.push_back(std::move(s));
  }
  // The parameter leaves, from the tree every sample shares.
  const std::vector<interp::Value>& first = samples.front();
  if (!fn.args.empty() && fn.args[0].type.kind == elab::TypeKind::Params && !first.empty() &&
      first[0].kind == interp::Value::Kind::Params && first[0].params) {
    for (const auto& [path, type] : prog.flatten(fn.args[0].type.params)) {
      auto it = first[0].params->find(path);
      if (it == first[0].params->end() || !it->second.is_real()) continue;
      ParamEnvelope p;
      p.path = path;
      p.elements = it->second.size();
      double rounding[kTypes] = {};
      for (double x : it->second.reals) {
        raise(p.max_abs, std::fabs(x));
        const Big exact(x, bits);
        for (size_t k = 0; k < kTypes; ++k) raise(rounding[k], rounding_error(exact, kCandidateTypes[k]).to_double());
      }
      for (size_t k = 0; k < kTypes; ++k) {
        const std::string name = runtime::float_type_name(kCandidateTypes[k]);
        p.rounding[name] = rounding[k];
        p.relative[name] = relative_error(rounding[k], p.max_abs, kCandidateTypes[k]);
      }
      e.params.push_back(std::move(p));
    }
  }
  return e;
}

const SiteEnvelope* Envelope::site(const std::string& name) const {
  for (const SiteEnvelope& s : sites)
    if (s.site == name) return &s;
  return nullptr;
}

const ParamEnvelope* Envelope::param(const std::string& path) const {
  for (const ParamEnvelope& p : params)
    if (p.path == path) return &p;
  return nullptr;
}

nlohmann::ordered_json envelope_json(const Envelope& e) {
  nlohmann::ordered_json j;
  j["format"] = "quire-envelope";
  j["version"] = 3;
  j["entry"] = e.entry;
  j["result"] = e.result;
  j["result_max_abs"] = json_number(e.result_max_abs);
  j["bits"] = e.bits;
  j["samples"] = e.samples;
  j["seed"] = e.seed;
  j["params_file"] = e.params_file;
  j["inputs_file"] = e.inputs_file;
  j["samples_file"] = e.samples_file;
  j["dims"] = nlohmann::ordered_json::object();
  for (const auto& [name, size] : e.dims) j["dims"][name] = size;
  j["unit_roundoff"] = nlohmann::ordered_json::object();
  for (FloatType t : kCandidateTypes)
    j["unit_roundoff"][runtime::float_type_name(t)] = runtime::float_type_info(t).unit_roundoff;
  j["sites"] = nlohmann::ordered_json::array();
  for (const SiteEnvelope& s : e.sites) {
    nlohmann::ordered_json site;
    site["site"] = s.site;
    site["function"] = s.function;
    site["op"] = s.op;
    site["elements"] = s.elements;
    site["max_abs"] = json_number(s.max_abs);
    site["min_abs"] = json_number(s.min_abs);
    site["evaluations"] = s.evaluations;
    if (s.condition) site["condition"] = json_number(*s.condition);
    if (s.terms) site["terms"] = *s.terms;
    site["rounding"] = by_type_json(s.rounding);
    site["relative"] = by_type_json(s.relative);
    j["sites"].push_back(std::move(site));
  }
  j["params"] = nlohmann::ordered_json::array();
  for (const ParamEnvelope& p : e.params) {
    nlohmann::ordered_json leaf;
    leaf["path"] = p.path;
    leaf["elements"] = p.elements;
    leaf["max_abs"] = json_number(p.max_abs);
    leaf["rounding"] = by_type_json(p.rounding);
    leaf["relative"] = by_type_json(p.relative);
    j["params"].push_back(std::move(leaf));
  }
  return j;
}

Envelope envelope_from_json(const nlohmann::json& j, const std::string& path) {
  const Reader r{path};
  if (!j.is_object()) r.fail("", "the envelope is not a JSON object");
  if (r.text(r.at(j, "format", "format"), "format") != "quire-envelope")
    r.fail("format", "not \"quire-envelope\": this is not an envelope from `quire calibrate`");
  const int64_t version = r.integer(r.at(j, "version", "version"), "version");
  if (version < 1 || version > 3) r.fail("version", "only versions 1 to 3 are read");
  Envelope e;
  e.entry = r.text(r.at(j, "entry", "entry"), "entry");
  if (version >= 2) {
    e.result = r.text(r.at(j, "result", "result"), "result");
    e.result_max_abs = r.magnitude(r.at(j, "result_max_abs", "result_max_abs"), "result_max_abs");
    e.params_file = r.text(r.at(j, "params_file", "params_file"), "params_file");
    e.inputs_file = r.text(r.at(j, "inputs_file", "inputs_file"), "inputs_file");
  }
  if (version >= 3) e.samples_file = r.text(r.at(j, "samples_file", "samples_file"), "samples_file");
  if (!e.inputs_file.empty() && !e.samples_file.empty())
    r.fail("samples_file", "an envelope's samples come from inputs_file or from samples_file, not both");
  e.bits = static_cast<int>(r.integer(r.at(j, "bits", "bits"), "bits"));
  if (e.bits < exact::kMinBits || e.bits > exact::kMaxBits)
    r.fail("bits", fmt::format("{} is outside [{}, {}]", e.bits, exact::kMinBits, exact::kMaxBits));
  e.samples = static_cast<int>(r.count(r.at(j, "samples", "samples"), "samples", 1, kMaxSamples));
  const nlohmann::json& seed = r.at(j, "seed", "seed");
  if (!seed.is_number_unsigned()) r.fail("seed", "expected a non-negative integer");
  e.seed = seed.get<uint64_t>();
  const nlohmann::json& dims = r.at(j, "dims", "dims");
  if (!dims.is_object()) r.fail("dims", "expected an object");
  // The bounds of --dim: an envelope's dims size every sample's tensors again.
  for (const auto& [name, size] : dims.items()) e.dims[name] = r.count(size, "dims." + name, 1, int64_t{1} << 40);
  const nlohmann::json& sites = r.at(j, "sites", "sites");
  if (!sites.is_array()) r.fail("sites", "expected an array");
  for (size_t i = 0; i < sites.size(); ++i) {
    const nlohmann::json& sj = sites[i];
    const std::string key = fmt::format("sites[{}]", i);
    auto field = [&](const char* name) -> const nlohmann::json& { return r.at(sj, name, key + "." + name); };
    SiteEnvelope s;
    s.site = r.text(field("site"), key + ".site");
    s.function = r.text(field("function"), key + ".function");
    s.op = r.text(field("op"), key + ".op");
    std::optional<core::Op> op = core::op_by_name(s.op);
    if (!op) r.fail(key + ".op", fmt::format("`{}` is not an operation of Core", s.op));
    s.op_code = *op;
    s.elements = r.count(field("elements"), key + ".elements", 0, kMaxElements);
    s.max_abs = r.magnitude(field("max_abs"), key + ".max_abs");
    if (version >= 2) {
      s.min_abs = r.magnitude(field("min_abs"), key + ".min_abs");
      s.evaluations = r.count(field("evaluations"), key + ".evaluations", 0, INT64_MAX);
    }
    if (sj.contains("condition")) {
      s.condition = r.real(sj["condition"], key + ".condition");
      // Σ|terms| / |Σ terms| is at least 1 (0/0 counts as 1), or +inf, or NaN.
      if (*s.condition < 1) r.fail(key + ".condition", fmt::format("{} is below 1, which no condition number is", *s.condition));
    }
    if (sj.contains("terms")) s.terms = r.count(sj["terms"], key + ".terms", 0, kMaxElements);
    s.rounding = r.by_type(field("rounding"), key + ".rounding");
    s.relative = r.by_type(field("relative"), key + ".relative");
    e.sites.push_back(std::move(s));
  }
  if (version >= 2) {
    const nlohmann::json& params = r.at(j, "params", "params");
    if (!params.is_array()) r.fail("params", "expected an array");
    for (size_t i = 0; i < params.size(); ++i) {
      const nlohmann::json& pj = params[i];
      const std::string key = fmt::format("params[{}]", i);
      auto field = [&](const char* name) -> const nlohmann::json& { return r.at(pj, name, key + "." + name); };
      ParamEnvelope p;
      p.path = r.text(field("path"), key + ".path");
      p.elements = r.count(field("elements"), key + ".elements", 0, kMaxElements);
      p.max_abs = r.magnitude(field("max_abs"), key + ".max_abs");
      p.rounding = r.by_type(field("rounding"), key + ".rounding");
      p.relative = r.by_type(field("relative"), key + ".relative");
      e.params.push_back(std::move(p));
    }
  }
  return e;
}

std::string print_envelope(const Envelope& e, int top) {
  const size_t shown = static_cast<size_t>(std::max(top, 0));
  std::vector<size_t> order(e.sites.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Sorts `order` by `less` (ties keep the sites' own order) and keeps the first `shown`.
  auto ranked = [&](std::vector<size_t> rows, auto less) {
    std::stable_sort(rows.begin(), rows.end(), [&](size_t a, size_t b) { return less(e.sites[a], e.sites[b]); });
    if (rows.size() > shown) rows.resize(shown);
    return rows;
  };
  // "the 10 sites with …" when the table is cut, "each …" when it is whole.
  auto which = [&](size_t total, const std::string& cut, const std::string& whole) {
    return total > shown ? fmt::format(fmt::runtime(cut), shown) : whole;
  };
  std::string out;

  out += fmt::format("calibrate: {} {} over {} {} of `{}` at {} bits; {}:\n", e.sites.size(),
                     plural(static_cast<int64_t>(e.sites.size()), "site", "sites"), e.samples,
                     plural(e.samples, "sample", "samples"), e.entry, e.bits,
                     which(e.sites.size(), "the {} with the largest |x|", "the largest |x| of each"));
  for (size_t i : ranked(order, [](const SiteEnvelope&a, const SiteEnvelope&b) { return worse(a.max_abs, b.max_abs); }))
    out += fmt::format("  {:<28} {:>11}\n", e.sites[i].site, sci(e.sites[i].max_abs));

  std::vector<size_t> sums;
  for (size_t i : order)
    if (e.sites[i].condition) sums.push_back(i);
  out += fmt::format("calibrate: {} {}; {}:\n", sums.size(),
                     plural(static_cast<int64_t>(sums.size()), "sum or contraction", "sums and contractions"),
                     which(sums.size(), "the {} worst condition numbers Σ|terms| / |Σ terms|",
                           "the worst condition number Σ|terms| / |Σ terms| of each"));
  for (size_t i :
       ranked(sums, [](const SiteEnvelope&a, const SiteEnvelope&b) { return worse(*a.condition, *b.condition); }))
    out += fmt::format("  {:<28} {:>11}\n", e.sites[i].site, sci(*e.sites[i].condition));

  // Ascending by bf16's error relative to its bound u·max|x|: the sites that
  // lose least in bf16 first (exact ones at 0); NaN last.
  auto bf16 = [](const SiteEnvelope& s) {
    auto it = s.relative.find("bf16");
    return it == s.relative.end() ? kNaN : it->second;
  };
  int64_t exact_in_bf16 = 0, below_tenth = 0;
  for (const SiteEnvelope& s : e.sites) {
    const double v = bf16(s);
    if (v == 0)
      ++exact_in_bf16;
    else if (v < 0.1)
      ++below_tenth;
  }
  out += fmt::format(
      "calibrate: the largest rounding error of each site's values: {} {}, {} exact in bf16, {} more below a tenth of "
      "u·max|x| there; {}:\n",
      e.sites.size(), plural(static_cast<int64_t>(e.sites.size()), "site", "sites"), exact_in_bf16, below_tenth,
      which(e.sites.size(), "the {} with the smallest bf16/(u·max|x|)", "by bf16/(u·max|x|), smallest first"));
  out += fmt::format("  {:<28} {:>11} {:>11} {:>11} {:>9}\n", "site", "max|x|", "f32", "bf16", "bf16/u|x|");
  auto error = [](const SiteEnvelope& s, const char* type) {
    auto it = s.rounding.find(type);
    return it == s.rounding.end() ? kNaN : it->second;
  };
  for (size_t i : ranked(order, [&](const SiteEnvelope&a, const SiteEnvelope&b) {
         const double x = bf16(a), y = bf16(b);
         if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
         return x < y;
       })) {
    const SiteEnvelope& s = e.sites[i];
    out += fmt::format("  {:<28} {:>11} {:>11} {:>11} {:>9}\n", s.site, sci(s.max_abs), sci(error(s, "f32")),
                       sci(error(s, "bf16")), ratio_text(bf16(s)));
  }
  return out;
}

}  // namespace quire::precision
