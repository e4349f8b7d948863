#pragma once
// A step over several shards: `quire train --shards N` (one process, the
// shards one after another) and `mpirun -n N quire train` (one shard per
// rank, distributed/) compute the same step, to the bit.
//
// SPLIT. A batch of B rows (batch(B = b)) is cut into N contiguous ranges in
// row order, the first B mod N one row longer: shard s holds rows
// [begin_s, end_s) with rows_s = B div N + (s < B mod N ? 1 : 0). Every
// shard holds a row (N ≤ B, else DataError). The rows are the loader's
// batch as it is (data.h: the same global order, shuffled or not), so N
// changes which rows a shard sees, never which rows a step sees.
//
// THE OBJECTIVE. Shard s evaluates the objective's value and gradient on its
// rows alone, with the batch dim bound to rows_s. quire takes the objective
// to be a mean over the batch's rows (every loss of the examples is one:
// `mean(…)`, `cross_entropy`), so the step's objective is the rows-weighted
// mean of the shards':
//   L = Σ_s w_s · L_s,   ∂θ = Σ_s w_s · ∂θ_s,   w_s = rows_s / B   (in f64)
// the same objective as one batch of B rows, not its same bits: the batch's
// sums are taken in another order. (An objective that sums its rows instead
// would be scaled by 1/N.) Each shard's term is formed as it enters the sum:
// w_s · x in f64, rounded to the master type (f64 under f64, f32 otherwise);
// the loss stays f64. The weight is applied here, to the finished gradient,
// rather than by seeding the reverse sweep with w_s: the seed is a value of
// the realization like any other, rounded to whatever type the policy gives
// it, where w_s = 1/3 is not exact.
//
// THE SUM. The terms are summed over s = 0 … N − 1 along the reduction
// tree of distributed/reduction.h, gradients in the master type, the loss
// in f64, whether the shards are in one process or on N ranks.
//
// N = 1 is today's step exactly: no weight, no rounding, no sum.
//
// KEYS. An objective that takes a key gets step_key(seed, step) when N = 1;
// shard s of N > 1 gets derive_key(step_key(seed, step), "shard:" + s), so
// its dropout masks depend on the seed, the step and the shard, as they do
// on a rank.

#include <cstdint>
#include <string>
#include <vector>

#include "quire/distributed/reduction.h"
#include "quire/interp/value.h"
#include "quire/runtime/float_types.h"
#include "quire/runtime/random.h"
#include "quire/train/data.h"

namespace quire::train {

/// The N shards of a batch of `batch` rows (SPLIT above). DataError when
/// N < 1 or N > batch, naming both.
std::vector<RowRange> split_rows(int64_t batch, int shards);

/// The key of shard `shard` of `shards` at step `step` (KEYS above).
runtime::Key shard_key(uint64_t seed, int64_t step, int shard, int shards);

/// Shard s's term of the step's sum: each gradient element w·g rounded to
/// `master` (F64 or F32; into `narrow` under F32, `wide` under F64), in the
/// gradients' path order, then the loss w·L in f64 (the last element of `wide`).
distributed::ReductionBuffer shard_term(const interp::ParamMap& gradient, double loss, double weight,
                                        runtime::FloatType master);

/// The loss of a summed buffer (shard_term's layout).
double summed_loss(const distributed::ReductionBuffer& sum);

/// The gradient of a summed buffer, with the paths and shapes of `like` (a
/// shard's gradient); f32 elements held as f32.
interp::ParamMap summed_gradient(const distributed::ReductionBuffer& sum, const interp::ParamMap& like,
                                 runtime::FloatType master);

}  // namespace quire::train
