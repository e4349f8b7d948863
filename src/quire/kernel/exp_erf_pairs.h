#pragma once
// A kernel pass the C emitter asks of each block of fast f32 lanes: which exp
// sites pair with an erf site of the same element.
//
// The GELU's gradient reads erf(s) and exp(w) of one element x, with s =
// round_f32(x · √½) and w = round_f32(−½ · round_f32(x · x)): w is within a
// few f32 roundings of −s², and exp(w) follows from the exp(−s²) that erf's
// shortcut computes anyway (elementary_fast.inc's quire_fast_exp_near). The
// pairing is found by the shape of the two arguments (below); the
// constants are the run's, so the shortcut's own test, |w + s²| ≤ 2^-10,
// is what makes it exact: where it fails the block is in doubt and runs
// the reference. The shape keeps unrelated exp and erf apart, which would
// put every block in doubt.

#include <map>
#include <vector>

#include "quire/kernel/kernel_ir.h"

namespace quire::kernel {

/// The exp sites of `body` (the statements of one loop of `k`) that pair
/// with an erf site: exp site (its rounding's expression) → the erf's
/// argument, as an expression of the inputs. A pair: the erf's argument is
/// round_f32(x · c) and the exp's round_f32(k · round_f32(x · x)), for one x.
std::map<int, int> exp_erf_partners(const Kernel& k, const std::vector<Stmt>& body);

}  // namespace quire::kernel
