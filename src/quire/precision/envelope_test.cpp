// The envelope: condition numbers of sums and contractions with known
// cancellation, magnitudes aggregated over calls, fold copies and samples,
// rounding errors against independent computations (double arithmetic and
// runtime::round_to), and the tutorial's envelope: complete, deterministic,
// and read back from its JSON unchanged.

#include "quire/precision/envelope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "quire/interp/inputs.h"
#include "quire/interp/interp_testing.h"
#include "quire/support/testing.h"
#include "quire/io/io_error.h"

namespace quire::precision {
namespace {

using quire::testing::read_text;

using exact::Big;
using interp::Value;
using interp::testing::Program;
using interp::testing::reals;
using runtime::FloatType;
using runtime::Tensor;

constexpr double kInf = std::numeric_limits<double>::infinity();

Value v(Tensor t) { return Value::of(std::move(t)); }

Envelope run(const Program& p, const std::string& name, const std::vector<std::vector<Value>>& samples,
             int bits = 128) {
  return calibrate(p.prog(), p.index(name), p.dims, samples, bits);
}

/// The one site of `function` whose op is `op` (a test failure if not exactly one).
const SiteEnvelope& only(const Envelope& e, const std::string& function, const std::string& op) {
  const SiteEnvelope* found = nullptr;
  int count = 0;
  for (const SiteEnvelope& s : e.sites)
    if (s.function == function && s.op == op) {
      found = &s;
      ++count;
    }
  EXPECT_EQ(count, 1) << "sites of " << function << " with op " << op;
  if (!found) throw std::runtime_error("no such site");
  return *found;
}

// ---------------------------------------------------------------------------
// Condition numbers.

TEST(EnvelopeCondition, SumWithCancellation) {
  Program p("fn f(x : ℝ[3]) -> ℝ[] = sum(x)\n");
  const Envelope e = run(p, "f", {{v(reals({3}, {1e8, 1, -1e8}))}});
  const SiteEnvelope& s = only(e, "f", "sum");
  ASSERT_TRUE(s.condition.has_value());
  EXPECT_EQ(*s.condition, 200000001.0);  // (1e8 + 1 + 1e8) / |1|
  EXPECT_EQ(s.max_abs, 1.0);
  EXPECT_EQ(s.elements, 1);
}

TEST(EnvelopeCondition, ZeroSumsAndMeans) {
  Program p("fn f(x : ℝ[3]) -> ℝ[] = sum(x)\nfn m(x : ℝ[b: 2, k: 2]) -> ℝ[b: 2] = mean(axis k, x)\n");
  // An exact zero from nonzero terms: +inf. No terms at all nonzero: 0/0 = 1.
  EXPECT_EQ(*only(run(p, "f", {{v(reals({3}, {2, -2, 0}))}}), "f", "sum").condition, kInf);
  EXPECT_EQ(*only(run(p, "f", {{v(reals({3}, {0, 0, 0}))}}), "f", "sum").condition, 1.0);
  // A mean's condition is its sum's; the worst row counts: (3 + 1) / |3 − 1| = 2 over 1.
  const SiteEnvelope m = only(run(p, "m", {{v(reals({2, 2}, {3, -1, 5, 7}))}}), "m", "mean");
  EXPECT_EQ(*m.condition, 2.0);
}

TEST(EnvelopeCondition, DotAndContract) {
  Program p(R"(fn d(a : ℝ[3], b : ℝ[3]) -> ℝ[] = a · b
fn c(a : ℝ[k: 3, i: 2], b : ℝ[k: 3]) -> ℝ[i: 2] = contract(axis k, a, b)
)");
  // Σ|aᵢbᵢ| = 4 + 10 + 18 = 32, Σaᵢbᵢ = 12: 8/3, rounded once to a double.
  const SiteEnvelope d = only(run(p, "d", {{v(reals({3}, {1, 2, 3})), v(reals({3}, {4, -5, 6}))}}), "d", "dot");
  EXPECT_EQ(*d.condition, 8.0 / 3.0);
  EXPECT_EQ(d.max_abs, 12.0);
  // Column 0: (1·1 + 2·1 + 4·1) / |1 − 2 + 4| = 7/3; column 1: (1 + 1 + 1) / 1 = 3 (no cancellation: 1).
  const SiteEnvelope c =
      only(run(p, "c", {{v(reals({3, 2}, {1, 1, -2, 1, 4, 1})), v(reals({3}, {1, 1, 1}))}}), "c", "contract");
  EXPECT_EQ(*c.condition, 7.0 / 3.0);
  // Sites that add no terms have no condition number.
  for (const SiteEnvelope& s : run(p, "d", {{v(reals({3}, {1, 2, 3})), v(reals({3}, {4, -5, 6}))}}).sites)
    EXPECT_EQ(s.condition.has_value(), s.op == "dot") << s.site;
}

// ---------------------------------------------------------------------------
// Magnitudes and element counts, and their maxima over evaluations.

TEST(EnvelopeMagnitude, ChainIsExact) {
  Program p("fn f(x : ℝ[4]) -> ℝ[4] = x * 3.0 + 1.0\n");
  const Envelope e = run(p, "f", {{v(reals({4}, {1, -5, 2, 0.5}))}});
  const SiteEnvelope& mul = only(e, "f", "mul");
  EXPECT_EQ(mul.elements, 4);
  EXPECT_EQ(mul.max_abs, 15.0);
  const SiteEnvelope& add = only(e, "f", "add");
  EXPECT_EQ(add.elements, 4);
  EXPECT_EQ(add.max_abs, 14.0);  // |−5·3 + 1|
  // The literals are sites too, one element each.
  std::set<double> constants;
  for (const SiteEnvelope& s : e.sites)
    if (s.op == "const") {
      EXPECT_EQ(s.elements, 1);
      constants.insert(s.max_abs);
    }
  EXPECT_EQ(constants, (std::set<double>{1.0, 3.0}));
  // Sites are listed by value number.
  for (size_t i = 1; i < e.sites.size(); ++i) EXPECT_LT(e.sites[i - 1].site, e.sites[i].site);
}

TEST(EnvelopeMagnitude, CallsAndSamplesAggregateToTheMax) {
  Program p("fn g(x : ℝ[2]) -> ℝ[2] = x * 2.0\nfn f(x : ℝ[2]) -> ℝ[2] = g(g(x))\n");
  // g's product: [2, −6] on the first call, [4, −12] on the second.
  const Envelope one = run(p, "f", {{v(reals({2}, {1, -3}))}});
  EXPECT_EQ(only(one, "g", "mul").max_abs, 12.0);
  EXPECT_EQ(one.samples, 1);
  // A second sample with larger values raises it: [1, 20], then [2, 40].
  const Envelope two = run(p, "f", {{v(reals({2}, {1, -3}))}, {v(reals({2}, {0.5, 10}))}});
  EXPECT_EQ(only(two, "g", "mul").max_abs, 40.0);
  EXPECT_EQ(two.samples, 2);
}

TEST(EnvelopeMagnitude, FoldCopiesAggregateToTheMax) {
  Program p(R"(module B {
  param w : ℝ[m: 2]  init = normal(1.0)
  fn apply(x : ℝ[..., m: 2]) -> ℝ[..., m: 2] = x * w
}
module T {
  use bs : stack{3}(B)
  fn apply(x : ℝ[..., m: 2]) -> ℝ[..., m: 2] = bs.apply(x)
}
)");
  interp::ParamMap theta;
  theta["bs.w"] = reals({3, 2}, {1, 2, 3, -1, 0.5, 4});
  // Copy by copy: [1, 2], [3, −2], [1.5, −8].
  const Envelope e = run(p, "T.apply", {{interp::testing::tree(theta), v(reals({2}, {1, 1}))}});
  const SiteEnvelope& mul = only(e, "B.apply", "mul");
  EXPECT_EQ(mul.max_abs, 8.0);
  EXPECT_EQ(mul.elements, 2);
  EXPECT_EQ(only(e, "B.apply", "field").max_abs, 4.0);  // the third copy's w
  EXPECT_EQ(only(e, "T.apply", "fold").max_abs, 8.0);
}

// ---------------------------------------------------------------------------
// Rounding errors.

double error(double x, FloatType t, int bits = 128) { return rounding_error(Big(x, bits), t).to_double(); }

TEST(EnvelopeRounding, RepresentableValuesHaveNoError) {
  for (double x : {1.0, -1.5, 0.0, 3.0 * 0x1p-130, 0x1.fep127, 256.0, -0x1p-133})
    EXPECT_EQ(error(x, FloatType::BF16), 0.0) << x;
  EXPECT_EQ(error(65504, FloatType::F16), 0.0);
  EXPECT_EQ(error(0x1p-24, FloatType::F16), 0.0);  // f16's smallest subnormal
  EXPECT_EQ(error(kInf, FloatType::F16), 0.0);
  EXPECT_TRUE(rounding_error(Big(std::nan(""), 128), FloatType::F32).is_nan());
}

TEST(EnvelopeRounding, OneThirdInF32) {
  // f32(1/3) = 11184811 / 2^25, so f32(1/3) − 1/3 = 1 / (3·2^25) exactly.
  const Big third = exact::div(Big(1.0, 256), Big(3.0, 256));
  const double want = 1.0 / (3.0 * 0x1p25);
  EXPECT_EQ(rounding_error(third, FloatType::F32).to_double(), want);
  // Independently: (double)(float)(1.0/3.0) − 1/3 at 256 bits.
  const Big f32_third(static_cast<double>(static_cast<float>(1.0 / 3.0)), 256);
  EXPECT_EQ(rounding_error(third, FloatType::F32).to_double(), exact::abs(exact::sub(f32_third, third)).to_double());
  // And through a run: the site x / 3 at x = 1, with its relative error against u·max|x|.
  Program p("fn f(x : ℝ[]) -> ℝ[] = x / 3.0\n");
  const SiteEnvelope s = only(run(p, "f", {{v(Tensor::scalar(1.0))}}), "f", "div");
  EXPECT_EQ(s.rounding.at("f32"), want);
  EXPECT_EQ(s.max_abs, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.relative.at("f32"), want / (0x1p-24 * (1.0 / 3.0)));
}

TEST(EnvelopeRounding, OverflowAndSubnormals) {
  // 70000 is above f16's largest (65504) and its rounding midpoint (65520): inf.
  EXPECT_EQ(error(70000, FloatType::F16), kInf);
  EXPECT_EQ(error(65519, FloatType::F16), 15.0);  // below the midpoint: 65504
  EXPECT_EQ(error(65520, FloatType::F16), kInf);  // the midpoint ties away to overflow (even is 2^16)
  EXPECT_EQ(error(70000, FloatType::F32), 0.0);
  EXPECT_EQ(error(70000, FloatType::BF16), 144.0);  // bf16 spacing 512 there: 70144
  // 1e-6 is subnormal in f16, whose spacing there is 2^-24: 16.78 spacings round to 17.
  EXPECT_EQ(error(1e-6, FloatType::F16), 17.0 * 0x1p-24 - 1e-6);  // exact in double (Sterbenz)
  // Below half the smallest subnormal: to zero, the whole value lost; exactly half ties to zero.
  EXPECT_EQ(error(0x1p-26, FloatType::F16), 0x1p-26);
  EXPECT_EQ(error(0x1p-25, FloatType::F16), 0x1p-25);
  EXPECT_EQ(error(0x1.8p-25, FloatType::F16), 0x1p-26);  // 3/4 of a spacing rounds up
  // Ties to even among normals: 2049 lies between 2048 and 2050 in f16; 2048 is even.
  EXPECT_EQ(error(2049, FloatType::F16), 1.0);
  EXPECT_EQ(error(2051, FloatType::F16), 1.0);  // to 2052
}

TEST(EnvelopeRounding, AgreesWithTheRuntimesRounding) {
  // For doubles, |round_to(T, x) − x| (float_types.h, written independently
  // on bit patterns) computed at 128 bits must be the same number.
  std::vector<double> xs;
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state;
  };
  for (int i = 0; i < 4000; ++i) {
    const double mantissa = 1.0 + static_cast<double>(next() >> 11) * 0x1p-53;
    const int exponent = static_cast<int>(next() % 300) - 160;
    xs.push_back((next() & 1 ? -1 : 1) * std::ldexp(mantissa, exponent));
  }
  for (FloatType t : kCandidateTypes) {
    const runtime::FloatTypeInfo& info = runtime::float_type_info(t);
    for (double x : xs) {
      const double r = runtime::round_to(t, x);
      const double want = std::isinf(r) ? kInf : exact::abs(exact::sub(Big(r, 128), Big(x, 128))).to_double();
      ASSERT_EQ(error(x, t), want) << info.name << " x = " << x;
    }
  }
}

