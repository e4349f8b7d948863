// `quire export --target c` as a user runs it: the tutorial under every
// policy, the GPT example, and programs nobody wrote by hand, each built
// with -Wall -Wextra -Werror and checked by its own `make check` against the
// native backend, bit for bit (under AddressSanitizer and
// UndefinedBehaviorSanitizer for some); bad inputs to the program; and the
// command's one-line refusals.

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "quire/io/atomic_file.h"
#include "quire/io/npy.h"
#include "quire/kernel/generated_programs_testing.h"
#include "quire/support/cli_testing.h"

namespace quire {
namespace {

using testing::CliTest;
using testing::Outcome;
using testing::run_quire;

/// Runs a shell command line and collects its output.
Outcome run_shell(const std::string& command) {
  Outcome o;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return o;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) o.output.append(buffer, n);
  const int status = pclose(pipe);
  o.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
}

const char* const kSanitized =
    " CFLAGS='-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer'";

class CExportCli : public CliTest {
 protected:
  /// Exports with `args`, then `make check` in the folder (sanitized when asked): both pass.
  void export_and_check(const std::string& args, const std::string& out, bool sanitized = false) {
    const Outcome e = run_quire("export " + args + " --target c -o " + out);
    ASSERT_EQ(e.status, 0) << e.output;
    EXPECT_NE(e.output.find("as C: "), std::string::npos) << e.output;
    const Outcome m = run_shell("make -s -C " + out + " check" + (sanitized ? kSanitized : ""));
    ASSERT_EQ(m.status, 0) << m.output;
    EXPECT_NE(m.output.find("equal to the native backend's, bit for bit"), std::string::npos) << m.output;
  }
  static void expect_one_line_error(const Outcome& o, const std::string& fragment) {
    EXPECT_EQ(o.status, 1) << o.output;
    EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
    EXPECT_NE(o.output.find("quire: error: "), std::string::npos) << o.output;
    EXPECT_NE(o.output.find(fragment), std::string::npos) << o.output;
  }
  const std::string tutorial_ = std::string(QUIRE_SOURCE_DIR) + "/examples/tutorial/07_train.qr";
};

TEST_F(CExportCli, TheTutorialUnderEveryPolicyMatchesTheNativeBackendBitForBit) {
  for (const char* policy : {"f64", "f32", "bf16", "f16"}) {
    SCOPED_TRACE(policy);
    export_and_check(fmt::format("{} --entry loss --dim B=4 --precision {}", tutorial_, policy),
                     file(std::string("tutorial_") + policy));
  }
  for (const char* name : {"program.c", "kernels.c", "quire_prelude.h", "quire_runtime.h", "quire_runtime.c",
                           "Makefile", "README.md", "check/inputs/batch.0.npy", "check/expected/result.npy"})
    EXPECT_TRUE(std::filesystem::exists(file("tutorial_f64") + "/" + name)) << name;
  const std::string readme = io::read_file(file("tutorial_f64") + "/README.md");
  EXPECT_NE(readme.find("- `θ.blocks.proj.w`"), std::string::npos) << readme;
}

TEST_F(CExportCli, TheProgramAllocatesTheArenaQuireMemoryPrints) {
  const std::string out = file("arena");
  export_and_check(tutorial_ + " --entry loss --dim B=4", out);
  const std::string program = io::read_file(out + "/program.c");
  const Outcome m = run_quire("memory " + tutorial_ + " --entry loss --dim B=4");
  ASSERT_EQ(m.status, 0) << m.output;
  // In f64 the program's allocations are the count's stored values: the same arena, the peak exactly.
  EXPECT_NE(m.output.find("  arena       384 bytes"), std::string::npos) << m.output;
  EXPECT_NE(m.output.find("  C export    384 bytes: the arena `quire export --target c` allocates, its 27 allocations"),
            std::string::npos)
      << m.output;
  EXPECT_NE(program.find("static const int64_t quire_arena_bytes = 384;"), std::string::npos);
  EXPECT_NE(program.find("static const int64_t quire_arena_count = 27;"), std::string::npos);
  // A schedule that is not the program's is caught as the program runs.
  std::string broken = program;
  const size_t at = broken.find("static const int64_t quire_arena_count = 27;");
  broken.replace(at, std::string("static const int64_t quire_arena_count = 27;").size(),
                 "static const int64_t quire_arena_count = 26;");
  io::write_file_atomically(out + "/program.c", broken);
  const Outcome o = run_shell("make -s -C " + out + " check");
  EXPECT_NE(o.status, 0);
  EXPECT_NE(o.output.find("is not the arena schedule's"), std::string::npos) << o.output;
}

TEST_F(CExportCli, TheTutorialRunsCleanUnderTheSanitizers) {
  export_and_check(tutorial_ + " --entry loss --dim B=4 --precision bf16", file("asan"), /*sanitized=*/true);
}

TEST_F(CExportCli, TheGptExampleWithDropoutKeysAndGathersMatchesBitForBit) {
  // Its token ids, from its own data: the first two windows.
  const std::string gpt = std::string(QUIRE_SOURCE_DIR) + "/examples/gpt/gpt.qr";
  const io::NamedTensors data = io::read_npz(std::string(QUIRE_SOURCE_DIR) + "/examples/gpt/data/train.npz");
  auto first_rows = [](const runtime::Tensor& t) {
    runtime::Tensor r = runtime::Tensor::integer(t.kind, {2, t.shape.at(1)});
    std::copy_n(t.ints.begin(), r.ints.size(), r.ints.begin());
    return r;
  };
  io::NamedTensors inputs;
  for (const auto& [name, t] : data) inputs.emplace_back(name == "0" ? "batch.0" : "batch.1", first_rows(t));
  const std::string npz = file("gpt_inputs.npz");
  io::write_npz(npz, inputs);
  export_and_check(gpt + " --entry loss --dim B=2 --inputs " + npz, file("gpt"), /*sanitized=*/true);
  export_and_check(gpt + " --entry loss --dim B=2 --precision bf16 --inputs " + npz, file("gpt_bf16"));
}

TEST_F(CExportCli, GeneratedFunctionsAndTowersMatchBitForBit) {
  for (int towers = 0; towers < 2; ++towers)
    for (uint64_t seed = 0; seed < static_cast<uint64_t>(kernel::testing::generated_program_count(towers ? 3 : 6));
         ++seed) {
      const kernel::testing::GeneratedProgram g =
          towers ? kernel::testing::generate_module_program(seed) : kernel::testing::generate_program(seed);
      SCOPED_TRACE(g.source);
      const std::string source = write(fmt::format("g{}_{}.qr", towers, seed), g.source);
      // Finite reals and ids within their bounds, as --inputs.
      std::mt19937_64 rng(seed);
      io::NamedTensors inputs;
      if (!towers)
        for (size_t i = 0; i < g.argument_shapes.size(); ++i) {
          runtime::Tensor t;
          if (g.id_bounds[i] > 0) {
            t = runtime::Tensor::integer(runtime::ElemKind::I32, g.argument_shapes[i]);
            for (int64_t& v : t.ints) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(g.id_bounds[i]));
          } else {
            t = kernel::testing::finite_values(g.argument_shapes[i], rng());
          }
          inputs.emplace_back(fmt::format("{}{}", g.id_bounds[i] > 0 ? "i" : "x", i), std::move(t));
        }
      std::string args = source + " --entry f";
      if (!inputs.empty()) {
        const std::string npz = file(fmt::format("in{}_{}.npz", towers, seed));
        io::write_npz(npz, inputs);
        args += " --inputs " + npz;
      }
      for (const char* policy : {"f64", "f32"}) {
        SCOPED_TRACE(policy);
        export_and_check(args + " --precision " + policy, file(fmt::format("g{}_{}_{}", towers, seed, policy)),
                         /*sanitized=*/seed == 0);
      }
    }
}

