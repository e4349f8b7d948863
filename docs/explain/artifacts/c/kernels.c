/* kernels.c: the kernels of the host program, as the native backend emits them. */
#include "quire_prelude.h"

/* ---- kernel k0: pow ---- */

/*
kernel pow (%0 : f64[4, 4]) -> %1 : f16[4, 4] {
  for i0 in 0..4 independent {
    for i1 in 0..4 independent {
      s0 = f16(f32((%0[4*i0 + i1] * %0[4*i0 + i1])))
      %1[4*i0 + i1] = s0
    }
  }
}
*/
void quire_k0(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  const double* const b0 = (const double*)inputs[0];
  float* const b1 = (float*)output;
  (void)b0;
  float s0 = 0.0;
  for (int64_t i0 = lo; i0 < hi; ++i0) {
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      const double t0 = b0[4 * i0 + i1];
      const double t1 = quire_mul(t0, t0);
      const float t2 = (float)t1;
      const float t3 = quire_round_f16_of_f32f(t2);
      s0 = (float)t3;
      b1[4 * i0 + i1] = (float)s0;
    }
  }
}

/* ---- kernel k1: mean ---- */

/*
kernel mean (%0 : f16[4, 4]) -> %1 : f32[4] {
  for i0 in 0..4 independent {
    s1 = 0
    for i1 in 0..4 {
      s1 = f32((s1 + %0[4*i0 + i1]))
    }
    s0 = f32((s1 / 4))
    %1[i0] = s0
  }
}
*/
void quire_k1(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  const float* const b0 = (const float*)inputs[0];
  float* const b1 = (float*)output;
  (void)b0;
  float s0 = 0.0;
  float s1 = 0.0;
  for (int64_t i0 = lo; i0 < hi; ++i0) {
    s1 = (float)0x0p+0;
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      const float t0 = b0[4 * i0 + i1];
      const float t1 = s1 + t0;
      s1 = (float)t1;
    }
    const float t2 = s1 / (float)0x1p+2;
    s0 = (float)t2;
    b1[i0] = (float)s0;
  }
}

/* ---- kernel k2: add+sqrt ---- */

/*
kernel add+sqrt (%0 : f32[4], %1 : f64[]) -> %2 : f32[4] {
  for i0 in 0..4 independent {
    s0 = f32((%0[i0] + %1[0]))
    s1 = f32(sqrt(s0))
    %2[i0] = s1
  }
}
*/
void quire_k2(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  const float* const b0 = (const float*)inputs[0];
  const double* const b1 = (const double*)inputs[1];
  float* const b2 = (float*)output;
  (void)b0;
  (void)b1;
  float s0 = 0.0;
  float s1 = 0.0;
  for (int64_t i0 = lo; i0 < hi; ++i0) {
    const float t0 = b0[i0];
    const double t1 = b1[0];
    const double t2 = quire_add(t0, t1);
    const float t3 = (float)t2;
    s0 = (float)t3;
    const float t4 = sqrtf(s0);
    s1 = (float)t4;
    b2[i0] = (float)s1;
  }
}

/* ---- kernel k3: div+mul ---- */

/*
kernel div+mul (%0 : f64[4, 4], %1 : f32[4], %2 : bf16[4]) -> %3 : f16[4, 4] {
  for i0 in 0..4 independent {
    for i1 in 0..4 independent {
      s0 = f16(f32((%0[4*i0 + i1] / %1[i0])))
      s1 = f16(f32((s0 * %2[i1])))
      %3[4*i0 + i1] = s1
    }
  }
}
*/
void quire_k3(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  const double* const b0 = (const double*)inputs[0];
  const float* const b1 = (const float*)inputs[1];
  const float* const b2 = (const float*)inputs[2];
  float* const b3 = (float*)output;
  (void)b0;
  (void)b1;
  (void)b2;
  float s0 = 0.0;
  float s1 = 0.0;
  for (int64_t i0 = lo; i0 < hi; ++i0) {
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      const double t0 = b0[4 * i0 + i1];
      const float t1 = b1[i0];
      const double t2 = quire_div(t0, t1);
      const float t3 = (float)t2;
      const float t4 = quire_round_f16_of_f32f(t3);
      s0 = (float)t4;
      const float t5 = b2[i1];
      const float t6 = s0 * t5;
      const float t7 = quire_round_f16_of_f32f(t6);
      s1 = (float)t7;
      b3[4 * i0 + i1] = (float)s1;
    }
  }
}

/* ---- kernel k4: gelu ---- */

/*
kernel gelu (%0 : f16[4, 4]) -> %1 : f16[4, 4] {
  for i0 in 0..4 independent {
    for i1 in 0..4 independent {
      s0 = f16(f32(gelu(%0[4*i0 + i1])))
      %1[4*i0 + i1] = s0
    }
  }
}
*/
void quire_k4(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  const float* const b0 = (const float*)inputs[0];
  float* const b1 = (float*)output;
  (void)b0;
  float s0 = 0.0;
  for (int64_t i0 = lo; i0 < hi; ++i0) {
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      const float t0 = b0[4 * i0 + i1];
      const double t1 = quire_gelu(t0);
      const float t2 = (float)t1;
      const float t3 = quire_round_f16_of_f32f(t2);
      s0 = (float)t3;
      b1[4 * i0 + i1] = (float)s0;
    }
  }
}

