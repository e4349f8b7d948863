#include "quire/export/c_copies.h"

#include <stdexcept>
#include <utility>

namespace quire::exports {

namespace {

constexpr int64_t kOperandUnit = int64_t{1} << 32;

/// A box of the result: [lo[d], hi[d]) on every axis.
struct Box {
  std::vector<int64_t> lo, hi;
};

class Fitter {
 public:
  Fitter(const runtime::Shape& shape, const std::vector<ElementSource>& sources)
      : strides_(runtime::contiguous_strides(shape)), sources_(sources) {}

  bool fit(const Box& box, std::vector<CopyBox>& out) {
    if (!box.lo.empty())
      for (size_t d = 0; d < box.lo.size(); ++d)
        if (box.lo[d] >= box.hi[d]) return true;  // empty
    const int only = operand_of(box);
    if (only == kZero) return true;
    if (only != kMixed)
      if (std::optional<CopyBox> c = affine(box, only)) {
        out.push_back(std::move(*c));
        return true;
      }
    // Split along the first axis whose slabs differ in where they come
    // from; when none does, along the longest axis, slab by slab (a box of
    // one element always fits).
    const size_t rank = box.lo.size();
    if (rank == 0) return false;
    for (size_t d = 0; d < rank; ++d) {
      std::vector<int> slabs;
      for (int64_t i = box.lo[d]; i < box.hi[d]; ++i) slabs.push_back(operand_of(slab(box, d, i)));
      bool differ = false;
      for (int s : slabs) differ = differ || s != slabs.front();
      if (!differ) continue;
      int64_t start = box.lo[d];
      for (int64_t i = box.lo[d] + 1; i <= box.hi[d]; ++i)
        if (i == box.hi[d] ||
            slabs[static_cast<size_t>(i - box.lo[d])] != slabs[static_cast<size_t>(start - box.lo[d])] ||
            slabs[static_cast<size_t>(start - box.lo[d])] == kMixed) {
          Box run = box;
          run.lo[d] = start;
          run.hi[d] = i;
          if (!fit(run, out)) return false;
          start = i;
        }
      return true;
    }
    size_t longest = 0;
    for (size_t d = 1; d < rank; ++d)
      if (box.hi[d] - box.lo[d] > box.hi[longest] - box.lo[longest]) longest = d;
    if (box.hi[longest] - box.lo[longest] <= 1) return false;  // one element that is no copy
    for (int64_t i = box.lo[longest]; i < box.hi[longest]; ++i)
      if (!fit(slab(box, longest, i), out)) return false;
    return true;
  }

 private:
  static constexpr int kZero = -1;
  static constexpr int kMixed = -2;

  static Box slab(const Box& box, size_t d, int64_t i) {
    Box s = box;
    s.lo[d] = i;
    s.hi[d] = i + 1;
    return s;
  }

  template <class F>
  void each(const Box& box, F&& f) const {
    const size_t rank = box.lo.size();
    std::vector<int64_t> at = box.lo;
    for (;;) {
      int64_t flat = 0;
      for (size_t d = 0; d < rank; ++d) flat += at[d] * strides_[d];
      if (!f(flat, at)) return;
      size_t d = rank;
      while (d > 0) {
        --d;
        if (++at[d] < box.hi[d]) break;
        at[d] = box.lo[d];
        if (d == 0) return;
      }
      if (rank == 0) return;
    }
  }

  /// The one operand the box reads (kZero: none), or kMixed.
  int operand_of(const Box& box) const {
    int found = kZero;
    bool first = true;
    each(box, [&](int64_t flat, const std::vector<int64_t>&) {
      const int k = sources_[static_cast<size_t>(flat)].operand;
      if (first) {
        found = k;
        first = false;
        return true;
      }
      if (k != found) {
        found = kMixed;
        return false;
      }
      return true;
    });
    return found;
  }

  std::optional<CopyBox> affine(const Box& box, int operand) const {
    const size_t rank = box.lo.size();
    CopyBox c;
    c.operand = operand;
    c.dst_at = 0;
    for (size_t d = 0; d < rank; ++d) c.dst_at += box.lo[d] * strides_[d];
    c.src_at = sources_[static_cast<size_t>(c.dst_at)].index;
    c.dst_strides = strides_;
    c.src_strides.assign(rank, 0);
    for (size_t d = 0; d < rank; ++d) {
      c.extents.push_back(box.hi[d] - box.lo[d]);
      if (box.hi[d] - box.lo[d] > 1)
        c.src_strides[d] = sources_[static_cast<size_t>(c.dst_at + strides_[d])].index - c.src_at;
    }
    bool ok = true;
    each(box, [&](int64_t flat, const std::vector<int64_t>& at) {
      int64_t want = c.src_at;
      for (size_t d = 0; d < rank; ++d) want += (at[d] - box.lo[d]) * c.src_strides[d];
      const ElementSource& s = sources_[static_cast<size_t>(flat)];
      ok = s.operand == operand && s.index == want;
      return ok;
    });
    if (!ok) return std::nullopt;
    return c;
  }

  std::vector<int64_t> strides_;
  const std::vector<ElementSource>& sources_;
};

}  // namespace

runtime::Tensor position_tensor(int operand, const runtime::Shape& shape, runtime::ElemKind kind) {
  const int64_t n = runtime::element_count(shape);
  if (operand < 0 || operand >= (1 << 20) || n >= kOperandUnit)
    throw std::invalid_argument("position_tensor: too many operands or elements");
  runtime::Tensor t =
      kind == runtime::ElemKind::Real ? runtime::Tensor::real(shape) : runtime::Tensor::integer(kind, shape);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t code = operand * kOperandUnit + i + 1;
    if (t.is_real())
      t.reals[static_cast<size_t>(i)] = static_cast<double>(code);
    else
      t.ints[static_cast<size_t>(i)] = code;
  }
  return t;
}

std::vector<ElementSource> element_sources(const runtime::Tensor& result) {
  const size_t n = static_cast<size_t>(result.size());
  std::vector<ElementSource> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t code = result.is_real() ? static_cast<int64_t>(result.reals[i]) : result.ints[i];
    if (code <= 0) continue;
    out[i].operand = static_cast<int>((code - 1) / kOperandUnit);
    out[i].index = (code - 1) % kOperandUnit;
  }
  return out;
}

std::optional<std::vector<CopyBox>> fit_boxes(const runtime::Shape& shape, const std::vector<ElementSource>& sources) {
  if (static_cast<int64_t>(sources.size()) != runtime::element_count(shape)) return std::nullopt;
  std::vector<CopyBox> out;
  if (sources.empty()) return out;
  Fitter fitter(shape, sources);
  if (!fitter.fit(Box{std::vector<int64_t>(shape.size(), 0), shape}, out)) return std::nullopt;
  return out;
}

}  // namespace quire::exports
