/* quire_runtime.c: see quire_runtime.h. */
#include "quire_runtime.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void quire_fail(const char* format, ...) {
  va_list args;
  va_start(args, format);
  fputs("error: ", stderr);
  vfprintf(stderr, format, args);
  fputc('\n', stderr);
  va_end(args);
  exit(1);
}

static size_t element_bytes(int storage) {
  return storage == QUIRE_FLOAT ? sizeof(float) : storage == QUIRE_INT ? sizeof(int64_t) : sizeof(double);
}

static unsigned char* arena;
static const int64_t* arena_sizes;
static const int64_t* arena_offsets;
static int64_t arena_count, arena_next;

void quire_arena_open(int64_t bytes, const int64_t* sizes, const int64_t* offsets, int64_t count) {
  arena_sizes = sizes;
  arena_offsets = offsets;
  arena_count = count;
  arena_next = 0;
#ifndef QUIRE_NO_ARENA
  const size_t rounded = (size_t)((bytes + 63) / 64 * 64);
  arena = aligned_alloc(64, rounded > 0 ? rounded : 64);
  if (!arena) quire_fail("out of memory: the arena of %lld bytes", (long long)bytes);
#else
  (void)bytes;
#endif
}

void quire_arena_close(void) {
  if (arena_next != arena_count)
    quire_fail("internal: %lld of the schedule's %lld allocations made", (long long)arena_next,
               (long long)arena_count);
  free(arena);
  arena = NULL;
}

void* quire_alloc(int64_t n, int storage) {
  const size_t bytes = (size_t)(n > 0 ? n : 1) * element_bytes(storage);
  if (arena_next >= arena_count || arena_sizes[arena_next] != (int64_t)bytes)
    quire_fail("internal: allocation %lld of %zu bytes is not the arena schedule's", (long long)arena_next, bytes);
#ifndef QUIRE_NO_ARENA
  void* p = arena + arena_offsets[arena_next++];
  memset(p, 0, bytes);
#else
  ++arena_next;
  void* p = calloc(1, bytes);
  if (!p) quire_fail("out of memory (%zu bytes)", bytes);
#endif
  return p;
}

void quire_release(void* p) {
#ifdef QUIRE_NO_ARENA
  free(p);
#else
  (void)p;
#endif
}

void* quire_offset(void* p, int storage, int64_t elements) {
  return (char*)p + (size_t)elements * element_bytes(storage);
}

static double load(const void* p, int storage, int64_t i) {
  if (storage == QUIRE_FLOAT) return ((const float*)p)[i];
  if (storage == QUIRE_INT) return (double)((const int64_t*)p)[i];
  return ((const double*)p)[i];
}

static void store(void* p, int storage, int64_t i, double x) {
  if (storage == QUIRE_FLOAT)
    ((float*)p)[i] = (float)x;
  else if (storage == QUIRE_INT)
    ((int64_t*)p)[i] = (int64_t)x;
  else
    ((double*)p)[i] = x;
}

/* One element: integers copied as integers (no trip through double), the
   rest through double, where every value of the narrow types is exact. */
static void move_element(void* dst, int dst_storage, int64_t d, const void* src, int src_storage, int64_t s,
                         quire_rounding round) {
  if (dst_storage == QUIRE_INT && src_storage == QUIRE_INT) {
    ((int64_t*)dst)[d] = ((const int64_t*)src)[s];
    return;
  }
  const double x = load(src, src_storage, s);
  store(dst, dst_storage, d, round ? round(x) : x);
}

void quire_copy_box(void* dst, int dst_storage, int64_t dst_at, const int64_t* dst_strides, const void* src,
                    int src_storage, int64_t src_at, const int64_t* src_strides, const int64_t* extents, int rank,
                    quire_rounding round) {
  int64_t index[8] = {0};
  int64_t total = 1;
  if (rank > 8) quire_fail("internal: a copy of rank %d", rank);
  for (int d = 0; d < rank; ++d) total *= extents[d];
  for (int64_t e = 0; e < total; ++e) {
    int64_t to = dst_at, from = src_at;
    for (int d = 0; d < rank; ++d) {
      to += index[d] * dst_strides[d];
      from += index[d] * src_strides[d];
    }
    move_element(dst, dst_storage, to, src, src_storage, from, round);
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < extents[d]) break;
      index[d] = 0;
    }
  }
}