// ---------------------------------------------------------------------------
// The tutorial: 07_train.qr's loss, with the parameters and batch `quire run` gives it.

struct Tutorial {
  std::unique_ptr<elab::testing::Elaborated> e;
  std::map<std::string, int64_t> dims{{"B", 4}};
  int entry = -1;

  Tutorial() {
    e = elab::testing::elaborate_tutorial();
    entry = e->prog->find_function("loss");
  }
  Envelope calibrate(int samples = 1) const {
    const core::Function& fn = e->prog->functions.at(static_cast<size_t>(entry));
    interp::ParamMap params = interp::init_params(*e->prog, fn.args[0].type.params, 0, dims);
    std::vector<std::vector<Value>> args;
    for (int k = 0; k < samples; ++k)
      args.push_back(interp::entry_arguments(*e->prog, entry, &params, dims, static_cast<uint64_t>(k), std::nullopt));
    return precision::calibrate(*e->prog, entry, dims, args, 128);
  }
};

TEST(EnvelopeTutorial, EveryRealSiteOfEveryFunctionReached) {
  Tutorial t;
  ASSERT_TRUE(t.e->ok()) << t.e->rendered();
  const Envelope e = t.calibrate();
  EXPECT_EQ(e.entry, "loss");
  std::set<std::string> sites, functions;
  for (const SiteEnvelope& s : e.sites) {
    sites.insert(s.site);
    functions.insert(s.function);
  }
  EXPECT_EQ(sites.size(), e.sites.size()) << "each site once";
  for (const char* f : {"loss", "Tower.apply", "Block.apply", "RMSNorm.apply", "Linear.apply"})
    EXPECT_TRUE(functions.count(f)) << f;
  for (const core::Function& fn : t.e->prog->functions) {
    if (!functions.count(fn.name)) continue;
    for (const core::Instr& in : fn.body) {
      if (in.type.is_tensor() && in.type.tensor.elem == elab::Elem::Real) {
        EXPECT_TRUE(sites.count(core::site_name(fn, in.id))) << core::site_name(fn, in.id);
      }
    }
  }
  int sums = 0;
  for (const SiteEnvelope& s : e.sites) {
    EXPECT_GE(s.elements, 1) << s.site;
    EXPECT_TRUE(std::isfinite(s.max_abs)) << s.site;
    if (s.condition) {
      ++sums;
      EXPECT_GE(*s.condition, 1.0) << s.site;
    }
    for (const auto& [type, err] : s.rounding) {
      EXPECT_GE(err, 0.0) << s.site << " " << type;
      // Normal values: at most half a spacing, u·|x|, below max|x|.
      if (type != "f16") {
        EXPECT_LE(s.relative.at(type), 1.0) << s.site << " " << type;
      }
    }
  }
  EXPECT_GT(sums, 0);
}

