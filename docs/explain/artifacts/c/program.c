/* program.c: `loss` of 07_train.qr as a standalone C program, written by quire export --target c.
   One function per instance of the host program (quire dump --stage host), the root last,
   then main, which reads the inputs and writes the outputs as .npy files. */
#include <stdio.h>
#include <stdlib.h>

#include "quire_prelude.h"
#include "quire_runtime.h"

void quire_k0(const void* const* inputs, void* output, int64_t lo, int64_t hi);
void quire_k1(const void* const* inputs, void* output, int64_t lo, int64_t hi);
void quire_k2(const void* const* inputs, void* output, int64_t lo, int64_t hi);
void quire_k3(const void* const* inputs, void* output, int64_t lo, int64_t hi);
void quire_k4(const void* const* inputs, void* output, int64_t lo, int64_t hi);
void quire_k5(const void* const* inputs, void* output, int64_t lo, int64_t hi);
void quire_k6(const void* const* inputs, void* output, int64_t lo, int64_t hi);
void quire_k7(const void* const* inputs, void* output, int64_t lo, int64_t hi);
void quire_k8(const void* const* inputs, void* output, int64_t lo, int64_t hi);
void quire_k9(const void* const* inputs, void* output, int64_t lo, int64_t hi);
void quire_k10(const void* const* inputs, void* output, int64_t lo, int64_t hi);
void quire_k11(const void* const* inputs, void* output, int64_t lo, int64_t hi);
void quire_k12(const void* const* inputs, void* output, int64_t lo, int64_t hi);

/* Where a value is stored in a narrower type than it was computed in (store_at_site). */

/* The arena: the call's 31 allocations in the order it makes them, each at a fixed offset for its life
   (placed greedy by size; the most live at once is 256 bytes). */
static const int64_t quire_arena_bytes = 256;
static const int64_t quire_arena_count = 31;
static const int64_t quire_arena_sizes[] = {
  64, 16, 8, 16, 64, 64, 64, 64, 64, 64, 16, 8, 16, 64, 64, 64,
  64, 64, 64, 16, 8, 16, 64, 64, 64, 64, 64, 64, 64, 64, 8};
static const int64_t quire_arena_offsets[] = {
  0, 64, 0, 128, 0, 64, 0, 128, 0, 64, 128, 64, 192, 64, 128, 64,
  192, 64, 0, 128, 0, 192, 0, 128, 0, 192, 0, 64, 128, 0, 64};

/* RMSNorm.apply ((-, f64, -)): fused */
static void instance_3(const quire_slot* in, quire_slot* out) {
  void* v4 = quire_alloc(16, QUIRE_FLOAT);
  quire_k0((const void* const[]){in[1].p}, v4, 0, 4);
  void* v5 = quire_alloc(4, QUIRE_FLOAT);
  quire_k1((const void* const[]){v4}, v5, 0, 4);
  quire_release(v4);
  void* v6 = quire_alloc(1, QUIRE_DOUBLE);
  ((double*)v6)[0] = (double)in[2].h;
  void* v8 = quire_alloc(4, QUIRE_FLOAT);
  quire_k2((const void* const[]){v5, v6}, v8, 0, 4);
  quire_release(v5);
  quire_release(v6);
  void* v11 = quire_alloc(16, QUIRE_FLOAT);
  quire_k3((const void* const[]){in[1].p, v8, in[0].p}, v11, 0, 4);
  quire_release(v8);
  out[0].p = v11;
}

/* Linear.apply ((-, f16)): fused */
static void instance_4(const quire_slot* in, quire_slot* out) {
  void* t0 = quire_alloc(16, QUIRE_FLOAT);
  quire_packed_product(t0, 4, 4, 4, in[2].p, QUIRE_FLOAT, NULL, 4, 1, NULL, in[1].p, QUIRE_FLOAT, NULL, 4, 1, NULL, NULL, 0);
  void* v6 = quire_alloc(16, QUIRE_FLOAT);
  quire_k5((const void* const[]){in[2].p, in[1].p, in[0].p, t0}, v6, 0, 4);
  quire_release(t0);
  out[0].p = v6;
}

