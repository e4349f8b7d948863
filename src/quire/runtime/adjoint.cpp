// The adjoints that scatter or sum: of broadcasting (sum_to), of slicing and
// of gathering. They exist for the reverse sweep (grad/vjp.cpp) and follow the
// family's rules: a stated fold order (row-major over ct), each step rounded
// to the accumulator's type, no fused multiply-add (there is no product).
#include <fmt/format.h>

#include "quire/runtime/kernels.h"

namespace quire::runtime {

namespace {

double step(FloatType acc, double v) { return acc == FloatType::F64 ? v : round_to(acc, v); }

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
  detail::require_well_formed(ct, "slice_adjoint");
  Tensor out = Tensor::real(shape);
  Tensor probe = out;  // slice's own clipping and size rules decide where ct lands
  double* positions = probe.reals.data();
  for (size_t i = 0; i < probe.reals.size(); ++i) positions[i] = static_cast<double>(i);
  Tensor where = slice(probe, axis, start, stop, step_by);
  if (where.shape != ct.shape)
    detail::misuse("slice_adjoint", fmt::format("ct has shape {}, the slice {}", shape_string(ct.shape), shape_string(where.shape)));
  double* landed = out.reals.data();
  for (size_t i = 0; i < ct.reals.size(); ++i) landed[static_cast<size_t>(where.reals[i])] = ct.reals[i];
  return out;
}

Tensor gather_adjoint(const Tensor& ct, const Shape& shape, int axis, const Tensor& ids, FloatType acc) {
  detail::require_well_formed(ct, "gather_adjoint");
  detail::require_axis(axis, static_cast<int64_t>(shape.size()), "gather_adjoint");
  Tensor out = Tensor::real(shape);
  // The table's flat offsets, gathered as gather would: position k of the
  // result reads table element index.reals[k]; the adjoint adds ct[k] there.
  Tensor index = out;
  double* offsets = index.reals.data();
  for (size_t i = 0; i < index.reals.size(); ++i) offsets[i] = static_cast<double>(i);
  Tensor where = gather(index, axis, ids);
  if (where.shape != ct.shape)
    detail::misuse("gather_adjoint", fmt::format("ct has shape {}, the gather {}", shape_string(ct.shape), shape_string(where.shape)));
  double* sums = out.reals.data();
  for (size_t k = 0; k < ct.reals.size(); ++k) {
    double& r = sums[static_cast<size_t>(where.reals[k])];
    r = step(acc, r + ct.reals[k]);
  }
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
  Tensor out = Tensor::real(shape);
  int64_t at = 0;
  for (int64_t p = 0; p < outer; ++p)
    for (int64_t q = 0; q < inner; ++q, ++at) {
      const int64_t id = ids.ints[static_cast<size_t>(at)];
      if (id < 0 || id >= size)
        throw RuntimeError(fmt::format("pick: id {} at {} is outside axis {} of size {}", id,
                                       detail::index_string(at, ids.shape), axis, size));
      out.reals[static_cast<size_t>((p * size + id) * inner + q)] = ct.reals[static_cast<size_t>(at)];
    }
  return out;
}

}  // namespace quire::runtime