void quire_convert(void* dst, int dst_storage, const void* src, int src_storage, int64_t n, quire_rounding round) {
  for (int64_t i = 0; i < n; ++i) move_element(dst, dst_storage, i, src, src_storage, i, round);
}

void quire_accumulate(double* sum, const void* part, int storage, int64_t n, int first) {
  for (int64_t i = 0; i < n; ++i) sum[i] = first ? load(part, storage, i) : sum[i] + load(part, storage, i);
}

void quire_gather(void* out, const void* table, int storage, int64_t outer, int64_t size, int64_t inner,
                  const int64_t* ids, int64_t n) {
  int64_t at = 0;
  for (int64_t j = 0; j < n; ++j)
    if (ids[j] < 0 || ids[j] >= size)
      quire_fail("gather: id %lld at %lld is outside the table's axis of size %lld", (long long)ids[j], (long long)j,
                 (long long)size);
  for (int64_t p = 0; p < outer; ++p)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t q = 0; q < inner; ++q, ++at)
        move_element(out, storage, at, table, storage, (p * size + ids[i]) * inner + q, NULL);
}

void quire_pick(void* out, const void* x, int storage, int64_t outer, int64_t size, int64_t inner,
                const int64_t* ids) {
  int64_t at = 0;
  for (int64_t p = 0; p < outer; ++p)
    for (int64_t q = 0; q < inner; ++q, ++at) {
      if (ids[at] < 0 || ids[at] >= size)
        quire_fail("pick: id %lld at %lld is outside an axis of size %lld", (long long)ids[at], (long long)at,
                   (long long)size);
      move_element(out, storage, at, x, storage, (p * size + ids[at]) * inner + q, NULL);
    }
}

void quire_one_hot(double* out, const int64_t* ids, int64_t n, int64_t classes) {
  for (int64_t j = 0; j < n; ++j) {
    if (ids[j] < 0 || ids[j] >= classes)
      quire_fail("one_hot: id %lld at %lld is outside the new axis of size %lld", (long long)ids[j], (long long)j,
                 (long long)classes);
    out[j * classes + ids[j]] = 1.0;
  }
}

void quire_iota(int64_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = i;
}

void quire_gather_adjoint(double* sums, const void* ct, int ct_storage, int64_t outer, int64_t size, int64_t inner,
                          const int64_t* ids, int64_t n, quire_rounding acc) {
  int64_t k = 0;
  for (int64_t j = 0; j < n; ++j)
    if (ids[j] < 0 || ids[j] >= size)
      quire_fail("gather: id %lld at %lld is outside the table's axis of size %lld", (long long)ids[j], (long long)j,
                 (long long)size);
  for (int64_t p = 0; p < outer; ++p)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t q = 0; q < inner; ++q, ++k) {
        double* r = &sums[(p * size + ids[i]) * inner + q];
        const double v = *r + load(ct, ct_storage, k);
        *r = acc ? acc(v) : v;
      }
}

void quire_pick_adjoint(double* out, const void* ct, int ct_storage, int64_t outer, int64_t size, int64_t inner,
                        const int64_t* ids) {
  int64_t at = 0;
  for (int64_t p = 0; p < outer; ++p)
    for (int64_t q = 0; q < inner; ++q, ++at) {
      if (ids[at] < 0 || ids[at] >= size)
        quire_fail("pick: id %lld at %lld is outside an axis of size %lld", (long long)ids[at], (long long)at,
                   (long long)size);
      out[(p * size + ids[at]) * inner + q] = load(ct, ct_storage, at);
    }
}

