#pragma once
// Fused attention on the processor: the prelude's `attention` and
// `causal_attention` (prelude/nn.qr) and their vjps, each one pass over
// blocks of query rows that never holds the T × S score matrix, with exactly
// the bits the native backend gives the library's lines in f32 under
// `--product-step fma`.
//
// The lines, for one head and one query row t (every operation one f32
// rounding; Σ in increasing s from +0.0, each product a gemm.h chain):
//
//   forward                                  vjp, with the cotangent ct of the result
//   x_s = (q_t·k_s) / c, −∞ where s > t      g_s  = ct_t·v_s
//   m   = max_s x_s                          r    = Σ −((g_s · w_s) / z)
//   e_s = exp(x_s − m)                       u_s  = (g_s / z + r) · e_s
//   z   = Σ e_s                              gm   = Σ −u_s,  n = Σ (x_s == m ? 1 : 0)
//   w_s = e_s / z                            dx_s = u_s + (x_s == m ? gm / n : +0)
//   out_t = Σ_s w_s v_s                      ds_s = (s ≤ t ? dx_s : +0) / c
//                                            dq_t = Σ_s ds_s k_s,  dk_s = Σ_t ds_s q_t,
//                                            dv_s = Σ_t w_s ct_t   (chains over t increasing)
//
// with c = f32(sqrt(f32(D))) (the lines' `sqrt(max(iota(d: D)) + 1.0)`), exp
// quire's own (runtime/elementary.h) rounded to f32 and max quire's (a NaN
// wins, +0 over −0). Without the mask the same lines hold with no −∞.
//
// Where the mask hides a key, the lines add +0 and multiply by +0, which a
// causal kernel need not do: a block of query rows [t0, t1) computes keys
// [0, min(S, t1)) only. That is exact when the inputs of the head are finite
// and nothing overflows (the skipped terms are then ±0 added to sums that
// start at +0, which cannot change them, or fmaf(+0, y, acc), which changes
// only an accumulator that is −0: such elements are finished over the
// skipped keys one by one). A head where that cannot be shown (a non-finite
// input, or a cotangent bound that could overflow) runs over every key, the
// lines exactly.
//
// With dropout on the weights (`causal_self_attention`'s), the weights the
// values meet are w'_s = (kept_s ? w_s / κ : +0), κ = f32(1 − p) and kept_s
// element (n·T + t)·S + s of bernoulli(key, κ) over [n, T, S]
// (runtime/random.h); the vjp's g_s becomes (kept_s ? g_s : +0) / κ before
// the softmax's lines, and dv sums w'_s ct_t.
//
// Layouts (AttentionLayout): heads n, each operand's rows of contiguous
// elements: dense, q [n, T, D], k [n, S, D], v [n, S, E], ct and out
// [n, T, E], dq/dk/dv as q/k/v; or GPT-2's fused qkv, where q, k, v and
// their cotangents are read and written in place in [g, T, 3·E] and the
// result is [g, T, E], head h at columns h·D. All f32. The result does not
// depend on `threads`.

#include <cstdint>

#include "quire/runtime/random.h"

