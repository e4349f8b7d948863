// Loops of the host's own arithmetic over whole arrays: rounding an f64
// array to f32, and scaling an array by a constant. They run on the host's
// one thread while the kernels' workers wait (a mean's gradient and its
// rounding were 4 % of a training step at D = 256 as plain loops, which
// GCC's -O2 left scalar), so they are compiled for the widest vectors the
// processor has, as element_scan.cpp's scans are.
#pragma once

#include <cstddef>

#include "quire/runtime/float_types.h"

namespace quire::runtime {

/// f[i] = (float)v[i], rounding to nearest even; returns whether every
/// result is finite (a NaN's payload is the conversion's: a caller that
/// promises round_to's NaN redoes those elements).
bool round_to_f32(const double* v, float* f, size_t n);

/// out[i] = round_to(half, x[i]) for f32 values x, as floats:
/// round_bf16_of_f32 or round_f16_of_f32 (`half` BF16 or F16, else a
/// std::logic_error); `out` does not overlap `x`. A half operand read from
/// f32 values (the masters of a half policy) is rounded so before each
/// packed product.
void round_half_of_f32(FloatType half, const float* x, float* out, size_t n);

/// out[i] = x[i] · s, or x[i] / s when `divide`: in f32 (each result
/// rounded once) or from f32 values into f64.
void scale(const float* x, float s, bool divide, float* out, size_t n);
void scale(const float* x, double s, bool divide, double* out, size_t n);
void scale(const double* x, double s, bool divide, double* out, size_t n);

}  // namespace quire::runtime
