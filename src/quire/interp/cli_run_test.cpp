// The `quire` command line as a user meets it: `check` on the tutorial and on
// a bad program, `run` on good input and on each kind of bad input. Runs the
// built binary (build/quire, beside build/src/ where this test lives).

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "quire/io/npy.h"
#include "quire/support/cli_testing.h"
#include "quire/runtime/tensor.h"
#include "quire/syntax/parser.h"

namespace quire {
namespace {

namespace fs = std::filesystem;

using quire::testing::Outcome;
using quire::testing::quire_binary;

fs::path tutorial(const std::string& name) { return fs::path(QUIRE_SOURCE_DIR) / "examples" / "tutorial" / name; }

Outcome quire(const std::string& args) { return quire::testing::run_quire(args); }

using Cli = quire::testing::CliTest;

TEST_F(Cli, CheckPrintsNothingOnTheTutorial) {
  for (const char* name :
       {"01_linear.qr", "02_norm.qr", "03_block.qr", "04_loss.qr", "05_dropout.qr", "06_tower.qr", "07_train.qr"}) {
    Outcome o = quire("check " + tutorial(name).string());
    EXPECT_EQ(o.status, 0) << name << ": " << o.output;
    EXPECT_EQ(o.output, "") << name;
  }
}

TEST_F(Cli, CheckReportsErrorsWithTheirPosition) {
  std::string bad = write("bad.qr", "dim B\nfn f(x : ℝ[batch: B]) -> ℝ[batch: B] =\n  x * scale\n");
  Outcome o = quire("check " + bad);
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.output, bad +
                          ":3:7: error[E0303]: unknown name `scale`\n"
                          "    3 |   x * scale\n"
                          "      |       ^^^^^\n");
  std::string two = write("two.qr", "fn f(x : ℝ[3]) -> ℝ[3] = y\nfn g(x : ℝ[3]) -> ℝ[4] = x\n");
  Outcome t = quire("check " + two);
  EXPECT_EQ(t.status, 1);
  EXPECT_TRUE(t.output.starts_with(two + ":1:26: error[E0303]: unknown name `y`\n")) << t.output;
  EXPECT_NE(t.output.find(two + ":2:26: error[E0401]:"), std::string::npos) << t.output;
  EXPECT_TRUE(t.output.ends_with("2 errors\n")) << t.output;
}

TEST_F(Cli, RunEvaluatesAnEntryDeterministically) {
  std::string args = "run " + tutorial("04_loss.qr").string() + " --entry loss --dim B=2 --seed 5";
  Outcome a = quire(args), b = quire(args);
  EXPECT_EQ(a.status, 0) << a.output;
  EXPECT_TRUE(a.output.starts_with("result = ")) << a.output;
  EXPECT_EQ(a.output, b.output);
  // Parameters written and read back give the same result.
  std::string params = file("p.safetensors");
  Outcome c = quire(args + " --params-out " + params);
  Outcome d = quire(args + " --params " + params);
  EXPECT_EQ(c.output, a.output);
  EXPECT_EQ(d.output, a.output);
  // A tower, stacked, with its leading axes.
  Outcome t = quire("run " + tutorial("06_tower.qr").string() + " --entry Tower.apply");
  EXPECT_EQ(t.status, 1);
  EXPECT_EQ(t.output, "quire: error: argument `x` has `...` axes: an entry needs known shapes\n");
}

TEST_F(Cli, AnEntryOfIntegerIdsIsPlannedAndDumpedWithoutItsValues) {
  // Token ids are an argument no seed can draw: plan and the kernel and host
  // dumps compile the call from the shapes alone.
  const std::string g =
      write("g.qr", "dim B\nfn f(ids : i32[n: B], table : ℝ[v: 7, d: 3]) -> ℝ[] = sum(exp(gather(table, ids)))\n");
  Outcome plan = quire("plan " + g + " --entry f --dim B=5");
  EXPECT_EQ(plan.status, 0) << plan.output;
  EXPECT_NE(plan.output.find("k0    f/%4"), std::string::npos) << plan.output;
  Outcome host = quire("dump " + g + " --stage host --entry f --dim B=5");
  EXPECT_EQ(host.status, 0) << host.output;
  EXPECT_NE(host.output.find("reference kernels (gather is data movement)"), std::string::npos) << host.output;
  EXPECT_NE(host.output.find("ids i32[5] 20 B [in, s0]"), std::string::npos) << host.output;
  Outcome kernels = quire("dump " + g + " --stage kernel --entry f --dim B=5");
  EXPECT_EQ(kernels.status, 0) << kernels.output;
  EXPECT_NE(kernels.output.find("// k0: 1 launch at f/%4"), std::string::npos) << kernels.output;
  // Run, it needs them.
  Outcome run = quire("run " + g + " --entry f --dim B=5");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("--inputs"), std::string::npos) << run.output;
}

