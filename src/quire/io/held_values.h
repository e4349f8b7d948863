#pragma once
// Reading a real tensor's elements for a file without widening it.

#include <cstddef>

#include "quire/runtime/real_storage.h"

namespace quire::io {

/// Calls f(x) for each element of `r`, as a double, from the view `r` holds:
/// its f32 view where it has one. Reading through the f64 accessors would
/// make an f64 view of an f32-held tensor, which then stays beside the f32
/// one as long as the tensor lives (a checkpoint of GPT-2 small's f32
/// parameters and moments would double their 1.5 GB, docs/memory.md).
template <class F>
void for_each_held_value(const runtime::RealStorage& r, F&& f) {
  if (r.holds_narrow()) {
    const float* p = r.narrow();
    for (size_t i = 0, n = r.size(); i < n; ++i) f(static_cast<double>(p[i]));
    return;
  }
  for (double v : r) f(v);
}

}  // namespace quire::io