/* ---- kernel k5: dot+add ---- */

/*
kernel dot+add (%0 : f16[4, 4], %1 : f32[4, 4], %2 : bf16[4], %3 : f32[4, 4]) -> %4 : f32[4, 4] {
  %3 = packed product 4 × 4 × 4: acc = fmaf(A[i, p], B[p, j], acc), p increasing; A = %0 (rows 4, cols 1), B = %1 (rows 4, cols 1)
  for i0 in 0..4 independent {
    for i1 in 0..4 independent {
      s1 = %3[4*i0 + i1]
      s0 = f32(s1)
      s2 = f32((s0 + %2[i1]))
      %4[4*i0 + i1] = s2
    }
  }
}
*/
void quire_k5(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  const float* const b0 = (const float*)inputs[0];
  const float* const b1 = (const float*)inputs[1];
  const float* const b2 = (const float*)inputs[2];
  const float* const b3 = (const float*)inputs[3];
  float* const b4 = (float*)output;
  (void)b0;
  (void)b1;
  (void)b2;
  (void)b3;
  float s0 = 0.0;
  float s1 = 0.0;
  float s2 = 0.0;
  for (int64_t i0 = lo; i0 < hi; ++i0) {
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      const float t0 = b3[4 * i0 + i1];
      s1 = (float)t0;
      const float t1 = (float)s1;
      s0 = (float)t1;
      const float t2 = b2[i1];
      const float t3 = s0 + t2;
      s2 = (float)t3;
      b4[4 * i0 + i1] = (float)s2;
    }
  }
}

/* ---- kernel k6: add ---- */

/*
kernel add (%0 : f64[4, 4], %1 : f32[4, 4]) -> %2 : f32[4, 4] {
  for i0 in 0..4 independent {
    for i1 in 0..4 independent {
      s0 = f32((%0[4*i0 + i1] + %1[4*i0 + i1]))
      %2[4*i0 + i1] = s0
    }
  }
}
*/
void quire_k6(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  const double* const b0 = (const double*)inputs[0];
  const float* const b1 = (const float*)inputs[1];
  float* const b2 = (float*)output;
  (void)b0;
  (void)b1;
  float s0 = 0.0;
  for (int64_t i0 = lo; i0 < hi; ++i0) {
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      const double t0 = b0[4 * i0 + i1];
      const float t1 = b1[4 * i0 + i1];
      const double t2 = quire_add(t0, t1);
      const float t3 = (float)t2;
      s0 = (float)t3;
      b2[4 * i0 + i1] = (float)s0;
    }
  }
}

/* ---- kernel k7: pow ---- */

/*
kernel pow (%0 : f32[4, 4]) -> %1 : f16[4, 4] {
  for i0 in 0..4 independent {
    for i1 in 0..4 independent {
      s0 = f16(f32((%0[4*i0 + i1] * %0[4*i0 + i1])))
      %1[4*i0 + i1] = s0
    }
  }
}
*/
void quire_k7(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  const float* const b0 = (const float*)inputs[0];
  float* const b1 = (float*)output;
  (void)b0;
  float s0 = 0.0;
  for (int64_t i0 = lo; i0 < hi; ++i0) {
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      const float t0 = b0[4 * i0 + i1];
      const float t1 = t0 * t0;
      const float t2 = quire_round_f16_of_f32f(t1);
      s0 = (float)t2;
      b1[4 * i0 + i1] = (float)s0;
    }
  }
}

/* ---- kernel k8: div+mul ---- */

/*
kernel div+mul (%0 : f32[4, 4], %1 : f32[4], %2 : bf16[4]) -> %3 : f16[4, 4] {
  for i0 in 0..4 independent {
    for i1 in 0..4 independent {
      s0 = f16(f32((%0[4*i0 + i1] / %1[i0])))
      s1 = f16(f32((s0 * %2[i1])))
      %3[4*i0 + i1] = s1
    }
  }
}
*/
void quire_k8(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  const float* const b0 = (const float*)inputs[0];
  const float* const b1 = (const float*)inputs[1];
  const float* const b2 = (const float*)inputs[2];
  float* const b3 = (float*)output;
  (void)b0;
  (void)b1;
  (void)b2;
  float s0 = 0.0;
  float s1 = 0.0;
  for (int64_t i0 = lo; i0 < hi; ++i0) {
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      const float t0 = b0[4 * i0 + i1];
      const float t1 = b1[i0];
      const float t2 = t0 / t1;
      const float t3 = quire_round_f16_of_f32f(t2);
      s0 = (float)t3;
      const float t4 = b2[i1];
      const float t5 = s0 * t4;
      const float t6 = quire_round_f16_of_f32f(t5);
      s1 = (float)t6;
      b3[4 * i0 + i1] = (float)s1;
    }
  }
}

