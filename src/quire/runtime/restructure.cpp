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

namespace {

using detail::View;

View transpose_view(const Shape& x, const std::vector<int>& perm) {
  const char* op = "transpose";
  const int rank = static_cast<int>(x.size());
  if (perm.size() != x.size())
    misuse(op, fmt::format("permutation of {} axes for a rank-{} operand", perm.size(), rank));
  std::vector<bool> seen(perm.size(), false);
  const std::vector<int64_t> own = contiguous_strides(x);
  View v{Shape(perm.size()), std::vector<int64_t>(perm.size()), 0};
  for (size_t i = 0; i < perm.size(); ++i) {
    detail::require_axis(perm[i], rank, op);
    if (seen[perm[i]]) misuse(op, fmt::format("permutation names axis {} twice", perm[i]));
    seen[perm[i]] = true;
    v.shape[i] = x[perm[i]];
    v.strides[i] = own[perm[i]];
  }
  return v;
}

}  // namespace

View detail::slice_view(const Shape& x, int axis, int64_t start, int64_t stop, int64_t step) {
  const char* op = "slice";
  detail::require_axis(axis, static_cast<int>(x.size()), op);
  if (step < 1) misuse(op, fmt::format("step {}; slices step forward", step));
  const int64_t size = x[axis];
  const int64_t from = clip_bound(start, size), to = clip_bound(stop, size);
  // Written without `to - from + step - 1`, which overflows for a huge step.
  const int64_t length = to > from ? (to - from - 1) / step + 1 : 0;
  View v{x, contiguous_strides(x), 0};
  const int64_t first = from * v.strides[axis];
  // With at most one element the step is never taken; not scaling by it then
  // keeps a huge step from overflowing the stride.
  if (length > 1) v.strides[axis] *= step;
  v.shape[axis] = length;
  v.start = length > 0 ? first : 0;
  return v;
}

bool detail::copies_narrow(std::initializer_list<const Tensor*> sources) {
  for (const Tensor* t : sources)
    if (!t->is_real() || !t->reals.holds_narrow()) return false;
  return sources.size() > 0;
}

Tensor transpose(const Tensor& x, const std::vector<int>& perm) {
  detail::require_well_formed(x, "transpose");
  View v = transpose_view(x.shape, perm);
  return copy_view(x, std::move(v.shape), std::move(v.strides), v.start);
}

bool transpose_shares(const Shape& shape, const std::vector<int>& perm) {
  const View v = transpose_view(shape, perm);
  return is_contiguous(v.shape, v.strides);
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
        throw RuntimeError(
            fmt::format("concat: axis {} has size {} in part 0 but {} in part {}", d, first.shape[d], p.shape[d], k));
    shape[axis] += p.shape[axis];
  }
  // Row-major: for each index before `axis`, each part contributes one
  // contiguous block of shape[axis] × (the sizes after `axis`) elements.
  const int64_t outer = product(shape, 0, static_cast<size_t>(axis));
  const int64_t inner = product(shape, static_cast<size_t>(axis) + 1, shape.size());
  bool narrow = true;
  for (const Tensor* p : parts) narrow = narrow && detail::copies_narrow({p});
  // Each part's elements as `view` gives them (f32, f64 or integers) into `to`.
  auto blocks = [&](auto view, auto* to) {
    int64_t at = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (const Tensor* p : parts) {
        const int64_t block = p->shape[axis] * inner;
        std::copy_n(view(*p) + o * block, block, to + at);
        at += block;
      }
  };
  if (narrow) {
    Tensor out;
    out.shape = std::move(shape);
    out.reals = RealStorage::narrow_for_overwrite(static_cast<size_t>(element_count(out.shape)));
    blocks([](const Tensor& p) { return p.reals.narrow(); }, out.reals.narrow_for_writing());
    return out;
  }
  Tensor out = like(first.kind, std::move(shape));
  if (out.is_real())
    blocks([](const Tensor& p) { return std::as_const(p.reals).data(); }, out.reals.data());
  else
    blocks([](const Tensor& p) { return p.ints.data(); }, out.ints.data());
  return out;
}

Tensor slice(const Tensor& x, int axis, int64_t start, int64_t stop, int64_t step) {
  detail::require_well_formed(x, "slice");
  View v = detail::slice_view(x.shape, axis, start, stop, step);
  return copy_view(x, std::move(v.shape), std::move(v.strides), v.start);
}

bool slice_shares(const Shape& shape, int axis, int64_t start, int64_t stop, int64_t step) {
  const View v = detail::slice_view(shape, axis, start, stop, step);
  return is_contiguous(v.shape, v.strides);
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
  auto rows = [&](const auto* from, auto* to) {
    int64_t at = 0;
    for (int64_t p = 0; p < outer; ++p)
      for (int64_t i = 0; i < n; ++i, at += inner) std::copy_n(from + (p * size + ids.ints[i]) * inner, inner, to + at);
  };
  if (detail::copies_narrow({&table})) {
    Tensor out;
    out.shape = std::move(shape);
    out.reals = RealStorage::narrow_for_overwrite(static_cast<size_t>(element_count(out.shape)));
    rows(table.reals.narrow(), out.reals.narrow_for_writing());
    return out;
  }
  Tensor out = like(table.kind, std::move(shape));
  if (out.is_real())
    rows(std::as_const(table.reals).data(), out.reals.data());
  else
    rows(table.ints.data(), out.ints.data());
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
    misuse(op,
           fmt::format("ids have shape {}, x without axis {} {}", shape_string(ids.shape), axis, shape_string(shape)));
  const int64_t size = x.shape[axis];
  for (size_t j = 0; j < ids.ints.size(); ++j)
    if (ids.ints[j] < 0 || ids.ints[j] >= size)
      throw RuntimeError(fmt::format("pick: id {} at {} is outside axis {} of size {}", ids.ints[j],
                                     detail::index_string(static_cast<int64_t>(j), ids.shape), axis, size));
  // r[p, q] = x[p, ids[p, q], q], with x's element at (p * size + id) * inner + q.
  const int64_t outer = product(x.shape, 0, static_cast<size_t>(axis));
  const int64_t inner = product(x.shape, static_cast<size_t>(axis) + 1, x.shape.size());
  auto picked = [&](const auto* from, auto* to) {
    int64_t at = 0;
    for (int64_t p = 0; p < outer; ++p)
      for (int64_t q = 0; q < inner; ++q, ++at) to[at] = from[(p * size + ids.ints[at]) * inner + q];
  };
  if (detail::copies_narrow({&x})) {
    Tensor out;
    out.shape = std::move(shape);
    out.reals = RealStorage::narrow_for_overwrite(static_cast<size_t>(element_count(out.shape)));
    picked(x.reals.narrow(), out.reals.narrow_for_writing());
    return out;
  }
  Tensor out = like(x.kind, std::move(shape));
  if (out.is_real())
    picked(std::as_const(x.reals).data(), out.reals.data());
  else
    picked(x.ints.data(), out.ints.data());
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
