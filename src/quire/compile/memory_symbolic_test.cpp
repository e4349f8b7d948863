// memory --symbolic (memory_symbolic.h): the formulas against the counts
// they were fitted from and, beyond the grid, against counts they were not;
// the check off the grid refusing a peak that is not one polynomial; several
// dimensions at once; the command as a user meets it.

#include "quire/compile/memory_symbolic.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "quire/elab/elab_testing.h"
#include "quire/grad/vjp.h"
#include "quire/support/cli_testing.h"

namespace quire::compile {
namespace {

int64_t value(const Polynomial& p, const std::map<std::string, int64_t>& at) {
  __int128 v = 0;
  EXPECT_TRUE(p.value_at(at, v)) << p.str();
  return static_cast<int64_t>(v);
}

CallMemory count_at(const elab::Program& prog, CompileRequest request, const std::map<std::string, int64_t>& dims) {
  request.dims = dims;
  return count_call_memory(prog, compile(prog, request));
}

TEST(MemorySymbolic, TheTutorialsFormulasGiveTheCountAtSizesOffTheGrid) {
  auto e = elab::testing::elaborate_tutorial();
  ASSERT_TRUE(e->ok()) << e->rendered();
  elab::Program& prog = *e->prog;
  // The loss, and its vjp under both remats, fitted from B = 8 on (below
  // it the vjp's peak is elsewhere: the gradient, whose size B does not
  // change, outweighs the batch's values there).
  const int loss = prog.find_function("loss");
  const int vjp = grad::vjp(prog, loss, {0});
  for (const auto& [entry, remat] : {std::pair{loss, interp::Remat::Recompute}, std::pair{vjp, interp::Remat::Store},
                                     std::pair{vjp, interp::Remat::Recompute}}) {
    CompileRequest request;
    request.entry = entry;
    request.dims = {{"B", 8}};
    request.remat = remat;
    const SymbolicMemory s = count_symbolic_memory(prog, request);
    // The batch's two [B, 4] f64 tensors and θ (and the vjp's seed).
    EXPECT_EQ(s.inputs.str(), entry == loss ? "64·B + 736" : "64·B + 744");
    EXPECT_EQ(s.parameters.str(), "736");
    for (int64_t b : {8, 9, 13, 40}) {  // from the grid up: below it the peak may sit elsewhere
      const CallMemory m = count_at(prog, request, {{"B", b}});
      EXPECT_EQ(value(s.peak, {{"B", b}}), m.peak_bytes) << "B = " << b;
      EXPECT_EQ(value(s.needs, {{"B", b}}), m.input_bytes + m.peak_bytes) << "B = " << b;
      EXPECT_EQ(value(s.outputs, {{"B", b}}), m.output_bytes) << "B = " << b;
    }
    ASSERT_FALSE(s.buffers.empty());
    for (size_t k = 1; k < s.buffers.size(); ++k) EXPECT_LE(s.buffers[k].bytes_at_given, s.buffers[k - 1].bytes_at_given);
    for (const SymbolicBuffer& b : s.buffers) EXPECT_EQ(value(b.bytes, {{"B", 8}}), b.bytes_at_given);
  }
}

TEST(MemorySymbolic, APeakThatMovesToAnotherSiteIsRefusedNotFitted) {
  // Up to B = 40 the peak is the [40] temporary of w, beyond it the [B] one of
  // x: a maximum of two lines, which no one polynomial is.
  auto e = elab::testing::elaborate_text(R"(dim B
fn f(x : ℝ[b: B], w : ℝ[n: 40]) -> ℝ[] =
  let a = sum(exp(w) * 2.0)
  let c = sum(exp(x) * 2.0)
  a + c
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  CompileRequest request;
  request.entry = e->prog->find_function("f");
  request.dims = {{"B", 30}};
  EXPECT_NO_THROW(count_symbolic_memory(*e->prog, request));  // 30…33, checked at 35: one regime
  request.dims = {{"B", 37}};
  try {
    count_symbolic_memory(*e->prog, request);
    ADD_FAILURE() << "fitted a peak that is a maximum of two lines";
  } catch (const SymbolicError& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("the peak is not one polynomial"), std::string::npos) << what;
    EXPECT_NE(what.find("fitted on B = 37…40"), std::string::npos) << what;
    EXPECT_NE(what.find("at B = 42, where the count is"), std::string::npos) << what;
  }
}

TEST(MemorySymbolic, SeveralDimensionsAtOnce) {
  auto e = elab::testing::elaborate_text(R"(dim B
dim T
fn f(x : ℝ[b: B, t: T], y : ℝ[t: T]) -> ℝ[b: B] = sum(axis t, exp(x) * y + x * x)
)");
  ASSERT_TRUE(e->ok()) << e->rendered();
  CompileRequest request;
  request.entry = e->prog->find_function("f");
  request.dims = {{"B", 2}, {"T", 3}};
  const SymbolicMemory s = count_symbolic_memory(*e->prog, request);
  EXPECT_EQ(s.inputs.str(), "8·B·T + 8·T");
  EXPECT_EQ(s.outputs.str(), "8·B");
  for (int64_t b : {1, 5, 9})
    for (int64_t t : {1, 4, 11}) {
      const CallMemory m = count_at(*e->prog, request, {{"B", b}, {"T", t}});
      EXPECT_EQ(value(s.peak, {{"B", b}, {"T", t}}), m.peak_bytes) << b << ", " << t;
    }
  request.dims = {};
  EXPECT_THROW(count_symbolic_memory(*e->prog, request), SymbolicError);
}

TEST(MemorySymbolic, PolynomialsPrintHighestDegreeFirstWithExactCoefficients) {
  Polynomial p;
  p.dims = {"B", "T"};
  p.terms = {{{0, 0}, 736}, {{1, 0}, 64}, {{1, 1}, 8}, {{0, 2}, -3}};
  EXPECT_EQ(p.str(), "8·B·T - 3·T^2 + 64·B + 736");
  p.denominator = 2;
  EXPECT_EQ(p.str(), "4·B·T - (3/2)·T^2 + 32·B + 368");
  __int128 v = 0;
  EXPECT_TRUE(p.value_at({{"B", 1}, {"T", 2}}, v));  // (16 - 12 + 64 + 736) / 2
  EXPECT_EQ(static_cast<int64_t>(v), 402);
  EXPECT_FALSE(p.value_at({{"B", 0}, {"T", 1}}, v));  // (736 - 3) / 2 is not whole
  EXPECT_EQ(Polynomial{}.str(), "0");
}

using Cli = quire::testing::CliTest;
using quire::testing::Outcome;

TEST_F(Cli, MemorySymbolicPrintsFormulasAndRefusesWhatItCannotFit) {
  const std::string tutorial =
      (std::filesystem::path(QUIRE_SOURCE_DIR) / "examples" / "tutorial" / "07_train.qr").string();
  Outcome o = quire::testing::run_quire("memory " + tutorial + " --entry loss --dim B=4 --symbolic --format json");
  ASSERT_EQ(o.status, 0) << o.output;
  const auto j = nlohmann::json::parse(o.output);
  EXPECT_EQ(j["format"], "quire-memory-symbolic");
  EXPECT_EQ(j["needs"], "160·B + 736");  // 1376 at B = 4, `quire memory`'s figure
  EXPECT_EQ(j["checked_at"]["B"], 9);
  for (const char* args : {" --entry loss --symbolic", " --step --symbolic"}) {
    Outcome bad = quire::testing::run_quire("memory " + tutorial + std::string(args));
    EXPECT_EQ(bad.status, 1) << args << ": " << bad.output;
    EXPECT_TRUE(bad.output.starts_with("quire: error: ")) << bad.output;
  }
}

}  // namespace
}  // namespace quire::compile
