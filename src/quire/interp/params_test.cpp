// A run's parameters and arguments: initialization by path (independent of
// declaration order), determinism, safetensors round trips and the refusal
// of files that do not fit the model, and entry arguments from an .npz or
// drawn from the seed.

#include "quire/interp/params.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "quire/interp/inputs.h"
#include "quire/interp/interp_testing.h"
#include "quire/io/npy.h"
#include "quire/io/safetensors.h"
#include "quire/runtime/init.h"
#include "quire/runtime/random.h"
#include "quire/support/testing.h"

namespace quire::interp {
namespace {

namespace fs = std::filesystem;
using runtime::ElemKind;
using runtime::Tensor;
using testing::expect_reals;
using testing::ints;
using testing::Program;
using testing::reals;

/// A fresh folder for one test's files, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            fmt::format("quire_{}_{}_{}", info->test_suite_name(), info->name(), static_cast<long>(getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

elab::ParamsType model(const Program& p, const std::string& name, std::vector<elab::Size> dims = {}) {
  for (size_t m = 0; m < p.prog().modules.size(); ++m)
    if (p.prog().modules[m].name == name) return {static_cast<int>(m), std::move(dims), {}};
  ADD_FAILURE() << "no module " << name;
  return {};
}

using quire::testing::error_of;

const char* kAB = R"(module Inner {
  param v : ℝ[3]     init = uniform(-2, 2)
}
module M {
  param a : ℝ[2, 3]  init = xavier_uniform
  param b : ℝ[3]     init = normal(0.5)
  use inner : Inner
  use many : stack{2}(Inner)
}
)";

const char* kBA = R"(module M {
  use many : stack{2}(Inner)
  param b : ℝ[3]     init = normal(0.5)
  use inner : Inner
  param a : ℝ[2, 3]  init = xavier_uniform
}
module Inner {
  param v : ℝ[3]     init = uniform(-2, 2)
}
)";

TEST(Params, InitializationDependsOnThePathNotTheOrder) {
  Program ab(kAB), ba(kBA);
  ParamMap x = init_params(ab.prog(), model(ab, "M"), 42, {});
  ParamMap y = init_params(ba.prog(), model(ba, "M"), 42, {});
  ASSERT_EQ(x.size(), 4u);
  for (const char* path : {"a", "b", "inner.v", "many.v"}) {
    ASSERT_TRUE(x.count(path) && y.count(path)) << path;
    EXPECT_EQ(x.at(path).shape, y.at(path).shape) << path;
    EXPECT_EQ(x.at(path).reals, y.at(path).reals) << path;
  }
  EXPECT_EQ(x.at("many.v").shape, (runtime::Shape{2, 3}));
  // Each tensor is its initializer under the key of its path.
  runtime::Key root = runtime::key_from_seed(42);
  runtime::InitSpec normal{runtime::InitSpec::Normal, 0.5, 0};
  EXPECT_EQ(x.at("b").reals, runtime::initialize(normal, runtime::derive_key(root, "b"), {3}, 0).reals);
  runtime::InitSpec uniform{runtime::InitSpec::Uniform, -2, 2};
  EXPECT_EQ(x.at("many.v").reals, runtime::initialize(uniform, runtime::derive_key(root, "many.v"), {2, 3}, 1).reals);
  // xavier_uniform of [2, 3]: U(-b, b), b = sqrt(6 / 5).
  double bound = std::sqrt(6.0 / 5.0);
  for (double v : x.at("a").reals) {
    EXPECT_GE(v, -bound);
    EXPECT_LE(v, bound);
  }
  // Another seed, other values; distinct paths, distinct values.
  ParamMap z = init_params(ab.prog(), model(ab, "M"), 43, {});
  EXPECT_NE(z.at("a").reals, x.at("a").reals);
  EXPECT_NE(x.at("inner.v").reals, std::vector<double>(x.at("many.v").reals.begin(), x.at("many.v").reals.begin() + 3));
}

TEST(Params, SymbolicShapesNeedTheirDimensions) {
  Program p(R"(dim B
module W{D : dim} {
  param w : ℝ[D, B]  init = ones
}
)");
  elab::ParamsType w = model(p, "W", {elab::Size::constant(3)});
  ParamMap m = init_params(p.prog(), w, 0, {{"B", 2}});
  expect_reals(m.at("w"), {3, 2}, std::vector<double>(6, 1.0));
  EXPECT_EQ(error_of<EvalError>([&] { init_params(p.prog(), w, 0, {}); }),
            "parameter `w`: size B is not bound (give --dim)");
  Program q(R"(dim B
module W {
  param w : ℝ[B - 2, B / 2]
}
)");
  elab::ParamsType v = model(q, "W");
  EXPECT_EQ(init_params(q.prog(), v, 0, {{"B", 4}}).at("w").shape, (runtime::Shape{2, 2}));
  EXPECT_EQ(error_of<EvalError>([&] {
              init_params(q.prog(), v, 0, {{"B", 2}});
            }),
            "parameter `w`: size B - 2 is 0, not positive");
  EXPECT_EQ(error_of<EvalError>([&] {
              init_params(q.prog(), v, 0, {{"B", 5}});
            }),
            "parameter `w`: size B / 2 is not a whole number");
}

