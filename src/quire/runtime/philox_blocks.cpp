#include "quire/runtime/philox_blocks.h"

#include "quire/runtime/isa.h"
#include "quire/runtime/random.h"

namespace quire::runtime::philox_blocks {

const char* path_name(Path p) {
  switch (p) {
    case Path::Portable:
      return "portable";
    case Path::Avx2:
      return "avx2";
    case Path::Avx512:
      return "avx512";
  }
  return "?";
}

bool available(Path p) {
  switch (p) {
    case Path::Portable:
      return true;
    case Path::Avx2:
#if defined(__x86_64__)
      return cpu_isa() >= Isa::Avx2;
#else
      return false;
#endif
    case Path::Avx512:
#if defined(__x86_64__)
      return cpu_isa() >= Isa::Avx512;
#else
      return false;
#endif
  }
  return false;
}

void block_portable(uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words& out) {
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (size_t l = 0; l < kLanes; ++l) {
    const uint64_t index = first + l;
    c0[l] = static_cast<uint32_t>(index);
    c1[l] = static_cast<uint32_t>(index >> 32);
    c2[l] = 0;
    c3[l] = stream;
  }
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    for (size_t l = 0; l < kLanes; ++l) {
      const uint64_t p0 = uint64_t{0xD2511F53u} * c0[l];
      const uint64_t p1 = uint64_t{0xCD9E8D57u} * c2[l];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
      c0[l] = n0;
      c1[l] = static_cast<uint32_t>(p1);
      c2[l] = n2;
      c3[l] = static_cast<uint32_t>(p0);
    }
  }
  for (size_t l = 0; l < kLanes; ++l) {
    out.w[0][l] = c0[l];
    out.w[1][l] = c1[l];
    out.w[2][l] = c2[l];
    out.w[3][l] = c3[l];
  }
}

void blocks_on(Path p, uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words* out, size_t count) {
  switch (p) {
    case Path::Portable:
      break;
    case Path::Avx2:
#if defined(__x86_64__)
      for (size_t b = 0; b < count; ++b) block_avx2(k0, k1, first + b * kLanes, stream, out[b]);
      return;
#else
      break;
#endif
    case Path::Avx512:
#if defined(__x86_64__)
      blocks_avx512(k0, k1, first, stream, out, count);
      return;
#else
      break;
#endif
  }
  for (size_t b = 0; b < count; ++b) block_portable(k0, k1, first + b * kLanes, stream, out[b]);
}

void block_on(Path p, uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words& out) {
  blocks_on(p, k0, k1, first, stream, &out, 1);
}

void blocks(uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words* out, size_t count) {
  switch (widest_isa()) {
    case Isa::Avx512:
      blocks_on(Path::Avx512, k0, k1, first, stream, out, count);
      return;
    case Isa::Avx2:
      blocks_on(Path::Avx2, k0, k1, first, stream, out, count);
      return;
    case Isa::Baseline:
    case Isa::Neon:
      break;
  }
  blocks_on(Path::Portable, k0, k1, first, stream, out, count);
}

void bernoulli_bytes(const Words& w, uint64_t below, uint8_t* out) {
#if defined(__x86_64__)
  if (widest_isa() == Isa::Avx512) {
    bernoulli_bytes_avx512(w, below, out);
    return;
  }
#endif
  for (size_t l = 0; l < kLanes; ++l) out[l] = bits53(w.w[0][l], w.w[1][l]) < below ? 1 : 0;
}

void block(uint32_t k0, uint32_t k1, uint64_t first, uint32_t stream, Words& out) {
  blocks(k0, k1, first, stream, &out, 1);
}

}  // namespace quire::runtime::philox_blocks
