// `quire export` as a user runs it: what it writes, and its one-line errors
// (status 1, nothing written) for an unknown entry, an unwritable -o, a
// target that does not exist and an entry that reaches the reverse sweep.

#include <algorithm>
#include <filesystem>

#include "quire/support/cli_testing.h"

namespace quire::testing {
namespace {

class ExportCli : public CliTest {
 protected:
  std::string program() {
    return write("p.qr",
                 "fn f(x : ℝ[n: 3]) -> ℝ[] = sum(x * x)\n"
                 "fn g(x : ℝ[n: 3]) -> ℝ[n: 3] = grad(f)(x)\n");
  }
  /// The output is one line, the error, and holds `fragment`.
  static void expect_one_line_error(const Outcome& o, const std::string& fragment) {
    EXPECT_EQ(o.status, 1) << o.output;
    EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
    EXPECT_NE(o.output.find("quire: error: "), std::string::npos) << o.output;
    EXPECT_NE(o.output.find(fragment), std::string::npos) << o.output;
  }
};

TEST_F(ExportCli, WritesOneModulePerFileTheRuntimeAndTheReadme) {
  const Outcome o = run_quire("export " + program() + " --target pytorch --entry f -o " + file("out"));
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_NE(o.output.find("1 entry (f) as PyTorch: 3 files"), std::string::npos) << o.output;
  for (const char* name : {"p.py", "quire_runtime.py", "README.md"})
    EXPECT_TRUE(std::filesystem::exists(dir_ / "out" / name)) << name;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out" / "quire_prelude.py"));
}

TEST_F(ExportCli, AnUnknownEntryIsNamed) {
  const Outcome o = run_quire("export " + program() + " --target pytorch --entry nope -o " + file("out"));
  expect_one_line_error(o, "--entry nope: no such function (the program has: f, g");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out"));
}

TEST_F(ExportCli, AnUnwritableFolderIsRefused) {
  const std::string plain = write("plain", "a file, not a folder\n");
  const Outcome o = run_quire("export " + program() + " --target pytorch --entry f -o " + plain + "/out");
  expect_one_line_error(o, "cannot make the folder");
}

TEST_F(ExportCli, AnUnknownTargetIsNamed) {
  expect_one_line_error(run_quire("export " + program() + " --target onnx --entry f -o " + file("out")),
                        "--target onnx: unknown target; the targets are pytorch and c");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out"));
}

TEST_F(ExportCli, TheReverseSweepIsRefusedAtItsSite) {
  const Outcome o = run_quire("export " + program() + " --target pytorch --entry g -o " + file("out"));
  expect_one_line_error(o, "cannot export to PyTorch: f.vjp/%");
  EXPECT_NE(o.output.find("is an operation of the reverse sweep"), std::string::npos) << o.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out"));
}

}  // namespace
}  // namespace quire::testing
