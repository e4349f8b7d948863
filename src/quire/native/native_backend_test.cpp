// The native backend end to end: the kernel engine with compiled kernels
// against the reference interpreter, bit for bit, on every tutorial function
// `quire run` can call and its training step under every policy, on every
// lowered operation with special values, on 1 and 2 threads; and the `quire`
// command's default backend, its cache and its fallback without a compiler.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>
#include <tuple>

#include "quire/elab/elab_testing.h"
#include "quire/grad/vjp.h"
#include "quire/kernel/generated_programs_testing.h"
#include "quire/kernel/kernel_interpreter.h"
#include "quire/kernel/kernel_testing.h"
#include "quire/kernel/layout.h"
#include "quire/native/native_runner.h"
#include "quire/native/native_testing.h"
#include "quire/support/cli_testing.h"

namespace quire::native {
namespace {

using interp::Value;
using kernel::testing::every_policy;
using kernel::testing::expect_same;
using kernel::testing::label;
using precision::Policy;

class NativeBackend : public testing::FreshCacheTest {};

TEST_F(NativeBackend, TheTutorialAndItsTrainingStepHaveTheReferenceBitsUnderEveryPolicy) {
  const kernel::testing::TutorialStep t;
  // Planned under the shipped profile and under one that takes every
  // kernel's widest layout: vector lanes and a split over 2 threads.
  const machine::Profile shipped = machine::shipped_profile();
  const machine::Profile eager = kernel::testing::eager_profile();
  NativeRunner runner;
  runner.set_threads(2);
  for (const machine::Profile* plan : {&shipped, &eager})
    for (const precision::RealizeOptions& o : every_policy()) {
      SCOPED_TRACE(label(o) + " planned under " + (plan == &eager ? "the eager profile" : "the shipped profile"));
      kernel::testing::Runs r = kernel::testing::run_both(t.prog(), t.loss, t.loss_args, t.dims, o, runner,
                                                          interp::Remat::Recompute, plan, 2);
      expect_same(r.kernels, r.reference, "loss");
      EXPECT_GT(r.kernel_launches, 0);
      for (interp::Remat remat : {interp::Remat::Recompute, interp::Remat::Store}) {
        r = kernel::testing::run_both(t.prog(), t.step, t.step_args, t.dims, o, runner, remat, plan, 2);
        expect_same(r.kernels, r.reference, std::string("step, remat ") + interp::remat_name(remat));
      }
    }
  EXPECT_GT(runner.compilations(), 0);
  EXPECT_GT(runner.packed_products(), 0) << "the eager profile packs the f32 fma products";
}

TEST_F(NativeBackend, PackedProductsHaveTheFusedChainsBitsAtAnyShapeAndThreadCount) {
  // Shapes that fill no register tile, a batched contraction, and the
  // products of the gradient (ct · wᵀ, xᵀ · ct) with an epilogue each.
  interp::testing::Program p(R"(fn f(x : ℝ[b: 37, n: 53], w : ℝ[n: 53, m: 29]) -> ℝ[b: 37, m: 29] =
  tanh(x · w) + 1
fn g(q : ℝ[h: 3, s: 17, d: 40], k : ℝ[h: 3, t: 19, d: 40]) -> ℝ[h: 3, s: 17, t: 19] =
  contract(axis d, q, k)
fn lx(x : ℝ[b: 37, n: 53], w : ℝ[n: 53, m: 29]) -> ℝ[] = sum(tanh(x · w))
fn lw(w : ℝ[n: 53, m: 29], x : ℝ[b: 37, n: 53]) -> ℝ[] = sum(tanh(x · w))
fn dx(x : ℝ[b: 37, n: 53], w : ℝ[n: 53, m: 29]) -> ℝ[b: 37, n: 53] = grad(lx)(x, w)
fn dw(w : ℝ[n: 53, m: 29], x : ℝ[b: 37, n: 53]) -> ℝ[n: 53, m: 29] = grad(lw)(w, x)
fn tied(e : ℝ[v: 23, d: 40], h : ℝ[b: 2, t: 5, d: 40]) -> ℝ[] = sum(tanh(contract(axis d, h, e)))
fn de(e : ℝ[v: 23, d: 40], h : ℝ[b: 2, t: 5, d: 40]) -> ℝ[v: 23, d: 40] = grad(tied)(e, h)
)");
  auto draw = [](runtime::Shape shape, uint64_t seed) {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    return Value::of(interp::testing::reals(shape, kernel::testing::specials_and_random(n, seed)));
  };
  const std::map<std::string, std::vector<Value>> calls = {
      {"f", {draw({37, 53}, 1), draw({53, 29}, 2)}},
      {"g", {draw({3, 17, 40}, 3), draw({3, 19, 40}, 4)}},
      {"dx", {draw({37, 53}, 5), draw({53, 29}, 6)}},
      {"dw", {draw({53, 29}, 7), draw({37, 53}, 8)}},
      // A tied read-out's weight gradient: its rows (v) come from the
      // cotangent, the product's second operand, over k = (b, t) merged.
      {"de", {draw({23, 40}, 9), draw({2, 5, 40}, 10)}},
  };
  const machine::Profile eager = kernel::testing::eager_profile();
  for (Policy policy : {Policy::F32, Policy::BF16}) {
    precision::RealizeOptions o;
    o.policy = policy;
    o.fused_products = true;
    for (const auto& [name, args] : calls) {
      SCOPED_TRACE(name + " under " + label(o));
      NativeRunner one, two;
      one.set_threads(1);
      two.set_threads(2);
      const kernel::testing::Runs a =
          kernel::testing::run_both(p.prog(), p.index(name), args, p.dims, o, one, interp::Remat::Recompute, &eager, 1);
      const kernel::testing::Runs b =
          kernel::testing::run_both(p.prog(), p.index(name), args, p.dims, o, two, interp::Remat::Recompute, &eager, 2);
      expect_same(a.kernels, a.reference, "packed, 1 thread");
      expect_same(b.kernels, a.reference, "packed, 2 threads");
      EXPECT_GT(one.packed_products(), 0);
      EXPECT_GT(two.packed_products(), 0);
      // Under f32, g's product and the gradients' (ct · wᵀ, xᵀ · ct) are
      // results as they are, and their nests copies that are skipped; f's
      // has an epilogue, and under bf16 every product is rounded.
      const bool as_is = name != "f" && policy == Policy::F32;
      EXPECT_EQ(one.products_as_is() > 0, as_is);
      EXPECT_EQ(two.products_as_is() > 0, as_is);
      // The kernel interpreter runs the same packed kernels by their definition.
      kernel::InterpretingRunner interpreting;
      const kernel::testing::Runs c = kernel::testing::run_both(p.prog(), p.index(name), args, p.dims, o, interpreting,
                                                                interp::Remat::Recompute, &eager, 2);
      expect_same(c.kernels, a.reference, "packed, kernel interpreter");
    }
  }
}

// A tied read-out's weight gradient (`de` above) is packed, its operands'
// roles swapped: C's rows come from the product's second operand.
TEST_F(NativeBackend, AProductWhoseRowsComeFromItsSecondOperandIsPacked) {
  interp::testing::Program p(R"(fn tied(e : ℝ[v: 23, d: 40], h : ℝ[b: 2, t: 5, d: 40]) -> ℝ[] = sum(tanh(contract(axis d, h, e)))
fn de(e : ℝ[v: 23, d: 40], h : ℝ[b: 2, t: 5, d: 40]) -> ℝ[v: 23, d: 40] = grad(tied)(e, h)
)");
  struct Recording : kernel::KernelRunner {
    kernel::InterpretingRunner inner;
    std::vector<kernel::PackedProduct> products;
    runtime::Tensor run(int id, const kernel::Kernel& k, const std::vector<const runtime::Tensor*>& in) override {
      if (k.product && k.title.rfind("contract_grad_b", 0) == 0) products.push_back(*k.product);
      return inner.run(id, k, in);
    }
  } recording;
  precision::RealizeOptions o;
  o.policy = Policy::F32;
  o.fused_products = true;
  const std::vector<Value> args = {Value::of(interp::testing::reals({23, 40}, kernel::testing::specials_and_random(920, 9))),
                                   Value::of(interp::testing::reals({2, 5, 40}, kernel::testing::specials_and_random(400, 10)))};
  const machine::Profile eager = kernel::testing::eager_profile();
  const kernel::testing::Runs r =
      kernel::testing::run_both(p.prog(), p.index("de"), args, p.dims, o, recording, interp::Remat::Recompute, &eager, 1);
  expect_same(r.kernels, r.reference, "de");
  ASSERT_FALSE(recording.products.empty()) << "the weight gradient ran unpacked";
  const kernel::PackedProduct& k = recording.products.front();
  EXPECT_EQ(k.m, 23) << "rows: the vocabulary, from the cotangent";
  EXPECT_EQ(k.n, 40);
  EXPECT_EQ(k.k, 10) << "b and t merged";
}

// Runs each kernel it is given at every point of its layout space (the
// packed ones aside: PackedProducts… covers them), natively on 2 threads,
// and checks each against the kernel interpreter on the kernel as lowered.
class EveryPointRunner : public kernel::KernelRunner {
 public:
  runtime::Tensor run(int, const kernel::Kernel& k, const std::vector<const runtime::Tensor*>& inputs) override {
    const runtime::Tensor want = kernel::run_kernel(k, inputs);
    const kernel::KernelPlan plan = kernel::plan_kernel(k, profile_, 2);
    // Every point laid out first and compiled together (a batch per core):
    // one compiler run per point made this the slowest test by far.
    std::vector<std::pair<kernel::Layout, kernel::Kernel>> points;
    for (const kernel::RankedLayout& r : plan.ranked) {
      if (r.layout.pack) continue;
      kernel::Kernel laid = k;
      kernel::apply_layout(laid, r.layout);
      tiled_ += r.layout.tile > 1;
      swapped_ += r.layout.swap;
      points.emplace_back(r.layout, std::move(laid));
    }
    std::vector<std::pair<int, const kernel::Kernel*>> batch;
    for (size_t i = 0; i < points.size(); ++i) batch.emplace_back(next_ + static_cast<int>(i), &points[i].second);
    native_.add_all(batch);
    for (const auto& [layout, laid] : points) {
      const std::string where = k.title + " at " + kernel::layout_text(layout);
      kernel::testing::expect_same(Value::of(kernel::run_kernel(laid, inputs)), Value::of(want), "INTERP " + where);
      const runtime::Tensor got = native_.run(next_++, laid, inputs);
      kernel::testing::expect_same(Value::of(got), Value::of(want), where);
    }
    return want;
  }
  int tiled_ = 0, swapped_ = 0;