TEST_F(Cli, RunTakesTheProductStep) {
  const std::string loss = tutorial("04_loss.qr").string();
  const std::string args = "run " + loss + " --entry loss --dim B=2 --seed 5 --precision f32";
  Outcome fma = quire(args + " --product-step fma"), separate = quire(args + " --product-step separate");
  Outcome plain = quire(args);
  EXPECT_EQ(fma.status, 0) << fma.output;
  EXPECT_TRUE(fma.output.starts_with("result : f32 = ")) << fma.output;
  EXPECT_EQ(separate.output, plain.output);  // separate is the default
  Outcome realization = quire("dump " + loss + " --stage precision --entry loss --precision f32 --product-step fma");
  EXPECT_EQ(realization.status, 0) << realization.output;
  EXPECT_NE(realization.output.find("under --precision f32 --product-step fma"), std::string::npos) << realization.output;
  EXPECT_NE(realization.output.find("each step one fused multiply-add"), std::string::npos) << realization.output;
  Outcome exact = quire("run " + loss + " --entry loss --dim B=2 --precision exact --product-step fma");
  EXPECT_EQ(exact.status, 1);
  EXPECT_EQ(exact.output, "quire: error: --product-step: the exact reference rounds nothing\n");
  Outcome bad = quire(args + " --product-step fused");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--product-step"), std::string::npos) << bad.output;
}

TEST_F(Cli, RunReadsArgumentsFromAnNpz) {
  std::string inputs = file("in.npz");
  runtime::Tensor x = runtime::Tensor::real({2, 4}, 1.0), y = runtime::Tensor::real({2, 4}, 1.0);
  io::write_npz(inputs, {{"batch.0", x}, {"batch.1", y}});
  Outcome ok = quire("run " + tutorial("04_loss.qr").string() + " --entry loss --dim B=2 --inputs " + inputs);
  EXPECT_EQ(ok.status, 0) << ok.output;
  io::write_npz(inputs, {{"batch.0", x}});
  Outcome missing = quire("run " + tutorial("04_loss.qr").string() + " --entry loss --dim B=2 --inputs " + inputs);
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.output,
            "quire: error: " + inputs + ": no array `batch.1` for argument `batch.1` (expected shape [2, 4])\n");
  io::write_npz(inputs, {{"batch.0", runtime::Tensor::real({3, 4})}, {"batch.1", y}});
  Outcome shape = quire("run " + tutorial("04_loss.qr").string() + " --entry loss --dim B=2 --inputs " + inputs);
  EXPECT_EQ(shape.status, 1);
  EXPECT_EQ(shape.output,
            "quire: error: " + inputs +
                ": array `batch.0` has shape [3, 4], the argument is ℝ[batch: B, model: 4] = shape [2, 4]\n");
}