TEST(Params, SaveAndLoadRoundTrip) {
  TempDir dir;
  Program p(kAB);
  ParamMap x = init_params(p.prog(), model(p, "M"), 7, {});
  std::string file = dir.file("m.safetensors");
  save_params(file, p.prog(), model(p, "M"), x);
  ParamMap y = load_params(file, p.prog(), model(p, "M"), {});
  ASSERT_EQ(x.size(), y.size());
  for (const auto& [path, t] : x) {
    EXPECT_EQ(t.shape, y.at(path).shape) << path;
    for (size_t i = 0; i < t.reals.size(); ++i) EXPECT_TRUE(testing::same_bits(t.reals[i], y.at(path).reals[i]));
  }
  // Written in declaration order, with the model's name.
  std::map<std::string, std::string> meta;
  io::NamedTensors raw = io::read_safetensors(file, &meta);
  std::vector<std::string> names;
  for (const auto& [name, t] : raw) names.push_back(name);
  EXPECT_EQ(meta.at("model"), "M");
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "inner.v", "many.v"}));
}

TEST(Params, LoadRefusesFilesThatDoNotFitTheModel) {
  TempDir dir;
  Program p(R"(module M {
  param w : ℝ[2, 3]
  param b : ℝ[3]
}
)");
  elab::ParamsType m = model(p, "M");
  auto write = [&](const std::string& name, io::NamedTensors tensors) {
    std::string file = dir.file(name);
    io::write_safetensors(file, tensors);
    return file;
  };
  std::string good = write("good.safetensors", {{"w", Tensor::real({2, 3}, 1.0)}, {"b", Tensor::real({3}, 2.0)}});
  EXPECT_EQ(load_params(good, p.prog(), m, {}).at("b").reals, std::vector<double>(3, 2.0));

  std::string shape = write("shape.safetensors", {{"w", Tensor::real({3, 2})}, {"b", Tensor::real({3})}});
  EXPECT_EQ(error_of<io::IoError>([&] { load_params(shape, p.prog(), m, {}); }),
            shape + ": parameter `w` has shape [3, 2], the model declares [2, 3]");
  std::string missing = write("missing.safetensors", {{"w", Tensor::real({2, 3})}});
  EXPECT_EQ(error_of<io::IoError>([&] { load_params(missing, p.prog(), m, {}); }),
            missing + ": parameter `b` is missing");
  std::string extra =
      write("extra.safetensors", {{"w", Tensor::real({2, 3})}, {"b", Tensor::real({3})}, {"c", Tensor::real({1})}});
  EXPECT_EQ(error_of<io::IoError>([&] { load_params(extra, p.prog(), m, {}); }),
            extra + ": tensor `c` is not a parameter of `M`");
  std::string kind =
      write("kind.safetensors", {{"w", Tensor::real({2, 3})}, {"b", Tensor::integer(ElemKind::I32, {3})}});
  EXPECT_EQ(error_of<io::IoError>([&] { load_params(kind, p.prog(), m, {}); }),
            kind + ": parameter `b` holds i32 values, not reals");
  std::string absent = dir.file("absent.safetensors");
  EXPECT_NE(error_of<io::IoError>([&] { load_params(absent, p.prog(), m, {}); }).find(absent + ": "),
            std::string::npos);
}

const char* kEntry = R"(dim B
fn f(x : ℝ[batch: B, model: 4], pair : (i32[batch: B], ℝ[]), k : key, s : f64) -> ℝ[batch: B, model: 4] =
  x * real(s)
fn drawn(x : ℝ[batch: B, 2], k : key) -> ℝ[batch: B, 2] = x
fn ints(i : i32[3]) -> i32[3] = i
)";

