// Restructuring: every result element is a copy of one operand element (or,
// for one_hot and cast_kind, a value fixed by one operand element); no
// arithmetic on reals. Requires well-formed operands and in-range axes
// (KernelMisuse); data-dependent failures (ids, sizes, unrepresentable values)
// are RuntimeErrors.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "quire/runtime/kernels.h"

namespace quire::runtime {

namespace {

using detail::misuse;
using detail::StridedWalk;

// Every caller sets every element, so a real result is not zero-filled first.
Tensor like(ElemKind kind, Shape shape) {
  return kind == ElemKind::Real ? Tensor::real_for_overwrite(std::move(shape))
                                : Tensor::integer(kind, std::move(shape));
}

// Copies the view row by row: the walk steps over every axis but the last,
// and each row is one loop, a memcpy where its elements are adjacent (the
// slices of stacked parameters a fold reads are whole rows).
template <typename T>
void copy_rows(const T* from, T* to, const Shape& shape, const std::vector<int64_t>& strides, int64_t start) {
  if (shape.empty()) {
    to[0] = from[start];
    return;
  }
  const int64_t n = shape.back(), step = strides.back();
  const Shape outer(shape.begin(), shape.end() - 1);
  const int64_t rows = element_count(outer);
  if (n == 0 || rows == 0) return;
  StridedWalk<1> walk(outer, {std::vector<int64_t>(strides.begin(), strides.end() - 1)}, {start});
  for (int64_t r = 0; r < rows; ++r, walk.next(), to += n) {
    const T* row = from + walk.offset(0);
    if (step == 1)
      std::memcpy(to, row, static_cast<size_t>(n) * sizeof(T));
    else if (step == 0)
      std::fill_n(to, n, row[0]);  // a broadcast along the last axis: one vectorized fill
    else
      for (int64_t j = 0; j < n; ++j) to[j] = row[j * step];
  }
}

// Whether the view's elements lie one after another in x's order: every
// axis longer than 1 steps by the count of elements within it.
bool is_contiguous(const Shape& shape, const std::vector<int64_t>& strides) {
  int64_t within = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != within) return false;
    within *= shape[d];
  }
  return true;
}

// The view of x with the given shape, element strides and starting offset,
// copied out densely: transpose, slice and broadcast_to are all such views.
// A real view whose elements are already dense (a slice of leading axes,
// such as one copy of a stacked parameter) shares x's elements instead
// (RealStorage::window): nothing to copy until one of them is written.
Tensor copy_view(const Tensor& x, Shape shape, std::vector<int64_t> strides, int64_t start) {
  if (x.is_real() && is_contiguous(shape, strides)) {
    Tensor out;
    out.shape = std::move(shape);
    out.reals = RealStorage::window(x.reals, static_cast<size_t>(start), static_cast<size_t>(element_count(out.shape)));
    return out;
  }
  if (x.is_real() && x.reals.holds_narrow()) {
    // A copy moves numbers, so f32 numbers stay in their f32 view: half the
    // bytes, and no conversion for the compiled kernel that reads the copy.
    Tensor out;
    out.shape = std::move(shape);
    out.reals = RealStorage::narrow_for_overwrite(static_cast<size_t>(element_count(out.shape)));
    copy_rows(x.reals.narrow(), out.reals.narrow_for_writing(), out.shape, strides, start);
    return out;
  }
  Tensor out = like(x.kind, std::move(shape));
  if (x.is_real())
    copy_rows(x.reals.data(), out.reals.data(), out.shape, strides, start);
  else
    copy_rows(x.ints.data(), out.ints.data(), out.shape, strides, start);
  return out;
}

void require_ids(const Tensor& ids, const char* op) {
  detail::require_well_formed(ids, op);
  if (ids.kind != ElemKind::I32 && ids.kind != ElemKind::I64)
    misuse(op, fmt::format("ids are {}, not i32 or i64", elem_kind_name(ids.kind)));
}

int64_t product(const Shape& shape, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t d = from; d < to; ++d) n *= shape[d];
  return n;
}

// Python's clipping of one slice bound (step > 0): negative counts from the end, then into [0, size].
int64_t clip_bound(int64_t bound, int64_t size) {
  if (bound < 0) bound += size;
  if (bound < 0) return 0;
  return bound > size ? size : bound;
}

}  // namespace

Tensor transpose(const Tensor& x, const std::vector<int>& perm) {
  const char* op = "transpose";
  detail::require_well_formed(x, op);
  if (perm.size() != x.shape.size())
    misuse(op, fmt::format("permutation of {} axes for a rank-{} operand", perm.size(), x.rank()));
  std::vector<bool> seen(perm.size(), false);
  const std::vector<int64_t> own = contiguous_strides(x.shape);
  Shape shape(perm.size());
  std::vector<int64_t> strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    detail::require_axis(perm[i], x.rank(), op);
    if (seen[perm[i]]) misuse(op, fmt::format("permutation names axis {} twice", perm[i]));
    seen[perm[i]] = true;
    shape[i] = x.shape[perm[i]];
    strides[i] = own[perm[i]];
  }
  return copy_view(x, std::move(shape), std::move(strides), 0);
}