 private:
  machine::Profile profile_ = machine::shipped_profile();
  NativeRunner native_ = [] {
    NativeRunner n;
    n.set_threads(2);
    return n;
  }();
  int next_ = 0;
};

TEST_F(NativeBackend, EveryLoopOrderAndTileOfAFoldNestHasTheKernelsBits) {
  // Products with an epilogue, both gradient products and a reduction over
  // an inner axis, at extents that 2 and 4 divide, on special values, under
  // every policy.
  interp::testing::Program p(R"(fn f(x : ℝ[b: 12, n: 19], w : ℝ[n: 19, m: 20]) -> ℝ[b: 12, m: 20] =
  tanh(x · w) + 1
fn l(x : ℝ[b: 12, n: 20], w : ℝ[n: 20, m: 8]) -> ℝ[] = sum(tanh(x · w))
fn dx(x : ℝ[b: 12, n: 20], w : ℝ[n: 20, m: 8]) -> ℝ[b: 12, n: 20] = grad(l)(x, w)
fn dw(x : ℝ[b: 12, n: 20], w : ℝ[n: 20, m: 8]) -> ℝ[n: 20, m: 8] = grad(l, wrt = w)(x, w)
fn r(q : ℝ[h: 4, s: 6, d: 40]) -> ℝ[h: 4, s: 6] = sum(axis d, q) + max(axis d, q)
)");
  auto draw = [](runtime::Shape shape, uint64_t seed) {
    return Value::of(
        interp::testing::reals(shape, kernel::testing::specials_and_random(runtime::element_count(shape), seed)));
  };
  const std::map<std::string, std::vector<Value>> calls = {
      {"f", {draw({12, 19}, 1), draw({19, 20}, 2)}},
      {"dx", {draw({12, 20}, 3), draw({20, 8}, 4)}},
      {"dw", {draw({12, 20}, 5), draw({20, 8}, 6)}},
      {"r", {draw({4, 6, 40}, 7)}},
  };
  EveryPointRunner runner;
  for (const precision::RealizeOptions& o : every_policy())
    for (const auto& [name, args] : calls) {
      SCOPED_TRACE(name + " under " + label(o));
      const kernel::testing::Runs r = kernel::testing::run_both(p.prog(), p.index(name), args, p.dims, o, runner);
      expect_same(r.kernels, r.reference, "the kernels as lowered");
    }
  EXPECT_GT(runner.tiled_, 0);
  EXPECT_GT(runner.swapped_, 0);
}

/// An argument of `shape` for a test program: its first elements (up to 12)
/// the special values, the rest uniform in [-2, 2].
Value drawn(runtime::Shape shape, uint64_t seed) {
  const int64_t n = runtime::element_count(shape);
  std::vector<double> v = kernel::testing::specials_and_random(static_cast<size_t>(std::min<int64_t>(n, 12)), seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-2, 2);
  while (static_cast<int64_t>(v.size()) < n) v.push_back(d(rng));
  return Value::of(interp::testing::reals(shape, v));
}

/// Each call of tests/data/`file` under every policy: compiled on 1 and 2
/// threads and through the kernel interpreter, the reference's bits, and
/// every launch a kernel.
void expect_reference_bits(const std::string& file, const std::map<std::string, std::vector<Value>>& calls) {
  std::ifstream in(std::filesystem::path(QUIRE_SOURCE_DIR) / "tests" / "data" / file);
  const std::string source{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  interp::testing::Program p(source);
  const machine::Profile eager = kernel::testing::eager_profile();
  for (const precision::RealizeOptions& o : every_policy())
    for (const auto& [name, args] : calls) {
      SCOPED_TRACE(file + ": " + name + " under " + label(o));
      NativeRunner one, two;
      one.set_threads(1);
      two.set_threads(2);
      kernel::InterpretingRunner interpreting;
      const kernel::testing::Runs a =
          kernel::testing::run_both(p.prog(), p.index(name), args, p.dims, o, one, interp::Remat::Recompute, &eager, 1);
      const kernel::testing::Runs b =
          kernel::testing::run_both(p.prog(), p.index(name), args, p.dims, o, two, interp::Remat::Recompute, &eager, 2);
      const kernel::testing::Runs c = kernel::testing::run_both(p.prog(), p.index(name), args, p.dims, o, interpreting,
                                                                interp::Remat::Recompute, &eager, 2);
      expect_same(a.kernels, a.reference, "1 thread");
      expect_same(b.kernels, a.reference, "2 threads");
      expect_same(c.kernels, a.reference, "kernel interpreter");
      EXPECT_GT(a.kernel_launches, 0);
      EXPECT_EQ(a.runtime_launches, 0);
    }
}

TEST_F(NativeBackend, TheAdjointOfABroadcastIsAKernelWithTheReferenceBits) {
  // sum_to over the rows, over everything, over the columns and over `...`
  // axes (tests/data/broadcast_grad.qr): folds of 37 to 320 terms, long
  // enough that rounding each step differs from rounding the sum, with
  // the special values in the first rows. The cotangent's `expand` runs in
  // the nest of the sum's reader.
  expect_reference_bits("broadcast_grad.qr", {
                                                 {"d1", {drawn({64, 5}, 1), drawn({5}, 2)}},
                                                 {"d2", {drawn({64, 5}, 3), drawn({}, 4)}},
                                                 {"d3", {drawn({64, 37}, 5), drawn({64}, 6)}},
                                                 {"d4", {drawn({8, 9, 5}, 7), drawn({5}, 8)}},
                                             });
}

TEST_F(NativeBackend, AReductionsCotangentIsReadThroughABroadcastWithTheReferenceBits) {
  // expand and expand_mean in the nest of their readers
  // (tests/data/mean_grad.qr): means over everything (2368 elements), the
  // columns (37), the rows (64) and after `...` axes (5), and a sum's
  // repeat, special values among the arguments.
  expect_reference_bits("mean_grad.qr", {
                                            {"g1", {drawn({64, 37}, 11)}},
                                            {"g2", {drawn({64, 37}, 12)}},
                                            {"g3", {drawn({64, 37}, 13)}},
                                            {"g4", {drawn({8, 9, 5}, 14)}},
                                            {"g5", {drawn({64, 37}, 15)}},
                                        });
}

TEST_F(NativeBackend, EveryGoldenProgramsEntryHasTheReferenceBitsUnderEveryPolicy) {
  // The entries the golden cases run: 04_loss's loss at B = 3, 05_dropout's
  // noisy_sum at B = 2 (draws and a comparison: kernels beside reference
  // launches), 07_train's loss at B = 4.
  const std::filesystem::path dir = std::filesystem::path(QUIRE_SOURCE_DIR) / "examples" / "tutorial";
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".qr") {
      std::ifstream in(entry.path(), std::ios::binary);
      files[entry.path().filename().string()] =
          std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  const machine::Profile eager = kernel::testing::eager_profile();
  NativeRunner runner;
  runner.set_threads(2);
  for (auto [file, entry, b] : {std::tuple{"04_loss.qr", "loss", 3}, {"05_dropout.qr", "noisy_sum", 2},
                                {"07_train.qr", "loss", 4}}) {
    auto e = elab::testing::elaborate_files(files, file);
    ASSERT_TRUE(e->ok()) << file << e->rendered();
    const std::map<std::string, int64_t> dims = {{"B", b}};
    const int fn = e->prog->find_function(entry);
    ASSERT_GE(fn, 0) << file;
    const std::vector<Value> args = kernel::testing::drawn_arguments(*e->prog, fn, dims);
    for (const precision::RealizeOptions& o : every_policy()) {
      SCOPED_TRACE(std::string(file) + " under " + label(o));
      const kernel::testing::Runs r =
          kernel::testing::run_both(*e->prog, fn, args, dims, o, runner, interp::Remat::Recompute, &eager, 2);
      expect_same(r.kernels, r.reference, entry);
      EXPECT_GT(r.kernel_launches, 0);
    }
  }
}

TEST_F(NativeBackend, EveryLoweredOperationHasTheReferenceBitsOnSpecialValues) {
  interp::testing::Program p(kernel::testing::kOperations);
  const machine::Profile eager = kernel::testing::eager_profile();
  NativeRunner runner;
  runner.set_threads(2);
  for (const auto& [name, tensors] : kernel::testing::operation_calls()) {
    std::vector<Value> args;
    for (const runtime::Tensor& t : tensors) args.push_back(Value::of(t));
    for (const precision::RealizeOptions& o : every_policy()) {
      SCOPED_TRACE(name + " under " + label(o));
      for (const machine::Profile* plan : {static_cast<const machine::Profile*>(nullptr), &eager}) {
        const kernel::testing::Runs r = kernel::testing::run_both(p.prog(), p.index(name), args, p.dims, o, runner,
                                                                  interp::Remat::Recompute, plan, 2);
        expect_same(r.kernels, r.reference, plan ? "every kernel at its widest layout" : "unplanned");
      }
    }
  }
}

TEST_F(NativeBackend, OneAndTwoThreadsGiveTheSameBits) {
  interp::testing::Program p(R"(fn f(x : ℝ[b: 256, n: 64], w : ℝ[n: 64, m: 48]) -> ℝ[b: 256, m: 48] =
  gelu(x · w) * 0.5 + tanh(x · w)
)");
  auto x = interp::testing::reals({256, 64}, kernel::testing::specials_and_random(256 * 64, 11));
  auto w = interp::testing::reals({64, 48}, kernel::testing::specials_and_random(64 * 48, 12));
  const std::vector<Value> args = {Value::of(x), Value::of(w)};
  const machine::Profile shipped = machine::shipped_profile();
  for (const precision::RealizeOptions& o : every_policy()) {
    SCOPED_TRACE(label(o));
    NativeRunner one, two;
    one.set_threads(1);
    two.set_threads(2);
    const kernel::testing::Runs a = kernel::testing::run_both(p.prog(), p.index("f"), args, p.dims, o, one,
                                                              interp::Remat::Recompute, &shipped, 1);
    const kernel::testing::Runs b = kernel::testing::run_both(p.prog(), p.index("f"), args, p.dims, o, two,
                                                              interp::Remat::Recompute, &shipped, 2);
    expect_same(a.kernels, a.reference, "1 thread");
    expect_same(b.kernels, a.kernels, "2 threads");
    EXPECT_EQ(one.split_launches(), 0);
    EXPECT_GT(two.split_launches(), 0) << "the shipped profile's plan splits the product over 2 threads";
  }
}

TEST_F(NativeBackend, GeneratedProgramsHaveTheReferenceBits) {
  // Random functions and towers (kernel/generated_programs_testing.h; the kernel
  // interpreter runs many more of them, and compiling is what costs here):
  // each on its arguments and its vjp on finite ones, under three policies,
  // with every kernel at its widest layout on 2 threads.
  const machine::Profile eager = kernel::testing::eager_profile();
  NativeRunner runner;
  runner.set_threads(2);
  std::vector<precision::RealizeOptions> policies(3);
  policies[0].policy = Policy::F64;
  policies[1].policy = Policy::F32;
  policies[1].fused_products = true;
  policies[2].policy = Policy::BF16;
  int64_t launches = 0;
  for (bool towers : {false, true})
    launches += kernel::testing::expect_generated_reference_bits(runner, towers, towers ? 2 : 3, policies, {&eager},
                                                                 {interp::Remat::Store});
  EXPECT_GT(launches, 0);
}

class NativeCli : public quire::testing::CliTest {
 protected:
  void SetUp() override {
    quire::testing::CliTest::SetUp();
    if (IsSkipped()) return;
    if (!testing::c_compiler_available()) GTEST_SKIP() << "no C compiler";
    cache_.emplace("QUIRE_CACHE_DIR", (dir_ / "cache").string());
  }
  std::optional<testing::ScopedEnv> cache_;
  const std::string tutorial_ = std::string(QUIRE_SOURCE_DIR) + "/examples/tutorial/07_train.qr";
};

TEST_F(NativeCli, RunIsNativeByDefaultAndASecondRunCompilesNothing) {
  const std::string args = "run " + tutorial_ + " --entry loss --dim B=4 --precision bf16 --repeat 3";
  const quire::testing::Outcome reference = quire::testing::run_quire(
      "run " + tutorial_ + " --entry loss --dim B=4 --precision bf16 --backend interp");
  const quire::testing::Outcome first = quire::testing::run_quire(args);
  const quire::testing::Outcome second = quire::testing::run_quire(args + " --threads 1");
  ASSERT_EQ(first.status, 0) << first.output;
  ASSERT_EQ(second.status, 0) << second.output;
  // The result line is the reference interpreter's.
  const std::string result = reference.output.substr(0, reference.output.find('\n'));
  EXPECT_EQ(first.output.substr(0, first.output.find('\n')), result);
  EXPECT_EQ(second.output.substr(0, second.output.find('\n')), result);
  EXPECT_NE(first.output.find("on the native backend"), std::string::npos) << first.output;
  // "N kernels: N compiled (R compiler runs), 0 from the cache", R at most
  // one a core (a batch each), then "N kernels: 0 compiled (0 compiler runs), N from the cache".
  std::smatch m1, m2;
  ASSERT_TRUE(std::regex_search(first.output, m1,
                                std::regex(R"((\d+) kernels: (\d+) compiled \((\d+) compiler runs?\), 0 from the cache)")))
      << first.output;
  EXPECT_EQ(m1[1], m1[2]);
  EXPECT_LE(std::stoi(m1[3].str()), std::max(1u, std::thread::hardware_concurrency()));
  ASSERT_TRUE(std::regex_search(second.output, m2,
                                std::regex(R"((\d+) kernels: 0 compiled \(0 compiler runs\), (\d+) from the cache)")))
      << second.output;
  EXPECT_EQ(m2[1].str(), m1[1].str());
  EXPECT_EQ(m2[2].str(), m1[1].str());
}

TEST_F(NativeCli, LibraryKernelsOnAndOffGiveTheSameResultAndOffCompilesTheLines) {
  // dropout_add_layer_norm and layer_norm under f32: one library kernel each
  // with `on` (the default), their lines' kernels with `off`; the same bits.
  const std::string program = write("lk.qr", R"(fn f(k : key, x : ℝ[t: 40, d: 16], y : ℝ[t: 40, d: 16], g : ℝ[d: 16], b : ℝ[d: 16]) -> ℝ[] =
  let (s, n) = dropout_add_layer_norm(k, y, 0.1, x, g, b)
  sum(n * s) + sum(layer_norm(s, g, b))
)");
  const std::string args = "run " + program + " --entry f --precision f32 --seed 3 --repeat 2";
  const quire::testing::Outcome on = quire::testing::run_quire(args);
  const quire::testing::Outcome off = quire::testing::run_quire(args + " --library-kernels off");
  ASSERT_EQ(on.status, 0) << on.output;
  ASSERT_EQ(off.status, 0) << off.output;
  auto result = [](const std::string& o) {
    const size_t at = o.find("result : ");
    return at == std::string::npos ? std::string() : o.substr(at, o.find('\n', at) - at);
  };
  EXPECT_NE(result(on.output), "") << on.output;
  EXPECT_EQ(result(on.output), result(off.output));
  const std::regex kernels(R"((\d+) kernels: )");
  std::smatch m_on, m_off;
  ASSERT_TRUE(std::regex_search(on.output, m_on, kernels)) << on.output;
  ASSERT_TRUE(std::regex_search(off.output, m_off, kernels)) << off.output;
  EXPECT_LT(std::stoi(m_on[1].str()), std::stoi(m_off[1].str())) << on.output << off.output;
  const quire::testing::Outcome bad = quire::testing::run_quire(args + " --library-kernels maybe");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--library-kernels: maybe not in {on,off}"), std::string::npos) << bad.output;
}

TEST_F(NativeCli, WithoutACompilerRunWarnsAndFallsBackToTheKernelInterpreter) {
  testing::ScopedEnv cc("CC", "/nonexistent/cc");
  const quire::testing::Outcome o =
      quire::testing::run_quire("run " + tutorial_ + " --entry loss --dim B=4 --precision f32");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_NE(o.output.find("result : f32 = 3.51354718208313"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("warning: the native backend is unavailable"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("/nonexistent/cc"), std::string::npos) << o.output;
}

TEST_F(NativeCli, AnUnwritableCacheIsNamedAndRunFallsBack) {
  write("file", "not a folder");
  testing::ScopedEnv cache("QUIRE_CACHE_DIR", (dir_ / "file" / "cache").string());
  const quire::testing::Outcome o =
      quire::testing::run_quire("run " + tutorial_ + " --entry loss --dim B=4 --precision f32");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_NE(o.output.find("result : f32 = 3.51354718208313"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("warning: the native backend is unavailable"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("file/cache"), std::string::npos) << o.output;
}

TEST_F(NativeCli, AHangingCompilerIsKilledAndRunFallsBack) {
  const std::string compiler = write("hanging-cc", "#!/bin/sh\nif [ \"$1\" = --version ]; then echo hanging-cc 1.0; exit 0; fi\nsleep 60\n");
  std::filesystem::permissions(compiler, std::filesystem::perms::owner_all);
  testing::ScopedEnv cc("CC", compiler);
  testing::ScopedEnv limit("QUIRE_CC_TIMEOUT", "1");
  const quire::testing::Outcome o =
      quire::testing::run_quire("run " + tutorial_ + " --entry loss --dim B=4 --precision f32");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_NE(o.output.find("result : f32 = 3.51354718208313"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("warning: the native backend is unavailable"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("did not finish within 1 s"), std::string::npos) << o.output;
}

}  // namespace
}  // namespace quire::native
