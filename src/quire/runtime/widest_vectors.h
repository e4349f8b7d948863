// QUIRE_WIDEST_VECTORS: compile a function once per x86 vector ISA (AVX-512,
// AVX2, the baseline) and pick one when the program loads (GCC's
// target_clones), for host loops that run while the kernels' workers wait.
// quire's own code is built for the baseline ISA, whose 16-byte vectors left
// such loops several times slower than the processor allows.
#pragma once

#if defined(__x86_64__) && !defined(__clang__)
#define QUIRE_WIDEST_VECTORS __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define QUIRE_WIDEST_VECTORS
#endif