Tensor reshape(const Tensor& x, Shape shape) {
  const char* op = "reshape";
  detail::require_well_formed(x, op);
  for (int64_t d : shape)
    if (d < 0) misuse(op, fmt::format("target shape {} has a negative size", shape_string(shape)));
  if (element_count(shape) != x.size())
    throw RuntimeError(fmt::format("reshape: {} has {} elements but {} has {}", shape_string(x.shape), x.size(),
                                   shape_string(shape), element_count(shape)));
  Tensor out = x;
  out.shape = std::move(shape);
  return out;
}

Tensor concat(const std::vector<const Tensor*>& parts, int axis) {
  const char* op = "concat";
  if (parts.empty()) misuse(op, "no parts");
  for (const Tensor* p : parts) {
    if (p == nullptr) misuse(op, "a null part");
    detail::require_well_formed(*p, op);
  }
  const Tensor& first = *parts[0];
  detail::require_axis(axis, first.rank(), op);
  Shape shape = first.shape;
  shape[axis] = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const Tensor& p = *parts[k];
    if (p.kind != first.kind || p.rank() != first.rank())
      misuse(op, fmt::format("part {} is {} of rank {}, part 0 {} of rank {}", k, elem_kind_name(p.kind), p.rank(),
                             elem_kind_name(first.kind), first.rank()));
    for (size_t d = 0; d < shape.size(); ++d)
      if (static_cast<int>(d) != axis && p.shape[d] != first.shape[d])
        throw RuntimeError(fmt::format("concat: axis {} has size {} in part 0 but {} in part {}", d, first.shape[d],
                                       p.shape[d], k));
    shape[axis] += p.shape[axis];
  }
  // Row-major: for each index before `axis`, each part contributes one
  // contiguous block of shape[axis] × (the sizes after `axis`) elements.
  const int64_t outer = product(shape, 0, static_cast<size_t>(axis));
  const int64_t inner = product(shape, static_cast<size_t>(axis) + 1, shape.size());
  Tensor out = like(first.kind, std::move(shape));
  int64_t at = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (const Tensor* p : parts) {
      const int64_t block = p->shape[axis] * inner;
      for (int64_t e = o * block; e < (o + 1) * block; ++e, ++at) {
        if (out.is_real())
          out.reals[at] = p->reals[e];
        else
          out.ints[at] = p->ints[e];
      }
    }
  }
  return out;
}

Tensor slice(const Tensor& x, int axis, int64_t start, int64_t stop, int64_t step) {
  const char* op = "slice";
  detail::require_well_formed(x, op);
  detail::require_axis(axis, x.rank(), op);
  if (step < 1) misuse(op, fmt::format("step {}; slices step forward", step));
  const int64_t size = x.shape[axis];
  const int64_t from = clip_bound(start, size), to = clip_bound(stop, size);
  // Written without `to - from + step - 1`, which overflows for a huge step.
  const int64_t length = to > from ? (to - from - 1) / step + 1 : 0;
  std::vector<int64_t> strides = contiguous_strides(x.shape);
  const int64_t first = from * strides[axis];
  // With at most one element the step is never taken; not scaling by it then
  // keeps a huge step from overflowing the stride.
  if (length > 1) strides[axis] *= step;
  Shape shape = x.shape;
  shape[axis] = length;
  return copy_view(x, std::move(shape), std::move(strides), length > 0 ? first : 0);
}

Tensor gather(const Tensor& table, int axis, const Tensor& ids) {
  const char* op = "gather";
  detail::require_well_formed(table, op);
  detail::require_axis(axis, table.rank(), op);
  require_ids(ids, op);
  const int64_t size = table.shape[axis];
  for (size_t j = 0; j < ids.ints.size(); ++j)
    if (ids.ints[j] < 0 || ids.ints[j] >= size)
      throw RuntimeError(fmt::format("gather: id {} at {} is outside the table's axis {} of size {}", ids.ints[j],
                                     detail::index_string(static_cast<int64_t>(j), ids.shape), axis, size));

  Shape shape(table.shape.begin(), table.shape.begin() + axis);
  shape.insert(shape.end(), ids.shape.begin(), ids.shape.end());
  shape.insert(shape.end(), table.shape.begin() + axis + 1, table.shape.end());
  // r[p, i, q] = table[p, ids[i], q]: each (p, i) copies one contiguous row of `inner` elements.
  const int64_t outer = product(table.shape, 0, static_cast<size_t>(axis));
  const int64_t inner = product(table.shape, static_cast<size_t>(axis) + 1, table.shape.size());
  const int64_t n = ids.size();
  Tensor out = like(table.kind, std::move(shape));
  int64_t at = 0;
  for (int64_t p = 0; p < outer; ++p) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = (p * size + ids.ints[i]) * inner;
      for (int64_t q = 0; q < inner; ++q, ++at) {
        if (out.is_real())
          out.reals[at] = table.reals[row + q];
        else
          out.ints[at] = table.ints[row + q];
      }
    }
  }
  return out;
}