// The envelope guard: the tutorial solved at 1e-3, then run on inputs 50
// times the envelope's: a warning names the first value beyond its range and
// its source line, and the result is printed; --strict-envelope makes it an
// error (status 1), and asks for a realization.
TEST_F(Cli, RunUnderARealizationWarnsOfAValueBeyondItsRange) {
  const std::string program = tutorial("07_train.qr").string();
  const std::string envelope = file("env.json"), realization = file("r.json"), inputs = file("big.npz");
  ASSERT_EQ(quire("calibrate " + program + " --entry loss --dim B=4 --out " + envelope).status, 0);
  Outcome solved = quire("solve " + program + " --precision " + envelope + " --budget 1e-3 --out " + realization);
  ASSERT_EQ(solved.status, 0) << solved.output;
  Outcome inside = quire("run " + program + " --entry loss --dim B=4 --realize @" + realization + " --strict-envelope");
  EXPECT_EQ(inside.status, 0) << inside.output;
  EXPECT_EQ(inside.output.find("W0801"), std::string::npos) << inside.output;
  std::vector<double> big(16);
  for (size_t i = 0; i < big.size(); ++i) big[i] = 50.0 * (static_cast<double>(i % 5) - 2);
  runtime::Tensor x = runtime::Tensor::real({4, 4});
  std::copy(big.begin(), big.end(), x.reals.data());
  io::write_npz(inputs, {{"batch.0", x}, {"batch.1", runtime::Tensor::real({4, 4}, 1.0)}});
  const std::string run = "run " + program + " --entry loss --dim B=4 --realize @" + realization + " --inputs " + inputs;
  for (const char* backend : {"interp", "native"}) {
    SCOPED_TRACE(backend);
    Outcome warned = quire(run + " --backend " + backend);
    EXPECT_EQ(warned.status, 0) << warned.output;
    EXPECT_NE(warned.output.find("warning[W0801]: `"), std::string::npos) << warned.output;
    EXPECT_NE(warned.output.find("does not cover this input"), std::string::npos) << warned.output;
    EXPECT_NE(warned.output.find("result = "), std::string::npos) << warned.output;
    Outcome strict = quire(run + " --backend " + backend + " --strict-envelope");
    EXPECT_EQ(strict.status, 1) << strict.output;
    EXPECT_NE(strict.output.find("error[E0801]: `"), std::string::npos) << strict.output;
    EXPECT_EQ(strict.output.find("result = "), std::string::npos) << strict.output;
  }
  Outcome alone = quire("run " + program + " --entry loss --dim B=4 --strict-envelope");
  EXPECT_EQ(alone.status, 1);
  EXPECT_EQ(alone.output, "quire: error: --strict-envelope: it checks a run under --realize; there is none\n");
}

// calibrate --samples-from run: the training run's first K + 32 batches in
// its order, written beside the envelope as a file of samples, the first K
// calibrated and the rest held out by solve.
TEST_F(Cli, CalibrateTakesTheTrainingRunsOwnBatches) {
  const fs::path dir = fs::path(file("tutorial"));
  fs::copy(fs::path(QUIRE_SOURCE_DIR) / "examples" / "tutorial", dir, fs::copy_options::recursive);
  const std::string program = (dir / "07_train.qr").string(), envelope = (dir / "env.json").string();
  Outcome o = quire("calibrate " + program + " --entry loss --samples-from run --samples 4 --out " + envelope);
  ASSERT_EQ(o.status, 0) << o.output;
  const std::string samples = (dir / "env.samples.npz").string();
  EXPECT_NE(o.output.find("calibrate: the run's first 36 batches"), std::string::npos) << o.output;
  const io::NamedTensors arrays = io::read_npz(samples);
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays[0].first, "batch.0");
  EXPECT_EQ(arrays[0].second.shape, (runtime::Shape{36, 8, 4}));
  // Each batch holds 8 distinct samples of the data file (the run shuffles
  // with seed 3: the loader's order, Loader* tests hold it).
  const io::NamedTensors data = io::read_npz((dir / "data" / "pairs.npz").string());
  ASSERT_EQ(data.at(0).second.shape, (runtime::Shape{1024, 4}));
  auto row = [](const runtime::Tensor& t, int64_t r) {
    return std::vector<double>(t.reals.begin() + r * 4, t.reals.begin() + r * 4 + 4);
  };
  std::set<std::vector<double>> file_rows, batch_rows;
  for (int64_t r = 0; r < 1024; ++r) file_rows.insert(row(data.at(0).second, r));
  for (int64_t r = 0; r < 8; ++r) batch_rows.insert(row(arrays[0].second, r));
  EXPECT_EQ(batch_rows.size(), 8u);
  for (const auto& r : batch_rows) EXPECT_TRUE(file_rows.count(r));
  Outcome solved = quire("solve " + program + " --precision " + envelope + " --budget 1e-3");
  EXPECT_EQ(solved.status, 0) << solved.output;
  EXPECT_NE(solved.output.find("the worst of 32 samples held out (4…35 of " + samples + ")"), std::string::npos)
      << solved.output;
  Outcome no_out = quire("calibrate " + program + " --entry loss --samples-from run");
  EXPECT_EQ(no_out.status, 1);
  EXPECT_EQ(no_out.output,
            "quire: error: --samples-from run: the batches are written beside the envelope: give --out FILE\n");
  Outcome other = quire("calibrate " + program + " --entry Tower.apply --samples-from run --out " + envelope);
  EXPECT_EQ(other.status, 1);
  EXPECT_NE(other.output.find("are arguments of its objective `loss`, not of `Tower.apply`"), std::string::npos)
      << other.output;
}

