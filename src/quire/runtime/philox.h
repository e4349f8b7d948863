#pragma once
// Philox-4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw,
// "Parallel random numbers: as easy as 1, 2, 3" (SC11), as implemented by the
// Random123 library. A counter-based generator is a keyed bijection of the
// counter: the n-th random word needs no state, only (counter, key), so a
// tensor's elements can be drawn in any order, on any device, and agree.
//
// Output is bit-for-bit that of Random123's philox4x32(10 rounds); the
// known-answer vectors of its tests/kat_vectors are checked in philox_test.cpp.

#include <array>
#include <cstdint>

namespace quire::runtime {

/// One Philox-4x32 block of 10 rounds: four 32-bit output words for a 128-bit
/// counter under a 64-bit key (word order as in Random123: counter[0] is the
/// least significant word of the R123 counter array).
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

}  // namespace quire::runtime
