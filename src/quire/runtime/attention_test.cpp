#include "quire/runtime/attention.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "quire/runtime/elementary.h"
#include "quire/runtime/isa.h"
#include "quire/runtime/runtime_error.h"

namespace quire::runtime {
namespace {

// The lines of attention.h, one element at a time over every key: what the
// fused kernel must give bit for bit.
float lines_max(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

struct Lines {
  std::vector<float> out, dq, dk, dv;
};

Lines lines(const AttentionShape& s, const std::vector<float>& q, const std::vector<float>& k,
            const std::vector<float>& v, const std::vector<float>* ct, const DropoutDraw& drop = {}) {
  const int64_t T = s.queries, S = s.keys, D = s.width, E = s.value_width;
  Lines r;
  r.out.assign(static_cast<size_t>(s.heads * T * E), 0.0f);
  r.dq.assign(static_cast<size_t>(s.heads * T * D), 0.0f);
  r.dk.assign(static_cast<size_t>(s.heads * S * D), 0.0f);
  r.dv.assign(static_cast<size_t>(s.heads * S * E), 0.0f);
  const float c = attention_scale(D);
  for (int64_t n = 0; n < s.heads; ++n) {
    const float* qh = q.data() + n * T * D;
    const float* kh = k.data() + n * S * D;
    const float* vh = v.data() + n * S * E;
    std::vector<float> x(static_cast<size_t>(T * S)), e(x.size()), w(x.size()), wd(x.size()), g(x.size()), ds(x.size());
    std::vector<bool> kept(x.size());
    for (int64_t t = 0; t < T; ++t) {
      float* xr = x.data() + t * S;
      for (int64_t j = 0; j < S; ++j) {
        float acc = 0.0f;
        for (int64_t d = 0; d < D; ++d) acc = std::fma(qh[t * D + d], kh[j * D + d], acc);
        const float y = acc / c;
        xr[j] = s.causal && j > t ? -std::numeric_limits<float>::infinity() : y;
      }
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < S; ++j) m = lines_max(m, xr[j]);
      float z = 0.0f;
      for (int64_t j = 0; j < S; ++j) {
        e[t * S + j] = static_cast<float>(elementary_exp(static_cast<double>(xr[j] - m)));
        z = z + e[t * S + j];
      }
      for (int64_t j = 0; j < S; ++j) w[t * S + j] = e[t * S + j] / z;
      for (int64_t j = 0; j < S; ++j) {
        const uint64_t index = static_cast<uint64_t>((n * T + t) * S + j);
        kept[static_cast<size_t>(t * S + j)] = !drop.on || bernoulli_at(drop.key, index, drop.kept);
        const float dropped = w[t * S + j] / drop.kept;
        wd[t * S + j] = !drop.on ? w[t * S + j] : kept[static_cast<size_t>(t * S + j)] ? dropped : 0.0f;
      }
      for (int64_t f = 0; f < E; ++f) {
        float acc = 0.0f;
        for (int64_t j = 0; j < S; ++j) acc = std::fma(wd[t * S + j], vh[j * E + f], acc);
        r.out[static_cast<size_t>((n * T + t) * E + f)] = acc;
      }
      if (!ct) continue;
      const float* cth = ct->data() + n * T * E;
      for (int64_t j = 0; j < S; ++j) {
        float acc = 0.0f;
        for (int64_t f = 0; f < E; ++f) acc = std::fma(cth[t * E + f], vh[j * E + f], acc);
        g[t * S + j] = drop.on ? (kept[static_cast<size_t>(t * S + j)] ? acc : 0.0f) / drop.kept : acc;
      }
      float rs = 0.0f;
      for (int64_t j = 0; j < S; ++j) rs = rs + -((g[t * S + j] * w[t * S + j]) / z);
      std::vector<float> u(static_cast<size_t>(S));
      float gm = 0.0f, count = 0.0f;
      for (int64_t j = 0; j < S; ++j) {
        u[static_cast<size_t>(j)] = (g[t * S + j] / z + rs) * e[t * S + j];
        gm = gm + -u[static_cast<size_t>(j)];
        count = count + (xr[j] == m ? 1.0f : 0.0f);
      }
      const float share = gm / count;
      for (int64_t j = 0; j < S; ++j) {
        const float dx = u[static_cast<size_t>(j)] + (xr[j] == m ? share : 0.0f);
        ds[t * S + j] = (s.causal && j > t ? 0.0f : dx) / c;
      }
    }
    if (!ct) continue;
    const float* cth = ct->data() + n * T * E;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        float acc = 0.0f;
        for (int64_t j = 0; j < S; ++j) acc = std::fma(ds[t * S + j], kh[j * D + d], acc);
        r.dq[static_cast<size_t>((n * T + t) * D + d)] = acc;
      }
    for (int64_t j = 0; j < S; ++j) {
      for (int64_t d = 0; d < D; ++d) {
        float acc = 0.0f;
        for (int64_t t = 0; t < T; ++t) acc = std::fma(ds[t * S + j], qh[t * D + d], acc);
        r.dk[static_cast<size_t>((n * S + j) * D + d)] = acc;
      }
      for (int64_t f = 0; f < E; ++f) {
        float acc = 0.0f;
        for (int64_t t = 0; t < T; ++t) acc = std::fma(wd[t * S + j], cth[t * E + f], acc);
        r.dv[static_cast<size_t>((n * S + j) * E + f)] = acc;
      }
    }
  }
  return r;
}

/// Bits equal, any NaN matching any NaN (sgemm promises no payload).
void expect_bits(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  int shown = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    uint32_t a = 0, b = 0;
    std::memcpy(&a, &want[i], 4);
    std::memcpy(&b, &got[i], 4);
    if (a != b && shown++ < 5) ADD_FAILURE() << what << "[" << i << "]: lines " << want[i] << ", kernel " << got[i];
  }
}