Tensor pick(const Tensor& x, int axis, const Tensor& ids) {
  const char* op = "pick";
  detail::require_well_formed(x, op);
  detail::require_axis(axis, x.rank(), op);
  require_ids(ids, op);
  Shape shape = x.shape;
  shape.erase(shape.begin() + axis);
  if (ids.shape != shape)
    misuse(op, fmt::format("ids have shape {}, x without axis {} {}", shape_string(ids.shape), axis, shape_string(shape)));
  const int64_t size = x.shape[axis];
  for (size_t j = 0; j < ids.ints.size(); ++j)
    if (ids.ints[j] < 0 || ids.ints[j] >= size)
      throw RuntimeError(fmt::format("pick: id {} at {} is outside axis {} of size {}", ids.ints[j],
                                     detail::index_string(static_cast<int64_t>(j), ids.shape), axis, size));
  // r[p, q] = x[p, ids[p, q], q], with x's element at (p * size + id) * inner + q.
  const int64_t outer = product(x.shape, 0, static_cast<size_t>(axis));
  const int64_t inner = product(x.shape, static_cast<size_t>(axis) + 1, x.shape.size());
  Tensor out = like(x.kind, std::move(shape));
  int64_t at = 0;
  for (int64_t p = 0; p < outer; ++p)
    for (int64_t q = 0; q < inner; ++q, ++at) {
      const int64_t from = (p * size + ids.ints[at]) * inner + q;
      if (out.is_real())
        out.reals[at] = x.reals[from];
      else
        out.ints[at] = x.ints[from];
    }
  return out;
}

Tensor one_hot(const Tensor& ids, int64_t n) {
  const char* op = "one_hot";
  require_ids(ids, op);
  if (n < 0) misuse(op, fmt::format("{} classes", n));
  Shape shape = ids.shape;
  shape.push_back(n);
  Tensor out = Tensor::real(std::move(shape), 0.0);
  for (size_t j = 0; j < ids.ints.size(); ++j) {
    const int64_t id = ids.ints[j];
    if (id < 0 || id >= n)
      throw RuntimeError(fmt::format("one_hot: id {} at {} is outside the new axis {} of size {}", id,
                                     detail::index_string(static_cast<int64_t>(j), ids.shape), ids.rank(), n));
    out.reals[static_cast<size_t>(static_cast<int64_t>(j) * n + id)] = 1.0;
  }
  return out;
}

Tensor iota(int64_t n) {
  if (n < 0 || n > (int64_t{1} << 31))
    throw RuntimeError(fmt::format("iota: an axis of size {} does not fit i32 positions (at most 2^31)", n));
  Tensor out = Tensor::integer(ElemKind::I32, {n});
  for (int64_t i = 0; i < n; ++i) out.ints[static_cast<size_t>(i)] = i;
  return out;
}

Tensor cast_kind(const Tensor& x, ElemKind kind) {
  const char* op = "cast";
  detail::require_well_formed(x, op);
  if (x.kind == kind) return x;
  Tensor out = like(kind, x.shape);
  const size_t n = static_cast<size_t>(x.size());
  auto fail = [&](const std::string& value, size_t i) {
    throw RuntimeError(fmt::format("cast: {} at {} is outside the range of {}", value,
                                   detail::index_string(static_cast<int64_t>(i), x.shape), elem_kind_name(kind)));
  };
  if (kind == ElemKind::Bool) {
    for (size_t i = 0; i < n; ++i) out.ints[i] = (x.is_real() ? x.reals[i] != 0.0 : x.ints[i] != 0) ? 1 : 0;
  } else if (kind == ElemKind::Real) {
    out.reals = detail::to_reals(x.ints);
  } else if (x.is_real()) {
    // Bounds as f64: ±2^31 and ±2^63 are exact, and a truncated value is in
    // range exactly when it lies in [-2^k, 2^k) (2^31 - 1 for i32 is exact too).
    const double lo = kind == ElemKind::I32 ? -0x1p31 : -0x1p63;
    const double hi = kind == ElemKind::I32 ? 0x1p31 : 0x1p63;
    for (size_t i = 0; i < n; ++i) {
      const double t = std::trunc(x.reals[i]);
      if (std::isnan(t) || t < lo || t >= hi) fail(fmt::format("{}", x.reals[i]), i);
      out.ints[i] = static_cast<int64_t>(t);
    }
  } else {  // between integer kinds; only narrowing to i32 can fail, and bool is already 0/1
    for (size_t i = 0; i < n; ++i) {
      const int64_t v = x.ints[i];
      if (kind == ElemKind::I32 && (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()))
        fail(fmt::format("{}", v), i);
      out.ints[i] = v;
    }
  }
  return out;
}

Tensor broadcast_to(const Tensor& x, const AxisMap& map, const Shape& result) {
  const char* op = "broadcast_to";
  for (int64_t d : result)
    if (d < 0) misuse(op, fmt::format("result shape {} has a negative size", shape_string(result)));
  return copy_view(x, result, detail::aligned_strides(op, x, map, result), 0);
}

}  // namespace quire::runtime
