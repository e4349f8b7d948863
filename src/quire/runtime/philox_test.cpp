#include "quire/runtime/philox.h"

#include <gtest/gtest.h>

namespace quire::runtime {

// The three philox4x32 10-round lines of Random123's tests/kat_vectors
// (columns: counter words 0..3, key words 0..1, expected words 0..3).
struct KnownAnswer {
  std::array<uint32_t, 4> counter;
  std::array<uint32_t, 2> key;
  std::array<uint32_t, 4> expected;
};

TEST(Philox, MatchesRandom123KnownAnswers) {
  const KnownAnswer cases[] = {
      {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
       {0x00000000, 0x00000000},
       {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const auto& c : cases) EXPECT_EQ(philox4x32_10(c.counter, c.key), c.expected);
}

}  // namespace quire::runtime
