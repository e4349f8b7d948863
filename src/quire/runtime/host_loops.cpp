#include "quire/runtime/host_loops.h"

#include <cstdint>

#include "quire/runtime/element_scan.h"
#include "quire/runtime/widest_vectors.h"

namespace quire::runtime {

namespace {

// Each loop runs whole blocks of 16 and then the rest: GCC's -O2 vectorizes
// only a loop that needs no scalar remainder, which a fixed 16 gives it.
template <typename In, typename Out, typename Op>
inline void blocks_of_16(const In* x, Out* out, size_t n, Op op) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t j = 0; j < 16; ++j) out[i + j] = op(x[i + j]);
  for (; i < n; ++i) out[i] = op(x[i]);
}

template <typename In, typename S, typename Out>
inline void scale_loop(const In* x, S s, bool divide, Out* out, size_t n) {
  if (divide)
    blocks_of_16(x, out, n, [s](In v) { return static_cast<Out>(static_cast<S>(v) / s); });
  else
    blocks_of_16(x, out, n, [s](In v) { return static_cast<Out>(static_cast<S>(v) * s); });
}

QUIRE_WIDEST_VECTORS void convert_to_f32(const double* v, float* f, size_t n) {
  blocks_of_16(v, f, n, [](double d) { return static_cast<float>(d); });
}

}  // namespace

bool round_to_f32(const double* v, float* f, size_t n) {
  convert_to_f32(v, f, n);
  return all_finite(f, n);
}

QUIRE_WIDEST_VECTORS void scale(const float* x, float s, bool divide, float* out, size_t n) {
  scale_loop(x, s, divide, out, n);
}
QUIRE_WIDEST_VECTORS void scale(const float* x, double s, bool divide, double* out, size_t n) {
  scale_loop(x, s, divide, out, n);
}
QUIRE_WIDEST_VECTORS void scale(const double* x, double s, bool divide, double* out, size_t n) {
  scale_loop(x, s, divide, out, n);
}

}  // namespace quire::runtime