TEST(EnvelopeTutorial, DeterministicAndReadBack) {
  Tutorial t;
  ASSERT_TRUE(t.e->ok()) << t.e->rendered();
  const Envelope a = t.calibrate(2), b = t.calibrate(2);
  const std::string text = envelope_json(a).dump(2);
  EXPECT_EQ(text, envelope_json(b).dump(2));
  const Envelope back = envelope_from_json(nlohmann::json::parse(text));
  EXPECT_EQ(print_envelope(back), print_envelope(a));
  EXPECT_EQ(envelope_json(back).dump(2), text);
  EXPECT_EQ(back.samples, 2);
  EXPECT_EQ(back.dims, t.dims);
  for (size_t i = 0; i < a.sites.size(); ++i) EXPECT_EQ(back.sites[i].op_code, a.sites[i].op_code) << a.sites[i].site;
}

TEST(EnvelopeJson, NonFiniteValuesAndMalformedFiles) {
  Program p("fn f(x : ℝ[3]) -> ℝ[] = sum(x)\n");
  const Envelope e = run(p, "f", {{v(reals({3}, {1e300, 1e300, -1e300}))}});
  nlohmann::json j = nlohmann::json::parse(envelope_json(e).dump());
  const Envelope back = envelope_from_json(j);
  const SiteEnvelope& s = only(back, "f", "sum");
  EXPECT_EQ(s.rounding.at("f32"), kInf);
  EXPECT_EQ(s.relative.at("f32"), kInf);
  EXPECT_EQ(*s.condition, 3.0);
  // A missing or mistyped key is named with its path.
  j["sites"][0].erase("max_abs");
  try {
    envelope_from_json(j, "env.json");
    FAIL() << "no error";
  } catch (const io::IoError& err) {
    EXPECT_EQ(std::string(err.what()), "env.json: key `sites[0].max_abs`: missing");
  }
  j = nlohmann::json::parse(envelope_json(e).dump());
  j["sites"][0]["rounding"]["bf16"] = "big";
  EXPECT_THROW(envelope_from_json(j), io::IoError);
  j = nlohmann::json::parse(envelope_json(e).dump());
  j["format"] = "something";
  EXPECT_THROW(envelope_from_json(j), io::IoError);
  // A file of samples is read back; with an inputs file too it is refused.
  Envelope sampled = e;
  sampled.samples_file = "samples.npz";
  j = nlohmann::json::parse(envelope_json(sampled).dump());
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(envelope_from_json(j).samples_file, "samples.npz");
  j["inputs_file"] = "in.npz";
  try {
    envelope_from_json(j, "env.json");
    FAIL() << "no error";
  } catch (const io::IoError& err) {
    EXPECT_EQ(std::string(err.what()),
              "env.json: key `samples_file`: an envelope's samples come from inputs_file or from samples_file, not both");
  }
  // A version 2 file has no samples_file.
  j = nlohmann::json::parse(envelope_json(e).dump());
  j["version"] = 2;
  j.erase("samples_file");
  EXPECT_EQ(envelope_from_json(j).samples_file, "");
}