void quire_scan(double* h, const void* a, int a_storage, const void* x, int x_storage, const int64_t* batch,
                const int64_t* batch_x, const int64_t* batch_a, int batch_rank, int64_t steps, int64_t states,
                int64_t ts, int64_t ns, int64_t ats, int64_t ans, int64_t am, int adjoint, quire_rounding acc) {
  if (steps == 0 || states == 0) return;
  int64_t count = 1;
  for (int d = 0; d < batch_rank; ++d) count *= batch[d];
  const int64_t row = adjoint ? am : ans, column = adjoint ? ans : am;
  int64_t index[8] = {0};
  for (int64_t b = 0; b < count; ++b) {
    int64_t xo = 0, ao = 0;
    for (int d = 0; d < batch_rank; ++d) {
      xo += index[d] * batch_x[d];
      ao += index[d] * batch_a[d];
    }
    for (int64_t i = 0; i < steps; ++i) {
      const int64_t t = adjoint ? steps - 1 - i : i;
      const int64_t prev = adjoint ? t + 1 : t - 1;
      const int64_t a_step = ao + (adjoint ? prev : t) * ats;
      for (int64_t n = 0; n < states; ++n) {
        const double v = load(x, x_storage, xo + t * ts + n * ns);
        double s = acc ? acc(v) : v;
        if (i > 0)
          for (int64_t m = 0; m < states; ++m) {
            const double p = load(a, a_storage, a_step + n * row + m * column) * h[xo + prev * ts + m * ns];
            const double sum = s + (acc ? acc(p) : p);
            s = acc ? acc(sum) : sum;
          }
        h[xo + t * ts + n * ns] = s;
      }
    }
    for (int d = batch_rank - 1; d >= 0; --d) {
      if (++index[d] < batch[d]) break;
      index[d] = 0;
    }
  }
}

void quire_scan_grad_a(double* out, const void* l, int l_storage, const void* h, int h_storage, const int64_t* shape,
                       int rank, const int64_t* to_x, int t_axis, int n_axis, int m_axis, int64_t ts, int64_t ns,
                       int adjoint) {
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) total *= shape[d];
  int64_t index[9] = {0};
  for (int64_t e = 0; e < total; ++e) {
    const int64_t t = index[t_axis], n = index[n_axis], m = index[m_axis];
    out[e] = 0.0;
    if (t > 0) {
      int64_t batch = 0;
      for (int d = 0; d < rank; ++d) batch += index[d] * to_x[d];
      out[e] = adjoint ? load(l, l_storage, batch + (t - 1) * ts + m * ns) * load(h, h_storage, batch + t * ts + n * ns)
                       : load(l, l_storage, batch + t * ts + n * ns) * load(h, h_storage, batch + (t - 1) * ts + m * ns);
    }
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

static int fits(int64_t r, int i32) { return !i32 || (r >= INT32_MIN && r <= INT32_MAX); }

static const char* int_op_name(int op) {
  static const char* const names[] = {"add", "sub", "mul", "min", "max", "lt",  "le",   "gt",  "ge",  "eq",
                                      "ne",  "neg", "abs", "not", "relu", "where", "sum", "max", "min"};
  return op >= 0 && op <= QUIRE_INT_REDUCE_MIN ? names[op] : "?";
}

static int64_t int_apply(int op, int64_t x, int64_t y, int64_t z, int i32, int64_t at) {
  int64_t r = 0;
  int overflow = 0;
  if (op < QUIRE_INT_ADD || op > QUIRE_INT_WHERE) quire_fail("internal: element-wise integer operation %d", op);
  switch (op) {
    case QUIRE_INT_ADD: overflow = __builtin_add_overflow(x, y, &r); break;
    case QUIRE_INT_SUB: overflow = __builtin_sub_overflow(x, y, &r); break;
    case QUIRE_INT_MUL: overflow = __builtin_mul_overflow(x, y, &r); break;
    case QUIRE_INT_MIN: r = y < x ? y : x; break;
    case QUIRE_INT_MAX: r = y > x ? y : x; break;
    case QUIRE_INT_LT: r = x < y; break;
    case QUIRE_INT_LE: r = x <= y; break;
    case QUIRE_INT_GT: r = x > y; break;
    case QUIRE_INT_GE: r = x >= y; break;
    case QUIRE_INT_EQ: r = x == y; break;
    case QUIRE_INT_NE: r = x != y; break;
    case QUIRE_INT_NEG: overflow = __builtin_sub_overflow((int64_t)0, x, &r); break;
    case QUIRE_INT_ABS:
      r = x;
      if (x < 0) overflow = __builtin_sub_overflow((int64_t)0, x, &r);
      break;
    case QUIRE_INT_NOT: r = x == 0; break;
    case QUIRE_INT_RELU: r = x > 0 ? x : 0; break;
    case QUIRE_INT_WHERE: r = x != 0 ? y : z; break;
  }
  if (overflow || !fits(r, i32))
    quire_fail("%s: the result at element %lld overflows %s", int_op_name(op), (long long)at, i32 ? "i32" : "i64");
  return r;
}

void quire_int_elementwise(int op, int64_t* out, const int64_t* extents, int rank, int i32, const int64_t* a,
                           const int64_t* a_strides, const int64_t* b, const int64_t* b_strides, const int64_t* c,
                           const int64_t* c_strides) {
  int64_t index[8] = {0};
  int64_t total = 1;
  if (rank > 8) quire_fail("internal: an element-wise step of rank %d", rank);
  for (int d = 0; d < rank; ++d) total *= extents[d];
  for (int64_t e = 0; e < total; ++e) {
    int64_t ia = 0, ib = 0, ic = 0;
    for (int d = 0; d < rank; ++d) {
      ia += index[d] * a_strides[d];
      if (b) ib += index[d] * b_strides[d];
      if (c) ic += index[d] * c_strides[d];
    }
    out[e] = int_apply(op, a[ia], b ? b[ib] : 0, c ? c[ic] : 0, i32, e);
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < extents[d]) break;
      index[d] = 0;
    }
  }
}

