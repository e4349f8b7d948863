// layer_norm.h's passes. No expression may contract into a fused
// multiply-add (the build's -ffp-contract=off): every step rounds once.

#include "quire/runtime/layer_norm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "quire/runtime/runtime_error.h"
#include "quire/runtime/workers.h"

namespace quire::runtime {

namespace {

/// A row's μ and r, as the forward computes them.
struct Statistics {
  float mean;
  float rstd;
};

Statistics statistics(const float* x, int64_t width, float eps) {
  const float count = static_cast<float>(width);
  float sum = 0.0f;
  for (int64_t j = 0; j < width; ++j) sum = sum + x[j];
  const float mean = sum / count;
  float squares = 0.0f;
  for (int64_t j = 0; j < width; ++j) {
    const float d = x[j] - mean;
    squares = squares + d * d;
  }
  const float variance = squares / count;
  const float shifted = variance + eps;
  return {mean, static_cast<float>(1.0 / std::sqrt(static_cast<double>(shifted)))};
}

void forward_row(const float* x, int64_t width, const float* gamma, const float* beta, Statistics s, float* y) {
  for (int64_t j = 0; j < width; ++j) {
    const float d = x[j] - s.mean;
    const float n = d * s.rstd;
    const float scaled = n * gamma[j];
    y[j] = scaled + beta[j];
  }
}

/// Runs fn(first, last) over runs of [0, n) on up to `threads` threads.
template <typename Fn>
void in_runs(int64_t n, int64_t cost_each, int threads, const Fn& fn) {
  // A run worth tens of microseconds: about 2^16 elements' work.
  const int64_t per = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, cost_each));
  const int64_t runs = (n + per - 1) / per;
  if (runs <= 1 || threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  native::WorkerPool::shared().parallel_for(runs, threads,
                                            [&](int64_t r, int) { fn(r * per, std::min(n, (r + 1) * per)); });
}

}  // namespace

void layer_norm_forward_f32(int64_t rows, int64_t width, const float* x, const float* gamma, const float* beta,
                            float eps, float* y, int threads) {
  in_runs(rows, width, threads, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i)
      forward_row(x + i * width, width, gamma, beta, statistics(x + i * width, width, eps), y + i * width);
  });
}

namespace {

/// One row of the vjp: y as the forward, and dx; the row's statistics kept
/// for the columns' sums.
void backward_row(const float* xr, int64_t width, const float* gamma, const float* beta, float eps, const float* cr,
                  float* yr, float* dr, Statistics& kept) {
  const float count = static_cast<float>(width);
  const Statistics s = statistics(xr, width, eps);
  kept = s;
  forward_row(xr, width, gamma, beta, s, yr);
  const float r = s.rstd;
  float s1 = 0.0f, s2 = 0.0f;
  for (int64_t j = 0; j < width; ++j) {
    const float d = xr[j] - s.mean;
    const float a = cr[j] * gamma[j];
    const float c = a * r;
    const float e = a * d;
    s1 = s1 + e;
    s2 = s2 + -c;
    dr[j] = c;  // c for now; c + h below, then dx when S3 is known
  }
  const float cube = (r * r) * r;
  const float factor = -0.5f * cube;
  const float g = s1 * factor;
  const float q = g / count;
  float s3 = 0.0f;
  for (int64_t j = 0; j < width; ++j) {
    const float d = xr[j] - s.mean;
    const float twice = 2.0f * d;
    const float h = q * twice;
    s3 = s3 + -h;
    dr[j] = dr[j] + h;
  }
  const float spread = (s2 + s3) / count;
  for (int64_t j = 0; j < width; ++j) dr[j] = dr[j] + spread;
}

/// dγ and dβ: each column's sum over the rows in order, the columns split.
void column_sums(int64_t rows, int64_t width, const float* x, const float* ct, const std::vector<Statistics>& kept,
                 float* dgamma, float* dbeta, int threads) {
  in_runs(width, rows, threads, [&](int64_t first, int64_t last) {
    for (int64_t j = first; j < last; ++j) {
      float sg = 0.0f, sb = 0.0f;
      for (int64_t i = 0; i < rows; ++i) {
        const Statistics s = kept[static_cast<size_t>(i)];
        const float c = ct[i * width + j];
        const float d = x[i * width + j] - s.mean;
        const float n = d * s.rstd;
        sg = sg + c * n;
        sb = sb + c;
      }
      dgamma[j] = sg;
      dbeta[j] = sb;
    }
  });
}

/// Row i of s = x + dropout(k, y, p): y_j / κ where element i·D + j of the
/// draw is kept, +0 elsewhere, added to x_j. `mask` holds D bytes.
void residual_row(int64_t i, int64_t width, const float* y, const LayerNormDropout& drop, const float* x, uint8_t* mask,
                  float* s) {
  const float* yr = y + i * width;
  const float* xr = x + i * width;
  float* sr = s + i * width;
  if (!drop.on) {
    for (int64_t j = 0; j < width; ++j) sr[j] = xr[j] + yr[j];
    return;
  }
  const float kappa = drop.kept;
  draw_bernoulli_run(drop.key, static_cast<uint64_t>(i * width), width, static_cast<double>(kappa), mask);
  for (int64_t j = 0; j < width; ++j) {
    const float divided = yr[j] / kappa;
    const float dropped = mask[j] ? divided : 0.0f;
    sr[j] = xr[j] + dropped;
  }
}

void check_dropout(const LayerNormDropout& d) {
  // Written so that NaN fails too: the lines' bernoulli refuses it so.
  if (d.on && !(d.kept >= 0.0f && d.kept <= 1.0f))
    throw RuntimeError(fmt::format("dropout: the probability of keeping an element, 1 − p = {}, is outside [0, 1]",
                                   static_cast<double>(d.kept)));
}

}  // namespace