/* Block.apply ((-, f64)): fused */
static void instance_2(const quire_slot* in, quire_slot* out) {
  quire_slot r0[1];
  instance_3((const quire_slot[]){{.p = in[0].p}, {.p = in[3].p}, {.h = 0x1.0c6f7a0b5ed8dp-20}}, r0);
  void* r0_0 = r0[0].p;
  void* v6 = quire_alloc(16, QUIRE_FLOAT);
  quire_k4((const void* const[]){r0_0}, v6, 0, 4);
  quire_release(r0_0);
  quire_slot r1[1];
  instance_4((const quire_slot[]){{.p = in[1].p}, {.p = in[2].p}, {.p = v6}}, r1);
  void* r1_0 = r1[0].p;
  quire_release(v6);
  void* v9 = quire_alloc(16, QUIRE_FLOAT);
  quire_k6((const void* const[]){in[3].p, r1_0}, v9, 0, 4);
  quire_release(r1_0);
  out[0].p = v9;
}

/* RMSNorm.apply ((-, f32, -)): fused */
static void instance_6(const quire_slot* in, quire_slot* out) {
  void* v4 = quire_alloc(16, QUIRE_FLOAT);
  quire_k7((const void* const[]){in[1].p}, v4, 0, 4);
  void* v5 = quire_alloc(4, QUIRE_FLOAT);
  quire_k1((const void* const[]){v4}, v5, 0, 4);
  quire_release(v4);
  void* v6 = quire_alloc(1, QUIRE_DOUBLE);
  ((double*)v6)[0] = (double)in[2].h;
  void* v8 = quire_alloc(4, QUIRE_FLOAT);
  quire_k2((const void* const[]){v5, v6}, v8, 0, 4);
  quire_release(v5);
  quire_release(v6);
  void* v11 = quire_alloc(16, QUIRE_FLOAT);
  quire_k8((const void* const[]){in[1].p, v8, in[0].p}, v11, 0, 4);
  quire_release(v8);
  out[0].p = v11;
}

/* Block.apply ((-, f32)): fused */
static void instance_5(const quire_slot* in, quire_slot* out) {
  quire_slot r0[1];
  instance_6((const quire_slot[]){{.p = in[0].p}, {.p = in[3].p}, {.h = 0x1.0c6f7a0b5ed8dp-20}}, r0);
  void* r0_0 = r0[0].p;
  void* v6 = quire_alloc(16, QUIRE_FLOAT);
  quire_k4((const void* const[]){r0_0}, v6, 0, 4);
  quire_release(r0_0);
  quire_slot r1[1];
  instance_4((const quire_slot[]){{.p = in[1].p}, {.p = in[2].p}, {.p = v6}}, r1);
  void* r1_0 = r1[0].p;
  quire_release(v6);
  void* v9 = quire_alloc(16, QUIRE_FLOAT);
  quire_k9((const void* const[]){in[3].p, r1_0}, v9, 0, 4);
  quire_release(r1_0);
  out[0].p = v9;
}

/* Linear.apply ((-, f32)): fused */
static void instance_7(const quire_slot* in, quire_slot* out) {
  void* t0 = quire_alloc(16, QUIRE_FLOAT);
  quire_packed_product(t0, 4, 4, 4, in[2].p, QUIRE_FLOAT, NULL, 4, 1, NULL, in[1].p, QUIRE_FLOAT, NULL, 4, 1, NULL, NULL, 0);
  void* v6 = quire_alloc(16, QUIRE_FLOAT);
  quire_k10((const void* const[]){in[2].p, in[1].p, in[0].p, t0}, v6, 0, 4);
  quire_release(t0);
  out[0].p = v6;
}

