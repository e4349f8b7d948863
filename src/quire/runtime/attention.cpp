// The fused attention of attention.h: blocks of query rows, their products
// on gemm.h's sgemm (whose chains are the lines' products, whatever the
// block), their rows on attention_rows.inc under the widest instruction set
// present (QUIRE_ISA caps it).
//
// Threads take whole heads (a head's dk and dv sum over its query blocks in
// order, so a head is never split); with fewer heads than threads, the heads
// run one after another and the products take the threads.

#include "quire/runtime/attention.h"

#include <fmt/format.h>
#include <math.h>    // NOLINT: elementary.inc is C, and uses the C names
#include <stdint.h>  // NOLINT
#include <string.h>  // NOLINT

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "quire/runtime/element_scan.h"
#include "quire/runtime/gemm.h"
#include "quire/runtime/isa.h"
#include "quire/runtime/runtime_error.h"
#include "quire/runtime/workers.h"

namespace quire::runtime {

namespace attention_detail {
namespace {
#include "quire/runtime/elementary.inc"
// after quire_exp, which it calls
#include "quire/runtime/attention_rows.inc"
}  // namespace

void forward_rows_portable(const Rows& r, const float* p, float* x, float* e, float* w, float* m, float* z,
                           uint8_t* kept, float* wd) {
  forward_rows(r, p, x, e, w, m, z, kept, wd);
}
void backward_rows_portable(const Rows& r, const float* x, const float* e, const float* w, const float* m,
                            const float* z, const uint8_t* kept, float* g, float* tmp) {
  backward_rows(r, x, e, w, m, z, kept, g, tmp);
}

}  // namespace attention_detail

namespace {

using attention_detail::Rows;

struct RowPaths {
  attention_detail::ForwardRows forward;
  attention_detail::BackwardRows backward;
};

RowPaths row_paths() {
#if defined(__x86_64__)
  switch (widest_isa()) {
    case Isa::Avx512:
      return {attention_detail::forward_rows_avx512, attention_detail::backward_rows_avx512};
    case Isa::Avx2:
      return {attention_detail::forward_rows_avx2, attention_detail::backward_rows_avx2};
    case Isa::Baseline:
    case Isa::Neon:
      break;
  }
#endif
  return {attention_detail::forward_rows_portable, attention_detail::backward_rows_portable};
}

/// Σ |p[i]| in f64 (p finite), for a bound.
double magnitude_sum(const float* p, int64_t n) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += std::fabs(static_cast<double>(p[i]));
  return sum;
}

/// Whether some element of p is −0.
bool holds_negative_zero(const float* p, int64_t n) {
  uint32_t found = 0;
#pragma omp simd reduction(| : found)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, p + i, sizeof bits);
    found |= bits == 0x80000000u ? 1u : 0u;
  }
  return found != 0;
}

/// One head's operands and results, each with its row stride.
struct Head {
  const float* q;
  const float* k;
  const float* v;
  const float* ct;  // the vjp's
  float* out;
  float* dq;
  float* dk;
  float* dv;
  int64_t q_rs, k_rs, v_rs, out_rs;  // ct as out, dq as q, dk as k, dv as v
  uint64_t index0;                   // the flat index of (n, 0, 0) in [n, T, S], dropout's
};

bool rows_finite(const float* p, int64_t rows, int64_t cols, int64_t rs) {
  for (int64_t r = 0; r < rows; ++r)
    if (!all_finite(p + r * rs, static_cast<size_t>(cols))) return false;
  return true;
}

double rows_largest_magnitude(const float* p, int64_t rows, int64_t cols, int64_t rs) {
  double largest = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    largest = std::max(largest, largest_magnitude(p + r * rs, static_cast<size_t>(cols)));
  return largest;
}

struct Scratch {
  std::vector<float> p, t, x, e, w, wd, m, z;
  std::vector<uint8_t> kept;
  Scratch(const AttentionShape& s, bool backward, bool dropout) {
    const size_t block = static_cast<size_t>(kAttentionBlockRows * s.keys);
    x.resize(block);
    e.resize(block);
    w.resize(block);
    p.resize(backward ? block : 0);              // the vjp's g, then ds; the forward's products go to w
    t.resize(backward ? block : 0);              // the vjp rows' scratch
    wd.resize(dropout && backward ? block : 0);  // the dropped weights (the forward drops w in place)
    kept.resize(dropout ? block : 0);
    m.resize(static_cast<size_t>(kAttentionBlockRows));
    z.resize(static_cast<size_t>(kAttentionBlockRows));
  }
};