std::vector<float> normals(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(rng);
  return x;
}

struct Case {
  AttentionShape shape;
  std::vector<float> q, k, v, ct;
};

Case random_case(int64_t heads, int64_t T, int64_t S, int64_t D, int64_t E, bool causal, unsigned seed) {
  std::mt19937 rng(seed);
  Case c;
  c.shape = {heads, T, S, D, E, causal};
  c.q = normals(heads * T * D, rng, 2.0f);
  c.k = normals(heads * S * D, rng);
  c.v = normals(heads * S * E, rng);
  c.ct = normals(heads * T * E, rng);
  return c;
}

void expect_lines(const Case& c, int threads) {
  const AttentionShape& s = c.shape;
  const Lines want = lines(s, c.q, c.k, c.v, &c.ct);
  std::vector<float> out(want.out.size()), out2(want.out.size()), dq(want.dq.size()), dk(want.dk.size()),
      dv(want.dv.size());
  attention_forward_f32(s, c.q.data(), c.k.data(), c.v.data(), out.data(), threads);
  expect_bits(want.out, out, "forward out");
  attention_backward_f32(s, c.q.data(), c.k.data(), c.v.data(), c.ct.data(), out2.data(), dq.data(), dk.data(),
                         dv.data(), threads);
  expect_bits(want.out, out2, "vjp out");
  expect_bits(want.dq, dq, "dq");
  expect_bits(want.dk, dk, "dk");
  expect_bits(want.dv, dv, "dv");
}

TEST(Attention, TheScaleIsTheLinesSquareRootOfTheWidthInF32) {
  EXPECT_EQ(attention_scale(64), 8.0f);
  EXPECT_EQ(attention_scale(16), 4.0f);
  EXPECT_EQ(attention_scale(3), static_cast<float>(std::sqrt(3.0)));
}

TEST(Attention, ExpOfMinusInfinityIsPlusZeroWhichTheSkippedKeysRelyOn) {
  const double e = elementary_exp(-std::numeric_limits<double>::infinity());
  EXPECT_EQ(e, 0.0);
  EXPECT_FALSE(std::signbit(e));
  // A zero largest score's sign is the order's choice (row_max): x − (+0)
  // and x − (−0) differ only for x = −0, whose exp is 1 either way.
  EXPECT_EQ(elementary_exp(-0.0), 1.0);
  EXPECT_EQ(elementary_exp(0.0), 1.0);
}

