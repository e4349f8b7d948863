// Questions about every element of a real storage, asked of the elements'
// bits in the view the storage has (a kernel's f32 output is not widened to
// be looked at).
#pragma once

#include <cstddef>

#include "quire/runtime/real_storage.h"

namespace quire::runtime {

/// Whether no element is ±inf or NaN.
bool all_finite(const RealStorage& x);
/// Whether no element of v[0, n) is ±inf or NaN.
bool all_finite(const float* v, size_t n);
bool all_finite(const double* v, size_t n);

/// The largest |x| of the elements: +inf where one is infinite, NaN where
/// one is a NaN, 0 for no elements. Exact: read from the bits.
double largest_magnitude(const RealStorage& x);
double largest_magnitude(const float* v, size_t n);
double largest_magnitude(const double* v, size_t n);

}  // namespace quire::runtime