TEST_F(CExportCli, TheProgramRefusesInputsOfAnotherShapeOrType) {
  const std::string out = file("shapes");
  export_and_check(tutorial_ + " --entry loss --dim B=4", out);
  // batch.1's file given for θ.head.b: another shape, named with the path.
  std::filesystem::copy_file(out + "/check/inputs/batch.1.npy", out + "/check/inputs/θ.head.b.npy",
                             std::filesystem::copy_options::overwrite_existing);
  Outcome o = run_shell("cd " + out + " && ./program check/inputs check/out");
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_NE(o.output.find("θ.head.b.npy: shape (4, 4), the program was exported for (4)"), std::string::npos)
      << o.output;
  // A file that is not NumPy's, and one that is missing.
  io::write_file_atomically(out + "/check/inputs/θ.head.b.npy", "not an array");
  o = run_shell("cd " + out + " && ./program check/inputs check/out");
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.output.find("not a NumPy file"), std::string::npos) << o.output;
  std::filesystem::remove(out + "/check/inputs/θ.head.b.npy");
  o = run_shell("cd " + out + " && ./program check/inputs check/out");
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.output.find("θ.head.b.npy: cannot open"), std::string::npos) << o.output;
}

TEST_F(CExportCli, GradientsThroughFoldsGathersAndParameterTreesMatchBitForBit) {
  // The tutorial tower's gradient: a fold's vjp, the copies' gradients stacked.
  const std::string tower =
      write("tower_grad.qr", "import \"" + std::string(QUIRE_SOURCE_DIR) +
                                 "/examples/tutorial/06_tower.qr\" as t\n"
                                 "fn loss(θ : params t.Tower, x : ℝ[batch: 4, model: 4]) -> ℝ[] = "
                                 "mean(t.Tower.apply(θ, x)^2)\n"
                                 "fn g(θ : params t.Tower, x : ℝ[batch: 4, model: 4]) -> params t.Tower = "
                                 "grad(loss)(θ, x)\n");
  for (const char* policy : {"f64", "bf16"}) {
    SCOPED_TRACE(policy);
    export_and_check(tower + " --entry g --precision " + policy, file(std::string("tower_") + policy),
                     /*sanitized=*/std::string(policy) == "bf16");
  }
  EXPECT_TRUE(std::filesystem::exists(file("tower_f64") + "/check/expected/result.blocks.proj.w.npy"));
}

