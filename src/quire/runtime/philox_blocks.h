#pragma once
// Philox-4x32-10 for sixteen consecutive counters at once: the words of the
// element draws (random.h), which every draw of a tensor (draw_uniform,
// draw_normal, draw_bernoulli, draw_bernoulli_run) takes a block at a time.
// Integer arithmetic only, so every path gives philox4x32_10's words
// exactly (Random.EveryBlockPathIsPhilox checks each against it).
//
// The paths: AVX-512 and AVX2 with intrinsics (random_avx512.cpp,
// random_avx2.cpp: each 32×32→64 product of a round as the even and the odd
// lanes' vpmuludq, their halves blended back into sixteen lanes), and a
// portable loop. block() takes the widest that QUIRE_ISA allows.

#include <cstddef>
#include <cstdint>

namespace quire::runtime::philox_blocks {

inline constexpr size_t kLanes = 16;

/// w[j][l]: word j of philox4x32_10({i mod 2^32, i div 2^32, 0, stream}, {k0, k1}), i = first + l.
struct Words {
  uint32_t w[4][kLanes];
};

enum class Path : uint8_t { Portable, Avx2, Avx512 };
const char* path_name(Path p);  ///< "portable", "avx2", "avx512"
/// Whether this CPU runs `path`.
bool available(Path p);

void block_on(Path p, uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words& out);
/// On the widest path runtime::widest_isa() allows.
void block(uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words& out);
/// `count` consecutive blocks, out[b] at counters first + 16·b (the AVX-512
/// path takes four side by side): the same words as block() of each.
void blocks_on(Path p, uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words* out, size_t count);
void blocks(uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words* out, size_t count);

/// out[l] = 1 where bits53(w[0][l], w[1][l]) < below, else 0, for the 16
/// lanes (random.h's bernoulli test), on the widest path allowed.
void bernoulli_bytes(const Words& w, uint64_t below, uint8_t* out);

// The paths themselves (block_on names them).
void block_portable(uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words& out);
#if defined(__x86_64__)
void block_avx2(uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words& out);
void blocks_avx512(uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words* out, size_t count);
void bernoulli_bytes_avx512(const Words& w, uint64_t below, uint8_t* out);
#endif

}  // namespace quire::runtime::philox_blocks
