#include "quire/runtime/layer_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "quire/runtime/isa.h"
#include "quire/runtime/layer_norm_rows.h"
#include "quire/runtime/runtime_error.h"

namespace quire::runtime {
namespace {

// layer_norm.h's lines, written out one operation at a time per row and per column.
struct Lines {
  std::vector<float> y, dx, dg, db;
};

Lines lines(int64_t rows, int64_t D, const std::vector<float>& x, const std::vector<float>& g,
            const std::vector<float>& b, float eps, const std::vector<float>& ct) {
  Lines l;
  l.y.resize(x.size());
  l.dx.resize(x.size());
  l.dg.assign(static_cast<size_t>(D), 0.0f);
  l.db.assign(static_cast<size_t>(D), 0.0f);
  const float n = static_cast<float>(D);
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x.data() + i * D;
    const float* cr = ct.data() + i * D;
    float sum = 0.0f;
    for (int64_t j = 0; j < D; ++j) sum = sum + xr[j];
    const float mu = sum / n;
    float sq = 0.0f;
    for (int64_t j = 0; j < D; ++j) sq = sq + (xr[j] - mu) * (xr[j] - mu);
    const float r = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sq / n + eps)));
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t j = 0; j < D; ++j) {
      const float d = xr[j] - mu;
      l.y[static_cast<size_t>(i * D + j)] = ((d * r) * g[static_cast<size_t>(j)]) + b[static_cast<size_t>(j)];
      s1 = s1 + (cr[j] * g[static_cast<size_t>(j)]) * d;
      s2 = s2 + -((cr[j] * g[static_cast<size_t>(j)]) * r);
    }
    const float q = (s1 * (-0.5f * ((r * r) * r))) / n;
    float s3 = 0.0f;
    for (int64_t j = 0; j < D; ++j) s3 = s3 + -(q * (2.0f * (xr[j] - mu)));
    for (int64_t j = 0; j < D; ++j) {
      const float d = xr[j] - mu;
      const float c = (cr[j] * g[static_cast<size_t>(j)]) * r;
      l.dx[static_cast<size_t>(i * D + j)] = (c + q * (2.0f * d)) + (s2 + s3) / n;
      l.dg[static_cast<size_t>(j)] = l.dg[static_cast<size_t>(j)] + cr[j] * (d * r);
      l.db[static_cast<size_t>(j)] = l.db[static_cast<size_t>(j)] + cr[j];
    }
  }
  return l;
}

void expect_bits(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size());
  int shown = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    if (std::memcmp(&want[i], &got[i], 4) != 0 && shown++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: lines " << want[i] << ", kernel " << got[i];
  }
}

TEST(LayerNorm, TheKernelHasTheLinesBitsOnOneAndTwoThreads) {
  // Rows of noise, a constant row (variance 0), large and tiny magnitudes,
  // and enough rows that two threads split them.
  const int64_t rows = 3000, D = 48;
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * D)), ct(x.size()), g(static_cast<size_t>(D)), b(g.size());
  for (float& v : x) v = normal(rng);
  for (float& v : ct) v = normal(rng);
  for (float& v : g) v = normal(rng);
  for (float& v : b) v = normal(rng);
  for (int64_t j = 0; j < D; ++j) {
    x[static_cast<size_t>(j)] = 3.0f;             // row 0: constant
    x[static_cast<size_t>(D + j)] *= 1e30f;       // row 1: large
    x[static_cast<size_t>(2 * D + j)] *= 1e-30f;  // row 2: tiny
  }
  const float eps = static_cast<float>(1e-5);
  const Lines want = lines(rows, D, x, g, b, eps, ct);
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    std::vector<float> y(x.size()), y2(x.size()), dx(x.size()), dg(g.size()), db(b.size());
    layer_norm_forward_f32(rows, D, x.data(), g.data(), b.data(), eps, y.data(), threads);
    layer_norm_backward_f32(rows, D, x.data(), g.data(), b.data(), eps, ct.data(), y2.data(), dx.data(), dg.data(),
                            db.data(), threads);
    expect_bits(want.y, y, "y");
    expect_bits(want.y, y2, "vjp y");
    expect_bits(want.dx, dx, "dx");
    expect_bits(want.dg, dg, "dγ");
    expect_bits(want.db, db, "dβ");
  }
}

