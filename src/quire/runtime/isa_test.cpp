#include "quire/runtime/isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "quire/runtime/runtime_error.h"

namespace quire::runtime {
namespace {

TEST(Isa, NamesAreQuireIsaValues) {
  EXPECT_STREQ(isa_name(Isa::Baseline), "baseline");
  EXPECT_STREQ(isa_name(Isa::Neon), "neon");
  EXPECT_STREQ(isa_name(Isa::Avx2), "avx2");
  EXPECT_STREQ(isa_name(Isa::Avx512), "avx512");
}

TEST(Isa, CapParsesEachValueAndNoValueAsNoCap) {
  EXPECT_EQ(isa_cap("avx512"), Isa::Avx512);
  EXPECT_EQ(isa_cap("avx2"), Isa::Avx2);
  EXPECT_EQ(isa_cap("neon"), Isa::Neon);
  EXPECT_EQ(isa_cap("baseline"), Isa::Baseline);
  EXPECT_EQ(isa_cap(""), Isa::Avx512);
}

TEST(Isa, CapsStayWithinTheProcessorsArchitecture) {
  // x86-64: a cap of neon is the baseline, never a level the CPU lacks.
  EXPECT_EQ(capped_isa(Isa::Avx512, Isa::Avx2), Isa::Avx2);
  EXPECT_EQ(capped_isa(Isa::Avx512, Isa::Neon), Isa::Baseline);
  EXPECT_EQ(capped_isa(Isa::Avx2, Isa::Avx512), Isa::Avx2);
  EXPECT_EQ(capped_isa(Isa::Avx2, Isa::Neon), Isa::Baseline);
  // aarch64: the x86 caps are above NEON, so NEON stays; baseline removes it.
  EXPECT_EQ(capped_isa(Isa::Neon, Isa::Avx512), Isa::Neon);
  EXPECT_EQ(capped_isa(Isa::Neon, Isa::Avx2), Isa::Neon);
  EXPECT_EQ(capped_isa(Isa::Neon, Isa::Neon), Isa::Neon);
  EXPECT_EQ(capped_isa(Isa::Neon, Isa::Baseline), Isa::Baseline);
  // Neither: nothing above the baseline.
  EXPECT_EQ(capped_isa(Isa::Baseline, Isa::Neon), Isa::Baseline);
  EXPECT_EQ(capped_isa(Isa::Baseline, Isa::Avx512), Isa::Baseline);
#if defined(__aarch64__)
  EXPECT_EQ(cpu_isa(), Isa::Neon);
#elif !defined(__x86_64__)
  EXPECT_EQ(cpu_isa(), Isa::Baseline);
#endif
}

TEST(Isa, BadCapNamesTheVariableTheValueAndTheAcceptedOnes) {
  for (const char* bad : {"AVX2", "avx", "sse4", "avx512 "}) {
    try {
      isa_cap(bad);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const RuntimeError& e) {
      EXPECT_EQ(std::string(e.what()),
                "QUIRE_ISA=" + std::string(bad) + ": not an instruction set; use avx512, avx2, neon or baseline");
    }
  }
}

TEST(Isa, WidestIsTheCpuUnderTheCap) {
  // The tests run without QUIRE_ISA unless a caller sets it; either way the
  // widest is at most what the CPU has.
  EXPECT_LE(widest_isa(), cpu_isa());
  EXPECT_EQ(widest_isa(), widest_isa());
}

// In a process of its own (QUIRE_ISA is read once per process): sets
// QUIRE_ISA to `value` and exits with 0 if widest_isa() gives `want`, or,
// for want = nullopt, throws the bad value's error on every call.
[[noreturn]] void exit_with_cap_result(const char* value, std::optional<Isa> want) {
  setenv("QUIRE_ISA", value, 1);
  for (int call = 0; call < 2; ++call) {
    try {
      if (widest_isa() != want) std::exit(1);
    } catch (const RuntimeError& e) {
      if (want || std::string(e.what()).find(std::string("QUIRE_ISA=") + value + ":") != 0) std::exit(1);
    }
  }
  std::exit(0);
}

TEST(Isa, CapFromTheEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: QUIRE_ISA not yet read
  EXPECT_EXIT(exit_with_cap_result("avx512", cpu_isa()), testing::ExitedWithCode(0), "");  // above the CPU: the CPU
  EXPECT_EXIT(exit_with_cap_result("baseline", Isa::Baseline), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(exit_with_cap_result("neon", capped_isa(cpu_isa(), Isa::Neon)), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(exit_with_cap_result("avx3", std::nullopt), testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace quire::runtime