void quire_int_reduce(int op, int64_t* out, const int64_t* x, const int64_t* kept, const int64_t* kept_strides,
                      int kept_rank, const int64_t* reduced, const int64_t* reduced_strides, int reduced_rank,
                      int i32) {
  int64_t outer = 1, inner = 1;
  if (kept_rank > 8 || reduced_rank > 8) quire_fail("internal: a reduction of rank %d", kept_rank + reduced_rank);
  for (int d = 0; d < kept_rank; ++d) outer *= kept[d];
  for (int d = 0; d < reduced_rank; ++d) inner *= reduced[d];
  if (inner == 0 && outer > 0 && op != QUIRE_INT_SUM) quire_fail("%s of an empty slice", int_op_name(op));
  int64_t k_index[8] = {0};
  for (int64_t e = 0; e < outer; ++e) {
    int64_t base = 0;
    for (int d = 0; d < kept_rank; ++d) base += k_index[d] * kept_strides[d];
    int64_t r_index[8] = {0};
    int64_t acc = 0;
    int overflow = 0;
    for (int64_t f = 0; f < inner; ++f) {
      int64_t at = base;
      for (int d = 0; d < reduced_rank; ++d) at += r_index[d] * reduced_strides[d];
      const int64_t v = x[at];
      if (op == QUIRE_INT_SUM)
        overflow = overflow || __builtin_add_overflow(acc, v, &acc);
      else if (f == 0 || (op == QUIRE_INT_REDUCE_MAX ? v > acc : v < acc))
        acc = v;
      for (int d = reduced_rank - 1; d >= 0; --d) {
        if (++r_index[d] < reduced[d]) break;
        r_index[d] = 0;
      }
    }
    if (overflow || !fits(acc, i32))
      quire_fail("sum: the sum at element %lld of a slice of %lld elements overflows %s", (long long)e,
                 (long long)inner, i32 ? "i32" : "i64");
    out[e] = acc;
    for (int d = kept_rank - 1; d >= 0; --d) {
      if (++k_index[d] < kept[d]) break;
      k_index[d] = 0;
    }
  }
}

/* Philox-4x32-10 (runtime/philox.cpp): ten rounds, the key bumped between them. */
static void philox(uint32_t c[4], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
    const uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0;
    const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = (uint32_t)p1;
    c[2] = n2;
    c[3] = (uint32_t)p0;
  }
}

quire_key quire_split_key(quire_key k, int second) {
  uint32_t c[4] = {0u, 0u, 0u, 0x5EED5EEDu};
  philox(c, k.k0, k.k1);
  quire_key out;
  out.k0 = second ? c[2] : c[0];
  out.k1 = second ? c[3] : c[1];
  return out;
}

