/* quire_runtime.h: what the host program of an exported entry calls besides its
   kernels: buffers, copies, gathers, draws, the packed product's chain, and
   NumPy files. Written by `quire export --target c`; the same for every program. */
#ifndef QUIRE_RUNTIME_H
#define QUIRE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

/* A value of the language's `key` type (runtime/random.h). */
typedef struct {
  uint32_t k0, k1;
} quire_key;

/* One argument or result of a function instance: a tensor's elements, a key
   or a host scalar. */
typedef union {
  void* p;
  double h;
  quire_key k;
} quire_slot;

/* How a tensor's elements are held: f64 (and the fp8 types) as double, the
   narrow float types (f32, bf16, f16) as float, integers and booleans as
   int64_t, as the native backend holds them. */
enum { QUIRE_DOUBLE = 0, QUIRE_FLOAT = 1, QUIRE_INT = 2 };

typedef double (*quire_rounding)(double);

void quire_fail(const char* format, ...);

/* The arena: one block for every allocation of the call, allocation i of
   sizes[i] bytes at offsets[i], in the order the program makes them (the
   export planned it: README.md). Each allocation is checked against the
   schedule. Built with -DQUIRE_NO_ARENA, each allocation is a calloc of its
   own and each release a free (what AddressSanitizer can check one by one),
   still checked against the schedule. */
void quire_arena_open(int64_t bytes, const int64_t* sizes, const int64_t* offsets, int64_t count);
/* Every allocation of the schedule made: the arena is given back. */
void quire_arena_close(void);
/* The next allocation of the schedule: n elements held as `storage`, all
   zero (a kernel's output starts at zero). */
void* quire_alloc(int64_t n, int storage);
void quire_release(void* p);
/* The bytes after which a contiguous tensor's copy i begins (a fold's slice). */
void* quire_offset(void* p, int storage, int64_t elements);

/* dst[dst_at + Σ i_d·dst_strides[d]] = round(src[src_at + Σ i_d·src_strides[d]])
   for every index of the box `extents` (rank ≤ 8); `round` may be NULL. */
void quire_copy_box(void* dst, int dst_storage, int64_t dst_at, const int64_t* dst_strides, const void* src,
                    int src_storage, int64_t src_at, const int64_t* src_strides, const int64_t* extents, int rank,
                    quire_rounding round);
/* dst[i] = round(src[i]) for n elements, between any two storages. */
void quire_convert(void* dst, int dst_storage, const void* src, int src_storage, int64_t n, quire_rounding round);
/* A gradient tree's leaf, part by part (the reference's params): the first
   part copied, each later one added to the sum, in f64. */
void quire_accumulate(double* sum, const void* part, int storage, int64_t n, int first);

/* runtime::gather, pick, one_hot and iota: out = table[p, ids[i], q] and so on,
   an id outside its axis a failure naming it. */
void quire_gather(void* out, const void* table, int storage, int64_t outer, int64_t size, int64_t inner,
                  const int64_t* ids, int64_t n);
void quire_pick(void* out, const void* x, int storage, int64_t outer, int64_t size, int64_t inner,
                const int64_t* ids);
void quire_one_hot(double* out, const int64_t* ids, int64_t n, int64_t classes);
void quire_iota(int64_t* out, int64_t n);
/* runtime::gather_adjoint and pick_adjoint into zeros: ct's elements added
   (rounded by `acc` when given) or placed where the gather or pick read them. */
void quire_gather_adjoint(double* sums, const void* ct, int ct_storage, int64_t outer, int64_t size, int64_t inner,
                          const int64_t* ids, int64_t n, quire_rounding acc);
void quire_pick_adjoint(double* out, const void* ct, int ct_storage, int64_t outer, int64_t size, int64_t inner,
                        const int64_t* ids);

/* The linear recurrence (runtime/scan_order.h's order): each element of h is
   x's plus, for m in order, a's term times the state one step back (the
   adjoint's: a step on, through a transposed), every step rounded by `acc`
   (NULL: f64, unrounded); the first step is x. The batch is walked row-major
   over `batch` (rank ≤ 8) with x's and a's strides. */