/// The keys a block of query rows [t0, t1) computes: under the mask with
/// skipping, those any of its rows sees.
int64_t block_keys(const AttentionShape& s, bool skip, int64_t t1) { return skip ? std::min(s.keys, t1) : s.keys; }

/// Finishes a chain whose accumulator is −0 after the computed keys: the
/// skipped keys add fmaf(+0, y, acc), which makes a −0 +0 where y ≥ +0.
void finish_negative_zeros(float* row, int64_t width, const float* y, int64_t y_rs, int64_t from, int64_t to) {
  if (!holds_negative_zero(row, width)) return;
  for (int64_t j = 0; j < width; ++j) {
    float acc = row[j];
    if (acc != 0.0f || !std::signbit(acc)) continue;
    for (int64_t s = from; s < to; ++s) acc = std::fma(0.0f, y[s * y_rs + j], acc);
    row[j] = acc;
  }
}

/// One block of query rows [t0, t0 + rows) over keys [0, cols): the scores
/// product, the rows' weights (into sc.w, the dropped ones into `wd`, which
/// may be sc.w) and the weighted values into out; returns the rows' setting.
Rows weigh_block(const AttentionShape& s, const DropoutDraw& dropout, const Head& h, Scratch& sc,
                 const RowPaths& paths, float scale, int64_t t0, int64_t rows, int64_t cols, float* wd, int threads) {
  float* w = sc.w.data();
  native::sgemm(rows, cols, s.width, h.q + t0 * h.q_rs, h.q_rs, 1, h.k, 1, h.k_rs, w, cols, false, threads);
  Rows r{rows, cols, cols, t0, s.causal, scale};
  if (dropout.on) {
    r.dropout = &dropout;
    r.index0 = h.index0 + static_cast<uint64_t>(t0 * s.keys);
    r.keys = s.keys;
  }
  paths.forward(r, w, sc.x.data(), sc.e.data(), w, sc.m.data(), sc.z.data(), sc.kept.data(), wd);
  float* out = h.out + t0 * h.out_rs;
  native::sgemm(rows, s.value_width, cols, wd, cols, 1, h.v, h.v_rs, 1, out, h.out_rs, false, threads);
  if (cols < s.keys)
    for (int64_t i = 0; i < rows; ++i)
      finish_negative_zeros(out + i * h.out_rs, s.value_width, h.v, h.v_rs, cols, s.keys);
  return r;
}

void forward_head(const AttentionShape& s, const DropoutDraw& dropout, const Head& h, Scratch& sc,
                  const RowPaths& paths, float scale, int threads) {
  const bool skip = s.causal && rows_finite(h.q, s.queries, s.width, h.q_rs) &&
                    rows_finite(h.k, s.keys, s.width, h.k_rs) && rows_finite(h.v, s.keys, s.value_width, h.v_rs);
  for (int64_t t0 = 0; t0 < s.queries; t0 += kAttentionBlockRows) {
    const int64_t t1 = std::min(s.queries, t0 + kAttentionBlockRows);
    weigh_block(s, dropout, h, sc, paths, scale, t0, t1 - t0, block_keys(s, skip, t1), sc.w.data(), threads);
  }
}