TEST(EnvelopeJson, ValuesOutsideTheirRangeAreRefusedByKey) {
  // Each was accepted: a dim of 2^62 crashed `solve`, a negative magnitude or
  // condition number lowered the reported bound, a million samples ran 21 minutes.
  Program p("dim B\nfn f(x : ℝ[b: B]) -> ℝ[] = sum(axis b, x)\n", {{"B", 3}});
  const Envelope e = run(p, "f", {{v(reals({3}, {1, 2, 3}))}});
  const nlohmann::json good = nlohmann::json::parse(envelope_json(e).dump());
  EXPECT_NO_THROW(envelope_from_json(good));
  auto refused = [&](auto damage) {
    nlohmann::json j = good;
    damage(j);
    try {
      envelope_from_json(j, "env.json");
      return std::string("no error");
    } catch (const io::IoError& err) {
      return std::string(err.what());
    }
  };
  EXPECT_EQ(refused([](nlohmann::json& j) { j["dims"]["B"] = int64_t{1} << 62; }),
            "env.json: key `dims.B`: 4611686018427387904 is outside [1, 1099511627776]");
  EXPECT_EQ(refused([](nlohmann::json& j) { j["dims"]["B"] = 0; }), "env.json: key `dims.B`: 0 is outside [1, 1099511627776]");
  EXPECT_EQ(refused([](nlohmann::json& j) { j["samples"] = 1000000; }),
            "env.json: key `samples`: 1000000 is outside [1, 4096]");
  EXPECT_EQ(refused([](nlohmann::json& j) { j["sites"][0]["max_abs"] = -1.0; }),
            "env.json: key `sites[0].max_abs`: -1 is negative; a magnitude is ≥ 0");
  EXPECT_EQ(refused([](nlohmann::json& j) { j["sites"][0]["rounding"]["bf16"] = -1e-3; }),
            "env.json: key `sites[0].rounding.bf16`: -0.001 is negative; a magnitude is ≥ 0");
  EXPECT_EQ(refused([](nlohmann::json& j) { j["sites"].back()["condition"] = 0.5; }),
            fmt::format("env.json: key `sites[{}].condition`: 0.5 is below 1, which no condition number is",
                        good["sites"].size() - 1));
  EXPECT_EQ(refused([](nlohmann::json& j) { j["sites"][0]["elements"] = uint64_t{1} << 63; }),
            "env.json: key `sites[0].elements`: expected an integer");
  // NaN is a measurement's own value (a NaN met on the way), so it is kept.
  EXPECT_EQ(refused([](nlohmann::json& j) { j["sites"][0]["max_abs"] = "nan"; }), "no error");
}

}  // namespace
}  // namespace quire::precision