TEST(Attention, CausalKernelHasTheLinesBitsAtEdgeShapes) {
  // T = 1; T within one block; T crossing a block by one; T across several
  // blocks, not a multiple of the block; more keys than queries and fewer.
  const int64_t b = kAttentionBlockRows;
  const std::vector<std::array<int64_t, 5>> shapes = {{1, 1, 1, 4, 4},          {2, 7, 7, 8, 8},
                                                      {3, b + 1, b + 1, 16, 8}, {2, 2 * b + 5, 2 * b + 5, 64, 64},
                                                      {1, 40, 17, 8, 12},       {1, 17, 40, 8, 8}};
  unsigned seed = 1;
  for (const auto& [h, T, S, D, E] : shapes) {
    SCOPED_TRACE(testing::Message() << "heads " << h << ", T " << T << ", S " << S << ", D " << D << ", E " << E);
    expect_lines(random_case(h, T, S, D, E, true, seed++), 1);
  }
}

TEST(Attention, UnmaskedKernelHasTheLinesBits) {
  for (const auto& [h, T, S, D, E] : std::vector<std::array<int64_t, 5>>{{1, 1, 3, 4, 4}, {2, 45, 33, 16, 8}}) {
    SCOPED_TRACE(testing::Message() << "T " << T << ", S " << S);
    expect_lines(random_case(h, T, S, D, E, false, 7), 1);
  }
}

TEST(Attention, OneAndTwoThreadsGiveTheSameBits) {
  // Fewer heads than threads (the products split) and more (the heads split).
  for (int64_t heads : {1, 5}) {
    const Case c = random_case(heads, 70, 70, 16, 16, true, 11);
    const int64_t n = heads * 70 * 16;
    std::vector<float> a(static_cast<size_t>(4 * n)), b(a.size());
    float* pa = a.data();
    float* pb = b.data();
    attention_backward_f32(c.shape, c.q.data(), c.k.data(), c.v.data(), c.ct.data(), pa, pa + n, pa + 2 * n, pa + 3 * n,
                           1);
    attention_backward_f32(c.shape, c.q.data(), c.k.data(), c.v.data(), c.ct.data(), pb, pb + n, pb + 2 * n, pb + 3 * n,
                           2);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << heads << " heads";
  }
}

TEST(Attention, ANonFiniteValueAKeyTheMaskHidesWouldMeetIsMetAsTheLinesMeetIt) {
  // An infinite value at a hidden key: the lines multiply it by a weight of
  // +0 (NaN) in every row that hides it; the kernel runs such a head over
  // every key.
  Case c = random_case(2, 40, 40, 8, 8, true, 5);
  c.v[static_cast<size_t>(39 * 8 + 3)] = std::numeric_limits<float>::infinity();
  c.k[static_cast<size_t>(40 * 8 + 38 * 8)] = std::numeric_limits<float>::quiet_NaN();  // the second head
  expect_lines(c, 1);
  const Lines want = lines(c.shape, c.q, c.k, c.v, &c.ct);
  EXPECT_TRUE(std::isnan(want.out[0 * 8 + 3])) << "the case must put a NaN where the mask hides the value";
}

TEST(Attention, AHeadWhoseHiddenKeysCouldOverflowRunsOverEveryKey) {
  // Finite inputs, but values near f32's largest at keys the first block
  // hides: there ct·v overflows, and the lines' (g/z + r)·(+0) is a NaN that
  // poisons those rows' sums. The bound ‖ct‖₁·max|v| sees it coming, and the
  // head runs again over every key.
  Case c = random_case(1, kAttentionBlockRows + 8, kAttentionBlockRows + 8, 4, 4, true, 9);
  for (int64_t s = kAttentionBlockRows; s < kAttentionBlockRows + 8; ++s)
    for (int64_t e = 0; e < 4; ++e) c.v[static_cast<size_t>(s * 4 + e)] = 3e38f;
  for (float& x : c.ct) x = 4.0f;
  const Lines want = lines(c.shape, c.q, c.k, c.v, &c.ct);
  EXPECT_TRUE(std::isnan(want.dq[0])) << "the case must overflow where the mask hides the keys";
  expect_lines(c, 1);
}