/// The vjp of one head. With `skip`, false when a row's skipped keys could
/// have changed its sums (then the caller runs the head again without).
bool backward_head(const AttentionShape& s, const DropoutDraw& dropout, const Head& h, Scratch& sc,
                   const RowPaths& paths, float scale, bool skip, int threads) {
  for (int64_t j = 0; j < s.keys; ++j) {
    std::fill_n(h.dk + j * h.k_rs, s.width, 0.0f);
    std::fill_n(h.dv + j * h.v_rs, s.value_width, 0.0f);
  }
  // A bound on |g_s| = |ct_t·v_s| for the skipped keys, ‖ct_t‖₁ · max|v|,
  // over κ where dropout divides the cotangent by it.
  const double largest_v = skip ? rows_largest_magnitude(h.v, s.keys, s.value_width, h.v_rs) : 0.0;
  const double spread = dropout.on ? 1.0 / static_cast<double>(dropout.kept) : 1.0;
  for (int64_t t0 = 0; t0 < s.queries; t0 += kAttentionBlockRows) {
    const int64_t t1 = std::min(s.queries, t0 + kAttentionBlockRows);
    const int64_t rows = t1 - t0;
    const int64_t cols = block_keys(s, skip, t1);
    float *x = sc.x.data(), *e = sc.e.data(), *w = sc.w.data(), *g = sc.p.data();
    float* wd = dropout.on ? sc.wd.data() : w;  // the weights the values meet
    const float* q = h.q + t0 * h.q_rs;
    const float* ct = h.ct + t0 * h.out_rs;
    const Rows r = weigh_block(s, dropout, h, sc, paths, scale, t0, rows, cols, wd, threads);
    native::sgemm(rows, cols, s.value_width, ct, h.out_rs, 1, h.v, 1, h.v_rs, g, cols, false, threads);
    native::sgemm(cols, s.value_width, rows, wd, 1, cols, ct, h.out_rs, 1, h.dv, h.v_rs, true, threads);
    if (cols < s.keys) {
      // The skipped keys' terms are ±0 only if (g_s / z + r) stays finite there.
      for (int64_t i = 0; i < rows; ++i) {
        const double g_bound = 2.0 * magnitude_sum(ct + i * h.out_rs, s.value_width) * largest_v * spread;
        // |r| ≤ Σ |g_s · w_s| / z ≤ max |g| (Σ w = 1, z ≥ 1), with room for rounding.
        const double r_bound = largest_magnitude(g + i * cols, static_cast<size_t>(cols)) * spread;
        if (!(g_bound + 2.0 * r_bound < 0.25 * FLT_MAX)) return false;
      }
    }
    paths.backward(r, x, e, w, sc.m.data(), sc.z.data(), sc.kept.data(), g, sc.t.data());
    float* dq = h.dq + t0 * h.q_rs;
    native::sgemm(rows, s.width, cols, g, cols, 1, h.k, h.k_rs, 1, dq, h.q_rs, false, threads);
    native::sgemm(cols, s.width, rows, g, 1, cols, q, h.q_rs, 1, h.dk, h.k_rs, true, threads);
    if (cols < s.keys)
      for (int64_t i = 0; i < rows; ++i) finish_negative_zeros(dq + i * h.q_rs, s.width, h.k, h.k_rs, cols, s.keys);
  }
  return true;
}

/// x + 0 for every element of rows × cols: a −0 becomes +0, the rest stays.
void add_zero(float* p, int64_t rows, int64_t cols, int64_t rs) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = p + r * rs;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) row[j] = row[j] + 0.0f;
  }
}

int64_t offset(const AttentionLayout& l, const AttentionOperand& o, int64_t n) {
  return (n / l.heads_per_group) * o.group_stride + (n % l.heads_per_group) * o.head_stride;
}

Head head_at(const AttentionShape& s, const AttentionLayout& l, int64_t n, const float* q, const float* k,
             const float* v, const float* ct, float* out, float* dq, float* dk, float* dv) {
  const int64_t oq = offset(l, l.q, n), ok = offset(l, l.k, n), ov = offset(l, l.v, n), oo = offset(l, l.out, n);
  return {q + oq,
          k + ok,
          v + ov,
          ct ? ct + oo : nullptr,
          out + oo,
          dq ? dq + oq : nullptr,
          dk ? dk + ok : nullptr,
          dv ? dv + ov : nullptr,
          l.q.row_stride,
          l.k.row_stride,
          l.v.row_stride,
          l.out.row_stride,
          static_cast<uint64_t>(n * s.queries * s.keys)};
}

/// Runs fn(head, scratch, product threads) for every head.
template <typename Fn>
void each_head(const AttentionShape& s, bool backward, bool dropout, int threads, const Fn& fn) {
  if (s.heads <= 0 || s.queries <= 0) return;
  if (s.heads >= threads || threads <= 1) {
    std::vector<Scratch> scratch;
    const int slots = static_cast<int>(std::min<int64_t>(std::max(threads, 1), s.heads));
    scratch.reserve(static_cast<size_t>(slots));
    for (int i = 0; i < slots; ++i) scratch.emplace_back(s, backward, dropout);
    native::WorkerPool::shared().parallel_for(
        s.heads, slots, [&](int64_t n, int slot) { fn(n, scratch[static_cast<size_t>(slot)], 1); });
  } else {
    Scratch scratch(s, backward, dropout);
    for (int64_t n = 0; n < s.heads; ++n) fn(n, scratch, threads);
  }
}


}  // namespace