namespace quire::runtime {

struct AttentionShape {
  int64_t heads = 1;        ///< the leading axes, flattened
  int64_t queries = 0;      ///< T
  int64_t keys = 0;         ///< S
  int64_t width = 0;        ///< D, of q and k
  int64_t value_width = 0;  ///< E, of v and the result
  bool causal = false;      ///< key s hidden from query t where s > t
};

/// Where head n's row r, element j of an operand lies:
/// p[(n / heads_per_group)·group_stride + (n % heads_per_group)·head_stride + r·row_stride + j].
struct AttentionOperand {
  int64_t group_stride = 0;
  int64_t head_stride = 0;
  int64_t row_stride = 0;
};

struct AttentionLayout {
  int64_t heads_per_group = 1;
  AttentionOperand q, k, v, out;  ///< ct as out; dq, dk, dv as q, k, v
  /// q [n, T, D], k [n, S, D], v [n, S, E], out [n, T, E].
  static AttentionLayout dense(const AttentionShape& s);
  /// qkv [g, T, 3·H·D] with q, k, v its thirds (pass qkv, qkv + H·D and
  /// qkv + 2·H·D), head h at columns h·D of each; out [g, T, H·D]. T = S, D = E.
  static AttentionLayout fused_qkv(const AttentionShape& s, int64_t heads_per_group);
};


/// How many query rows a block holds.
inline constexpr int64_t kAttentionBlockRows = 32;

/// The scale c the lines divide the scores by: f32(sqrt(f32(D))).
float attention_scale(int64_t width);

/// out = attention(q, k, v). Throws RuntimeError for a dropout κ outside [0, 1].
void attention_forward_f32(const AttentionShape& shape, const AttentionLayout& layout, const DropoutDraw& dropout,
                           const float* q, const float* k, const float* v, float* out, int threads);

/// The vjp's results at cotangent ct: out (as the forward), dq, dk, dv. With
/// `summed`, the lines sum the three cotangents with zeros into one tensor
/// (the fused qkv's slices), which makes a −0 +0: so does the kernel.
void attention_backward_f32(const AttentionShape& shape, const AttentionLayout& layout, const DropoutDraw& dropout,
                            const float* q, const float* k, const float* v, const float* ct, float* out, float* dq,
                            float* dk, float* dv, bool summed, int threads);

/// Dense layouts, no dropout.
void attention_forward_f32(const AttentionShape& shape, const float* q, const float* k, const float* v, float* out,
                           int threads);
void attention_backward_f32(const AttentionShape& shape, const float* q, const float* k, const float* v,
                            const float* ct, float* out, float* dq, float* dk, float* dv, int threads);

/// The bytes of scratch one head's thread holds.
int64_t attention_scratch_bytes(const AttentionShape& shape, bool backward);

namespace attention_detail {

/// One block's forward rows (attention_rows.inc): p holds rows × cols
/// products q·k (row stride ld), row i being query t0 + i; on return x holds
/// the masked scaled scores, e their exps, w the weights (w may be p), and
/// with dropout `kept` each element's draw and wd the weights dropped (wd may
/// be w when w itself is not needed after).
struct Rows {
  int64_t rows = 0, cols = 0, ld = 0, t0 = 0;
  bool causal = false;
  float scale = 1.0f;
  const DropoutDraw* dropout = nullptr;  ///< null: none
  uint64_t index0 = 0;                        ///< the flat index of (n, t0, 0) in [n, T, S]
  int64_t keys = 0;                           ///< S, the flat index's row length
};
using ForwardRows = void (*)(const Rows& r, const float* p, float* x, float* e, float* w, float* m, float* z,
                             uint8_t* kept, float* wd);
/// One block's vjp rows: g holds ct·v (rows × cols) and becomes ds; tmp is
/// scratch of g's size.
using BackwardRows = void (*)(const Rows& r, const float* x, const float* e, const float* w, const float* m,
                              const float* z, const uint8_t* kept, float* g, float* tmp);

void forward_rows_portable(const Rows& r, const float* p, float* x, float* e, float* w, float* m, float* z,
                           uint8_t* kept, float* wd);
void backward_rows_portable(const Rows& r, const float* x, const float* e, const float* w, const float* m,
                            const float* z, const uint8_t* kept, float* g, float* tmp);
#if defined(__x86_64__)
void forward_rows_avx2(const Rows& r, const float* p, float* x, float* e, float* w, float* m, float* z, uint8_t* kept,
                       float* wd);
void backward_rows_avx2(const Rows& r, const float* x, const float* e, const float* w, const float* m, const float* z,
                        const uint8_t* kept, float* g, float* tmp);
void forward_rows_avx512(const Rows& r, const float* p, float* x, float* e, float* w, float* m, float* z, uint8_t* kept,
                         float* wd);
void backward_rows_avx512(const Rows& r, const float* x, const float* e, const float* w, const float* m, const float* z,
                          const uint8_t* kept, float* g, float* tmp);
#endif

}  // namespace attention_detail

}  // namespace quire::runtime