TEST_F(Cli, RunRefusesBadInvocations) {
  std::string loss = tutorial("04_loss.qr").string();
  Outcome missing = quire("run " + file("nothere.qr") + " --entry f");
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.output,
            file("nothere.qr") + ": error[E0301]: cannot read the program: No such file or directory\n");
  Outcome dim = quire("run " + loss + " --entry loss --dim B=two");
  EXPECT_EQ(dim.status, 1);
  EXPECT_EQ(dim.output, "quire: error: --dim B=two: `two` is not an integer\n");
  Outcome unknown_dim = quire("run " + loss + " --entry loss --dim C=2");
  EXPECT_EQ(unknown_dim.output, "quire: error: --dim C=2: the program has no dimension `C` (it has: B)\n");
  Outcome zero = quire("run " + loss + " --entry loss --dim B=0");
  EXPECT_EQ(zero.output, "quire: error: --dim B=0: a dimension is at least 1\n");
  Outcome entry = quire("run " + loss + " --entry nope --dim B=2");
  EXPECT_EQ(entry.status, 1);
  EXPECT_EQ(entry.output, "quire: error: --entry nope: no such function (the program has: Linear.apply, loss)\n");
  Outcome unbound = quire("run " + loss + " --entry loss");
  EXPECT_EQ(unbound.status, 1);
  EXPECT_EQ(unbound.output, "quire: error: argument `batch.0`: give the dimension B with --dim B=N\n");
  Outcome npz = quire("run " + loss + " --entry loss --dim B=2 --inputs " + file("absent.npz"));
  EXPECT_EQ(npz.status, 1);
  EXPECT_TRUE(npz.output.starts_with("quire: error: " + file("absent.npz") + ": ")) << npz.output;
}

/// The dtype a safetensors file's header gives `name` ("" when absent).
std::string safetensors_dtype(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) return "";
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  std::string header = bytes.substr(8, n);
  size_t at = header.find("\"" + name + "\":{\"dtype\":\"");
  if (at == std::string::npos) return "";
  at = header.find(":\"", header.find("dtype", at)) + 2;
  return header.substr(at, header.find('"', at) - at);
}

TEST_F(Cli, TheTutorialRunsUnderEveryPolicy) {
  std::string args = "run " + tutorial("07_train.qr").string() + " --entry loss --dim B=4";
  Outcome f64 = quire(args), f64_named = quire(args + " --precision f64");
  EXPECT_EQ(f64.status, 0) << f64.output;
  EXPECT_EQ(f64.output, "result = 3.5135467383329324\n");
  EXPECT_EQ(f64_named.output, f64.output);
  for (const char* policy : {"f32", "bf16", "f16"}) {
    Outcome o = quire(args + " --precision " + policy), again = quire(args + " --precision " + policy);
    EXPECT_EQ(o.status, 0) << policy << ": " << o.output;
    EXPECT_TRUE(o.output.starts_with(fmt::format("result : {} = 3.5", policy))) << o.output;
    EXPECT_EQ(o.output, again.output) << "same program, seed and policy: same bits";
  }
  Outcome bad = quire(args + " --precision f8");
  EXPECT_EQ(bad.status, 105) << "CLI11's status for a value not allowed (docs/cli.md)";
  EXPECT_NE(bad.output.find("--precision"), std::string::npos) << bad.output;
}