/* ---- kernel k9: add ---- */

/*
kernel add (%0 : f32[4, 4], %1 : f32[4, 4]) -> %2 : f32[4, 4] {
  for i0 in 0..4 independent {
    for i1 in 0..4 independent {
      s0 = f32((%0[4*i0 + i1] + %1[4*i0 + i1]))
      %2[4*i0 + i1] = s0
    }
  }
}
*/
void quire_k9(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  const float* const b0 = (const float*)inputs[0];
  const float* const b1 = (const float*)inputs[1];
  float* const b2 = (float*)output;
  (void)b0;
  (void)b1;
  float s0 = 0.0;
  for (int64_t i0 = lo; i0 < hi; ++i0) {
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      const float t0 = b0[4 * i0 + i1];
      const float t1 = b1[4 * i0 + i1];
      const float t2 = t0 + t1;
      s0 = (float)t2;
      b2[4 * i0 + i1] = (float)s0;
    }
  }
}

/* ---- kernel k10: dot+add ---- */

/*
kernel dot+add (%0 : f32[4, 4], %1 : f32[4, 4], %2 : bf16[4], %3 : f32[4, 4]) -> %4 : f32[4, 4] {
  %3 = packed product 4 × 4 × 4: acc = fmaf(A[i, p], B[p, j], acc), p increasing; A = %0 (rows 4, cols 1), B = %1 (rows 4, cols 1)
  for i0 in 0..4 independent {
    for i1 in 0..4 independent {
      s1 = %3[4*i0 + i1]
      s0 = f32(s1)
      s2 = f32((s0 + %2[i1]))
      %4[4*i0 + i1] = s2
    }
  }
}
*/
void quire_k10(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  const float* const b0 = (const float*)inputs[0];
  const float* const b1 = (const float*)inputs[1];
  const float* const b2 = (const float*)inputs[2];
  const float* const b3 = (const float*)inputs[3];
  float* const b4 = (float*)output;
  (void)b0;
  (void)b1;
  (void)b2;
  (void)b3;
  float s0 = 0.0;
  float s1 = 0.0;
  float s2 = 0.0;
  for (int64_t i0 = lo; i0 < hi; ++i0) {
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      const float t0 = b3[4 * i0 + i1];
      s1 = (float)t0;
      const float t1 = (float)s1;
      s0 = (float)t1;
      const float t2 = b2[i1];
      const float t3 = s0 + t2;
      s2 = (float)t3;
      b4[4 * i0 + i1] = (float)s2;
    }
  }
}

/* ---- kernel k11: sub+pow ---- */

/*
kernel sub+pow (%0 : f32[4, 4], %1 : f64[4, 4]) -> %2 : f32[4, 4] {
  for i0 in 0..4 independent {
    for i1 in 0..4 independent {
      s0 = f32((%0[4*i0 + i1] - %1[4*i0 + i1]))
      s1 = f32((s0 * s0))
      %2[4*i0 + i1] = s1
    }
  }
}
*/
void quire_k11(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  const float* const b0 = (const float*)inputs[0];
  const double* const b1 = (const double*)inputs[1];
  float* const b2 = (float*)output;
  (void)b0;
  (void)b1;
  float s0 = 0.0;
  float s1 = 0.0;
  for (int64_t i0 = lo; i0 < hi; ++i0) {
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      const float t0 = b0[4 * i0 + i1];
      const double t1 = b1[4 * i0 + i1];
      const double t2 = quire_sub(t0, t1);
      const float t3 = (float)t2;
      s0 = (float)t3;
      const float t4 = s0 * s0;
      s1 = (float)t4;
      b2[4 * i0 + i1] = (float)s1;
    }
  }
}

/* ---- kernel k12: mean ---- */

/*
kernel mean (%0 : f32[4, 4]) -> %1 : f64[] {
  s1 = 0
  for i0 in 0..4 {
    for i1 in 0..4 {
      s1 = (s1 + %0[4*i0 + i1])
    }
  }
  s0 = (s1 / 16)
  %1[0] = s0
}
*/
void quire_k12(const void* const* inputs, void* output, int64_t lo, int64_t hi) {
  (void)lo; (void)hi;
  const float* const b0 = (const float*)inputs[0];
  double* const b1 = (double*)output;
  (void)b0;
  double s0 = 0.0;
  double s1 = 0.0;
  s1 = 0x0p+0;
  for (int64_t i0 = 0; i0 < 4; ++i0) {
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      const float t0 = b0[4 * i0 + i1];
      const double t1 = quire_add(s1, t0);
      s1 = t1;
    }
  }
  const double t2 = quire_div(s1, 0x1p+4);
  s0 = t2;
  b1[0] = s0;
}