TEST(Attention, AnAccumulatorThatIsMinusZeroIsFinishedOverTheSkippedKeys) {
  // Equal scores (q = 0), tiny negative values at the first 32 keys and
  // positive ones after: each row's weighted sum underflows to −0 over the
  // keys it sees, and the lines' fmaf(+0, v, −0) over the hidden keys with
  // v > 0 makes it +0.
  const int64_t T = 40, D = 4, E = 4;
  Case c;
  c.shape = {1, T, T, D, E, true};
  c.q.assign(static_cast<size_t>(T * D), 0.0f);
  c.k.assign(static_cast<size_t>(T * D), 1.0f);
  c.v.assign(static_cast<size_t>(T * E), 1.0f);
  for (int64_t s = 0; s < kAttentionBlockRows; ++s)
    for (int64_t e = 0; e < E; ++e) c.v[static_cast<size_t>(s * E + e)] = -std::numeric_limits<float>::denorm_min();
  c.ct.assign(static_cast<size_t>(T * E), 1.0f);
  const Lines want = lines(c.shape, c.q, c.k, c.v, &c.ct);
  const float at = want.out[static_cast<size_t>(10 * E)];
  EXPECT_EQ(at, 0.0f);
  EXPECT_FALSE(std::signbit(at)) << "the case must make the lines' +0 from a −0";
  expect_lines(c, 1);
}

TEST(Attention, AFusedQkvWithDropoutHasTheLinesBits) {
  // GPT-2's layout: qkv [g, T, 3·H·D], heads read in place; out [g, T, H·D];
  // the cotangents summed into one [g, T, 3·H·D] (a −0 made +0); dropout on
  // the weights with κ = f32(1 − 0.1), then none (κ = 1).
  const int64_t G = 2, H = 3, T = kAttentionBlockRows + 7, D = 8, E = H * D, C = 3 * E;
  std::mt19937 rng(21);
  const std::vector<float> qkv = normals(G * T * C, rng, 1.5f);
  const std::vector<float> ct = normals(G * T * E, rng);
  AttentionShape s{G * H, T, T, D, D, true};
  // The same heads, dense: head n = g·H + h.
  std::vector<float> q(static_cast<size_t>(G * H * T * D)), k(q.size()), v(q.size()), ctd(q.size());
  auto dense_at = [&](int64_t n, int64_t t, int64_t d) { return static_cast<size_t>((n * T + t) * D + d); };
  auto fused_at = [&](int64_t n, int64_t t, int64_t part, int64_t d) {
    return static_cast<size_t>(((n / H) * T + t) * C + part * E + (n % H) * D + d);
  };
  auto out_at = [&](int64_t n, int64_t t, int64_t d) {
    return static_cast<size_t>(((n / H) * T + t) * E + (n % H) * D + d);
  };
  for (int64_t n = 0; n < G * H; ++n)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        q[dense_at(n, t, d)] = qkv[fused_at(n, t, 0, d)];
        k[dense_at(n, t, d)] = qkv[fused_at(n, t, 1, d)];
        v[dense_at(n, t, d)] = qkv[fused_at(n, t, 2, d)];
        ctd[dense_at(n, t, d)] = ct[out_at(n, t, d)];
      }
  for (float p : {0.1f, 0.0f}) {
    SCOPED_TRACE(testing::Message() << "p = " << p);
    DropoutDraw drop;
    drop.kept = 1.0f - p;
    drop.on = drop.kept != 1.0f;
    drop.key = key_from_seed(77);
    const Lines want = lines(s, q, k, v, &ctd, drop);
    const AttentionLayout layout = AttentionLayout::fused_qkv(s, H);
    std::vector<float> out(static_cast<size_t>(G * T * E)), out2(out.size()), dqkv(qkv.size());
    attention_forward_f32(s, layout, drop, qkv.data(), qkv.data() + E, qkv.data() + 2 * E, out.data(), 2);
    attention_backward_f32(s, layout, drop, qkv.data(), qkv.data() + E, qkv.data() + 2 * E, ct.data(), out2.data(),
                           dqkv.data(), dqkv.data() + E, dqkv.data() + 2 * E, true, 2);
    std::vector<float> want_out(out.size()), want_dqkv(dqkv.size());
    for (int64_t n = 0; n < G * H; ++n)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) {
          want_out[out_at(n, t, d)] = want.out[dense_at(n, t, d)];
          want_dqkv[fused_at(n, t, 0, d)] = want.dq[dense_at(n, t, d)] + 0.0f;
          want_dqkv[fused_at(n, t, 1, d)] = want.dk[dense_at(n, t, d)] + 0.0f;
          want_dqkv[fused_at(n, t, 2, d)] = want.dv[dense_at(n, t, d)] + 0.0f;
        }
    expect_bits(want_out, out, "forward out");
    expect_bits(want_out, out2, "vjp out");
    expect_bits(want_dqkv, dqkv, "dqkv");
  }
}

