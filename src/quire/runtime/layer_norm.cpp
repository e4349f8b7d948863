// layer_norm.h's passes. No expression may contract into a fused
// multiply-add (the build's -ffp-contract=off): every step rounds once.

#include "quire/runtime/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

void layer_norm_backward_f32(int64_t rows, int64_t width, const float* x, const float* gamma, const float* beta,
                             float eps, const float* ct, float* y, float* dx, float* dgamma, float* dbeta,
                             int threads) {
  const float count = static_cast<float>(width);
  std::vector<Statistics> kept(static_cast<size_t>(rows));
  in_runs(rows, width, threads, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const float* xr = x + i * width;
      const float* cr = ct + i * width;
      float* dr = dx + i * width;
      const Statistics s = statistics(xr, width, eps);
      kept[static_cast<size_t>(i)] = s;
      forward_row(xr, width, gamma, beta, s, y + i * width);
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
  });
  // dγ and dβ: each column's sum over the rows in order, the columns split.
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

}  // namespace quire::runtime
