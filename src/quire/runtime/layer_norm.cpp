// layer_norm.h's passes, a group of rows at a time through the row loops of
// layer_norm_rows.h. No expression may contract into a fused multiply-add
// (the build's -ffp-contract=off): every step rounds once.

#include "quire/runtime/layer_norm.h"

#include <math.h>    // NOLINT: the .inc uses the C names
#include <stdint.h>  // NOLINT

#include <algorithm>
#include <vector>

#include "quire/runtime/isa.h"
#include "quire/runtime/layer_norm_rows.h"
#include "quire/runtime/workers.h"

namespace quire::runtime {

namespace layer_norm_detail {
namespace {
#include "quire/runtime/layer_norm_rows.inc"
}  // namespace

Paths paths_portable() { return these_paths(); }

Paths paths() {
#if defined(__x86_64__)
  switch (widest_isa()) {
    case Isa::Avx512:
      return paths_avx512();
    case Isa::Avx2:
      return paths_avx2();
    case Isa::Baseline:
    case Isa::Neon:
      break;
  }
#endif
  return paths_portable();
}

}  // namespace layer_norm_detail

namespace {

using layer_norm_detail::kLanes;

/// Runs fn(first, last) over runs of [0, n) on up to `threads` threads; a
/// run is a whole number of groups of kLanes rows but for the last.
template <typename Fn>
void in_runs(int64_t n, int64_t cost_each, int threads, const Fn& fn) {
  // A run worth tens of microseconds: about 2^16 elements' work.
  int64_t per = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, cost_each));
  per = (per + kLanes - 1) / kLanes * kLanes;
  const int64_t runs = (n + per - 1) / per;
  if (runs <= 1 || threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  native::WorkerPool::shared().parallel_for(runs, threads,
                                            [&](int64_t r, int) { fn(r * per, std::min(n, (r + 1) * per)); });
}

/// Runs fn(first, n) over the groups of [first, last).
template <typename Fn>
void in_groups(int64_t first, int64_t last, const Fn& fn) {
  for (int64_t i = first; i < last; i += kLanes) fn(i, std::min(kLanes, last - i));
}

/// dγ and dβ: each column's sum over the rows in order, the columns split.
void column_sums(const layer_norm_detail::Paths& paths, int64_t rows, int64_t width, const float* x, const float* ct,
                 const std::vector<float>& mean, const std::vector<float>& rstd, float* dgamma, float* dbeta,
                 int threads) {
  std::fill(dgamma, dgamma + width, 0.0f);
  std::fill(dbeta, dbeta + width, 0.0f);
  // Columns in runs of 16 (64 bytes), so that two threads never share a line.
  const int64_t chunks = (width + 15) / 16;
  in_runs(chunks, 16 * rows, threads, [&](int64_t first, int64_t last) {
    paths.columns(x, ct, rows, width, first * 16, std::min(width, last * 16), mean.data(), rstd.data(), dgamma,
                  dbeta);
  });
}


/// Rows [i, i + n) of s = x + dropout(k, y, p); `kept` holds n·D bytes.
void residual_rows(const layer_norm_detail::Paths& paths, int64_t i, int64_t n, int64_t width, const float* y,
                   const DropoutDraw& drop, const float* x, uint8_t* kept, float* s) {
  const int64_t at = i * width;
  if (drop.on) draw_bernoulli_run(drop.key, static_cast<uint64_t>(at), n * width, static_cast<double>(drop.kept), kept);
  paths.residual(x + at, y + at, kept, drop.kept, drop.on, n * width, s + at);
}

}  // namespace

void layer_norm_forward_f32(int64_t rows, int64_t width, const float* x, const float* gamma, const float* beta,
                            float eps, float* y, int threads) {
  const layer_norm_detail::Paths paths = layer_norm_detail::paths();
  in_runs(rows, width, threads, [&](int64_t first, int64_t last) {
    std::vector<float> scratch(static_cast<size_t>(layer_norm_detail::group_scratch_floats(width)));
    float mean[kLanes], rstd[kLanes];
    in_groups(first, last, [&](int64_t i, int64_t n) {
      paths.statistics(x + i * width, n, width, eps, mean, rstd, scratch.data());
      paths.forward(x + i * width, n, width, gamma, beta, mean, rstd, y + i * width);
    });
  });
}

void layer_norm_backward_f32(int64_t rows, int64_t width, const float* x, const float* gamma, const float* beta,
                             float eps, const float* ct, float* y, float* dx, float* dgamma, float* dbeta,
                             int threads) {
  const layer_norm_detail::Paths paths = layer_norm_detail::paths();
  std::vector<float> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  in_runs(rows, width, threads, [&](int64_t first, int64_t last) {
    std::vector<float> scratch(static_cast<size_t>(layer_norm_detail::group_scratch_floats(width)));
    in_groups(first, last, [&](int64_t i, int64_t n) {
      const int64_t at = i * width;
      paths.backward(x + at, ct + at, n, width, gamma, beta, eps, mean.data() + i, rstd.data() + i, y + at, dx + at,
                     scratch.data());
    });
  });
  column_sums(paths, rows, width, x, ct, mean, rstd, dgamma, dbeta, threads);
}

void dropout_add_layer_norm_forward_f32(int64_t rows, int64_t width, const float* y, const DropoutDraw& drop,
                                        const float* x, const float* gamma, const float* beta, float eps, float* s,
                                        float* n, int threads) {
  drop.check();
  const layer_norm_detail::Paths paths = layer_norm_detail::paths();
  in_runs(rows, 2 * width, threads, [&](int64_t first, int64_t last) {
    std::vector<float> scratch(static_cast<size_t>(layer_norm_detail::group_scratch_floats(width)));
    std::vector<uint8_t> kept(static_cast<size_t>(kLanes * width));
    float mean[kLanes], rstd[kLanes];
    in_groups(first, last, [&](int64_t i, int64_t count) {
      residual_rows(paths, i, count, width, y, drop, x, kept.data(), s);
      const int64_t at = i * width;
      paths.statistics(s + at, count, width, eps, mean, rstd, scratch.data());
      paths.forward(s + at, count, width, gamma, beta, mean, rstd, n + at);
    });
  });
}

void dropout_add_layer_norm_backward_f32(int64_t rows, int64_t width, const float* y, const DropoutDraw& drop,
                                         const float* x, const float* gamma, const float* beta, float eps,
                                         const float* ct_s, const float* ct_n, float* s, float* n, float* dy,
                                         float* dx, float* dgamma, float* dbeta, int threads) {
  drop.check();
  const layer_norm_detail::Paths paths = layer_norm_detail::paths();
  std::vector<float> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  in_runs(rows, 3 * width, threads, [&](int64_t first, int64_t last) {
    std::vector<float> scratch(static_cast<size_t>(layer_norm_detail::group_scratch_floats(width)));
    std::vector<uint8_t> kept(static_cast<size_t>(kLanes * width));
    in_groups(first, last, [&](int64_t i, int64_t count) {
      residual_rows(paths, i, count, width, y, drop, x, kept.data(), s);
      const int64_t at = i * width;
      paths.backward(s + at, ct_n + at, count, width, gamma, beta, eps, mean.data() + i, rstd.data() + i, n + at,
                     dx + at, scratch.data());
      // ds = ct_s + the norm's dx: x's cotangent as it is, y's through the
      // where and the division.
      paths.residual_vjp(ct_s + at, kept.data(), drop.kept, drop.on, count * width, dx + at, dy + at);
    });
  });
  column_sums(paths, rows, width, s, ct_n, mean, rstd, dgamma, dbeta, threads);
}

}  // namespace quire::runtime