void layer_norm_backward_f32(int64_t rows, int64_t width, const float* x, const float* gamma, const float* beta,
                             float eps, const float* ct, float* y, float* dx, float* dgamma, float* dbeta,
                             int threads) {
  std::vector<Statistics> kept(static_cast<size_t>(rows));
  in_runs(rows, width, threads, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i)
      backward_row(x + i * width, width, gamma, beta, eps, ct + i * width, y + i * width, dx + i * width,
                   kept[static_cast<size_t>(i)]);
  });
  column_sums(rows, width, x, ct, kept, dgamma, dbeta, threads);
}

void dropout_add_layer_norm_forward_f32(int64_t rows, int64_t width, const float* y, const LayerNormDropout& drop,
                                        const float* x, const float* gamma, const float* beta, float eps, float* s,
                                        float* n, int threads) {
  check_dropout(drop);
  in_runs(rows, 2 * width, threads, [&](int64_t first, int64_t last) {
    std::vector<uint8_t> mask(static_cast<size_t>(width));
    for (int64_t i = first; i < last; ++i) {
      residual_row(i, width, y, drop, x, mask.data(), s);
      const float* sr = s + i * width;
      forward_row(sr, width, gamma, beta, statistics(sr, width, eps), n + i * width);
    }
  });
}

void dropout_add_layer_norm_backward_f32(int64_t rows, int64_t width, const float* y, const LayerNormDropout& drop,
                                         const float* x, const float* gamma, const float* beta, float eps,
                                         const float* ct_s, const float* ct_n, float* s, float* n, float* dy,
                                         float* dx, float* dgamma, float* dbeta, int threads) {
  check_dropout(drop);
  std::vector<Statistics> kept(static_cast<size_t>(rows));
  in_runs(rows, 3 * width, threads, [&](int64_t first, int64_t last) {
    std::vector<uint8_t> mask(static_cast<size_t>(width));
    for (int64_t i = first; i < last; ++i) {
      residual_row(i, width, y, drop, x, mask.data(), s);
      const int64_t at = i * width;
      float* dr = dx + at;
      backward_row(s + at, width, gamma, beta, eps, ct_n + at, n + at, dr, kept[static_cast<size_t>(i)]);
      // ds = ct_s + the norm's dx: x's cotangent as it is, y's through the
      // where and the division, (kept ? ds : +0) / κ.
      const float* cr = ct_s + at;
      float* yr = dy + at;
      for (int64_t j = 0; j < width; ++j) dr[j] = cr[j] + dr[j];
      if (!drop.on) {
        for (int64_t j = 0; j < width; ++j) yr[j] = dr[j];
        continue;
      }
      const float kappa = drop.kept;
      for (int64_t j = 0; j < width; ++j) {
        const float through = mask[static_cast<size_t>(j)] ? dr[j] : 0.0f;
        yr[j] = through / kappa;
      }
    }
  });
  column_sums(rows, width, s, ct_n, kept, dgamma, dbeta, threads);
}

}  // namespace quire::runtime