TEST(Inputs, ArgumentsFromAnNpz) {
  TempDir dir;
  Program p(kEntry, {{"B", 2}});
  std::string file = dir.file("in.npz");
  Tensor x = reals({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor s = Tensor::scalar(0.5);
  s.shape = {};
  io::write_npz(file, {{"x", x}, {"pair.0", ints(ElemKind::I64, {2}, {3, 4})}, {"pair.1", reals({}, {2.5})}, {"s", s}});
  std::vector<Value> args = entry_arguments(p.prog(), p.index("f"), nullptr, {{"B", 2}}, 0, file);
  ASSERT_EQ(args.size(), 4u);
  expect_reals(args[0].tensor, {2, 4}, x.reals);
  testing::expect_ints(args[1].elements[0].tensor, ElemKind::I32, {2}, {3, 4});
  expect_reals(args[1].elements[1].tensor, {}, {2.5});
  EXPECT_EQ(args[2].kind, Value::Kind::Key);
  EXPECT_EQ(args[2].key, runtime::derive_key(runtime::key_from_seed(0), "input:k"));
  EXPECT_EQ(args[3].host, 0.5);
  Interpreter interp(p.prog(), {{"B", 2}});
  expect_reals(interp.call(p.index("f"), args).tensor, {2, 4}, {0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4});
}

TEST(Inputs, NpzMistakesNameTheArray) {
  TempDir dir;
  Program p(kEntry, {{"B", 2}});
  auto args_from = [&](const std::string& name, io::NamedTensors entries, const std::string& fn = "f") {
    std::string file = dir.file(name);
    io::write_npz(file, entries);
    return error_of<io::IoError>([&] { entry_arguments(p.prog(), p.index(fn), nullptr, {{"B", 2}}, 0, file); });
  };
  Tensor s = reals({}, {1.0});
  io::NamedTensors good = {{"x", Tensor::real({2, 4})},
                           {"pair.0", Tensor::integer(ElemKind::I32, {2})},
                           {"pair.1", reals({}, {0})},
                           {"s", s}};
  io::NamedTensors wrong_shape = good;
  wrong_shape[0].second = Tensor::real({2, 3});
  EXPECT_EQ(
      args_from("shape.npz", wrong_shape),
      dir.file("shape.npz") + ": array `x` has shape [2, 3], the argument is ℝ[batch: B, model: 4] = shape [2, 4]");
  io::NamedTensors missing(good.begin(), good.begin() + 1);
  EXPECT_EQ(args_from("missing.npz", missing),
            dir.file("missing.npz") + ": no array `pair.0` for argument `pair.0` (expected shape [2])");
  io::NamedTensors extra = good;
  extra.push_back({"y", Tensor::real({1})});
  EXPECT_EQ(args_from("extra.npz", extra), dir.file("extra.npz") + ": array `y` matches no argument of `f`");
  io::NamedTensors reals_for_ints = good;
  reals_for_ints[1].second = Tensor::real({2});
  EXPECT_EQ(args_from("kind.npz", reals_for_ints),
            dir.file("kind.npz") + ": array `pair.0` holds real values, the argument is an integer tensor");
  io::NamedTensors too_big = good;
  too_big[1].second = ints(ElemKind::I64, {2}, {3, int64_t{1} << 40});
  EXPECT_EQ(args_from("big.npz", too_big),
            dir.file("big.npz") + ": array `pair.0` holds 1099511627776 at 1, outside the range of i32");
  EXPECT_EQ(args_from("none.npz", {{"j", Tensor::integer(ElemKind::I32, {3})}}, "ints"),
            dir.file("none.npz") + ": no array `i` for argument `i` (expected shape [3])");
  std::string absent = dir.file("absent.npz");
  EXPECT_NE(error_of<io::IoError>([&] {
              entry_arguments(p.prog(), p.index("f"), nullptr, {{"B", 2}}, 0, absent);
            }).find(absent + ": "),
            std::string::npos);
}

// A file of samples: every array has a first axis of samples, and sample k is
// slice k of each (the host scalar's array is 1-D); keys come from seed + k.
TEST(Inputs, SampleKOfAFileOfSamples) {
  TempDir dir;
  Program p(kEntry, {{"B", 2}});
  std::string file = dir.file("samples.npz");
  std::vector<double> xs(3 * 2 * 4);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<double>(i);
  io::write_npz(file, {{"x", reals({3, 2, 4}, xs)},
                       {"pair.0", ints(ElemKind::I64, {3, 2}, {1, 2, 3, 4, 5, 6})},
                       {"pair.1", reals({3}, {0.5, 1.5, 2.5})},
                       {"s", reals({4}, {7, 8, 9, 10})}});
  const SampleFile samples = SampleFile::read(file);
  EXPECT_EQ(samples.count, 3) << "the shortest first axis";
  std::vector<Value> args = sample_arguments(p.prog(), p.index("f"), nullptr, {{"B", 2}}, 5, samples, 2);
  ASSERT_EQ(args.size(), 4u);
  expect_reals(args[0].tensor, {2, 4}, std::vector<double>(xs.begin() + 16, xs.end()));
  testing::expect_ints(args[1].elements[0].tensor, ElemKind::I32, {2}, {5, 6});
  expect_reals(args[1].elements[1].tensor, {}, {2.5});
  EXPECT_EQ(args[2].key, runtime::derive_key(runtime::key_from_seed(7), "input:k"));
  EXPECT_EQ(args[3].host, 9);
  EXPECT_EQ(error_of<io::IoError>([&] { sample_arguments(p.prog(), p.index("f"), nullptr, {{"B", 2}}, 5, samples, 3); }),
            file + ": sample 3 asked, but it holds 3 (the shortest first axis of its arrays)");
  std::string flat = dir.file("flat.npz");
  io::write_npz(flat, {{"s", reals({}, {1})}});
  EXPECT_EQ(error_of<io::IoError>([&] { SampleFile::read(flat); }),
            flat + ": array `s` has no axes: a file of samples holds each argument's samples along a first axis");
  std::string wrong = dir.file("wrong.npz");
  io::write_npz(wrong, {{"x", Tensor::real({3, 2, 3})}, {"pair.0", Tensor::integer(ElemKind::I32, {3, 2})},
                        {"pair.1", Tensor::real({3})}, {"s", Tensor::real({3})}});
  EXPECT_EQ(error_of<io::IoError>([&] {
              sample_arguments(p.prog(), p.index("f"), nullptr, {{"B", 2}}, 0, SampleFile::read(wrong), 0);
            }),
            wrong + ": array `x` has shape [2, 3], the argument is ℝ[batch: B, model: 4] = shape [2, 4]");
}

TEST(Inputs, DrawnFromTheSeedWithoutAFile) {
  Program p(kEntry, {{"B", 3}});
  std::vector<Value> a = entry_arguments(p.prog(), p.index("drawn"), nullptr, {{"B", 3}}, 9, std::nullopt);
  std::vector<Value> b = entry_arguments(p.prog(), p.index("drawn"), nullptr, {{"B", 3}}, 9, std::nullopt);
  runtime::Key root = runtime::key_from_seed(9);
  Tensor want = runtime::draw_normal(runtime::derive_key(root, "input:x"), {3, 2}, 0.0, 1.0);
  expect_reals(a[0].tensor, {3, 2}, want.reals);
  expect_reals(b[0].tensor, {3, 2}, want.reals);
  EXPECT_EQ(a[1].key, runtime::derive_key(root, "input:k"));
  // Integers, host scalars and unbound dimensions cannot be made up.
  EXPECT_EQ(error_of<EvalError>([&] { entry_arguments(p.prog(), p.index("ints"), nullptr, {}, 0, std::nullopt); }),
            "argument `i` is i32[3]: give it with --inputs FILE.npz");
  EXPECT_EQ(error_of<EvalError>([&] {
              entry_arguments(p.prog(), p.index("f"), nullptr, {{"B", 3}}, 0, std::nullopt);
            }),
            "argument `pair.0` is i32[batch: B]: give it with --inputs FILE.npz");
  EXPECT_EQ(error_of<EvalError>([&] { entry_arguments(p.prog(), p.index("drawn"), nullptr, {}, 0, std::nullopt); }),
            "argument `x`: give the dimension B with --dim B=N");
  Program q("dim B\nfn f(x : ℝ[B - 1], y : ℝ[B / 2]) -> ℝ[] = sum(x)\n");
  EXPECT_EQ(error_of<EvalError>([&] {
              entry_arguments(q.prog(), q.index("f"), nullptr, {{"B", 1}}, 0, std::nullopt);
            }),
            "argument `x`: its size B - 1 is 0, not positive");
  EXPECT_EQ(error_of<EvalError>([&] {
              entry_arguments(q.prog(), q.index("f"), nullptr, {{"B", 3}}, 0, std::nullopt);
            }),
            "argument `y`: its size B / 2 is not a whole number");
}

TEST(Inputs, TheParameterTreeComesFirst) {
  Program p(R"(module M {
  param w : ℝ[2]  init = ones
}
fn f(θ : params M, x : ℝ[2]) -> ℝ[] = sum(θ.w * x)
)");
  elab::ParamsType m = model(p, "M");
  ParamMap params = init_params(p.prog(), m, 0, {});
  std::vector<Value> args = entry_arguments(p.prog(), p.index("f"), &params, {}, 1, std::nullopt);
  ASSERT_EQ(args[0].kind, Value::Kind::Params);
  EXPECT_EQ(args[0].params->at("w").reals, std::vector<double>(2, 1.0));
  EXPECT_EQ(error_of<EvalError>([&] { entry_arguments(p.prog(), p.index("f"), nullptr, {}, 1, std::nullopt); }),
            "the entry's parameters are missing");
  Interpreter interp(p.prog(), {});
  double got = interp.call(p.index("f"), args).tensor.reals[0];
  EXPECT_TRUE(testing::same_bits(got, (0.0 + args[1].tensor.reals[0]) + args[1].tensor.reals[1]));
}

}  // namespace
}  // namespace quire::interp