/* Tower.apply ((-, f64)): fused */
static void instance_1(const quire_slot* in, quire_slot* out) {
  quire_slot f0[1];
  instance_2((const quire_slot[]){{.p = quire_offset(in[0].p, QUIRE_FLOAT, 0)}, {.p = quire_offset(in[1].p, QUIRE_FLOAT, 0)}, {.p = quire_offset(in[2].p, QUIRE_FLOAT, 0)}, {.p = in[5].p}}, f0);
  void* f0_0 = f0[0].p;
  quire_slot f1[1];
  instance_5((const quire_slot[]){{.p = quire_offset(in[0].p, QUIRE_FLOAT, 4)}, {.p = quire_offset(in[1].p, QUIRE_FLOAT, 4)}, {.p = quire_offset(in[2].p, QUIRE_FLOAT, 16)}, {.p = f0_0}}, f1);
  void* f1_0 = f1[0].p;
  quire_release(f0_0);
  quire_slot f2[1];
  instance_5((const quire_slot[]){{.p = quire_offset(in[0].p, QUIRE_FLOAT, 8)}, {.p = quire_offset(in[1].p, QUIRE_FLOAT, 8)}, {.p = quire_offset(in[2].p, QUIRE_FLOAT, 32)}, {.p = f1_0}}, f2);
  void* f2_0 = f2[0].p;
  quire_release(f1_0);
  quire_slot r3[1];
  instance_7((const quire_slot[]){{.p = in[3].p}, {.p = in[4].p}, {.p = f2_0}}, r3);
  void* r3_0 = r3[0].p;
  quire_release(f2_0);
  out[0].p = r3_0;
}

/* loss ((-, (f64, f64))): fused */
static void instance_0(const quire_slot* in, quire_slot* out) {
  quire_slot r0[1];
  instance_1((const quire_slot[]){{.p = in[0].p}, {.p = in[1].p}, {.p = in[2].p}, {.p = in[3].p}, {.p = in[4].p}, {.p = in[5].p}}, r0);
  void* r0_0 = r0[0].p;
  void* v7 = quire_alloc(16, QUIRE_FLOAT);
  quire_k11((const void* const[]){r0_0, in[6].p}, v7, 0, 4);
  quire_release(r0_0);
  void* v8 = quire_alloc(1, QUIRE_DOUBLE);
  quire_k12((const void* const[]){v7}, v8, 0, 0);
  quire_release(v7);
  out[0].p = v8;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s INPUTS OUTPUTS (folders: each input and output is a .npy file named as listed in README.md)\n", argv[0]);
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.npy", argv[1], "θ.blocks.norm.γ");
  void* a0 = quire_read_npy(path, QUIRE_FLOAT, (const int64_t[]){3, 4}, 2, quire_round_bf16);
  snprintf(path, sizeof path, "%s/%s.npy", argv[1], "θ.blocks.proj.b");
  void* a1 = quire_read_npy(path, QUIRE_FLOAT, (const int64_t[]){3, 4}, 2, quire_round_bf16);
  snprintf(path, sizeof path, "%s/%s.npy", argv[1], "θ.blocks.proj.w");
  void* a2 = quire_read_npy(path, QUIRE_FLOAT, (const int64_t[]){3, 4, 4}, 3, quire_round_f32);
  snprintf(path, sizeof path, "%s/%s.npy", argv[1], "θ.head.b");
  void* a3 = quire_read_npy(path, QUIRE_FLOAT, (const int64_t[]){4}, 1, quire_round_bf16);
  snprintf(path, sizeof path, "%s/%s.npy", argv[1], "θ.head.w");
  void* a4 = quire_read_npy(path, QUIRE_FLOAT, (const int64_t[]){4, 4}, 2, quire_round_f32);
  snprintf(path, sizeof path, "%s/%s.npy", argv[1], "batch.0");
  void* a5 = quire_read_npy(path, QUIRE_DOUBLE, (const int64_t[]){4, 4}, 2, NULL);
  snprintf(path, sizeof path, "%s/%s.npy", argv[1], "batch.1");
  void* a6 = quire_read_npy(path, QUIRE_DOUBLE, (const int64_t[]){4, 4}, 2, NULL);
  quire_arena_open(quire_arena_bytes, quire_arena_sizes, quire_arena_offsets, quire_arena_count);
  quire_slot result[1];
  instance_0((const quire_slot[]){{.p = a0}, {.p = a1}, {.p = a2}, {.p = a3}, {.p = a4}, {.p = a5}, {.p = a6}}, result);
  snprintf(path, sizeof path, "%s/%s.npy", argv[2], "result");
  quire_write_npy(path, result[0].p, QUIRE_DOUBLE, NULL, 0);
  quire_release(result[0].p);
  quire_arena_close();
  free(a0);
  free(a1);
  free(a2);
  free(a3);
  free(a4);
  free(a5);
  free(a6);
  return 0;
}