TEST(LayerNorm, DropoutAddLayerNormHasTheLinesBitsOnOneAndTwoThreads) {
  // s = x + (kept ? y / κ : +0) and layer_norm(s), the mask bernoulli_at's
  // element by element; the vjp's ds = ct_s + dx of the norm, dy = (kept ?
  // ds : +0) / κ. With p = 0.3 (κ = 0.7, not exact in f32), p = 0 (κ = 1: no
  // draw, the sum as it is) and p = 0.5 (κ exact).
  const int64_t rows = 3000, D = 48;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * D)), y(x.size()), cs(x.size()), cn(x.size());
  std::vector<float> g(static_cast<size_t>(D)), b(g.size());
  for (auto* v : {&x, &y, &cs, &cn, &g, &b})
    for (float& e : *v) e = normal(rng);
  for (int64_t j = 0; j < D; ++j) y[static_cast<size_t>(j)] = -0.0f;  // row 0: −0 dropped or kept
  const Key key{0x1234u, 0xabcdu};
  const float eps = static_cast<float>(1e-5);
  for (double p : {0.3, 0.0, 0.5}) {
    DropoutDraw drop;
    drop.key = key;
    drop.kept = 1.0f - static_cast<float>(p);
    drop.on = drop.kept != 1.0f;
    std::vector<float> s(x.size());
    std::vector<uint8_t> kept(x.size());
    for (size_t e = 0; e < x.size(); ++e) {
      kept[e] = !drop.on || bernoulli_at(key, e, static_cast<double>(drop.kept));
      s[e] = x[e] + (kept[e] ? y[e] / drop.kept : 0.0f);
    }
    const Lines norm = lines(rows, D, s, g, b, eps, cn);
    std::vector<float> want_dy(x.size()), want_dx(x.size());
    for (size_t e = 0; e < x.size(); ++e) {
      want_dx[e] = cs[e] + norm.dx[e];
      want_dy[e] = drop.on ? (kept[e] ? want_dx[e] : 0.0f) / drop.kept : want_dx[e];
    }
    for (int threads : {1, 2}) {
      SCOPED_TRACE(testing::Message() << "p = " << p << ", " << threads << " threads");
      std::vector<float> fs(x.size()), fn(x.size()), bs(x.size()), bn(x.size()), dy(x.size()), dx(x.size());
      std::vector<float> dg(g.size()), db(b.size());
      dropout_add_layer_norm_forward_f32(rows, D, y.data(), drop, x.data(), g.data(), b.data(), eps, fs.data(),
                                         fn.data(), threads);
      dropout_add_layer_norm_backward_f32(rows, D, y.data(), drop, x.data(), g.data(), b.data(), eps, cs.data(),
                                          cn.data(), bs.data(), bn.data(), dy.data(), dx.data(), dg.data(), db.data(),
                                          threads);
      expect_bits(s, fs, "s");
      expect_bits(norm.y, fn, "n");
      expect_bits(s, bs, "vjp s");
      expect_bits(norm.y, bn, "vjp n");
      expect_bits(want_dy, dy, "dy");
      expect_bits(want_dx, dx, "dx");
      expect_bits(norm.dg, dg, "dγ");
      expect_bits(norm.db, db, "dβ");
    }
  }
}

TEST(LayerNorm, EveryRowPathGivesTheLinesBits) {
  // The portable, AVX2 and AVX-512 builds of the row loops that this CPU
  // runs, at widths that fill no vector exactly, a group cut short (19 rows
  // = 16 + 3), and columns that end mid-vector.
  using namespace layer_norm_detail;
  std::vector<std::pair<const char*, Paths>> paths{{"portable", paths_portable()}};
#if defined(__x86_64__)
  if (cpu_isa() >= Isa::Avx2) paths.emplace_back("avx2", paths_avx2());
  if (cpu_isa() >= Isa::Avx512) paths.emplace_back("avx512", paths_avx512());
#endif
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t D : {1, 5, 17, 48}) {
    const int64_t rows = 19;
    std::vector<float> x(static_cast<size_t>(rows * D)), ct(x.size()), g(static_cast<size_t>(D)), b(g.size());
    for (auto* v : {&x, &ct, &g, &b})
      for (float& e : *v) e = normal(rng);
    const float eps = 1e-3f;
    const Lines want = lines(rows, D, x, g, b, eps, ct);
    for (const auto& [name, p] : paths) {
      SCOPED_TRACE(testing::Message() << name << ", D = " << D);
      std::vector<float> y(x.size()), y2(x.size()), dx(x.size()), scratch(static_cast<size_t>(group_scratch_floats(D)));
      std::vector<float> mean(static_cast<size_t>(rows)), rstd(mean.size()), sg(g.size(), 0.0f), sb(g.size(), 0.0f);
      for (int64_t i = 0; i < rows; i += kLanes) {
        const int64_t n = std::min(kLanes, rows - i);
        p.statistics(x.data() + i * D, n, D, eps, mean.data() + i, rstd.data() + i, scratch.data());
        p.forward(x.data() + i * D, n, D, g.data(), b.data(), mean.data() + i, rstd.data() + i, y.data() + i * D);
        p.backward(x.data() + i * D, ct.data() + i * D, n, D, g.data(), b.data(), eps, mean.data() + i,
                   rstd.data() + i, y2.data() + i * D, dx.data() + i * D, scratch.data());
      }
      p.columns(x.data(), ct.data(), rows, D, 0, D, mean.data(), rstd.data(), sg.data(), sb.data());
      expect_bits(want.y, y, "y");
      expect_bits(want.y, y2, "vjp y");
      expect_bits(want.dx, dx, "dx");
      expect_bits(want.dg, sg, "dγ");
      expect_bits(want.db, sb, "dβ");
    }
  }
}

TEST(LayerNorm, DropoutAddLayerNormRefusesAProbabilityOutsideTheUnitInterval) {
  DropoutDraw drop;
  drop.kept = 1.5f;
  drop.on = true;
  std::vector<float> v(4, 1.0f), out(4);
  EXPECT_THROW(dropout_add_layer_norm_forward_f32(1, 4, v.data(), drop, v.data(), v.data(), v.data(), 1e-5f,
                                                  out.data(), out.data(), 1),
               RuntimeError);
}

}  // namespace
}  // namespace quire::runtime