quire_key quire_copy_key(quire_key k, int64_t copy) {
  const uint64_t i = (uint64_t)copy;
  uint32_t c[4] = {(uint32_t)i, (uint32_t)(i >> 32), 0u, 0xC0B1E5EDu};
  philox(c, k.k0, k.k1);
  quire_key out;
  out.k0 = c[0];
  out.k1 = c[1];
  return out;
}

static void element_words(quire_key k, uint64_t i, uint32_t stream, uint32_t w[4]) {
  w[0] = (uint32_t)i;
  w[1] = (uint32_t)(i >> 32);
  w[2] = 0u;
  w[3] = stream;
  philox(w, k.k0, k.k1);
}

static uint64_t bits53(uint32_t a, uint32_t b) { return ((uint64_t)a << 21) ^ (uint64_t)(b >> 11); }

static const double two_to_minus_53 = 0x1p-53;

void quire_draw_uniform(double* out, int64_t n, quire_key k, double low, double high) {
  uint32_t w[4];
  for (int64_t i = 0; i < n; ++i) {
    element_words(k, (uint64_t)i, 1u, w);
    out[i] = low + (high - low) * ((double)bits53(w[0], w[1]) * two_to_minus_53);
  }
}

void quire_draw_normal(double* out, int64_t n, quire_key k, double mean, double std) {
  /* 2π as the runtime's std::numbers::pi times two: the double nearest π, doubled exactly. */
  const double two_pi = 2.0 * 0x1.921fb54442d18p+1;
  uint32_t w[4];
  for (int64_t i = 0; i < n; ++i) {
    element_words(k, (uint64_t)i, 2u, w);
    const double u1 = (double)(bits53(w[0], w[1]) + 1) * two_to_minus_53;
    const double u2 = (double)bits53(w[2], w[3]) * two_to_minus_53;
    out[i] = mean + std * (sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
  }
}

void quire_draw_bernoulli(int64_t* out, int64_t n, quire_key k, double p) {
  uint32_t w[4];
  if (!(p >= 0.0 && p <= 1.0)) quire_fail("bernoulli: probability %g is outside [0, 1]", p);
  for (int64_t i = 0; i < n; ++i) {
    element_words(k, (uint64_t)i, 3u, w);
    out[i] = (double)bits53(w[0], w[1]) * two_to_minus_53 < p ? 1 : 0;
  }
}

static int64_t batch_offset(const int64_t* batch, const int64_t* strides, int rank, int64_t t) {
  int64_t at = 0;
  for (int d = rank - 1; d >= 0; --d) {
    at += (t % batch[d]) * strides[d];
    t /= batch[d];
  }
  return at;
}

void quire_packed_product(float* c, int64_t m, int64_t n, int64_t k, const void* a, int a_storage,
                          quire_rounding a_round, int64_t a_rs, int64_t a_cs, const int64_t* a_batch,
                          const void* b, int b_storage, quire_rounding b_round, int64_t b_rs, int64_t b_cs,
                          const int64_t* b_batch, const int64_t* batch, int batch_rank) {
  int64_t batches = 1;
  for (int d = 0; d < batch_rank; ++d) batches *= batch[d];
  for (int64_t t = 0; t < batches; ++t) {
    const int64_t a_at = batch_offset(batch, a_batch, batch_rank, t);
    const int64_t b_at = batch_offset(batch, b_batch, batch_rank, t);
    float* ct = c + t * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int64_t p = 0; p < k; ++p) {
          double x = load(a, a_storage, a_at + i * a_rs + p * a_cs);
          double y = load(b, b_storage, b_at + p * b_rs + j * b_cs);
          if (a_round) x = a_round(x);
          if (b_round) y = b_round(y);
          acc = fmaf((float)x, (float)y, acc);
        }
        ct[i * n + j] = acc;
      }
  }
}

/* ---- NumPy files ---- */