float attention_scale(int64_t width) {
  // The lines' sqrt(max(iota(d: D)) + 1.0): the i32 D − 1 plus 1, rounded to f32, then its root rounded.
  const float d = static_cast<float>(static_cast<double>(width - 1) + 1.0);
  return static_cast<float>(std::sqrt(static_cast<double>(d)));
}

AttentionLayout AttentionLayout::dense(const AttentionShape& s) {
  AttentionLayout l;
  l.heads_per_group = 1;
  l.q = {s.queries * s.width, 0, s.width};
  l.k = {s.keys * s.width, 0, s.width};
  l.v = {s.keys * s.value_width, 0, s.value_width};
  l.out = {s.queries * s.value_width, 0, s.value_width};
  return l;
}

AttentionLayout AttentionLayout::fused_qkv(const AttentionShape& s, int64_t heads_per_group) {
  const int64_t e = heads_per_group * s.width;  // E: one third of qkv's row
  AttentionLayout l;
  l.heads_per_group = heads_per_group;
  l.q = l.k = l.v = {s.queries * 3 * e, s.width, 3 * e};
  l.out = {s.queries * e, s.value_width, e};
  return l;
}

int64_t attention_scratch_bytes(const AttentionShape& s, bool backward) {
  const int64_t block = kAttentionBlockRows * s.keys;
  return static_cast<int64_t>(sizeof(float)) * (block * (backward ? 6 : 3) + 2 * kAttentionBlockRows) + block;
}

void attention_forward_f32(const AttentionShape& s, const AttentionLayout& layout, const DropoutDraw& dropout,
                           const float* q, const float* k, const float* v, float* out, int threads) {
  dropout.check();
  const RowPaths paths = row_paths();
  const float scale = attention_scale(s.width);
  each_head(s, false, dropout.on, threads, [&](int64_t n, Scratch& sc, int product_threads) {
    forward_head(s, dropout, head_at(s, layout, n, q, k, v, nullptr, out, nullptr, nullptr, nullptr), sc, paths, scale,
                 product_threads);
  });
}

void attention_backward_f32(const AttentionShape& s, const AttentionLayout& layout, const DropoutDraw& dropout,
                            const float* q, const float* k, const float* v, const float* ct, float* out, float* dq,
                            float* dk, float* dv, bool summed, int threads) {
  dropout.check();
  const RowPaths paths = row_paths();
  const float scale = attention_scale(s.width);
  each_head(s, true, dropout.on, threads, [&](int64_t n, Scratch& sc, int product_threads) {
    const Head h = head_at(s, layout, n, q, k, v, ct, out, dq, dk, dv);
    const bool skip = s.causal && rows_finite(h.q, s.queries, s.width, h.q_rs) &&
                      rows_finite(h.k, s.keys, s.width, h.k_rs) && rows_finite(h.v, s.keys, s.value_width, h.v_rs) &&
                      rows_finite(h.ct, s.queries, s.value_width, h.out_rs);
    if (!backward_head(s, dropout, h, sc, paths, scale, skip, product_threads))
      backward_head(s, dropout, h, sc, paths, scale, false, product_threads);
    if (summed) {
      add_zero(h.dq, s.queries, s.width, h.q_rs);
      add_zero(h.dk, s.keys, s.width, h.k_rs);
      add_zero(h.dv, s.keys, s.value_width, h.v_rs);
    }
  });
}

void attention_forward_f32(const AttentionShape& s, const float* q, const float* k, const float* v, float* out,
                           int threads) {
  attention_forward_f32(s, AttentionLayout::dense(s), DropoutDraw{}, q, k, v, out, threads);
}

void attention_backward_f32(const AttentionShape& s, const float* q, const float* k, const float* v, const float* ct,
                            float* out, float* dq, float* dk, float* dv, int threads) {
  attention_backward_f32(s, AttentionLayout::dense(s), DropoutDraw{}, q, k, v, ct, out, dq, dk, dv, false,
                         threads);
}

}  // namespace quire::runtime
