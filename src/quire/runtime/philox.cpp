#include "quire/runtime/philox.h"

namespace quire::runtime {

namespace {

// Multipliers and Weyl key increments of Philox-4x32 (Random123's
// PHILOX_M4x32_0/1 and PHILOX_W32_0/1: the golden ratio and sqrt(3) - 1).
constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kKeyBump0 = 0x9E3779B9u;
constexpr uint32_t kKeyBump1 = 0xBB67AE85u;

/// One S-box/P-box round: two 32×32→64 products, their high halves mixed
/// with the other words and the round key, the words permuted.
std::array<uint32_t, 4> round(const std::array<uint32_t, 4>& c, const std::array<uint32_t, 2>& k) {
  const uint64_t p0 = static_cast<uint64_t>(kMultiplier0) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(kMultiplier1) * c[2];
  const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  // Ten rounds; the key is bumped between rounds (nine bumps), as Random123
  // does, and the bump wraps modulo 2^32.
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key[0] += kKeyBump0;
      key[1] += kKeyBump1;
    }
    counter = round(counter, key);
  }
  return counter;
}

}  // namespace quire::runtime
