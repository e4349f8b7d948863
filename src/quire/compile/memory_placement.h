#pragma once
// The arena: one block of memory a call's stored values can share, each
// value at a fixed offset for its whole life (what a generated program
// allocates once instead of calling malloc per value; docs/memory.md#arena).
//
// A value's life is the half-open interval of the call's store events from
// the one that stores it to the one after its last reader (memory.h's
// replay of the executor's frames gives them, kept forwards living until the
// frame that kept them returns). Two values whose lives overlap get disjoint
// byte ranges. The placement is greedy by size: the largest value first
// (ties: the earlier stored first), each at the lowest offset where it
// overlaps no value placed before it whose life overlaps its own — the
// "greedy by size" offset planner of inference runtimes, which is not always
// optimal: the arena is at least the peak of live bytes and the printout
// says by how much it exceeds it.

#include <cstdint>
#include <vector>

namespace quire::compile {

/// One stored value's life and size.
struct Lifetime {
  int64_t start = 0;  ///< the store event that writes it
  int64_t end = 0;    ///< the first store event after its last reader (> start)
  int64_t bytes = 0;
};

/// Offsets, one per lifetime, and the arena's size: the largest offset + bytes.
struct Placement {
  std::vector<int64_t> offsets;
  int64_t arena_bytes = 0;
};

/// Alignment of every offset: a cache line, which also suits every vector width quire emits.
inline constexpr int64_t kArenaAlignment = 64;

Placement place_by_size(const std::vector<Lifetime>& lives);

}  // namespace quire::compile