TEST_F(Cli, ResultsAreWrittenInTheirRealizedType) {
  std::string args = "run " + tutorial("07_train.qr").string() + " --entry loss --dim B=4 --precision bf16";
  std::string st = file("r.safetensors"), npy = file("r.npy");
  Outcome a = quire(args + " --out " + st), b = quire(args + " --out " + npy);
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_EQ(safetensors_dtype(st, "result"), "BF16");
  // NumPy has no bf16: the .npy holds the same value as <f4.
  std::ifstream in(npy, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("'descr': '<f4'"), std::string::npos);
  EXPECT_EQ(io::read_npy(npy).reals.at(0), 3.53125);
  Outcome f16 = quire("run " + tutorial("07_train.qr").string() + " --entry loss --dim B=4 --precision f16 --out " + npy);
  ASSERT_EQ(f16.status, 0) << f16.output;
  std::ifstream in16(npy, std::ios::binary);
  std::string bytes16((std::istreambuf_iterator<char>(in16)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes16.find("'descr': '<f2'"), std::string::npos);
  Outcome wrong = quire(args + " --out " + file("r.txt"));
  EXPECT_EQ(wrong.status, 1);
  EXPECT_EQ(wrong.output, "quire: error: --out " + file("r.txt") + ": the result is written as .npy, .npz or .safetensors\n");
}

TEST_F(Cli, ATreeOfF32LeavesIsShownAndWrittenAsF32) {
  const std::string program = file("m.qr");
  std::ofstream(program) << R"(module M { param w : ℝ[3] init = normal(1.0) }
fn f(θ : params M, x : ℝ[3]) -> ℝ[] = sum(θ.w * x)
fn g(θ : params M, x : ℝ[3]) -> (ℝ[], params M) = value_and_grad(f)(θ, x)
)";
  const std::string st = file("g.safetensors");
  Outcome r = quire("run " + program + " --entry g --precision f32 --out " + st);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("result.0 : f32 = "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("result.1.w : f32 = "), std::string::npos) << r.output;
  EXPECT_EQ(safetensors_dtype(st, "result.1.w"), "F32");
  Outcome whole = quire("run " + program + " --entry g --out " + st);  // f64: f64 leaves
  ASSERT_EQ(whole.status, 0) << whole.output;
  EXPECT_NE(whole.output.find("result.1.w = "), std::string::npos) << whole.output;
  EXPECT_EQ(safetensors_dtype(st, "result.1.w"), "F64");
}

TEST_F(Cli, FrozenParameterReadOnlyInBf16TakesHalfTheBytes) {
  std::string prog = write("frozen.qr", R"(module M {
  param t : ℝ[64, 64]  init = xavier_uniform  frozen
  param w : ℝ[64, 64]  init = xavier_uniform
  fn apply(x : ℝ[64]) -> ℝ[64] = precision(bf16) { x · t } · w
}
fn f(θ : params M, x : ℝ[64]) -> ℝ[] = sum(M.apply(θ, x))
)");
  std::string p32 = file("p32.safetensors"), p64 = file("p64.safetensors");
  Outcome a = quire("run " + prog + " --entry f --precision f32 --params-out " + p32);
  Outcome b = quire("run " + prog + " --entry f --params-out " + p64);
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_EQ(safetensors_dtype(p32, "t"), "BF16");
  EXPECT_EQ(safetensors_dtype(p32, "w"), "F32");
  // Under f64 too: it is read only inside the region.
  EXPECT_EQ(safetensors_dtype(p64, "t"), "BF16");
  EXPECT_EQ(safetensors_dtype(p64, "w"), "F64");
  // t: 4096 × 2 bytes, w: 4096 × 4 bytes, plus the header.
  EXPECT_LT(fs::file_size(p32), 4096u * 6 + 512);
  EXPECT_GT(fs::file_size(p32), 4096u * 6);
  // Read back, the parameters give the same result bits.
  Outcome c = quire("run " + prog + " --entry f --precision f32 --params " + p32);
  EXPECT_EQ(c.output, a.output);
}