static void* read_whole(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) quire_fail("%s: cannot open (%s)", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char* data = malloc(cap);
  if (!data) quire_fail("out of memory reading %s", path);
  for (;;) {
    if (n == cap) {
      cap *= 2;
      char* more = realloc(data, cap);
      if (!more) quire_fail("out of memory reading %s", path);
      data = more;
    }
    const size_t got = fread(data + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) quire_fail("%s: cannot read", path);
  fclose(f);
  *size = n;
  return data;
}

typedef struct {
  char descr[8];
  int64_t shape[16];
  int rank;
  const unsigned char* data;
  size_t bytes;
} npy_file;

/* The header's dictionary, checked: 'descr', 'fortran_order': False and 'shape'. */
static npy_file parse_npy(const char* path, const unsigned char* file, size_t size) {
  npy_file out;
  memset(&out, 0, sizeof out);
  if (size < 10 || memcmp(file, "\x93NUMPY", 6) != 0) quire_fail("%s: not a NumPy file (no magic string)", path);
  const int major = file[6];
  size_t header, at;
  if (major == 1) {
    header = (size_t)file[8] | (size_t)file[9] << 8;
    at = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) quire_fail("%s: truncated header", path);
    header = (size_t)file[8] | (size_t)file[9] << 8 | (size_t)file[10] << 16 | (size_t)file[11] << 24;
    at = 12;
  } else {
    quire_fail("%s: NumPy format version %d is not read", path, major);
  }
  if (header > size - at) quire_fail("%s: the header runs past the end of the file", path);
  char text[4096];
  if (header >= sizeof text) quire_fail("%s: a header of %zu bytes is too long", path, header);
  memcpy(text, file + at, header);
  text[header] = 0;
  const char* d = strstr(text, "'descr':");
  if (!d || sscanf(d + 8, " '%7[^']'", out.descr) != 1) quire_fail("%s: the header has no 'descr'", path);
  const char* f = strstr(text, "'fortran_order':");
  if (!f) quire_fail("%s: the header has no 'fortran_order'", path);
  f += 16;
  while (*f == ' ') ++f;
  if (strncmp(f, "False", 5) != 0) quire_fail("%s: Fortran order is not read; write the array in C order", path);
  const char* s = strstr(text, "'shape':");
  if (!s) quire_fail("%s: the header has no 'shape'", path);
  s = strchr(s, '(');
  if (!s) quire_fail("%s: the shape is not a tuple", path);
  ++s;
  for (;;) {
    while (*s == ' ' || *s == ',') ++s;
    if (*s == ')') break;
    char* end;
    const long long v = strtoll(s, &end, 10);
    if (end == s || v < 0) quire_fail("%s: the shape is malformed", path);
    if (out.rank == 16) quire_fail("%s: more than 16 axes", path);
    out.shape[out.rank++] = v;
    s = end;
    if (*s == 'L') ++s;
  }
  out.data = file + at + header;
  out.bytes = size - at - header;
  return out;
}

static size_t descr_bytes(const char* path, const char* descr) {
  if (!strcmp(descr, "<f8") || !strcmp(descr, "<i8")) return 8;
  if (!strcmp(descr, "<f4") || !strcmp(descr, "<i4") || !strcmp(descr, "<u4")) return 4;
  if (!strcmp(descr, "|b1")) return 1;
  quire_fail("%s: elements of type '%s' are not read (<f8, <f4, <i8, <i4, |b1, <u4 are)", path, descr);
  return 0;
}

static double file_element(const char* descr, const unsigned char* at) {
  if (!strcmp(descr, "<f8")) {
    double v;
    memcpy(&v, at, 8);
    return v;
  }
  if (!strcmp(descr, "<f4")) {
    float v;
    memcpy(&v, at, 4);
    return v;
  }
  if (!strcmp(descr, "<i8")) {
    int64_t v;
    memcpy(&v, at, 8);
    return (double)v;
  }
  if (!strcmp(descr, "<i4")) {
    int32_t v;
    memcpy(&v, at, 4);
    return v;
  }
  if (!strcmp(descr, "<u4")) {
    uint32_t v;
    memcpy(&v, at, 4);
    return v;
  }
  return *at ? 1.0 : 0.0;
}

static void check_shape(const char* path, const npy_file* f, const int64_t* shape, int rank) {
  int same = f->rank == rank;
  for (int d = 0; same && d < rank; ++d) same = f->shape[d] == shape[d];
  if (same) return;
  char want[256] = "(", got[256] = "(";
  for (int d = 0; d < rank; ++d)
    snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)shape[d]);
  for (int d = 0; d < f->rank; ++d)
    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)f->shape[d]);
  quire_fail("%s: shape %s), the program was exported for %s)", path, got, want);
}

