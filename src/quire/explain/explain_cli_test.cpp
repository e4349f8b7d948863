// `quire explain` on programs nobody wrote by hand (kernel/generated_programs_testing.h)
// and its refusals of bad input. The tutorial's document, its determinism, its
// appendix and its HTML in a browser are tests/system/explain.py's.

#include <gtest/gtest.h>

#include <filesystem>

#include "quire/io/atomic_file.h"
#include "quire/kernel/generated_programs_testing.h"
#include "quire/support/cli_testing.h"
#include "quire/support/sha256.h"

namespace quire {
namespace {

using testing::CliTest;
using testing::run_quire;

const char* const kSections[] = {"## The parameters",
                                 "## §0 Summary",
                                 "## §1 The source",
                                 "## §2 Elaboration",
                                 "## §3 Core",
                                 "## §4 Differentiation",
                                 "## §5 The e-graph",
                                 "### §6.1 The envelope",
                                 "### §6.2 The sensitivities",
                                 "### §6.3 The realization",
                                 "### §6.4 The bound",
                                 "## §7 Fusion",
                                 "## §8 The machine",
                                 "## §9 The kernels",
                                 "## §10 Targets",
                                 "## §11 Measured",
                                 "## §12 Sites",
                                 "## §13 Memory",
                                 "## Appendix: the commands"};

/// Every line of DIR/SHA256SUMS names a file whose digest it holds, and every
/// file in DIR but SHA256SUMS is named.
void expect_checksums_hold(const std::filesystem::path& dir) {
  const std::string sums = io::read_file((dir / "SHA256SUMS").string());
  size_t listed = 0;
  for (size_t at = 0; at < sums.size();) {
    const size_t end = sums.find('\n', at);
    const std::string line = sums.substr(at, end - at);
    at = end + 1;
    ASSERT_GT(line.size(), 66u) << line;
    EXPECT_EQ(support::sha256_hex(io::read_file((dir / line.substr(66)).string())), line.substr(0, 64)) << line;
    ++listed;
  }
  size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(listed + 1, files);
}

class ExplainCli : public CliTest {};

TEST_F(ExplainCli, ExplainsGeneratedFunctionsAndTowers) {
  for (int towers = 0; towers < 2; ++towers) {
    for (uint64_t seed = 0; seed < (towers ? 2u : 4u); ++seed) {
      const kernel::testing::GeneratedProgram g =
          towers ? kernel::testing::generate_module_program(seed) : kernel::testing::generate_program(seed);
      SCOPED_TRACE(g.source);
      const std::string file = write(fmt::format("g{}_{}.qr", towers, seed), g.source);
      const std::string out = this->file(fmt::format("doc{}_{}", towers, seed));
      const auto o = run_quire(fmt::format("explain {} --entry f -o {}", file, out));
      ASSERT_EQ(o.status, 0) << o.output;
      const std::string md = io::read_file(out + "/explain.md");
      for (const char* section : kSections) EXPECT_NE(md.find(section), std::string::npos) << section;
      const std::string html = io::read_file(out + "/explain.html");
      EXPECT_NE(html.find("<section id=\"sites\">"), std::string::npos);
      expect_checksums_hold(out);
      // A second run gives the same document, byte for byte.
      const std::string again = this->file(fmt::format("again{}_{}", towers, seed));
      ASSERT_EQ(run_quire(fmt::format("explain {} --entry f -o {}", file, again)).status, 0);
      EXPECT_EQ(io::read_file(again + "/explain.md"), md);
      EXPECT_EQ(io::read_file(again + "/explain.html"), html);
    }
  }
}

TEST_F(ExplainCli, RefusesBadInputWithOneClearError) {
  const std::string tutorial = std::string(QUIRE_SOURCE_DIR) + "/examples/tutorial/07_train.qr";
  const std::string dropout = std::string(QUIRE_SOURCE_DIR) + "/examples/tutorial/05_dropout.qr";
  const std::string garbage = write("profile.json", "{ not json");
  const std::string blocker = write("a_file", "");
  struct Case {
    std::string args;
    std::string message;
  };
  const Case cases[] = {
      {tutorial + " --entry nope --dim B=4 -o " + file("d1"), "nope"},
      {tutorial + " --entry loss --dim B=4 --budget 0 -o " + file("d2"),
       "--budget 0: the budget must be a number above 0"},
      {tutorial + " --entry loss --dim B=4 --budget -1e-3 -o " + file("d3"), "the budget must be a number above 0"},
      {tutorial + " --entry loss --dim B=4 --budget abc -o " + file("d4"), "--budget abc"},
      {tutorial + " --entry loss --dim B=4 --budget 1e-3 --precision f32 -o " + file("d5"), "leave out --precision"},
      {tutorial + " --entry loss --dim B=4 -o " + blocker + "/doc", "cannot create the folder"},
      {tutorial + " --entry loss --dim B=4 --profile " + garbage + " -o " + file("d6"), garbage},
      {tutorial + " --entry loss --dim B=4 --target fortran -o " + file("d8"), "`fortran` is not a target"},
      {tutorial + " --dim B=4 -o " + file("d9"), "give --entry NAME"},
      {dropout + " --step -o " + file("d10"), "has no training run"},
      {tutorial + " --entry loss -o " + file("d11"), "give --dim B="},
      {tutorial + " --entry loss --dim B=4 --site nope/%1 -o " + file("d12"), "--site nope/%1"},
  };
  for (const Case& c : cases) {
    const auto o = run_quire("explain " + c.args);
    EXPECT_EQ(o.status, 1) << c.args << "\n" << o.output;
    EXPECT_NE(o.output.find("quire: error:"), std::string::npos) << c.args << "\n" << o.output;
    EXPECT_NE(o.output.find(c.message), std::string::npos) << c.args << "\n" << o.output;
  }
}

}  // namespace
}  // namespace quire
