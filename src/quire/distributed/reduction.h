#pragma once
// The sum of a step's shard gradients, in one fixed order.
//
// ORDER. The shards' buffers are summed along the pairwise tree over shard
// numbers 0 … n − 1: at stride 1, 2, 4, … every shard r with r mod 2·stride
// = 0 and r + stride < n adds shard r + stride's partial sum to its own,
//   partial[r] ← partial[r] + partial[r + stride]     (this operand order)
// so for n = 3 the total is (g0 + g1) + g2, for n = 4 (g0 + g1) + (g2 + g3).
// Floating-point addition is not associative, so the order is part of the
// result: it is written once (reduction_tree) and both ways of running it
// follow it, the shards of one process (`quire train --shards N`) and the
// ranks of an MPI run (one shard each), which therefore agree to the bit.
// MPI_Allreduce is not used: its order (and so its bits) is the library's
// choice and may change with the message size, the transport or the version.
//
// TYPES. Each part of a buffer is summed in its own type, rounding after
// every addition: `narrow` in f32 (gradients kept in f32 masters), `wide` in
// f64 (gradients of f64 runs, and the loss). Nothing is widened on the way,
// so a message carries the bytes the receiver adds.

#include <cstddef>
#include <vector>

#include "quire/distributed/communicator.h"

namespace quire::distributed {

/// What one shard contributes to a step's sum. Every shard's buffer of a
/// step has the same sizes.
struct ReductionBuffer {
  std::vector<double> wide;   ///< summed in f64
  std::vector<float> narrow;  ///< summed in f32
  size_t bytes() const { return wide.size() * sizeof(double) + narrow.size() * sizeof(float); }
};

/// sum ← sum + other, element by element in each part's type. The sizes must match.
void add_into(ReductionBuffer& sum, const ReductionBuffer& other);

/// One addition of the tree: partial[into] ← partial[into] + partial[from].
struct TreeEdge {
  int into = 0;
  int from = 0;
  bool operator==(const TreeEdge&) const = default;
};

/// The pairwise tree over `n` shards (see ORDER), its edges in the order
/// they run: stride 1's, then stride 2's, …. Empty for n = 1.
std::vector<TreeEdge> reduction_tree(int n);

/// The sum of `shards` (one buffer per shard, in shard order) along
/// reduction_tree, left in shards.front(); the others hold partial sums.
void sum_in_process(std::vector<ReductionBuffer>& shards);

/// The same sum across the ranks of `comm`, rank r holding shard r's buffer
/// in `mine`: each edge of the tree is a message from `from` to `into`, then
/// the total goes from rank 0 back down the same edges in reverse, so on
/// return `mine` holds the total on every rank. CommunicatorError when a
/// peer is gone or silent (communicator.h).
void sum_across_ranks(Communicator& comm, ReductionBuffer& mine);

}  // namespace quire::distributed