TEST_F(Cli, FormerCrashesAreDiagnostics) {
  // Each of these once reached a kernel with the wrong element kinds (abort)
  // or clipped a slice silently.
  std::string cmp = write("cmp.qr", "fn f(x : ℝ[3]) -> bool[3] = (x > 0.0) == 1.0\n");
  Outcome a = quire("run " + cmp + " --entry f");
  EXPECT_EQ(a.status, 1) << a.output;
  EXPECT_NE(a.output.find("error[E0406]"), std::string::npos) << a.output;
  std::string init =
      write("init.qr", "module M {\n  param w : ℝ[4] init = uniform(2, 1)\n  fn f(x : ℝ[4]) -> ℝ[4] = x * w\n}\n");
  Outcome b = quire("run " + init + " --entry M.f");
  EXPECT_EQ(b.status, 1) << b.output;
  EXPECT_NE(b.output.find("error[E0401]: uniform(a, b) needs a ≤ b"), std::string::npos) << b.output;
  std::string slice = write("slice.qr", "dim B\nfn f(x : ℝ[b: B, 2]) -> ℝ[b: 4, 2] = slice(axis b, x, 0, 4)\n");
  Outcome c = quire("run " + slice + " --entry f --dim B=2");
  EXPECT_EQ(c.status, 1) << c.output;
  EXPECT_EQ(c.output, "quire: error: " + slice +
                          ":2:38: in f/%2: slice [0, 4) of axis `b` is out of range: the axis has size 2\n");
  // Sizes whose product wraps at 2^64: a split's parts (SIGSEGV in the kernel
  // before), and run-time dims each under the 2^40 limit (`result = 0` before).
  std::string split = write("split.qr", "fn f(x : ℝ[a: 4]) -> ℝ[q: 4] = "
                                        "sum(axis p, split(axis a, x, p: 4611686018427387905, q: 4))\n");
  Outcome s = quire("run " + split + " --entry f");
  EXPECT_EQ(s.status, 1) << s.output;
  EXPECT_NE(s.output.find("error[E0404]: split: the parts' product overflows"), std::string::npos) << s.output;
  std::string dims = write("dims.qr", "dim A B\nfn f(x : ℝ[a: A, b: B]) -> ℝ[] = sum(axis a, sum(axis b, x))\n");
  for (const char* command : {"run", "dump --stage sensitivity", "dump --stage host", "plan"}) {
    Outcome d = quire(fmt::format("{} {} --entry f --dim A=4294967296 --dim B=4294967296", command, dims));
    EXPECT_EQ(d.status, 1) << command << ": " << d.output;
    EXPECT_NE(d.output.find("at A = 4294967296, B = 4294967296 a value of shape [4294967296, 4294967296] would "
                            "have more than 2^40 elements"),
              std::string::npos)
        << command << ": " << d.output;
  }
}

TEST_F(Cli, EndlessFilesAreRefusedByName) {
  // Each read /dev/zero until memory ran out, then blamed the dimensions.
  std::string program = write("imp.qr", "import \"/dev/zero\" as z\n");
  Outcome i = quire("check " + program);
  EXPECT_EQ(i.status, 1) << i.output;
  EXPECT_NE(i.output.find("error[E0301]: cannot read `/dev/zero`: is longer than 16 MiB"), std::string::npos)
      << i.output;
  Outcome p = quire("run " + tutorial("04_loss.qr").string() + " --entry loss --dim B=2 --params /dev/zero");
  EXPECT_EQ(p.status, 1) << p.output;
  EXPECT_NE(p.output.find("/dev/zero: is longer than 1 GiB and not a regular file"), std::string::npos) << p.output;
}

TEST_F(Cli, AChainOfOperatorsIsBoundedNotACrash) {
  auto chain = [](size_t links) {
    std::string body = "x";
    for (size_t i = 0; i < links; ++i) body += " + x";
    return "fn f(x : ℝ[n: 4]) -> ℝ[n: 4] = " + body + "\n";
  };
  // 150 000 terms overflowed the stack freeing the syntax tree.
  std::string deep = write("deep.qr", chain(150000));
  Outcome d = quire("check " + deep);
  EXPECT_EQ(d.status, 1) << d.output.substr(0, 400);
  EXPECT_NE(d.output.find("error[E0202]: expression too deep: its tree has 150001 levels"), std::string::npos);
  EXPECT_LT(d.output.size(), 1000u);  // the 1.2 MB line is shown as a window
  // Just under the limit, every stage's recursive walk holds, in the sanitizer
  // build too: Core, the gradient, the reference interpreter and native.
  std::string edge = write("edge.qr", chain(syntax::kMaxExprHeight - 1) +
                                          "fn loss(x : ℝ[n: 4]) -> ℝ[] = sum(axis n, f(x))\n"
                                          "fn g(x : ℝ[n: 4]) -> ℝ[n: 4] = grad(loss)(x)\n");
  for (const char* args : {" --entry f --backend interp", " --entry f", " --entry g"}) {
    Outcome r = quire("run " + edge + args);
    EXPECT_EQ(r.status, 0) << args << ": " << r.output.substr(0, 400);
  }
  Outcome core = quire("dump " + edge + " --stage core");
  EXPECT_EQ(core.status, 0) << core.output.substr(0, 400);
}

}  // namespace
}  // namespace quire
