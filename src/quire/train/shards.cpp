#include "quire/train/shards.h"

#include <fmt/format.h>

#include <stdexcept>

#include "quire/train/data.h"
#include "quire/train/trainer.h"

namespace quire::train {

std::vector<RowRange> split_rows(int64_t batch, int shards) {
  if (shards < 1) throw DataError(fmt::format("--shards {}: a step needs at least one shard", shards));
  if (shards > batch)
    throw DataError(
        fmt::format("{} shards of a batch of {} rows: every shard needs a row (at most {} shards, or "
                    "ranks, for batch({}))",
                    shards, batch, batch, batch));
  std::vector<RowRange> ranges;
  const int64_t base = batch / shards, longer = batch % shards;
  int64_t at = 0;
  for (int s = 0; s < shards; ++s) {
    const int64_t rows = base + (s < longer ? 1 : 0);
    ranges.push_back({at, at + rows});
    at += rows;
  }
  return ranges;
}

runtime::Key shard_key(uint64_t seed, int64_t step, int shard, int shards) {
  const runtime::Key key = step_key(seed, step);
  return shards == 1 ? key : runtime::derive_key(key, fmt::format("shard:{}", shard));
}

distributed::ReductionBuffer shard_term(const interp::ParamMap& gradient, double loss, double weight,
                                        runtime::FloatType master) {
  if (master != runtime::FloatType::F64 && master != runtime::FloatType::F32)
    throw std::logic_error("internal: a shard's gradient is summed in the master type, f64 or f32");
  const bool narrow = master == runtime::FloatType::F32;
  size_t elements = 0;
  for (const auto& [path, t] : gradient) elements += t.reals.size();
  distributed::ReductionBuffer term;
  if (narrow)
    term.narrow.reserve(elements);
  else
    term.wide.reserve(elements + 1);
  for (const auto& [path, t] : gradient)
    for (double g : t.reals) {
      const double x = weight * g;
      if (narrow)
        term.narrow.push_back(static_cast<float>(runtime::round_to(runtime::FloatType::F32, x)));
      else
        term.wide.push_back(x);
    }
  term.wide.push_back(weight * loss);
  return term;
}

double summed_loss(const distributed::ReductionBuffer& sum) { return sum.wide.back(); }

interp::ParamMap summed_gradient(const distributed::ReductionBuffer& sum, const interp::ParamMap& like,
                                 runtime::FloatType master) {
  const bool narrow = master == runtime::FloatType::F32;
  interp::ParamMap gradient;
  size_t at = 0;
  for (const auto& [path, t] : like) {
    runtime::Tensor g;
    g.kind = t.kind;
    g.shape = t.shape;
    const size_t n = t.reals.size();
    if (narrow) {
      g.reals = runtime::RealStorage::narrow_for_overwrite(n);
      float* out = g.reals.narrow_for_writing();
      std::copy_n(sum.narrow.data() + at, n, out);
    } else {
      g.reals = runtime::RealStorage(sum.wide.data() + at, n);
    }
    at += n;
    gradient.emplace(path, std::move(g));
  }
  return gradient;
}

}  // namespace quire::train