void* quire_read_npy(const char* path, int storage, const int64_t* shape, int rank, quire_rounding round) {
  size_t size;
  unsigned char* file = read_whole(path, &size);
  const npy_file f = parse_npy(path, file, size);
  check_shape(path, &f, shape, rank);
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  const size_t each = descr_bytes(path, f.descr);
  if (f.bytes != (size_t)n * each)
    quire_fail("%s: %zu bytes of data, where %lld elements of '%s' take %zu", path, f.bytes, (long long)n, f.descr,
               (size_t)n * each);
  const int integer_file = f.descr[1] == 'i' || f.descr[1] == 'b' || f.descr[1] == 'u';
  if (storage == QUIRE_INT && !integer_file) quire_fail("%s: holds '%s' numbers where integers are read", path, f.descr);
  /* An input is the caller's, outside the arena: freed with free(). */
  void* out = calloc((size_t)(n > 0 ? n : 1), element_bytes(storage));
  if (!out) quire_fail("out of memory reading %s", path);
  for (int64_t i = 0; i < n; ++i) {
    const unsigned char* at = f.data + (size_t)i * each;
    if (storage == QUIRE_INT && !strcmp(f.descr, "<i8")) {
      memcpy((int64_t*)out + i, at, 8);
      continue;
    }
    const double x = file_element(f.descr, at);
    store(out, storage, i, round ? round(x) : x);
  }
  free(file);
  return out;
}

quire_key quire_read_key(const char* path) {
  const int64_t shape[1] = {2};
  int64_t* words = quire_read_npy(path, QUIRE_INT, shape, 1, NULL);
  quire_key k;
  k.k0 = (uint32_t)words[0];
  k.k1 = (uint32_t)words[1];
  free(words);
  return k;
}

double quire_read_scalar(const char* path) {
  double* v = quire_read_npy(path, QUIRE_DOUBLE, NULL, 0, NULL);
  const double h = v[0];
  free(v);
  return h;
}

/* Written as NumPy's own writer pads it: the header to a multiple of 64 bytes. */
static void write_npy_raw(const char* path, const char* descr, const void* data, size_t bytes, const int64_t* shape,
                          int rank) {
  char dict[512];
  int at = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int d = 0; d < rank; ++d) at += snprintf(dict + at, sizeof dict - (size_t)at, "%lld, ", (long long)shape[d]);
  if (rank > 0) at -= rank == 1 ? 1 : 2; /* (n,) for one axis, (a, b) for more */
  at += snprintf(dict + at, sizeof dict - (size_t)at, "), }");
  const size_t unpadded = 10 + (size_t)at + 1;
  const size_t header = (size_t)at + 1 + (64 - unpadded % 64) % 64;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.part", path);
  FILE* f = fopen(tmp, "wb");
  if (!f) quire_fail("%s: cannot write (%s)", path, strerror(errno));
  unsigned char lead[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(header & 0xff),
                            (unsigned char)(header >> 8)};
  fwrite(lead, 1, 10, f);
  fwrite(dict, 1, (size_t)at, f);
  for (size_t i = (size_t)at; i + 1 < header; ++i) fputc(' ', f);
  fputc('\n', f);
  fwrite(data, 1, bytes, f);
  if (fclose(f) != 0) quire_fail("%s: cannot write", path);
  if (rename(tmp, path) != 0) quire_fail("%s: cannot rename into place (%s)", path, strerror(errno));
}

void quire_write_npy(const char* path, const void* data, int storage, const int64_t* shape, int rank) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  const char* descr = storage == QUIRE_FLOAT ? "<f4" : storage == QUIRE_INT ? "<i8" : "<f8";
  write_npy_raw(path, descr, data, (size_t)n * element_bytes(storage), shape, rank);
}

void quire_write_key(const char* path, quire_key k) {
  const int64_t words[2] = {k.k0, k.k1};
  const int64_t shape[1] = {2};
  write_npy_raw(path, "<i8", words, sizeof words, shape, 1);
}

void quire_write_scalar(const char* path, double h) { write_npy_raw(path, "<f8", &h, sizeof h, NULL, 0); }