void quire_scan(double* h, const void* a, int a_storage, const void* x, int x_storage, const int64_t* batch,
                const int64_t* batch_x, const int64_t* batch_a, int batch_rank, int64_t steps, int64_t states,
                int64_t ts, int64_t ns, int64_t ats, int64_t ans, int64_t am, int adjoint, quire_rounding acc);
/* The cotangent of a scan's a, of a's `shape` (rank ≤ 9): +0.0 at t = 0,
   else λ[t, n]·h[t − 1, m] (the adjoint's λ[t − 1, m]·h[t, n]) in f64, each
   element's batch offset in λ and h from `to_x`. */
void quire_scan_grad_a(double* out, const void* l, int l_storage, const void* h, int h_storage, const int64_t* shape,
                       int rank, const int64_t* to_x, int t_axis, int n_axis, int m_axis, int64_t ts, int64_t ns,
                       int adjoint);

/* Integer element-wise steps and reductions (runtime/elementwise.cpp's and
   reduce.cpp's integer paths): exact, so any order gives the same integers;
   an overflow of int64, or of i32 where `i32` is set, is a failure. Operand
   k is read at Σ index_d·strides_k[d] over the result's extents (rank ≤ 8). */
enum {
  QUIRE_INT_ADD, QUIRE_INT_SUB, QUIRE_INT_MUL, QUIRE_INT_MIN, QUIRE_INT_MAX, QUIRE_INT_LT, QUIRE_INT_LE,
  QUIRE_INT_GT, QUIRE_INT_GE, QUIRE_INT_EQ, QUIRE_INT_NE, QUIRE_INT_NEG, QUIRE_INT_ABS, QUIRE_INT_NOT,
  QUIRE_INT_RELU, QUIRE_INT_WHERE, QUIRE_INT_SUM, QUIRE_INT_REDUCE_MAX, QUIRE_INT_REDUCE_MIN
};
void quire_int_elementwise(int op, int64_t* out, const int64_t* extents, int rank, int i32, const int64_t* a,
                           const int64_t* a_strides, const int64_t* b, const int64_t* b_strides, const int64_t* c,
                           const int64_t* c_strides);
/* out[kept index] = op over the reduced box of x. */
void quire_int_reduce(int op, int64_t* out, const int64_t* x, const int64_t* kept, const int64_t* kept_strides,
                      int kept_rank, const int64_t* reduced, const int64_t* reduced_strides, int reduced_rank,
                      int i32);

/* runtime/random.h's formulas, word for word. */
quire_key quire_split_key(quire_key k, int second);
quire_key quire_copy_key(quire_key k, int64_t copy);
void quire_draw_uniform(double* out, int64_t n, quire_key k, double low, double high);
void quire_draw_normal(double* out, int64_t n, quire_key k, double mean, double std);
void quire_draw_bernoulli(int64_t* out, int64_t n, quire_key k, double p);

/* The packed product of kernel::PackedProduct: for every batch and C[i, j],
   acc = +0; for p = 0 .. k-1: acc = fmaf(A[i, p], B[p, j], acc), with
   A[i, p] = round_a(a[a_at(batch) + i*a_rs + p*a_cs]) as f32, B likewise. */
void quire_packed_product(float* c, int64_t m, int64_t n, int64_t k, const void* a, int a_storage,
                          quire_rounding a_round, int64_t a_rs, int64_t a_cs, const int64_t* a_batch,
                          const void* b, int b_storage, quire_rounding b_round, int64_t b_rs, int64_t b_cs,
                          const int64_t* b_batch, const int64_t* batch, int batch_rank);

/* NumPy files: a tensor of `shape` read into `storage` (each element rounded
   by `round` when given; the file's shape must be `shape`; malloc'd, not in
   the arena), and written from
   it as <f8, <f4 or <i8 (a key: its two words). The reader accepts <f8, <f4, <i8,
   <i4, |b1 and <u4, little-endian, C order, format 1.0, 2.0 or 3.0. */
void* quire_read_npy(const char* path, int storage, const int64_t* shape, int rank, quire_rounding round);
quire_key quire_read_key(const char* path);
double quire_read_scalar(const char* path);
void quire_write_npy(const char* path, const void* data, int storage, const int64_t* shape, int rank);
void quire_write_key(const char* path, quire_key k);
void quire_write_scalar(const char* path, double h);

#endif