TEST(Attention, EveryRowPathGivesTheSameBits) {
  // The rows' AVX-512, AVX2 and portable builds (each the CPU has), on one
  // block with the mask and dropout: what QUIRE_ISA would choose between.
  using namespace attention_detail;
  const int64_t rows = 13, cols = 45;
  std::mt19937 rng(8);
  const std::vector<float> products = normals(rows * cols, rng, 3.0f);
  const std::vector<float> cotangent = normals(rows * cols, rng);
  DropoutDraw drop;
  drop.on = true;
  drop.kept = 0.75f;
  drop.key = key_from_seed(3);
  Rows r{rows, cols, cols, 30, true, attention_scale(16)};
  r.dropout = &drop;
  r.index0 = 1000;
  r.keys = 60;
  struct Out {
    std::vector<float> x, e, w, wd, m, z, g, t;
    std::vector<uint8_t> kept;
  };
  auto run = [&](ForwardRows forward, BackwardRows backward) {
    Out o;
    const size_t n = products.size();
    o.x.resize(n), o.e.resize(n), o.w.resize(n), o.wd.resize(n), o.t.resize(n), o.kept.resize(n);
    o.m.resize(static_cast<size_t>(rows)), o.z.resize(static_cast<size_t>(rows));
    forward(r, products.data(), o.x.data(), o.e.data(), o.w.data(), o.m.data(), o.z.data(), o.kept.data(),
            o.wd.data());
    o.g = cotangent;
    backward(r, o.x.data(), o.e.data(), o.w.data(), o.m.data(), o.z.data(), o.kept.data(), o.g.data(), o.t.data());
    return o;
  };
  const Out want = run(forward_rows_portable, backward_rows_portable);
  std::vector<std::pair<const char*, Out>> paths;
#if defined(__x86_64__)
  if (cpu_isa() >= Isa::Avx2) paths.emplace_back("avx2", run(forward_rows_avx2, backward_rows_avx2));
  if (cpu_isa() >= Isa::Avx512) paths.emplace_back("avx512", run(forward_rows_avx512, backward_rows_avx512));
#endif
  for (const auto& [name, got] : paths) {
    SCOPED_TRACE(name);
    expect_bits(want.x, got.x, "x");
    expect_bits(want.e, got.e, "e");
    expect_bits(want.w, got.w, "w");
    expect_bits(want.wd, got.wd, "dropped w");
    expect_bits(want.m, got.m, "m");
    expect_bits(want.z, got.z, "z");
    expect_bits(want.g, got.g, "ds");
    EXPECT_EQ(want.kept, got.kept);
  }
}

TEST(Attention, ADropoutOutsideZeroToOneIsRefused) {
  const Case c = random_case(1, 4, 4, 4, 4, true, 3);
  DropoutDraw drop;
  drop.on = true;
  drop.kept = -0.5f;
  std::vector<float> out(16);
  EXPECT_THROW(attention_forward_f32(c.shape, AttentionLayout::dense(c.shape), drop, c.q.data(), c.k.data(), c.v.data(),
                                     out.data(), 1),
               RuntimeError);
}

}  // namespace
}  // namespace quire::runtime
