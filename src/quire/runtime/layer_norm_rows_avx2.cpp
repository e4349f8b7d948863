// layer_norm_rows.inc compiled for AVX2 (a pragma, never -march):
// layer_norm_detail::paths() returns these only after checking the CPU at run
// time. The headers come before the pragma, so that no inline function they
// define is compiled for AVX2 here and merged with the other files' copies;
// what follows it has internal linkage.

#include <math.h>    // NOLINT: the .inc uses the C names, as the attention rows do
#include <stdint.h>  // NOLINT

#include "quire/runtime/layer_norm_rows.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma")
#endif

namespace quire::runtime::layer_norm_detail {
namespace {
#include "quire/runtime/layer_norm_rows.inc"
}  // namespace

Paths paths_avx2() { return these_paths(); }

}  // namespace quire::runtime::layer_norm_detail

#if defined(__clang__)
#pragma clang attribute pop
#endif