TEST_F(CExportCli, ScansAndTheirGradientsMatchBitForBit) {
  // matrix_scan (its island), linear_scan (transposes around it), and the
  // gradient's adjoint scan and scan_grad_a, under f64, f32 (sanitized) and bf16.
  const std::string scans =
      write("scans.qr",
            "fn f(a : ℝ[b: 2, t: 5, n: 3, m: 3], x : ℝ[b: 2, t: 5, n: 3], c : ℝ[b: 2, t: 5, k: 4]) -> ℝ[] =\n"
            "  sum(tanh(matrix_scan(a * 0.5, x))) + sum(linear_scan(tanh(c), c) * c)\n"
            "fn g(a : ℝ[b: 2, t: 5, n: 3, m: 3], x : ℝ[b: 2, t: 5, n: 3], c : ℝ[b: 2, t: 5, k: 4]) ->\n"
            "    (ℝ[b: 2, t: 5, n: 3, m: 3], ℝ[b: 2, t: 5, n: 3], ℝ[b: 2, t: 5, k: 4]) =\n"
            "  (grad(f, wrt = a)(a, x, c), grad(f, wrt = x)(a, x, c), grad(f, wrt = c)(a, x, c))\n");
  for (const char* policy : {"f64", "f32", "bf16"}) {
    SCOPED_TRACE(policy);
    export_and_check(scans + " --entry g --precision " + policy, file(std::string("scans_") + policy),
                     /*sanitized=*/std::string(policy) == "f32");
  }
}

TEST_F(CExportCli, RefusesWhatItCannotExportWithOneLine) {
  const std::string grad = write("g.qr",
                                 "fn f(x : ℝ[n: 3]) -> ℝ[] = sum(x * x)\n"
                                 "fn g(x : ℝ[n: 3]) -> ℝ[n: 3] = grad(f)(x)\n");
  expect_one_line_error(run_quire("export " + grad + " --target c -o " + file("o2")),
                        "--target c exports one entry: name it with --entry");
  expect_one_line_error(run_quire("export " + grad + " --target c --entry nope -o " + file("o3")), "--entry nope");
  expect_one_line_error(run_quire("export " + grad + " --target pytorch --entry f --dim B=2 -o " + file("o4")),
                        "--dim applies to --target c alone");
  const std::string blocker = write("plain", "a file\n");
  expect_one_line_error(run_quire("export " + tutorial_ + " --target c --entry loss --dim B=4 -o " + blocker + "/out"),
                        "cannot make the folder");
  for (const char* o : {"o2", "o3", "o4"}) EXPECT_FALSE(std::filesystem::exists(file(o))) << o;
}

}  // namespace
}  // namespace quire
