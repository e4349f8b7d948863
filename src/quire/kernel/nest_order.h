#pragma once
// Loop order and register tiles of a fold nest: the two layout dimensions
// that rewrite a kernel's loops (layout.h). Both apply to a nest whose two
// innermost independent loops are perfectly nested around a fold (a
// product's, a reduction's over an inner axis): `for i { for j { fold } }`.
//
// - Order JI interchanges those two loops.
// - A tile of t unrolls the outer of them by t and jams the copies: t
//   elements of the outer loop are computed together, each with its own
//   scalars, their folds sharing one loop, so what their chains read in
//   common (the row of `b` a product's column tile reads) is loaded once
//   for all t.
//
// Neither changes what any element computes: each element's chain runs the
// same operations in the same order on its own scalars, the copies touch
// disjoint outputs, and the nest reads no output it writes (a kernel that
// reads its output gets neither). So every point has the kernel's bits.

#include <vector>

#include "quire/kernel/kernel_ir.h"

namespace quire::kernel {

/// The chain of nested independent loops, outermost first: the first
/// independent loop of the body, then the first of its body, and so on
/// (S is Stmt or const Stmt, as the kernel is).
template <class S, class K>
std::vector<S*> independent_loops(K& k) {
  std::vector<S*> chain;
  auto* body = &k.body;
  for (;;) {
    S* next = nullptr;
    for (S& s : *body)
      if (s.kind == StmtKind::Loop && s.independent) {
        next = &s;
        break;
      }
    if (!next) return chain;
    chain.push_back(next);
    body = &next->body;
  }
}

/// The extent of the loop a tile would unroll under each order (the outer
/// of the two innermost independent loops), or nothing when `k` takes
/// neither dimension.
struct FoldNest {
  bool applies = false;
  int64_t outer = 0;  ///< the outer loop's extent in order IJ
  int64_t inner = 0;  ///< the inner loop's extent in order IJ
};
FoldNest fold_nest(const Kernel& k);

/// `k` with its two innermost independent loops interchanged when `swap`,
/// then the outer of them tiled by `tile` (1: not). std::invalid_argument
/// when `k` takes neither (fold_nest) or `tile` does not divide that loop.
Kernel reorder_nest(const Kernel& k, bool swap, int tile);

/// The tiles offered for a loop of `extent` iterations: 1, and 2 and 4 where they divide it.
std::vector<int> tiles_for(int64_t extent);

}  // namespace quire::kernel
