// The adjoints that scatter or sum: of broadcasting (sum_to), of slicing and
// of gathering. They exist for the reverse sweep (grad/vjp.cpp) and follow the
// family's rules: a stated fold order (row-major over ct), each step rounded
// to the accumulator's type, no fused multiply-add (there is no product).
#include <fmt/format.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "quire/runtime/kernels.h"

namespace quire::runtime {

namespace {

double step(FloatType acc, double v) { return acc == FloatType::F64 ? v : round_to(acc, v); }

/// +0.0 in `shape`, with ct's elements placed by land(from, to): a copy, in
/// the view ct has (detail::copies_narrow).
template <class Land>
Tensor placed_into_zeros(const Tensor& ct, const Shape& shape, Land&& land) {
  const size_t n = static_cast<size_t>(element_count(shape));
  Tensor out;
  out.shape = shape;
  if (detail::copies_narrow({&ct})) {
    out.reals = RealStorage::narrow_for_overwrite(n);
    float* to = out.reals.narrow_for_writing();
    std::fill_n(to, n, 0.0f);
    land(ct.reals.narrow(), to);
  } else {
    out.reals = RealStorage(n, 0.0);
    land(std::as_const(ct.reals).data(), out.reals.data());
  }
  return out;
}

}  // namespace

Tensor sum_to(const Tensor& ct, const AxisMap& map, const Shape& shape, FloatType acc) {
  detail::require_well_formed(ct, "sum_to");
  if (!ct.is_real()) detail::misuse("sum_to", "takes a real cotangent");
  if (map.size() != ct.shape.size())
    detail::misuse("sum_to", fmt::format("a map of {} entries for a cotangent of rank {}", map.size(), ct.rank()));
  Tensor out = Tensor::real(shape);
  // Where each cotangent element lands: the operand's stride per result axis, 0 where it broadcast.
  const std::vector<int64_t> strides = detail::aligned_strides("sum_to", out, map, ct.shape);
  detail::StridedWalk<1> walk(ct.shape, {strides});
  double* sums = out.reals.data();
  for (size_t i = 0; i < ct.reals.size(); ++i, walk.next()) {
    double& r = sums[walk.offset(0)];
    r = step(acc, r + ct.reals[i]);
  }
  return out;
}

Tensor slice_adjoint(const Tensor& ct, const Shape& shape, int axis, int64_t start, int64_t stop, int64_t step_by) {
  const char* op = "slice_adjoint";
  detail::require_well_formed(ct, op);
  if (!ct.is_real()) detail::misuse(op, "takes a real cotangent");
  // slice's own clipping and size rules decide where ct lands.
  const detail::View where = detail::slice_view(shape, axis, start, stop, step_by);
  if (where.shape != ct.shape)
    detail::misuse(op, fmt::format("ct has shape {}, the slice {}", shape_string(ct.shape), shape_string(where.shape)));
  auto land = [&](const auto* from, auto* to) {
    detail::StridedWalk<1> walk(ct.shape, {where.strides}, {where.start});
    for (size_t i = 0; i < ct.reals.size(); ++i, walk.next()) to[walk.offset(0)] = from[i];
  };
  return placed_into_zeros(ct, shape, land);
}

Tensor gather_adjoint(const Tensor& ct, const Shape& shape, int axis, const Tensor& ids, FloatType acc) {
  const char* op = "gather_adjoint";
  detail::require_well_formed(ct, op);
  detail::require_axis(axis, static_cast<int64_t>(shape.size()), op);
  if (!ct.is_real() || (ids.kind != ElemKind::I32 && ids.kind != ElemKind::I64))
    detail::misuse(op, "takes a real cotangent and integer ids");
  // ct[p, i, q] is added where gather read it: the table's element
  // (p * size + ids[i]) * inner + q, in ct's row-major order.
  const int64_t size = shape[axis];
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t n = ids.size();
  if (ct.size() != outer * n * inner)
    detail::misuse(op, fmt::format("ct has shape {} for ids {} into a table of shape {}", shape_string(ct.shape),
                                   shape_string(ids.shape), shape_string(shape)));
  for (int64_t i = 0; i < n; ++i)
    if (ids.ints[static_cast<size_t>(i)] < 0 || ids.ints[static_cast<size_t>(i)] >= size)
      throw RuntimeError(fmt::format("gather: id {} at {} is outside the table's axis {} of size {}",
                                     ids.ints[static_cast<size_t>(i)], detail::index_string(i, ids.shape), axis, size));
  const double* from = std::as_const(ct.reals).data();
  // Each step is step(acc, r + from[k]): the sum in f64, rounded once.
  auto scatter = [&](auto* sums) {
    using Held = std::remove_pointer_t<decltype(sums)>;
    int64_t k = 0;
    for (int64_t p = 0; p < outer; ++p)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = (p * size + ids.ints[static_cast<size_t>(i)]) * inner;
        for (int64_t q = 0; q < inner; ++q, ++k) {
          Held& r = sums[row + q];
          r = static_cast<Held>(step(acc, static_cast<double>(r) + from[k]));
        }
      }
  };
  if (acc == FloatType::F32) {
    // Every sum is rounded to f32 at every step, so an f32 view holds the
    // sums exactly: the same numbers in half the bytes, and no f64 table
    // beside the f32 one the site stores (an embedding's gradient: GPT-2
    // small's is 154 MB, not 309 MB, docs/memory.md).
    Tensor out;
    out.kind = ElemKind::Real;
    out.shape = shape;
    out.reals = RealStorage::narrow_for_overwrite(static_cast<size_t>(element_count(shape)));
    float* sums = out.reals.narrow_for_writing();
    std::fill_n(sums, out.reals.size(), 0.0f);
    scatter(sums);
    return out;
  }
  Tensor out = Tensor::real(shape);
  scatter(out.reals.data());
  return out;
}

Tensor pick_adjoint(const Tensor& ct, const Shape& shape, int axis, const Tensor& ids) {
  const char* op = "pick_adjoint";
  detail::require_well_formed(ct, op);
  if (!ct.is_real()) detail::misuse(op, "takes a real cotangent");
  detail::require_axis(axis, static_cast<int64_t>(shape.size()), op);
  Shape picked = shape;
  picked.erase(picked.begin() + axis);
  if (ct.shape != picked || ids.shape != picked || (ids.kind != ElemKind::I32 && ids.kind != ElemKind::I64))
    detail::misuse(op, fmt::format("ct {} and ids {} for an x of shape {} along axis {}", shape_string(ct.shape),
                                   shape_string(ids.shape), shape_string(shape), axis));
  // ct[p, q] lands at x's (p * size + ids[p, q]) * inner + q, as pick reads it.
  const int64_t size = shape[axis];
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  for (int64_t at = 0; at < ids.size(); ++at) {
    const int64_t id = ids.ints[static_cast<size_t>(at)];
    if (id < 0 || id >= size)
      throw RuntimeError(fmt::format("pick: id {} at {} is outside axis {} of size {}", id,
                                     detail::index_string(at, ids.shape), axis, size));
  }
  auto land = [&](const auto* from, auto* to) {
    int64_t at = 0;
    for (int64_t p = 0; p < outer; ++p)
      for (int64_t q = 0; q < inner; ++q, ++at)
        to[(p * size + ids.ints[static_cast<size_t>(at)]) * inner + q] = from[at];
  };
  return placed_into_zeros(ct, shape, land);
}

}  // namespace quire::runtime
